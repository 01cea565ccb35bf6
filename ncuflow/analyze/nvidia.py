"""NVIDIA's own verdict beside ours: the SOLBottleneck rule result, mapped to our classes.

ncu's ``SpeedOfLight`` rule (``SpeedOfLight.py``, shipped with every ncu) compares two
figures, ``sm__throughput`` (compute) and ``gpu__compute_memory_throughput`` (memory),
each the max of its units: both under 60 % is "Latency Issue" (or "Small Grid" under one
wave), one 10 points above the other "High Compute/Memory Throughput", close ones
"Balanced Throughput", either over 80 % "High Throughput" (``ncuflow.read.sol_verdicts``
holds the names, their classes and how ncu 2020.x's untitled messages word them). Ours maps
the same way: dram, l2, l1 are memory; issue, pipe, math compute (``ncuflow.terms``); a
balanced or high-throughput verdict agrees with either class on a wall. The verdict is shown
as ncu names it. Where the two disagree the comparison says why in words. Pure functions; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from ncuflow.analyze.term import Term
from ncuflow.read.launch import Launch
from ncuflow.read.sol_verdicts import sol_verdict_named

_EITHER_CLASS = ("balanced", "high")  # verdicts that name no one class: either class on a wall agrees


@dataclass(frozen=True)
class NvidiaComparison:
    """NVIDIA's SOLBottleneck rule result next to ours."""

    title: str  # the verdict as ncu names it, e.g. "Latency Issue", "High Throughput"
    category: str  # "memory" / "compute" / "latency" / "balanced" / "high"
    ours: str  # our verdict mapped the same way
    agrees: bool
    reason: str | None  # why they disagree, in words; None when they agree


def nvidia_category(title: str) -> str | None:
    """The class of a SOLBottleneck verdict: memory / compute / latency / balanced / high (over 80 %).
    A title ncu has not used so far is placed by the class it names, if it names one."""
    known = sol_verdict_named(title)
    if known is not None:
        return known.category
    text = title.strip().lower()
    if "memory" in text:
        return "memory"
    if "compute" in text:
        return "compute"
    return None


def _figures_text(launch: Launch) -> str:
    sm_pct, mem_pct = launch.value("sm_throughput_pct"), launch.value("memory_throughput_pct")
    if sm_pct is None or mem_pct is None:
        return "NVIDIA's figures are not in the report"
    return f"NVIDIA's figures: compute {sm_pct:.1f} %, memory {mem_pct:.1f} %"


def _disagreement_reason(launch: Launch, ours: str, terms: tuple[Term, ...], threshold: float, nvidia: str) -> str:
    figures = _figures_text(launch)
    top = max((t for t in terms if t.utilization is not None), key=lambda t: t.utilization or 0.0, default=None)
    if top is None or top.utilization is None:
        return f"no term of the model could be computed; {figures}"
    largest = f"largest term u_{top.name}={top.utilization:.2f} from {top.source}"
    sm_pct, mem_pct = launch.value("sm_throughput_pct"), launch.value("memory_throughput_pct")
    if nvidia == "latency":
        if sm_pct is not None and mem_pct is not None and max(sm_pct, mem_pct) / 100 < threshold <= top.utilization:
            return (f"{largest} is above the on-wall threshold {threshold:.2f}, but it is not one of the "
                    f"units NVIDIA's figures take the max of ({figures})")
        return (f"NVIDIA's rule saw a latency issue (e.g. a grid too small to fill the device) while {largest} "
                f"is on a wall; {figures}")
    if ours == "latency":
        return (f"{largest} is below the on-wall threshold {threshold:.2f}: a unit above it is not in the "
                f"report's breakdown ({figures})")
    return (f"{largest}; NVIDIA's {nvidia} figure is the larger ({figures}): a unit of its class is not in the "
            f"report's breakdown")


def compare_with_nvidia(launch: Launch, ours: str, terms: tuple[Term, ...], threshold: float) -> NvidiaComparison | None:
    """NVIDIA's verdict beside ours (``ours`` the bound's class: memory, compute, latency or unknown)."""
    if launch.nvidia_sol is None:
        return None
    category = nvidia_category(launch.nvidia_sol)
    if category is None:
        return None
    agrees = ours in ("memory", "compute") if category in _EITHER_CLASS else ours == category
    reason = None if agrees else _disagreement_reason(launch, ours, terms, threshold, category)
    return NvidiaComparison(launch.nvidia_sol, category, ours, agrees, reason)
