"""Every action of a report as NVIDIA's ``ncu_report`` module reads it: the walk the checks
against NVIDIA (``check_against_nvidia.py``, ``check_findings.py``,
``check_source_against_nvidia.py``) share to pair ncuflow's launches with NVIDIA's actions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ncuflow.read.reportfile import import_ncu_report


def nvidia_actions(path: Path) -> Iterator[tuple[tuple[int, int], Any]]:
    """((range, action), IAction) of every action of the report, damaged ones included, through ncu_report."""
    context = import_ncu_report().load_report(str(path))
    for range_index in range(context.num_ranges()):
        report_range = context.range_by_idx(range_index)
        for action_index in range(report_range.num_actions()):
            yield (range_index, action_index), report_range.action_by_idx(action_index)
