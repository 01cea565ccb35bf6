"""``ncuflow store check``: list the damaged runs of a store and, on request, move them aside.

A damaged run is a visible run folder whose manifest does not validate (truncated
JSON, a required field missing, a field of the wrong type), belongs to another cell,
point or folder, or whose report is gone or cut short (``store.inspect_run``). A run this
user cannot read (no permission, ``ncuflow.store.access``) is not damaged: it is named as
such and never moved. Repairing renames a damaged run, within its point folder, to ``.damaged-<run-id>``: no reader
visits dot-folders, a sweep then profiles the point again, and nothing is deleted (the
report and the log stay there for a look). Runs written by a newer ncuflow (an unknown
schema version) are named but never moved.

A folder that holds no run at a store's depth (``<cell>/<point>/<run>``) but whole stores one
or two levels below it (``profiles/``, ``profiles/reference/``) is checked store by store
(``check_stores``), as ``report`` reads every run below it; a sweep into it is refused, as is a
check or a sweep of a cell, point or run folder of a store: that would read, repair or grow the
wrong folder, so one paragraph names the store to give instead.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from ncuflow.store import (
    DAMAGED_PREFIX,
    DamagedRun,
    RunRecord,
    StoreError,
    inspect_run,
    scan_runs,
    visible_dirs,
)


@dataclass(frozen=True)
class StoreCheck:
    root: Path
    damaged: tuple[DamagedRun, ...]
    runs: tuple[RunRecord, ...] = ()  # the complete runs (what a further check, e.g. of tier 2, reads)

    @property
    def complete(self) -> int:
        return len(self.runs)

    @property
    def repairable(self) -> tuple[DamagedRun, ...]:
        return tuple(d for d in self.damaged if d.movable)

    @property
    def unreadable(self) -> tuple[DamagedRun, ...]:
        return tuple(d for d in self.damaged if d.unreadable)


def check_store(root: Path) -> StoreCheck:
    """Every run of the store: how many are complete, and each damaged one with its problem."""
    base = Path(root)
    if not base.is_dir():
        raise StoreError(
            f"The store {base} does not exist or is not a folder.",
            "store check reads a profile store (the --store folder of profile and sweep).",
            "Give the path of the store, e.g. profiles/.",
        )
    refuse_misrooted(base, "store check", "ncuflow store check {store}")
    runs: list[RunRecord] = []
    damaged: list[DamagedRun] = []
    for found in scan_runs(base):
        if isinstance(found, RunRecord):
            runs.append(found)
        else:
            damaged.append(found)
    return StoreCheck(base, tuple(damaged), tuple(runs))


def check_stores(root: Path) -> tuple[StoreCheck, ...]:
    """``check_store`` of the store ``root``, or of each store below a folder of stores (``profiles/``)."""
    base = Path(root)
    if base.is_dir() and not any(True for _ in scan_runs(base)) and _store_above(base) is None:
        below = stores_below(base)
        if below:
            return tuple(check_store(store) for store in below)
    return (check_store(base),)


def _store_above(base: Path) -> Path | None:
    """The store ``base`` lies in, where it is a run, point or cell folder of one."""
    if isinstance(inspect_run(base), RunRecord):
        return base.parent.parent.parent
    for child in visible_dirs(base):
        if isinstance(inspect_run(child, point=base), RunRecord):
            return base.parent.parent
        if any(isinstance(inspect_run(run, point=child), RunRecord) for run in visible_dirs(child)):
            return base.parent
    return None


def stores_below(base: Path, depth: int = 2) -> list[Path]:
    """The folders up to ``depth`` levels below ``base`` that hold complete runs at a store's depth."""
    found: list[Path] = []
    for child in visible_dirs(base):
        if any(isinstance(item, RunRecord) for item in scan_runs(child)):
            found.append(child)
        elif depth > 1:
            found += stores_below(child, depth - 1)
    return found


def refuse_misrooted(base: Path, command: str, usage: str) -> None:
    """Refuse a "store" that holds no run at a store's depth while complete runs lie at another:
    the stores below it (``profiles/``), or the store it is a cell, point or run folder of."""
    if not base.is_dir() or any(True for _ in scan_runs(base)):
        return
    above = _store_above(base)
    below = [] if above is not None else stores_below(base)
    if above is None and not below:
        return
    stores = [above] if above is not None else below
    where = (f"it is a folder inside the store {above}" if above is not None else
             f"its complete runs lie one or two levels further down, in the store{'s' * (len(below) > 1)} "
             f"{', '.join(map(str, below[:5]))}"
             + (f" and {len(below) - 5} more" if len(below) > 5 else ""))
    raise StoreError(
        f"{base} is not a profile store: it holds no run at a store's depth (<cell>/<point>/<run>), and {where}.",
        f"{command} reads one store; run on this folder it would look at the wrong depth "
        "(nothing here is moved or written).",
        f"Give {command} the store itself: `{usage.format(store=stores[0])}`"
        + (f" (and likewise for the other {len(stores) - 1})" if len(stores) > 1 else "") + ".",
    )


def move_aside(run: DamagedRun) -> Path | None:
    """Rename a damaged run folder to ``.damaged-<name>`` beside it (``-2``, ``-3`` ... if taken).

    None when the run is no longer there: another repair (or sweep) moved it aside meanwhile;
    two ``store check --repair`` at once each move what the other has not.
    """
    if not run.movable:
        raise StoreError(
            f"The run {run.path} " + ("cannot be read by this user" if run.unreadable else
                                      "was written by a newer ncuflow") + "; it is not damaged.",
            "Only runs whose manifest or report is broken are moved aside.",
            "Fix its permissions (ls -ld shows them)." if run.unreadable else "Upgrade ncuflow to read it.",
        )
    suffix = 1
    while True:
        target = run.path.with_name(f"{DAMAGED_PREFIX}{run.path.name}" + (f"-{suffix}" if suffix > 1 else ""))
        if not os.path.lexists(run.path):
            return None
        try:
            if not os.path.lexists(target):
                os.rename(run.path, target)
                return target
        except OSError as error:
            if not os.path.lexists(run.path):
                return None  # moved meanwhile by another process
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise StoreError(
                    f"Cannot move the damaged run {run.path} aside: {error.strerror or error}.",
                    f"Repair renames it to {target.name} in the same folder.",
                    "Check the folder's permissions, or move it by hand.",
                ) from error
        suffix += 1  # that name is taken (by an earlier repair, or another one just now)


def move_aside_damaged(root: Path, cell: str) -> list[tuple[DamagedRun, Path]]:
    """Move every damaged run of one cell aside (what ``sweep`` does before profiling).

    Runs written by a newer ncuflow are left where they are. Returns each moved run and
    where it went, so the caller can name them.
    """
    refuse_misrooted(Path(root), "sweep", "ncuflow sweep SWEEP_FILE --store {store}")
    moved: list[tuple[DamagedRun, Path]] = []
    for found in scan_runs(Path(root), cell):
        if isinstance(found, DamagedRun) and found.movable and (target := move_aside(found)) is not None:
            moved.append((found, target))
    return moved
