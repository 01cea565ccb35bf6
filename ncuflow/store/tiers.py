"""A store's tier-2 escalation runs: where they live (``STORE/.tier2``), and which run a tier-1
run is escalated by (named in the tier-2 run's own manifest; before schema 3, in an
``escalation.json`` beside the tier-1 run).
"""

from __future__ import annotations

from pathlib import Path

from ncuflow.files import read_small_file
from ncuflow.store import RunRecord, StoreError, complete_runs_for_key
from ncuflow.store.manifest import parse_json

TIER2_FOLDER = ".tier2"  # hidden: runs of the escalation are not replicas of the cell
LEGACY_ESCALATION_FILE = "escalation.json"  # schema 1/2: the sidecar that named a tier-2 run


def tier2_root(store_root: Path) -> Path:
    return Path(store_root) / TIER2_FOLDER


def tier2_runs_of(record: RunRecord) -> list[RunRecord]:
    """The tier-2 runs that escalate ``record`` (its manifest's ``Escalation.of_run``), oldest first.

    A store made before schema 3 named its tier-2 run in an ``escalation.json`` beside the
    tier-1 run; that file is read too (a store copied without its ``.tier2`` folder simply
    has none).
    """
    found = [run for run in complete_runs_for_key(tier2_root(record.store_root), record.cell, record.content_key)
             if run.manifest.provenance.escalation is not None
             and run.manifest.provenance.escalation.of_run == record.run_id]
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
