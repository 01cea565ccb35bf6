"""Run one cell (or any program) under ncu and store the run, or say exactly why not.

The run is planned first (``plan_cell`` / ``plan_command_line``: the exact command and
where it will be stored, nothing touched: this is what ``--dry-run`` prints), then
executed (``execute``): ncu runs in its own process group with its output captured to
the run's ``ncu.log``; the wait has a deadline; Ctrl-C, SIGTERM and the deadline stop
ncu and every process it started (SIGTERM, then SIGKILL after a grace period). An
interrupted run is removed; a failed or timed-out run is kept only as a hidden
``.failed-<run-id>`` folder for its log; a successful one (exit 0, no ``==ERROR==``
line, a report that loads with at least one action) is renamed into place.

Never imports polars: this runs on the GPU host.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ncuflow import store
from ncuflow.errors import NcuflowError, ReportError, UsageError
from ncuflow.files import is_disk_full, os_error
from ncuflow.profile import DEFAULT_TIMEOUT_S
from ncuflow.profile.facts import nvidia_smi_facts, package_version
from ncuflow.profile.ncu import NcuOptions, describe_filters, find_ncu, ncu_version
from ncuflow.profile.ncu_errors import (
    MetricNotFound,
    NcuFailed,
    ProfileInterrupted,
    ProfileTimeout,
    error_from_log,
)
from ncuflow.profile.plan import (
    ProfilePlan,
    SpecLike,
    plan_cell,
    plan_command_line,
)
from ncuflow.profile.process import (
    KILL_GRACE_S,
    LogFollower,
    Progress,
    StopSignal,
    reap_leftovers,
    spawn_in_new_session,
    stop_process_group,
    terminating_signals_raise,
    wait_for_exit,
)
from ncuflow.store import lock as point_lock

# ----------------------------------------------------------------------------- planning


# ----------------------------------------------------------------------------- process control


# ----------------------------------------------------------------------------- facts for the manifest


def count_report_actions(report: Path) -> int:
    """Actions in a report (raises ReportError for an unusable one)."""
    from ncuflow.read.extract import count_actions

    return count_actions(report)


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


def execute(
    plan: ProfilePlan,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    progress: Progress | None = None,
    duration_unprofiled: Mapping[str, Any] | None = None,
    manifest_extra: Mapping[str, Any] | None = None,
    kill_grace: float = KILL_GRACE_S,
    env: Mapping[str, str] | None = None,
) -> store.RunRecord:
    """Run a plan under ncu and store it as a complete run, or raise a typed error.

    The point's lock (``store.lock``) is held from before the run folder is made until
    the run is stored or removed: one writer per point, across processes.
    """
    if not plan.ncu_found:
        find_ncu(plan.ncu_path if plan.ncu_path != "ncu" else None)  # raises NcuNotFound
    _check_timeout(timeout)
    point = plan.final_path.parent
    try:
        lock = point_lock.acquire(point, on_wait=_waiting_note(progress))
    except OSError as error:
        raise store.StoreError(*_os_parts(error, point, "lock the store folder")) from None
    assert lock is not None  # waits without a timeout
    try:
        return _execute_locked(plan, lock, timeout=timeout, progress=progress,
                               duration_unprofiled=duration_unprofiled, manifest_extra=manifest_extra,
                               kill_grace=kill_grace, env=env)
    finally:
        lock.release()


def _os_parts(error: OSError, path: Path, doing: str) -> tuple[str, str, str]:
    message = os_error(error, path, doing)
    return message.what, message.why + " Every run already stored is intact.", message.fix + " Then re-run."


def _execute_locked(
    plan: ProfilePlan,
    lock: point_lock.PointLock,
    *,
    timeout: float,
    progress: Progress | None,
    duration_unprofiled: Mapping[str, Any] | None,
    manifest_extra: Mapping[str, Any] | None,
    kill_grace: float,
    env: Mapping[str, str] | None,
) -> store.RunRecord:
    version = ncu_version(Path(plan.ncu_path))
    pending: store.PendingRun | None = None
    proc: subprocess.Popen[bytes] | None = None
    manifest: dict[str, Any] = {
        "cell": plan.cell, "params": plan.params, "content_key": plan.content_key,
        "command": list(plan.command), "ncu_path": plan.ncu_path, "ncu_version": version,
        "replay_mode": plan.options.replay_mode, "cache_control": plan.options.cache_control,
        "clock_control": plan.options.clock_control,
        "metric_set": plan.options.metric_set_label(),
        "nvtx_include": list(plan.options.nvtx_include), "kernel_regex": plan.options.kernel_regex,
        "launch_count": plan.options.launch_count, "timeout_s": timeout,
        "duration_unprofiled": dict(duration_unprofiled) if duration_unprofiled else None,
        "python": sys.executable,
        **plan.extra_manifest,
        **(manifest_extra or {}),
    }
    started = time.monotonic()
    try:
        pending = store.begin_run(plan.store_root, plan.cell, plan.slug, plan.content_key, plan.run_id)
        if pending.tmp_path != plan.tmp_path:  # planned in another process: follow the pid
            raise NcuflowError("Internal error: the run folder moved between planning and running.",
                               "", "Plan and execute in the same process.")
        manifest["created_utc"] = store.utc_now_iso()
        try:
            log = open(pending.log_path, "wb")  # noqa: SIM115 (closed below, after ncu ends)
        except OSError as error:
            raise store.StoreError(*_os_parts(error, pending.log_path, "create the ncu log")) from None
        with log, terminating_signals_raise():
            proc = spawn_in_new_session(
                list(plan.command), log, env=dict(env) if env is not None else None, kill_grace=kill_grace,
                deadline_s=timeout,
            )
            lock.record(ncu_pgid=proc.pid, run=str(pending.tmp_path))
            returncode = wait_for_exit(proc, timeout, LogFollower(pending.log_path, progress))
        manifest["wall_time_s"] = round(time.monotonic() - started, 3)
        if returncode is None:
            stop_process_group(proc, kill_grace)
            proc = None
            manifest["exit_status"] = "timeout"
            kept = store.keep_failed_run(pending, manifest)
            raise ProfileTimeout(timeout, kept / store.LOG_NAME if kept else None)
        reap_leftovers(proc)
        proc = None
        manifest["exit_status"] = returncode
        return _finish(plan, pending, manifest, returncode, version)
    except (KeyboardInterrupt, StopSignal) as stop:
        if proc is not None:
            stop_process_group(proc, kill_grace)
        if pending is not None:
            store.abandon_run(pending)
        name = stop.signal_name if isinstance(stop, StopSignal) else "SIGINT"
        raise ProfileInterrupted(name) from None
    except BaseException:
        if proc is not None:
            stop_process_group(proc, kill_grace)
        if pending is not None and pending.tmp_path.exists():
            store.abandon_run(pending)
        raise
    finally:
        lock.record()


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


def _finish(plan: ProfilePlan, pending: store.PendingRun, manifest: dict[str, Any],
            returncode: int, version: str | None) -> store.RunRecord:
    try:
        text = pending.log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    failed_log = pending.final_path.parent / f"{store.FAILED_PREFIX}{plan.run_id}" / store.LOG_NAME

    def judge(log_path: Path | None) -> NcuflowError | None:
        error = error_from_log(text, returncode, filters=describe_filters(plan.options),
                               ncu_version=version, log_path=log_path)
        see = f"; the ncu log is {log_path}" if log_path else ""
        if error is None and not pending.report_path.is_file():
            error = NcuFailed(
                "ncu exited successfully but wrote no report.",
                f"The command exported to {pending.report_path}, which does not exist{see}.",
                "Check free disk space and that nothing else writes to the store; re-run.",
            )
        if error is None:
            try:
                actions = count_report_actions(pending.report_path)
            except ReportError as bad:
                error = bad
            else:
                if actions <= 0:
                    error = ReportError(
                        "ncu wrote a report with no profiled kernel launch.",
                        f"The report loads but holds zero actions{see}.",
                        "Check the NVTX range / kernel filter and that the program launches kernels.",
                    )
                manifest["actions"] = actions
        return error

    error = judge(failed_log)
    if error is not None:
        generic = type(error) in (NcuFailed, ReportError)  # not a failure ncu named precisely
        full = _disk_full_error(plan, pending, text) if generic else None
        if full is not None:
            store.abandon_run(pending)
            raise full
        manifest["error"] = str(error)
        kept = store.keep_failed_run(pending, manifest)
        if kept is None:  # the log was not kept: do not name it
            error = judge(None) or error
        raise error
    manifest.update(_run_facts(plan))
    if plan.representation_path is not None:
        with contextlib.suppress(OSError):
            plan.representation_path.unlink()
    return store.finish_run(pending, manifest)


def _run_facts(plan: ProfilePlan) -> dict[str, Any]:
    """Versions, GPU and representation: from the cell's JSON, else from this machine."""
    facts: dict[str, Any] = {}
    if plan.representation_path is not None and plan.representation_path.is_file():
        try:
            data = json.loads(plan.representation_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        if isinstance(data, dict):
            for key in ("representation", "expected_bytes", "torch_version", "triton_version",
                        "gpu_name", "gpu_uuid", "driver_version", "check", "nvtx_range"):
                if data.get(key) is not None and store.field_accepts(key, data[key]):
                    facts[key] = data[key]  # a fact of the wrong type is left out, never fails the run
    if not all(facts.get(k) for k in ("gpu_name", "gpu_uuid", "driver_version")):
        for key, value in nvidia_smi_facts().items():
            facts.setdefault(key, value)
    facts.setdefault("torch_version", package_version("torch"))
    facts.setdefault("triton_version", package_version("triton"))
    return facts


# ----------------------------------------------------------------------------- one-call API


MAX_METRIC_RETRIES = 3


def _with_metric_retries(
    make_plan: Callable[[NcuOptions], ProfilePlan],
    options: NcuOptions,
    *,
    drop_unknown_metrics: bool,
    progress: Progress | None,
    run: Callable[[ProfilePlan, dict[str, Any]], store.RunRecord],
) -> store.RunRecord:
    """Run a plan; when ncu rejects metric names this ncu/GPU does not have, drop them and re-run.

    Only names ncuflow itself asked for are dropped (a user's --metrics never are), at
    most ``MAX_METRIC_RETRIES`` times; the manifest records them as ``dropped_metrics``,
    and the fields they fed are then reported missing (or come from a fallback alias),
    never zero.
    """
    dropped: list[str] = []
    attempt = 0
    while True:
        plan = make_plan(options)
        try:
            return run(plan, {"dropped_metrics": list(dropped)})
        except MetricNotFound as error:
            droppable = [m for m in error.metrics
                         if m not in options.extra_metrics and m not in options.exclude_metrics]
            attempt += 1
            if (not drop_unknown_metrics or attempt > MAX_METRIC_RETRIES or not droppable
                    or len(droppable) != len(error.metrics)):
                raise
        dropped += droppable
        options = replace(options, exclude_metrics=options.exclude_metrics + tuple(droppable))
        if progress is not None:
            progress(f"ncu does not know {', '.join(droppable)}: dropped, profiling again")


def profile_cell(
    spec: SpecLike,
    options: NcuOptions,
    store_root: Path,
    *,
    cells_dir: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    progress: Progress | None = None,
    ncu: str | os.PathLike[str] | None = None,
    duration_unprofiled: Mapping[str, Any] | None = None,
    manifest_extra: Mapping[str, Any] | None = None,
    kill_grace: float = KILL_GRACE_S,
    drop_unknown_metrics: bool = True,
) -> store.RunRecord:
    """Profile one cell under ncu and store the complete run."""

    def run(plan: ProfilePlan, extra: dict[str, Any]) -> store.RunRecord:
        return execute(plan, timeout=timeout, progress=progress, duration_unprofiled=duration_unprofiled,
                       manifest_extra={**extra, **(manifest_extra or {})}, kill_grace=kill_grace)

    return _with_metric_retries(
        lambda opts: plan_cell(spec, opts, store_root, cells_dir=cells_dir, ncu=ncu),
        options, drop_unknown_metrics=drop_unknown_metrics, progress=progress, run=run)


def profile_command_line(
    argv: Sequence[str],
    options: NcuOptions,
    store_root: Path,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    progress: Progress | None = None,
    ncu: str | os.PathLike[str] | None = None,
    manifest_extra: Mapping[str, Any] | None = None,
    kill_grace: float = KILL_GRACE_S,
    drop_unknown_metrics: bool = True,
) -> store.RunRecord:
    """Profile any program under ncu and store the complete run."""

    def run(plan: ProfilePlan, extra: dict[str, Any]) -> store.RunRecord:
        return execute(plan, timeout=timeout, progress=progress,
                       manifest_extra={**extra, **(manifest_extra or {})}, kill_grace=kill_grace)

    return _with_metric_retries(
        lambda opts: plan_command_line(argv, opts, store_root, ncu=ncu),
        options, drop_unknown_metrics=drop_unknown_metrics, progress=progress, run=run)
