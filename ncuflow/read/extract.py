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

import functools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ncuflow.errors import ReportError
from ncuflow.read.launch import DeviceInfo, KernelName, Launch
from ncuflow.read.metrics import BREAKDOWN_METRICS, FIELDS, UNIT_THROUGHPUT_METRICS, resolve
from ncuflow.read.ncureport import (  # re-exported: the ncu_report side's calls
    NcuReportAction,
    iter_report_actions,
    metric_calls,
    metric_number,
    metric_text,
)
from ncuflow.read.readers import UnknownLayoutWarning, reads_the_file
from ncuflow.read.reportfile import read_ncu_version
from ncuflow.read.units import ReportUnits

__all__ = ["Action", "RawMetric", "count_actions", "iter_launches", "iter_launches_with_metrics",
           "iter_report", "metric_calls", "metric_number", "metric_text",
           "read_launches", "read_ncu_version"]


class Action(Protocol):
    """One action as a reader gives it (``FileAction``, ``NcuReportAction``)."""

    def number(self, name: str) -> float | None: ...
    def stored_non_finite(self, name: str) -> bool: ...
    def text(self, name: str) -> str | None: ...
    def kernel(self) -> KernelName: ...
    def nvtx(self) -> tuple[str, ...]: ...
    def nvidia_sol(self) -> str | None: ...
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
# one action -> one Launch


@functools.lru_cache(maxsize=256)
def _listed_names(listing: str) -> tuple[str, ...]:
    """The metric names of a breakdown list (the same text on every launch of a report)."""
    return tuple(name.strip() for name in listing.split(","))


def _breakdown(action: Action, lookup: Callable[[str], float | None],
               allow: Callable[[str], bool] | None = None) -> dict[str, float]:
    """NVIDIA's per-unit throughput metrics (% of peak) that the model groups into terms.

    The SpeedOfLight section's breakdown lists name them; a report without those lists
    (a `--metrics` collection) contributes whichever known per-unit metrics it holds.
    ``allow`` (``classify --as-if``) keeps only what a smaller collection would have held:
    a breakdown list it allows brings every metric the list names.
    """
    names: list[str] = []
    for list_metric in BREAKDOWN_METRICS:
        listing = action.text(list_metric) if allow is None or allow(list_metric) else None
        if listing:
            names.extend(_listed_names(listing))
    candidates: list[str] | tuple[str, ...] = names or UNIT_THROUGHPUT_METRICS
    if allow is not None:
        listed = set(names)
        extra = [m for m in UNIT_THROUGHPUT_METRICS if m not in listed]
        candidates = [n for n in (*names, *extra) if n in listed or allow(n)]
    values: dict[str, float] = {}
    for name in candidates:
        if name and name not in values:
            value = lookup(name)
            if value is not None:
                values[name] = value
    return values


def _device(action: Action, lookup: Callable[[str], float | None]) -> DeviceInfo:
    major = lookup("device__attribute_compute_capability_major")
    minor = lookup("device__attribute_compute_capability_minor")
    sm_count = lookup("device__attribute_multiprocessor_count")
    return DeviceInfo(
        name=action.text("device__attribute_display_name"),
        compute_capability=f"{int(major)}.{int(minor)}" if major is not None and minor is not None else None,
        sm_count=int(sm_count) if sm_count is not None else None,
    )


def build_launch(
    action: Action, *, report: str, range_index: int, action_index: int, ncu_version: str | None,
    with_rules: bool = True, allow: Callable[[str], bool] | None = None,
) -> Launch:
    number = action.number
    not_numbers: set[str] = set()  # counters ncu stored as NaN or infinite: named as such, never "absent"

    def lookup(name: str) -> float | None:
        if allow is not None and not allow(name):
            return None
        value = number(name)
        if value is None and action.stored_non_finite(name):
            not_numbers.add(name)
        return value

    values: dict[str, float | None] = {}
    provenance: dict[str, str] = {}
    missing: list[str] = []
    for field in FIELDS:
        value, source = resolve(field, lookup)
        values[field.name] = value
        if source is None:
            missing.append(field.name)
        else:
            provenance[field.name] = source
    return Launch(
        report=report,
        range_index=range_index,
        action_index=action_index,
        kernel=action.kernel(),
        nvtx=action.nvtx(),
        device=_device(action, lookup),
        ncu_version=ncu_version,
        values=values,
        provenance=provenance,
        missing=tuple(missing),
        breakdown=_breakdown(action, lookup, allow),
        nvidia_sol=action.nvidia_sol() if with_rules else None,
        not_numbers=tuple(sorted(not_numbers)),
    )


# ---------------------------------------------------------------------------
# the entry points


def iter_launches(
    path: Path | str, *, with_rules: bool = True, allow: Callable[[str], bool] | None = None
) -> Iterator[Launch]:
    """Every intact launch of one report, in report order, one at a time.

    ``allow`` restricts the raw metrics read to those it accepts: the launch as a smaller
    collection would have recorded it (``classify --as-if``).

    Raises ``ReportError`` for a file that is not a usable report; warns with
    ``DamagedActionWarning`` for a cut-off last action when the ones before it are whole.
    """
    report_path = Path(path)
    version: str | None = None
    for index, (range_index, action_index, action) in enumerate(iter_report(report_path)):
        if index == 0:
            version = read_ncu_version(report_path)
        yield build_launch(action, report=str(report_path), range_index=range_index, action_index=action_index,
                           ncu_version=version, with_rules=with_rules, allow=allow)


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


def iter_launches_with_metrics(path: Path | str) -> Iterator[tuple[Launch, tuple[RawMetric, ...]]]:
    """Every intact launch with all its raw metrics (units from ``ncu_report``, see
    ``ncuflow.read.units``), the report read once."""
    report_path = Path(path)
    units = ReportUnits(report_path)
    version: str | None = None
    for index, (range_index, action_index, action) in enumerate(iter_report(report_path)):
        if index == 0:
            version = read_ncu_version(report_path)
        launch = build_launch(action, report=str(report_path), range_index=range_index,
                              action_index=action_index, ncu_version=version)
        action_units = _units_of(action, units, range_index, action_index)
        yield launch, tuple(_raw_metrics(action, action_units))


def count_actions(path: Path | str) -> int:
    """Intact actions of a report (what export writes as rows)."""
    return sum(1 for _ in iter_report(Path(path)))


def read_launches(path: Path | str) -> tuple[Launch, ...]:
    """Every intact launch of one report, as a tuple (what a reading worker sends back)."""
    return tuple(iter_launches(path))
