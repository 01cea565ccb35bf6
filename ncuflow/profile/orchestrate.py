"""Run one profile job under ncu and store the run, or say exactly why not.

The job is planned first (``ncuflow.profile.plan``: the exact command and where it will be
stored, nothing touched: this is what ``--dry-run`` prints), then executed: ncu runs in its
own process group with its output captured to the run's ``ncu.log``; the wait has a
deadline; Ctrl-C, SIGTERM and the deadline stop ncu and every process it started (SIGTERM,
then SIGKILL after a grace period). An interrupted run is removed; a failed or timed-out
run is kept only as a hidden ``.failed-<run-id>`` folder for its log; a successful one
(exit 0, no ``==ERROR==`` line, a report that loads with at least one launch) is renamed
into place with its manifest, built part by part. The report is read once, here: its
launches count the actions, feed the ``decide`` hook (tier 1's escalation, recorded in the
manifest before the run is committed) and come back with the run for its table.

Never imports polars: this runs on the GPU host.
"""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ncuflow import store
from ncuflow.errors import NcuflowError, ReportError, UsageError
from ncuflow.files import is_disk_full, os_error
from ncuflow.profile.facts import nvidia_smi_facts, package_version
from ncuflow.profile.log_pump import LogPump
from ncuflow.profile.ncu import NcuOptions, describe_filters, find_ncu, ncu_version
from ncuflow.profile.ncu_errors import (
    MetricNotFound,
    NcuFailed,
    ProfileInterrupted,
    ProfileTimeout,
    error_from_log,
)
from ncuflow.profile.plan import ProfileJob, ProfilePlan, plan_job
from ncuflow.profile.process import (
    LogFollower,
    Progress,
    StopSignal,
    read_log,
    reap_leftovers,
    spawn_in_new_session,
    stop_process_group,
    terminating_signals_raise,
    wait_for_exit,
)
from ncuflow.profile.settings import ProfileSettings
from ncuflow.read.launch import Launch
from ncuflow.store import lock as point_lock
from ncuflow.store.manifest import CellFacts, Collection, Escalation, Machine, Manifest, RunIdentity
from ncuflow.store.typed import TypeMismatch, convert

Decide = Callable[[NcuOptions, tuple[Launch, ...]], Escalation | None]  # the run's escalation, from its launches


@dataclass(frozen=True)
class StoredRun:
    """A run just stored, with the launches read from its report (empty where not read here)."""

    record: store.RunRecord
    launches: tuple[Launch, ...] = ()


def _read_launches(report: Path) -> tuple[Launch, ...]:
    """Every intact launch of the run's report (raises ReportError for an unusable one)."""
    from ncuflow.read.extract import read_launches

    return read_launches(report)


# ----------------------------------------------------------------------------- execution


def _check_timeout(timeout: float) -> None:
    if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
        raise UsageError(f"--timeout {timeout!r} is not a positive number of seconds.",
                         "A timeout must be finite and greater than 0 (nan or inf would mean no timeout).",
                         "Give a number of seconds > 0, e.g. --timeout 900.")


def _waiting_note(progress: Progress | None) -> Callable[[dict[str, Any]], None]:
    def note(holder: dict[str, Any]) -> None:
        if progress is not None:
            who = f"pid {holder.get('pid')} on {holder.get('host')}" if holder.get("pid") else "another process"
            progress(f"waiting: {who} is profiling this point")
    return note


def execute(plan: ProfilePlan, settings: ProfileSettings, *, progress: Progress | None = None,
            decide: Decide | None = None, env: dict[str, str] | None = None) -> StoredRun:
    """Run a plan under ncu and store it as a complete run, or raise a typed error.

    The point's lock (``store.lock``) is held from before the run folder is made until
    the run is stored or removed: one writer per point, across processes.
    """
    if not plan.ncu_found:
        find_ncu(plan.ncu_path if plan.ncu_path != "ncu" else None)  # raises NcuNotFound
    _check_timeout(settings.timeout)
    point = plan.final_path.parent
    try:
        lock = point_lock.acquire(point, on_wait=_waiting_note(progress))
    except OSError as error:
        raise store.StoreError(*_os_parts(error, point, "lock the store folder")) from None
    assert lock is not None  # waits without a timeout
    try:
        return _Execution(plan, settings, lock, progress, decide, env).run()
    finally:
        lock.release()


def _os_parts(error: OSError, path: Path, doing: str) -> tuple[str, str, str]:
    message = os_error(error, path, doing)
    return message.what, message.why + " Every run already stored is intact.", message.fix + " Then re-run."


def first_manifest(plan: ProfilePlan, settings: ProfileSettings, version: str | None) -> Manifest:
    """What the manifest records before ncu runs: the point, the collection, the job's provenance."""
    job = plan.job
    identity = RunIdentity(cell=plan.spec.cell, params=plan.spec.as_dict(), content_key=plan.content_key,
                           run_id=plan.run_id, created_utc=store.utc_now_iso())
    collection = Collection(options=plan.options, command=plan.command, ncu_path=plan.ncu_path,
                            ncu_version=version, timeout_s=settings.timeout)
    return Manifest(identity=identity, collection=collection, machine=Machine(python=sys.executable),
                    cell_facts=job.cell_facts, provenance=job.provenance)


class _Execution:
    """One plan being run: the pending run folder, the ncu process and the manifest so far."""

    def __init__(self, plan: ProfilePlan, settings: ProfileSettings, lock: point_lock.PointLock,
                 progress: Progress | None, decide: Decide | None, env: dict[str, str] | None) -> None:
        self.plan, self.settings, self.lock = plan, settings, lock
        self.progress, self.decide, self.env = progress, decide, env
        self.version = ncu_version(Path(plan.ncu_path))
        self.manifest = first_manifest(plan, settings, self.version)
        self.pending: store.PendingRun | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def run(self) -> StoredRun:
        started = time.monotonic()
        try:
            pending = self.pending = store.begin_run(self.plan.store_root, self.plan.spec, self.plan.content_key,
                                                     self.plan.run_id)
            if pending.tmp_path != self.plan.tmp_path:  # planned in another process
                raise NcuflowError("Internal error: the run folder moved between planning and running.",
                                   "", "Plan and execute in the same process.")
            returncode = self._run_ncu(pending)
            self.manifest = self.manifest.with_outcome(wall_time_s=round(time.monotonic() - started, 3))
            if returncode is None:
                self._stop()
                self.manifest = self.manifest.with_outcome(exit_status="timeout")
                kept = store.keep_failed_run(pending, self.manifest)
                raise ProfileTimeout(self.settings.timeout, kept / store.LOG_NAME if kept else None)
            assert self.proc is not None
            reap_leftovers(self.proc)
            self.proc = None
            self.manifest = self.manifest.with_outcome(exit_status=returncode)
            return self._finish(pending, returncode)
        except (KeyboardInterrupt, StopSignal) as stop:
            self._stop()
            if self.pending is not None:
                store.abandon_run(self.pending)
            raise ProfileInterrupted(stop.signal_name if isinstance(stop, StopSignal) else "SIGINT") from None
        except BaseException:
            self._stop()
            if self.pending is not None and self.pending.tmp_path.exists():
                store.abandon_run(self.pending)
            raise
        finally:
            self.lock.record()

    def _run_ncu(self, pending: store.PendingRun) -> int | None:
        """ncu's exit code, or None when it ran past the timeout."""
        try:
            log = open(pending.log_path, "wb")  # noqa: SIM115 (closed below, after ncu ends)
        except OSError as error:
            raise store.StoreError(*_os_parts(error, pending.log_path, "create the ncu log")) from None
        with log, terminating_signals_raise(), LogPump(log) as pump:  # the log bounded (profile.log_pump)
            self.proc = spawn_in_new_session(list(self.plan.command), pump.writer, env=self.env,
                                             kill_grace=self.settings.kill_grace, deadline_s=self.settings.timeout)
            pump.spawned()
            self.lock.record(ncu_pgid=self.proc.pid, run=str(pending.tmp_path))
            status = wait_for_exit(self.proc, self.settings.timeout, LogFollower(pending.log_path, self.progress))
            if status is None:  # past its timeout: what it writes from now on is not waited for
                pump.drain_s = 0.0
            return status

    def _stop(self) -> None:
        if self.proc is not None:
            stop_process_group(self.proc, self.settings.kill_grace)
            self.proc = None

    def _finish(self, pending: store.PendingRun, returncode: int) -> StoredRun:
        text = read_log(pending.log_path)  # bounded: a program may write gigabytes
        failed_log = pending.final_path.parent / f"{store.FAILED_PREFIX}{self.plan.run_id}" / store.LOG_NAME
        launches, error = self._judge(pending, text, returncode, failed_log)
        if error is not None:
            generic = type(error) in (NcuFailed, ReportError)  # not a failure ncu named precisely
            full = _disk_full_error(self.plan, pending, text) if generic else None
            if full is not None:
                store.abandon_run(pending)
                raise full
            kept = store.keep_failed_run(pending, self.manifest.with_outcome(error=str(error)))
            if kept is None:  # the log was not kept: do not name it
                error = self._judge(pending, text, returncode, None)[1] or error
            raise error
        self.manifest = self._with_run_facts(self.manifest.with_outcome(actions=len(launches)), launches)
        if self.plan.representation_path is not None:
            with contextlib.suppress(OSError):
                self.plan.representation_path.unlink()
        return StoredRun(store.finish_run(pending, self.manifest), launches)

    def _judge(self, pending: store.PendingRun, text: str, returncode: int,
               log_path: Path | None) -> tuple[tuple[Launch, ...], NcuflowError | None]:
        """The report's launches, or the error that makes the run a failure."""
        error = error_from_log(text, returncode, filters=describe_filters(self.plan.options),
                               ncu_version=self.version, log_path=log_path)
        see = f"; the ncu log is {log_path}" if log_path else ""
        if error is None and not pending.report_path.is_file():
            error = NcuFailed(
                "ncu exited successfully but wrote no report.",
                f"The command exported to {pending.report_path}, which does not exist{see}.",
                "Check free disk space and that nothing else writes to the store; re-run.",
            )
        if error is not None:
            return (), error
        try:
            launches = _read_launches(pending.report_path)
        except ReportError as bad:
            return (), bad
        if not launches:
            return (), ReportError(
                "ncu wrote a report with no profiled kernel launch.",
                f"The report loads but holds zero actions{see}.",
                "Check the NVTX range / kernel filter and that the program launches kernels.",
            )
        return launches, None

    def _with_run_facts(self, manifest: Manifest, launches: tuple[Launch, ...]) -> Manifest:
        """The cell's facts and this machine's, and the escalation ``decide`` makes of the launches."""
        facts = _cell_record(self.plan.representation_path)
        machine = replace(manifest.machine, **_machine_facts(facts))
        cell = replace(manifest.cell_facts, **{k: facts[k] for k in _CELL_FACTS if facts.get(k) is not None})
        provenance = manifest.provenance
        if self.decide is not None:
            provenance = replace(provenance, escalation=self.decide(self.plan.options, launches))
        return replace(manifest, machine=machine, cell_facts=cell, provenance=provenance)


def _disk_full_error(plan: ProfilePlan, pending: store.PendingRun, text: str) -> store.StoreError | None:
    """The store's file system filled up during the run: say so, rather than blame ncu."""
    if "No space left on device" not in text and not is_disk_full(pending.tmp_path):
        return None
    return store.StoreError(
        f"The profile store {plan.store_root} ran out of disk space while this run was written "
        f"({pending.final_path.parent}).",
        "ncu's report (or its log) could not be written completely, so the run was not stored; "
        "every run already stored is intact.",
        "Free some space on that file system (or use another --store) and re-run.",
    )


_CELL_FACTS = ("representation", "expected_bytes", "check", "nvtx_range")
_MACHINE_FACTS = ("torch_version", "triton_version", "gpu_name", "gpu_uuid", "driver_version")


def _cell_record(path: Path | None) -> dict[str, Any]:
    """The JSON record the cell runner wrote (``ncuflow.cells.cellrun``), {} where there is none.

    A fact of the wrong type is left out, never fails the run."""
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    hints = {**_field_types(CellFacts), **_field_types(Machine)}
    return {k: v for k, v in data.items() if k in hints and _accepts(hints[k], v)}


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _accepts(kind: Any, value: Any) -> bool:
    try:
        convert(kind, value, "fact")
    except TypeMismatch:
        return False
    return True


def _machine_facts(facts: dict[str, Any]) -> dict[str, Any]:
    """Versions and the GPU: from the cell's record, else asked of this machine."""
    found = {k: facts[k] for k in _MACHINE_FACTS if facts.get(k) is not None}
    if not all(found.get(k) for k in ("gpu_name", "gpu_uuid", "driver_version")):
        for key, value in nvidia_smi_facts().items():
            if key in _MACHINE_FACTS:
                found.setdefault(key, value)
    found.setdefault("torch_version", package_version("torch"))
    found.setdefault("triton_version", package_version("triton"))
    return found


# ----------------------------------------------------------------------------- one-call API


MAX_METRIC_RETRIES = 3


def profile(job: ProfileJob, settings: ProfileSettings, *, progress: Progress | None = None,
            decide: Decide | None = None) -> StoredRun:
    """Profile one job under ncu and store the complete run.

    When ncu rejects metric names this ncu/GPU does not have, they are dropped and the job
    is run again: only names ncuflow itself asked for (a user's --metrics never are), at
    most ``MAX_METRIC_RETRIES`` times; the collection records them as ``exclude_metrics``,
    and the fields they fed are then reported missing (or come from a fallback alias),
    never zero.
    """
    attempt = 0
    while True:
        try:
            return execute(plan_job(job, settings), settings, progress=progress, decide=decide)
        except MetricNotFound as error:
            options = job.options
            droppable = [m for m in error.metrics
                         if m not in options.extra_metrics and m not in options.exclude_metrics]
            attempt += 1
            if (not settings.drop_unknown_metrics or attempt > MAX_METRIC_RETRIES or not droppable
                    or len(droppable) != len(error.metrics)):
                raise
        job = replace(job, options=replace(options, exclude_metrics=options.exclude_metrics + tuple(droppable)))
        if progress is not None:
            progress(f"ncu does not know {', '.join(droppable)}: dropped, profiling again")


__all__ = ["Decide", "StoredRun", "execute", "first_manifest", "profile"]
