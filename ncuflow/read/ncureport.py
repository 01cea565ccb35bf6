"""Actions read through NVIDIA's ``ncu_report`` module: the reference reader.

``--reader ncu_report`` reads every report this way, and the default reader falls back
to it for a file version or layout it does not know; ``export --metrics-long`` asks it
for each raw metric's unit (the file does not hold units, see ``ncuflow.read.units``).
``NcuReportAction`` gives an ``IAction`` the interface ``ncuflow.read.extract`` builds a
``Launch`` from, the same as ``ncuflow.read.fileaction.FileAction``'s.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ncuflow.read.launch import KernelName
from ncuflow.read.reportfile import import_ncu_report, iter_actions, load_context

if TYPE_CHECKING:
    from ncuflow.read.findings import RuleResults

_SOL_RULE = "SOLBottleneck"
# What a workload that is no single kernel launch is named with, before its name: a CUDA graph
# profiled as one workload (`ncu --graph-profiling graph`), whose numbers are the whole graph's.
GRAPH_MARK = "[CUDA graph] "


def _workload_mark(action: Any, action_type: Any) -> str:
    """``GRAPH_MARK`` for a CUDA-graph workload, else "" (a kernel, or a module without workload types)."""
    graph = getattr(action_type, "WorkloadType_GRAPH", None)
    try:
        kind = action.workload_type()
    except Exception:  # ncu_report before workload types
        return ""
    return GRAPH_MARK if graph is not None and kind == graph else ""


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
def default_calls() -> _MetricCalls:
    return metric_calls(import_ncu_report())


def metric_number(action: Any, name: str, calls: _MetricCalls | None = None) -> float | None:
    """A numeric metric's value; None where it is absent, valueless, a string, or not finite.

    Dispatches on the value kind itself: ``IMetric.value()`` rebuilds a table of lambdas
    on every call, which dominated extraction time.
    """
    calls = calls or default_calls()
    metric = calls.metric_by_name(action, name)
    if metric is None or not calls.has_value(metric):
        return None
    kind = calls.kind(metric)
    if kind in calls.double_kinds:
        number = calls.as_double(metric)
    elif kind in calls.integer_kinds:
        number = float(calls.as_uint64(metric))
    else:
        return None
    return number if math.isfinite(number) else None


def metric_text(action: Any, name: str, calls: _MetricCalls | None = None) -> str | None:
    """A metric's value as text (a number is formatted); None where it is absent or valueless."""
    calls = calls or default_calls()
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


class NameList:
    """An action's metric names as ``ncu_report`` lists them: a name's index is its position;
    plans of the list are kept with it (``ncuflow.read.extract.read_plan``)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.index = {name: position for position, name in enumerate(names)}
        self.plans: dict[object, Any] = {}

    def index_of(self, name: str) -> int | None:
        return self.index.get(name)


@functools.lru_cache(maxsize=16)
def _name_list(names: tuple[str, ...]) -> NameList:
    """One ``NameList`` per distinct list of names (a report's actions share one)."""
    return NameList(names)


class NcuReportAction:
    """An ``ncu_report`` ``IAction`` as ``ncuflow.read.extract`` reads an action (each number looked up once)."""

    def __init__(self, action: Any, ncu_report: Any, calls: _MetricCalls | None = None) -> None:
        self.action = action
        self._module = ncu_report
        self._calls = calls or default_calls()
        self._numbers: dict[str, float | None] = {}
        self._list: NameList | None = None

    def metric_list(self) -> NameList:
        """Its metric names (always its own: ``ncu_report`` looks each up by name)."""
        if self._list is None:
            self._list = _name_list(tuple(self.action.metric_names()))
        return self._list

    def confirm(self, lacking: set[str]) -> None:
        """Nothing to confirm: the list is the action's own."""

    def settle(self) -> None:
        """Nothing to settle: the list is the action's own."""

    def ncu_version(self) -> str | None:
        """Not known to ``ncu_report`` (its ``get_version()`` is the module's): the file's bytes say."""
        return None

    def number_at(self, position: int) -> float | None:
        return self.number(self.metric_list().names[position])

    def stored_non_finite_at(self, position: int) -> bool:
        return self.stored_non_finite(self.metric_list().names[position])

    def text_at(self, position: int) -> str | None:
        return self.text(self.metric_list().names[position])

    def number(self, name: str) -> float | None:
        if name not in self._numbers:
            self._numbers[name] = metric_number(self.action, name, self._calls)
        return self._numbers[name]

    def stored_non_finite(self, name: str) -> bool:
        """Whether ncu stored this metric as NaN or infinite (``number`` gives None for it)."""
        calls = self._calls
        metric = calls.metric_by_name(self.action, name)
        if metric is None or not calls.has_value(metric) or calls.kind(metric) not in calls.double_kinds:
            return False
        return not math.isfinite(calls.as_double(metric))

    def text(self, name: str) -> str | None:
        return metric_text(self.action, name, self._calls)

    def kernel(self) -> KernelName:
        action, action_type = self.action, self._module.IAction

        def name(base: Any) -> str:
            try:
                text = action.name(base)
            except Exception:  # older reports may not hold every form
                text = None
            return text or ""

        function = name(action_type.NameBase_FUNCTION) or (action.name() or "")
        mark = _workload_mark(action, action_type)
        return KernelName(
            function=mark + function,
            demangled=mark + (name(action_type.NameBase_DEMANGLED) or function),
            mangled=mark + (name(action_type.NameBase_MANGLED) or function),
        )

    def nvtx(self) -> tuple[str, ...]:
        state = self.action.nvtx_state()
        if state is None:
            return ()
        ranges: list[str] = []
        for domain_id in state.domains():
            domain = state.domain_by_id(domain_id)
            domain_name = domain.name() or ""
            prefix = "" if domain_name in ("", "<default domain>") else f"{domain_name}@"
            ranges.extend(f"{prefix}{range_name}" for range_name in domain.push_pop_ranges())
            ranges.extend(f"{prefix}{range_name}" for range_name in domain.start_end_ranges())
        return tuple(ranges)

    def nvidia_sol(self) -> str | None:
        """The title of NVIDIA's speed-of-light rule result, where the report has one."""
        try:
            results = self.action.rule_results()
        except Exception:
            return None
        for result in results:
            if result.rule_identifier() == _SOL_RULE:
                message = result.rule_message() or {}
                title = message.get("title") if isinstance(message, dict) else None
                return str(title) if title else None
        return None

    def rule_results(self) -> RuleResults:
        """NVIDIA's findings and source markers for this launch (``IRuleResult``, ``source_markers()``)."""
        from ncuflow.read.rule_results import ncu_report_rule_results

        return ncu_report_rule_results(self.action)

    def metric_names(self) -> list[str]:
        return list(self.action.metric_names())

    def metric_values(self) -> Iterator[tuple[str, float | int | str | None]]:
        """(name, ``IMetric.value()``) of every metric, in ``metric_names()`` order."""
        for name, metric in self._metrics():
            yield name, metric.value() if metric.has_value() else None

    def units(self) -> dict[str, str]:
        """Each metric's unit, as ``IMetric.unit()`` gives it ("" where it has none)."""
        return {name: metric.unit() or "" for name, metric in self._metrics()}

    def _metrics(self) -> Iterator[tuple[str, Any]]:
        for name in self.action.metric_names():
            metric = self.action.metric_by_name(name)
            if metric is not None:
                yield name, metric


def iter_report_actions(path: Path) -> Iterator[tuple[int, int, NcuReportAction]]:
    """(range index, action index, action) for every intact action, read with ``ncu_report``."""
    context = load_context(path)
    module = import_ncu_report()
    calls = default_calls()
    for range_index, action_index, action in iter_actions(path, context):
        yield range_index, action_index, NcuReportAction(action, module, calls)
