"""``ncuflow store check``: list the damaged runs of a store and, on request, move them aside.

A damaged run is a visible run folder whose manifest does not validate (truncated
JSON, a required field missing, a field of the wrong type) or whose report is gone.
Repairing renames it, within its point folder, to ``.damaged-<run-id>``: no reader
visits dot-folders, a sweep then profiles the point again, and nothing is deleted (the
report and the log stay there for a look). Runs written by a newer ncuflow (an unknown
schema version) are named but never moved.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ncuflow.store import DAMAGED_PREFIX, DamagedRun, RunRecord, StoreError, scan_runs


@dataclass(frozen=True)
class StoreCheck:
    root: Path
    complete: int
    damaged: tuple[DamagedRun, ...]

    @property
    def repairable(self) -> tuple[DamagedRun, ...]:
        return tuple(d for d in self.damaged if not d.newer)


def check_store(root: Path) -> StoreCheck:
    """Every run of the store: how many are complete, and each damaged one with its problem."""
    base = Path(root)
    if not base.is_dir():
        raise StoreError(
            f"The store {base} does not exist or is not a folder.",
            "store check reads a profile store (the --store folder of profile and sweep).",
            "Give the path of the store, e.g. profiles/.",
        )
    complete = 0
    damaged: list[DamagedRun] = []
    for found in scan_runs(base):
        if isinstance(found, RunRecord):
            complete += 1
        else:
            damaged.append(found)
    return StoreCheck(base, complete, tuple(damaged))


def move_aside(run: DamagedRun) -> Path:
    """Rename a damaged run folder to ``.damaged-<name>`` beside it (``-2``, ``-3`` ... if taken)."""
    if run.newer:
        raise StoreError(
            f"The run {run.path} was written by a newer ncuflow; it is not damaged.",
            "Only runs whose manifest or report is broken are moved aside.",
            "Upgrade ncuflow to read it.",
        )
    target = run.path.with_name(f"{DAMAGED_PREFIX}{run.path.name}")
    suffix = 1
    while target.exists():
        suffix += 1
        target = run.path.with_name(f"{DAMAGED_PREFIX}{run.path.name}-{suffix}")
    try:
        os.rename(run.path, target)
    except OSError as error:
        raise StoreError(
            f"Cannot move the damaged run {run.path} aside: {error.strerror or error}.",
            f"Repair renames it to {target.name} in the same folder.",
            "Check the folder's permissions, or move it by hand.",
        ) from error
    return target


def move_aside_damaged(root: Path, cell: str) -> list[tuple[DamagedRun, Path]]:
    """Move every damaged run of one cell aside (what ``sweep`` does before profiling).

    Runs written by a newer ncuflow are left where they are. Returns each moved run and
    where it went, so the caller can name them.
    """
    moved: list[tuple[DamagedRun, Path]] = []
    for found in scan_runs(Path(root), cell):
        if isinstance(found, DamagedRun) and not found.newer:
            moved.append((found, move_aside(found)))
    return moved
