"""The text of a launch's instructions: SASS and source ``file:line``, through ``ncu_report``.

A report holds each launch's cubin (``SourceData.Binary``); its SASS text is the cubin
disassembled, and its ``file:line`` the cubin's line table (where the program was compiled
with ``-lineinfo``). ncuflow has no disassembler and its read side runs no program, so both
come from NVIDIA's ``ncu_report`` module (a dependency of ncuflow): ``IAction.sass_by_pc`` and
``source_info(pc)``. A report read by ncuflow's own reader is opened with ``ncu_report`` for
this alone, once, and asked only about the addresses the source view shows or sums per line.

The PTX is not shown: ``IAction.ptx_by_pc`` (ncu_report 2026.3) gives an address the PTX of
another launch's code depending on which actions were opened before it (on the corpus's
SkeletonSkelettron report, 24 of its 31 launches differ between two orders of opening), where
``sass_by_pc`` and ``source_info`` give the same in every order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncuflow.errors import ReportError

Location = tuple[str, int]


@dataclass(frozen=True)
class Place:
    """An instruction as the report's cubin says it: its SASS, and file:line with line info."""

    sass: str
    file: str | None
    line: int | None


# What ``sass_by_pc`` answers for an instruction it cannot disassemble (every address of the
# public V100 report kulnaman/lammps output.ncu-rep, ncu 2023.3): no SASS text, never shown as one.
UNDISASSEMBLED = "???"


def _text(found: Any) -> str:
    text = found.strip() if isinstance(found, str) else ""
    return "" if text == UNDISASSEMBLED else text


class LaunchText:
    """One launch's instructions through its ``IAction``."""

    def __init__(self, action: Any) -> None:
        self._action = action

    def location(self, address: int) -> Location | None:
        """The source file and line of the instruction at ``address``; None without line info."""
        try:
            info = self._action.source_info(address)
        except Exception:  # an address outside the cubin, or no cubin
            return None
        if info is None:
            return None
        file, line = info.file_name(), info.line()
        return (file, int(line)) if file and isinstance(line, int) and line > 0 else None

    def place(self, address: int) -> Place:
        try:
            sass = _text(self._action.sass_by_pc(address))
        except Exception:  # an address outside the cubin, or no cubin
            sass = ""
        location = self.location(address)
        return Place(sass, *(location if location else (None, None)))


class ReportText:
    """A report opened with ``ncu_report`` for its instructions' text (``open_text``)."""

    def __init__(self, context: Any) -> None:
        self._context = context

    def launch(self, range_index: int, action_index: int) -> LaunchText | None:
        context = self._context
        if not 0 <= range_index < context.num_ranges():
            return None
        report_range = context.range_by_idx(range_index)
        if not 0 <= action_index < report_range.num_actions():
            return None
        return LaunchText(report_range.action_by_idx(action_index))


def open_text(path: Path) -> tuple[ReportText | None, str | None]:
    """The report through ``ncu_report``, or None and why it is not opened (one clause). A damaged
    file (``damage``) is not opened: ``ncu_report`` aborts its process on some (a length pointing
    past the file), which would end the command with no word said."""
    from ncuflow.read.reportfile import load_context

    problem = damage(path)
    if problem is not None:
        return None, (f"SASS text and source lines are not shown: {problem}, and ncu_report is not handed "
                      "a damaged file (it can abort on one)")
    try:
        return ReportText(load_context(path)), None
    except ReportError as error:
        return None, f"SASS text and source lines are not shown: {error.what.rstrip('.')}"


def refuse_damaged_for_ncu_report(path: Path) -> None:
    """Where reports are read through ``ncu_report`` in this process (``--reader ncu_report``), a
    file whose framing is not whole is a ``ReportError`` before ``ncu_report`` sees it."""
    from ncuflow.read.readers import reads_the_file

    if reads_the_file():
        return
    problem = damage(path)
    if problem is not None:
        raise ReportError(
            f"{path} is not read through ncu_report: {problem}.",
            "ncu_report can abort its whole process on a damaged file, and the source view reads in this process.",
            "Read it with ncuflow's own reader (leave out --reader ncu_report), which reads the launches before "
            "the damage, or copy the complete file.",
        )


def damage(path: Path) -> str | None:
    """Where the report's framing or its entries break off (``ncuflow.read.reportformat`` walks
    them without parsing a result); None for a whole file and for a layout that walk does not
    know (``ncu_report`` reads those)."""
    from ncuflow.read.reportformat import UnknownLayout, open_report
    from ncuflow.read.schema import messages

    try:
        with open_report(path, messages()) as report:
            return report.damage
    except UnknownLayout:
        return None
    except ReportError as error:
        return error.what.rstrip(".")
