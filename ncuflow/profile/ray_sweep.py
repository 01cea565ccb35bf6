"""Sweeps on a Ray cluster: each replica of each point is a Ray task that needs one GPU.

    ncuflow sweep FILE --ray [ADDRESS]      # an existing cluster (`ray start --head`, ...)
    ncuflow sweep FILE --ray-local-gpus N   # a local Ray instance that declares N GPUs

Ray schedules, never ncuflow: a task asks for ``num_gpus=1`` and Ray sets
``CUDA_VISIBLE_DEVICES`` for it; Ray's own launchers cover Slurm and Kubernetes.

Where the store lives: **on the driver; runs are shipped back.** A task profiles with
the same ``profile_tier1`` as a local sweep (its escalation judged on the node), into a scratch store in a temporary folder
of its node, and returns the run's files (report, manifest, log: a few MB; a log over
``SHIPPED_LOG_BYTES`` is cut in its middle, the cut named); the driver
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ncuflow import store
from ncuflow.errors import NcuflowError, UsageError
from ncuflow.files.owner import owner_tag, tag_owner_dead
from ncuflow.files.safe_text import markup_text
from ncuflow.profile.escalation import Undecided, commit_tier2, profile_tier1, tier2_job
from ncuflow.profile.ncu_errors import ProfileInterrupted
from ncuflow.profile.orchestrate import StoredRun, profile
from ncuflow.profile.plan import ProfileJob
from ncuflow.profile.settings import ProfileSettings
from ncuflow.profile.sweep import SweepPoint
from ncuflow.profile.sweep_run import PointStatus, SweepContext, SweepOutcome
from ncuflow.store import tiers
from ncuflow.store.manifest import MANIFEST_NAME, Manifest

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

    manifest: dict[str, Any]
    report: bytes
    log: bytes


@dataclass(frozen=True)
class ShippedFailure:
    """A profile that failed on a Ray node: its error, and the manifest and ncu log the
    node kept as ``.failed-<run-id>``, carried back to the driver as bytes."""

    error: NcuflowError
    manifest: dict[str, Any]
    log: bytes
    node_path: str  # the node's .failed-<run-id> folder, which the error's text names


# A run's ncu.log holds the profiled program's output, which has no bound (a program writing
# 1.3 GB of lines); a task ships at most this much of it: its head (ncu's banner and the
# program's first lines) and its tail (ncu's own errors and result lines), the cut named.
SHIPPED_LOG_BYTES = 8 << 20
_SHIPPED_HEAD_BYTES = 1 << 20


def log_to_ship(path: Path, limit: int = SHIPPED_LOG_BYTES) -> bytes:
    """A run's log as a task ships it: whole up to ``limit`` bytes, else its first MiB, a line
    naming what was left out, and its last bytes (read by seeking: memory stays bounded)."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size <= limit:
                return handle.read(limit)
            head = handle.read(_SHIPPED_HEAD_BYTES)
            tail_bytes = limit - _SHIPPED_HEAD_BYTES
            handle.seek(size - tail_bytes)
            tail = handle.read(tail_bytes)
    except FileNotFoundError:
        return b""
    left_out = size - len(head) - len(tail)
    return head + (f"\n[ncuflow: {left_out:,} bytes of this log left out on the Ray node "
                   f"({size:,} bytes in all); the first and last bytes are kept]\n").encode() + tail


def _typed(shipped: ShippedRun | ShippedFailure) -> Manifest:
    return Manifest.from_json(shipped.manifest, "<shipped manifest>")


def keep_shipped_failure(store_root: Path, failure: ShippedFailure) -> NcuflowError:
    """Keep a failed task's manifest and log in the driver's store as a local failure is kept
    (``store.keep_failed_run``), and return the error naming that copy (the node's scratch
    folder is gone when the task ends). Where it cannot be kept, the error is returned as the
    node wrote it."""
    try:
        manifest = _typed(failure)
        pending = store.begin_run(store_root, manifest.spec, manifest.content_key, manifest.run_id)
    except NcuflowError:
        return failure.error
    try:
        pending.log_path.write_bytes(failure.log)
    except OSError:
        store.abandon_run(pending)
        return failure.error
    kept = store.keep_failed_run(pending, manifest)
    if kept is not None:
        failure.error.replace_in_text(failure.node_path, str(kept))
    return failure.error


def _failure_to_ship(error: NcuflowError, scratch: Path) -> ShippedFailure | NcuflowError:
    """The error with what ``store.keep_failed_run`` kept of the run in the scratch store, if it did."""
    kept = sorted(scratch.glob(f"**/{store.FAILED_PREFIX}*"))
    if not kept:
        return error
    folder = kept[-1]
    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
        log = log_to_ship(folder / store.LOG_NAME)
    except (OSError, ValueError):
        return error
    return ShippedFailure(error=error, manifest=manifest, log=log, node_path=str(folder))


SCRATCH_PREFIX = "ncuflow-ray-"


def remove_dead_scratch(folder: Path | None = None) -> list[Path]:
    """Remove the scratch stores of this node's dead task workers (a worker killed mid-profile)."""
    removed = []
    for path in Path(folder or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        owner = path.name[len(SCRATCH_PREFIX):].split("-", 1)[0]  # files.owner's tag: beyond a pid
        if tag_owner_dead(owner):  # of this host, boot and PID namespace, and gone (a pid alone proves nothing)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def profile_point_task(job: ProfileJob, settings: ProfileSettings, tier: int) -> ShippedRun | ShippedFailure | NcuflowError:
    """The body of a Ray task: profile one job into a scratch store, ship it back.

    Tier 1 is judged for escalation on the node, as a local sweep judges it. A profile's own
    failure is returned, not raised, with the log its node kept: Ray retries only what kills
    the worker, and the driver decides (stop, or keep going) as a local sweep does.
    """
    remove_dead_scratch()
    scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{owner_tag()}-"))
    try:
        here = replace(job, store=None)
        local = replace(settings, store=scratch)
        stored = profile_tier1(here, local) if tier == 1 else profile(here, local)
        record = stored.record
        machine = replace(record.manifest.machine, node=os.uname().nodename,
                          cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
        return ShippedRun(manifest=replace(record.manifest, machine=machine).to_json(),
                          report=record.report_path.read_bytes(),
                          log=log_to_ship(record.log_path))
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

    manifest = _typed(shipped)
    with point_lock(store.point_dir(store_root, manifest.spec, manifest.content_key)):
        present = store.runs_for_key(store_root, manifest.cell, manifest.content_key)  # unreadable ones count
        if replicas is not None and len(present.complete) + len(present.unreadable) >= replicas:
            return None
        pending = store.begin_run(store_root, manifest.spec, manifest.content_key, manifest.run_id)
        try:
            pending.report_path.write_bytes(shipped.report)
            pending.log_path.write_bytes(shipped.log)
            return store.finish_run(pending, manifest)
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


class RayExecutor:
    """The profiles of a sweep as Ray tasks, one GPU each; the runs committed here as they return."""

    def __init__(self, context: SweepContext) -> None:
        placement = context.sweep.ray
        assert placement is not None
        self.context = context
        self.ray = import_ray()
        self.started = connect(self.ray, placement.address, placement.local_gpus)
        self.pending: dict[Any, Any] = {}
        try:
            gpus = cluster_gpus(self.ray)
            if gpus < 1:
                raise UsageError(
                    "The Ray cluster offers no GPU, so no profile task can ever be scheduled.",
                    f"Its resources are: {self.ray.cluster_resources()}.",
                    "Start the GPU nodes' Ray with their GPUs (`ray start --num-gpus N`), or use --ray-local-gpus N.",
                )
        except BaseException:
            self.close()
            raise
        context.console.print(f"ray: {gpus:g} GPUs in the cluster; each profile is a task with num_gpus=1")
        self.remote = self.ray.remote(num_gpus=1, max_retries=TASK_RETRIES, retry_exceptions=False)(profile_point_task)

    def close(self) -> None:
        for ref in self.pending:  # what is still running when the sweep stops early
            with contextlib.suppress(Exception):
                self.ray.cancel(ref)
        self.pending.clear()
        if self.started:
            self.ray.shutdown()
            self.started = False

    def _submit(self, job: ProfileJob, tier: int, what: Any) -> None:
        self.pending[self.remote.remote(job, self.context.settings, tier)] = what

    def _results(self) -> Any:
        """(what was submitted, its result) as each task ends; Ctrl-C stops the sweep."""
        try:
            while self.pending:
                ready, _ = self.ray.wait(list(self.pending), num_returns=1)
                what = self.pending.pop(ready[0])
                yield what, self.ray.get(ready[0])
        except KeyboardInterrupt:
            raise ProfileInterrupted("SIGINT") from None

    def tier1(self, todo: list[PointStatus], total: int, outcome: SweepOutcome) -> None:
        context = self.context
        for status in todo:
            for replica in range(status.done, context.plan.replicas):
                self._submit(context.job(status.point, replica), 1, status.point)
        failed: set[str] = set()
        with context.progress() as progress:
            task = progress.add_task(markup_text(context.plan.name), total=total)
            for point, result in self._results():
                progress.advance(task)
                record = self._commit(point, result, context.store_root, outcome, failed, progress.console.print,
                                      replicas=context.plan.replicas)
                if record is None:
                    continue
                outcome.profiled.append(record)
                progress.update(task, description=f"{markup_text(point.spec_text)} stored")

    def tier2(self, todo: list[tuple[SweepPoint, Undecided]], outcome: SweepOutcome) -> None:
        context = self.context
        for point, item in todo:
            job = tier2_job(item.run, context.job(point, item.run.manifest.provenance.replica or 0))
            self._submit(replace(job, store=None), 2, (point, item))
        for (point, item), result in self._results():
            tier2 = tiers.tier2_root(item.run.store_root)

            def commit(result: Any = result, point: SweepPoint = point, tier2: Path = tier2) -> StoredRun | None:
                record = self._commit(point, result, tier2, outcome, set(), context.console.print, stage="tier 2 of ")
                return StoredRun(record) if record is not None else None

            second = commit_tier2(item.run, commit)
            if second is not None:
                outcome.escalated.append(second.record)
                context.console.print(f"stored tier 2 of {markup_text(point.spec_text)} in "
                                      f"{markup_text(second.record.path)}", soft_wrap=True)

    def _commit(self, point: SweepPoint, result: Any, root: Path, outcome: SweepOutcome, failed: set[str],
                say: Any, *, replicas: int | None = None, stage: str = "") -> store.RunRecord | None:
        """A task's result stored in ``root``, or its failure kept and judged by the one rule."""
        if isinstance(result, ShippedFailure):
            result = keep_shipped_failure(root, result)
        if isinstance(result, NcuflowError):  # one replica's task; said once per point
            outcome.point_failed(point, result, say, keep_going=self.context.sweep.keep_going, stage=stage,
                                 already_said=point.content_key in failed)
            failed.add(point.content_key)
            return None
        return commit_shipped(root, result, replicas)


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
