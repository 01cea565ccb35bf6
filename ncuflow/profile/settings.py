"""The options records of profiling, each built once (by the command line) and passed down.

- ``ProfileSettings``: how a profile runs: the store, where cells come from, which ncu,
  its time limit, and the escalation policy;
- ``EscalationPolicy``: whether tier 1 escalates to tier 2, at which on-wall threshold;
- ``SweepSettings``: how a sweep runs: past failures or not, with progress or not, and
  where (here, or on Ray).

What ncu collects is ``NcuOptions`` (``ncuflow.store.collection``), recorded with the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ncuflow.analyze.classify import DEFAULT_THRESHOLD
from ncuflow.cells.source import CellSource
from ncuflow.profile import DEFAULT_TIMEOUT_S
from ncuflow.profile.process import KILL_GRACE_S


@dataclass(frozen=True)
class EscalationPolicy:
    """Tier 1 of the decisive collection escalates to tier 2 for launches it leaves undecided."""

    enabled: bool = True
    threshold: float = DEFAULT_THRESHOLD  # the on-wall threshold the verdicts are judged at
    chip: str | None = None  # the chip whose passes are predicted (None: this machine's GPU)


@dataclass(frozen=True)
class ProfileSettings:
    """How profiles run: where runs are stored, where cells come from, which ncu, for how long."""

    store: Path = Path("profiles")
    cells: CellSource = field(default_factory=CellSource)
    ncu: str | None = None  # None: $NCU, PATH, the usual install folders
    timeout: float = DEFAULT_TIMEOUT_S
    kill_grace: float = KILL_GRACE_S
    drop_unknown_metrics: bool = True  # ncuflow's own names this ncu refuses are dropped, then re-run
    escalation: EscalationPolicy = field(default_factory=EscalationPolicy)


@dataclass(frozen=True)
class RayPlacement:
    """Where a sweep's tasks run: a cluster's address (None: RAY_ADDRESS or a local `ray start`),
    or a local Ray instance declaring ``local_gpus`` GPUs."""

    address: str | None = None
    local_gpus: int | None = None


@dataclass(frozen=True)
class SweepSettings:
    """How a sweep runs."""

    keep_going: bool = False  # continue past a point's own failure
    show_progress: bool = True
    timeout: float | None = None  # seconds per profile; None: the sweep file's
    ray: RayPlacement | None = None  # None: here, one profile at a time
