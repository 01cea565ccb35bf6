"""Running a sweep, resumably, in two phases: tier 1 for every missing replica of every point,
then tier 2 for the runs tier 1 leaves undecided; here (``LocalExecutor``) or as Ray tasks
(``ncuflow.profile.ray_sweep.RayExecutor``), through the same steps.

Before profiling, the cell's damaged runs are moved aside and every point's complete runs
are counted in the store (by content key): only the missing replicas are profiled. A run
becomes complete atomically (see ``store``), so a sweep stopped at any moment and re-run
loses nothing and profiles nothing twice. Each run records its replica (counted from 0)
and the sweep (name, file, axes): explain takes the swept parameters from there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ncuflow import store
from ncuflow.errors import NcuflowError
from ncuflow.files import make_console, os_error
from ncuflow.files.safe_text import markup_text
from ncuflow.profile.escalation import (
    Undecided,
    commit_tier2,
    profile_tier1,
    runs_to_escalate,
    tier2_job,
)
from ncuflow.profile.ncu_errors import (
    CounterPermissionDenied,
    DriverMismatch,
    MetricNotFound,
    NcuNotFound,
    ProfileInterrupted,
)
from ncuflow.profile.orchestrate import StoredRun, profile
from ncuflow.profile.plan import CellTarget, ProfileJob
from ncuflow.profile.settings import ProfileSettings, SweepSettings
from ncuflow.profile.sweep import SweepPlan, SweepPoint
from ncuflow.store import lock as point_lock
from ncuflow.store.manifest import Provenance

# Errors that will fail every point the same way: stop the sweep at the first one.
ENVIRONMENT_ERRORS = (NcuNotFound, CounterPermissionDenied, DriverMismatch, MetricNotFound)


@dataclass(frozen=True)
class PointStatus:
    point: SweepPoint
    done: int  # complete runs already in the store
    needed: int  # replicas still to profile


@dataclass
class SweepOutcome:
    profiled: list[store.RunRecord] = field(default_factory=list)
    skipped_points: int = 0
    failures: list[tuple[SweepPoint, NcuflowError]] = field(default_factory=list)
    escalated: list[store.RunRecord] = field(default_factory=list)  # tier-2 runs stored
    unchecked: int = 0  # tier-1 runs whose report could not be read here to decide escalation

    def point_failed(self, point: SweepPoint, error: NcuflowError, say: Callable[[str], Any], *,
                     keep_going: bool, stage: str = "", already_said: bool = False) -> None:
        """A profile of ``point`` failed (locally or on Ray, tier 1 or 2): the one rule.

        Raises ``error`` (the sweep stops; the command says why, once) on Ctrl-C, on an
        error that would fail every point (no ncu, counter permission, driver, unknown
        metric), and on any error without ``keep_going``; otherwise records the failure and
        says so (``already_said``: a point that has failed before; nothing more to say).
        """
        if isinstance(error, (ProfileInterrupted, *ENVIRONMENT_ERRORS)) or not keep_going:
            raise error
        if not already_said:
            self.failures.append((point, error))
            say(f"[red]failed[/red] {stage}{markup_text(point.spec_text)}: {markup_text(error)}")


@dataclass(frozen=True)
class SweepContext:
    """One sweep being run: its plan, how profiles and the sweep run, and where it prints."""

    plan: SweepPlan
    settings: ProfileSettings  # the timeout is the sweep's (the command line's, else the file's)
    sweep: SweepSettings
    console: Any

    @property
    def store_root(self) -> Path:
        return self.settings.store

    def job(self, point: SweepPoint, replica: int) -> ProfileJob:
        """The tier-1 job of one replica of a point."""
        return ProfileJob(CellTarget(point.spec), self.plan.options,
                          provenance=Provenance(replica=replica, sweep=self.plan.sweep()))

    def point_folder(self, point: SweepPoint) -> Path:
        return store.point_dir(Path(self.store_root).absolute(), point.spec, point.content_key)

    def stored(self, point: SweepPoint) -> list[store.RunRecord]:
        return store.complete_runs_for_key(self.store_root, self.plan.cell, point.content_key)

    def present(self, point: SweepPoint) -> int:
        """The point's runs that count as done: complete ones, and those this user cannot read
        (there, not damaged: profiling them again would store more replicas than asked)."""
        runs = store.runs_for_key(self.store_root, self.plan.cell, point.content_key)
        return len(runs.complete) + len(runs.unreadable)

    def unreadable(self) -> list[store.DamagedRun]:
        return [run for p in self.plan.points
                for run in store.runs_for_key(self.store_root, self.plan.cell, p.content_key).unreadable]

    def statuses(self) -> list[PointStatus]:
        return [PointStatus(p, done, max(0, self.plan.replicas - done))
                for p in self.plan.points for done in [self.present(p)]]

    def to_escalate(self, outcome: SweepOutcome) -> list[tuple[SweepPoint, Undecided]]:
        """The sweep's runs tier 2 must be profiled for: this sweep's, and those a stopped one left."""
        if not self.settings.escalation.enabled:
            return []
        by_run = {run.run_id: point for point in self.plan.points for run in self.stored(point)}
        runs = [run for point in self.plan.points for run in self.stored(point)]
        todo, outcome.unchecked = runs_to_escalate(runs, self.settings.escalation.threshold)
        for item in todo:
            point = by_run[item.run.run_id]
            self.console.print(f"{markup_text(point.spec_text)} ({markup_text(item.run.run_id)}): tier 1 leaves "
                               f"{item.undecided} of {item.launches} launches undecided: profiling tier 2")
        return [(by_run[item.run.run_id], item) for item in todo]

    def progress(self) -> Any:
        return sweep_progress(self.console, self.sweep.show_progress)


class Executor(Protocol):
    """Where a sweep's profiles run: here, one at a time, or as Ray tasks."""

    def tier1(self, todo: list[PointStatus], total: int, outcome: SweepOutcome) -> None: ...

    def tier2(self, todo: list[tuple[SweepPoint, Undecided]], outcome: SweepOutcome) -> None: ...

    def close(self) -> None: ...


def sweep_progress(console: Any, show_progress: bool) -> Any:
    """The progress bar of a sweep (local or on Ray): point, bar, done/total, elapsed, ETA."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
        console=console, disable=not show_progress, transient=False,
    )


def start_sweep(context: SweepContext) -> tuple[SweepOutcome, list[PointStatus], int]:
    """Before profiling: move the cell's damaged runs aside, count what is missing per point,
    and say so. Returns (the outcome to fill, points to run, profiles to run)."""
    from ncuflow.store.check import move_aside_damaged

    for damaged, target in move_aside_damaged(context.store_root, context.plan.cell):
        context.console.print(f"[yellow]moved a damaged run aside[/yellow] ({markup_text(damaged.problem)}): "
                              f"{markup_text(damaged.path)} -> {markup_text(target.name)}; its point is profiled again",
                              soft_wrap=True)
    unreadable = context.unreadable()
    if unreadable:
        context.console.print(
            f"[yellow]{len(unreadable)} run(s) of this sweep cannot be read by this user[/yellow] "
            f"({markup_text(unreadable[0].path)}: {markup_text(unreadable[0].problem)}): counted as present, "
            "not profiled again; fix their permissions (`ls -ld` shows them) to read them, or move them away to "
            "profile their points again")
    outcome = SweepOutcome()
    statuses = context.statuses()
    todo = [s for s in statuses if s.needed > 0]
    outcome.skipped_points = len(statuses) - len(todo)
    total = sum(s.needed for s in todo)
    context.console.print(
        f"sweep {markup_text(context.plan.name)}: {len(statuses)} points × {context.plan.replicas} replicas; "
        f"{outcome.skipped_points} points already complete, {total} profiles to run"
    )
    return outcome, todo, total


def run_sweep(plan: SweepPlan, settings: ProfileSettings, sweep: SweepSettings | None = None,
              console: Any = None, executor: Callable[[SweepContext], Executor] | None = None) -> SweepOutcome:
    """Profile every missing replica of every point (tier 1), then tier 2 for the runs tier 1
    leaves undecided, with ``executor`` (here, one at a time, by default; the command line passes
    ``ncuflow.profile.ray_sweep.RayExecutor`` under ``--ray``); raises ProfileInterrupted on Ctrl-C.

    ``keep_going`` continues past a point's own failure (e.g. a program error); errors that
    would fail every point (no ncu, counter permission, driver, unknown metric) always stop
    the sweep.
    """
    sweep = sweep or SweepSettings()
    settings = replace(settings, timeout=sweep.timeout or plan.timeout)
    context = SweepContext(plan, settings, sweep, console or make_console())
    outcome, todo, total = start_sweep(context)
    started: list[Executor] = []

    def executing() -> Executor:  # a Ray cluster is joined only when there is work for it
        if not started:
            started.append((executor or LocalExecutor)(context))
        return started[0]

    try:
        if total > 0:
            executing().tier1(todo, total, outcome)
        escalations = context.to_escalate(outcome)
        if escalations:
            executing().tier2(escalations, outcome)
    finally:
        for running in started:
            running.close()
    return outcome


ProfileFn = Callable[[ProfileJob, ProfileSettings], StoredRun]


def _profile_tier1(job: ProfileJob, settings: ProfileSettings) -> StoredRun:
    return profile_tier1(job, settings)


def _profile_tier2(job: ProfileJob, settings: ProfileSettings) -> StoredRun:
    return profile(job, settings)


class LocalExecutor:
    """The profiles of a sweep, one at a time on this machine, one writer per point."""

    def __init__(self, context: SweepContext, tier1_profile: ProfileFn = _profile_tier1,
                 tier2_profile: ProfileFn = _profile_tier2) -> None:
        self.context = context
        self.tier1_profile, self.tier2_profile = tier1_profile, tier2_profile

    def close(self) -> None:
        return None

    def tier1(self, todo: list[PointStatus], total: int, outcome: SweepOutcome) -> None:
        """Every missing replica of the points. A point another process is profiling is done
        last, after waiting for its lock, and only what is then still missing is profiled."""
        context = self.context
        with context.progress() as progress:
            task = progress.add_task(markup_text(context.plan.name), total=total)
            busy: list[PointStatus] = []
            for status in todo:
                with self._locked(status.point, wait=False) as held:
                    if held is None:
                        busy.append(status)
                        continue
                    self._profile_point(status, outcome, progress, task)
            for status in busy:
                def note(holder: dict[str, Any], status: PointStatus = status) -> None:
                    who = f"pid {holder.get('pid')}" if holder.get("pid") else "another process"
                    progress.console.print(f"waiting for {who}, which is profiling "
                                           f"{markup_text(status.point.spec_text)}")
                with self._locked(status.point, wait=True, on_wait=note):
                    self._profile_point(status, outcome, progress, task)

    def _profile_point(self, status: PointStatus, outcome: SweepOutcome, progress: Any, task: Any) -> None:
        """Profile the replicas still missing; the caller holds the point's lock."""
        context, replicas = self.context, self.context.plan.replicas
        done = context.present(status.point)
        if done > status.done:  # another writer profiled some meanwhile
            progress.advance(task, max(0, min(done, replicas) - status.done))
        for replica in range(done, replicas):
            progress.update(task, description=f"{markup_text(status.point.spec_text)} #{replica + 1}")
            try:
                stored = self.tier1_profile(context.job(status.point, replica), context.settings)
            except NcuflowError as error:
                outcome.point_failed(status.point, error, progress.console.print, keep_going=context.sweep.keep_going)
                progress.advance(task, replicas - replica)
                return
            outcome.profiled.append(stored.record)
            progress.advance(task)

    def tier2(self, todo: list[tuple[SweepPoint, Undecided]], outcome: SweepOutcome) -> None:
        context = self.context
        for point, item in todo:
            job = tier2_job(item.run, context.job(point, item.run.manifest.provenance.replica or 0))

            def run(job: ProfileJob = job) -> StoredRun:
                return self.tier2_profile(job, context.settings)

            try:
                second = commit_tier2(item.run, run)
            except NcuflowError as error:
                outcome.point_failed(point, error, context.console.print, keep_going=context.sweep.keep_going,
                                     stage="tier 2 of ")
                continue
            if second is not None:
                outcome.escalated.append(second.record)
                context.console.print(f"stored tier 2 of {markup_text(point.spec_text)} in "
                                      f"{markup_text(second.record.path)}", soft_wrap=True)

    @contextlib.contextmanager
    def _locked(self, point: SweepPoint, *, wait: bool,
                on_wait: Callable[[dict[str, Any]], None] | None = None) -> Iterator[point_lock.PointLock | None]:
        folder = self.context.point_folder(point)
        try:
            held = point_lock.acquire(folder, on_wait=on_wait) if wait else point_lock.try_lock(folder)
        except OSError as error:
            message = os_error(error, folder, "lock the store folder")
            raise store.StoreError(message.what, message.why, message.fix) from None
        try:
            yield held
        finally:
            if held is not None:
                held.release()


def describe_points(plan: SweepPlan, settings: ProfileSettings) -> list[dict[str, Any]]:
    """Rows for ``--dry-run``: each point, its key and how many replicas are still to run."""
    context = SweepContext(plan, settings, SweepSettings(), None)
    return [
        {"index": s.point.index, "spec": s.point.spec_text, "key8": s.point.content_key[:8],
         "axes": " ".join(f"{k}={v}" for k, v in s.point.axis_values.items()) or s.point.spec_text,
         "done": s.done, "to_run": s.needed}
        for s in context.statuses()
    ]
