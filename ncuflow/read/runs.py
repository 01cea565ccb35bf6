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


def _read_launches(
    report: Path, notes: list[str], kernel: str | None, manifest_kernel: object = None
) -> tuple[Launch, ...] | None:
    from ncuflow.read.extract import iter_launches

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
        return None
    if not launches:
        notes.append(f"{report}: no launch" + (f" matches --kernel {kernel!r}" if kernel else ""))
    return launches


def run_folders(path: Path) -> list[Any]:
    """The store runs ``path`` is or holds directly: a run folder, or a point folder of replicas."""
    from ncuflow.store import read_run

    folder = Path(path)
    if not folder.is_dir():
        return []
    record = read_run(folder)
    if record is not None:
        return [record]
    return [r for r in (read_run(child) for child in sorted(folder.iterdir())) if r is not None]


def load_store(root: Path, *, kernel: str | None = None) -> Loaded:
    """Every complete run of a store (or of a run or point folder) with its launches
    (unreadable runs are named in notes)."""
    from ncuflow.store import iter_runs

    notes: list[str] = []
    runs: list[LoadedRun] = []
    for record in (run_folders(root) or list(iter_runs(Path(root)))):
        launches = _read_launches(record.report_path, notes, kernel, record.manifest.get("kernel_regex"))
        if launches is None:
            continue
        runs.append(
            LoadedRun(record.cell, params_tuple(record.params), record.content_key, record.run_id, record.report_path, launches)
        )
    return Loaded("store", tuple(runs), tuple(notes))


def load_reports(paths: Sequence[Path], *, kernel: str | None = None) -> Loaded:
    """Plain reports as one run each (cell = file name, no parameters)."""
    from ncuflow.read.reportfile import find_reports

    notes: list[str] = []
    runs: list[LoadedRun] = []
    for report in find_reports(paths):
        launches = _read_launches(report, notes, kernel)
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


def load_paths(paths: Sequence[Path], *, kernel: str | None = None) -> Loaded:
    """Stores and reports together: a folder with store runs (or stores just below it) is
    read as stores, anything else as plain reports."""
    runs: list[LoadedRun] = []
    notes: list[str] = []
    plain: list[Path] = []
    sources: set[str] = set()
    for path in paths:
        roots = [path] if run_folders(path) else store_roots(path)
        if roots:
            for root in roots:
                loaded = load_store(root, kernel=kernel)
                sources.add("store")
                runs += loaded.runs
                notes += loaded.notes
        else:
            plain.append(path)
    if plain:
        loaded = load_reports(plain, kernel=kernel)
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
