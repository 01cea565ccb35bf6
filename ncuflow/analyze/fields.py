"""The field table as analysis and output see it: a view of the counter table's rows.

``ncuflow.read.metrics`` holds one frozen row per counter: where it comes from (its alias
chain), its unit and kind, its tolerance class and noise floor, the model terms it feeds,
and how it is shown. This module reads those rows into ``FieldSpec`` records and derives
the lists stability, explain, compare, the console tables, Markdown, the plots and
``classify --json`` use; nothing here restates a fact a row holds.

Noise bands (``noise_band``): a field is judged stable, or unchanged, when its values
lie within ``max(tolerance × scale, floor)`` of each other, where ``scale`` is the
median of the field itself, or of ``noise_reference`` (another field) where one is set.
A percentage (unit ``%``) is judged and said in percentage points. The classes and floors
are set from replays of the same cells on an H200 (ncu 2025.3.1, ``profiles/reference/h200``,
15 cells with 2–3 replicas) and each row's ``why`` records the numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ncuflow.errors import UsageError
from ncuflow.read.chains import ToleranceClass
from ncuflow.read.metrics import (
    BYTES_FLOOR,
    DURATION_FLOOR_NS,
    FIELDS,
    FIELDS_BY_NAME,
    PERCENT_POINT_FLOOR,
    CanonicalField,
)

__all__ = ["BYTES_FLOOR", "DURATION_FLOOR_NS", "PERCENT_POINT_FLOOR", "FieldSpec", "ToleranceClass"]

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


@dataclass(frozen=True)
class FieldSpec:
    """One canonical field as analysis and output see it (read off its row, ``spec_of``)."""

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

    @classmethod
    def of_row(cls, row: CanonicalField) -> FieldSpec:
        tolerance = row.tolerance
        return cls(
            row.name,
            tolerance.cls if tolerance else None,
            work=bool(tolerance and tolerance.work),
            identity=bool(tolerance and tolerance.identity),
            terms=frozenset(row.terms),
            noise_reference=tolerance.reference if tolerance else None,
            noise_floor=tolerance.floor if tolerance else 0.0,
            label=row.display.label,
            digits=row.display.digits,
            why=tolerance.why if tolerance else "",
        )

    @property
    def canonical(self) -> CanonicalField:
        """The row: sources (alias chain), unit and description from ``ncuflow.read.metrics``."""
        return FIELDS_BY_NAME[self.name]

    @property
    def unit(self) -> str:
        return self.canonical.unit

    @property
    def symbol(self) -> str:
        return UNIT_SYMBOLS.get(self.unit, self.unit)

    @property
    def in_points(self) -> bool:
        """A percentage on the 0–100 scale: its differences are percentage points."""
        return self.unit == "%"

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


FIELD_TABLE: Mapping[str, FieldSpec] = {row.name: FieldSpec.of_row(row) for row in FIELDS}


def spec_of(name: str) -> FieldSpec:
    """The table entry of a canonical field (raises ``KeyError`` for a name that is none)."""
    return FIELD_TABLE[name]


def _ranked(rank: str) -> tuple[str, ...]:
    ranked = [(getattr(row.display, rank), index, row.name) for index, row in enumerate(FIELDS)
              if getattr(row.display, rank) is not None]
    return tuple(name for _, _, name in sorted(ranked))


# Derived views, in the table's order.
FIELD_CLASSES: Mapping[str, ToleranceClass] = {
    s.name: s.tolerance_class for s in FIELD_TABLE.values() if s.tolerance_class is not None
}
STABILITY_FIELDS: tuple[str, ...] = tuple(FIELD_CLASSES)
WORK_FIELDS: tuple[str, ...] = tuple(s.name for s in FIELD_TABLE.values() if s.work)
# What a launch's work is (``ncuflow.analyze.work``): launches that differ in one did different work.
IDENTITY_FIELDS: tuple[str, ...] = tuple(s.name for s in FIELD_TABLE.values() if s.identity)
WORK_TERMS: Mapping[str, frozenset[str]] = {s.name: s.terms for s in FIELD_TABLE.values() if s.work}
FIELD_UNITS: Mapping[str, str] = {name: FIELD_TABLE[name].symbol for name in STABILITY_FIELDS}

# The order work fields are named in explain's evidence lines (the study's questions first).
EVIDENCE_ORDER: tuple[str, ...] = _ranked("evidence")
# The headline work (evidence ranks 1–3: global loads, instructions, DRAM bytes): what
# compare's per-run totals of a reconfigured kernel show.
HEADLINE_WORK: tuple[str, ...] = tuple(name for name in EVIDENCE_ORDER if (FIELDS_BY_NAME[name].display.evidence or 9) <= 3)
# The work counters the sweep plot draws relative to the baseline.
PLOT_WORK_FIELDS: tuple[str, ...] = tuple(row.name for row in FIELDS if row.display.plot)
# The fields of `ncuflow classify` (table columns and --json keys, in order; README's legend documents them).
CLASSIFY_FIELDS: tuple[str, ...] = _ranked("classify")


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
            f"{CLASS_TITLES['bytes']} {format_tolerance(self.bytes)} of the launch's DRAM bytes (at least "
            f"{BYTES_FLOOR:,.0f} B)",
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
