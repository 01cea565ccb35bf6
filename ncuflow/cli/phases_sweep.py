"""``phases --sweep-for CELL -o sweep.toml``: the sweep file for a cell at a log's served shapes.

The cell's contract says which serving shape each parameter takes (``ParamSpec.serves``);
``ncuflow.phases.sweep_for`` drafts the file from that and the log's shapes; here the draft is
checked with the sweep schema (the same check ``ncuflow sweep --dry-run`` makes) before it is
written, atomically and never over a file ncuflow did not write.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path

from ncuflow.cells.contract import CellDefinition
from ncuflow.cells.source import CellSource
from ncuflow.cli.phases_study import StudyOptions
from ncuflow.errors import UsageError
from ncuflow.files import atomic_write_text, guard_output, text_recogniser
from ncuflow.files.safe_text import safe_text
from ncuflow.phases.report import PhasesReport
from ncuflow.phases.sweep_for import HEADER, CellShapes, SweepDraft, draft_sweep
from ncuflow.profile.sweep import parse_sweep


def cell_shapes(definition: CellDefinition) -> CellShapes:
    """What the sweep drafter needs of a cell's contract."""
    return CellShapes(
        cell=definition.name,
        params=tuple(p.name for p in definition.params),
        rows=definition.serving_rows(),
        choices={p.name: p.choices for p in definition.params},
    )


def _checked_vary(cell: CellShapes, study: StudyOptions) -> None:
    for name, _ in study.vary:
        if name not in cell.params:
            raise UsageError(
                f"--vary names {name!r}, which is no parameter of cell {cell.cell!r}.",
                f"Its parameters: {', '.join(cell.params)}.",
                f"Vary one of them, e.g. --vary {cell.params[0]}=...",
            )


def sweep_cell(study: StudyOptions, inputs: Sequence[Path]) -> CellShapes | None:
    """Before any log is read: the cell --sweep-for names, its --vary checked, the -o target
    checked (a refusal costs no analysis); None without --sweep-for."""
    if study.sweep_cell is None or study.sweep_path is None:
        return None
    cell = cell_shapes(CellSource(study.cells_dir).definition(study.sweep_cell))
    _checked_vary(cell, study)
    _guard(study.sweep_path, inputs)
    return cell


def _guard(path: Path, inputs: Sequence[Path]) -> None:
    guard_output(path, kind="a sweep file", recognise=text_recogniser(HEADER), inputs=inputs, option="-o")


def write_sweep(
    report: PhasesReport, study: StudyOptions, cell: CellShapes, inputs: Sequence[Path]
) -> tuple[Path, SweepDraft, int]:
    """Draft, check and write the sweep file; (path, draft, points)."""
    assert study.sweep_path is not None
    source = CellSource(study.cells_dir)
    logs = [f for f in report.files if f.shapes is not None]
    if len(report.files) != 1 or not logs or logs[0].shapes is None:
        raise UsageError(
            "--sweep-for takes the shapes of one server log.",
            f"It was given {len(report.files)} input(s), {len(logs)} of them server logs.",
            "Run phases on the one log whose shapes the sweep should profile.",
        )
    draft = draft_sweep(logs[0].shapes, cell, study.vary, Path(logs[0].path).name)
    if draft is None:
        raise UsageError(
            f"No run of {safe_text(logs[0].path, limit=None)} decoded, so there is no shape to sweep.",
            "The sweep is written at the decode batch and KV length of the log's steady stretch.",
            "Give a log with Decode (or statistics) lines.",
        )
    try:
        data = tomllib.loads(draft.text)
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"The sweep file drafted for {cell.cell} is not valid TOML ({error}).",
                         "A value given with --vary or --setting could not be written as TOML.",
                         "Give plain values (numbers or words).") from None
    plan = parse_sweep(data, source=study.sweep_path, cells=source, text=draft.text)
    _guard(study.sweep_path, inputs)  # again: the path may have changed while the log was read
    atomic_write_text(study.sweep_path, draft.text)
    return study.sweep_path, draft, len(plan.points)


def sweep_lines(path: Path, draft: SweepDraft, points: int) -> list[str]:
    lines = [f"sweep file written to {safe_text(path, limit=None)}: {points} points, from {draft.source}"]
    lines += [f"  taken: {t}" for t in draft.taken] + [f"  not taken: {t}" for t in draft.not_taken]
    return lines
