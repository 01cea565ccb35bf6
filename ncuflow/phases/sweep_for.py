"""A sweep file for a kernel cell at the shapes that carried a serving log's time.

The stretch that carried the time is the steady stretch with the most Decode lines of any run
(a Decode line stands for ``decode_log_interval`` decode steps, so the most lines is the most
kernel launches); where no run has one, the stretch of any kind with the most. Each cell
parameter that declares a serving shape in the cell's contract (``CellShapes.rows``, built from
``ParamSpec.serves``) takes it: the decode batch and the KV length as an axis of their p10,
median and p90 over that stretch, a stated server setting as a fixed value where the
parameter's choices hold it. ``--vary`` makes any parameter an axis of the values given.
Shapes the log states that no parameter takes, and parameters whose shape the log does not
state, are named (in the file's comments and in ``SweepDraft``). Plain text out: the caller
checks it with the sweep schema and writes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ncuflow.phases.model.stats import Distribution
from ncuflow.phases.shapes import FileShapes, RunShapes, StretchShapes
from ncuflow.serving import ServingShape

HEADER = "# ncuflow sweep file written by `ncuflow phases --sweep-for`"
REPLICAS = 3
MEASURED = (ServingShape.DECODE_BATCH, ServingShape.KV_LEN, ServingShape.PREFILL_CHUNK)


@dataclass(frozen=True)
class CellShapes:
    """What the sweep needs of a cell's contract: its parameters, the serving shape each one
    declares (``rows``: parameter -> shape) and each parameter's choices."""

    cell: str
    params: tuple[str, ...]
    rows: tuple[tuple[str, ServingShape], ...]
    choices: Mapping[str, tuple[Any, ...] | None]


@dataclass(frozen=True)
class SweepDraft:
    text: str
    source: str  # the run and stretch the shapes came from, with its first line
    taken: tuple[str, ...]  # "batch <- decode_batch", ...
    not_taken: tuple[str, ...]  # shapes the cell cannot take, and parameters the log leaves at default


def carrying_stretch(shapes: FileShapes) -> tuple[RunShapes, StretchShapes] | None:
    """The stretch with the most Decode lines: steady ones first."""
    candidates = [(run, s) for run in shapes.runs for s in run.stretches if s.decode_lines]
    steady = [(run, s) for run, s in candidates if s.name == "steady"]
    pool = steady or candidates or [(run, run.run) for run in shapes.runs if run.run.decode_lines]
    return max(pool, key=lambda pair: pair[1].decode_lines, default=None)


def _spread(dist: Distribution | None) -> list[int] | None:
    if dist is None:
        return None
    return sorted({max(1, round(v)) for v in (dist.p10, dist.median, dist.p90)})


def _typed(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: quotes, backslashes and non-ASCII escaped
    return repr(value)


@dataclass
class _Plan:
    fixed: dict[str, Any]
    axes: dict[str, list[Any]]
    taken: list[str]
    not_taken: list[str]


@dataclass(frozen=True)
class _Source:
    """Where the measured shapes come from: decode shapes from the carrying stretch, prefill
    tokens from its whole run (a steady stretch admits nothing)."""

    run: RunShapes
    stretch: StretchShapes

    def measured(self, shape: ServingShape) -> list[int] | None:
        return {ServingShape.DECODE_BATCH: _spread(self.stretch.decode_batch),
                ServingShape.KV_LEN: _spread(self.stretch.kv_len),
                ServingShape.PREFILL_CHUNK: _spread(self.run.run.prefill_chunk)}.get(shape)


def _map_rows(cell: CellShapes, shapes: FileShapes, source: _Source, plan: _Plan) -> None:
    for param, shape in cell.rows:
        if shape in MEASURED:
            values = source.measured(shape)
            if values is None:
                plan.not_taken.append(f"{param} ({shape.value}): not in the log; stays at its default")
                continue
            plan.axes[param] = values
            plan.taken.append(f"{param} <- {shape.value} p10/median/p90 {values}")
            continue
        setting = shapes.setting(shape)
        if setting is None or setting.value is None:
            plan.not_taken.append(f"{param} ({shape.value}): not in the log; stays at its default "
                                  f"(state it with --setting {shape.value}=VALUE or --vary {param}=...)")
            continue
        value, choices = _typed(setting.value), cell.choices.get(param)
        if choices is not None and value not in choices:
            plan.not_taken.append(f"{param} ({shape.value}): the server's {setting.value!r} is not among "
                                  f"the cell's choices {list(choices)}; stays at its default")
            continue
        plan.fixed[param] = value
        plan.taken.append(f"{param} <- {shape.value} {setting.value} ({setting.source})")


def _unserved(cell: CellShapes, shapes: FileShapes, source: _Source) -> list[str]:
    """Shapes the log states that no parameter of the cell takes."""
    declared = {shape for _, shape in cell.rows}
    named = [f"{shape.value} {values}" for shape in MEASURED
             if shape not in declared and (values := source.measured(shape)) is not None]
    named += [f"{s.shape.value} {s.value}" for s in shapes.settings if s.value is not None and s.shape not in declared]
    return [f"{cell.cell} cannot take {what}" for what in named]


def draft_sweep(
    shapes: FileShapes, cell: CellShapes, vary: Sequence[tuple[str, Sequence[str]]], log_name: str
) -> SweepDraft | None:
    """The sweep file's text, or None where no run of the log decoded."""
    found = carrying_stretch(shapes)
    if found is None:
        return None
    run, stretch = found
    plan = _Plan({}, {}, [], [])
    source = _Source(run, stretch)
    _map_rows(cell, shapes, source, plan)
    for param, values in vary:
        plan.fixed.pop(param, None)
        plan.taken = [t for t in plan.taken if not t.startswith(f"{param} <-")]
        plan.not_taken = [t for t in plan.not_taken if not t.startswith(f"{param} (")]
        plan.axes[param] = [_typed(v) for v in values]
        plan.taken.append(f"{param} <- --vary {', '.join(values)}")
    plan.not_taken.extend(_unserved(cell, shapes, source))
    where = f"{run.run_label}, {stretch.name} stretch, {stretch.decode_lines} {shapes.stats_line}s from line {stretch.first_line}"
    return SweepDraft(_text(cell.cell, log_name, where, plan), where, tuple(plan.taken), tuple(plan.not_taken))


def _text(cell: str, log_name: str, where: str, plan: _Plan) -> str:
    comments = [HEADER, f"# from {json.dumps(log_name)}: {where}",
                *(f"# taken: {t}" for t in plan.taken), *(f"# not taken: {t}" for t in plan.not_taken)]
    lines = [*comments, f"name = {_toml(cell + '_served')}", f"cell = {_toml(cell)}", f"replicas = {REPLICAS}", ""]
    lines += ["[fixed]", *(f"{k} = {_toml(v)}" for k, v in plan.fixed.items()), ""]
    lines += ["[axes]", *(f"{k} = {_toml(v)}" for k, v in plan.axes.items())]
    return "\n".join(_printable(line) for line in lines) + "\n"


def _printable(line: str) -> str:
    """A line TOML accepts: no control characters (a comment may hold none either)."""
    return "".join(c if c.isprintable() else "?" for c in line)
