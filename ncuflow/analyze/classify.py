"""The critical-path max model: which wall binds a kernel launch, with the evidence.

Each term is a lower bound on kernel time from one resource, expressed as its
utilization u = T / D of the measured duration D:

    u_dram  = dram_bytes / dram_peak_bw / D
    u_l2    = max of NVIDIA's L2 (lts__) speed-of-light breakdown metrics
    u_l1    = max of NVIDIA's L1/TEX (l1tex__) breakdown metrics
    u_issue = inst_issued / (SMSPs × sm_clock × D), or the issue breakdown metrics
    u_math  = max of the FP / ALU / tensor pipe breakdown metrics

The largest u names the bound; when even that is below the on-wall threshold
(default 0.6, NVIDIA's own "latency issues" line) the launch is ``latency``-bound.
A term that cannot be computed is carried as unavailable with the metric it lacks.
Pure functions over ``Launch`` records: no I/O, no ncu_report, no polars.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ncuflow.errors import UsageError
from ncuflow.read.launch import Launch
from ncuflow.read.metrics import first_choice

DEFAULT_THRESHOLD = 0.6

TERM_NAMES: tuple[str, ...] = ("dram", "l2", "l1", "issue", "math")
BOUNDS: tuple[str, ...] = (*TERM_NAMES, "latency", "unknown")
MEMORY_TERMS = frozenset({"dram", "l2", "l1"})
COMPUTE_TERMS = frozenset({"issue", "math"})


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
class Term:
    """One term of the max model for one launch."""

    name: str
    utilization: float | None
    source: str | None  # the metric or formula the value came from
    unavailable: str | None = None  # why it is None: the metric(s) missing

    @property
    def available(self) -> bool:
        return self.utilization is not None


@dataclass(frozen=True)
class NvidiaComparison:
    """NVIDIA's SOLBottleneck rule result next to ours."""

    title: str  # the rule's own title, e.g. "Latency Issue"
    category: str  # "memory" / "compute" / "latency" / "balanced"
    ours: str  # our verdict mapped the same way
    agrees: bool
    reason: str | None  # why they disagree, in words; None when they agree


@dataclass(frozen=True)
class Verdict:
    bound: str  # one of BOUNDS
    terms: tuple[Term, ...]
    threshold: float
    nvidia: NvidiaComparison | None

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

    def evidence(self) -> str:
        """One line: the terms compared, their sources, and what could not be computed."""
        parts = [
            f"u_{t.name}={t.utilization:.2f} ({t.source})" for t in self.terms if t.utilization is not None
        ]
        missing = [f"u_{t.name} unavailable ({t.unavailable})" for t in self.terms if t.utilization is None]
        rule = f"max u vs on-wall threshold {self.threshold:.2f}"
        return "; ".join([*parts, *missing, rule])


# ---------------------------------------------------------------------------
# breakdown grouping: NVIDIA's per-unit throughput metrics -> our terms

_MATH_PIPES = re.compile(
    r"^sm__(pipe_(fma|fmaheavy|fmalite|alu|aluheavy|fp16|fp64|tensor|shared|dmma|hmma|imma)"
    r"|inst_executed_pipe_(fp16|fp64|xu|fma|alu|tensor))"
)


@functools.lru_cache(maxsize=4096)
def breakdown_group(metric: str) -> str | None:
    """Which term one speed-of-light breakdown metric belongs to (None: none of ours)."""
    if metric.startswith(("dram__", "fbpa__")):
        return "dram"
    if metric.startswith("lts__"):
        return "l2"
    if metric.startswith("l1tex__") or metric.startswith("sm__pipe_tma"):
        return "l1"
    if _MATH_PIPES.match(metric):
        return "math"
    if metric.startswith(("sm__", "smsp__", "idc__")):
        return "issue"
    return None


def group_maxima(breakdown: Mapping[str, float]) -> dict[str, tuple[float, str]]:
    """Per term, the largest breakdown metric of its group: (% of peak, metric)."""
    best: dict[str, tuple[float, str]] = {}
    for metric, pct in breakdown.items():
        group = breakdown_group(metric)
        if group is not None and (group not in best or pct > best[group][0]):
            best[group] = (pct, metric)
    return best


# ---------------------------------------------------------------------------
# the terms


def _missing_text(launch: Launch, *fields: str) -> str:
    absent = [f for f in fields if launch.value(f) is None]
    return ", ".join(f"{f} ({launch.notes.get(f) or 'first choice ' + first_choice(f)})" for f in absent) or "no source"


def _dram_term(launch: Launch, maxima: Mapping[str, tuple[float, str]]) -> Term:
    duration = launch.value("duration_ns")
    dram_bytes = launch.value("dram_bytes")
    peak = launch.value("dram_peak_bw")
    if duration and dram_bytes is not None and peak:
        return Term("dram", dram_bytes / peak / (duration * 1e-9), "dram_bytes / dram_peak_bw / duration")
    pct = launch.value("dram_throughput_pct")
    if pct is not None:
        return Term("dram", pct / 100.0, launch.provenance.get("dram_throughput_pct"))
    best = maxima.get("dram")
    if best is not None:
        return Term("dram", best[0] / 100.0, best[1])
    return Term("dram", None, None, _missing_text(launch, "duration_ns", "dram_bytes", "dram_peak_bw", "dram_throughput_pct"))


def _breakdown_term(
    launch: Launch, maxima: Mapping[str, tuple[float, str]], name: str, fallback_field: str
) -> Term:
    best = maxima.get(name)
    if best is not None:
        return Term(name, best[0] / 100.0, best[1])
    pct = launch.value(fallback_field)
    if pct is not None:
        return Term(name, pct / 100.0, launch.provenance.get(fallback_field))
    return Term(name, None, None, f"no SpeedOfLight breakdown and {_missing_text(launch, fallback_field)}")


def _issue_term(launch: Launch, maxima: Mapping[str, tuple[float, str]]) -> Term:
    candidates: list[Term] = []
    issued = launch.value("inst_issued")
    sm_count = launch.value("sm_count")
    schedulers = launch.value("schedulers_per_sm")
    clock = launch.value("sm_clock_hz")
    duration = launch.value("duration_ns")
    if issued is not None and sm_count and schedulers and clock and duration:
        slots = sm_count * schedulers * clock * duration * 1e-9
        candidates.append(Term("issue", issued / slots, "inst_issued / (SMSPs × sm_clock × duration)"))
    best = maxima.get("issue")
    if best is not None:
        candidates.append(Term("issue", best[0] / 100.0, best[1]))
    if not candidates:
        pct = launch.value("issue_active_pct")
        if pct is not None:
            return Term("issue", pct / 100.0, launch.provenance.get("issue_active_pct"))
        return Term(
            "issue", None, None,
            _missing_text(launch, "inst_issued", "sm_clock_hz", "duration_ns", "issue_active_pct"),
        )
    return max(candidates, key=lambda t: t.utilization or 0.0)


def model_terms(launch: Launch) -> tuple[Term, ...]:
    maxima = group_maxima(launch.breakdown)
    return (
        _dram_term(launch, maxima),
        _breakdown_term(launch, maxima, "l2", "l2_throughput_pct"),
        _breakdown_term(launch, maxima, "l1", "l1_throughput_pct"),
        _issue_term(launch, maxima),
        _breakdown_term(launch, maxima, "math", "tensor_pipe_pct"),
    )


def bound_of(terms: tuple[Term, ...], threshold: float) -> str:
    available = [t for t in terms if t.utilization is not None]
    if not available:
        return "unknown"
    top = max(available, key=lambda t: t.utilization or 0.0)
    assert top.utilization is not None
    return top.name if top.utilization >= threshold else "latency"


# ---------------------------------------------------------------------------
# NVIDIA's SOLBottleneck rule, mapped the same way


def nvidia_category(title: str) -> str | None:
    """Map the SOLBottleneck rule's title to memory / compute / latency / balanced."""
    text = title.strip().lower()
    if text in ("latency issue", "latency issues", "small grid", ""):
        return "latency"
    if "memory" in text:
        return "memory"
    if "compute" in text:
        return "compute"
    if "balanced" in text or text == "high throughput":
        return "balanced"
    return None


def our_category(bound: str) -> str:
    if bound in MEMORY_TERMS:
        return "memory"
    if bound in COMPUTE_TERMS:
        return "compute"
    return bound


def _disagreement_reason(launch: Launch, verdict_bound: str, terms: tuple[Term, ...], threshold: float, nvidia: str) -> str:
    sm_pct = launch.value("sm_throughput_pct")
    mem_pct = launch.value("memory_throughput_pct")
    top = max((t for t in terms if t.utilization is not None), key=lambda t: t.utilization or 0.0, default=None)
    nvidia_figures = (
        f"NVIDIA's figures: compute {sm_pct:.1f} %, memory {mem_pct:.1f} %"
        if sm_pct is not None and mem_pct is not None
        else "NVIDIA's figures are not in the report"
    )
    if top is None or top.utilization is None:
        return f"no term of the model could be computed; {nvidia_figures}"
    ours = f"largest term u_{top.name}={top.utilization:.2f} from {top.source}"
    if nvidia == "latency":
        if sm_pct is not None and mem_pct is not None and max(sm_pct, mem_pct) / 100 < threshold <= top.utilization:
            return (
                f"{ours} is above the on-wall threshold {threshold:.2f}, but it is not one of the "
                f"figures NVIDIA's rule compares ({nvidia_figures})"
            )
        return f"NVIDIA's rule saw a latency issue (e.g. a grid too small to fill the device) while {ours} is on a wall; {nvidia_figures}"
    if verdict_bound == "latency":
        return (
            f"{ours} is below the on-wall threshold {threshold:.2f}; NVIDIA's rule compares compute "
            f"against memory and fired on their imbalance ({nvidia_figures})"
        )
    return (
        f"{ours}; NVIDIA compares its compute and memory figures only ({nvidia_figures}), and its "
        f"memory figure includes units our split assigns elsewhere"
    )


def compare_with_nvidia(launch: Launch, bound: str, terms: tuple[Term, ...], threshold: float) -> NvidiaComparison | None:
    if launch.nvidia_sol is None:
        return None
    category = nvidia_category(launch.nvidia_sol)
    if category is None:
        return None
    ours = our_category(bound)
    agrees = ours in ("memory", "compute") if category == "balanced" else ours == category
    reason = None if agrees else _disagreement_reason(launch, bound, terms, threshold, category)
    return NvidiaComparison(launch.nvidia_sol, category, ours, agrees, reason)


def classify(launch: Launch, threshold: float = DEFAULT_THRESHOLD) -> Verdict:
    """The verdict of the max model for one launch, with every term and its source."""
    threshold = check_threshold(threshold)
    terms = model_terms(launch)
    bound = bound_of(terms, threshold)
    return Verdict(bound, terms, threshold, compare_with_nvidia(launch, bound, terms, threshold))


# Tier 1 leaves a launch undecided when its largest lower bound is below the on-wall
# threshold but within this factor of it: a term tier 1 does not see (a math pipe, an L1
# or L2 port) may then be on a wall. Chosen on the corpus (analysis/bench_passes.py).
ESCALATION_BAND = 0.75


def undecided(verdict: Verdict, band: float = ESCALATION_BAND) -> bool:
    """The verdict is not decided by what was collected: no term computed, or the largest just
    below the threshold (``ncuflow.profile.escalation`` then collects tier 2).

    A lower bound at or above the threshold already proves the launch is on a wall; far
    below it, the corpus shows the terms tier 1 does not see never lift it over.
    """
    available = [t.utilization for t in verdict.terms if t.utilization is not None]
    if not available:
        return True
    top = max(available)
    return verdict.threshold * band <= top < verdict.threshold
