"""The critical-path max model: which wall binds a kernel launch, with the evidence.

Each term is a lower bound on kernel time from one kind of hardware unit, read as its
utilization u = T / D of the measured duration D (``ncuflow.terms`` has one row per term):

    u_dram  = NVIDIA's gpu__dram_throughput / 100 where the report holds it, else
              dram_bytes / dram_peak_bw / D (the peak named: rated for HBM, measured for GDDR)
    u_l2    = max of the L2 units that move data (every L2 unit of NVIDIA's memory figure)
    u_l1    = max of the L1/TEX units (l1tex__throughput where no unit is in the report)
    u_issue = issue slots: sm__issue_active / sm__inst_issued / sm__inst_executed % of peak,
              else inst_issued / (SMSPs × sm_clock × D)
    u_pipe  = max of the SM's memory-side pipes (LSU, ADU, TEX, MIO, IDC, TMA, CBU)
    u_math  = max of the arithmetic pipes (FMA, ALU, FP16, FP64, XU, tensor)

A unit's % of peak is the exact utilization of that unit, so a term read from the units
a report holds is a lower bound of the term. The units are NVIDIA's speed-of-light
breakdowns, so dram/l2/l1 together are NVIDIA's memory figure and issue/pipe/math its
compute figure. The largest u names the bound; below the on-wall threshold (default 0.6,
NVIDIA's own "latency issues" line) the launch is ``latency``-bound. Where the largest
memory and compute terms tie (an L1 unit and an SM pipe reading one piece of hardware, the
LSU) the verdict says so and follows NVIDIA's class: compute where
``sm__throughput >= gpu__compute_memory_throughput`` (its rule's own test), or where the
report holds neither. Pure functions over ``Launch`` records: no I/O, no polars.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from ncuflow.analyze.l1 import L1Reading, read_l1
from ncuflow.analyze.l2 import L2Reading, read_l2
from ncuflow.analyze.nvidia import NvidiaComparison, compare_with_nvidia, nvidia_category
from ncuflow.analyze.term import Term
from ncuflow.errors import UsageError
from ncuflow.read.launch import Launch
from ncuflow.read.metrics import TERM_FIELDS, first_choice
from ncuflow.read.throughputs import THROUGHPUTS_BY_METRIC, is_wall, unit_label, unit_term
from ncuflow.terms import (
    BOUND_NAMES,
    COMPUTE_TERMS,
    MEMORY_TERMS,
    MODEL_VERSION,
    TERM_NAMES,
    TERMS_BY_NAME,
    category_of,
)

__all__ = [
    "BOUNDS", "COMPUTE_TERMS", "DEFAULT_THRESHOLD", "MEMORY_TERMS", "MODEL_VERSION", "TERM_NAMES", "NvidiaComparison",
    "Term", "Verdict", "bound_of", "breakdown_group", "classify", "nvidia_category", "undecided",
]

DEFAULT_THRESHOLD = 0.6
BOUNDS: tuple[str, ...] = BOUND_NAMES
# Two terms whose u differ by less than this (relative) tie: "to six decimals".
TIE = 1e-6
# ... and two read from one hardware unit (l1tex__lsuin_requests, sm__inst_executed_pipe_lsu)
# tie within the rounding of their peaks.
SAME_UNIT_TIE = 1e-3


class ThresholdError(UsageError, ValueError):
    """An on-wall threshold outside (0, 1] (a ValueError too, for callers that catch those)."""


def check_threshold(threshold: object) -> float:
    """The on-wall threshold as a float, refused with a one-paragraph error outside (0, 1]."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 < threshold <= 1.0:
        raise ThresholdError(
            f"The on-wall threshold {threshold!r} is not in (0, 1].",
            "It is the utilization u = T_term / duration at which a term binds; below it the "
            "launch is latency-bound, and u is a fraction of the duration.",
            "Pass a fraction such as 0.6 (the default, NVIDIA's own latency line).",
        )
    return float(threshold)


@dataclass(frozen=True)
class Verdict:
    bound: str  # one of BOUNDS
    terms: tuple[Term, ...]
    threshold: float
    nvidia: NvidiaComparison | None
    tie: str | None = None  # the tie the verdict broke, and how
    l2: L2Reading | None = None  # lts__throughput and the unit that sets it, where the report holds it
    figures: Figures | None = None  # NVIDIA's two speed-of-light figures, where the report holds them
    l1: L1Reading | None = None  # l1tex__throughput and the unit that sets it, where the report holds it
    tensor_pct: float | None = None  # tensor pipes' % of peak, where the report holds it (a part of u_math)
    model: int = MODEL_VERSION

    def term(self, name: str) -> Term:
        for term in self.terms:
            if term.name == name:
                return term
        raise KeyError(name)

    def utilization(self, name: str) -> float | None:
        return self.term(name).utilization

    @property
    def compared(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.terms if t.available)

    @property
    def unavailable(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.terms if not t.available)

    @property
    def without_memory(self) -> str | None:
        """Where no memory term could be computed but a compute term could, what that leaves unknown
        (a report without memory sections: a verdict from the compute terms alone); None otherwise."""
        memory = [t for t in self.terms if t.name in MEMORY_TERMS]
        if any(t.available for t in memory) or not self.compared:
            return None
        return (f"verdict {self.bound} from the compute terms alone: no memory term "
                f"({', '.join(t.name for t in memory)}) could be computed from the report, so the memory side is unknown")

    def evidence(self) -> str:
        """One line: the terms compared, their sources, what could not be computed, the rule."""
        parts = [t.text() for t in self.terms if t.available]
        missing = [t.text() for t in self.terms if not t.available]
        rule = f"max u vs on-wall threshold {self.threshold:.2f}"
        return "; ".join([*parts, *missing, rule])

    def evidence_lines(self) -> list[str]:
        """What ``--evidence`` prints under the terms: the tie broken, the L2 and L1 readings, the tensor cores' use."""
        tensor = (f"tensor cores: tensor pipes {self.tensor_pct:.1f} % of peak (one of the math units u_math takes "
                  f"the max of)" if self.tensor_pct is not None else None)
        return [line for line in (self.tie, self.l2.text() if self.l2 else None, self.l1.text() if self.l1 else None,
                                  tensor) if line]


# ---------------------------------------------------------------------------
# units -> terms


@functools.lru_cache(maxsize=4096)
def breakdown_group(metric: str) -> str | None:
    """Which term one unit throughput feeds (None: none, or a unit that is no wall)."""
    return unit_term(metric) if is_wall(metric) else None


def group_maxima(breakdown: Mapping[str, float]) -> dict[str, tuple[float, str]]:
    """Per term, the largest unit throughput of its group that is a wall: (% of peak, metric)."""
    best: dict[str, tuple[float, str]] = {}
    for metric, pct in breakdown.items():
        group = breakdown_group(metric)
        if group is not None and (group not in best or pct > best[group][0]):
            best[group] = (pct, metric)
    return best


def _unit_text(metric: str) -> str | None:
    return unit_label(metric) if metric in THROUGHPUTS_BY_METRIC else None


def _missing_text(launch: Launch, *fields: str) -> str:
    absent = [f for f in fields if launch.value(f) is None]
    return ", ".join(f"{f} ({launch.notes.get(f) or 'first choice ' + first_choice(f)})" for f in absent) or "no source"


def _from_unit(name: str, best: tuple[float, str]) -> Term:
    return Term(name, best[0] / 100.0, best[1], unit=_unit_text(best[1]))


def _dram_term(launch: Launch, maxima: Mapping[str, tuple[float, str]]) -> Term:
    pct = launch.value("dram_throughput_pct")
    if pct is not None:
        return Term("dram", pct / 100.0, launch.provenance.get("dram_throughput_pct"))
    if "dram" in maxima:
        return _from_unit("dram", maxima["dram"])
    duration, dram_bytes, peak = launch.value("duration_ns"), launch.value("dram_bytes"), launch.value("dram_peak_bw")
    if duration and dram_bytes is not None and peak:
        return Term("dram", dram_bytes / peak / (duration * 1e-9),
                    f"dram_bytes / dram_peak_bw / duration, peak = {launch.provenance.get('dram_peak_bw')}")
    return Term("dram", None, None, _missing_text(launch, "dram_throughput_pct", "duration_ns", "dram_bytes",
                                                  "dram_peak_bw"))


def _unit_term(launch: Launch, maxima: Mapping[str, tuple[float, str]], name: str, fallback: str | None) -> Term:
    if name in maxima:
        return _from_unit(name, maxima[name])
    pct = launch.value(fallback) if fallback else None
    if fallback and pct is not None:
        return Term(name, pct / 100.0, launch.provenance.get(fallback))
    fields = ", ".join(f for f in TERM_FIELDS[name] if f != fallback and launch.value(f) is not None)
    lacking = f"the report counts none of {TERMS_BY_NAME[name].hardware}" + (f"; {fallback} missing too" if fallback else "")
    return Term(name, None, None, lacking + (f"; it holds {fields}" if fields else ""))


def _issue_term(launch: Launch, maxima: Mapping[str, tuple[float, str]]) -> Term:
    measured: list[Term] = []
    if "issue" in maxima:
        measured.append(_from_unit("issue", maxima["issue"]))
    pct = launch.value("issue_active_pct")
    if pct is not None:
        measured.append(Term("issue", pct / 100.0, launch.provenance.get("issue_active_pct"), unit="issue slots used"))
    if measured:
        return max(measured, key=lambda t: t.utilization or 0.0)
    issued, sm_count = launch.value("inst_issued"), launch.value("sm_count")
    schedulers, clock, duration = launch.value("schedulers_per_sm"), launch.value("sm_clock_hz"), launch.value("duration_ns")
    if issued is not None and sm_count and schedulers and clock and duration:
        slots = sm_count * schedulers * clock * duration * 1e-9
        return Term("issue", issued / slots, "inst_issued / (SMSPs × sm_clock × duration)", unit="issue slots used")
    return Term("issue", None, None, _missing_text(launch, "issue_active_pct", "inst_issued", "sm_clock_hz", "duration_ns"))


def model_terms(launch: Launch) -> tuple[Term, ...]:
    maxima = group_maxima(launch.breakdown)
    found = {
        "dram": _dram_term(launch, maxima),
        "l2": _unit_term(launch, maxima, "l2", None),
        "l1": _unit_term(launch, maxima, "l1", "l1_throughput_pct"),
        "issue": _issue_term(launch, maxima),
        "pipe": _unit_term(launch, maxima, "pipe", None),
        "math": _unit_term(launch, maxima, "math", "tensor_pipe_pct"),
    }
    return tuple(found[name] for name in TERM_NAMES)


# ---------------------------------------------------------------------------
# the bound


@dataclass(frozen=True)
class Figures:
    """NVIDIA's two speed-of-light figures (% of peak), where the report holds both."""

    compute: float
    memory: float

    @classmethod
    def of(cls, launch: Launch) -> Figures | None:
        sm, mem = launch.value("sm_throughput_pct"), launch.value("memory_throughput_pct")
        return cls(sm, mem) if sm is not None and mem is not None else None

    def category(self) -> str:
        """NVIDIA's class: its rule tests sm >= mem (compute) first."""
        return "compute" if self.compute >= self.memory else "memory"


def _best(terms: tuple[Term, ...], names: frozenset[str]) -> Term | None:
    found = [t for t in terms if t.name in names and t.utilization is not None]
    return max(found, key=lambda t: t.utilization or 0.0, default=None)


def _same_unit(a: Term, b: Term) -> str | None:
    rows = [THROUGHPUTS_BY_METRIC.get(t.source or "") for t in (a, b)]
    ids = {row.unit_id for row in rows if row is not None}
    return ids.pop() if len(ids) == 1 and None not in ids and all(rows) else None


def _tie(memory: Term, compute: Term) -> str | None:
    """The unit two tying terms both read ("LSU"), "" for a plain tie, None when they do not tie."""
    u, v = memory.utilization or 0.0, compute.utilization or 0.0
    unit = _same_unit(memory, compute)
    limit = SAME_UNIT_TIE if unit else TIE
    if abs(u - v) > limit * max(u, v):
        return None
    return unit or ""


def bound_of(terms: tuple[Term, ...], threshold: float, figures: Figures | None = None) -> str:
    """The binding term (the largest u; at a tie between the classes, NVIDIA's class), or latency."""
    return _decide(terms, threshold, figures)[0]


def _decide(terms: tuple[Term, ...], threshold: float, figures: Figures | None) -> tuple[str, str | None]:
    available = [t for t in terms if t.utilization is not None]
    if not available:
        return "unknown", None
    top = max(available, key=lambda t: t.utilization or 0.0)
    assert top.utilization is not None
    if top.utilization < threshold:
        return "latency", None
    memory, compute = _best(terms, MEMORY_TERMS), _best(terms, COMPUTE_TERMS)
    if memory is None or compute is None:
        return top.name, None
    unit = _tie(memory, compute)
    if unit is None:
        return top.name, None
    category = figures.category() if figures else "compute"
    chosen = compute if category == "compute" else memory
    read = f"both read the {unit} ({memory.source}, {compute.source})" if unit else "a tie"
    why = (f"sm__throughput {figures.compute:.1f} % {'≥' if category == 'compute' else '<'} "
           f"gpu__compute_memory_throughput {figures.memory:.1f} %" if figures
           else "its rule tests sm__throughput >= gpu__compute_memory_throughput first")
    note = (f"tie: u_{memory.name} = u_{compute.name} = {chosen.utilization:.4f}, {read}: the verdict follows "
            f"NVIDIA's class, {category} ({why})")
    return chosen.name, note


def classify(launch: Launch, threshold: float = DEFAULT_THRESHOLD) -> Verdict:
    """The verdict of the max model for one launch, with every term and its source."""
    threshold = check_threshold(threshold)
    terms = model_terms(launch)
    figures = Figures.of(launch)
    bound, tie = _decide(terms, threshold, figures)
    nvidia = compare_with_nvidia(launch, category_of(bound), terms, threshold)
    return Verdict(bound, terms, threshold, nvidia, tie, read_l2(launch, terms), figures,
                   l1=read_l1(launch, terms, threshold), tensor_pct=launch.value("tensor_pipe_pct"))


# Tier 1 leaves a launch undecided when its largest lower bound is below the on-wall
# threshold but within this factor of it: a term tier 1 does not see (a math pipe, an L1
# or L2 port) may then be on a wall. Chosen on the corpus (analysis/bench_passes.py).
ESCALATION_BAND = 0.75


def undecided(verdict: Verdict, band: float = ESCALATION_BAND) -> bool:
    """The verdict is not decided by what was collected: no term computed, the largest just
    below the threshold, or NVIDIA's figures (where the report holds them) showing a unit the
    report lacks on the other side of the threshold or in the other class
    (``ncuflow.profile.escalation`` then collects tier 2).

    A lower bound at or above the threshold already proves the launch is on a wall; far
    below it, the corpus shows the terms tier 1 does not see never lift it over.
    """
    available = [t.utilization for t in verdict.terms if t.utilization is not None]
    if not available:
        return True
    top = max(available)
    figures = verdict.figures
    if figures is not None:
        upper = max(figures.compute, figures.memory) / 100.0
        if (upper >= verdict.threshold) != (top >= verdict.threshold):
            return True
        if top >= verdict.threshold and figures.category() != category_of(verdict.bound) \
                and abs(figures.compute - figures.memory) > 100.0 * TIE:
            return True
    return verdict.threshold * band <= top < verdict.threshold
