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
nothing and profiles nothing twice. Each run's manifest records its ``replica`` (counted
from 0), the sweep's ``name``, file and ``sweep_axes`` (each axis and its values): explain
takes the swept parameters from there.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ncuflow import store
from ncuflow.errors import NcuflowError, UsageError
from ncuflow.files import make_console, os_error
from ncuflow.profile import DEFAULT_TIMEOUT_S
from ncuflow.profile.ncu import (
    CACHE_CONTROLS,
    CLOCK_CONTROLS,
    DECISIVE,
    NAMED_SETS,
    REPLAY_MODES,
    NcuOptions,
)
from ncuflow.profile.ncu_errors import (
    CounterPermissionDenied,
    DriverMismatch,
    MetricNotFound,
    NcuNotFound,
    ProfileInterrupted,
)
from ncuflow.store import lock as point_lock
from ncuflow.store.manifest import axes_json

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
            say(f"[red]failed[/red] {stage}{point.spec_text}: {error}")


def _bad(source: str, what: str, fix: str) -> UsageError:
    return UsageError(f"The sweep file {source} {what}.",
                      "A sweep file holds cell, replicas, timeout, [fixed], [axes] and [ncu].", fix)


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) and not (isinstance(value, float) and not math.isfinite(value))


# ----------------------------------------------------------------------------- the schema


@dataclass(frozen=True)
class Rule:
    """What one key of a sweep file must hold."""

    expected: str  # for messages: "an integer >= 1", "one of: kernel, application"
    check: Callable[[Any], bool]


def _is_int(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _is_seconds(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and value > 0)


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip()) and "\n" not in value


def _is_names(value: Any) -> bool:
    return _is_name(value) or (isinstance(value, list) and all(_is_name(v) for v in value))


def _is_regex(value: Any) -> bool:
    if not _is_name(value):
        return False
    try:
        re.compile(value)
    except re.error:
        return False
    return True


def _one_of(values: Sequence[str]) -> Rule:
    return Rule(f"one of: {', '.join(values)}", lambda v: isinstance(v, str) and v in values)


TOP_RULES: dict[str, Rule] = {
    "cell": Rule("the name of a cell (a string, see `ncuflow cells`)", _is_name),
    "replicas": Rule("an integer >= 1", lambda v: _is_int(v, 1)),
    "timeout": Rule("a finite number of seconds > 0", _is_seconds),
    "fixed": Rule("a table ([fixed] then name = value lines)", lambda v: isinstance(v, dict)),
    "axes": Rule("a table ([axes] then name = [values] lines)", lambda v: isinstance(v, dict)),
    "ncu": Rule("a table ([ncu] then option = value lines)", lambda v: isinstance(v, dict)),
    "description": Rule("a string", lambda v: isinstance(v, str)),
    "name": Rule("a non-empty string", _is_name),
}
TOP_KEYS = set(TOP_RULES)
NCU_RULES: dict[str, Rule] = {
    "replay_mode": _one_of(REPLAY_MODES),
    "cache_control": _one_of(CACHE_CONTROLS),
    "clock_control": _one_of(CLOCK_CONTROLS),
    "metric_set": _one_of((DECISIVE, *NAMED_SETS, "none")),
    "set": _one_of((DECISIVE, *NAMED_SETS, "none")),
    "sections": Rule("a section name or a list of section names (strings)", _is_names),
    "metrics": Rule("a metric name or a list of metric names (strings)", _is_names),
    "launch_count": Rule("an integer >= 1", lambda v: _is_int(v, 1)),
    "launch_skip": Rule("an integer >= 0", lambda v: _is_int(v, 0)),
    "kernel": Rule("one regular expression (a string that compiles)", _is_regex),
    "nvtx": Rule("an NVTX expression or a list of them (strings)", _is_names),
}


def key_line(text: str | None, table: str | None, key: str) -> int | None:
    """The line (1-based) where ``key`` is set in ``[table]`` (None: top level), if it can be found."""
    if not text:
        return None
    current: str | None = None
    pattern = re.compile(rf"""^\s*(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')\s*=""")
    for number, line in enumerate(text.splitlines(), start=1):
        header = re.match(r"^\s*\[\s*([^\]]+?)\s*\]", line)
        if header:
            current = header.group(1).strip("\"'")
            continue
        if current == table and pattern.match(line):
            return number
    return None


def _type_word(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number" if math.isfinite(value) else f"the non-finite number {value}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


class _Where:
    def __init__(self, source: Path | None, text: str | None) -> None:
        self.name = str(source) if source else "(inline)"
        self.text = text

    def wrong(self, table: str | None, key: str, value: Any, expected: str) -> UsageError:
        line = key_line(self.text, table, key)
        dotted = f"{table}.{key}" if table else key
        where = f"{self.name}, line {line}" if line else self.name
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return UsageError(
            f"The sweep file {where}: {dotted} = {shown} is {_type_word(value)}; it must be {expected}.",
            "Sweep files are checked key by key before anything runs.",
            f"Write {dotted} as {expected}.",
        )


def _check_table(where: _Where, table: str | None, data: Mapping[str, Any], rules: Mapping[str, Rule]) -> None:
    for key, value in data.items():
        rule = rules.get(key)
        if rule is None:
            label = f"[{table}] key" if table else "key"
            line = key_line(where.text, table, key)
            raise _bad(where.name + (f", line {line}," if line else ""), f"has unknown {label} {key!r}",
                       f"Use only {', '.join(sorted(rules))}.")
        if not rule.check(value):
            raise where.wrong(table, key, value, rule.expected)


def parse_sweep(data: Mapping[str, Any], *, source: Path | None = None,
                cells_dir: Path | None = None, text: str | None = None) -> SweepPlan:
    """Check a sweep file's content against the schema (key, type, allowed values, line) and expand it."""
    from ncuflow.cells.registry import make_spec

    where = _Where(source, text)
    _check_table(where, None, data, TOP_RULES)
    cell = data.get("cell")
    if not isinstance(cell, str) or not cell:
        raise _bad(where.name, "names no cell", 'Add e.g. cell = "flat_decode" (see `ncuflow cells`).')
    replicas = data.get("replicas", 1)
    timeout = data.get("timeout", DEFAULT_TIMEOUT_S)
    fixed = dict(data.get("fixed", {}))
    axes_table = data.get("axes", {})
    axes: list[tuple[str, tuple[Any, ...]]] = []
    for name, values in axes_table.items():
        if not isinstance(values, list) or not values or not all(_scalar(v) for v in values):
            raise where.wrong("axes", name, values, "a non-empty list of single finite values, e.g. [16, 32, 64]")
        if name in fixed:
            raise _bad(where.name, f"sets {name!r} both in [fixed] and in [axes]", "Keep it in one place.")
        axes.append((name, tuple(values)))
    for name, value in fixed.items():
        if not _scalar(value):
            raise where.wrong("fixed", name, value, "one finite value (a number, a string or true/false)")
    ncu_table = dict(data.get("ncu", {}))
    _check_table(where, "ncu", ncu_table, NCU_RULES)
    option_args: dict[str, Any] = {}
    for key, value in ncu_table.items():
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
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise UsageError(f"The sweep file {path} does not exist.", "", "Check the path.") from None
    except IsADirectoryError:
        raise UsageError(f"The sweep file {path} is a folder.", "", "Name the .toml file.") from None
    except OSError as error:
        raise UsageError(f"The sweep file {path} cannot be read: {error.strerror or error}.", "",
                         "Check the path and its permissions.") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise UsageError(f"The sweep file {path}, line {line}, is not UTF-8 text (byte {raw[error.start]:#04x}).",
                         "TOML files are UTF-8.", "Save the file as UTF-8.") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"The sweep file {path} is not valid TOML: {error}.", "",
                         "Fix the syntax (https://toml.io).") from None
    return parse_sweep(data, source=Path(path), cells_dir=cells_dir, text=text)


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


def sweep_manifest_extra(plan: SweepPlan, replica: int) -> dict[str, Any]:
    """What a sweep adds to each run's manifest, locally or on Ray: replica, sweep, file, axes."""
    return {"replica": replica, "sweep": plan.name,
            "sweep_file": str(plan.source) if plan.source else None,
            "sweep_axes": axes_json(plan.axes)}


def start_sweep(plan: SweepPlan, store_root: Path, console: Any) -> tuple[SweepOutcome, list[PointStatus], int]:
    """Before profiling, locally or on Ray: move the cell's damaged runs aside, count what is
    missing per point, and say so. Returns (the outcome to fill, points to run, profiles to run)."""
    from ncuflow.store.check import move_aside_damaged

    for damaged, target in move_aside_damaged(store_root, plan.cell):
        console.print(f"[yellow]moved a damaged run aside[/yellow] ({damaged.problem}): {damaged.path} -> {target.name}; "
                      "its point is profiled again")
    outcome = SweepOutcome()
    statuses = point_status(plan, store_root)
    todo = [s for s in statuses if s.needed > 0]
    outcome.skipped_points = len(statuses) - len(todo)
    total = sum(s.needed for s in todo)
    console.print(
        f"sweep {plan.name}: {len(statuses)} points × {plan.replicas} replicas; "
        f"{outcome.skipped_points} points already complete, {total} profiles to run"
    )
    return outcome, todo, total


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
    always stop the sweep. Tier 2 for the runs tier 1 leaves undecided is the second phase
    (``ncuflow.profile.sweep_escalation.sweep_here`` runs both).
    """
    from ncuflow.profile.orchestrate import profile_cell

    run_one = profile or profile_cell
    console = console or make_console()
    outcome, todo, total = start_sweep(plan, store_root, console)
    if total > 0:
        _profile_points(plan, store_root, outcome, todo, total, run_one, console, show_progress, keep_going,
                        cells_dir=cells_dir, timeout=timeout or plan.timeout, ncu=ncu)
    return outcome


def _profile_points(plan: SweepPlan, store_root: Path, outcome: SweepOutcome, todo: list[PointStatus], total: int,
                    run_one: ProfileFn, console: Any, show_progress: bool, keep_going: bool, *,
                    cells_dir: Path | None, timeout: float, ncu: str | None) -> None:
    """Tier 1: every missing replica of the points, one writer per point."""
    progress = sweep_progress(console, show_progress)
    with progress:
        task = progress.add_task(plan.name, total=total)

        def profile_point(status: PointStatus) -> None:
            """Profile the replicas still missing; the caller holds the point's lock."""
            done = len(store.complete_runs_for_key(store_root, plan.cell, status.point.content_key))
            if done > status.done:  # another writer profiled some meanwhile
                progress.advance(task, max(0, min(done, plan.replicas) - status.done))
            for replica in range(done, plan.replicas):
                progress.update(task, description=f"{status.point.spec_text} #{replica + 1}")
                try:
                    record = run_one(
                        status.point.spec, plan.options, store_root, cells_dir=cells_dir,
                        timeout=timeout, ncu=ncu, manifest_extra=sweep_manifest_extra(plan, replica),
                    )
                except NcuflowError as error:
                    outcome.point_failed(status.point, error, progress.console.print, keep_going=keep_going)
                    progress.advance(task, plan.replicas - replica)
                    return
                outcome.profiled.append(record)
                progress.advance(task)

        # One writer per point: a point another process is profiling is done last, after
        # waiting for its lock, and only what is then still missing is profiled.
        busy: list[PointStatus] = []
        for status in todo:
            with _locked(plan, status, store_root, wait=False) as held:
                if held is None:
                    busy.append(status)
                    continue
                profile_point(status)
        for status in busy:
            def note(holder: dict[str, Any], status: PointStatus = status) -> None:
                who = f"pid {holder.get('pid')}" if holder.get("pid") else "another process"
                progress.console.print(f"waiting for {who}, which is profiling {status.point.spec_text}")
            with _locked(plan, status, store_root, wait=True, on_wait=note):
                profile_point(status)


@contextlib.contextmanager
def _locked(plan: SweepPlan, status: PointStatus, store_root: Path, *, wait: bool,
            on_wait: Callable[[dict[str, Any]], None] | None = None) -> Iterator[point_lock.PointLock | None]:
    folder = store.point_dir(Path(store_root).absolute(), plan.cell, status.point.spec.slug(),
                             status.point.content_key)
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
