"""Explain: does a parameter change the work that reaches the kernel, and is it on the critical path?

Runs that differ in exactly one parameter are compared value by value against a
baseline. Two conditions decide (docs/analysis.md), each judged against the noise band
of the field, never against zero:

1. work: does an exact work counter or a byte counter change?
2. critical path: does the duration change, with the changed work in the binding term?

=====  =====  ===============================================================
work   time   verdict
=====  =====  ===============================================================
no     no     ``no_effect``: the parameter does not reach the kernel
yes    no     ``off_critical_path``: work changes off the critical path
yes    yes    ``critical_path``: work reaches the critical path
no     yes    ``time_without_work``: time moved without counted work
=====  =====  ===============================================================

and ``ambiguous`` wherever the data cannot decide: noise unknown, replicas that
disagree, counters not measured, or runs that differ in more than the parameter.

Each field's change is judged by ``ncuflow.analyze.change.compare_field``.

Pure functions over ``Launch`` records and frozen dataclasses; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Literal

from ncuflow.analyze.change import DEFAULT_RULES, FieldChange, NoiseRules, compare_field
from ncuflow.analyze.classify import DEFAULT_THRESHOLD, TERM_NAMES
from ncuflow.analyze.fields import EVIDENCE_ORDER, WORK_FIELDS, WORK_TERMS, format_pct
from ncuflow.analyze.measurement import identical_launches, merge
from ncuflow.analyze.point import Point, PointModel, format_param, sort_key
from ncuflow.analyze.stability import DEFAULT_TOLERANCES, Tolerances
from ncuflow.errors import UsageError

Condition = Literal["yes", "no", "unknown"]
VerdictCode = Literal["no_effect", "off_critical_path", "critical_path", "time_without_work", "ambiguous"]

VERDICT_TEXT: Mapping[str, str] = {
    "no_effect": "the parameter does not reach the kernel",
    "off_critical_path": "work changes off the critical path",
    "critical_path": "work reaches the critical path",
    "time_without_work": "time moved without counted work",
    "ambiguous": "ambiguous",
}

# Which model terms each work field feeds: the field table (``ncuflow.analyze.fields``).
__all__ = ["WORK_TERMS"]

EXPLAIN_FIELDS: tuple[str, ...] = ("duration_ns", *WORK_FIELDS)


# ---------------------------------------------------------------------------
# one value against the baseline


def _work_condition(fields: Sequence[FieldChange]) -> tuple[Condition, list[str]]:
    work = [f for f in fields if f.field in WORK_FIELDS]
    measured = [f for f in work if f.state != "missing"]
    reasons: list[str] = []
    if any(f.state == "changed" for f in measured):
        return "yes", reasons
    if not measured:
        reasons.append("no work counter or byte counter is measured on both sides")
        return "unknown", reasons
    undecided = [f for f in measured if f.state == "ambiguous"]
    if undecided:
        reasons += [f"{f.field}: {f.reason}" for f in undecided]
        return "unknown", reasons
    # a counter one side holds and the other lacks (a collection the other did not make)
    absent = [f.field for f in work if f.state == "missing" and not f.reason.endswith("on both sides")]
    if absent:
        reasons.append(f"work judged on {len(measured)} counters; not measured on one side: {', '.join(absent)}")
    return "no", reasons


def _time_condition(duration: FieldChange) -> tuple[Condition, list[str]]:
    if duration.state == "changed":
        return "yes", []
    if duration.state == "unchanged":
        return "no", []
    if duration.state == "missing":
        return "unknown", ["duration_ns is not measured"]
    return "unknown", [f"duration_ns: {duration.reason}"]


def _combine(work: Condition, time: Condition) -> VerdictCode:
    if work == "unknown" or time == "unknown":
        return "ambiguous"
    if work == "yes":
        return "critical_path" if time == "yes" else "off_critical_path"
    return "time_without_work" if time == "yes" else "no_effect"


def work_time_verdict(changes: Sequence[FieldChange]) -> tuple[VerdictCode, Condition, Condition, list[str]]:
    """The verdict the work and time conditions give (before checks on devices and binding terms)."""
    work, work_reasons = _work_condition(changes)
    duration = next((f for f in changes if f.field == "duration_ns"), None)
    if duration is None:
        raise UsageError("explain needs duration_ns among its fields.", "The time condition is judged on it.", "Keep duration_ns in the field list.")
    time, time_reasons = _time_condition(duration)
    return _combine(work, time), work, time, [*work_reasons, *time_reasons]


def _naive(change: FieldChange) -> Condition:
    if change.state == "missing" or change.delta is None:
        return "unknown"
    return "yes" if abs(change.delta) > change.tolerance else "no"


def _lean(fields: Sequence[FieldChange]) -> VerdictCode:
    work_fields = [f for f in fields if f.field in WORK_FIELDS and f.state != "missing"]
    work: Condition = "unknown" if not work_fields else ("yes" if any(_naive(f) == "yes" for f in work_fields) else "no")
    duration = next(f for f in fields if f.field == "duration_ns")
    return _combine(work, _naive(duration))


def _binding_text(model: PointModel) -> str:
    top = model.u(model.bound) if model.bound in TERM_NAMES else None
    if model.bound == "latency":
        best = max(((n, u) for n, u in model.utilization.items() if u is not None), key=lambda item: item[1], default=None)
        return "binding: latency (off every wall" + (f"; max u_{best[0]} {best[1]:.2f})" if best else ")")
    if model.bound == "unknown":
        return "binding term unknown (no model term measured)"
    return f"binding term {model.bound}" + (f" (u {top:.2f})" if top is not None else "")


def _duration_text(delta: float) -> str:
    if math.isinf(delta):
        return "∞"
    return f"{delta * 100:+.1f} %" if abs(delta) >= 0.001 else format_pct(delta, signed=True)


def _deltas_text(fields: Sequence[FieldChange], model: PointModel) -> str:
    parts: list[str] = []
    by_name = {f.field: f for f in fields}
    changed = [by_name[n] for n in EVIDENCE_ORDER if n in by_name and by_name[n].state == "changed"]
    undecided = [by_name[n] for n in EVIDENCE_ORDER if n in by_name and by_name[n].state == "ambiguous"]
    for item in changed[:3]:
        parts.append(f"{item.field} {item.delta_text()}")
    for item in undecided[: max(0, 3 - len(changed))]:
        parts.append(f"{item.field} {item.delta_text()} (?)")
    if not changed and not undecided:
        measured = [f for f in fields if f.field in WORK_FIELDS and f.state == "unchanged"]
        if measured:
            parts.append(f"work counters unchanged ({len(measured)})")
    duration = next(f for f in fields if f.field == "duration_ns")
    if duration.state != "missing" and duration.delta is not None:
        parts.append(f"duration {_duration_text(duration.delta)}" + ("" if duration.state in ("changed", "unchanged") else " (?)"))
    else:
        parts.append("duration not measured")
    parts.append(_binding_text(model))
    u_dram = model.u("dram")
    if model.bound != "dram" and u_dram is not None:
        parts.append(f"u_dram {u_dram:.2f}")
    return ", ".join(parts)


def compare_points(
    baseline: Point,
    other: Point,
    fields: Sequence[str],
    *,
    tolerances: Tolerances = DEFAULT_TOLERANCES,
    rules: NoiseRules = DEFAULT_RULES,
) -> tuple[FieldChange, ...]:
    """Each field of two measurements judged against its noise band (scaled as the field table says)."""
    return tuple(
        compare_field(name, baseline.values(name), other.values(name), tolerances, rules, scale=baseline.noise_scale(name))
        for name in fields
    )


@dataclass(frozen=True)
class Judgement:
    """Two measurements judged field by field, and the verdict the work and time conditions give."""

    verdict: VerdictCode
    work: Condition
    time: Condition
    fields: tuple[FieldChange, ...]
    baseline_model: PointModel
    value_model: PointModel
    deltas: str  # the evidence line
    reasons: tuple[str, ...]
    lean: VerdictCode | None

    @property
    def verdict_text(self) -> str:
        text = VERDICT_TEXT[self.verdict]
        if self.verdict == "ambiguous" and self.lean is not None and self.lean != "ambiguous":
            text += f" (leans: {VERDICT_TEXT[self.lean]})"
        return text

    def field(self, name: str) -> FieldChange:
        for item in self.fields:
            if item.field == name:
                return item
        raise KeyError(name)

    @property
    def changed_work(self) -> tuple[FieldChange, ...]:
        return tuple(f for f in self.fields if f.field in WORK_FIELDS and f.state == "changed")


@dataclass(frozen=True)
class ValueExplanation(Judgement):
    """One parameter value judged against the baseline value."""

    param: str
    value: object
    baseline_value: object
    launches: tuple[int, int]  # (baseline, value)
    runs: tuple[int, int]


def judge(
    baseline: Point,
    other: Point,
    *,
    tolerances: Tolerances = DEFAULT_TOLERANCES,
    rules: NoiseRules = DEFAULT_RULES,
    threshold: float = DEFAULT_THRESHOLD,
    fields: Sequence[str] = EXPLAIN_FIELDS,
    one_difference: str | None = "the parameter",
) -> Judgement:
    """The work and time conditions of ``other`` against ``baseline`` and the verdict they give.

    ``one_difference`` names what is meant to be the only difference between the two: with
    one, launches on different GPUs make the verdict ambiguous (explain); with None the GPUs
    may differ and it is only noted (compare).
    """
    if "duration_ns" not in fields:
        raise UsageError("explain needs duration_ns among its fields.", "The time condition is judged on it.", "Keep duration_ns in the field list.")
    changes = compare_points(baseline, other, fields, tolerances=tolerances, rules=rules)
    verdict, work, time, reasons = work_time_verdict(changes)
    if "unknown" in (work, time) and identical_launches(baseline, other):
        work, time = ("no" if work == "unknown" else work), ("no" if time == "unknown" else time)
        reasons, verdict = ["the two sides hold identical launches: nothing can have changed"], _combine(work, time)
    base_model = baseline.model(threshold)
    value_model = other.model(threshold)
    if baseline.device != other.device:
        if one_difference is not None:
            reasons.insert(0, f"runs on different GPUs ({baseline.device} vs {other.device}): {one_difference} is not the only difference")
            verdict = "ambiguous"
        else:
            reasons.insert(0, f"different GPUs ({baseline.device} vs {other.device})")
    if verdict == "critical_path":
        bounds = {base_model.bound, value_model.bound}
        changed = [f for f in changes if f.field in WORK_FIELDS and f.state == "changed"]
        wall_bounds = bounds & set(TERM_NAMES)
        if wall_bounds and not (bounds & {"latency", "unknown"}):
            feeding = [f.field for f in changed if WORK_TERMS.get(f.field, frozenset()) & wall_bounds]
            if not feeding:
                reasons.append(
                    f"time moved and work changed, but no changed counter ({', '.join(f.field for f in changed)}) "
                    f"feeds the binding term ({', '.join(sorted(wall_bounds))})"
                )
                verdict = "ambiguous"
    if verdict == "time_without_work":
        (clock,) = compare_points(baseline, other, ("sm_clock_hz",), tolerances=tolerances, rules=rules)
        if clock.delta is not None:
            reasons.append(f"SM clock {format_pct(clock.delta, signed=True)}: look at clocks, contention or the measurement boundary")
        else:
            reasons.append("look at clocks, contention or the measurement boundary")
    if verdict == "off_critical_path":
        reasons.append(f"{_binding_text(value_model)}: the changed work does not move the time")
    work_time = [f for f in changes if f.field in EXPLAIN_FIELDS]
    return Judgement(
        verdict=verdict, work=work, time=time, fields=changes, baseline_model=base_model, value_model=value_model,
        deltas=_deltas_text(work_time, value_model), reasons=tuple(reasons),
        lean=_lean(work_time) if verdict == "ambiguous" else None,
    )


def explain_value(
    param: str,
    baseline: Point,
    other: Point,
    *,
    tolerances: Tolerances = DEFAULT_TOLERANCES,
    rules: NoiseRules = DEFAULT_RULES,
    threshold: float = DEFAULT_THRESHOLD,
    fields: Sequence[str] = EXPLAIN_FIELDS,
) -> ValueExplanation:
    """The verdict for one parameter value against the baseline, with the deltas that decided it."""
    judged = judge(baseline, other, tolerances=tolerances, rules=rules, threshold=threshold, fields=fields,
                   one_difference="the parameter")
    return ValueExplanation(
        **{f.name: getattr(judged, f.name) for f in dataclass_fields(Judgement)},
        param=param,
        value=other.param(param),
        baseline_value=baseline.param(param),
        launches=(len(baseline.launches), len(other.launches)),
        runs=(baseline.runs, other.runs),
    )


# ---------------------------------------------------------------------------
# sweeps: points that differ in exactly one parameter


@dataclass(frozen=True)
class SweepGroup:
    """Points of one cell and kernel that share every parameter except ``param``."""

    cell: str
    kernel: str
    param: str
    fixed: tuple[tuple[str, object], ...]
    points: tuple[Point, ...]  # one per value, sorted by value

    @property
    def values(self) -> tuple[object, ...]:
        return tuple(p.param(self.param) for p in self.points)

    def label(self) -> str:
        fixed = ",".join(f"{k}={v}" for k, v in self.fixed)
        return f"{self.cell}" + (f":{fixed}" if fixed else "") + f" [{self.kernel}] varying {self.param}"

    def point(self, value: object) -> Point:
        for p in self.points:
            if format_param(p.param(self.param)) == format_param(value):
                return p
        raise KeyError(value)


def merge_points(points: Sequence[Point]) -> Point:
    return merge(points)


def vary_groups(points: Iterable[Point], param: str) -> list[SweepGroup]:
    """Group points that differ only in ``param`` (same cell, same kernel, same other params).

    Kernels are matched by function name; where every point of a cell holds one
    kernel, they are matched whatever their names (a parameter may select another
    kernel, e.g. a template specialization).
    """
    pts = [p for p in points if param in dict(p.params)]
    kernels_per_cell: dict[tuple[str, tuple[tuple[str, object], ...]], set[str]] = {}
    for p in pts:
        kernels_per_cell.setdefault((p.cell, p.params), set()).add(p.kernel)
    single_kernel_cells = {
        cell for cell in {p.cell for p in pts}
        if all(len(k) == 1 for (c, _), k in kernels_per_cell.items() if c == cell)
    }
    buckets: dict[tuple[str, str, tuple[tuple[str, object], ...]], dict[str, list[Point]]] = {}
    for p in pts:
        fixed = tuple((k, v) for k, v in p.params if k != param)
        kernel_key = "" if p.cell in single_kernel_cells else p.kernel
        key = (p.cell, kernel_key, fixed)
        buckets.setdefault(key, {}).setdefault(format_param(p.param(param)), []).append(p)
    groups: list[SweepGroup] = []
    for (cell, kernel_key, fixed), by_value in buckets.items():
        if len(by_value) < 2:
            continue
        merged = [merge_points(v) for v in by_value.values()]
        ordered = sorted(merged, key=lambda p: sort_key(p.param(param)))
        kernel = kernel_key or " / ".join(dict.fromkeys(p.kernel for p in ordered))
        groups.append(SweepGroup(cell, kernel, param, fixed, tuple(ordered)))
    groups.sort(key=lambda g: (g.cell, g.kernel, [format_param(v) for _, v in g.fixed]))
    return groups


# cell -> parameter -> its default value: what a cell runs when a parameter is not given.
# The command line reads them from the cells' definitions (analysis does not import cells).
CellDefaults = Mapping[str, Mapping[str, object]]


def choose_baseline(group: SweepGroup, requested: object | None = None, defaults: CellDefaults | None = None) -> Point:
    """The requested value's point, else the cell's default value where the group measured it,
    else the smallest value (numeric order, then alphabetical)."""
    if requested is not None:
        try:
            return group.point(requested)
        except KeyError:
            raise UsageError(
                f"--baseline {requested} is not a value of {group.param} in {group.label()}.",
                f"The values measured there are: {', '.join(format_param(v) for v in group.values)}.",
                "Pick one of them, or leave --baseline out to use the cell's default (else the smallest).",
            ) from None
    default = (defaults or {}).get(group.cell, {}).get(group.param)
    if default is not None:
        try:
            return group.point(default)
        except KeyError:
            pass  # the default was not measured here: the smallest value
    return group.points[0]


@dataclass(frozen=True)
class GroupExplanation:
    group: SweepGroup
    baseline: Point
    rows: tuple[ValueExplanation, ...]
    tolerances: Tolerances


def explain_group(
    group: SweepGroup,
    *,
    baseline: object | None = None,
    tolerances: Tolerances = DEFAULT_TOLERANCES,
    rules: NoiseRules = DEFAULT_RULES,
    threshold: float = DEFAULT_THRESHOLD,
    defaults: CellDefaults | None = None,
) -> GroupExplanation:
    base = choose_baseline(group, baseline, defaults)
    rows = tuple(
        explain_value(group.param, base, p, tolerances=tolerances, rules=rules, threshold=threshold)
        for p in group.points
        if p is not base
    )
    return GroupExplanation(group, base, rows, tolerances)


def swept_by_cell(points: Iterable[Point]) -> dict[str, tuple[str, ...]]:
    """Per cell, the parameters swept there, each taking more than one value among the points.

    Read from the runs' manifests (a sweep records its axes, carried on each launch's
    ``RunRef``): a parameter that only differs between unrelated runs is not an axis.
    For a cell none of whose runs records axes (manifests from before axes were recorded,
    runs not made by a sweep), inferred: every parameter that takes more than one value.
    """
    recorded: dict[str, set[str]] = {}
    values: dict[tuple[str, str], set[str]] = {}
    for p in points:
        for launch in p.launches:
            if launch.run is not None and launch.run.sweep_axes is not None:
                recorded.setdefault(p.cell, set()).update(launch.run.sweep_axes)
        for name, value in p.params:
            values.setdefault((p.cell, name), set()).add(format_param(value))
    swept: dict[str, set[str]] = {}
    for (cell, name), seen in values.items():
        if len(seen) > 1 and (cell not in recorded or name in recorded[cell]):
            swept.setdefault(cell, set()).add(name)
    return {cell: tuple(sorted(names)) for cell, names in sorted(swept.items())}


def swept_params(points: Iterable[Point]) -> list[str]:
    """Every parameter swept in some cell (see ``swept_by_cell``)."""
    return sorted({name for names in swept_by_cell(points).values() for name in names})


def headline_points(groups: Iterable[GroupExplanation]) -> list[Point]:
    """The points whose numbers carry an explain verdict: each group's baseline and its extremes."""
    chosen: dict[tuple[str, tuple[tuple[str, object], ...]], Point] = {}
    for explained in groups:
        points = explained.group.points
        for p in (explained.baseline, points[0], points[-1]):
            chosen.setdefault((p.cell, p.params), p)
    return list(chosen.values())


# ---------------------------------------------------------------------------
# tables


EXPLAIN_COLUMNS: tuple[str, ...] = (
    "cell", "kernel", "param", "fixed", "baseline", "value", "verdict", "work", "time",
    "deltas", "reasons", "lean", "bound_baseline", "bound_value", "launches_baseline",
    "launches_value",
)


def explain_rows(explained: Iterable[GroupExplanation]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for group in explained:
        for row in group.rows:
            record: dict[str, object] = {
                "cell": group.group.cell,
                "kernel": group.group.kernel,
                "param": row.param,
                "fixed": ",".join(f"{k}={v}" for k, v in group.group.fixed),
                "baseline": format_param(row.baseline_value),
                "value": format_param(row.value),
                "verdict": row.verdict,
                "work": row.work,
                "time": row.time,
                "deltas": row.deltas,
                "reasons": "; ".join(row.reasons),
                "lean": row.lean,
                "bound_baseline": row.baseline_model.bound,
                "bound_value": row.value_model.bound,
                "launches_baseline": row.launches[0],
                "launches_value": row.launches[1],
            }
            for change in row.fields:
                record[f"{change.field}_state"] = change.state
                record[f"{change.field}_delta"] = change.delta
            rows.append(record)
    return rows
