"""ncu's "L1/TEX Cache Throughput" (``l1tex__throughput``) settled by its units, for every launch that holds it.

``l1tex__throughput`` is the largest of its units' % of peak (Perfworks lists them per chip). Most
are units of NVIDIA's memory figure (``gpu__compute_memory_throughput``) too, and the L1 term
(``u_l1``) is their max. On some chips it holds units the memory figure leaves out
(``ncuflow.read.throughputs.L1_OUTSIDE_MEMORY_FIGURE``):

- on TU10x (and, for the crossbar port only, GA10x, AD10x, GB20x) TPC-level counts, ``tpc__l1tex_*``:
  the L1s of a TPC's two SMs counted together against one L1's peak, so up to twice what either L1
  does (a T4 MLP: ``l1tex__throughput`` 46.8 %, its SM-level LSU wavefronts 23.4 %). No wall: each
  SM's own L1 units are in the memory figure, and ``u_l1`` reads them;
- on GB100/GB110 the tensor-core data pipe (``l1tex__data_pipe_tc_wavefronts``), and on GB20x the
  sampler and the SRAM arrays: units NVIDIA's memory figure does not count; whether they are walls
  is not known, and the reading says so.

``u_l1`` does not take ``l1tex__throughput``: NVIDIA's SOL rule, which ncuflow agrees with on every
labelled launch, reads the memory figure, which leaves those units out; and a TPC count is no
wall. No verdict of the corpus or the H200 store would change if it did: each launch whose
``l1tex__throughput`` exceeds ``u_l1`` by more than 2 points has it below the on-wall threshold.
Where the unit that sets it is not in the report (a decisive collection holds one L1 unit), the
L1 wall lies between ``u_l1`` and it; below the threshold that cannot change the verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ncuflow.analyze.term import Term
from ncuflow.read.launch import Launch
from ncuflow.read.throughputs import (
    L1_IN_MEMORY_FIGURE,
    L1_OUTSIDE_MEMORY_FIGURE,
    is_wall,
    unit_label,
    unit_term,
)

SAME_PCT = 0.05  # two % of peak within this many points are one reading
EXCEEDS = 2.0  # points above u_l1 past which the reading says why
TPC = "tpc__l1tex_"


@dataclass(frozen=True)
class L1Reading:
    """``l1tex__throughput``, the unit that sets it where that is known, whether it is the L1 wall, and why."""

    throughput: float  # l1tex__throughput, % of peak
    unit: str | None  # the metric of the unit that sets it (None: not in the report)
    wall: bool | None  # whether that unit is (part of) the L1 wall; None: undecided
    reason: str

    def text(self) -> str:
        return f"L1: l1tex__throughput {self.throughput:.1f} %, {self.reason}"


def _name(metric: str) -> str:
    base = metric.split(".")[0]
    label = unit_label(metric)
    return base if label == base else f"{label} ({base})"


def _outside(pct: float, outside: tuple[str, ...], sm_units: dict[str, float], how: str, tail: str) -> L1Reading:
    tpc = [m for m in outside if m.startswith(TPC)]
    other = [m for m in outside if not m.startswith(TPC)]
    if tpc and not other:
        own = {m.split(".")[0]: v for m, v in sm_units.items()}
        doubled = [(f"l1tex__{m[len(TPC):]}", own[f"l1tex__{m[len(TPC):]}"]) for m in tpc if f"l1tex__{m[len(TPC):]}" in own]
        double = next((item for item in doubled if abs(2 * item[1] - pct) <= 1.0), None)
        twice = f" (here ≈ 2 × {double[0]} {double[1]:.1f} %)" if double else ""
        return L1Reading(pct, None, False, (
            f"{how}: set by a TPC-level count NVIDIA's memory figure leaves out ({' or '.join(tpc)}): the L1s of "
            f"a TPC's two SMs counted against one L1's peak{twice}, not a wall; {tail}"))
    names = " or ".join(other + tpc) if outside else "a unit the chip's table does not name"
    return L1Reading(pct, None, None, (
        f"{how}: set by a unit NVIDIA's memory figure leaves out ({names}), whose being a wall is not known; {tail}"))


def read_l1(launch: Launch, terms: Sequence[Term], threshold: float) -> L1Reading | None:
    """The reading of ``l1tex__throughput`` beside the L1 term; None where the report lacks it."""
    pct = launch.value("l1_throughput_pct")
    if pct is None:
        return None
    u_l1 = next((t.utilization for t in terms if t.name == "l1"), None)
    units = {m: v for m, v in launch.breakdown.items() if unit_term(m) == "l1"}
    top = max(units.items(), key=lambda item: item[1], default=None)
    if top is not None and top[1] >= pct - SAME_PCT:
        wall = is_wall(top[0])
        return L1Reading(pct, top[0], wall, f"set by {_name(top[0])}: " + (
            f"the L1 wall term (u_l1 {u_l1:.2f})" if wall and u_l1 is not None else "no wall"))
    read = f"u_l1 {u_l1:.2f} from the L1 units NVIDIA's memory figure holds" if u_l1 is not None else "no L1 unit read"
    matters = (f"below the on-wall threshold {threshold:.2f}, it cannot change the verdict" if pct / 100 < threshold
               else f"at or above the on-wall threshold {threshold:.2f}")
    tail = f"{read}; {matters}"
    capability = launch.device.compute_capability or ""
    inside, outside = L1_IN_MEMORY_FIGURE.get(capability), L1_OUTSIDE_MEMORY_FIGURE.get(capability)
    held = {m.split(".")[0] for m in units}
    if inside and all(m in held for m in inside):
        return _outside(pct, outside or (), units, "above every L1 unit of NVIDIA's memory figure (all in the report)",
                        tail)
    memory = launch.value("memory_throughput_pct")
    if memory is not None and pct > memory + SAME_PCT:
        return _outside(pct, outside or (), units, f"above NVIDIA's memory figure ({memory:.1f} %)", tail)
    return L1Reading(pct, None, None, (
        f"the unit that sets it is not in the report; the L1 wall lies between u_l1 "
        f"{(u_l1 or 0.0):.2f} and u {pct / 100:.2f}; {matters}"))
