"""Nsight Compute reports -> ``Launch`` records, one per action of every range.

Whichever reader reads the file (``ncuflow.read.readers``: ncuflow's own reader of the
documented format by default, ``ncu_report`` as the reference), an action is read the
same way here: only the raw metrics the canonical fields name are looked up (through the
alias chains of ``ncuflow.read.metrics``), and nothing of the report is kept once its
``Launch`` has been built. Bad input never yields a silent empty result: a file that is
no report, empty, or cut before its first result is a ``ReportError``; a report cut
mid-way gives its complete actions and a ``DamagedActionWarning``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ncuflow.errors import ReportError
from ncuflow.read.launch import DeviceInfo, KernelName, Launch
from ncuflow.read.metrics import BREAKDOWN_METRICS, FIELDS, UNIT_THROUGHPUT_METRICS
from ncuflow.read.ncureport import (  # re-exported: the ncu_report side's calls
    NcuReportAction,
    iter_report_actions,
    metric_calls,
    metric_number,
    metric_text,
)
from ncuflow.read.options import READ_DEFAULT, ReadOptions
from ncuflow.read.plan import (
    MetricList,
    ReadPlan,
    Unsettled,
    listed_names,
    plan_reading,
    resolve_planned,
)
from ncuflow.read.readers import UnknownLayoutWarning, reads_the_file
from ncuflow.read.reportfile import read_ncu_version
from ncuflow.read.units import ReportUnits

if TYPE_CHECKING:  # findings are read only where asked for (``ReadOptions``)
    from ncuflow.read.findings import RuleResults

__all__ = ["Action", "RawMetric", "count_actions", "iter_launches", "iter_launches_with_metrics",
           "iter_report", "metric_calls", "metric_number", "metric_text",
           "read_launches", "read_ncu_version"]


class PlannedList(Protocol):
    """A metric list as a reader keeps it: where each metric lies, and its plans (``read_plan``)."""

    plans: dict[object, ReadPlan]

    def index_of(self, name: str) -> int | None: ...


class Action(Protocol):
    """One action as a reader gives it (``FileAction``, ``NcuReportAction``): its metrics read by
    name, or by their index in its metric list (through a ``ReadPlan``)."""

    def metric_list(self) -> PlannedList: ...
    def confirm(self, lacking: set[str]) -> None: ...
    def settle(self) -> None: ...
    def number_at(self, position: int) -> float | None: ...
    def stored_non_finite_at(self, position: int) -> bool: ...
    def text_at(self, position: int) -> str | None: ...
    def number(self, name: str) -> float | None: ...
    def stored_non_finite(self, name: str) -> bool: ...
    def text(self, name: str) -> str | None: ...
    def kernel(self) -> KernelName: ...
    def ncu_version(self) -> str | None: ...
    def nvtx(self) -> tuple[str, ...]: ...
    def nvidia_sol(self) -> str | None: ...
    def rule_results(self) -> RuleResults: ...
    def metric_names(self) -> list[str]: ...
    def metric_values(self) -> Iterator[tuple[str, float | int | str | None]]: ...


@dataclass(frozen=True)
class RawMetric:
    """One raw metric of one launch, for the long table."""

    name: str
    value: float | None
    string_value: str | None
    unit: str | None


# ---------------------------------------------------------------------------
# one report -> its actions, with the reader of this process


def iter_report(path: Path) -> Iterator[tuple[int, int, Action]]:
    """(range index, action index, action) for every intact action of the report.

    Read from the file by ncuflow's reader, unless ``--reader ncu_report`` is set, or the
    file's version or layout is one it does not know (then ``ncu_report`` reads it, with an
    ``UnknownLayoutWarning``; without ``ncu_report`` it is a ``ReportError``).
    """
    if not reads_the_file():
        yield from iter_report_actions(path)
        return
    from ncuflow.read.fileaction import iter_file_actions
    from ncuflow.read.reportformat import UnknownLayout

    actions = iter_file_actions(path)
    try:
        first = next(actions, None)  # the whole file is walked before the first action
    except UnknownLayout as unknown:
        yield from _read_with_ncu_report(path, str(unknown))
        return
    if first is not None:
        yield first
        yield from actions


def _read_with_ncu_report(path: Path, unknown: str) -> Iterator[tuple[int, int, Action]]:
    from ncuflow.read.reportfile import import_ncu_report

    try:
        import_ncu_report()
    except ReportError as missing:
        raise ReportError(
            f"{path} is a report ncuflow's reader does not know: {unknown}.",
            "ncuflow reads such a report with NVIDIA's ncu_report module instead, which cannot be imported "
            f"here ({missing.what.rstrip('.')}).",
            "Install it with `pip install ncu-report`, or add the extras/python folder of an Nsight Compute "
            "install to PYTHONPATH.",
        ) from None
    warnings.warn(UnknownLayoutWarning(
        f"{path} is a report ncuflow's reader does not know ({unknown}); it was read with NVIDIA's ncu_report "
        "module instead, as --reader ncu_report reads every report (slower)."), stacklevel=3)
    yield from iter_report_actions(path)


# ---------------------------------------------------------------------------
# one action -> one Launch, through the read plan of its metric list

_DISPLAY_NAME = "device__attribute_display_name"
_DEVICE_NUMBERS = ("device__attribute_compute_capability_major", "device__attribute_compute_capability_minor",
                   "device__attribute_multiprocessor_count")
# What a launch row reads by name besides the fields' chains: the breakdown lists (text), the
# per-unit throughputs that stand in for them, the device.
_READ_BY_NAME = tuple(dict.fromkeys((*BREAKDOWN_METRICS, *UNIT_THROUGHPUT_METRICS, *_DEVICE_NUMBERS, _DISPLAY_NAME)))


class _Allowed:
    """A metric list as a smaller collection would have held it (``classify --as-if``): a metric
    ``allow`` refuses is lacking; the device's name is always there (it is read as text)."""

    def __init__(self, metrics: MetricList, allow: Callable[[str], bool]) -> None:
        self._metrics, self._allow = metrics, allow

    def index_of(self, name: str) -> int | None:
        return self._metrics.index_of(name) if name == _DISPLAY_NAME or self._allow(name) else None


def read_plan(action: Action, allow: Callable[[str], bool] | None = None) -> ReadPlan:
    """The plan of the action's metric list (made once per list and ``allow``)."""
    layout = action.metric_list()
    plan = layout.plans.get(allow)
    if plan is None:
        plan = layout.plans[allow] = plan_reading(layout if allow is None else _Allowed(layout, allow),
                                                  FIELDS, _READ_BY_NAME)
    return plan


def _breakdown(action: Action, plan: ReadPlan, read: Callable[[int], float | None],
               allow: Callable[[str], bool] | None = None) -> dict[str, float]:
    """NVIDIA's per-unit throughput metrics (% of peak) that the model groups into terms.

    The SpeedOfLight section's breakdown lists name them; a report without those lists
    (a `--metrics` collection) contributes whichever known per-unit metrics it holds.
    ``allow`` (``classify --as-if``) keeps only what a smaller collection would have held:
    a breakdown list it allows brings every metric the list names.
    """
    names: list[str] = []
    for list_metric in BREAKDOWN_METRICS:
        position = plan.index(list_metric)  # None where lacking or not allowed
        listing = action.text_at(position) if position is not None else None
        if listing:
            names.extend(listed_names(listing))
    candidates: list[str] | tuple[str, ...] = names or UNIT_THROUGHPUT_METRICS
    if allow is not None:
        listed = set(names)
        extra = [m for m in UNIT_THROUGHPUT_METRICS if m not in listed]
        candidates = [n for n in (*names, *extra) if n in listed or allow(n)]
    values: dict[str, float] = {}
    for name, position in plan.indices_of(tuple(candidates)):
        value = read(position)
        if value is not None:
            values[name] = value
    return values


def _device(action: Action, plan: ReadPlan, read: Callable[[int], float | None]) -> DeviceInfo:
    major, minor, sm_count = (None if position is None else read(position)
                              for position in map(plan.index, _DEVICE_NUMBERS))
    display = plan.index(_DISPLAY_NAME)
    return DeviceInfo(
        name=action.text_at(display) if display is not None else None,
        compute_capability=f"{int(major)}.{int(minor)}" if major is not None and minor is not None else None,
        sm_count=int(sm_count) if sm_count is not None else None,
    )


def build_launch(
    action: Action, *, report: str, range_index: int, action_index: int, ncu_version: str | None,
    with_rules: bool = True, allow: Callable[[str], bool] | None = None, options: ReadOptions = READ_DEFAULT,
) -> Launch:
    """The action's ``Launch``: its fields resolved through the plan of its metric list. An action
    whose own list is not the planned one (``Unsettled``) is settled and read again. ``options``
    says what else is read (NVIDIA's findings)."""
    try:
        return _planned_launch(action, report, range_index, action_index, ncu_version, with_rules, allow, options)
    except Unsettled:
        action.settle()  # its own list from now on: nothing is unsettled again
        return _planned_launch(action, report, range_index, action_index, ncu_version, with_rules, allow, options)


def _planned_launch(action: Action, report: str, range_index: int, action_index: int, ncu_version: str | None,
                    with_rules: bool, allow: Callable[[str], bool] | None, options: ReadOptions) -> Launch:
    plan = read_plan(action, allow)
    not_numbers: set[str] = set()  # counters ncu stored as NaN or infinite: named as such, never "absent"
    names, number_at = plan.names, action.number_at
    seen: dict[int, float | None] = {}

    def read(position: int) -> float | None:  # each metric read once (it may feed several fields)
        if position in seen:
            return seen[position]
        value = seen[position] = number_at(position)
        if value is None and action.stored_non_finite_at(position):
            not_numbers.add(names[position])
        return value

    values, provenance, missing = resolve_planned(plan, read)
    breakdown = _breakdown(action, plan, read, allow)
    device = _device(action, plan, read)
    action.confirm(plan.lacking)  # what the plan took as lacking, this action lacks too (or: Unsettled)
    return Launch(
        report=report,
        range_index=range_index,
        action_index=action_index,
        kernel=action.kernel(),
        nvtx=action.nvtx(),
        device=device,
        ncu_version=ncu_version,
        values=values,
        provenance=provenance,
        missing=tuple(missing),
        breakdown=breakdown,
        nvidia_sol=action.nvidia_sol() if with_rules else None,
        not_numbers=tuple(sorted(not_numbers)),
        rule_results=action.rule_results() if options.findings else None,
    )


# ---------------------------------------------------------------------------
# the entry points


def iter_launches(
    path: Path | str, *, with_rules: bool = True, allow: Callable[[str], bool] | None = None,
    options: ReadOptions = READ_DEFAULT,
) -> Iterator[Launch]:
    """Every intact launch of one report, in report order, one at a time (with what ``options`` adds).

    ``allow`` restricts the raw metrics read to those it accepts: the launch as a smaller
    collection would have recorded it (``classify --as-if``).

    Raises ``ReportError`` for a file that is not a usable report; warns with
    ``DamagedActionWarning`` for a cut-off last action when the ones before it are whole.
    """
    report_path = Path(path)
    version: str | None = None
    for index, (range_index, action_index, action) in enumerate(iter_report(report_path)):
        if index == 0:
            version = action.ncu_version() or read_ncu_version(report_path)
        yield build_launch(action, report=str(report_path), range_index=range_index, action_index=action_index,
                           ncu_version=version, with_rules=with_rules, allow=allow, options=options)


def _raw_metrics(action: Action, units: dict[str, str] | None) -> Iterator[RawMetric]:
    for name, value in action.metric_values():
        numeric = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        text = value if isinstance(value, str) else None
        yield RawMetric(name, numeric, text, None if units is None else units.get(name, ""))


def _units_of(action: Action, units: ReportUnits, range_index: int, action_index: int) -> dict[str, str] | None:
    """ncu_report's action gives its units; for a file-read action they come from ncu_report."""
    if isinstance(action, NcuReportAction):
        return action.units()
    return units.of(range_index, action_index)


def iter_launches_with_metrics(path: Path | str, options: ReadOptions = READ_DEFAULT,
                               ) -> Iterator[tuple[Launch, tuple[RawMetric, ...]]]:
    """Every intact launch with all its raw metrics (units from ``ncu_report``, see
    ``ncuflow.read.units``), the report read once."""
    report_path = Path(path)
    units = ReportUnits(report_path)
    version: str | None = None
    for index, (range_index, action_index, action) in enumerate(iter_report(report_path)):
        if index == 0:
            version = action.ncu_version() or read_ncu_version(report_path)
        launch = build_launch(action, report=str(report_path), range_index=range_index,
                              action_index=action_index, ncu_version=version, options=options)
        action_units = _units_of(action, units, range_index, action_index)
        yield launch, tuple(_raw_metrics(action, action_units))


def count_actions(path: Path | str) -> int:
    """Intact actions of a report (what export writes as rows)."""
    return sum(1 for _ in iter_report(Path(path)))


def read_launches(path: Path | str, options: ReadOptions = READ_DEFAULT) -> tuple[Launch, ...]:
    """Every intact launch of one report, as a tuple (what a reading worker sends back)."""
    return tuple(iter_launches(path, options=options))
