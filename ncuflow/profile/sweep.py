"""Sweeps: a TOML file names a cell, fixed parameters, axes and replicas; profile the product.

    cell = "paged_decode"
    replicas = 3
    timeout = 600                  # seconds per profile (optional)
    [fixed]
    batch = 32
    [axes]
    page = [16, 32, 64, 128]
    kv = ["shared", "distinct"]
    [ncu]                          # optional; NcuOptions fields
    replay_mode = "kernel"
    cache_control = "all"
    clock_control = "base"
    metric_set = "decisive"        # or "full", "basic", ...
    launch_count = 1

Execution is resumable: before profiling, every point's complete runs are counted in
the store (by content key) and only the missing replicas are profiled. A run becomes
complete atomically (see ``store``), so a sweep stopped at any moment and re-run loses
nothing and profiles nothing twice.
"""

from __future__ import annotations

import itertools
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ncuflow import store
from ncuflow.errors import NcuflowError, UsageError
from ncuflow.profile.ncu import NcuOptions
from ncuflow.profile.ncu_errors import (
    CounterPermissionDenied,
    DriverMismatch,
    MetricNotFound,
    NcuNotFound,
    ProfileInterrupted,
)
from ncuflow.profile.plan import DEFAULT_TIMEOUT_S

TOP_KEYS = {"cell", "replicas", "timeout", "fixed", "axes", "ncu", "description", "name"}
NCU_KEYS = {
    "replay_mode": "replay_mode", "cache_control": "cache_control", "clock_control": "clock_control",
    "metric_set": "metric_set", "set": "metric_set", "sections": "sections", "metrics": "extra_metrics",
    "launch_count": "launch_count", "launch_skip": "launch_skip", "kernel": "kernel_regex",
    "nvtx": "nvtx_include",
}
# Errors that will fail every point the same way: stop the sweep at the first one.
ENVIRONMENT_ERRORS = (NcuNotFound, CounterPermissionDenied, DriverMismatch, MetricNotFound)

Scalar = str | int | float | bool


@dataclass(frozen=True)
class SweepPoint:
    index: int
    spec_text: str
    params: dict[str, Any]  # every parameter of the cell (defaults filled)
    axis_values: dict[str, Any]
    content_key: str
    spec: Any  # ncuflow.cells.CellSpec


@dataclass(frozen=True)
class SweepPlan:
    name: str
    cell: str
    fixed: dict[str, Any]
    axes: tuple[tuple[str, tuple[Any, ...]], ...]
    replicas: int
    options: NcuOptions
    timeout: float
    points: tuple[SweepPoint, ...]
    source: Path | None = None


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


def _bad(source: str, what: str, fix: str) -> UsageError:
    return UsageError(f"The sweep file {source} {what}.",
                      "A sweep file holds cell, replicas, timeout, [fixed], [axes] and [ncu].", fix)


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def parse_sweep(data: Mapping[str, Any], *, source: Path | None = None,
                cells_dir: Path | None = None) -> SweepPlan:
    from ncuflow.cells.registry import make_spec

    where = str(source) if source else "(inline)"
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise _bad(where, f"has unknown keys {sorted(unknown)}", f"Use only {sorted(TOP_KEYS)}.")
    cell = data.get("cell")
    if not isinstance(cell, str) or not cell:
        raise _bad(where, "names no cell", 'Add e.g. cell = "flat_decode" (see `ncuflow cells`).')
    replicas = data.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        raise _bad(where, f"has replicas = {replicas!r}", "Give replicas a positive integer.")
    timeout = data.get("timeout", DEFAULT_TIMEOUT_S)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        raise _bad(where, f"has timeout = {timeout!r}", "Give timeout a positive number of seconds.")
    fixed = dict(data.get("fixed", {}))
    axes_table = data.get("axes", {})
    if not isinstance(axes_table, Mapping):
        raise _bad(where, "has an [axes] that is not a table", "Write [axes] then name = [values].")
    axes: list[tuple[str, tuple[Any, ...]]] = []
    for name, values in axes_table.items():
        if not isinstance(values, list) or not values or not all(_scalar(v) for v in values):
            raise _bad(where, f"has axis {name!r} that is not a non-empty list of values",
                       f"Write {name} = [value, value, ...].")
        if name in fixed:
            raise _bad(where, f"sets {name!r} both in [fixed] and in [axes]", "Keep it in one place.")
        axes.append((name, tuple(values)))
    for name, value in fixed.items():
        if not _scalar(value):
            raise _bad(where, f"has [fixed] {name} = {value!r}, not a single value", "Use one value.")
    ncu_table = dict(data.get("ncu", {}))
    option_args: dict[str, Any] = {}
    for key, value in ncu_table.items():
        if key not in NCU_KEYS:
            raise _bad(where, f"has unknown [ncu] key {key!r}", f"Use {sorted(NCU_KEYS)}.")
        target = NCU_KEYS[key]
        if target in ("sections", "extra_metrics", "nvtx_include"):
            value = tuple([value] if isinstance(value, str) else value)
        option_args[target] = value
    options = NcuOptions(**option_args)
    points: list[SweepPoint] = []
    seen: set[str] = set()
    names = [n for n, _ in axes]
    for combo in itertools.product(*(values for _, values in axes)) if axes else [()]:
        axis_values = dict(zip(names, combo, strict=True))
        spec = make_spec(cell, {**fixed, **axis_values}, cells_dir)
        key = spec.content_key()
        if key in seen:
            continue
        seen.add(key)
        points.append(SweepPoint(index=len(points), spec_text=spec.text(), params=dict(spec.params),
                                 axis_values=axis_values, content_key=key, spec=spec))
    name = str(data.get("name") or (source.stem if source else cell))
    return SweepPlan(name=name, cell=cell, fixed=fixed, axes=tuple(axes), replicas=replicas,
                     options=options, timeout=float(timeout), points=tuple(points), source=source)


def load_sweep(path: Path, cells_dir: Path | None = None) -> SweepPlan:
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise UsageError(f"The sweep file {path} does not exist.", "", "Check the path.") from None
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"The sweep file {path} is not valid TOML: {error}.", "",
                         "Fix the syntax (https://toml.io).") from None
    return parse_sweep(data, source=Path(path), cells_dir=cells_dir)


def point_status(plan: SweepPlan, store_root: Path) -> list[PointStatus]:
    statuses = []
    for point in plan.points:
        done = len(store.complete_runs_for_key(store_root, plan.cell, point.content_key))
        statuses.append(PointStatus(point, done, max(0, plan.replicas - done)))
    return statuses


ProfileFn = Callable[..., store.RunRecord]


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


def run_sweep(
    plan: SweepPlan,
    store_root: Path,
    *,
    ncu: str | None = None,
    cells_dir: Path | None = None,
    timeout: float | None = None,
    keep_going: bool = False,
    console: Any = None,
    show_progress: bool = True,
    profile: ProfileFn | None = None,
) -> SweepOutcome:
    """Profile every missing replica of every point; raises ProfileInterrupted on Ctrl-C.

    ``keep_going`` continues past a point's own failure (e.g. a program error); errors
    that would fail every point (no ncu, counter permission, driver, unknown metric)
    always stop the sweep.
    """
    from rich.console import Console

    from ncuflow.profile.orchestrate import profile_cell

    run_one = profile or profile_cell
    console = console or Console()
    outcome = SweepOutcome()
    statuses = point_status(plan, store_root)
    todo = [s for s in statuses if s.needed > 0]
    outcome.skipped_points = len(statuses) - len(todo)
    total = sum(s.needed for s in todo)
    console.print(
        f"sweep {plan.name}: {len(statuses)} points × {plan.replicas} replicas; "
        f"{outcome.skipped_points} points already complete, {total} profiles to run"
    )
    if total == 0:
        return outcome
    progress = sweep_progress(console, show_progress)
    with progress:
        task = progress.add_task(plan.name, total=total)
        for status in todo:
            for replica in range(status.done, plan.replicas):
                progress.update(task, description=f"{status.point.spec_text} #{replica + 1}")
                try:
                    record = run_one(
                        status.point.spec, plan.options, store_root, cells_dir=cells_dir,
                        timeout=timeout or plan.timeout, ncu=ncu,
                        manifest_extra={"replica": replica, "sweep": plan.name,
                                        "sweep_file": str(plan.source) if plan.source else None},
                    )
                except ProfileInterrupted:
                    raise
                except ENVIRONMENT_ERRORS:
                    raise
                except NcuflowError as error:
                    outcome.failures.append((status.point, error))
                    progress.console.print(f"[red]failed[/red] {status.point.spec_text}: {error}")
                    if not keep_going:
                        raise
                    progress.advance(task, plan.replicas - replica)
                    break
                outcome.profiled.append(record)
                progress.advance(task)
    return outcome


def describe_points(plan: SweepPlan, store_root: Path) -> list[dict[str, Any]]:
    """Rows for ``--dry-run``: each point, its key and how many replicas are still to run."""
    return [
        {"index": s.point.index, "spec": s.point.spec_text, "key8": s.point.content_key[:8],
         "axes": " ".join(f"{k}={v}" for k, v in s.point.axis_values.items()) or s.point.spec_text,
         "done": s.done, "to_run": s.needed}
        for s in point_status(plan, store_root)
    ]


def axes_summary(axes: Sequence[tuple[str, tuple[Any, ...]]]) -> str:
    return " × ".join(f"{name}[{len(values)}]" for name, values in axes) or "(no axes)"
