"""ncu's "L2 Cache Throughput" (``lts__throughput``) settled by its units, for every launch that holds it.

``lts__throughput`` is the largest of its units' % of peak (Perfworks lists them per chip).
Most are the L2 units that move data, every one of them also a unit of NVIDIA's memory
figure (``gpu__compute_memory_throughput``), and the L2 term is their max. On some chips it
holds units the memory figure leaves out (``ncuflow.read.throughputs``): the fabric between
the two L2 partitions counted twice over (``lts__ltcfabric2ltc_cycles_active``, which "can
reach 100 % SOL when lts__ltcfabric2lts_cycles_active is saturated at 50 %") and the
L2-to-crossbar port counted on the real-time clock. When one of those sets
``lts__throughput`` it is no wall, and the reading says so. Where the report lacks the
unit that sets it, NVIDIA's memory figure still decides: it is the max over every L2 unit
that moves data, so an ``lts__throughput`` above it is set by a unit it leaves out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ncuflow.analyze.term import Term
from ncuflow.read.launch import Launch
from ncuflow.read.throughputs import (
    L2_OUTSIDE_MEMORY_FIGURE,
    L2_THROUGHPUT_UNITS,
    is_wall,
    unit_label,
    unit_term,
)

# Two % of peak within this many points are the same reading (ncu stores both from one sample).
SAME_PCT = 0.05


@dataclass(frozen=True)
class L2Reading:
    """``lts__throughput``, the unit that sets it where that is known, and whether it is the L2 wall."""

    throughput: float  # lts__throughput, % of peak
    unit: str | None  # the metric of the unit that sets it (None: not in the report)
    wall: bool | None  # whether that unit is (part of) the L2 wall; None: undecided
    reason: str  # one clause saying how that is known

    def text(self) -> str:
        return f"L2: lts__throughput {self.throughput:.1f} %, {self.reason}"


def _set_by(metric: str, pct: float, u_l2: float | None) -> L2Reading:
    name = f"{unit_label(metric)} ({metric.split('.')[0]})"
    if is_wall(metric):
        return L2Reading(pct, metric, True, f"set by {name}: the L2 wall term" +
                         (f" (u_l2 {u_l2:.2f})" if u_l2 is not None else ""))
    why = ("it reaches 100 % when the link between the partitions (lts__ltcfabric2lts_cycles_active) is 50 % busy "
           "(ncu's metric description)" if "ltcfabric2ltc" in metric else
           "the same port NVIDIA's memory figure counts as lts__lts2xbar_cycles_active, on another clock")
    return L2Reading(pct, metric, False, f"set by {name}, not the L2 wall: {why}, and NVIDIA's memory figure "
                     f"leaves it out" + (f"; the L2 units that move data reach u_l2 {u_l2:.2f}" if u_l2 is not None
                                         else ""))


def _outside_reading(pct: float, outside: tuple[str, ...] | None, how: str, collected: str) -> L2Reading:
    """lts__throughput set by a unit outside NVIDIA's memory figure (``how`` says how that is known)."""
    if not outside:
        return L2Reading(pct, None, None, f"{how}: set by a unit NVIDIA's memory figure leaves out; {collected}")
    names = " or ".join(f"{m} ({unit_label(m)})" for m in outside)
    walls = [m for m in outside if is_wall(m)]
    verdict = ("a wall only if it is the partition link" if walls else
               "neither of them a wall" if len(outside) > 1 else "not a wall")
    return L2Reading(pct, None, None if walls else False, (
        f"{how}: set by a unit NVIDIA's memory figure leaves out, on this chip {names}, {verdict}; {collected}"))


def read_l2(launch: Launch, terms: Sequence[Term]) -> L2Reading | None:
    """The reading of ``lts__throughput`` beside the L2 term; None where the report lacks it."""
    pct = launch.value("l2_throughput_pct")
    if pct is None:
        return None
    u_l2 = next((t.utilization for t in terms if t.name == "l2"), None)
    units = {m: v for m, v in launch.breakdown.items() if unit_term(m) == "l2"}
    if units:
        metric, value = max(units.items(), key=lambda item: item[1])
        if value >= pct - SAME_PCT:
            return _set_by(metric, value, u_l2)
    collected = f"largest L2 unit in the report: u_l2 {u_l2:.2f}" if u_l2 is not None else "no L2 unit in the report"
    capability = launch.device.compute_capability or ""
    outside = L2_OUTSIDE_MEMORY_FIGURE.get(capability)
    inside = [m for m in L2_THROUGHPUT_UNITS.get(capability, ()) if m not in (outside or ())]
    held = {m.split(".")[0] for m in units}
    if inside and all(m in held for m in inside):
        return _outside_reading(pct, outside, "above every unit of it that moves data (all of them in the report)",
                                collected)
    memory = launch.value("memory_throughput_pct")
    if memory is not None and pct > memory + SAME_PCT:
        return _outside_reading(pct, outside, f"above NVIDIA's memory figure ({memory:.1f} %), which holds every L2 "
                                f"unit that moves data", collected)
    upper = min(pct, memory) if memory is not None else pct
    if outside == ():
        return L2Reading(pct, None, True, (
            f"every unit of it moves data on this chip: the L2 wall lies between {collected} and u {upper / 100:.2f}"))
    return L2Reading(pct, None, None, (
        f"the unit that sets it is not in the report ({collected}); the L2 units that move data are at most "
        f"u {upper / 100:.2f}"))
