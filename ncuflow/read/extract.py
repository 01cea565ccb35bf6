"""Nsight Compute reports -> ``Launch`` records, one per action of every range.

The only module that touches ``ncu_report``. It streams: one action is read at a
time, only the raw metrics the canonical fields name are looked up (through the
alias chains of ``ncuflow.read.metrics``), and nothing of the report is kept once its
``Launch`` has been built. Bad input never yields a silent empty result:
``ncu_report`` opens garbage, empty and most truncated files as a context with zero
ranges, and a report cut mid-way as its complete actions plus one last action with
no name and no metrics; each of these becomes a ``ReportError`` (or, for a cut
report whose complete actions are intact, a ``DamagedAction`` warning).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncuflow.read.launch import DeviceInfo, KernelName, Launch
from ncuflow.read.metrics import BREAKDOWN_METRICS, FIELDS, UNIT_THROUGHPUT_METRICS, resolve
from ncuflow.read.reportfile import import_ncu_report, iter_actions, load_context, read_ncu_version

_SOL_RULE = "SOLBottleneck"


def _value_kinds() -> tuple[frozenset[int], frozenset[int]]:
    try:
        import ncu_report
    except ImportError:  # pragma: no cover
        return frozenset(), frozenset()
    metric = ncu_report.IMetric
    return (
        frozenset({metric.ValueKind_DOUBLE, metric.ValueKind_FLOAT}),
        frozenset({metric.ValueKind_UINT32, metric.ValueKind_UINT64}),
    )


_DOUBLE_KINDS, _INTEGER_KINDS = _value_kinds()


@dataclass(frozen=True)
class RawMetric:
    """One raw metric of one launch, for the long table."""

    name: str
    value: float | None
    string_value: str | None
    unit: str


# ---------------------------------------------------------------------------
# finding reports


# ---------------------------------------------------------------------------
# opening one report


# ---------------------------------------------------------------------------
# one action -> one Launch


def metric_number(action: Any, name: str) -> float | None:
    """A numeric metric's value; None where it is absent, valueless, a string, or not finite.

    Dispatches on the value kind itself: ``IMetric.value()`` rebuilds a table of
    lambdas on every call, which dominated extraction time.
    """
    metric = action.metric_by_name(name)
    if metric is None or not metric.has_value():
        return None
    kind = metric.kind()
    if kind in _DOUBLE_KINDS:
        number = metric.as_double()
    elif kind in _INTEGER_KINDS:
        number = float(metric.as_uint64())
    else:
        return None
    return number if math.isfinite(number) else None


def metric_text(action: Any, name: str) -> str | None:
    metric = action.metric_by_name(name)
    if metric is None or not metric.has_value():
        return None
    value = metric.value()
    return value if isinstance(value, str) else str(value)


def _kernel_name(action: Any, ncu_report: Any) -> KernelName:
    action_type = ncu_report.IAction

    def name(base: Any) -> str:
        try:
            text = action.name(base)
        except Exception:  # older reports may not hold every form
            text = None
        return text or ""

    function = name(action_type.NameBase_FUNCTION) or (action.name() or "")
    return KernelName(
        function=function,
        demangled=name(action_type.NameBase_DEMANGLED) or function,
        mangled=name(action_type.NameBase_MANGLED) or function,
    )


def _nvtx_ranges(action: Any) -> tuple[str, ...]:
    state = action.nvtx_state()
    if state is None:
        return ()
    ranges: list[str] = []
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        domain_name = domain.name() or ""
        prefix = "" if domain_name in ("", "<default domain>") else f"{domain_name}@"
        for range_name in domain.push_pop_ranges():
            ranges.append(f"{prefix}{range_name}")
        for range_name in domain.start_end_ranges():
            ranges.append(f"{prefix}{range_name}")
    return tuple(ranges)


def _breakdown(action: Any, allow: Callable[[str], bool] | None = None) -> dict[str, float]:
    """NVIDIA's per-unit throughput metrics (% of peak) that the model groups into terms.

    The SpeedOfLight section's breakdown lists name them; a report without those lists
    (a `--metrics` collection) contributes whichever known per-unit metrics it holds.
    ``allow`` (``classify --as-if``) keeps only what a smaller collection would have held:
    a breakdown list it allows brings every metric the list names.
    """
    names: list[str] = []
    for list_metric in BREAKDOWN_METRICS:
        listing = metric_text(action, list_metric) if allow is None or allow(list_metric) else None
        if listing:
            names.extend(name.strip() for name in listing.split(","))
    listed = set(names)
    candidates = names or list(UNIT_THROUGHPUT_METRICS)
    if allow is not None:
        extra = [m for m in UNIT_THROUGHPUT_METRICS if m not in listed]
        candidates = [n for n in (*names, *extra) if n in listed or allow(n)]
    values: dict[str, float] = {}
    for name in candidates:
        if name and name not in values:
            value = metric_number(action, name)
            if value is not None:
                values[name] = value
    return values


def _nvidia_sol(action: Any) -> str | None:
    try:
        results = action.rule_results_as_dicts()
    except Exception:
        return None
    for result in results:
        if result.get("rule_identifier") == _SOL_RULE:
            message = result.get("rule_message") or {}
            title = message.get("title") if isinstance(message, dict) else None
            return str(title) if title else None
    return None


def _device(action: Any) -> DeviceInfo:
    major = metric_number(action, "device__attribute_compute_capability_major")
    minor = metric_number(action, "device__attribute_compute_capability_minor")
    sm_count = metric_number(action, "device__attribute_multiprocessor_count")
    return DeviceInfo(
        name=metric_text(action, "device__attribute_display_name"),
        compute_capability=f"{int(major)}.{int(minor)}" if major is not None and minor is not None else None,
        sm_count=int(sm_count) if sm_count is not None else None,
    )


def launch_from_action(
    action: Any,
    *,
    report: str,
    range_index: int,
    action_index: int,
    ncu_version: str | None,
    ncu_report: Any,
    with_rules: bool = True,
    allow: Callable[[str], bool] | None = None,
) -> Launch:
    cache: dict[str, float | None] = {}

    def lookup(name: str) -> float | None:
        if name not in cache:
            cache[name] = metric_number(action, name) if allow is None or allow(name) else None
        return cache[name]

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
        kernel=_kernel_name(action, ncu_report),
        nvtx=_nvtx_ranges(action),
        device=_device(action),
        ncu_version=ncu_version,
        values=values,
        provenance=provenance,
        missing=tuple(missing),
        breakdown=_breakdown(action, allow),
        nvidia_sol=_nvidia_sol(action) if with_rules else None,
    )


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
    context = load_context(report_path)
    ncu_report = import_ncu_report()
    version = read_ncu_version(report_path)
    for range_index, action_index, action in iter_actions(report_path, context):
        yield launch_from_action(
            action,
            report=str(report_path),
            range_index=range_index,
            action_index=action_index,
            ncu_version=version,
            ncu_report=ncu_report,
            with_rules=with_rules,
            allow=allow,
        )


def _raw_metrics(action: Any) -> Iterator[RawMetric]:
    for name in action.metric_names():
        metric = action.metric_by_name(name)
        if metric is None:
            continue
        has_value = metric.has_value()
        value = metric.value() if has_value else None
        numeric = (
            float(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            else None
        )
        text = value if isinstance(value, str) else None
        yield RawMetric(name, numeric, text, metric.unit() or "")


def iter_raw_metrics(path: Path | str) -> Iterator[tuple[int, int, RawMetric]]:
    """Every raw metric of every intact launch: (range index, action index, metric)."""
    report_path = Path(path)
    context = load_context(report_path)
    for range_index, action_index, action in iter_actions(report_path, context):
        for metric in _raw_metrics(action):
            yield range_index, action_index, metric


def iter_launches_with_metrics(path: Path | str) -> Iterator[tuple[Launch, tuple[RawMetric, ...]]]:
    """Every intact launch with all its raw metrics, the report opened and walked once."""
    report_path = Path(path)
    context = load_context(report_path)
    ncu_report = import_ncu_report()
    version = read_ncu_version(report_path)
    for range_index, action_index, action in iter_actions(report_path, context):
        launch = launch_from_action(
            action, report=str(report_path), range_index=range_index, action_index=action_index,
            ncu_version=version, ncu_report=ncu_report,
        )
        yield launch, tuple(_raw_metrics(action))


def count_actions(path: Path | str) -> int:
    """Intact actions of a report (what export writes as rows)."""
    report_path = Path(path)
    context = load_context(report_path)
    return sum(1 for _ in iter_actions(report_path, context))


def read_launches(path: Path | str) -> tuple[Launch, ...]:
    """Every intact launch of one report, as a tuple (what a reading worker sends back)."""
    return tuple(iter_launches(path))
