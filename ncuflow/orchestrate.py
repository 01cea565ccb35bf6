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
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import IO, Any, Protocol

from ncuflow import store
from ncuflow.errors import NcuflowError, ReportError, UsageError
from ncuflow.ncu import (
    DECISIVE,
    MetricNotFound,
    NcuFailed,
    NcuOptions,
    ProfileInterrupted,
    ProfileTimeout,
    build_command,
    describe_filters,
    error_from_log,
    find_ncu,
    ncu_version,
    nvtx_include_for_range,
)

DEFAULT_TIMEOUT_S = 900.0  # seconds; replay of a full set can take minutes
KILL_GRACE_S = 5.0
REPRESENTATION_FILE = "representation.json"
COMMAND_CELL = "command"  # the store's "cell" for `ncuflow profile -- CMD ...`

Progress = Callable[[str], None]


class SpecLike(Protocol):
    """What orchestrate needs of ``ncuflow.cells.CellSpec``."""

    @property
    def cell(self) -> str: ...

    @property
    def params(self) -> Any: ...  # tuple of (name, value) pairs, or a mapping

    def text(self) -> str: ...

    def slug(self) -> str: ...

    def content_key(self) -> str: ...


@dataclass(frozen=True)
class ProfilePlan:
    """Everything a run will do, decided before anything runs."""

    cell: str
    params: dict[str, Any]
    content_key: str
    slug: str
    run_id: str
    command: tuple[str, ...]
    ncu_path: str
    ncu_found: bool
    options: NcuOptions
    store_root: Path
    tmp_path: Path
    final_path: Path
    representation_path: Path | None
    extra_manifest: dict[str, Any] = field(default_factory=dict)

    def shell_line(self) -> str:
        """The command as one copy-pasteable line (for display only; runs use the list)."""
        import shlex

        return shlex.join(self.command)


# ----------------------------------------------------------------------------- planning


def _params_of(spec: SpecLike) -> dict[str, Any]:
    params = spec.params
    return dict(params.items()) if isinstance(params, Mapping) else dict(params)


def _resolve_ncu(ncu: str | os.PathLike[str] | None, *, must_exist: bool) -> tuple[str, bool]:
    try:
        path, _how = find_ncu(ncu)
        return str(path), True
    except NcuflowError:
        if must_exist:
            raise
        return str(ncu) if ncu else "ncu", False


def _paths(store_root: Path, cell: str, slug: str, key: str, run_id: str) -> tuple[Path, Path]:
    point = store.point_dir(store_root, cell, slug, key)
    return point / f"{store.TMP_PREFIX}{run_id}-{os.getpid()}", point / run_id


def recorded_options(manifest: Mapping[str, Any]) -> NcuOptions:
    """The collection options a stored run was profiled with, to re-profile it alike.

    Replicas of one point must differ only in the replay itself: a re-profile with other
    options (a locked clock, another metric set) would be pooled with the stored run and
    read as instability. The metric-set label is the one ``NcuOptions.metric_set_label``
    wrote (``set;sections:a,b;+metrics:x;-metrics:y``).
    """
    label = str(manifest.get("metric_set") or DECISIVE)
    metric_set, *parts = label.split(";")
    lists: dict[str, tuple[str, ...]] = {"sections:": (), "+metrics:": (), "-metrics:": ()}
    for part in parts:
        for prefix in lists:
            if part.startswith(prefix):
                lists[prefix] = tuple(name for name in part[len(prefix):].split(",") if name)
    defaults = NcuOptions()
    launch_count = manifest.get("launch_count")
    return NcuOptions(
        replay_mode=str(manifest.get("replay_mode") or defaults.replay_mode),
        cache_control=str(manifest.get("cache_control") or defaults.cache_control),
        clock_control=str(manifest.get("clock_control") or defaults.clock_control),
        metric_set=metric_set,
        sections=lists["sections:"],
        extra_metrics=lists["+metrics:"],
        exclude_metrics=lists["-metrics:"],
        launch_count=int(launch_count) if launch_count is not None else None,
        kernel_regex=manifest.get("kernel_regex") or None,
        nvtx_include=tuple(manifest.get("nvtx_include") or ()),
    )


def cell_options(spec: SpecLike, options: NcuOptions) -> NcuOptions:
    """The options for a built-in cell: its NVTX range unless a kernel regex or range is given."""
    if options.nvtx_include or options.kernel_regex:
        return options
    from ncuflow.cells import nvtx_range_name

    return replace(options, nvtx_include=(nvtx_include_for_range(nvtx_range_name(spec.cell)),))


def plan_cell(
    spec: SpecLike,
    options: NcuOptions,
    store_root: Path,
    *,
    cells_dir: Path | None = None,
    ncu: str | os.PathLike[str] | None = None,
    dry_run: bool = False,
    run_id: str | None = None,
) -> ProfilePlan:
    """Plan profiling one cell spec (resolves ncu; with ``dry_run`` a missing ncu is shown as 'ncu')."""
    options = cell_options(spec, options)
    root = Path(store_root).absolute()
    ncu_path, found = _resolve_ncu(ncu, must_exist=not dry_run)
    rid = run_id or store.new_run_id()
    key = spec.content_key()
    slug = spec.slug()
    tmp, final = _paths(root, spec.cell, slug, key, rid)
    representation = tmp / REPRESENTATION_FILE
    app: list[str] = [sys.executable, "-m", "ncuflow.cellrun", spec.text(),
                      "--representation-out", str(representation)]
    if cells_dir is not None:
        app += ["--cells-dir", str(cells_dir)]
    command = build_command(ncu_path, options, tmp / store.REPORT_NAME, app)
    return ProfilePlan(
        cell=spec.cell, params=_params_of(spec), content_key=key, slug=slug, run_id=rid,
        command=tuple(command), ncu_path=ncu_path, ncu_found=found, options=options,
        store_root=root, tmp_path=tmp, final_path=final,
        representation_path=representation, extra_manifest={"spec": spec.text()},
    )


def command_content_key(argv: Sequence[str], options: NcuOptions) -> str:
    payload = json.dumps({"cell": COMMAND_CELL, "argv": list(argv),
                          "nvtx": list(options.nvtx_include), "kernel": options.kernel_regex},
                         sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def plan_command_line(
    argv: Sequence[str],
    options: NcuOptions,
    store_root: Path,
    *,
    ncu: str | os.PathLike[str] | None = None,
    dry_run: bool = False,
    run_id: str | None = None,
) -> ProfilePlan:
    """Plan profiling any program (``ncuflow profile -- CMD ARGS``)."""
    if not argv:
        raise UsageError("There is no program after `--`.", "",
                         "Write e.g. `ncuflow profile --kernel gemm -- ./app --size 4096`.")
    root = Path(store_root).absolute()
    ncu_path, found = _resolve_ncu(ncu, must_exist=not dry_run)
    rid = run_id or store.new_run_id()
    key = command_content_key(argv, options)
    slug = store.params_slug({"prog": Path(argv[0]).name})
    tmp, final = _paths(root, COMMAND_CELL, slug, key, rid)
    command = build_command(ncu_path, options, tmp / store.REPORT_NAME, list(argv))
    params: dict[str, Any] = {"argv": list(argv)}
    if options.kernel_regex:
        params["kernel"] = options.kernel_regex
    if options.nvtx_include:
        params["nvtx"] = list(options.nvtx_include)
    return ProfilePlan(
        cell=COMMAND_CELL, params=params, content_key=key, slug=slug, run_id=rid,
        command=tuple(command), ncu_path=ncu_path, ncu_found=found, options=options,
        store_root=root, tmp_path=tmp, final_path=final, representation_path=None,
    )


# ----------------------------------------------------------------------------- process control


class _Stop(BaseException):
    """Raised inside the wait when SIGTERM/SIGHUP arrives (SIGINT raises KeyboardInterrupt)."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


@contextlib.contextmanager
def _terminating_signals_raise() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into an exception while ncu runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise _Stop(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _spawn_in_new_session(
    command: list[str], log: IO[bytes], *, env: dict[str, str] | None, kill_grace: float
) -> subprocess.Popen[bytes]:
    """Start ncu as the leader of its own session, with no window where a signal orphans it.

    A Ctrl-C (or SIGTERM/SIGHUP) that lands after the fork but before the caller holds
    the Popen object would leave ncu running in its own session, where no signal of
    ours reaches it. Signals are held while it starts; one that arrived meanwhile stops
    the new process group first and is then delivered to the handlers in force.
    """
    if threading.current_thread() is not threading.main_thread():
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
    held: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        held.append(signum)

    previous = {
        sig: signal.signal(sig, hold)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        if signal.getsignal(sig) is not signal.SIG_IGN  # an ignored signal stays ignored
    }
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if held:
            if proc is not None:
                stop_process_group(proc, kill_grace)
            signal.raise_signal(held[0])
    return proc


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_process_group(proc: subprocess.Popen[bytes], grace: float = KILL_GRACE_S) -> None:
    """Stop ncu and everything in its process group: SIGTERM, then SIGKILL after ``grace`` s."""
    pgid = proc.pid  # start_new_session=True makes ncu the leader of its own group
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _group_alive(pgid):
            break
        time.sleep(0.05)
    if _group_alive(pgid) or proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=max(grace, 1.0))
    end = time.monotonic() + 2.0
    while _group_alive(pgid) and time.monotonic() < end:  # reaped by init once killed
        time.sleep(0.05)


def _reap_leftovers(proc: subprocess.Popen[bytes]) -> None:
    """ncu has exited: kill whatever it left running in its process group."""
    if _group_alive(proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


class _LogFollower:
    """Hands new complete lines of the growing log to a progress callback."""

    def __init__(self, path: Path, progress: Progress | None) -> None:
        self.path = path
        self.progress = progress
        self.offset = 0
        self.partial = b""

    def poll(self) -> None:
        if self.progress is None:
            return
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except OSError:
            return
        self.offset += len(chunk)
        data = self.partial + chunk
        *lines, self.partial = data.split(b"\n")
        for line in lines:
            text = line.decode("utf-8", "replace").rstrip()
            if text.startswith("==PROF==") or text.startswith("==ERROR==") or text.startswith("==WARNING=="):
                self.progress(text)


def _wait(proc: subprocess.Popen[bytes], timeout: float, follower: _LogFollower) -> int | None:
    """The exit status, or None when the deadline passed first."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            status = proc.wait(timeout=min(0.2, remaining))
        except subprocess.TimeoutExpired:
            follower.poll()
        else:
            follower.poll()
            return status


# ----------------------------------------------------------------------------- facts for the manifest


def _nvidia_smi_facts(timeout: float = 10.0) -> dict[str, Any]:
    import shutil

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        done = subprocess.run(
            [smi, "--query-gpu=name,uuid,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    first = done.stdout.strip().splitlines()[:1]
    if done.returncode != 0 or not first:
        return {}
    parts = [p.strip() for p in first[0].split(",")]
    if len(parts) < 3:
        return {}
    return {"gpu_name": parts[0], "gpu_uuid": parts[1], "driver_version": parts[2]}


def _package_version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def count_report_actions(report: Path) -> int:
    """Actions in a report (raises ReportError for an unusable one)."""
    from ncuflow.extract import count_actions

    return count_actions(report)


# ----------------------------------------------------------------------------- execution


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
    """Run a plan under ncu and store it as a complete run, or raise a typed error."""
    if not plan.ncu_found:
        find_ncu(plan.ncu_path if plan.ncu_path != "ncu" else None)  # raises NcuNotFound
    if timeout <= 0:
        raise UsageError(f"--timeout {timeout:g} is not positive.", "", "Give a number of seconds > 0.")
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
        with open(pending.log_path, "wb") as log, _terminating_signals_raise():
            proc = _spawn_in_new_session(
                list(plan.command), log, env=dict(env) if env is not None else None, kill_grace=kill_grace
            )
            returncode = _wait(proc, timeout, _LogFollower(pending.log_path, progress))
        manifest["wall_time_s"] = round(time.monotonic() - started, 3)
        if returncode is None:
            stop_process_group(proc, kill_grace)
            proc = None
            manifest["exit_status"] = "timeout"
            kept = store.keep_failed_run(pending, manifest)
            raise ProfileTimeout(timeout, kept / store.LOG_NAME if kept else None)
        _reap_leftovers(proc)
        proc = None
        manifest["exit_status"] = returncode
        return _finish(plan, pending, manifest, returncode, version)
    except (KeyboardInterrupt, _Stop) as stop:
        if proc is not None:
            stop_process_group(proc, kill_grace)
        if pending is not None:
            store.abandon_run(pending)
        name = stop.signal_name if isinstance(stop, _Stop) else "SIGINT"
        raise ProfileInterrupted(name) from None
    except BaseException:
        if proc is not None:
            stop_process_group(proc, kill_grace)
        if pending is not None and pending.tmp_path.exists():
            store.abandon_run(pending)
        raise


def _finish(plan: ProfilePlan, pending: store.PendingRun, manifest: dict[str, Any],
            returncode: int, version: str | None) -> store.RunRecord:
    text = pending.log_path.read_text(encoding="utf-8", errors="replace")
    failed_log = pending.final_path.parent / f"{store.FAILED_PREFIX}{plan.run_id}" / store.LOG_NAME
    error = error_from_log(text, returncode, filters=describe_filters(plan.options),
                           ncu_version=version, log_path=failed_log)
    if error is None and not pending.report_path.is_file():
        error = NcuFailed(
            "ncu exited successfully but wrote no report.",
            f"The command exported to {pending.report_path}, which does not exist; "
            f"the ncu log is {failed_log}.",
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
                    f"The report loads but holds zero actions; the ncu log is {failed_log}.",
                    "Check the NVTX range / kernel filter and that the program launches kernels.",
                )
            manifest["actions"] = actions
    if error is not None:
        manifest["error"] = str(error)
        store.keep_failed_run(pending, manifest)
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
                if data.get(key) is not None:
                    facts[key] = data[key]
    if not all(facts.get(k) for k in ("gpu_name", "gpu_uuid", "driver_version")):
        for key, value in _nvidia_smi_facts().items():
            facts.setdefault(key, value)
    facts.setdefault("torch_version", _package_version("torch"))
    facts.setdefault("triton_version", _package_version("triton"))
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
