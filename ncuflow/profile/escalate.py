"""Escalating a tier-1 run to tier 2, as ``profile`` and ``sweep`` (here or on Ray) both do.

A run of the decisive tier 1 whose launches the model leaves undecided (its largest term
just below the on-wall threshold) is profiled again with tier 2 into ``STORE/.tier2/``;
``escalation.json`` in the tier-1 run then names that run, and every reader merges the
two (``ncuflow.read.escalation``). A tier-1 run the model decides gets an
``escalation.json`` that says none is needed, so a resumed sweep reads each run once:
a run of the decisive tier 1 without the file is still to be checked (a sweep stopped
between the two, or a store from before sweeps escalated).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ncuflow.errors import NcuflowError
from ncuflow.files import atomic_write_text
from ncuflow.profile.ncu import DECISIVE, DECISIVE_TIER2, NcuOptions
from ncuflow.read.escalation import ESCALATION_FILE, ESCALATION_FOLDER
from ncuflow.read.launch import Launch
from ncuflow.store import RunRecord


@dataclass(frozen=True)
class Undecided:
    """What tier 1 left undecided in one run."""

    undecided: int
    launches: int


def escalates(options: NcuOptions) -> bool:
    """Whether runs collected with ``options`` escalate: the decisive tier 1, no sections added."""
    return options.metric_set == DECISIVE and not options.sections


def tier2_options(options: NcuOptions) -> NcuOptions:
    """The escalation's collection: tier 2, with the run's other options (clocks, filters)."""
    return replace(options, metric_set=DECISIVE_TIER2, exclude_metrics=())


def tier2_root(store_root: Path) -> Path:
    return Path(store_root) / ESCALATION_FOLDER


def escalation_extra(record: RunRecord) -> dict[str, Any]:
    """What the tier-2 run's manifest records of the run it escalates."""
    return {"escalation_of": record.run_id, "escalation_of_path": str(record.path), "tier": 2}


def checked(record: RunRecord) -> bool:
    """Whether the run's escalation was decided already (run, or found not needed)."""
    return (Path(record.path) / ESCALATION_FILE).is_file()


def count_undecided(launches: Sequence[Launch], threshold: float) -> Undecided:
    """How many of a run's launches tier 1 leaves undecided (``ncuflow.profile.asif.undecided``)."""
    from ncuflow.analyze.classify import classify
    from ncuflow.profile.asif import undecided

    return Undecided(sum(undecided(classify(launch, threshold)) for launch in launches), len(launches))


def undecided_in_report(report: Path, threshold: float) -> Undecided | None:
    """``count_undecided`` of a report's launches; None where it cannot be read here (no
    ``ncu_report`` on a bare GPU host, or a damaged report). A module-level function of plain
    data, so that a reading worker can run it (``ncuflow.read.pool``)."""
    try:
        from ncuflow.read.extract import iter_launches

        launches = list(iter_launches(report))
    except (ImportError, NcuflowError):
        return None
    return count_undecided(launches, threshold)


def record_escalation(record: RunRecord, second: RunRecord) -> None:
    """Name the tier-2 run in the tier-1 run (written whole, or not at all)."""
    atomic_write_text(Path(record.path) / ESCALATION_FILE,
                      json.dumps({"tier": 2, "run_id": second.run_id, "path": str(second.path)}, indent=1) + "\n")


def record_not_needed(record: RunRecord, found: Undecided) -> None:
    """Say in the tier-1 run that tier 1 decided every launch: nothing to escalate, nothing to check again."""
    atomic_write_text(Path(record.path) / ESCALATION_FILE,
                      json.dumps({"tier": 2, "needed": False, "launches": found.launches}, indent=1) + "\n")
