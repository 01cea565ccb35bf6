"""``ncuflow profile``'s work: each replica of one job profiled, escalated where tier 1 leaves
launches undecided, explained by the why tier where asked (``--why``), and its tiers paired,
with what happens told to an observer (the command line prints it; a notebook may ignore it).

Never imports polars (the GPU host has none).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from ncuflow.errors import UsageError
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
from ncuflow.profile.why import FROM_VERDICT, WHY_TIER, binding_wall, commit_why, why_check, why_job
from ncuflow.read.escalation import merge_tiers
from ncuflow.read.launch import Launch


@dataclass(frozen=True)
class ProfileResult:
    """One replica: its tier-1 run, its tier-2 run where it escalated, its why run (tier 3) where
    asked, and the launches as every reader sees them: tier 1 merged with the tiers in
    ``merged``; ``unpaired`` says why an escalation run could not be merged."""

    tier1: StoredRun
    tier2: StoredRun | None = None
    launches: tuple[Launch, ...] = ()
    unpaired: tuple[str, ...] = ()
    why: StoredRun | None = None
    merged: tuple[int, ...] = (1,)  # the tiers the launches hold


class ProfileObserver(Protocol):
    def working(self, what: str) -> Callable[[str], None]:
        """A profile starts (``what``); the returned function receives each line of ncu's log."""

    def stored(self, run: StoredRun, tier: int) -> None: ...

    def escalating(self, run: StoredRun, check: PassCheck) -> None: ...

    def explaining(self, run: StoredRun, wall: str | None, check: PassCheck | None) -> None:
        """The why tier of ``run`` is profiled for ``wall`` (None: no verdict has a why tier)."""


class Quiet:
    """An observer that says nothing."""

    def working(self, what: str) -> Callable[[str], None]:
        return lambda line: None

    def stored(self, run: StoredRun, tier: int) -> None:
        return None

    def escalating(self, run: StoredRun, check: PassCheck) -> None:
        return None

    def explaining(self, run: StoredRun, wall: str | None, check: PassCheck | None) -> None:
        return None


def profile_replicas(job: ProfileJob, settings: ProfileSettings, replicas: int = 1,
                     observer: ProfileObserver | None = None, why: str | None = None) -> list[ProfileResult]:
    """Profile ``job`` ``replicas`` times in fresh ncu processes (replica 0, 1, ...), each
    escalated to tier 2 where its launches need it, and explained by the why tier of ``why``
    (a wall, or ``FROM_VERDICT``: the wall of the run's own verdict; None: no why tier)."""
    if why is not None and not escalates(job.options):
        raise UsageError(f"--why follows the decisive collection; this profile collects {job.options.label()}.",
                         "The why tier adds the sections that explain the verdict of tiers 1 and 2; a section set "
                         "or added sections already hold what they hold.",
                         "Drop --set/--section to profile the decisive collection with --why, or drop --why.")
    watch = observer or Quiet()
    results = []
    for replica in range(replicas):
        this = replace(job, provenance=replace(job.provenance, replica=replica))
        first = profile_tier1(this, settings, watch.working(f"profiling {job.label} under ncu"))
        watch.stored(first, 1)
        result = _escalated(first, this, settings, watch)
        results.append(_explained(result, this, settings, watch, why) if why is not None else result)
    return results


def _explained(result: ProfileResult, job: ProfileJob, settings: ProfileSettings, watch: ProfileObserver,
               why: str) -> ProfileResult:
    """``result`` with its why tier profiled and merged (its tier-1 fields unchanged)."""
    first = result.tier1
    wall = binding_wall(result.launches, settings.escalation.threshold) if why == FROM_VERDICT else why
    if wall is None:
        watch.explaining(first, None, None)
        return result
    check = why_check(job.options, wall, settings.escalation.chip, settings.ncu or first.record.manifest.collection.ncu_path)
    watch.explaining(first, wall, check)
    third = commit_why(first.record, wall, lambda: profile(why_job(first.record, job, wall, check.options), settings,
                                                           progress=watch.working(f"profiling the why tier ({wall})")))
    if third is None:  # another process stored it meanwhile
        return result
    watch.stored(third, WHY_TIER)
    launches, problem = merge_tiers(result.launches, third.launches, third.record.report_path, WHY_TIER)
    if problem is not None:
        return replace(result, why=third, unpaired=(*result.unpaired, problem))
    return replace(result, why=third, launches=launches, merged=(*result.merged, WHY_TIER))


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
    if problem is not None:
        return ProfileResult(first, second, launches, (problem,))
    return ProfileResult(first, second, launches, merged=(1, 2))
