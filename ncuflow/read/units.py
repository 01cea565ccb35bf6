"""Each raw metric's unit, as ``ncu_report`` gives it: the one column the file does not hold.

A report stores metric names and values, not units: ``ncu_report`` takes a metric's unit
from NVIDIA's metric metadata (Perfworks, and ncu's own for ``launch__``/``device__``/
``profiler__`` metrics), and for a derived metric from the report's section definitions.
So the ``unit`` column of ``export --metrics-long`` comes from ``ncu_report`` itself,
whichever reader read the values: the report is opened with ``ncu_report`` for that column
only, once, while its launches are read. Where ``ncu_report`` cannot be imported, the
column is null and a warning says why.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from ncuflow.errors import ReportError

if TYPE_CHECKING:
    from ncuflow.read.ncureport import NcuReportAction


class UnitsUnavailableWarning(UserWarning):
    """``export --metrics-long`` without ``ncu_report``: the unit column is null."""


class ReportUnits:
    """The units of one report's metrics, action by action, read lazily and in order."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._actions: dict[tuple[int, int], NcuReportAction] | None = None

    def of(self, range_index: int, action_index: int) -> dict[str, str] | None:
        """The units of the action's metrics (name -> unit); None where they cannot be had."""
        if self._actions is None:
            self._actions = self._open()
        action = self._actions.get((range_index, action_index))
        return None if action is None else action.units()

    def _open(self) -> dict[tuple[int, int], NcuReportAction]:
        from ncuflow.read.ncureport import iter_report_actions
        from ncuflow.read.reportfile import import_ncu_report

        try:
            import_ncu_report()
        except ReportError as missing:
            warnings.warn(UnitsUnavailableWarning(
                f"The unit column of the long metrics table is left empty: {missing.what} Units are not "
                "stored in a report; ncuflow takes them from ncu_report (`pip install ncu-report`)."),
                stacklevel=4)
            return {}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the launches' own reading reports any damage, once
                return {(r, a): action for r, a, action in iter_report_actions(self._path)}
        except ReportError as refused:
            warnings.warn(UnitsUnavailableWarning(
                f"The units of {self._path} are left empty: ncu_report, which ncuflow takes units from, "
                f"cannot read it ({refused.what})"), stacklevel=4)
            return {}
