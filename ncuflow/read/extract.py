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

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncuflow.read.launch import DeviceInfo, KernelName, Launch
from ncuflow.read.metrics import BREAKDOWN_METRICS, FIELDS, UNIT_THROUGHPUT_METRICS, resolve
from ncuflow.read.reportfile import import_ncu_report, iter_actions, load_context, read_ncu_version

_SOL_RULE = "SOLBottleneck"


@dataclass(frozen=True)
class _MetricCalls:
    """ncu_report's metric calls, bound once per process.

    Where the module exposes its SWIG functions (every version seen), they are called
    directly: the Python method wrappers around them cost as much as the calls, and
    extraction makes ~100 lookups per launch. Otherwise the methods are used unbound.
    """

    metric_by_name: Callable[[Any, str], Any]
    has_value: Callable[[Any], bool]
    kind: Callable[[Any], int]
    as_double: Callable[[Any], float]
    as_uint64: Callable[[Any], int]
    as_string: Callable[[Any], str | None]
    double_kinds: frozenset[int]
    integer_kinds: frozenset[int]
    string_kind: int


_SWIG_NAMES = ("IAction_metric_by_name", "IMetric_has_value", "IMetric_kind", "IMetric_as_double",
               "IMetric_as_uint64", "IMetric_as_string")


def metric_calls(ncu_report: Any, *, use_swig: bool = True) -> _MetricCalls:
    """The metric calls of an ``ncu_report`` module (``use_swig=False``: its public methods only)."""
    metric = ncu_report.IMetric
    swig = getattr(ncu_report, "_ncu_report", None)
    if use_swig and swig is not None and all(hasattr(swig, name) for name in _SWIG_NAMES):
        by_name, has_value, kind, as_double, as_uint64, as_string = (getattr(swig, name) for name in _SWIG_NAMES)
    else:
        by_name, has_value, kind = ncu_report.IAction.metric_by_name, metric.has_value, metric.kind
        as_double, as_uint64, as_string = metric.as_double, metric.as_uint64, metric.as_string
    return _MetricCalls(
        metric_by_name=by_name, has_value=has_value, kind=kind,
        as_double=as_double, as_uint64=as_uint64, as_string=as_string,
        double_kinds=frozenset({metric.ValueKind_DOUBLE, metric.ValueKind_FLOAT}),
        integer_kinds=frozenset({metric.ValueKind_UINT32, metric.ValueKind_UINT64}),
        string_kind=metric.ValueKind_STRING,
    )


@functools.cache
def _default_calls() -> _MetricCalls:
    return metric_calls(import_ncu_report())


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


def number_lookup(
    action: Any, calls: _MetricCalls | None = None, allow: Callable[[str], bool] | None = None,
    not_numbers: set[str] | None = None,
) -> Callable[[str], float | None]:
    """A function from a metric name to its number on this action, each looked up once.

    The number is None where the metric is absent, valueless, a string, not finite, or
    refused by ``allow``; a metric stored as NaN or infinite is also added to ``not_numbers``.
    Dispatches on the value kind itself: ``IMetric.value()`` rebuilds a table of lambdas on
    every call, which dominated extraction time.
    """
    calls = calls or _default_calls()
    cache: dict[str, float | None] = {}
    by_name, has_value, kind_of = calls.metric_by_name, calls.has_value, calls.kind
    double_kinds, integer_kinds = calls.double_kinds, calls.integer_kinds

    def lookup(name: str) -> float | None:
        if name in cache:
            return cache[name]
        number: float | None = None
        metric = by_name(action, name) if allow is None or allow(name) else None
        if metric is not None and has_value(metric):
            kind = kind_of(metric)
            if kind in double_kinds:
                number = calls.as_double(metric)
            elif kind in integer_kinds:
                number = float(calls.as_uint64(metric))
            if number is not None and not math.isfinite(number):
                number = None
                if not_numbers is not None:
                    not_numbers.add(name)
        cache[name] = number
        return number

    return lookup


def metric_number(action: Any, name: str, calls: _MetricCalls | None = None) -> float | None:
    """A numeric metric's value; None where it is absent, valueless, a string, or not finite."""
    return number_lookup(action, calls)(name)


def metric_text(action: Any, name: str, calls: _MetricCalls | None = None) -> str | None:
    """A metric's value as text (a number is formatted); None where it is absent or valueless."""
    calls = calls or _default_calls()
    metric = calls.metric_by_name(action, name)
    if metric is None or not calls.has_value(metric):
        return None
    kind = calls.kind(metric)
    if kind == calls.string_kind:
        return calls.as_string(metric)
    if kind in calls.double_kinds:
        return str(calls.as_double(metric))
    if kind in calls.integer_kinds:
        return str(calls.as_uint64(metric))
    return None


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


@functools.lru_cache(maxsize=256)
def _listed_names(listing: str) -> tuple[str, ...]:
    """The metric names of a breakdown list (the same text on every launch of a report)."""
    return tuple(name.strip() for name in listing.split(","))


def _breakdown(
    action: Any, lookup: Callable[[str], float | None], calls: _MetricCalls,
    allow: Callable[[str], bool] | None = None,
) -> dict[str, float]:
    """NVIDIA's per-unit throughput metrics (% of peak) that the model groups into terms.

    The SpeedOfLight section's breakdown lists name them; a report without those lists
    (a `--metrics` collection) contributes whichever known per-unit metrics it holds.
    ``allow`` (``classify --as-if``) keeps only what a smaller collection would have held:
    a breakdown list it allows brings every metric the list names.
    """
    names: list[str] = []
    for list_metric in BREAKDOWN_METRICS:
        listing = metric_text(action, list_metric, calls) if allow is None or allow(list_metric) else None
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


def _nvidia_sol(action: Any) -> str | None:
    """The title of NVIDIA's speed-of-light rule result, where the report has one."""
    try:
        results = action.rule_results()
    except Exception:
        return None
    for result in results:
        if result.rule_identifier() == _SOL_RULE:
            message = result.rule_message() or {}
            title = message.get("title") if isinstance(message, dict) else None
            return str(title) if title else None
    return None


def _device(action: Any, lookup: Callable[[str], float | None], calls: _MetricCalls) -> DeviceInfo:
    major = lookup("device__attribute_compute_capability_major")
    minor = lookup("device__attribute_compute_capability_minor")
    sm_count = lookup("device__attribute_multiprocessor_count")
    return DeviceInfo(
        name=metric_text(action, "device__attribute_display_name", calls),
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
    calls: _MetricCalls | None = None,
) -> Launch:
    calls = calls or _default_calls()
    not_numbers: set[str] = set()
    lookup = number_lookup(action, calls, allow, not_numbers)
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
        device=_device(action, lookup, calls),
        ncu_version=ncu_version,
        values=values,
        provenance=provenance,
        missing=tuple(missing),
        breakdown=_breakdown(action, lookup, calls, allow),
        nvidia_sol=_nvidia_sol(action) if with_rules else None,
        not_numbers=tuple(sorted(not_numbers)),
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
