"""``ncuflow profile``'s work: each replica of one job profiled, escalated where tier 1 leaves
launches undecided, and its tiers paired, with what happens told to an observer (the
command line prints it; a notebook may ignore it).

Never imports polars (the GPU host has none).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from ncuflow.profile.escalation import (
    commit_tier2,
    escalates,
    needs_tier2,
    paired,
    profile_tier1,
    tier2_job,
)
from ncuflow.profile.orchestrate import StoredRun, profile
from ncuflow.profile.plan import ProfileJob
from ncuflow.profile.precheck import PassCheck, check_passes
from ncuflow.profile.settings import ProfileSettings
from ncuflow.read.launch import Launch


@dataclass(frozen=True)
class ProfileResult:
    """One replica: its tier-1 run, its tier-2 run where it escalated, and the launches as
    every reader sees them (tier 1 merged with tier 2; ``unpaired`` says why not)."""

    tier1: StoredRun
    tier2: StoredRun | None = None
    launches: tuple[Launch, ...] = ()
    unpaired: str | None = None


class ProfileObserver(Protocol):
    def working(self, what: str) -> Callable[[str], None]:
        """A profile starts (``what``); the returned function receives each line of ncu's log."""

    def stored(self, run: StoredRun, tier: int) -> None: ...

    def escalating(self, run: StoredRun, check: PassCheck) -> None: ...


class Quiet:
    """An observer that says nothing."""

    def working(self, what: str) -> Callable[[str], None]:
        return lambda line: None

    def stored(self, run: StoredRun, tier: int) -> None:
        return None

    def escalating(self, run: StoredRun, check: PassCheck) -> None:
        return None


def profile_replicas(job: ProfileJob, settings: ProfileSettings, replicas: int = 1,
                     observer: ProfileObserver | None = None) -> list[ProfileResult]:
    """Profile ``job`` ``replicas`` times in fresh ncu processes (replica 0, 1, ...), each
    escalated to tier 2 where its launches need it."""
    watch = observer or Quiet()
    results = []
    for replica in range(replicas):
        this = replace(job, provenance=replace(job.provenance, replica=replica))
        first = profile_tier1(this, settings, watch.working(f"profiling {job.label} under ncu"))
        watch.stored(first, 1)
        results.append(_escalated(first, this, settings, watch))
    return results


def _escalated(first: StoredRun, job: ProfileJob, settings: ProfileSettings,
               watch: ProfileObserver) -> ProfileResult:
    if not (settings.escalation.enabled and escalates(job.options) and needs_tier2(first.record)):
        return ProfileResult(first, launches=first.launches)
    second_job = tier2_job(first.record, job)
    check = check_passes(second_job.options, settings.escalation.chip)
    watch.escalating(first, check)
    second = commit_tier2(first.record, lambda: profile(replace(second_job, options=check.options), settings,
                                                        progress=watch.working("profiling tier 2 under ncu")))
    if second is None:  # another process escalated it meanwhile
        return ProfileResult(first, launches=first.launches)
    watch.stored(second, 2)
    launches, problem = paired(first, second)
    return ProfileResult(first, second, launches, problem)
