"""Planning a profile: what runs (a cell, any program, or a running process), under which ncu command, stored where.

A ``ProfileJob`` is one profile to run: its ``Target`` (a ``CellTarget``, an ``AttachTarget`` or a
``CommandTarget``), what ncu collects (``NcuOptions``), the store it goes to and its
provenance (replica, sweep, escalation). ``plan_job(job, settings)`` decides everything
before anything runs (the exact command, the content key, the run folders: what
``--dry-run`` prints); ``ncuflow.profile.orchestrate`` executes the plan.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ncuflow import store
from ncuflow.cells.contract import CellSpec, nvtx_range_name
from ncuflow.errors import NcuflowError, UsageError
from ncuflow.profile.ncu import (
    NcuOptions,
    attach_mode,
    build_command,
    find_ncu,
    ncu_version,
    nvtx_include_for_range,
    require_attach,
)
from ncuflow.profile.settings import ProfileSettings
from ncuflow.store.manifest import CellFacts, Provenance

REPRESENTATION_FILE = "representation.json"
COMMAND_CELL = "command"  # the store's "cell" for `ncuflow profile -- CMD ...`


@dataclass(frozen=True)
class CellTarget:
    """A cell of the registry (built in, or from the settings' cell folder)."""

    spec: CellSpec

    @property
    def label(self) -> str:
        return self.spec.text()

    def options(self, options: NcuOptions) -> NcuOptions:
        """The cell's own NVTX range, unless a kernel regex or a range is given."""
        if options.nvtx_include or options.kernel_regex:
            return options
        return replace(options, nvtx_include=(nvtx_include_for_range(nvtx_range_name(self.spec.cell)),))


@dataclass(frozen=True)
class CommandTarget:
    """Any program, profiled as given (``ncuflow profile -- CMD ARGS``)."""

    argv: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.argv:
            raise UsageError("There is no program after `--`.", "",
                             "Write e.g. `ncuflow profile --kernel gemm -- ./app --size 4096`.")

    @property
    def label(self) -> str:
        return shlex.join(self.argv)

    def options(self, options: NcuOptions) -> NcuOptions:
        return options

    def spec(self, options: NcuOptions) -> CellSpec:
        """The store's identity of the program: its command line and the filters that pick kernels."""
        return CellSpec(COMMAND_CELL, tuple(sorted([("argv", shlex.join(self.argv)), *_filter_params(options)])))

    def content_key(self, options: NcuOptions) -> str:
        payload = json.dumps({"cell": COMMAND_CELL, "argv": list(self.argv),
                              "nvtx": list(options.nvtx_include), "kernel": options.kernel_regex},
                             sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _filter_params(options: NcuOptions) -> list[tuple[str, str]]:
    """The filters that pick a program's kernels, as parameters of its store identity."""
    params: list[tuple[str, str]] = []
    if options.kernel_regex:
        params.append(("kernel", options.kernel_regex))
    if options.nvtx_include:
        params.append(("nvtx", ";".join(options.nvtx_include)))
    return params


@dataclass(frozen=True)
class AttachTarget:
    """A process that runs already (an inference server, a long job), attached to by its id
    (``ncuflow profile --attach PID``: ncu --mode attach --process-id, Nsight Compute 2026.2.1+).
    Its filters pick the kernels (--kernel, --nvtx, --launch-skip/--launch-count)."""

    pid: int

    def __post_init__(self) -> None:
        if not isinstance(self.pid, int) or isinstance(self.pid, bool) or self.pid < 1:
            raise UsageError(f"--attach {self.pid!r} is no process id.", "A process id is a positive whole number.",
                             "Give the id `pgrep -f NAME` or `ps` shows for the running program.")

    @property
    def label(self) -> str:
        return f"process {self.pid}"

    def options(self, options: NcuOptions) -> NcuOptions:
        return options

    def spec(self, options: NcuOptions) -> CellSpec:
        """The store's identity of the attached process: its id and the filters that pick kernels."""
        return CellSpec(COMMAND_CELL, tuple(sorted([("attach", str(self.pid)), *_filter_params(options)])))

    def content_key(self, options: NcuOptions) -> str:
        payload = json.dumps({"cell": COMMAND_CELL, "attach": self.pid, "nvtx": list(options.nvtx_include),
                              "kernel": options.kernel_regex}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()


Target = CellTarget | CommandTarget | AttachTarget


@dataclass(frozen=True)
class ProfileJob:
    """One profile to run: what, how ncu collects it, which store, and where it came from."""

    target: Target
    options: NcuOptions = field(default_factory=NcuOptions)
    provenance: Provenance = field(default_factory=Provenance)
    cell_facts: CellFacts = field(default_factory=CellFacts)  # facts known before the run (timing outside ncu)
    store: Path | None = None  # None: the settings' store (tier 2 goes to its .tier2 folder)

    @property
    def label(self) -> str:
        return self.target.label

    def collected(self) -> NcuOptions:
        """The options ncu gets for this target."""
        return self.target.options(self.options)

    def spec(self) -> CellSpec:
        target = self.target
        return target.spec if isinstance(target, CellTarget) else target.spec(self.collected())

    def content_key(self) -> str:
        target = self.target
        return target.spec.content_key() if isinstance(target, CellTarget) else target.content_key(self.collected())


@dataclass(frozen=True)
class ProfilePlan:
    """Everything a run will do, decided before anything runs."""

    job: ProfileJob
    spec: CellSpec
    content_key: str
    run_id: str
    command: tuple[str, ...]
    ncu_path: str
    ncu_found: bool
    options: NcuOptions  # as ncu gets them
    store_root: Path
    tmp_path: Path
    final_path: Path
    representation_path: Path | None

    def shell_line(self) -> str:
        """The command as one copy-pasteable line (for display only; runs use the list)."""
        return shlex.join(self.command)


def _resolve_ncu(ncu: str | os.PathLike[str] | None, *, must_exist: bool) -> tuple[str, bool]:
    try:
        path, _how = find_ncu(ncu)
        return str(path), True
    except NcuflowError:
        if must_exist:
            raise
        return str(ncu) if ncu else "ncu", False


def attach_problem(plan: ProfilePlan) -> str | None:
    """Why the planned attach would stop before ncu runs (this ncu is too old), or None."""
    if not isinstance(plan.job.target, AttachTarget) or not plan.ncu_found:
        return None
    try:
        require_attach(Path(plan.ncu_path), ncu_version(Path(plan.ncu_path)))
    except UsageError as problem:
        return problem.what
    return None


def plan_job(job: ProfileJob, settings: ProfileSettings, *, dry_run: bool = False,
         run_id: str | None = None) -> ProfilePlan:
    """Plan one profile (resolves ncu; with ``dry_run`` a missing ncu is shown as 'ncu')."""
    options = job.collected()
    root = Path(job.store or settings.store).absolute()
    ncu_path, found = _resolve_ncu(settings.ncu, must_exist=not dry_run)
    rid = run_id or store.new_run_id()
    spec, key = job.spec(), job.content_key()
    point = store.point_dir(root, spec, key)
    tmp, final = store.temporary_run_folder(point, rid), point / rid
    representation: Path | None = None
    if isinstance(job.target, CellTarget):
        representation = tmp / REPRESENTATION_FILE
        # -P: the current folder is not on the runner's sys.path (a folder named ncuflow there is not imported)
        app: Sequence[str] = [sys.executable, "-P", "-m", "ncuflow.cells.cellrun", spec.text(),
                              "--representation-out", str(representation), *settings.cells.runner_args()]
    elif isinstance(job.target, AttachTarget):
        app = ()
        if found and not dry_run:  # a dry run shows the command, and says why it would stop (attach_problem)
            require_attach(Path(ncu_path), ncu_version(Path(ncu_path)))
    else:
        app = job.target.argv
    mode = attach_mode(job.target.pid) if isinstance(job.target, AttachTarget) else []
    command = build_command(ncu_path, options, tmp / store.REPORT_NAME, app, mode)
    return ProfilePlan(job=job, spec=spec, content_key=key, run_id=rid, command=tuple(command),
                       ncu_path=ncu_path, ncu_found=found, options=options, store_root=root,
                       tmp_path=tmp, final_path=final, representation_path=representation)
