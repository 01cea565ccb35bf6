"""Replay stability: do repeated measurements of one kernel give the same numbers?

Input is groups of ``Launch`` records that should be measurements of the same thing
(``ncuflow.analyze.measurement``): the replicas of one cell (runs with the same content
key, each a fresh ncu process), or the repeated launches of one kernel inside one report.
Per field the spread is ``(max - min) / |median|`` and each field belongs to a tolerance
class of the field table (``ncuflow.analyze.fields``):

    exact work counters  global_ld_inst, inst_executed, global_ld_requests,
                         global_ld_sectors                             identical
    near-exact counters  inst_issued (re-issues of stalled instructions) <= 0.5 %
    bytes                dram_bytes_read, dram_bytes_write, dram_bytes  <= 0.2 % of the
                                                                        launch's dram_bytes
    rates and ratios     l2_hit_rate_pct, dram_throughput_pct,
                         sectors_per_request                          <= 2 % relative
                                                                      (floor 1 point for %)
    time                 duration_ns                                  <= 2 % relative
                                                                      (floor 320 ns)

A field is within tolerance when ``max - min`` is inside its noise band
``max(tolerance × scale, floor)`` (``fields.noise_band``). A percentage's spread is
said in percentage points, so that "8.45 points" is never read as a relative 8.45 %.

Replicas are judged only among launches that did the same work (``ncuflow.analyze.work``):
launches of one kernel whose instructions or global-load requests differ did
``different_work`` (the verdict names the counters and their values), and each set of
launches that did one work is judged as a group of its own (its ``parts``). Repeated
launches inside a report that hold no such counter cannot be shown to repeat one work:
they are ``insufficient``, their spreads shown but not judged. Runs of one cell at one
parameter setting are replicas by construction (the cell fixes the inputs).

A group's headline follows what its verdict rests on (``ncuflow.analyze.decides``): it is
``stable`` when its time and work counters are within tolerance, every launch reached the
same verdict, and each field feeding the binding term is within tolerance; ``unstable``
when any of these is not (the verdict names each field and by how much, or the verdicts
that differ); ``insufficient`` when fewer than two launches (or no field) can be compared.
A field off the critical path that moved beyond its band keeps its own "unstable" verdict
(tables, parquet) and is named in the summary as moved and not binding; it does not turn
the headline. A field the launches do not hold is named as missing, never treated as 0.

Pure functions over frozen dataclasses; the tables (rows, the polars frame) are
``ncuflow.analyze.stability_table``'s, so that a GPU host without polars can use the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from ncuflow.analyze.decides import Decision, decides, decision_of
from ncuflow.analyze.fields import (
    CLASS_TITLES,
    DEFAULT_TOLERANCES,
    FIELD_CLASSES,
    FIELD_UNITS,
    IDENTITY_FIELDS,
    STABILITY_FIELDS,
    WORK_FIELDS,
    ToleranceClass,
    Tolerances,
    format_pct,
    format_tolerance,
    format_value,
    noise_band,
    spec_of,
)
from ncuflow.analyze.measurement import (
    CONFIG_FIELDS,
    FieldStats,
    Measurement,
    group_by_signature,
    has_launch_config,
    launch_signature,
    signature_label,
    signature_labels,
)
from ncuflow.analyze.work import (
    Work,
    describe_works,
    differing_fields,
    split_by_work,
    work_measured,
    works_of,
)
from ncuflow.read.launch import Launch
from ncuflow.spread import relative_spread

FieldVerdict = Literal["stable", "unstable", "insufficient", "missing"]
GroupVerdict = Literal["stable", "unstable", "insufficient", "different_work"]
GROUP_VERDICTS: tuple[GroupVerdict, ...] = ("stable", "unstable", "insufficient", "different_work")

__all__ = [
    "CLASS_TITLES", "CONFIG_FIELDS", "DEFAULT_TOLERANCES", "FIELD_CLASSES", "FIELD_UNITS", "STABILITY_FIELDS",
    "WORK_FIELDS", "ToleranceClass", "Tolerances", "format_pct", "format_tolerance", "format_value",
    "group_by_signature", "has_launch_config", "launch_signature", "relative_spread", "signature_label",
    "signature_labels",
]

# ---------------------------------------------------------------------------
# statistics


@dataclass(frozen=True)
class FieldStability:
    """The spread of one field over one group of launches, against its noise band."""

    field: str
    tolerance_class: ToleranceClass
    tolerance: float
    n: int  # launches that hold a value for the field
    median: float | None
    minimum: float | None
    maximum: float | None
    spread: float | None  # (max - min) / |median| of the field itself
    verdict: FieldVerdict
    band: float | None = None  # max - min may be this wide (absolute, the field's unit)
    scale: float | None = None  # what the tolerance is relative to (the reference's median)
    reference: str | None = None  # the field the tolerance is relative to, when not itself
    decides: bool = True  # on the critical path: time, work, or a field feeding the binding term

    @property
    def judged(self) -> float | None:
        """The spread as judged: (max - min) relative to the scale the tolerance applies to."""
        if self.minimum is None or self.maximum is None or self.n < 2:
            return None
        if self.reference is None or not self.scale:
            return self.spread
        return (self.maximum - self.minimum) / self.scale

    @property
    def excess(self) -> float | None:
        """How far over its tolerance (judged spread - tolerance), for unstable fields."""
        judged = self.judged
        if judged is None:
            return None
        return judged - self.tolerance

    @property
    def in_points(self) -> bool:
        """A percentage (0–100 scale): its spread is said in percentage points."""
        return FIELD_UNITS.get(self.field) == "%"

    @property
    def points(self) -> float | None:
        """max - min of a percentage, in percentage points."""
        if not self.in_points or self.minimum is None or self.maximum is None:
            return None
        return self.maximum - self.minimum

    def spread_text(self) -> str:
        """e.g. '4.08 %', '4.08 % (0.14 % of dram_bytes)', or for a percentage '8.45 points'."""
        if self.points is not None and self.n >= 2:
            return f"{_points(self.points)} ({format_pct(self.spread)} of median)"
        text = format_pct(self.spread)
        if self.reference is not None and self.judged is not None:
            text += f" ({format_pct(self.judged)} of {self.reference})"
        return text

    def tolerance_text(self) -> str:
        """The tolerance as the tables print it, naming the reference and the floor."""
        if self.in_points and self.band is not None:
            at_least = format_value(spec_of(self.field).noise_floor)
            return f"≤ {_points(self.band)} ({format_pct(self.tolerance)} of median, at least {at_least})"
        text = format_tolerance(self.tolerance)
        if self.reference is not None:
            text += f" of {self.reference}"
        floor = spec_of(self.field).noise_floor
        if floor and self.band is not None and self.band <= floor:
            text += f" (floor {format_value(floor)} {FIELD_UNITS.get(self.field, '')})".replace(" )", ")")
        return text

    def excess_text(self) -> str:
        """How an unstable field exceeds its band, in the field's own terms, e.g.
        'l2_hit_rate_pct 8.45 points > 1.75 points' or 'duration_ns 3.31 % > 2.00 %'."""
        if self.points is not None and self.band is not None:
            return f"{self.field} {_points(self.points)} > {_points(self.band)}"
        return (f"{self.field} {format_pct(self.judged)}" + (f" of {self.reference}" if self.reference else "")
                + f" > {format_tolerance(self.tolerance).replace('≤ ', '')}")

    def describe(self) -> str:
        """e.g. 'duration_ns spread 3.31 % (tolerance ≤ 2.00 %; 17,184 … 17,760 ns)'."""
        if self.verdict == "missing":
            return f"{self.field} not measured"
        if self.verdict == "insufficient":
            return f"{self.field} measured once"
        unit = FIELD_UNITS.get(self.field, "")
        return (
            f"{self.field} spread {self.spread_text()} "
            f"(tolerance {self.tolerance_text()}; "
            f"{format_value(self.minimum)} … {format_value(self.maximum)} {unit})".replace(" )", ")")
        )


def _points(value: float) -> str:
    """A difference of percentages: '8.45 points', '1 point'."""
    text = f"{value:.2f}" if value else "0"
    return f"{text} point{'' if text in ('1', '1.00') else 's'}"


def field_stability(
    field_name: str, values: Sequence[float], tolerances: Tolerances, *, reference_median: float | None = None
) -> FieldStability:
    """Stats and verdict of one field over the values the launches hold for it.

    ``reference_median`` is the median of the field's noise reference (``fields.py``; the
    launch's total DRAM bytes for byte counts) where the caller has it.
    """
    return judge_field(FieldStats(field_name, tuple(v for v in values if v is not None and math.isfinite(v))),
                       tolerances, reference_median)


def judge_field(stats: FieldStats, tolerances: Tolerances, reference_median: float | None = None) -> FieldStability:
    """A field's statistics against its noise band: stable when max - min fits in it."""
    name = stats.field
    cls = FIELD_CLASSES.get(name, "rate")
    tolerance = tolerances.of(name)
    if stats.n == 0:
        return FieldStability(name, cls, tolerance, 0, None, None, None, None, "missing")
    median, low, high = stats.median, stats.minimum, stats.maximum
    assert median is not None and low is not None and high is not None
    reference = spec_of(name).noise_reference
    use_reference = reference is not None and reference_median is not None and reference_median != 0
    scale = abs(reference_median) if use_reference and reference_median is not None else abs(median)
    band = noise_band(name, tolerance, scale)
    if stats.n < 2:
        return FieldStability(name, cls, tolerance, 1, median, low, high, None, "insufficient", band, scale,
                              reference if use_reference else None)
    stable = (high == low) if band == 0.0 else (high - low) <= band
    return FieldStability(
        name, cls, tolerance, stats.n, median, low, high, stats.spread, "stable" if stable else "unstable",
        band, scale, reference if use_reference else None,
    )


@dataclass(frozen=True)
class GroupStability:
    """The stability of one group of launches: one cell's replicas or one kernel's repeats.

    A ``different_work`` group holds launches that did different work (``works``, the
    counters that differ in ``work_fields``); each work's launches are judged in ``parts``.
    """

    label: str  # what the group is, e.g. a cell spec or "report.ncu-rep: kernel"
    kernel: str
    source: str  # "replicas" (runs of one content key) or "repeated launches" (one report)
    launches: int
    runs: int
    fields: tuple[FieldStability, ...]
    verdict: GroupVerdict
    tolerances: Tolerances
    device: str | None = None
    notes: tuple[str, ...] = ()
    keys: tuple[tuple[str, int, int], ...] = field(default=(), compare=False)
    works: tuple[Work, ...] = ()
    work_fields: tuple[str, ...] = ()
    parts: tuple[GroupStability, ...] = ()
    reason: str | None = None  # why the group is insufficient, where it is not its launch count
    decision: Decision | None = None  # each launch's verdict, counted

    def field(self, name: str) -> FieldStability:
        for item in self.fields:
            if item.field == name:
                return item
        raise KeyError(name)

    @property
    def unstable_fields(self) -> tuple[FieldStability, ...]:
        return tuple(f for f in self.fields if f.verdict == "unstable")

    @property
    def deciding_unstable(self) -> tuple[FieldStability, ...]:
        """Unstable fields on the critical path: these turn the headline."""
        return tuple(f for f in self.unstable_fields if f.decides)

    @property
    def moved_off_path(self) -> tuple[FieldStability, ...]:
        """Fields beyond their band that sit off the critical path: named, not binding."""
        return tuple(f for f in self.unstable_fields if not f.decides)

    @property
    def measured_fields(self) -> tuple[FieldStability, ...]:
        return tuple(f for f in self.fields if f.verdict in ("stable", "unstable"))

    @property
    def missing_fields(self) -> tuple[str, ...]:
        return tuple(f.field for f in self.fields if f.verdict == "missing")

    @property
    def verdict_text(self) -> str:
        return self.verdict.replace("_", " ")

    def summary(self) -> str:
        """The verdict in words, naming the unstable fields and by how much."""
        if self.verdict == "different_work":
            judged = [p for p in self.parts]
            once = len(self.works) - len(judged)
            return (f"different work: {len(self.works)} works among {self.launches} launches "
                    f"({describe_works(self.works, self.work_fields)}); replicas are judged within each work"
                    + (f" ({once} done by one launch only: not compared)" if once else ""))
        if self.verdict == "insufficient":
            if self.reason:
                return f"insufficient: {self.reason}"
            if self.launches < 2:
                return f"insufficient: {self.launches} launch (a spread needs at least 2)"
            return "insufficient: no field is measured in 2 or more launches"
        moved = self._moved_text()
        if self.verdict == "stable":
            within = len(self.measured_fields) - len(self.moved_off_path)
            decision = f"{self.decision.text()}; " if self.decision is not None else ""
            return (f"stable over {self.launches} launches ({decision}{within} field{'' if within == 1 else 's'} "
                    f"within tolerance)" + moved)
        worst = sorted(self.deciding_unstable, key=lambda f: -(f.excess or 0.0))
        reasons = [f.excess_text() for f in worst]
        if self.decision is not None and not self.decision.agrees:
            reasons.append(self.decision.text())
        return "unstable: " + ", ".join(reasons) + moved

    def _moved_text(self) -> str:
        """'; moved off the critical path: l2_hit_rate_pct 8.45 points > 1.75 points (not binding)'."""
        moved = sorted(self.moved_off_path, key=lambda f: -(f.excess or 0.0))
        if not moved:
            return ""
        return "; moved off the critical path: " + ", ".join(f"{f.excess_text()} (not binding)" for f in moved)


def flat(groups: Iterable[GroupStability]) -> list[GroupStability]:
    """Every group and, after a different-work group, its same-work parts: what is printed and counted."""
    out: list[GroupStability] = []
    for group in groups:
        out.append(group)
        out.extend(group.parts)
    return out


def verdict_counts(groups: Iterable[GroupStability]) -> dict[GroupVerdict, int]:
    """How many groups (parts included) have each verdict."""
    every = flat(groups)
    return {verdict: sum(1 for g in every if g.verdict == verdict) for verdict in GROUP_VERDICTS}


def group_verdict(fields: Sequence[FieldStability], launches: int, decision: Decision | None = None) -> GroupVerdict:
    """Unstable when a field on the critical path is, or the launches' verdicts differ."""
    if launches < 2:
        return "insufficient"
    measured = [f for f in fields if f.verdict in ("stable", "unstable")]
    if not measured:
        return "insufficient"
    if decision is not None and not decision.agrees:
        return "unstable"
    return "unstable" if any(f.verdict == "unstable" and f.decides for f in measured) else "stable"


def measurement_stability(
    measurement: Measurement,
    *,
    label: str,
    source: str = "repeated launches",
    tolerances: Tolerances = DEFAULT_TOLERANCES,
    fields: Sequence[str] = STABILITY_FIELDS,
    notes: Sequence[str] = (),
    replicas_by_construction: bool = True,
) -> GroupStability:
    """Per-field spreads and the verdict of one measurement, judged within each work it did.

    ``replicas_by_construction``: the launches repeat one work unless their counters say
    otherwise (runs of one cell setting). Otherwise (repeated launches in a report) a
    group with no work counter is ``insufficient``: nothing shows they repeat one work.
    """
    parts = split_by_work(measurement)
    if len(parts) == 1:
        group = _judged(measurement, label=label, source=source, tolerances=tolerances, fields=fields, notes=notes)
        if not replicas_by_construction and group.launches >= 2 and not work_measured(measurement.launches):
            return replace(group, verdict="insufficient", reason=(
                f"no work counter ({', '.join(IDENTITY_FIELDS)}) in these {group.launches} launches, so "
                "nothing shows that they repeat one work; spreads are shown, not judged"))
        return group
    works = works_of(parts)
    judged = tuple(
        _judged(part, label=f"{label} · work {index} of {len(parts)}", source=f"{source}, same work",
                tolerances=tolerances, fields=fields, notes=notes)
        for index, part in enumerate(parts, start=1) if len(part.launches) >= 2
    )
    whole = _judged(measurement, label=label, source=source, tolerances=tolerances, fields=fields, notes=notes)
    return replace(whole, verdict="different_work", works=works, work_fields=differing_fields(works), parts=judged)


def _judged(
    measurement: Measurement, *, label: str, source: str, tolerances: Tolerances, fields: Sequence[str],
    notes: Sequence[str],
) -> GroupStability:
    """Per-field spreads and the verdict of launches that measure the same thing."""
    def reference_median(name: str) -> float | None:
        reference = spec_of(name).noise_reference
        return measurement.stats(reference).median if reference else None

    launches = measurement.launches
    decision = decision_of(launches)
    per_field = tuple(replace(judge_field(measurement.stats(name), tolerances, reference_median(name)),
                              decides=decides(name, decision)) for name in fields)
    kernels = sorted({launch.kernel.function for launch in launches})
    devices = sorted({launch.device.name for launch in launches if launch.device.name})
    all_notes = list(notes)
    if len(devices) > 1:
        all_notes.append(f"launches come from {len(devices)} different GPUs: {', '.join(devices)}")
    return GroupStability(
        label=label,
        kernel=", ".join(kernels),
        source=source,
        launches=len(launches),
        runs=measurement.runs,
        fields=per_field,
        verdict=group_verdict(per_field, len(launches), decision),
        tolerances=tolerances,
        device=devices[0] if len(devices) == 1 else (", ".join(devices) or None),
        notes=tuple(all_notes),
        keys=tuple(launch.key for launch in launches),
        decision=decision,
    )


def stability_of(
    launches: Sequence[Launch],
    *,
    label: str,
    source: str = "repeated launches",
    runs: int = 1,
    tolerances: Tolerances = DEFAULT_TOLERANCES,
    fields: Sequence[str] = STABILITY_FIELDS,
    notes: Sequence[str] = (),
) -> GroupStability:
    """Per-field spreads and the group verdict of launches that should measure the same thing."""
    kernel = launches[0].kernel.function if launches else ""
    measurement = Measurement(label, (), kernel, tuple(launches), runs=runs)
    return measurement_stability(measurement, label=label, source=source, tolerances=tolerances, fields=fields, notes=notes)


def repeated_launch_stability(
    launches: Sequence[Launch],
    *,
    report_label: str,
    tolerances: Tolerances = DEFAULT_TOLERANCES,
    min_launches: int = 2,
) -> tuple[list[GroupStability], list[str]]:
    """Stability of each kernel launched at least ``min_launches`` times in one report.

    Returns the groups and the labels of kernels launched fewer times (not compared).
    """
    grouped = group_by_signature(launches)
    config_note: tuple[str, ...] = ()
    if not has_launch_config(launches):
        config_note = (
            "launch configuration (grid, block) is not in the extracted launches: repeats are "
            "grouped by kernel name and NVTX range only, so launches with different inputs may be pooled",
        )
    results: list[GroupStability] = []
    singles: list[str] = []
    labels = signature_labels(grouped)
    for sig, members in grouped.items():
        if len(members) < min_launches:
            singles.append(labels[sig])
            continue
        measurement = Measurement(report_label, (), labels[sig], tuple(members))
        results.append(
            measurement_stability(measurement, label=f"{report_label}: {labels[sig]}", source="repeated launches",
                                  tolerances=tolerances, notes=config_note, replicas_by_construction=False)
        )
    return results, singles
