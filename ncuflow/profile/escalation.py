"""Escalation, in one place: deciding, running tier 2 and pairing the tiers, for ``profile``,
``sweep`` here and ``sweep --ray`` alike.

A run of the decisive tier 1 is judged when it is stored: its manifest's ``Escalation``
counts the launches the model (of the version it records) leaves undecided (``undecided``: the largest term just below
the on-wall threshold, or none computed). For such a run tier 2 is profiled into
``STORE/.tier2/`` with an ``Escalation(tier=2, of_run=…)`` naming the run it escalates;
every reader merges the two (``ncuflow.store.tier2_runs_of`` finds the tier-2 run,
``ncuflow.read.escalation.merge_tiers`` merges their launches). Nothing is written into a
committed run. A run whose escalation is not decided (its report could not be read where it
was stored, or a store from before escalation) is read and decided when the store is next
swept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ncuflow.analyze.classify import MODEL_VERSION, classify, undecided
from ncuflow.errors import NcuflowError
from ncuflow.profile.ncu import DECISIVE, DECISIVE_TIER2, NcuOptions
from ncuflow.profile.orchestrate import StoredRun, profile
from ncuflow.profile.plan import ProfileJob
from ncuflow.profile.process import Progress
from ncuflow.profile.settings import ProfileSettings
from ncuflow.read.launch import Launch
from ncuflow.store import RunRecord, tiers
from ncuflow.store.lock import point_lock
from ncuflow.store.manifest import Escalation


def escalates(options: NcuOptions) -> bool:
    """Whether runs collected with ``options`` escalate: the decisive tier 1, no sections added."""
    return options.metric_set == DECISIVE and not options.sections


def tier2_options(options: NcuOptions) -> NcuOptions:
    """The escalation's collection: tier 2, with the run's other options (clocks, filters)."""
    return replace(options, metric_set=DECISIVE_TIER2, exclude_metrics=())


def judge(launches: Sequence[Launch], threshold: float) -> Escalation:
    """Tier 1's escalation of a run: how many of its launches the model leaves undecided."""
    return Escalation(tier=1, undecided=sum(undecided(classify(launch, threshold)) for launch in launches),
                      launches=len(launches), model=MODEL_VERSION)


def decider(settings: ProfileSettings) -> Callable[[NcuOptions, tuple[Launch, ...]], Escalation | None]:
    """The ``decide`` hook of ``orchestrate``: a run of tier 1 is judged when it is stored, with
    escalation on or off (``--no-escalate`` profiles no tier 2, and a later sweep that escalates
    takes the judgement recorded instead of reading the report again)."""
    def decide(options: NcuOptions, launches: tuple[Launch, ...]) -> Escalation | None:
        return judge(launches, settings.escalation.threshold) if escalates(options) else None
    return decide


def profile_tier1(job: ProfileJob, settings: ProfileSettings, progress: Progress | None = None) -> StoredRun:
    """Profile a job, its escalation judged before it is stored."""
    return profile(job, settings, progress=progress, decide=decider(settings))


def tier2_job(run: RunRecord, job: ProfileJob) -> ProfileJob:
    """The job that escalates ``run`` (made by ``job``): tier 2, stored under ``STORE/.tier2``,
    with the run's replica and sweep."""
    provenance = replace(run.manifest.provenance, escalation=Escalation(tier=2, of_run=run.run_id))
    return replace(job, options=tier2_options(job.options), provenance=provenance,
                   store=tiers.tier2_root(run.store_root))


# ----------------------------------------------------------------------------- which runs need tier 2


@dataclass(frozen=True)
class Undecided:
    """A tier-1 run tier 2 must be profiled for: how many of its launches tier 1 left undecided."""

    run: RunRecord
    undecided: int
    launches: int


def needs_tier2(run: RunRecord) -> bool | None:
    """True: tier 1 left launches undecided and no tier-2 run is stored; False: nothing to do;
    None: not decided yet (``decide_now`` reads it)."""
    if not escalates(run.manifest.collection.options) or tiers.tier2_runs_of(run):
        return False
    found = run.manifest.provenance.escalation
    if found is not None and found.needed is not None and found.model == MODEL_VERSION:
        return found.needed
    if found is not None and found.needed is not None:
        return None  # judged by another version of the model: judged again
    return False if tiers.legacy_escalation_checked(run) else None


def undecided_in_report(report: Path, threshold: float) -> Escalation | None:
    """``judge`` of a report's launches; None where it cannot be read here (no reader on a bare
    GPU host, or a damaged report). Plain data in and out, so a reading worker can run it."""
    try:
        from ncuflow.read.extract import read_launches

        launches = read_launches(report)
    except (ImportError, NcuflowError):
        return None
    return judge(launches, threshold)


def runs_to_escalate(runs: Sequence[RunRecord], threshold: float) -> tuple[list[Undecided], int]:
    """The runs tier 2 must be profiled for, and how many could not be decided here.

    Runs judged when stored are taken at their word; the others are read in a worker
    process (``ncu_report`` never frees a report, and a store may hold thousands of runs).
    """
    from ncuflow.read.pool import map_reports

    todo: list[Undecided] = []
    unread: list[RunRecord] = []
    for run in runs:
        needed = needs_tier2(run)
        escalation = run.manifest.provenance.escalation
        if needed and escalation is not None:
            todo.append(Undecided(run, escalation.undecided or 0, escalation.launches or 0))
        elif needed is None:
            unread.append(run)
    unreadable = 0
    tasks = [(run.report_path, threshold) for run in unread]
    for run, found in zip(unread, map_reports(undecided_in_report, tasks, jobs=1), strict=True):
        if found is None:
            unreadable += 1
        elif found.needed:
            todo.append(Undecided(run, found.undecided or 0, found.launches or 0))
    return todo, unreadable


def commit_tier2(run: RunRecord, profile_tier2: Callable[[], StoredRun | None]) -> StoredRun | None:
    """Under the tier-1 point's lock, unless tier 2 of ``run`` is stored meanwhile (another
    process, or a sweep killed after storing it): profile it (``profile_tier2`` stores it)."""
    with point_lock(run.path.parent):
        stored = tiers.tier2_runs_of(run)
        if stored:
            return None
        return profile_tier2()


def escalate(run: StoredRun, job: ProfileJob, settings: ProfileSettings,
             progress: Progress | None = None) -> StoredRun | None:
    """Tier 2 of a run ``profile_tier1`` just stored, where its launches need it; else None."""
    if not settings.escalation.enabled or not needs_tier2(run.record):
        return None
    return commit_tier2(run.record, lambda: profile(tier2_job(run.record, job), settings, progress=progress))


def paired(first: StoredRun, second: StoredRun) -> tuple[tuple[Launch, ...], str | None]:
    """The launches of tier 1 merged with its tier 2 as every reader merges them, and why not
    where they cannot be paired (then tier 1's alone)."""
    from ncuflow.read.escalation import merge_tiers

    return merge_tiers(first.launches, second.launches, second.record.report_path)
