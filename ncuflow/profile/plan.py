"""Planning a profile: the ncu command line, content key and run folders for a cell spec or any program."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ncuflow import store
from ncuflow.errors import NcuflowError, UsageError
from ncuflow.profile.ncu import (
    DECISIVE,
    NcuOptions,
    build_command,
    find_ncu,
    nvtx_include_for_range,
)

REPRESENTATION_FILE = "representation.json"


COMMAND_CELL = "command"  # the store's "cell" for `ncuflow profile -- CMD ...`


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


def recorded_options(manifest: store.Manifest) -> NcuOptions:
    """The collection options a stored run was profiled with, to re-profile it alike.

    Replicas of one point must differ only in the replay itself: a re-profile with other
    options (a locked clock, another metric set) would be pooled with the stored run and
    read as instability. The metric-set label is the one ``NcuOptions.metric_set_label``
    wrote (``set;sections:a,b;+metrics:x;-metrics:y``).
    """
    label = manifest.metric_set or DECISIVE
    metric_set, *parts = label.split(";")
    lists: dict[str, tuple[str, ...]] = {"sections:": (), "+metrics:": (), "-metrics:": ()}
    for part in parts:
        for prefix in lists:
            if part.startswith(prefix):
                lists[prefix] = tuple(name for name in part[len(prefix):].split(",") if name)
    defaults = NcuOptions()
    return NcuOptions(
        replay_mode=manifest.replay_mode or defaults.replay_mode,
        cache_control=manifest.cache_control or defaults.cache_control,
        clock_control=manifest.clock_control or defaults.clock_control,
        metric_set=metric_set,
        sections=lists["sections:"],
        extra_metrics=lists["+metrics:"],
        exclude_metrics=lists["-metrics:"],
        launch_count=manifest.launch_count,
        kernel_regex=manifest.kernel_regex or None,
        nvtx_include=tuple(manifest.nvtx_include or ()),
    )


def cell_options(spec: SpecLike, options: NcuOptions) -> NcuOptions:
    """The options for a built-in cell: its NVTX range unless a kernel regex or range is given."""
    if options.nvtx_include or options.kernel_regex:
        return options
    from ncuflow.cells.contract import nvtx_range_name

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
    app: list[str] = [sys.executable, "-m", "ncuflow.cells.cellrun", spec.text(),
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
