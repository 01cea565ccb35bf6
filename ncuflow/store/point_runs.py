"""The runs of one point of a store, counted: what a sweep has, and what it still needs.

``runs_for_key`` gives the complete runs of a point (same cell and full content key) and
those this user cannot read: a run (or the point folder) without read permission is there,
neither complete nor damaged, so a sweep counts it as present instead of profiling the
point again (``ncuflow.profile.sweep_run``). Damaged runs are warned about once each.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from ncuflow.errors import DamagedRunWarning
from ncuflow.store import DamagedRun, RunRecord, _readable_dirs, _safe, inspect_run, visible_dirs


@dataclass(frozen=True)
class PointRuns:
    """The runs of one point: the complete ones (oldest first), and those this user cannot read
    (a run, or the point folder, without read permission: there, but neither complete nor damaged)."""

    complete: list[RunRecord]
    unreadable: list[DamagedRun]


def runs_for_key(root: Path, cell: str, content_key: str) -> PointRuns:
    """The runs of one point (same cell and full content key); each damaged one warned about once."""
    cell_folder = Path(root) / _safe(cell)
    runs: list[RunRecord] = []
    unreadable: list[DamagedRun] = []
    for point in visible_dirs(cell_folder):
        if not point.name.endswith(f"-{content_key[:8]}"):
            continue
        for run_folder in _readable_dirs(point):
            found = run_folder if isinstance(run_folder, DamagedRun) else inspect_run(run_folder, point=point)
            if isinstance(found, DamagedRun):
                warnings.warn(DamagedRunWarning(found.line()), stacklevel=2)
                unreadable += [found] if found.unreadable else []
            elif found is not None and found.content_key == content_key:
                runs.append(found)
    runs.sort(key=lambda r: (r.manifest.identity.created_utc or "", r.run_id))
    return PointRuns(runs, unreadable)


def complete_runs_for_key(root: Path, cell: str, content_key: str) -> list[RunRecord]:
    """Complete runs of one point (same cell and full content key), oldest first."""
    return runs_for_key(root, cell, content_key).complete
