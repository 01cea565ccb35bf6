"""The field table: what ncuflow knows about each canonical field, in one place.

``ncuflow.read.metrics`` says where a field comes from (its alias chain of raw metrics)
and its unit; this table adds what analysis and output need: the tolerance class and
noise band replay stability and explain judge it with, the model terms it feeds, how
it is shown (column label, digits) and its JSON key. Stability, explain, compare, the
console tables, Markdown, the plots and ``classify --json`` read it from here.

Noise bands (``noise_band``): a field is judged stable, or unchanged, when its values
lie within ``max(tolerance × scale, floor)`` of each other, where ``scale`` is the
median of the field itself, or of ``noise_reference`` (another field) where one is set.
The classes and floors are set from replays of the same cells on an H200 (ncu 2025.3.1,
``profiles/reference/h200``, 15 cells with 2–3 replicas) and each field's ``why`` records
the numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from ncuflow.errors import UsageError
from ncuflow.read.deep_metrics import STALL_REASONS
from ncuflow.read.metrics import FIELDS, FIELDS_BY_NAME, CanonicalField

ToleranceClass = Literal["exact", "near_exact", "bytes", "rate", "time"]
TOLERANCE_CLASSES: tuple[ToleranceClass, ...] = ("exact", "near_exact", "bytes", "rate", "time")

CLASS_TITLES: Mapping[str, str] = {
    "exact": "exact work counters",
    "near_exact": "near-exact counters",
    "bytes": "bytes",
    "rate": "rates and ratios",
    "time": "time",
}

# The default relative tolerance of each class (fractions: 0.002 is 0.2 %).
CLASS_TOLERANCES: Mapping[str, float] = {
    "exact": 0.0,
    "near_exact": 0.005,
    "bytes": 0.002,
    "rate": 0.02,
    "time": 0.02,
}

# The one spelling of each unit is ``read.metrics``'s; tables print these short symbols.
UNIT_SYMBOLS: Mapping[str, str] = {
    "byte": "B",
    "request": "req",
    "sector": "sect",
    "sector/request": "sect/req",
}

# gpu__time_duration ticks in 32 ns steps on the H200 (every stored duration is a multiple of 32).
DURATION_FLOOR_NS = 320.0  # ten ticks
PERCENT_POINT_FLOOR = 1.0  # on the 0–100 scale of hit rates and % of peak


@dataclass(frozen=True)
class FieldSpec:
    """One canonical field as analysis and output see it."""

    name: str
    tolerance_class: ToleranceClass | None = None  # None: not judged by stability
    work: bool = False  # counts as work in explain's work condition
    identity: bool = False  # launches that differ in it did different work (``analyze.work``)
    terms: frozenset[str] = frozenset()  # the max-model terms it feeds
    noise_reference: str | None = None  # judge the spread against this field's median
    noise_floor: float = 0.0  # absolute floor of the noise band, in the field's unit
    label: str | None = None  # short column header of console tables
    digits: int | None = None  # fixed decimals in console tables (None: format_value)
    why: str = ""  # the reasoning behind the class, floor and reference

    def __post_init__(self) -> None:
        # the table joins ``read.metrics.FIELDS`` by name: a name it does not know is a typo, found here
        for name in (self.name, self.noise_reference):
            if name is not None and name not in FIELDS_BY_NAME:
                raise ValueError(f"the field table names {name!r}, which ncuflow.read.metrics does not define")

    @property
    def canonical(self) -> CanonicalField:
        """The sources (alias chain), unit and description from ``ncuflow.read.metrics``."""
        return FIELDS_BY_NAME[self.name]

    @property
    def unit(self) -> str:
        return self.canonical.unit

    @property
    def symbol(self) -> str:
        return UNIT_SYMBOLS.get(self.unit, self.unit)

    @property
    def json_key(self) -> str:
        """The key in JSON output and the column in parquet: the field's name, always."""
        return self.name

    def format(self, value: float | None) -> str:
        """The value as a console table shows it (no unit)."""
        if value is None:
            return "—"
        if self.name == "duration_ns":
            return duration_text(value)
        if self.digits is not None:
            return f"{value:,.{self.digits}f}"
        return format_value(value)


_BYTES_WHY = (
    "DRAM bytes are judged against the launch's total DRAM traffic (dram_bytes), the quantity "
    "T_DRAM is computed from: a small kernel writes back a few hundred KB of L2 more or less "
    "from one replay to the next (H200 copy_bandwidth 16 MiB: 577,536 vs 601,600 B written, "
    "4.1 % of the write bytes but 0.14 % of the 17.4 MB total; the paged/flat decode split "
    "kernels: 0.3–7 % of their write bytes, ≤ 0.02 % of their total where the L2 behaves)"
)
_PCT_WHY = (
    "a percentage on the 0–100 scale: at low values a relative spread exaggerates (H200 "
    "merge_splits_kernel, 14 cells: L2 hit ~13 % moves 0.04–0.68 points between replays, up to "
    "5.2 % relative; DRAM % of peak ~15 % moves up to 0.48 points, 3.3 % relative, with the "
    "duration of a 6 µs kernel), so the band has a floor of "
    f"{PERCENT_POINT_FLOOR:g} percentage point"
)

_TABLE: tuple[FieldSpec, ...] = (
    FieldSpec(
        "duration_ns", "time", label="duration",
        noise_floor=DURATION_FLOOR_NS,
        why=(
            "2 % relative, with a floor of ten 32-ns timer ticks: a 6 µs kernel's duration "
            "moves by 32–224 ns between replays (H200 merge_splits_kernel, 14 cells: up to "
            "3.8 % relative), while every kernel over 25 µs stayed within 1.9 %"
        ),
    ),
    FieldSpec(
        "global_ld_inst", "exact", work=True, identity=True, terms=frozenset({"l1", "issue"}), label="gld inst",
        digits=0,
        why="executed instructions are fixed by the program and its inputs: identical in every H200 replica",
    ),
    FieldSpec(
        "inst_executed", "exact", work=True, identity=True, terms=frozenset({"issue", "math"}),
        why="identical in every H200 replica (and in repeated launches of corpus reports)",
    ),
    FieldSpec(
        "inst_issued", "near_exact", work=True, terms=frozenset({"issue", "math"}),
        why=(
            "issued instructions include re-issues of stalled instructions, which depend on "
            "timing: they differ between replays by 0.00001–0.18 % on the H200 (merge_splits_kernel "
            "~807,000 issued for 790,528 executed, ±1,460) and 0.0009 % on an A100, while "
            "inst_executed is identical; 0.5 % keeps a real change in the instruction count visible"
        ),
    ),
    FieldSpec(
        "global_ld_requests", "exact", work=True, identity=True, terms=frozenset({"l1", "issue"}),
        why="L1 requests of global loads: identical in every H200 replica",
    ),
    FieldSpec(
        "global_ld_sectors", "exact", work=True, terms=frozenset({"l2", "l1"}),
        why=(
            "L1 sectors of global loads: identical in every H200 replica. Not part of a launch's "
            "work identity (what the program asks for is its instructions and requests): in the "
            "corpus, repeats with identical instructions and requests differ in sectors by "
            "up to 207 of 4.85e9 (A100 conv2d), up to 4,207 of 18.9e6 (A6000) and 0.08 % (H100), "
            "and stability names that as unstable"
        ),
    ),
    FieldSpec(
        "dram_bytes_read", "bytes", work=True, terms=frozenset({"dram", "l2"}),
        noise_reference="dram_bytes", why=_BYTES_WHY,
    ),
    FieldSpec(
        "dram_bytes_write", "bytes", work=True, terms=frozenset({"dram", "l2"}),
        noise_reference="dram_bytes", why=_BYTES_WHY,
    ),
    FieldSpec(
        "dram_bytes", "bytes", work=True, terms=frozenset({"dram", "l2"}),
        why=(
            "total DRAM traffic stays within 0.2 % across H200 replicas where the L2 behaves the "
            "same (≤ 0.02 % for the decode kernels, 0.003–0.14 % for the copies); paged decode "
            "over a shared prefix (L2 hit 84–98 %, depending on which CTA misses first) moves "
            "0.03–0.56 %: a real difference between replays, and flagged"
        ),
    ),
    FieldSpec(
        "l2_hit_rate_pct", "rate", terms=frozenset({"l2", "dram"}), label="L2 hit %", digits=1,
        noise_floor=PERCENT_POINT_FLOOR, why=_PCT_WHY,
    ),
    FieldSpec(
        "dram_throughput_pct", "rate", terms=frozenset({"dram"}), label="DRAM %", digits=1,
        noise_floor=PERCENT_POINT_FLOOR, why=_PCT_WHY,
    ),
    FieldSpec(
        "sectors_per_request", "rate", terms=frozenset({"l1", "l2"}), label="sect/req", digits=2,
        why="a ratio of two exact counters: identical in practice; 2 % relative",
    ),
    FieldSpec("dram_peak_bw", terms=frozenset({"dram"})),
    FieldSpec("issue_active_pct", terms=frozenset({"issue"}), digits=1),
    FieldSpec("sm_clock_hz", terms=frozenset({"issue", "math"})),
    FieldSpec("l2_throughput_pct", terms=frozenset({"l2"}), digits=1),
    FieldSpec("l1_throughput_pct", terms=frozenset({"l1"}), digits=1),
    FieldSpec("tensor_pipe_pct", terms=frozenset({"math"}), digits=1),
    FieldSpec("flops_fp32", terms=frozenset({"math"})),
    # after the verdict (issue 22): roofline work and traffic, occupancy, warp stalls
    *(FieldSpec(f"flops_{p}", terms=frozenset({"math"})) for p in ("fp64", "fp16", "tensor")),
    FieldSpec("l1_bytes", terms=frozenset({"l1"})),
    FieldSpec("l2_bytes", terms=frozenset({"l2"})),
    FieldSpec("occupancy_theoretical_pct", label="theor. occ. %", digits=1),
    FieldSpec("occupancy_achieved_pct", label="achieved occ. %", digits=1),
    FieldSpec("warps_per_sm_theoretical", digits=1),
    FieldSpec("eligible_warps_per_cycle", digits=2),
    FieldSpec("warp_cycles_per_issue", digits=1),
    FieldSpec("waves_per_sm", digits=2),
    *(FieldSpec(f"stall_{reason}", digits=2) for reason in STALL_REASONS),
)

FIELD_TABLE: Mapping[str, FieldSpec] = {
    **{f.name: FieldSpec(f.name) for f in FIELDS},
    **{spec.name: spec for spec in _TABLE},
}


def spec_of(name: str) -> FieldSpec:
    """The table entry of a canonical field (raises ``KeyError`` for a name that is none)."""
    return FIELD_TABLE[name]


# Derived views, in the table's order.
FIELD_CLASSES: Mapping[str, ToleranceClass] = {
    s.name: s.tolerance_class for s in _TABLE if s.tolerance_class is not None
}
STABILITY_FIELDS: tuple[str, ...] = tuple(FIELD_CLASSES)
WORK_FIELDS: tuple[str, ...] = tuple(s.name for s in _TABLE if s.work)
# What a launch's work is (``ncuflow.analyze.work``): launches that differ in one did different work.
IDENTITY_FIELDS: tuple[str, ...] = tuple(s.name for s in _TABLE if s.identity)
WORK_TERMS: Mapping[str, frozenset[str]] = {s.name: s.terms for s in _TABLE if s.work}
FIELD_UNITS: Mapping[str, str] = {name: FIELD_TABLE[name].symbol for name in STABILITY_FIELDS}

# The order work fields are named in explain's evidence lines (the study's questions first).
EVIDENCE_ORDER: tuple[str, ...] = (
    "global_ld_inst", "inst_executed", "dram_bytes", "dram_bytes_read", "dram_bytes_write",
    "global_ld_sectors", "global_ld_requests", "inst_issued",
)
# The work counters the sweep plot draws relative to the baseline.
PLOT_WORK_FIELDS: tuple[str, ...] = (
    "global_ld_inst", "inst_executed", "global_ld_sectors", "dram_bytes_read", "dram_bytes",
)
# The fields of `ncuflow classify` (table columns and --json keys, in order; README documents them).
CLASSIFY_FIELDS: tuple[str, ...] = (
    "duration_ns", "dram_throughput_pct", "l2_hit_rate_pct", "sectors_per_request", "global_ld_inst",
)


def noise_band(field_name: str, tolerance: float, scale: float) -> float:
    """The absolute width within which values of a field count as the same measurement."""
    return max(tolerance * abs(scale), spec_of(field_name).noise_floor)


# ---------------------------------------------------------------------------
# tolerances in use


@dataclass(frozen=True)
class Tolerances:
    """Relative tolerances per class (fractions: 0.002 is 0.2 %), with per-field overrides.

    The defaults are the field table's (``fields.CLASS_TOLERANCES``); each field's absolute
    floor and noise reference come from the table too.
    """

    exact: float = CLASS_TOLERANCES["exact"]
    bytes: float = CLASS_TOLERANCES["bytes"]
    rate: float = CLASS_TOLERANCES["rate"]
    time: float = CLASS_TOLERANCES["time"]
    overrides: tuple[tuple[str, float], ...] = ()
    near_exact: float = CLASS_TOLERANCES["near_exact"]

    def __post_init__(self) -> None:
        for name, value in (("exact", self.exact), ("near_exact", self.near_exact), ("bytes", self.bytes),
                            ("rate", self.rate), ("time", self.time), *self.overrides):
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
            f"{CLASS_TITLES['near_exact']} {format_tolerance(self.near_exact)}",
            f"{CLASS_TITLES['bytes']} {format_tolerance(self.bytes)} of the launch's DRAM bytes",
            f"{CLASS_TITLES['rate']} {format_tolerance(self.rate)} (at least 1 point for %)",
            f"{CLASS_TITLES['time']} {format_tolerance(self.time)} (at least 320 ns)",
        ]
        parts += [f"{name} {format_tolerance(value)}" for name, value in self.overrides]
        return "; ".join(parts)


DEFAULT_TOLERANCES = Tolerances()


# ---------------------------------------------------------------------------
# display


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


def format_tolerance(value: float) -> str:
    return "identical" if value == 0.0 else f"≤ {format_pct(value)}"


def format_value(value: float | None, field_name: str = "") -> str:
    """A field value for tables: integers as integers, others with 4 significant digits."""
    if value is None:
        return "—"
    if math.isinf(value) or math.isnan(value):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"


def duration_text(ns: float | None) -> str:
    """A kernel duration in the unit that reads best (ns, µs or ms)."""
    if ns is None:
        return "—"
    if ns >= 1e6:
        return f"{ns / 1e6:,.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:,.2f} µs"
    return f"{ns:,.0f} ns"
