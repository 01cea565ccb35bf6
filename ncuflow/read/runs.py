"""Loading runs: every complete run of a profile store, or plain reports, as launches.

Every complete run of the store (``ncuflow.store.iter_runs``) is read with
``ncuflow.read.extract.iter_launches``. A folder with reports but no store manifests is
read as one run per report (cell = report file name, no parameters). A run whose
report cannot be read is skipped and named in the notes, never counted.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ncuflow.errors import NcuflowError, NoReportsFound, UsageError
from ncuflow.read.launch import Launch
from ncuflow.store import RunRecord
from ncuflow.store.manifest import Manifest, RunRef, params_tuple

__all__ = ["Loaded", "LoadedRun", "kernel_filter", "load_paths", "load_records", "load_reports", "load_store",
           "manifest_kernel_filter", "params_tuple", "read_run_launches"]


@dataclass(frozen=True)
class LoadedRun:
    """One run (a store run, or a plain report) and its launches.

    ``ref`` identifies a store run (every launch carries the same ``RunRef`` as
    ``launch.run``); it is None for a plain report, whose cell is the file name.
    """

    cell: str
    params: tuple[tuple[str, object], ...]
    content_key: str
    run_id: str
    report: Path
    launches: tuple[Launch, ...]
    ref: RunRef | None = None

    @classmethod
    def of_store_run(cls, record: RunRecord, launches: tuple[Launch, ...]) -> LoadedRun:
        ref = record.ref
        return cls(ref.cell, ref.params, ref.content_key, ref.run_id, record.report_path, launches, ref)


@dataclass(frozen=True)
class Loaded:
    """What was read: runs with their launches, and notes on what was skipped."""

    source: str  # "store" or "reports"
    runs: tuple[LoadedRun, ...]
    notes: tuple[str, ...] = ()


def kernel_filter(pattern: str | None) -> Callable[[Launch], bool]:
    """A predicate on launches: the kernel's function or demangled name matches ``pattern``."""
    if not pattern:
        return lambda launch: True
    try:
        compiled = re.compile(pattern)
    except re.error as error:
        raise UsageError(
            f"--kernel {pattern!r} is not a valid regular expression: {error}.",
            "The kernel filter is a Python regular expression searched in the kernel name.",
            "Quote it in the shell, e.g. --kernel 'decode.*'.",
        ) from error
    return lambda launch: bool(
        compiled.search(launch.kernel.function) or compiled.search(launch.kernel.demangled)
    )


def manifest_kernel_filter(manifest: Manifest) -> Callable[[Launch], bool]:
    """The kernel filter a run was profiled (or imported) with.

    ``kernel_regex`` is the ``--kernel`` regular expression ncu got as ``regex:<it>`` and is
    searched in the function and demangled names, as ``--kernel`` is everywhere in ncuflow;
    ``kernel_name`` is an exact name (a run imported from a larger report). A report ncu
    wrote with ``-k`` holds only matching launches, so applying it again is a no-op; it
    lets an imported run say which kernel it is about.
    """
    by_regex = kernel_filter(manifest.kernel_regex)
    name = manifest.kernel_name
    if not name:
        return by_regex
    return lambda launch: by_regex(launch) and name in (
        launch.kernel.function, launch.kernel.demangled, launch.kernel.mangled)


def read_run_launches(
    report: Path, kernel: str | None = None, manifest: Manifest | None = None
) -> tuple[tuple[Launch, ...] | None, tuple[str, ...]]:
    """The launches of one report that pass ``--kernel`` and the run's own filter, and notes.

    None (with a note naming the report) when the report cannot be read. Runs in a
    reading worker (``ncuflow.read.pool``): plain data in, plain data out; the caller
    attaches the run's ``RunRef``.
    """
    from ncuflow.read.escalation import read_launches_escalated

    notes: list[str] = []
    user_keep = kernel_filter(kernel)
    run_keep = manifest_kernel_filter(manifest) if manifest is not None else (lambda launch: True)

    def keep(launch: Launch) -> bool:
        return user_keep(launch) and run_keep(launch)

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            launches = tuple(launch for launch in read_launches_escalated(report) if keep(launch))
        notes.extend(f"{report}: {w.message}" for w in caught)
    except NcuflowError as error:
        notes.append(f"skipped {report}: {error}")
        return None, tuple(notes)
    if not launches:
        notes.append(f"{report}: no launch" + (f" matches --kernel {kernel!r}" if kernel else ""))
    return launches, tuple(notes)


def read_launches_noting(
    report: Path, notes: list[str], kernel: str | None, run: RunRecord | None = None
) -> tuple[Launch, ...] | None:
    """``read_run_launches`` in this process: notes appended, the run's ``RunRef`` attached."""
    launches, found = read_run_launches(report, kernel, run.manifest if run is not None else None)
    notes.extend(found)
    if launches is None or run is None:
        return launches
    return tuple(replace(launch, run=run.ref) for launch in launches)


_read_launches = read_launches_noting  # the name earlier callers used


def run_folders(path: Path) -> list[RunRecord]:
    """The store runs ``path`` is or holds directly: a run folder, or a point folder of replicas."""
    from ncuflow.store import MANIFEST_NAME, read_run

    folder = Path(path)
    if not folder.is_dir():
        return []
    if (folder / MANIFEST_NAME).is_file():
        record = read_run(folder)
        return [record] if record is not None else []
    children = [c for c in sorted(folder.iterdir())
                if c.is_dir() and not c.name.startswith(".") and (c / MANIFEST_NAME).is_file()]
    return [r for r in (read_run(c) for c in children) if r is not None]


def load_records(records: Iterable[RunRecord], *, kernel: str | None = None, jobs: int | None = None) -> Loaded:
    """Store runs with their launches, read in ``jobs`` workers (unreadable reports named in notes)."""
    from ncuflow.read.pool import map_reports

    kernel_filter(kernel)  # a bad pattern is a usage error here, not a note per run
    records = list(records)
    notes: list[str] = []
    runs: list[LoadedRun] = []
    tasks = [(record.report_path, kernel, record.manifest) for record in records]
    for record, (launches, found) in zip(records, map_reports(read_run_launches, tasks, jobs=jobs), strict=True):
        notes.extend(found)
        if launches is None:
            continue
        launches = tuple(replace(launch, run=record.ref) for launch in launches)
        runs.append(LoadedRun.of_store_run(record, launches))
    return Loaded("store", tuple(runs), tuple(notes))


def load_store(root: Path, *, kernel: str | None = None, jobs: int | None = None) -> Loaded:
    """Every complete run of a store (or of one run or point folder) with its launches.

    Unreadable reports are named in notes; each damaged run is skipped with one
    ``DamagedRunWarning`` (``ncuflow.store.iter_runs``).
    """
    from ncuflow.store import iter_runs

    return load_records(run_folders(root) or list(iter_runs(Path(root))), kernel=kernel, jobs=jobs)


def load_reports(paths: Sequence[Path], *, kernel: str | None = None, jobs: int | None = None) -> Loaded:
    """Plain reports as one run each (cell = file name, no parameters)."""
    from ncuflow.read.pool import map_reports
    from ncuflow.read.reportfile import find_reports

    kernel_filter(kernel)
    notes: list[str] = []
    runs: list[LoadedRun] = []
    reports = find_reports(paths)
    tasks = [(report, kernel) for report in reports]
    for report, (launches, found) in zip(reports, map_reports(read_run_launches, tasks, jobs=jobs), strict=True):
        notes.extend(found)
        if launches is None:
            continue
        runs.append(LoadedRun(report.name, (), str(report), report.name, report, launches))
    return Loaded("reports", tuple(runs), tuple(notes))


def is_store(path: Path) -> bool:
    """A folder holding store runs: a complete one, or a damaged one that has a manifest.

    A store whose runs are all damaged is still a store (its runs are named as damaged,
    never read as plain reports without their identity).
    """
    from ncuflow.store import MANIFEST_NAME, scan_runs

    return Path(path).is_dir() and any(
        isinstance(found, RunRecord) or (found.path / MANIFEST_NAME).exists() for found in scan_runs(Path(path))
    )


def store_roots(path: Path, depth: int = 2) -> list[Path]:
    """``path`` if it is a store, else the stores up to ``depth`` folders below it
    (``profiles/reference/`` holds one store per GPU, e.g. ``profiles/reference/h200``)."""
    folder = Path(path)
    if is_store(folder):
        return [folder]
    if depth == 0 or not folder.is_dir():
        return []
    found: list[Path] = []
    for child in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        found += store_roots(child, depth - 1)
    return found


def load_paths(paths: Sequence[Path], *, kernel: str | None = None, jobs: int | None = None) -> Loaded:
    """Stores and reports together: a folder with store runs (or stores just below it) is
    read as stores, anything else as plain reports."""
    runs: list[LoadedRun] = []
    notes: list[str] = []
    plain: list[Path] = []
    sources: set[str] = set()
    for path in paths:
        direct = run_folders(path)  # a run or point folder, read (and its damage named) once
        stores = ([load_records(direct, kernel=kernel, jobs=jobs)] if direct
                  else [load_store(root, kernel=kernel, jobs=jobs) for root in store_roots(path)])
        if not stores:
            plain.append(path)
        for loaded in stores:
            sources.add("store")
            runs += loaded.runs
            notes += loaded.notes
    if plain:
        loaded = load_reports(plain, kernel=kernel, jobs=jobs)
        sources.add("reports")
        runs += loaded.runs
        notes += loaded.notes
    if not runs:
        raise NoReportsFound(
            f"Nothing readable in {', '.join(str(p) for p in paths)}.",
            "Every run or report there was skipped: " + ("; ".join(notes) if notes else "none was found") + ".",
            "Profile a cell first (`ncuflow profile ...`), or point at .ncu-rep files or a profile store.",
        )
    return Loaded(" + ".join(sorted(sources)), tuple(runs), tuple(notes))
