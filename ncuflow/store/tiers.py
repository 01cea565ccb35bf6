"""A store's escalation runs: where they live (tier 2 in ``STORE/.tier2``, the why tier 3 in
``STORE/.tier3``), and which runs a tier-1 run is escalated by (named in each escalation
run's own manifest; a tier-2 run before schema 3, in an ``escalation.json`` beside the
tier-1 run).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ncuflow.files import read_small_file
from ncuflow.store import RunRecord, StoreError, complete_runs_for_key
from ncuflow.store.manifest import parse_json

# hidden: runs of an escalation are not replicas of the cell
TIER_FOLDERS: Mapping[int, str] = {2: ".tier2", 3: ".tier3"}
TIER2_FOLDER = TIER_FOLDERS[2]
TIER3_FOLDER = TIER_FOLDERS[3]
LEGACY_ESCALATION_FILE = "escalation.json"  # schema 1/2: the sidecar that named a tier-2 run


def tier_root(store_root: Path, tier: int) -> Path:
    return Path(store_root) / TIER_FOLDERS[tier]


def tier2_root(store_root: Path) -> Path:
    return tier_root(store_root, 2)


def escalation_runs_of(record: RunRecord, tier: int) -> list[RunRecord]:
    """The runs of ``tier`` whose manifests name ``record`` as the run they escalate, oldest first."""
    return [run for run in complete_runs_for_key(tier_root(record.store_root, tier), record.cell, record.content_key)
            if run.manifest.provenance.escalation is not None
            and run.manifest.provenance.escalation.tier == tier
            and run.manifest.provenance.escalation.of_run == record.run_id]


def tier2_runs_of(record: RunRecord) -> list[RunRecord]:
    """The tier-2 runs that escalate ``record`` (its manifest's ``Escalation.of_run``), oldest first.

    A store made before schema 3 named its tier-2 run in an ``escalation.json`` beside the
    tier-1 run; that file is read too (a store copied without its ``.tier2`` folder simply
    has none).
    """
    found = escalation_runs_of(record, 2)
    legacy = _legacy_tier2_id(record)
    if legacy is not None and not found:
        found = [run for run in complete_runs_for_key(tier2_root(record.store_root), record.cell, record.content_key)
                 if run.run_id == legacy]
    return found


def _legacy_tier2_id(record: RunRecord) -> str | None:
    """The tier-2 run id an ``escalation.json`` sidecar names (None: none, or none needed)."""
    sidecar = record.path / LEGACY_ESCALATION_FILE
    if not sidecar.exists():
        return None

    def problem(text: str) -> StoreError:
        return StoreError(f"{sidecar} cannot be read: {text}.",
                          "An ncuflow before schema 3 wrote it to name the run's tier-2 escalation.",
                          "Delete it to read tier 1 alone, or profile the point again.")

    data = parse_json(read_small_file(sidecar, 1 << 16, what="escalation", error=problem), sidecar, problem)
    if not isinstance(data, dict):
        raise problem("it does not hold a JSON object")
    run_id = data.get("run_id")
    return run_id if isinstance(run_id, str) and run_id else None


def legacy_escalation_checked(record: RunRecord) -> bool:
    """Whether a pre-schema-3 run's sidecar says its escalation was decided (run or not needed)."""
    return (record.path / LEGACY_ESCALATION_FILE).is_file()


def escalations_of(record: RunRecord) -> list[tuple[int, RunRecord]]:
    """Every run that escalates ``record``, as (tier, run) in the order readers merge them: its
    first tier-2 run, then its tier-3 (why) runs, oldest first."""
    tier2 = tier2_runs_of(record)[:1]
    return [*((2, run) for run in tier2), *((3, run) for run in escalation_runs_of(record, 3))]
