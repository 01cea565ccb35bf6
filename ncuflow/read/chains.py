"""Alias chains: the sources a canonical field can be resolved from, and how they combine.

Metric names change across architectures and Nsight Compute versions, so every
canonical field (``ncuflow.read.metrics``) is resolved through an ordered chain of
*sources*. The first source whose raw metrics all hold a value wins, and the record keeps
which one it was (provenance). A field with no usable source is missing: never 0.

This module is the machinery only (no field data); it imports nothing from ``ncu_report``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Literal

from ncuflow.read.legacy_names import with_legacy_names
from ncuflow.terms import check_term

Combine = Literal["value", "sum", "ratio", "product", "formula"]


@dataclass(frozen=True)
class Source:
    """One way to obtain a canonical field from raw metrics.

    ``op`` says how the raw values combine: ``value`` takes the one metric, ``sum``
    adds them, ``ratio`` divides the first by the second, ``product`` multiplies
    them; the result is then multiplied by ``scale``. ``formula`` is a weighted sum
    of the first ``len(weights)`` metrics times the remaining metrics raised to
    ``powers`` (1 or -1), e.g. (fadd + fmul + 2 × ffma) × cycles, or bytes / pct / duration.
    """

    metrics: tuple[str, ...]
    op: Combine = "value"
    scale: float = 1.0
    weights: tuple[float, ...] = ()
    powers: tuple[float, ...] = ()
    text: str = dataclass_field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.op == "formula" and (not self.weights or len(self.weights) + len(self.powers) != len(self.metrics)):
            raise ValueError(f"a formula source needs one weight or power per metric: {self.metrics}")
        object.__setattr__(self, "text", _label(self))

    def label(self) -> str:
        """How the value was obtained, for provenance columns and evidence lines."""
        return self.text

    def combine(self, values: tuple[float, ...]) -> float | None:
        """Combine raw values; None where the arithmetic is undefined (division by 0)."""
        if self.op == "value":
            result = values[0]
        elif self.op == "sum":
            result = exact_sum(values)
        elif self.op == "product":
            result = math.prod(values)
        elif self.op == "formula":
            terms = len(self.weights)
            result = exact_sum(tuple(w * v for w, v in zip(self.weights, values[:terms], strict=True)))
            for power, value in zip(self.powers, values[terms:], strict=True):
                if power < 0 and value == 0:
                    return None
                result *= value ** power
        else:
            if values[1] == 0:
                return None
            result = values[0] / values[1]
        return result * self.scale


def exact_sum(values: tuple[float, ...]) -> float:
    """The exact sum, or inf where it overflows (``fsum`` raises: metrics of 1e308 did)."""
    try:
        return math.fsum(values)
    except (OverflowError, ValueError):  # ValueError: inf - inf
        return math.inf


def _weighted(weight: float, metric: str) -> str:
    return metric if weight == 1 else f"{weight:g} × {metric}"


def _label(source: Source) -> str:
    metrics, op, scale = source.metrics, source.op, source.scale
    if op == "formula":
        terms = len(source.weights)
        text = " + ".join(_weighted(w, m) for w, m in zip(source.weights, metrics[:terms], strict=True))
        if terms > 1 and source.powers:
            text = f"({text})"
        for power, metric in zip(source.powers, metrics[terms:], strict=True):
            text += f" {'×' if power > 0 else '/'} {metric}"
        return f"{text} × {scale:g}" if scale != 1.0 else text
    sep = {"value": "", "sum": " + ", "ratio": " / ", "product": " × "}[op]
    text = sep.join(metrics) if op != "value" else metrics[0]
    if scale != 1.0:
        text = f"({text}) × {scale:g}" if op != "value" else f"{text} × {scale:g}"
    return text


Kind = Literal[
    "count",  # things counted (bytes, sectors, instructions ...): a whole number, Int64 in the export
    "percent",  # a % of peak (0–100 % per unit, NVIDIA's figures)
    "share",  # a % that is a share of a whole (hits of all sectors): never outside 0–100 %
    "ratio",  # one count over another
    "rate",  # per second: clocks, bandwidths, FLOP/s; a peak is one of these
    "time",  # ns
    "attribute",  # of the launch or the device: grid, block, registers, SM count ...
    "throughput",  # one hardware unit's % of peak: a sub-unit of NVIDIA's speed-of-light figures
]
ToleranceClass = Literal["exact", "near_exact", "bytes", "rate", "time"]
# What cannot be, checked once per launch (``ncuflow.read.sanity``): a whole count in 0 … 2⁶³,
# a share clamped into 0–100 %, a positive peak, a ratio over requests undefined at 0 requests,
# the DRAM peak at the rated clock for HBM; a % of peak, a duration, a rate or a ratio within
# the range its kind can hold (``sanity.RANGES``: a -1e6 % or a 1e308 ns is no measurement).
Sanity = Literal["whole", "share", "positive", "per_request", "rated_peak", "percent", "duration", "rate", "ratio"]
_KIND_SANITY: dict[str, Sanity] = {"count": "whole", "share": "share", "percent": "percent", "throughput": "percent",
                                   "time": "duration", "rate": "rate", "ratio": "ratio"}


@dataclass(frozen=True)
class Tolerance:
    """How replay stability, explain and compare judge a field (``ncuflow.analyze.fields``)."""

    cls: ToleranceClass
    floor: float = 0.0  # absolute floor of the noise band, in the field's unit
    reference: str | None = None  # judge the spread against this field's median
    work: bool = False  # counts as work in explain's work condition
    identity: bool = False  # launches that differ in it did different work (``analyze.work``)
    why: str = ""  # the measurements behind the class, floor and reference


@dataclass(frozen=True)
class Display:
    """How a field is shown: its column label and decimals, and where it appears by rank."""

    label: str | None = None  # short column header of console tables
    digits: int | None = None  # fixed decimals (None: 4 significant digits)
    classify: int | None = None  # rank among ``ncuflow classify``'s columns and --json keys
    evidence: int | None = None  # rank among explain's and compare's evidence lines (1–3: the headline work)
    plot: bool = False  # drawn by the sweep plot's work panel
    stand_in: str | None = None  # a field shown, marked, in its column where this one is missing


@dataclass(frozen=True)
class Part:
    """One part of a total that is the sum of the kinds a chip has (``Derived``)."""

    field: str
    since: float  # the first compute capability that has this kind (0: every chip)
    kind: str  # what it counts, for notes: "LDGSTS (cp.async)"


@dataclass(frozen=True)
class CanonicalField:
    """One row of the counter table: everything ncuflow knows about one counter.

    ``sources`` is its alias chain (each a way to read the same events; the first complete
    one wins and is kept as provenance). A field with ``parts`` has no chain: it is the
    sum of the kinds its chip has, each a field of its own (``ncuflow.read.sanity``).
    """

    name: str
    unit: str
    sources: tuple[Source, ...]
    description: str
    kind: Kind = "rate"
    tolerance: Tolerance | None = None  # None: not judged by stability, explain or compare
    tier: int | None = None  # the decisive tier that collects its first choice (1, 2), or None
    sanity: Sanity | None = None  # None: the kind's rule (counts whole, shares clamped)
    terms: tuple[str, ...] = ()  # the max-model terms it feeds (``ncuflow.terms``)
    display: Display = Display()
    parts: tuple[Part, ...] = ()  # a total of per-kind fields (``global_ld_inst``)
    wall: bool = True  # a throughput sub-unit that bounds time (False: one its class leaves out)
    unit_id: str | None = None  # the hardware unit a throughput reads, where two terms read one unit

    def __post_init__(self) -> None:
        for term in self.terms:
            check_term(term)
        if self.tier not in (None, 1, 2):
            raise ValueError(f"{self.name}: the decisive collection has tiers 1 and 2, not {self.tier}")
        if self.sanity is None and self.kind in _KIND_SANITY:
            object.__setattr__(self, "sanity", _KIND_SANITY[self.kind])
        if self.kind == "throughput" and len(self.terms) != 1:
            raise ValueError(f"{self.name}: a throughput sub-unit feeds exactly one term")

    @property
    def first_choice(self) -> tuple[str, ...]:
        """The raw metrics of the chain's first source (what a collection asks ncu for)."""
        return self.sources[0].metrics if self.sources else ()

    @property
    def is_count(self) -> bool:
        return self.kind == "count"

    @property
    def positive(self) -> bool:
        """Whether a source giving 0 or less is passed over (a peak: its sanity rule)."""
        return self.sanity == "positive"


Counter = CanonicalField  # the row's name in the docs: one counter, one row


def single_sources(*names: str, scale: float = 1.0) -> tuple[Source, ...]:
    """Each name as a single-metric source, in order, then the ncu 2019.x names of those that had
    one (``ncuflow.read.legacy_names``)."""
    return tuple(Source((n,), "value", scale) for n in with_legacy_names(names))


def resolve(
    field: CanonicalField, lookup: Callable[[str], float | None]
) -> tuple[float | None, str | None]:
    """Resolve one field through its alias chain.

    ``lookup`` returns a raw metric's value, or None where the report has no value
    for it. A source that gives no number (a division by 0), or 0 or less for a field that
    must be positive (a peak), is passed over. Returns ``(value, provenance)``, or ``(None, None)`` when no source in the
    chain is complete.
    """
    for source in field.sources:
        raw: list[float] = []
        for metric in source.metrics:
            value = lookup(metric)
            if value is None or not math.isfinite(value):
                break
            raw.append(value)
        else:
            combined = raw[0] * source.scale if source.op == "value" else source.combine(tuple(raw))
            if combined is not None and math.isfinite(combined) and (combined > 0 or not field.positive):
                return combined, source.text
    return None, None
