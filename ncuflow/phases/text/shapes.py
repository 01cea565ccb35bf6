"""The short text block of the shapes a log's runs served (``ncuflow.phases.shapes``)."""

from __future__ import annotations

from collections.abc import Collection

from ncuflow.phases.model.stats import Distribution
from ncuflow.phases.shapes import FileShapes, RunShapes, StretchShapes
from ncuflow.phases.study import FileStudy

MAX_ROWS = 12  # the rest is in --json
COLUMNS = ["run", "stretch", "{lines}", "batch p10/med/p90 (max)", "KV len p10/med/p90",
           "prefill tokens/batch med (max)", "from line"]  # {lines}: the format's word for its lines


def _spread(dist: Distribution | None, with_max: bool = False) -> str:
    if dist is None:
        return "—"
    text = f"{dist.p10:.0f}/{dist.median:.0f}/{dist.p90:.0f}"
    return text + (f" ({dist.maximum:.0f})" if with_max else "")


def _chunk(dist: Distribution | None) -> str:
    return "—" if dist is None else f"{dist.median:.0f} ({dist.maximum:.0f})"


def _row(run: RunShapes, shapes: StretchShapes) -> list[str]:
    name = shapes.name if shapes.segment is None else f"{shapes.name} (seg {shapes.segment})"
    return [run.run_label, name, str(shapes.decode_lines), _spread(shapes.decode_batch, True),
            _spread(shapes.kv_len), _chunk(shapes.prefill_chunk),
            str(shapes.first_line) if shapes.first_line is not None else "—"]


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["    " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def shape_lines(shapes: FileShapes | None, shown: Collection[str]) -> list[str]:
    """The block for the runs shown (by label): a row per run and per stretch, then the settings."""
    if shapes is None:
        return []
    rows = [_row(run, s) for run in shapes.runs if run.run_label in shown for s in (run.run, *run.stretches)]
    out = [f"  shapes served ({shapes.line_meaning}; KV length: {shapes.kv_len_source}):"]
    if rows:
        header = [c.format(lines=f"{shapes.stats_line}s") for c in COLUMNS]
        out.extend(_table([header, *rows[:MAX_ROWS]]))
        if len(rows) > MAX_ROWS:
            out.append(f"    … {len(rows) - MAX_ROWS} more rows in --json")
    stated = [f"{s.shape.value}={s.value} ({f'line {s.line}' if s.line else s.source})"
              for s in shapes.settings if s.value is not None]
    missing = [s.shape.value for s in shapes.settings if s.value is None]
    out.append("    server settings: " + ("; ".join(stated) if stated else "none stated"))
    if missing:
        out.append(f"    not in the log: {', '.join(missing)} (state one with --setting NAME=VALUE)")
    return out


def study_lines(study: FileStudy | None, shown: Collection[str]) -> list[str]:
    """The shapes block, then the harness check's line where the client's result is known."""
    if study is None:
        return []
    harness = [f"  {study.harness.line()}"] if study.harness is not None else []
    return harness + shape_lines(study.shapes, shown)
