"""A sweep's second phase, here or on Ray: tier 2 for every run tier 1 left undecided.

The runs of the decisive tier 1 that carry no ``escalation.json`` are checked (this
sweep's, and those a stopped one left); each one tier 1 decides is marked, each one it
leaves undecided is profiled again with tier 2 under ``STORE/.tier2`` and named in the
run (``ncuflow.profile.escalate``), under the tier-1 point's lock.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ncuflow import store
from ncuflow.analyze.classify import DEFAULT_THRESHOLD
from ncuflow.errors import NcuflowError
from ncuflow.files import make_console
from ncuflow.profile.escalate import (
    checked,
    escalates,
    escalation_extra,
    record_escalation,
    record_not_needed,
    tier2_options,
    tier2_root,
    undecided_in_report,
)
from ncuflow.profile.sweep import (
    SweepOutcome,
    SweepPlan,
    SweepPoint,
    run_sweep,
    sweep_manifest_extra,
)
from ncuflow.read.pool import map_reports
from ncuflow.store import RunRecord
from ncuflow.store.lock import point_lock


def runs_to_escalate(plan: SweepPlan, store_root: Path, threshold: float | None,
                     say: Callable[[str], None]) -> tuple[list[tuple[SweepPoint, RunRecord]], int]:
    """Check every complete tier-1 run of the sweep's points not checked yet.

    A run tier 1 decides is marked (never read again); returns the runs tier 2 must be
    profiled for, with their points, and how many runs could not be read here.
    """
    if not escalates(plan.options):
        return [], 0
    unchecked = [(point, run) for point in plan.points
                 for run in store.complete_runs_for_key(store_root, plan.cell, point.content_key) if not checked(run)]
    # Read in a worker: ncu_report never frees a report, and a store may hold thousands of runs.
    tasks = [(run.report_path, DEFAULT_THRESHOLD if threshold is None else threshold) for _, run in unchecked]
    todo: list[tuple[SweepPoint, RunRecord]] = []
    unreadable = 0
    for (point, run), found in zip(unchecked, map_reports(undecided_in_report, tasks, jobs=1), strict=True):
        if found is None:
            unreadable += 1
        elif found.undecided == 0:
            record_not_needed(run, found)
        else:
            say(f"{point.spec_text} ({run.run_id}): tier 1 leaves {found.undecided} of {found.launches} "
                "launches undecided: profiling tier 2")
            todo.append((point, run))
    return todo, unreadable


def tier2_manifest_extra(plan: SweepPlan, run: RunRecord) -> dict[str, Any]:
    """The tier-2 run's manifest additions in a sweep: the sweep's own, and the run it escalates."""
    replica = run.manifest.get("replica")
    return {**sweep_manifest_extra(plan, int(replica) if isinstance(replica, int) else 0), **escalation_extra(run)}


def commit_escalation(plan: SweepPlan, point: SweepPoint, run: RunRecord, store_root: Path,
                      profile_tier2: Callable[[], RunRecord | None]) -> RunRecord | None:
    """Under the tier-1 point's lock: unless another process has meanwhile, profile tier 2
    (``profile_tier2`` stores it) and name it in the run. Returns the tier-2 run, or None.

    A tier-2 run already stored for this run (a sweep killed between storing it and naming
    it) is named instead of profiling another."""
    folder = store.point_dir(Path(store_root).absolute(), plan.cell, point.spec.slug(), point.content_key)
    with point_lock(folder):
        if checked(run):
            return None
        stored = [r for r in store.complete_runs_for_key(tier2_root(store_root), plan.cell, point.content_key)
                  if r.manifest.get("escalation_of") == run.run_id]
        second = stored[0] if stored else profile_tier2()
        if second is not None:
            record_escalation(run, second)
        return second


def escalate_sweep(plan: SweepPlan, store_root: Path, outcome: SweepOutcome, console: Any, threshold: float | None,
                   profile: Callable[..., RunRecord], keep_going: bool, **profile_kwargs: Any) -> None:
    """A local sweep's second phase: tier 2 for every run tier 1 left undecided, this sweep's
    and those an earlier, stopped one left unchecked. Failures are handled as tier 1's are."""
    todo, outcome.unchecked = runs_to_escalate(plan, store_root, threshold, console.print)
    for point, run in todo:
        def tier2(point: SweepPoint = point, run: RunRecord = run) -> RunRecord:
            return profile(point.spec, tier2_options(plan.options), tier2_root(store_root),
                           manifest_extra=tier2_manifest_extra(plan, run), **profile_kwargs)
        try:
            second = commit_escalation(plan, point, run, store_root, tier2)
        except NcuflowError as error:
            outcome.point_failed(point, error, console.print, keep_going=keep_going, stage="tier 2 of ")
            continue
        if second is not None:
            outcome.escalated.append(second)
            console.print(f"stored tier 2 of {point.spec_text} in {second.path}", soft_wrap=True)


def sweep_here(plan: SweepPlan, store_root: Path, *, escalate: bool = True, threshold: float | None = None,
               **kwargs: Any) -> SweepOutcome:
    """``run_sweep`` (tier 1), then, with ``escalate``, its second phase (``escalate_sweep``)."""
    from ncuflow.profile.orchestrate import profile_cell

    console = kwargs.pop("console", None) or make_console()
    outcome = run_sweep(plan, store_root, console=console, **kwargs)
    if escalate:
        escalate_sweep(plan, store_root, outcome, console, threshold, kwargs.get("profile") or profile_cell,
                       bool(kwargs.get("keep_going")), cells_dir=kwargs.get("cells_dir"),
                       timeout=kwargs.get("timeout") or plan.timeout, ncu=kwargs.get("ncu"))
    return outcome
