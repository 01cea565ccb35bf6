"""Loading runs: every complete run of a profile store, or plain reports, as launches.

Every complete run of the store (``ncuflow.store.iter_runs``) is read with
``ncuflow.read.extract.iter_launches``. A folder with reports but no store manifests is
read as one run per report (cell = report file name, no parameters). A run whose
report cannot be read is skipped and named in the notes, never counted.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncuflow.errors import NcuflowError, NoReportsFound, UsageError
from ncuflow.read.launch import Launch


@dataclass(frozen=True)
class LoadedRun:
    cell: str
    params: tuple[tuple[str, object], ...]
    content_key: str
    run_id: str
    report: Path
    launches: tuple[Launch, ...]


@dataclass(frozen=True)
class Loaded:
    """What was read: runs with their launches, and notes on what was skipped."""

    source: str  # "store" or "reports"
    runs: tuple[LoadedRun, ...]
    notes: tuple[str, ...] = ()


def _hashable(value: object) -> object:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return json.dumps(value, sort_keys=True, default=str)


def params_tuple(params: Mapping[str, object]) -> tuple[tuple[str, object], ...]:
    return tuple(sorted((str(k), _hashable(v)) for k, v in params.items()))


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


def manifest_kernel_filter(value: object) -> Callable[[Launch], bool]:
    """The kernel filter a run was profiled with (ncu ``-k``): ``regex:EXPR`` or an exact name.

    A report ncu wrote with ``-k`` holds only matching launches, so applying it again is
    a no-op; it lets a run imported from a larger report say which kernel it is about.
    """
    if not value:
        return lambda launch: True
    text = str(value)
    if text.startswith("regex:"):
        return kernel_filter(text[len("regex:"):])
    return lambda launch: text in (launch.kernel.function, launch.kernel.demangled, launch.kernel.mangled)


def read_run_launches(
    report: Path, kernel: str | None = None, manifest_kernel: object = None
) -> tuple[tuple[Launch, ...] | None, tuple[str, ...]]:
    """The launches of one report that pass both kernel filters, and notes on what went wrong.

    None (with a note naming the report) when the report cannot be read. Runs in a
    reading worker (``ncuflow.read.pool``): plain data in, plain data out.
    """
    from ncuflow.read.extract import iter_launches

    notes: list[str] = []
    user_keep = kernel_filter(kernel)
    run_keep = manifest_kernel_filter(manifest_kernel)

    def keep(launch: Launch) -> bool:
        return user_keep(launch) and run_keep(launch)

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            launches = tuple(launch for launch in iter_launches(report) if keep(launch))
        notes.extend(f"{report}: {w.message}" for w in caught)
    except NcuflowError as error:
        notes.append(f"skipped {report}: {error}")
        return None, tuple(notes)
    if not launches:
        notes.append(f"{report}: no launch" + (f" matches --kernel {kernel!r}" if kernel else ""))
    return launches, tuple(notes)


def _read_launches(
    report: Path, notes: list[str], kernel: str | None, manifest_kernel: object = None
) -> tuple[Launch, ...] | None:
    launches, found = read_run_launches(report, kernel, manifest_kernel)
    notes.extend(found)
    return launches


def load_records(records: Sequence[Any], *, kernel: str | None = None, jobs: int | None = None) -> Loaded:
    """Stored runs (``ncuflow.store.RunRecord``) with their launches, read in ``jobs`` workers."""
    from ncuflow.read.pool import map_reports

    kernel_filter(kernel)  # a bad pattern is a usage error here, not a note per run
    notes: list[str] = []
    runs: list[LoadedRun] = []
    tasks = [(record.report_path, kernel, record.manifest.get("kernel_regex")) for record in records]
    for record, (launches, found) in zip(records, map_reports(read_run_launches, tasks, jobs=jobs), strict=True):
        notes.extend(found)
        if launches is None:
            continue
        runs.append(
            LoadedRun(record.cell, params_tuple(record.params), record.content_key, record.run_id, record.report_path, launches)
        )
    return Loaded("store", tuple(runs), tuple(notes))


def load_store(root: Path, *, kernel: str | None = None, jobs: int | None = None) -> Loaded:
    """Every complete run of a store with its launches (unreadable runs are named in notes)."""
    from ncuflow.store import iter_runs

    return load_records(list(iter_runs(Path(root))), kernel=kernel, jobs=jobs)


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
    from ncuflow.store import iter_runs

    return Path(path).is_dir() and next(iter_runs(Path(path)), None) is not None


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
        roots = store_roots(path)
        if roots:
            for root in roots:
                loaded = load_store(root, kernel=kernel, jobs=jobs)
                sources.add("store")
                runs += loaded.runs
                notes += loaded.notes
        else:
            plain.append(path)
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
