"""The source view (``ncuflow source``) as rich tables and as JSON records (no polars here).

Per launch: its top instructions by warp samples (samples, share of the launch's, the stall
reasons with their share of the instruction's samples, executed instructions, excess global
sectors, the SASS and file:line), its top instructions by excess global sectors, and its top
source lines. Every string of the report (kernel names, SASS, file names) is shown
through ``safe_text``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from ncuflow.analyze.hotspots import (
    Instruction,
    LaunchHotspots,
    ReportHotspots,
    SourceLine,
    excess_in,
    reasons_in,
    samples_in,
)
from ncuflow.files.safe_text import safe_text
from ncuflow.read.metric_lists import Number
from ncuflow.read.source_counters import EXECUTED, SECTION_LINE

_REASONS_SHOWN = 3
_SASS_CHARS = 48


def _count(value: Number | None) -> str:
    if value is None:
        return "—"
    return f"{value:,}" if isinstance(value, int) or float(value).is_integer() else f"{value:,.2f}"


def _share(part: Number | None, whole: Number | None) -> str:
    return "—" if part is None or not whole else f"{100 * part / whole:.1f}"


def reasons_text(counters: Mapping[str, Number]) -> str:
    """The top stall reasons and their share of the samples: 'long_scoreboard 93%, not_selected 5%'."""
    samples = samples_in(counters) or 0
    shown = reasons_in(counters)[:_REASONS_SHOWN]
    return ", ".join(f"{reason} {100 * value / samples:.0f}%" if samples else reason for reason, value in shown) or "—"


def _where(file: str | None, line: int | None) -> str:
    return "—" if file is None else f"{PurePath(file).name}:{line}"


def _instruction_row(launch: LaunchHotspots, rank: int, instruction: Instruction) -> list[str]:
    counters = instruction.counters
    place = launch.places.get(instruction.address)
    samples = samples_in(counters) if launch.total_samples is not None else None
    return [
        str(rank), f"{instruction.address:#x}", _count(samples), _share(samples, launch.total_samples),
        safe_text(reasons_text(counters), "rich"), _count(counters.get(EXECUTED)),
        _count(excess_in(counters, launch.pair)),
        safe_text(place.sass, "rich", limit=_SASS_CHARS) if place and place.sass else "—",
        safe_text(_where(place.file, place.line), "rich") if place else "—",
    ]


def _line_row(launch: LaunchHotspots, rank: int, line: SourceLine) -> list[str]:
    samples = samples_in(line.counters) if launch.total_samples is not None else None
    return [str(rank), safe_text(_where(line.file, line.line), "rich"), _count(samples),
            _share(samples, launch.total_samples), safe_text(reasons_text(line.counters), "rich"),
            _count(line.counters.get(EXECUTED)), _count(excess_in(line.counters, launch.pair)),
            str(line.instructions)]


_INSTRUCTION_COLUMNS = ("#", "address", "samples", "%", "stall reasons", "executed", "excess sectors",
                        "SASS", "file:line")
_LINE_COLUMNS = ("#", "file:line", "samples", "%", "stall reasons", "executed", "excess sectors",
                 "instructions")


def _table(title: str, columns: tuple[str, ...], rows: list[list[str]]) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        left = column in ("SASS", "file:line", "stall reasons", "address")
        table.add_column(column, justify="left" if left else "right", no_wrap=column != "stall reasons")
    for row in rows:
        table.add_row(*row)
    return table


def _heading(launch: LaunchHotspots) -> str:
    sampled = ("not sampled" if launch.total_samples is None
               else f"{_count(launch.total_samples)} warp samples")
    excess = ("" if launch.total_excess is None
              else f", {_count(launch.total_excess)} excess global sectors")
    return (f"[bold]#{launch.action_index}[/bold] {safe_text(launch.kernel.function, 'rich')}: "
            f"{sampled}{excess}")


def print_launch(launch: LaunchHotspots, console: Any) -> None:
    console.print(_heading(launch), highlight=False)
    if launch.by_samples:
        rows = [_instruction_row(launch, n, i) for n, i in enumerate(launch.by_samples, 1)]
        console.print(_table("top instructions by warp samples", _INSTRUCTION_COLUMNS, rows))
    if launch.by_excess:
        rows = [_instruction_row(launch, n, i) for n, i in enumerate(launch.by_excess, 1)]
        console.print(_table("top instructions by excess global sectors", _INSTRUCTION_COLUMNS, rows))
    if launch.lines:
        by = "warp samples" if launch.sampled else "executed instructions"
        rows = [_line_row(launch, n, x) for n, x in enumerate(launch.lines, 1)]
        console.print(_table(f"top source lines by {by}", _LINE_COLUMNS, rows))
    if launch.note:
        console.print(f"   [yellow]note[/yellow] {safe_text(launch.note, 'rich', limit=None)}", highlight=False,
                      soft_wrap=True)


def without_line(report: ReportHotspots) -> str:
    """The one line for a report none of whose selected launches holds source counters."""
    launches = "its launch holds no" if report.selected == 1 else f"none of its {report.selected} launches holds"
    return f"{report.report}: {launches} source counters (per-instruction metrics); {SECTION_LINE}."


def print_report(report: ReportHotspots, console: Any) -> None:
    if not report.launches:
        console.print(safe_text(without_line(report), "rich", limit=None), highlight=False, soft_wrap=True)
        return
    console.print(f"[bold]{safe_text(report.report, 'rich')}[/bold]", highlight=False)
    for launch in report.launches:
        print_launch(launch, console)
    if report.without:
        plural = report.without > 1
        console.print(f"   {report.without} selected launch{'es hold' if plural else ' holds'} no source counters",
                      highlight=False)


# --- JSON


def _place_record(launch: LaunchHotspots, address: int) -> dict[str, Any]:
    place = launch.places.get(address)
    if place is None:
        return {"sass": None, "file": None, "line": None}
    return {"sass": place.sass or None, "file": place.file, "line": place.line}


def instruction_record(launch: LaunchHotspots, instruction: Instruction) -> dict[str, Any]:
    counters = instruction.counters
    return {"address": instruction.address, "samples": samples_in(counters),
            "reasons": dict(reasons_in(counters)), "executed": counters.get(EXECUTED),
            "excess_sectors": excess_in(counters, launch.pair), **_place_record(launch, instruction.address),
            "counters": dict(counters)}


def line_record(launch: LaunchHotspots, line: SourceLine) -> dict[str, Any]:
    counters = line.counters
    return {"file": line.file, "line": line.line, "samples": samples_in(counters),
            "reasons": dict(reasons_in(counters)), "executed": counters.get(EXECUTED),
            "excess_sectors": excess_in(counters, launch.pair), "instructions": line.instructions,
            "counters": dict(counters)}


def launch_record(launch: LaunchHotspots) -> dict[str, Any]:
    """One launch as ``ncuflow source --json`` prints it."""
    return {
        "report": launch.report, "range": launch.range_index, "action": launch.action_index,
        "kernel": launch.kernel.function, "total_samples": launch.total_samples,
        "total_excess_sectors": launch.total_excess,
        "sector_counters": [launch.pair.theoretical, launch.pair.ideal] if launch.pair else None,
        "by_samples": [instruction_record(launch, i) for i in launch.by_samples],
        "by_excess": [instruction_record(launch, i) for i in launch.by_excess],
        "lines": [line_record(launch, x) for x in launch.lines],
        "note": launch.note,
    }
