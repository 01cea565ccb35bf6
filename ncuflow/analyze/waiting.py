"""Why a latency-bound launch waits: occupancy and its limiter, and the warps' stall reasons.

A launch is latency-bound when no resource is near its wall: the warps spend their time
waiting. Two things in full-set reports say on what (``ncuflow.read.deep_metrics``):

- occupancy: the warps the launch configuration allows per SM (theoretical), the one
  resource that caps it (registers, shared memory, the block limit, the warp limit or
  barriers: the smallest ``launch__occupancy_limit_*`` in blocks per SM), and the warps
  actually active (achieved);
- warp-stall reasons: per issued instruction, how many warps were stalled on each reason;
  each reason's share is its part of the sum (a warp's cycles between two issues).

Counters a report lacks are named, with the ``ncuflow passes`` collection that prices them.
Pure functions over ``Launch`` records.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ncuflow.read.deep_metrics import OCCUPANCY_LIMITS, STALL_REASONS
from ncuflow.read.launch import Launch

LIMIT_TITLES: Mapping[str, str] = {
    "registers": "registers", "shared_mem": "shared memory", "blocks": "the block limit per SM",
    "warps": "the warp limit per SM (block size)", "barriers": "barriers",
}
STALL_MEANING: Mapping[str, str] = {
    "long_scoreboard": "waiting for global/local memory (L1TEX) data",
    "short_scoreboard": "waiting for shared memory or a special-function result",
    "barrier": "waiting at a block barrier for the other warps",
    "membar": "waiting at a memory barrier",
    "wait": "a fixed-latency dependency",
    "mio_throttle": "the shared-memory/special-function (MIO) queue is full",
    "lg_throttle": "the global/local memory queue is full",
    "tex_throttle": "the texture/L1TEX queue is full",
    "math_pipe_throttle": "the math pipe it needs is busy",
    "dispatch_stall": "the dispatcher could not issue",
    "drain": "stores draining at exit",
    "imc_miss": "an immediate-constant cache miss",
    "branch_resolving": "a branch target being resolved",
    "no_instruction": "no instruction fetched (instruction cache)",
    "sleeping": "the warp sleeps (nanosleep)",
    "gmma": "waiting for a warpgroup MMA",
    "misc": "miscellaneous",
    "not_selected": "ready, but another warp issued (enough parallelism)",
    "selected": "issuing",
}


@dataclass(frozen=True)
class Occupancy:
    theoretical_pct: float | None
    achieved_pct: float | None
    limiters: tuple[str, ...]  # the limits with the fewest blocks per SM (ties all named)
    blocks_per_sm: float | None  # what the limiters allow
    limits: Mapping[str, float]  # blocks per SM each resource allows
    warps_theoretical: float | None
    max_warps: float | None

    def text(self) -> str:
        """``achieved 18.3 % of the SM's warps, theoretical 25.0 % (limited by registers: 4 blocks/SM)``."""
        parts = []
        if self.achieved_pct is not None:
            parts.append(f"achieved {self.achieved_pct:.1f} % of the SM's warps")
        if self.theoretical_pct is not None:
            parts.append(f"theoretical {self.theoretical_pct:.1f} %")
        text = ", ".join(parts) or "occupancy not measured"
        if self.limiters and self.blocks_per_sm is not None:
            warps = (f" = {self.warps_theoretical:g} of {self.max_warps:g} warps"
                     if self.warps_theoretical is not None and self.max_warps else "")
            blocks = "block" if self.blocks_per_sm == 1 else "blocks"
            if self.full:  # ncu: "not impacted by any block limit"
                return text + f" (not impacted by any block limit: {self.blocks_per_sm:g} {blocks}/SM{warps})"
            limited = " and ".join(LIMIT_TITLES.get(name, name) for name in self.limiters)
            text += f" (limited by {limited}: {self.blocks_per_sm:g} {blocks}/SM{warps})"
        return text

    @property
    def full(self) -> bool:
        """Theoretical occupancy is every warp the SM holds: the smallest limit caps nothing."""
        if self.warps_theoretical is not None and self.max_warps:
            return self.warps_theoretical >= self.max_warps
        return self.theoretical_pct is not None and self.theoretical_pct >= 100.0


@dataclass(frozen=True)
class StallShare:
    reason: str
    warps_per_issue: float
    share: float  # of the sum over every reason

    def text(self) -> str:
        return f"{self.reason} {self.share:.0%} ({STALL_MEANING.get(self.reason, self.reason)})"


@dataclass(frozen=True)
class Waiting:
    """What a launch's warps wait on, as far as the report tells."""

    occupancy: Occupancy | None
    stalls: tuple[StallShare, ...]  # largest first, ``selected`` (issuing) left out
    cycles_per_issue: float | None
    eligible_per_cycle: float | None
    absent: tuple[str, ...]  # what the report lacks, each with the collection that prices it

    def lines(self, top: int = 3) -> list[str]:
        """The evidence: occupancy, the top stall reasons, and what is not in the report."""
        found: list[str] = []
        if self.occupancy is not None:
            found.append("occupancy: " + self.occupancy.text())
        if self.stalls:
            head = ", ".join(s.text() for s in self.stalls[:top])
            cycles = f"; {self.cycles_per_issue:.1f} cycles between issues" if self.cycles_per_issue else ""
            eligible = (f", {self.eligible_per_cycle:.2f} eligible warps per scheduler cycle"
                        if self.eligible_per_cycle is not None else "")
            found.append(f"warp stalls: {head}{cycles}{eligible}")
        found += [f"not in the report: {text}" for text in self.absent]
        return found


def occupancy_of(launch: Launch) -> Occupancy | None:
    """The launch's occupancy and its limiter; None where the report holds none of it."""
    limits = {name: v for name in OCCUPANCY_LIMITS if (v := launch.value(f"occupancy_limit_{name}")) is not None}
    theoretical = launch.value("occupancy_theoretical_pct")
    achieved = launch.value("occupancy_achieved_pct")
    if not limits and theoretical is None and achieved is None:
        return None
    fewest = min(limits.values()) if limits else None
    limiters = tuple(name for name, v in limits.items() if v == fewest) if fewest is not None else ()
    return Occupancy(theoretical, achieved, limiters, fewest, limits, launch.value("warps_per_sm_theoretical"),
                     launch.value("max_warps_per_sm"))


def stall_shares(launch: Launch) -> tuple[StallShare, ...]:
    """Each stall reason's share of the warps' cycles between issues, largest first (issuing left out)."""
    values = {r: v for r in STALL_REASONS if (v := launch.value(f"stall_{r}")) is not None and math.isfinite(v)}
    total = math.fsum(values.values())
    if total <= 0:
        return ()
    shares = [StallShare(r, v, v / total) for r, v in values.items() if r != "selected" and v > 0]
    return tuple(sorted(shares, key=lambda s: -s.share))


def why_waiting(launch: Launch) -> Waiting:
    occupancy = occupancy_of(launch)
    stalls = stall_shares(launch)
    absent: list[str] = []
    if occupancy is None or occupancy.achieved_pct is None:
        absent.append("achieved occupancy (sm__warps_active.avg.pct_of_peak_sustained_active; "
                      "`ncuflow passes --collection occupancy` prices it)")
    if not stalls:
        absent.append("warp-stall reasons (smsp__average_warps_issue_stalled_*_per_issue_active.ratio; "
                      "`ncuflow passes --collection stalls` prices them)")
    return Waiting(occupancy, stalls, launch.value("warp_cycles_per_issue"), launch.value("eligible_warps_per_cycle"),
                   tuple(absent))
