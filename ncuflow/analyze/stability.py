"""Replay stability: do repeated measurements of one kernel give the same numbers?

Input is groups of ``Launch`` records that should be measurements of the same
thing: the replicas of one cell (runs with the same content key, each a fresh ncu
process), or the repeated launches of one kernel inside one report. Per field the
relative spread is ``(max - min) / |median|`` and each field belongs to a tolerance
class (METRICS.md):

    exact work counters  global_ld_inst, inst_executed, inst_issued,
                         global_ld_requests, global_ld_sectors        identical
    bytes                dram_bytes_read, dram_bytes_write, dram_bytes  <= 0.2 %
    rates and ratios     l2_hit_rate_pct, dram_throughput_pct,
                         sectors_per_request                          <= 2 % relative
    time                 duration_ns                                  <= 2 % relative

A group is ``stable`` when every measured field is within its tolerance,
``unstable`` when any is not (the verdict names each field and by how much), and
``insufficient`` when fewer than two launches (or no field) can be compared. A field
the launches do not hold is named as missing, never treated as 0.

Pure functions over frozen dataclasses; polars is imported only by ``stability_frame``
so that a GPU host without polars can use the rest.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from ncuflow.errors import UsageError
from ncuflow.read.launch import Launch

if TYPE_CHECKING:  # pragma: no cover
    import polars as pl

ToleranceClass = Literal["exact", "bytes", "rate", "time"]
FieldVerdict = Literal["stable", "unstable", "insufficient", "missing"]
GroupVerdict = Literal["stable", "unstable", "insufficient"]

CLASS_TITLES: Mapping[str, str] = {
    "exact": "exact work counters",
    "bytes": "bytes",
    "rate": "rates and ratios",
    "time": "time",
}

# Field -> tolerance class, in the order reports print them.
FIELD_CLASSES: Mapping[str, ToleranceClass] = {
    "duration_ns": "time",
    "global_ld_inst": "exact",
    "inst_executed": "exact",
    "inst_issued": "exact",
    "global_ld_requests": "exact",
    "global_ld_sectors": "exact",
    "dram_bytes_read": "bytes",
    "dram_bytes_write": "bytes",
    "dram_bytes": "bytes",
    "l2_hit_rate_pct": "rate",
    "dram_throughput_pct": "rate",
    "sectors_per_request": "rate",
}
STABILITY_FIELDS: tuple[str, ...] = tuple(FIELD_CLASSES)
WORK_FIELDS: tuple[str, ...] = tuple(
    name for name, cls in FIELD_CLASSES.items() if cls in ("exact", "bytes")
)

FIELD_UNITS: Mapping[str, str] = {
    "duration_ns": "ns",
    "global_ld_inst": "inst",
    "inst_executed": "inst",
    "inst_issued": "inst",
    "global_ld_requests": "req",
    "global_ld_sectors": "sect",
    "dram_bytes_read": "B",
    "dram_bytes_write": "B",
    "dram_bytes": "B",
    "l2_hit_rate_pct": "%",
    "dram_throughput_pct": "%",
    "sectors_per_request": "sect/req",
}


@dataclass(frozen=True)
class Tolerances:
    """Relative tolerances per class (fractions: 0.002 is 0.2 %), with per-field overrides."""

    exact: float = 0.0
    bytes: float = 0.002
    rate: float = 0.02
    time: float = 0.02
    overrides: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        for name, value in (("exact", self.exact), ("bytes", self.bytes), ("rate", self.rate), ("time", self.time), *self.overrides):
            if not (value >= 0.0 and math.isfinite(value)):
                raise UsageError(
                    f"The tolerance for {name} is {value}, which is not a finite number >= 0.",
                    "Tolerances are relative spreads ((max - min) / median).",
                    "Pass a percentage such as 0.2 or 2.",
                )

    def of_class(self, cls: ToleranceClass) -> float:
        value: float = getattr(self, cls)
        return value

    def of(self, field_name: str) -> float:
        for name, value in self.overrides:
            if name == field_name:
                return value
        return self.of_class(FIELD_CLASSES.get(field_name, "rate"))

    def with_overrides(self, overrides: Mapping[str, float]) -> Tolerances:
        unknown = [name for name in overrides if name not in FIELD_CLASSES]
        if unknown:
            raise UsageError(
                f"No stability field is called {', '.join(unknown)}.",
                "Per-field tolerances apply to the fields stability compares.",
                f"Use one of: {', '.join(STABILITY_FIELDS)}.",
            )
        merged = dict(self.overrides)
        merged.update(overrides)
        return replace(self, overrides=tuple(sorted(merged.items())))

    def describe(self) -> str:
        """One line: the tolerances in use, as the report prints them."""
        parts = [
            f"{CLASS_TITLES['exact']} {format_tolerance(self.exact)}",
            f"{CLASS_TITLES['bytes']} {format_tolerance(self.bytes)}",
            f"{CLASS_TITLES['rate']} {format_tolerance(self.rate)}",
            f"{CLASS_TITLES['time']} {format_tolerance(self.time)}",
        ]
        parts += [f"{name} {format_tolerance(value)}" for name, value in self.overrides]
        return "; ".join(parts)


DEFAULT_TOLERANCES = Tolerances()


def format_tolerance(value: float) -> str:
    return "identical" if value == 0.0 else f"≤ {format_pct(value)}"


def format_pct(fraction: float | None, signed: bool = False) -> str:
    """0.0331 -> '3.31 %' (more digits for small values, so 0.00005 is not '0.00 %')."""
    if fraction is None:
        return "—"
    if math.isinf(fraction):
        return "∞"
    pct = fraction * 100.0
    magnitude = abs(pct)
    digits = 2 if magnitude >= 0.01 or magnitude == 0 else 4 if magnitude >= 0.0001 else 6
    sign = "+" if signed else ""
    return f"{pct:{sign}.{digits}f} %"


def format_value(value: float | None, field_name: str = "") -> str:
    """A field value for tables: integers as integers, others with 4 significant digits."""
    if value is None:
        return "—"
    if math.isinf(value) or math.isnan(value):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"


# ---------------------------------------------------------------------------
# statistics


def relative_spread(values: Sequence[float]) -> float | None:
    """(max - min) / |median|; None for fewer than 2 values; inf when the median is 0 but not all are."""
    if len(values) < 2:
        return None
    low, high = min(values), max(values)
    if high == low:
        return 0.0
    median = statistics.median(values)
    if median == 0:
        return math.inf
    return (high - low) / abs(median)


@dataclass(frozen=True)
class FieldStability:
    """The spread of one field over one group of launches, against its tolerance."""

    field: str
    tolerance_class: ToleranceClass
    tolerance: float
    n: int  # launches that hold a value for the field
    median: float | None
    minimum: float | None
    maximum: float | None
    spread: float | None
    verdict: FieldVerdict

    @property
    def excess(self) -> float | None:
        """How far over its tolerance (spread - tolerance), for unstable fields."""
        if self.spread is None:
            return None
        return self.spread - self.tolerance

    def describe(self) -> str:
        """e.g. 'duration_ns spread 3.31 % (tolerance ≤ 2.00 %; 17,184 … 17,760 ns)'."""
        if self.verdict == "missing":
            return f"{self.field} not measured"
        if self.verdict == "insufficient":
            return f"{self.field} measured once"
        unit = FIELD_UNITS.get(self.field, "")
        return (
            f"{self.field} spread {format_pct(self.spread)} "
            f"(tolerance {format_tolerance(self.tolerance)}; "
            f"{format_value(self.minimum)} … {format_value(self.maximum)} {unit})".replace(" )", ")")
        )


def field_stability(field_name: str, values: Sequence[float], tolerances: Tolerances) -> FieldStability:
    """Stats and verdict of one field over the values the launches hold for it."""
    cls = FIELD_CLASSES.get(field_name, "rate")
    tolerance = tolerances.of(field_name)
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return FieldStability(field_name, cls, tolerance, 0, None, None, None, None, "missing")
    median = statistics.median(finite)
    low, high = min(finite), max(finite)
    if len(finite) < 2:
        return FieldStability(field_name, cls, tolerance, 1, median, low, high, None, "insufficient")
    spread = relative_spread(finite)
    assert spread is not None
    stable = (high == low) if tolerance == 0.0 else spread <= tolerance
    return FieldStability(
        field_name, cls, tolerance, len(finite), median, low, high, spread, "stable" if stable else "unstable"
    )


@dataclass(frozen=True)
class GroupStability:
    """The stability of one group of launches: one cell's replicas or one kernel's repeats."""

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

    def field(self, name: str) -> FieldStability:
        for item in self.fields:
            if item.field == name:
                return item
        raise KeyError(name)

    @property
    def unstable_fields(self) -> tuple[FieldStability, ...]:
        return tuple(f for f in self.fields if f.verdict == "unstable")

    @property
    def measured_fields(self) -> tuple[FieldStability, ...]:
        return tuple(f for f in self.fields if f.verdict in ("stable", "unstable"))

    @property
    def missing_fields(self) -> tuple[str, ...]:
        return tuple(f.field for f in self.fields if f.verdict == "missing")

    def summary(self) -> str:
        """The verdict in words, naming the unstable fields and by how much."""
        if self.verdict == "insufficient":
            if self.launches < 2:
                return f"insufficient: {self.launches} launch (a spread needs at least 2)"
            return "insufficient: no field is measured in 2 or more launches"
        if self.verdict == "stable":
            measured = len(self.measured_fields)
            return f"stable over {self.launches} launches ({measured} field{'' if measured == 1 else 's'} within tolerance)"
        worst = sorted(self.unstable_fields, key=lambda f: -(f.excess or 0.0))
        return "unstable: " + ", ".join(
            f"{f.field} {format_pct(f.spread)} > {format_tolerance(f.tolerance).replace('≤ ', '')}"
            for f in worst
        )


def group_verdict(fields: Sequence[FieldStability], launches: int) -> GroupVerdict:
    if launches < 2:
        return "insufficient"
    measured = [f for f in fields if f.verdict in ("stable", "unstable")]
    if not measured:
        return "insufficient"
    return "unstable" if any(f.verdict == "unstable" for f in measured) else "stable"


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
    """Per-field spreads and the group verdict of launches that measure the same thing."""
    per_field = tuple(
        field_stability(
            name,
            [v for v in (launch.value(name) for launch in launches) if v is not None],
            tolerances,
        )
        for name in fields
    )
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
        runs=runs,
        fields=per_field,
        verdict=group_verdict(per_field, len(launches)),
        tolerances=tolerances,
        device=devices[0] if len(devices) == 1 else (", ".join(devices) or None),
        notes=tuple(all_notes),
        keys=tuple(launch.key for launch in launches),
    )


# ---------------------------------------------------------------------------
# which launches are measurements of the same thing

# Launch-configuration fields: when extraction records them, launches of one kernel
# with different grids or blocks (different work by construction) are kept apart.
CONFIG_FIELDS: tuple[str, ...] = ("grid_size", "block_size", "registers_per_thread", "shared_mem_per_block")


def launch_signature(launch: Launch) -> tuple[object, ...]:
    """What makes two launches repeats of one another: kernel, NVTX ranges, GPU, launch configuration."""
    config = tuple(launch.values.get(name) for name in CONFIG_FIELDS)
    return (launch.kernel.function, launch.kernel.mangled, launch.nvtx, launch.device.name, config)


def signature_label(launch: Launch) -> str:
    """A short human label of a launch signature: kernel name plus its launch configuration."""
    config = [
        f"{name.split('_')[0]}={format_value(launch.values.get(name))}"
        for name in ("grid_size", "block_size")
        if launch.values.get(name) is not None
    ]
    return launch.kernel.function + (f" [{', '.join(config)}]" if config else "")


def signature_labels(groups: Mapping[tuple[object, ...], Sequence[Launch]]) -> dict[tuple[object, ...], str]:
    """A label per signature; kernels that share a function name get a short tag of their mangled name."""
    import hashlib

    labels = {sig: signature_label(members[0]) for sig, members in groups.items()}
    counts: dict[str, int] = {}
    for label in labels.values():
        counts[label] = counts.get(label, 0) + 1
    for sig, members in groups.items():
        if counts[labels[sig]] > 1:
            first = members[0]
            tag = hashlib.sha1(f"{first.kernel.mangled}|{first.nvtx}|{first.device.name}".encode()).hexdigest()[:6]
            labels[sig] = f"{labels[sig]}~{tag}"
    return labels


def has_launch_config(launches: Iterable[Launch]) -> bool:
    return any(launch.values.get("grid_size") is not None for launch in launches)


def group_by_signature(launches: Iterable[Launch]) -> dict[tuple[object, ...], list[Launch]]:
    """Launches grouped by ``launch_signature``, in order of first appearance."""
    groups: dict[tuple[object, ...], list[Launch]] = {}
    for launch in launches:
        groups.setdefault(launch_signature(launch), []).append(launch)
    return groups


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
        label = f"{report_label}: {labels[sig]}"
        if len(members) < min_launches:
            singles.append(labels[sig])
            continue
        results.append(
            stability_of(members, label=label, source="repeated launches", runs=1, tolerances=tolerances, notes=config_note)
        )
    return results, singles


# ---------------------------------------------------------------------------
# tables


STABILITY_COLUMNS: tuple[str, ...] = (
    "group", "kernel", "source", "device", "launches", "runs", "field", "tolerance_class",
    "tolerance", "n", "median", "min", "max", "spread", "field_verdict", "verdict",
)


def stability_rows(groups: Iterable[GroupStability]) -> list[dict[str, object]]:
    """One plain row per (group, field): what the parquet and the Markdown report hold."""
    rows: list[dict[str, object]] = []
    for group in groups:
        for item in group.fields:
            rows.append(
                {
                    "group": group.label,
                    "kernel": group.kernel,
                    "source": group.source,
                    "device": group.device,
                    "launches": group.launches,
                    "runs": group.runs,
                    "field": item.field,
                    "tolerance_class": item.tolerance_class,
                    "tolerance": item.tolerance,
                    "n": item.n,
                    "median": item.median,
                    "min": item.minimum,
                    "max": item.maximum,
                    "spread": item.spread,
                    "field_verdict": item.verdict,
                    "verdict": group.verdict,
                }
            )
    return rows


def stability_frame(groups: Iterable[GroupStability]) -> pl.DataFrame:
    """The numbers as a polars frame (a spread is inf where the median is 0 but the values differ)."""
    import polars as pl

    schema = {
        "group": pl.Utf8, "kernel": pl.Utf8, "source": pl.Utf8, "device": pl.Utf8,
        "launches": pl.Int64, "runs": pl.Int64, "field": pl.Utf8, "tolerance_class": pl.Utf8,
        "tolerance": pl.Float64, "n": pl.Int64, "median": pl.Float64, "min": pl.Float64,
        "max": pl.Float64, "spread": pl.Float64, "field_verdict": pl.Utf8, "verdict": pl.Utf8,
    }
    return pl.DataFrame(stability_rows(groups), schema=schema, orient="row")
