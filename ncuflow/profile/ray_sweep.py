"""Sweeps on a Ray cluster: each replica of each point is a Ray task that needs one GPU.

    ncuflow sweep FILE --ray [ADDRESS]      # an existing cluster (`ray start --head`, ...)
    ncuflow sweep FILE --ray-local-gpus N   # a local Ray instance that declares N GPUs

Ray schedules, never ncuflow: a task asks for ``num_gpus=1`` and Ray sets
``CUDA_VISIBLE_DEVICES`` for it; Ray's own launchers cover Slurm and Kubernetes.

Where the store lives: **on the driver; runs are shipped back.** A task profiles with
the same ``profile_cell`` as a local sweep, into a scratch store in a temporary folder
of its node, and returns the run's files (report, manifest, log: a few MB); the driver
commits each one into the store with the store's own atomic commit (``store.begin_run``
/ ``finish_run``: a temporary folder renamed when complete). Why: a Ray cluster has no
file system common to its nodes unless one is set up, and even where the store is on
one (NFS, Lustre), only one process, the driver, writes it, so the atomic rename, the
stale-temporary clean-up (which can only check process ids of its own host) and the
per-point lock all act on one host. A task whose worker dies (killed, node lost) has
written nothing to the store; Ray retries it (``max_retries``) and the driver stores
the one result it gets, so a point is stored once. Resume is the local sweep's: the
driver counts complete runs per content key before it submits anything, and submits
only the missing replicas.

Ray is an optional extra (``pip install 'ncuflow[ray]'``), imported only here, only
under ``--ray`` / ``--ray-local-gpus``; the GPU host's own path never needs it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncuflow import store
from ncuflow.errors import NcuflowError, UsageError
from ncuflow.files import make_console, pid_alive
from ncuflow.profile.ncu import NcuOptions
from ncuflow.profile.ncu_errors import ProfileInterrupted
from ncuflow.profile.sweep import (
    SweepOutcome,
    SweepPlan,
    start_sweep,
    sweep_manifest_extra,
    sweep_progress,
)
from ncuflow.store.manifest import MANIFEST_NAME

# Tasks retried by Ray when their worker process or node dies (not on a profile's own error).
TASK_RETRIES = 3


def import_ray() -> Any:
    try:
        import ray
    except ImportError as error:
        raise UsageError(
            "--ray needs the Ray package, which is not installed.",
            f"Importing ray failed: {error}.",
            "Install it with `pip install 'ncuflow[ray]'` (on the driver and on every node of the cluster).",
        ) from error
    return ray


@dataclass(frozen=True)
class ShippedRun:
    """A complete run made on a Ray node, carried back to the driver as bytes."""

    cell: str
    point_folder: str  # <slug>-<key8>, as the node's store named it
    run_id: str
    manifest: dict[str, Any]
    report: bytes
    log: bytes


@dataclass(frozen=True)
class ShippedFailure:
    """A profile that failed on a Ray node: its error, and the manifest and ncu log the
    node kept as ``.failed-<run-id>``, carried back to the driver as bytes."""

    error: NcuflowError
    cell: str
    point_folder: str
    run_id: str
    manifest: dict[str, Any]
    log: bytes
    node_path: str  # the node's .failed-<run-id> folder, which the error's text names


def keep_shipped_failure(store_root: Path, failure: ShippedFailure) -> NcuflowError:
    """Keep a failed task's manifest and log in the driver's store as a local failure is kept
    (``store.keep_failed_run``), and return the error naming that copy (the node's scratch
    folder is gone when the task ends). Where it cannot be kept, the error is returned as the
    node wrote it."""
    slug = failure.point_folder.rsplit("-", 1)[0]
    try:
        pending = store.begin_run(store_root, failure.cell, slug, str(failure.manifest["content_key"]),
                                  failure.run_id)
    except (store.StoreError, KeyError):
        return failure.error
    try:
        pending.log_path.write_bytes(failure.log)
    except OSError:
        store.abandon_run(pending)
        return failure.error
    kept = store.keep_failed_run(pending, failure.manifest)
    if kept is not None:
        failure.error.replace_in_text(failure.node_path, str(kept))
    return failure.error


def _failure_to_ship(error: NcuflowError, scratch: Path) -> ShippedFailure | NcuflowError:
    """The error with what ``store.keep_failed_run`` kept of the run in the scratch store, if it did."""
    kept = sorted(scratch.glob(f"*/*/{store.FAILED_PREFIX}*"))
    if not kept:
        return error
    folder = kept[-1]
    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
        log = (folder / store.LOG_NAME).read_bytes()
    except (OSError, ValueError):
        return error
    return ShippedFailure(error=error, cell=folder.parent.parent.name, point_folder=folder.parent.name,
                          run_id=folder.name.removeprefix(store.FAILED_PREFIX), manifest=manifest, log=log,
                          node_path=str(folder))


SCRATCH_PREFIX = "ncuflow-ray-"


def remove_dead_scratch(folder: Path | None = None) -> list[Path]:
    """Remove the scratch stores of this node's dead task workers (a worker killed mid-profile)."""
    removed = []
    for path in Path(folder or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        pid = path.name[len(SCRATCH_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def profile_point_task(
    spec: Any, options: NcuOptions, cells_dir: Path | None, timeout: float, ncu: str | None,
    manifest_extra: dict[str, Any],
) -> ShippedRun | ShippedFailure | NcuflowError:
    """The body of a Ray task: profile one replica into a scratch store, ship it back.

    A profile's own failure is returned, not raised, with the log its node kept: Ray
    retries only what kills the worker, and the driver decides (stop, or keep going) as a
    local sweep does.
    """
    from ncuflow.profile.orchestrate import profile_cell

    remove_dead_scratch()
    scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
    try:
        extra = {**manifest_extra, "ray_node": os.uname().nodename,
                 "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
        record = profile_cell(spec, options, scratch, cells_dir=cells_dir, timeout=timeout, ncu=ncu,
                              manifest_extra=extra)
        return ShippedRun(
            cell=record.path.parent.parent.name, point_folder=record.path.parent.name,
            run_id=record.run_id, manifest=record.manifest.to_json(),
            report=record.report_path.read_bytes(),
            log=record.log_path.read_bytes() if record.log_path.exists() else b"",
        )
    except NcuflowError as error:
        return _failure_to_ship(error, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def commit_shipped(store_root: Path, shipped: ShippedRun, replicas: int | None = None) -> store.RunRecord | None:
    """Store a shipped run on the driver with the store's atomic commit, under the point's lock.

    This is the one place a Ray sweep writes the store. Under the lock the point's complete
    runs are counted again: when another sweep or profile has meanwhile stored the
    ``replicas`` asked for, the shipped run is dropped (None), so a point is never stored
    more often than asked.
    """
    from ncuflow.store.lock import point_lock

    slug = shipped.point_folder.rsplit("-", 1)[0]
    key = str(shipped.manifest["content_key"])
    with point_lock(store.point_dir(store_root, shipped.cell, slug, key)):
        if replicas is not None and len(store.complete_runs_for_key(store_root, shipped.cell, key)) >= replicas:
            return None
        pending = store.begin_run(store_root, shipped.cell, slug, key, shipped.run_id)
        try:
            pending.report_path.write_bytes(shipped.report)
            pending.log_path.write_bytes(shipped.log)
            return store.finish_run(pending, shipped.manifest)
        except BaseException:
            store.abandon_run(pending)
            raise


def _reachable(address: str, timeout: float = 10.0) -> None:
    """Fail fast on a HOST:PORT nobody listens on (Ray itself retries for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if host and port.isdigit():
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass


def connect(ray: Any, address: str | None, local_gpus: int | None) -> bool:
    """Connect to a cluster (address, or RAY_ADDRESS) or start a local one; True if we started it."""
    quiet = {"log_to_driver": False, "configure_logging": False}
    if local_gpus is not None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        ray.init(num_gpus=local_gpus, num_cpus=max(local_gpus, cores), include_dashboard=False, **quiet)
        return True
    try:
        if address and address != "auto":
            _reachable(address)
        ray.init(address=address or "auto", **quiet)
    except (ConnectionError, RuntimeError, ValueError, OSError) as error:
        raise NcuflowError(
            f"Cannot connect to the Ray cluster at {address or 'auto (RAY_ADDRESS or a local `ray start`)'}.",
            f"Ray said: {str(error).splitlines()[0] if str(error) else type(error).__name__}.",
            "Start one with `ray start --head` (then `ray start --address HEAD:6379` on each GPU node) and "
            "pass its address to --ray, or use --ray-local-gpus N on one machine.",
        ) from error
    return False


def cluster_gpus(ray: Any) -> float:
    return float(ray.cluster_resources().get("GPU", 0))


def run_sweep_on_ray(
    plan: SweepPlan,
    store_root: Path,
    *,
    address: str | None = None,
    local_gpus: int | None = None,
    ncu: str | None = None,
    cells_dir: Path | None = None,
    timeout: float | None = None,
    keep_going: bool = False,
    console: Any = None,
    show_progress: bool = True,
    on_stored: Callable[[store.RunRecord], None] | None = None,
    escalate: bool = True,
    threshold: float | None = None,
) -> SweepOutcome:
    """``run_sweep`` with each missing replica a Ray task; the same summary and outcome, and the
    same escalation to tier 2 (a second round of tasks, after tier 1)."""
    from ncuflow.profile.sweep_escalation import runs_to_escalate

    console = console or make_console()
    outcome, todo, total = start_sweep(plan, store_root, console)
    escalations: list[tuple[Any, store.RunRecord]] = []
    if total == 0:
        if escalate:  # only what an earlier, stopped sweep left unchecked
            escalations, outcome.unchecked = runs_to_escalate(plan, store_root, threshold, console.print)
        if not escalations:
            return outcome
    ray = import_ray()
    started = connect(ray, address, local_gpus)
    pending: dict[Any, Any] = {}
    try:
        gpus = cluster_gpus(ray)
        if gpus < 1:
            raise UsageError(
                "The Ray cluster offers no GPU, so no profile task can ever be scheduled.",
                f"Its resources are: {ray.cluster_resources()}.",
                "Start the GPU nodes' Ray with their GPUs (`ray start --num-gpus N`), or use --ray-local-gpus N.",
            )
        console.print(f"ray: {gpus:g} GPUs in the cluster; each profile is a task with num_gpus=1")
        remote = ray.remote(num_gpus=1, max_retries=TASK_RETRIES, retry_exceptions=False)(profile_point_task)
        for status in todo:
            for replica in range(status.done, plan.replicas):
                extra = sweep_manifest_extra(plan, replica)
                ref = remote.remote(status.point.spec, plan.options, cells_dir, timeout or plan.timeout, ncu, extra)
                pending[ref] = status.point
        failed_points: set[str] = set()
        with sweep_progress(console, show_progress) as progress:
            task = progress.add_task(plan.name, total=total)
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                point = pending.pop(ready[0])
                result = ray.get(ready[0])
                if isinstance(result, ShippedFailure):
                    result = keep_shipped_failure(store_root, result)
                if isinstance(result, NcuflowError):  # one replica's task; said once per point
                    outcome.point_failed(point, result, progress.console.print, keep_going=keep_going,
                                         already_said=point.content_key in failed_points)
                    failed_points.add(point.content_key)
                    progress.advance(task)
                    continue
                record = commit_shipped(store_root, result, plan.replicas)
                if record is None:  # another writer stored the point's replicas meanwhile
                    progress.update(task, description=f"{point.spec_text} already stored elsewhere")
                    progress.advance(task)
                    continue
                outcome.profiled.append(record)
                if on_stored is not None:
                    on_stored(record)
                progress.update(task, description=f"{point.spec_text} stored")
                progress.advance(task)
        if escalate and total > 0:
            escalations, outcome.unchecked = runs_to_escalate(plan, store_root, threshold, console.print)
        _escalate_on_ray(plan, store_root, outcome, console, remote, escalations, pending, ray,
                         cells_dir=cells_dir, timeout=timeout or plan.timeout, ncu=ncu, keep_going=keep_going)
    except KeyboardInterrupt:
        raise ProfileInterrupted("SIGINT") from None
    finally:
        for ref in pending:  # what is still running when the sweep stops early
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        if started:
            ray.shutdown()
    return outcome


def _escalate_on_ray(plan: SweepPlan, store_root: Path, outcome: SweepOutcome, console: Any, remote: Any,
                     escalations: list[tuple[Any, store.RunRecord]], pending: dict[Any, Any], ray: Any, *,
                     cells_dir: Path | None, timeout: float, ncu: str | None, keep_going: bool) -> None:
    """Tier 2 for the runs tier 1 left undecided: one task each; committed under ``.tier2``
    and named in the tier-1 run on this machine, as ``profile`` does."""
    from ncuflow.profile.escalate import tier2_options, tier2_root
    from ncuflow.profile.sweep_escalation import commit_escalation, tier2_manifest_extra

    tier2 = {remote.remote(point.spec, tier2_options(plan.options), cells_dir, timeout, ncu,
                           tier2_manifest_extra(plan, run)): (point, run) for point, run in escalations}
    pending.update(tier2)
    while tier2:
        ready, _ = ray.wait(list(tier2), num_returns=1)
        point, run = tier2.pop(ready[0])
        pending.pop(ready[0], None)
        result = ray.get(ready[0])
        if isinstance(result, ShippedFailure):
            result = keep_shipped_failure(tier2_root(store_root), result)
        if isinstance(result, NcuflowError):
            outcome.point_failed(point, result, console.print, keep_going=keep_going, stage="tier 2 of ")
            continue
        shipped: ShippedRun = result

        def store_tier2(shipped: ShippedRun = shipped) -> store.RunRecord | None:
            return commit_shipped(tier2_root(store_root), shipped)

        second = commit_escalation(plan, point, run, store_root, store_tier2)
        if second is not None:
            outcome.escalated.append(second)
            console.print(f"stored tier 2 of {point.spec_text} in {second.path}", soft_wrap=True)


def ray_doctor_checks(address: str | None) -> list[tuple[str, str, str, str | None]]:
    """(name, status, detail, fix) rows for ``ncuflow doctor``: is Ray importable; the cluster's GPUs."""
    try:
        import ray
    except ImportError:
        return [("ray", "info", "not installed (sweeps run on this machine only; --ray needs it)",
                 "pip install 'ncuflow[ray]'")]
    rows: list[tuple[str, str, str, str | None]] = [("ray", "ok", f"importable ({ray.__version__})", None)]
    if address is None:
        return rows
    try:
        connect(ray, address, None)
    except NcuflowError as error:
        return [*rows, ("ray cluster", "fail", error.what, f"{error.why} {error.fix}")]
    try:
        resources = ray.cluster_resources()
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        gpus = float(resources.get("GPU", 0))
        status = "ok" if gpus >= 1 else "warn"
        rows.append(("ray cluster", status, f"{address}: {nodes} nodes, {gpus:g} GPUs, {float(resources.get('CPU', 0)):g} CPUs",
                     None if gpus >= 1 else "Start the GPU nodes with `ray start --address HEAD:6379 --num-gpus N`."))
    finally:
        ray.shutdown()
    return rows
