"""The profile store: one folder per complete run, written atomically.

Layout (docs/ARCHITECTURE.md)::

    <root>/<cell>/<param-slug>-<key8>/<run-id>/{report.ncu-rep, manifest.json, ncu.log}

A run is written into a temporary sibling folder ``.tmp-<run-id>-<owner tag>`` and renamed
to ``<run-id>`` only when the report, the log and the manifest are all on disk. A
rename within one file system is atomic, so a folder without a leading dot is always
a complete run: an interrupted profile or sweep never leaves a half run that looks
whole, and ``iter_runs`` never reads a temporary folder. Runs that failed are kept,
for their log, as ``.failed-<run-id>`` (also ignored by ``iter_runs``). A visible run
folder whose manifest does not validate (``ncuflow.store.manifest``) or whose report is
gone or cut short (``ncuflow.read.framing``) is damaged: ``iter_runs`` skips it with one ``DamagedRunWarning`` and
``ncuflow.store.check`` moves it aside as ``.damaged-<run-id>``.

This module is plain file I/O: it imports neither ``ncu_report`` nor polars.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ncuflow import __version__
from ncuflow.cells.contract import CellSpec
from ncuflow.errors import DamagedRunWarning, NcuflowError
from ncuflow.files import (
    OutputError,
    atomic_write_text,
    fsync_path,
    os_error,
    pid_alive,
)
from ncuflow.files.owner import owner_tag, tag_owner_dead
from ncuflow.files.run_layout import LOG_NAME, REPORT_NAME
from ncuflow.read.framing import framing_problem  # plain bytes: the store's only look into read
from ncuflow.store.access import listing, unreadable
from ncuflow.store.manifest import (
    MANIFEST_NAME,
    SCHEMA_VERSION,
    Manifest,
    ManifestError,
    RunIdentity,
    RunRef,
    read_manifest,
)

__all__ = [
    "MANIFEST_NAME", "SCHEMA_VERSION", "DamagedRun", "DamagedRunWarning", "Manifest", "ManifestError", "PointRuns",
    "RunRecord", "RunRef", "StoreError", "complete_runs_for_key", "iter_runs", "read_manifest", "read_run",
    "runs_for_key", "scan_runs", "write_run",
]

TMP_PREFIX = ".tmp-"
FAILED_PREFIX = ".failed-"
DAMAGED_PREFIX = ".damaged-"


class StoreError(NcuflowError):
    """The profile store cannot be written or a stored run cannot be read."""


@dataclass(frozen=True)
class RunRecord:
    """One complete run in the store: its folder, files and validated manifest."""

    path: Path
    manifest: Manifest
    report_path: Path
    log_path: Path

    @property
    def cell(self) -> str:
        return self.manifest.cell

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.manifest.params)

    @property
    def content_key(self) -> str:
        return self.manifest.content_key

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def spec(self) -> CellSpec:
        return self.manifest.spec

    @property
    def ref(self) -> RunRef:
        return self.manifest.ref()

    @property
    def store_root(self) -> Path:
        """The store the run lies in: ``<root>/<cell>/<point>/<run-id>``."""
        return self.path.parent.parent.parent


@dataclass(frozen=True)
class DamagedRun:
    """A visible run folder that is not a readable complete run, and why.

    ``newer`` runs were written by a newer ncuflow (an unknown schema version) and
    ``unreadable`` ones cannot be read by this user (no permission, ``ncuflow.store.access``):
    both are named but never moved aside.
    """

    path: Path
    problem: str
    newer: bool = False
    unreadable: bool = False

    @property
    def movable(self) -> bool:
        """Whether repair (and sweep) may move it aside: only runs whose files are broken."""
        return not (self.newer or self.unreadable)

    def line(self) -> str:
        """One line for a warning: which run, which file, what is wrong."""
        if self.unreadable:
            return (f"run {self.path} skipped: {self.problem}; it is not damaged and nothing moves it "
                    f"(`ls -ld {self.path}` shows who may read it)")
        if self.newer:
            return f"run {self.path} skipped: {self.problem} (written by a newer ncuflow; upgrade to read it)"
        return (f"damaged run {self.path} skipped: {self.problem} "
                f"(`ncuflow store check {self.path.parent.parent.parent} --repair` moves it aside)")


# ---------------------------------------------------------------------------- naming

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def _safe(text: str) -> str:
    cleaned = _UNSAFE.sub("-", text).strip("-.")
    return cleaned or "x"


POINT_SLUG_CHARS = 120  # a point folder's name stays well below a file system's 255 bytes


def point_dir(root: Path, spec: CellSpec, content_key: str) -> Path:
    """The folder holding every run of one point: ``<root>/<cell>/<spec slug>-<key8>``.

    The slug is the spec's own (``CellSpec.slug``), cut to ``POINT_SLUG_CHARS``: the content
    key, not the slug, identifies the point, so two slugs that collide still land apart.
    """
    if len(content_key) < 8:
        raise StoreError(
            f"The content key {content_key!r} is too short to name a store folder.",
            "A content key is the sha256 hex digest of the cell spec.",
            "Pass CellSpec.content_key(), not a prefix of it.",
        )
    return Path(root) / _safe(spec.cell) / f"{_safe(spec.slug())[:POINT_SLUG_CHARS]}-{content_key[:8]}"


def new_run_id(now: datetime | None = None) -> str:
    """A run id that sorts by creation time and does not collide: ``20261129T225501Z-3fa9c1``."""
    moment = now or datetime.now(UTC)
    return f"{moment.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _write_json_durably(path: Path, data: Mapping[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


# ---------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class PendingRun:
    """A run being written: its temporary folder and where it will land."""

    tmp_path: Path
    final_path: Path
    run_id: str

    @property
    def report_path(self) -> Path:
        return self.tmp_path / REPORT_NAME

    @property
    def log_path(self) -> Path:
        return self.tmp_path / LOG_NAME

    @property
    def manifest_path(self) -> Path:
        return self.tmp_path / MANIFEST_NAME


def temporary_run_folder(point: Path, run_id: str) -> Path:
    """Where run ``run_id`` is written until it is complete: ``.tmp-<run-id>-<owner tag>``, its
    writer named beyond a pid (``files.owner``: host, boot, PID namespace, start time)."""
    return point / f"{TMP_PREFIX}{run_id}-{owner_tag()}"


def begin_run(root: Path, spec: CellSpec, content_key: str, run_id: str | None = None) -> PendingRun:
    """Create the temporary folder of a new run (and clean temporaries of dead processes)."""
    point = point_dir(root, spec, content_key)
    try:
        point.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _store_os_error(error, point, "create the profile store folder") from None
    remove_stale_temporaries(point)
    rid = run_id or new_run_id()
    final = point / rid
    if final.exists():
        raise StoreError(
            f"A run with id {rid} already exists at {final}.",
            "Run ids must be unique within a point.",
            "Leave run_id unset so that ncuflow makes a fresh one.",
        )
    tmp = temporary_run_folder(point, rid)
    try:
        tmp.mkdir()
    except OSError as error:
        raise _store_os_error(error, tmp, "create the run folder") from None
    return PendingRun(tmp_path=tmp, final_path=final, run_id=rid)


def finish_run(pending: PendingRun, manifest: Manifest) -> RunRecord:
    """Write the manifest into the temporary folder and rename it into place.

    The report must already be in the temporary folder. The log is created empty
    when absent, so every complete run has all three files. The manifest names the
    pending run's id; its creation time and ncuflow version are filled where unset.
    """
    if not pending.report_path.is_file():
        raise StoreError(
            f"The run in {pending.tmp_path} has no report, so it cannot be stored as complete.",
            "A complete run always holds report.ncu-rep, manifest.json and ncu.log.",
            "This is a bug in the caller: store only runs whose report was written.",
        )
    typed = _as_written(pending, manifest)
    try:
        if not pending.log_path.exists():
            pending.log_path.touch()
        _write_json_durably(pending.manifest_path, typed.to_json())
        fsync_path(pending.tmp_path)
        os.rename(pending.tmp_path, pending.final_path)
    except OutputError as error:
        raise StoreError(error.what, error.why, error.fix) from None
    except OSError as error:
        raise _store_os_error(error, pending.final_path, "store the run") from None
    fsync_path(pending.final_path.parent)
    return RunRecord(
        path=pending.final_path,
        manifest=typed,
        report_path=pending.final_path / REPORT_NAME,
        log_path=pending.final_path / LOG_NAME,
    )


def _as_written(pending: PendingRun, manifest: Manifest) -> Manifest:
    """The manifest with the pending run's id, a creation time and this ncuflow's version;
    checked as a reader checks it (a writer is held to the readers' contract)."""
    identity = replace(manifest.identity, run_id=pending.run_id,
                       created_utc=manifest.identity.created_utc or utc_now_iso())
    machine = replace(manifest.machine, ncuflow_version=manifest.machine.ncuflow_version or __version__)
    typed = replace(manifest, identity=identity, machine=machine, schema_version=SCHEMA_VERSION)
    try:
        return Manifest.from_json(json.loads(json.dumps(typed.to_json(), default=str)), pending.manifest_path)
    except ManifestError as error:
        raise StoreError(
            f"Internal error: the manifest of the run in {pending.tmp_path} does not validate: {error.problem}.",
            "Every manifest is checked against ncuflow.store.manifest.Manifest before it is written.",
            "This is a bug in the caller; please report it with the command you ran.",
        ) from error


def _store_os_error(error: OSError, path: Path, doing: str) -> StoreError:
    """The OS error as a StoreError paragraph naming the path (disk full, read-only, permission)."""
    message = os_error(error, path, doing)
    return StoreError(message.what, message.why + " Every run already stored is intact.",
                      message.fix.replace("write somewhere else", "use another --store") + " Then re-run.")


def abandon_run(pending: PendingRun) -> None:
    """Remove a run's temporary folder entirely (interrupt, timeout)."""
    shutil.rmtree(pending.tmp_path, ignore_errors=True)


def keep_failed_run(pending: PendingRun, manifest: Manifest) -> Path | None:
    """Keep a failed run's log and manifest as ``.failed-<run-id>`` (never read as a run).

    The partial report, if any, is deleted. Returns the folder, or None when the
    temporary folder is already gone.
    """
    if not pending.tmp_path.is_dir():
        return None
    with contextlib.suppress(OSError):
        pending.report_path.unlink(missing_ok=True)
    identity = replace(manifest.identity, run_id=pending.run_id,
                       created_utc=manifest.identity.created_utc or utc_now_iso())
    try:
        _write_json_durably(pending.manifest_path, replace(manifest, identity=identity).to_json())
        target = pending.final_path.parent / f"{FAILED_PREFIX}{pending.run_id}"
        os.rename(pending.tmp_path, target)
    except (OSError, OutputError):
        abandon_run(pending)
        return None
    return target


def remove_stale_temporaries(point: Path) -> list[Path]:
    """Delete ``.tmp-*`` folders left by processes that no longer exist (e.g. SIGKILL).

    The caller holds the point's lock. A folder named with an owner tag is removed only when
    its owner is provably dead (``owner.tag_owner_dead``: this host, boot and PID namespace,
    and gone); one named by a pid alone (an older ncuflow's) when no process has that pid.
    """
    removed: list[Path] = []
    if not point.is_dir():
        return removed
    for child in point.iterdir():
        if not (child.is_dir() and child.name.startswith(TMP_PREFIX)):
            continue
        pid_text = child.name.rsplit("-", 1)[-1]
        if "." in pid_text and not tag_owner_dead(pid_text):
            continue
        if pid_text.isdigit() and pid_alive(int(pid_text)) and int(pid_text) != os.getpid():
            continue
        if pid_text.isdigit() and int(pid_text) == os.getpid():
            continue  # ours: the caller is still writing it
        shutil.rmtree(child, ignore_errors=True)
        removed.append(child)
    return removed


def write_run(root: Path, spec: CellSpec, report_src: Path, *, content_key: str | None = None,
              run_id: str | None = None, log_text: str = "", **parts: Any) -> RunRecord:
    """Copy an existing report into a complete run (for tests, imports and demos).

    ``parts`` are the manifest's other parts by name (``collection=Collection(...)``,
    ``provenance=Provenance(replica=2)``, ...); the content key defaults to the spec's.
    """
    source = Path(report_src)
    if not source.is_file():
        raise StoreError(
            f"The report {source} does not exist.",
            "write_run copies an existing .ncu-rep file into the store.",
            "Pass the path of a real report.",
        )
    key = content_key or spec.content_key()
    pending = begin_run(root, spec, key, run_id)
    try:
        shutil.copyfile(source, pending.report_path)
        pending.log_path.write_text(log_text, encoding="utf-8")
        identity = RunIdentity(cell=spec.cell, params=spec.as_dict(), content_key=key, run_id=pending.run_id)
        manifest = Manifest(identity=identity, **parts)
        if manifest.outcome.exit_status is None:
            manifest = manifest.with_outcome(exit_status=0)
        return finish_run(pending, manifest)
    except BaseException:
        abandon_run(pending)
        raise


# ---------------------------------------------------------------------------- reading


def inspect_run(path: Path, *, point: Path | None = None) -> RunRecord | DamagedRun | None:
    """The complete run in ``path``, what is wrong with it, or None where ``path`` is no run.

    A run is a visible folder (never a link) holding ``manifest.json`` or ``report.ncu-rep``:
    anything else at that depth is not a run, neither complete nor damaged. A run whose
    manifest does not validate, whose report is gone, is not a regular file or is cut short
    (its framing, ``ncuflow.read.framing``), or, when found in a store under ``point``, whose
    manifest belongs to another cell, point or run folder, is damaged.
    """
    folder = Path(path)
    if folder.name.startswith(".") or folder.is_symlink() or not folder.is_dir():
        return None
    denied = unreadable(folder, (MANIFEST_NAME, REPORT_NAME))
    if denied is not None:
        return DamagedRun(folder, denied, unreadable=True)
    report = folder / REPORT_NAME
    if not (folder / MANIFEST_NAME).exists() and not report.exists():
        return None
    try:
        manifest = read_manifest(folder / MANIFEST_NAME)
    except ManifestError as error:
        return DamagedRun(folder, f"{MANIFEST_NAME}: {error.problem}", newer=error.newer)
    if not report.is_file() or report.is_symlink():
        return DamagedRun(folder, f"{REPORT_NAME} is missing" if not report.exists() else
                          f"{REPORT_NAME} is not a regular file")
    misplaced = _misplaced(folder, manifest) if point is not None else None
    if misplaced is not None:
        return DamagedRun(folder, misplaced)
    cut = framing_problem(report)
    if cut is not None:
        return DamagedRun(folder, f"{REPORT_NAME}: {cut}")
    return RunRecord(path=folder, manifest=manifest, report_path=report, log_path=folder / LOG_NAME)


def _misplaced(folder: Path, manifest: Manifest) -> str | None:
    """Why a run's manifest does not belong where the run lies (its cell, point and folder)."""
    if folder.parent.parent.name != _safe(manifest.cell):
        return f"{MANIFEST_NAME} is of the cell {manifest.cell!r}, not of the cell folder {folder.parent.parent.name}"
    if not folder.parent.name.endswith(f"-{manifest.content_key[:8]}"):
        return f"{MANIFEST_NAME} has the content key {manifest.content_key[:8]}…, not its point folder's"
    if folder.name != manifest.run_id:
        return f"{MANIFEST_NAME} names the run {manifest.run_id}, not its folder {folder.name}"
    return None


def read_run(path: Path) -> RunRecord | None:
    """The complete run in ``path``, or None when the folder is not one (damage is warned)."""
    found = inspect_run(path)
    if isinstance(found, DamagedRun):
        warnings.warn(DamagedRunWarning(found.line()), stacklevel=2)
        return None
    return found


def visible_dirs(folder: Path) -> list[Path]:
    """The folders in ``folder`` a store reader visits: visible, and not links (a link may loop)."""
    try:
        return sorted(p for p in folder.iterdir() if not p.name.startswith(".") and not p.is_symlink() and p.is_dir())
    except OSError:
        return []


def _readable_dirs(folder: Path) -> list[Path | DamagedRun]:
    """``visible_dirs``, or the folder itself as a run that cannot be read where it cannot be listed."""
    _, denied = listing(folder) if folder.is_dir() else ([], None)
    return [DamagedRun(folder, denied, unreadable=True)] if denied else list(visible_dirs(folder))


def scan_runs(root: Path, cell: str | None = None) -> Iterator[RunRecord | DamagedRun]:
    """Every run folder under ``root`` (optionally of one cell), sorted by path: complete or damaged.

    Temporary (``.tmp-*``), failed (``.failed-*``) and moved-aside (``.damaged-*``) folders
    are not runs and are not visited, nor are links and folders that hold no run's files.
    """
    base = Path(root)
    if not base.is_dir():
        return
    cells = [base / _safe(cell)] if cell is not None else visible_dirs(base)
    for cell_folder in cells:
        for point in _readable_dirs(cell_folder):
            if isinstance(point, DamagedRun):
                yield point
                continue
            for run_folder in _readable_dirs(point):
                if isinstance(run_folder, DamagedRun):
                    yield run_folder
                    continue
                found = inspect_run(run_folder, point=point)
                if found is not None:
                    yield found


def iter_runs(root: Path, cell: str | None = None) -> Iterator[RunRecord]:
    """Every complete run under ``root`` (optionally of one cell), sorted by path.

    Each damaged run is skipped with one ``DamagedRunWarning`` naming the folder, the
    file and what is wrong (``scan_runs`` gives them as data).
    """
    for found in scan_runs(root, cell):
        if isinstance(found, DamagedRun):
            warnings.warn(DamagedRunWarning(found.line()), stacklevel=2)
        else:
            yield found


# The runs of one point, counted (a module of its own; it reads the store with the functions above).
from ncuflow.store.point_runs import PointRuns, complete_runs_for_key, runs_for_key  # noqa: E402
