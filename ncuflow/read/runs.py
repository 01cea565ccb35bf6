"""One read path for stores and reports: what the paths hold, and their launches.

``sources(paths)`` says what a command reads: each complete run of a profile store (a
folder of runs, a store below a folder, a point or run folder) with its manifest, and each
plain report (cell = the report's file name); every damaged run is named once in the
notes and skipped. ``load_paths`` reads them: a store run's launches pass its own kernel
filter, are merged with its tier-2 escalation and carry its ``RunRef``. Every reading
command goes through here, so none of them reads a damaged run or forgets a run's identity.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ncuflow.errors import NcuflowError, NoReportsFound
from ncuflow.files.patterns import kernel_pattern
from ncuflow.files.run_layout import MANIFEST_NAME, REPORT_NAME
from ncuflow.read.launch import Launch
from ncuflow.read.options import READ_DEFAULT, ReadOptions

if TYPE_CHECKING:  # the store is imported where a path holds a store run, not for a plain report
    from ncuflow.store import RunRecord
    from ncuflow.store.manifest import Manifest, RunRef

__all__ = ["Loaded", "LoadedRun", "Source", "Sources", "kernel_filter", "load_paths", "load_records",
           "load_sources", "prestart_reading", "read_source", "read_sources", "sources"]


@dataclass(frozen=True)
class Source:
    """One thing to read: a store run (``record``), or a plain report (``record`` None)."""

    report: Path
    record: RunRecord | None = None


@dataclass(frozen=True)
class Sources:
    """What a set of paths holds: the sources to read, in order, and each damaged run skipped
    (one line each, ``DamagedRun.line``)."""

    items: tuple[Source, ...]
    damaged: tuple[str, ...] = ()

    @property
    def reports(self) -> list[Path]:
        return [source.report for source in self.items]


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
    def of(cls, source: Source, launches: tuple[Launch, ...]) -> LoadedRun:
        if source.record is None:
            name = source.report.name
            return cls(name, (), str(source.report), name, source.report, launches)
        ref = source.record.ref
        return cls(ref.cell, ref.params, ref.content_key, ref.run_id, source.report, launches, ref)


@dataclass(frozen=True)
class Loaded:
    """What was read: runs with their launches, notes on reports that could not be read or held
    nothing, and the damaged runs skipped (one line each: the commands print them as warnings)."""

    source: str  # "store", "reports" or "reports + store"
    runs: tuple[LoadedRun, ...]
    notes: tuple[str, ...] = ()
    damaged: tuple[str, ...] = ()


def kernel_filter(pattern: str | None) -> Callable[[Launch], bool]:
    """A predicate on launches: the kernel's function or demangled name matches ``pattern``
    (searched in linear time, ``ncuflow.files.patterns``; a pattern refused there is a usage error)."""
    if not pattern:
        return lambda launch: True
    search = kernel_pattern(pattern).search
    return lambda launch: search(launch.kernel.function) or search(launch.kernel.demangled)


def manifest_kernel_filter(manifest: Manifest) -> Callable[[Launch], bool]:
    """The kernel filter a run was profiled (or imported) with.

    The collection's ``kernel_regex`` is the ``--kernel`` regular expression ncu got as
    ``regex:<it>``, searched in the function and demangled names as ``--kernel`` is
    everywhere; ``kernel_name`` is an exact name (a run imported from a larger report). A
    report ncu wrote with ``-k`` holds only matching launches, so applying it again is a
    no-op; it lets an imported run say which kernel it is about.
    """
    by_regex = kernel_filter(manifest.collection.options.kernel_regex)
    name = manifest.collection.kernel_name
    if not name:
        return by_regex
    return lambda launch: by_regex(launch) and name in (
        launch.kernel.function, launch.kernel.demangled, launch.kernel.mangled)


# ----------------------------------------------------------------------------- what paths hold


def _store_sources(root: Path) -> tuple[list[Source], list[str]]:
    from ncuflow.store import DamagedRun, scan_runs

    found: list[Source] = []
    notes: list[str] = []
    for item in scan_runs(root):
        if isinstance(item, DamagedRun):
            notes.append(item.line())
        else:
            found.append(Source(item.report_path, item))
    return found, notes


def _run_folders(path: Path) -> tuple[list[Source], list[str]]:
    """The runs ``path`` is or holds directly: a run folder, or a point folder of replicas."""
    from ncuflow.store import DamagedRun, inspect_run

    folders = [path] if (path / MANIFEST_NAME).is_file() else sorted(
        c for c in path.iterdir() if c.is_dir() and not c.name.startswith(".") and (c / MANIFEST_NAME).is_file())
    found: list[Source] = []
    notes: list[str] = []
    for folder in folders:
        item = inspect_run(folder)
        if isinstance(item, DamagedRun):
            notes.append(item.line())
        elif item is not None:
            found.append(Source(item.report_path, item))
    return found, notes


def is_store(path: Path) -> bool:
    """A folder holding store runs: a complete one, or a damaged one that has a manifest.

    A store whose runs are all damaged is still a store (its runs are named as damaged,
    never read as plain reports without their identity).
    """
    from ncuflow.store import scan_runs

    return Path(path).is_dir() and any(True for _ in scan_runs(Path(path)))


def store_roots(path: Path, depth: int = 2) -> list[Path]:
    """``path`` if it is a store, else the stores up to ``depth`` folders below it
    (``profiles/reference/`` holds one store per GPU, e.g. ``profiles/reference/h200``)."""
    folder = Path(path)
    if is_store(folder):
        return [folder]
    if depth == 0 or not folder.is_dir():
        return []
    found: list[Path] = []
    for child in sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")):
        found += store_roots(child, depth - 1)
    return found


def sources(paths: Sequence[Path | str]) -> Sources:
    """What ``paths`` hold: store runs and plain reports, each once, and notes on what was skipped.

    A run or point folder, a store and the stores just below a folder are read as store
    runs; anything else as reports (``find_reports``). A path named twice, or inside
    another named path, is read once.
    """
    from ncuflow.read.reportfile import find_reports

    items: list[Source] = []
    notes: list[str] = []
    plain: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            direct, said = _run_folders(path)
            if direct or said:
                items += direct
                notes += said
                continue
            roots = store_roots(path)
            for root in roots:
                found, said = _store_sources(root)
                items += found
                notes += said
            if roots:
                continue
        plain.append(path)
    for report in find_reports(plain) if plain else []:
        source, said = _plain_or_run(report)
        items += [source] if source is not None else []
        notes += said
    if not items:
        named = ", ".join(str(p) for p in paths)
        raise NoReportsFound(
            f"Nothing readable in {named}.",
            "Every run there is damaged: " + "; ".join(dict.fromkeys(notes)) + "." if notes
            else "It holds no store run and no report.",
            "Profile a cell first (`ncuflow profile ...`), or point at .ncu-rep files or a profile store.",
        )
    return Sources(tuple(_once(items)), damaged=tuple(dict.fromkeys(notes)))


def _plain_or_run(report: Path) -> tuple[Source | None, list[str]]:
    """A report named by itself: the store run it is the report of, where it is one, else plain."""
    if report.name != REPORT_NAME or not (report.parent / MANIFEST_NAME).exists():
        return Source(report), []
    from ncuflow.store import DamagedRun, inspect_run

    item = inspect_run(report.parent)
    if isinstance(item, DamagedRun):
        return None, [item.line()]
    return (Source(report, item) if item is not None else Source(report)), []


def _once(items: Sequence[Source]) -> list[Source]:
    """Each report once (a store run wins over the same file found as a plain report)."""
    chosen: dict[Path, Source] = {}
    for item in items:
        key = item.report.resolve()
        if key not in chosen or (chosen[key].record is None and item.record is not None):
            chosen[key] = item
    return list(chosen.values())


# ----------------------------------------------------------------------------- reading


def read_source(report: Path, record: RunRecord | None, kernel: str | None = None,
                strict: bool = False, options: ReadOptions = READ_DEFAULT,
                ) -> tuple[tuple[Launch, ...] | None, tuple[str, ...]]:
    """The launches of one source that pass ``--kernel`` and a run's own filter, and notes
    (with what ``options`` adds to each launch).

    A store run's launches are merged with its tier-2 escalation and carry its ``RunRef``.
    None (with a note naming the report) when the report cannot be read, or, ``strict``,
    its ``ReportError`` raised. Runs in a reading worker (``ncuflow.read.pool``): plain data
    in, plain data out.
    """
    from ncuflow.read.escalation import read_run_launches
    from ncuflow.read.extract import read_launches

    notes: list[str] = []
    user_keep = kernel_filter(kernel)
    run_keep = manifest_kernel_filter(record.manifest) if record is not None else (lambda launch: True)
    ref = record.ref if record is not None else None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found = read_run_launches(record, options) if record is not None else read_launches(report, options)
        notes.extend(str(w.message) if str(w.message).startswith(f"{report}:") else f"{report}: {w.message}"
                     for w in caught)
    except NcuflowError as error:
        if strict:
            raise
        notes.append(f"skipped {report}: {error}")
        return None, tuple(notes)
    launches = tuple(replace(launch, run=ref) if ref is not None else launch
                     for launch in found if user_keep(launch) and run_keep(launch))
    if not launches:
        notes.append(f"{report}: no launch" + (f" matches --kernel {kernel!r}" if kernel else ""))
    return launches, tuple(notes)


def read_sources(found: Sources, *, kernel: str | None = None, jobs: int | None = None, strict: bool = False,
                 progress: Callable[[int, Path], None] | None = None, options: ReadOptions = READ_DEFAULT,
                 ) -> Iterator[tuple[Source, tuple[Launch, ...] | None, tuple[str, ...]]]:
    """(source, its launches, notes) for every source, in order, read in ``jobs`` workers."""
    from ncuflow.read.pool import map_reports

    kernel_filter(kernel)  # a bad pattern is a usage error here, not a note per run
    tasks = [(source.report, source.record, kernel, strict, options) for source in found.items]
    for source, (launches, notes) in zip(found.items, map_reports(read_source, tasks, jobs=jobs, progress=progress),
                                         strict=True):
        yield source, launches, notes


def prestart_reading(found: Sources, *, jobs: int | None) -> None:
    """Start the reading workers' server now, for a later ``read_sources`` (overlaps the imports)."""
    from ncuflow.read.pool import prestart

    prestart(read_source, [(source.report,) for source in found.items], jobs=jobs)


def load_sources(found: Sources, *, kernel: str | None = None, jobs: int | None = None,
                 progress: Callable[[int, Path], None] | None = None, options: ReadOptions = READ_DEFAULT) -> Loaded:
    """The sources' launches (unreadable reports named in notes, never counted); ``progress`` is
    called with (index, report) as each is read."""
    notes: list[str] = []
    runs: list[LoadedRun] = []
    for source, launches, said in read_sources(found, kernel=kernel, jobs=jobs, progress=progress, options=options):
        notes.extend(said)
        if launches is not None:
            runs.append(LoadedRun.of(source, launches))
    kinds = sorted({"store" if source.record is not None else "reports" for source in found.items})
    return Loaded(" + ".join(kinds) or "store", tuple(runs), tuple(notes), found.damaged)


def load_records(records: Iterable[RunRecord], *, kernel: str | None = None, jobs: int | None = None) -> Loaded:
    """Store runs with their launches (e.g. the runs a command has just profiled)."""
    return load_sources(Sources(tuple(Source(r.report_path, r) for r in records)), kernel=kernel, jobs=jobs)


def load_paths(paths: Sequence[Path], *, kernel: str | None = None, jobs: int | None = None,
               progress: Callable[[Sources], Callable[[int, Path], None]] | None = None,
               options: ReadOptions = READ_DEFAULT) -> Loaded:
    """Stores and reports together, as ``sources`` finds them; raises ``NoReportsFound``
    when nothing readable is left. ``progress(found)`` gives the per-report step, once the
    number of reports is known."""
    found = sources(paths)
    loaded = load_sources(found, kernel=kernel, jobs=jobs, progress=progress(found) if progress else None,
                          options=options)
    if not loaded.runs:
        raise NoReportsFound(
            f"Nothing readable in {', '.join(str(p) for p in paths)}.",
            "Every run or report there was skipped: "
            + ("; ".join((*loaded.damaged, *loaded.notes)) or "none was found") + ".",
            "Profile a cell first (`ncuflow profile ...`), or point at .ncu-rep files or a profile store.",
        )
    return loaded
