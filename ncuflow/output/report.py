"""The study report of a profile store on disk: report.md, PNG plots and parquet tables."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncuflow.analyze.study import Analysis
from ncuflow.files import OutputError, atomic_paths, guard_output, png_recogniser
from ncuflow.output.markdown import guard_markdown, report_markdown

# ---------------------------------------------------------------------------
# writing a report folder


@dataclass(frozen=True)
class WrittenReport:
    markdown: Path
    plots: tuple[Path, ...]
    parquet: tuple[Path, ...]


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:80] or "x"


TERMS_PER_PLOT = 16  # cells per utilization bar chart (more would not read at a glance)


def _planned_plots(analysis: Analysis) -> list[tuple[str, str, object]]:
    """(plot key, file name, what to plot) for every plot of the report."""
    planned: list[tuple[str, str, object]] = []
    points = list(analysis.points)
    for index in range(0, len(points), TERMS_PER_PLOT):
        name = "terms.png" if index == 0 else f"terms-{index // TERMS_PER_PLOT + 1}.png"
        key = "terms" if index == 0 else f"terms:{index // TERMS_PER_PLOT + 1}"
        planned.append((key, name, points[index : index + TERMS_PER_PLOT]))
    for param, explained in analysis.sweeps.items():
        for index, ge in enumerate(explained):
            planned.append((f"sweep:{param}:{index}", f"sweep-{_slug(param)}-{index}-{_slug(ge.group.cell)}.png", ge))
    return planned


def plot_count(analysis: Analysis) -> int:
    """How many plots ``write_report`` draws (for a progress bar)."""
    return len(_planned_plots(analysis))


def guard_report_folder(out_dir: Path, inputs: Sequence[Path] = ()) -> None:
    """Refuse a report folder that is one of the inputs (a store or a folder of reports)."""
    out = Path(out_dir).absolute()
    for source in inputs:
        if Path(source).absolute() == out:
            raise OutputError(
                f"Refusing to write the report into {out_dir}: it is also an input of this command.",
                "The report's files would be mixed with the data being read.",
                "Give -o/--output a folder of its own, e.g. out/report.",
            )


def write_report(analysis: Analysis, out_dir: Path, *, with_parquet: bool = True,
                 inputs: Sequence[Path] = (), progress: Callable[[int, Path], None] | None = None) -> WrittenReport:
    """report.md, PNG plots and the numbers as parquet in ``out_dir``, committed together.

    Every file is checked before any is written: none may be an input, and an existing
    one must be an earlier output of the same kind (``files.guard_output``). All are
    written to temporary files first and renamed into place together at the end, so a
    failure (a full disk, a plot that cannot be drawn) leaves the previous report whole.
    ``progress`` is called with (index, plot path) as each plot is drawn.
    """
    from ncuflow.output.export import guard_parquet, write_parquet
    from ncuflow.output.plots import plot_sweep, plot_terms

    out = Path(out_dir)
    guard_report_folder(out, inputs)
    planned = _planned_plots(analysis)
    markdown = out / "report.md"
    guard_markdown(markdown, inputs=inputs, option="-o/--output")
    for _key, name, _what in planned:
        guard_output(out / name, kind="an ncuflow plot", recognise=png_recogniser, inputs=inputs,
                     option="-o/--output")
    tables = _tables(analysis) if with_parquet else {}
    for table in tables:
        guard_parquet(out / f"{table}.parquet", table=table, inputs=inputs, option="-o/--output")
    plot_paths = [out / name for _key, name, _what in planned]
    table_paths = [out / f"{table}.parquet" for table in tables]
    with atomic_paths([*plot_paths, *table_paths, markdown]) as temporaries:
        plots: dict[str, str] = {}
        for (key, name, what), temporary in zip(planned, temporaries, strict=False):
            if key.startswith("terms"):
                plot_terms(what, temporary, threshold=analysis.threshold, every=analysis.points)  # type: ignore[arg-type]
            else:
                plot_sweep(what, temporary, threshold=analysis.threshold)  # type: ignore[arg-type]
            plots[key] = name
            if progress is not None:
                progress(len(plots) - 1, out / name)
        for (table, frame), temporary in zip(tables.items(), temporaries[len(plot_paths):], strict=False):
            write_parquet(frame, temporary, table=table)
        Path(temporaries[-1]).write_text(report_markdown(analysis, plots), encoding="utf-8")
    return WrittenReport(markdown, tuple(plot_paths), tuple(table_paths))


def _tables(analysis: Analysis) -> dict[str, Any]:
    """The frames behind the report: stability always, explain when a parameter was swept."""
    import polars as pl

    from ncuflow.analyze.explain import explain_rows
    from ncuflow.analyze.stability import stability_frame

    groups = list(analysis.stability) or [s.stability for s in analysis.points]
    frames: dict[str, Any] = {"stability": stability_frame(groups)}
    rows = explain_rows([ge for groups in analysis.sweeps.values() for ge in groups])
    if rows:
        frames["explain"] = pl.DataFrame(rows, infer_schema_length=None)
    return frames

