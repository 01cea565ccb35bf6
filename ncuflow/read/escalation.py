"""A tier-1 run and its tier-2 escalation, read as one: each launch with every field either holds.

``ncuflow profile`` collects the decisive tier 1; when tier 1 leaves a launch undecided it
profiles tier 2 into ``STORE/.tier2/`` and writes ``escalation.json`` into the tier-1 run
folder, naming that run. Every reader of a report goes through ``with_escalation``, so that
``classify``, ``export``, ``stability``, ``explain``, ``report`` and ``compare`` of a store
see the verdict ``profile`` printed, not tier 1 alone. The tier-2 run is not a replica of
the cell: folders are searched without their hidden subfolders (``find_reports``).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ncuflow.errors import NcuflowError
from ncuflow.read.launch import Launch
from ncuflow.store import REPORT_NAME

ESCALATION_FILE = "escalation.json"
ESCALATION_FOLDER = ".tier2"  # hidden: runs of the escalation are not replicas of the cell


class EscalationWarning(UserWarning):
    """A run names a tier-2 escalation that cannot be used: its launches are tier 1's alone."""


def merge_launches(first: Launch, second: Launch) -> Launch:
    """One launch seen by two runs (tier 1, then its tier-2 escalation): every field either holds.

    A field tier 1 holds keeps tier 1's value and provenance; the breakdown is the union.
    """
    values = dict(first.values)
    provenance = dict(first.provenance)
    for name, value in second.values.items():
        if values.get(name) is None and value is not None:
            values[name] = value
            if name in second.provenance:
                provenance[name] = second.provenance[name]
    missing = tuple(name for name in first.missing if values.get(name) is None)
    return replace(first, values=values, provenance=provenance, missing=missing,
                   breakdown={**second.breakdown, **first.breakdown})


def escalation_report(report: Path) -> Path | None:
    """The tier-2 report of the run ``report`` belongs to; None where the run has no escalation.

    ``escalation.json`` names the tier-2 run by path and id (or says none was needed); a
    store that was moved or copied is searched for ``.tier2/**/<run id>`` above the run. Raises ``NcuflowError``
    when the file is unreadable or names a run that is nowhere.
    """
    record = Path(report).parent / ESCALATION_FILE
    if not record.is_file():
        return None
    try:
        data = json.loads(record.read_text())
        if data.get("needed") is False:  # tier 1 decided every launch: nothing was escalated
            return None
        named, run_id = Path(str(data["path"])), str(data["run_id"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise NcuflowError(
            f"{record} cannot be read ({error}).",
            "`ncuflow profile` writes it into a tier-1 run to name the tier-2 run that escalated it.",
            "Profile the point again, or delete the file to use tier 1 alone.",
        ) from None
    if (named / REPORT_NAME).is_file():
        return named / REPORT_NAME
    for folder in Path(report).resolve().parents:  # the store was moved: look beside the run's ancestors
        tier2 = folder / ESCALATION_FOLDER
        if tier2.is_dir():
            found = sorted(tier2.rglob(f"{run_id}/{REPORT_NAME}"))
            if found:
                return found[0]
    raise NcuflowError(
        f"{record} names the tier-2 run {run_id} ({named}), which is not there.",
        "The tier-2 run was deleted, or the store was copied without its hidden .tier2 folder.",
        f"Copy {ESCALATION_FOLDER}/ with the store, profile the point again, or delete {record.name} "
        "to use tier 1 alone.",
    )


def with_escalation(report: Path, launches: Sequence[Launch]) -> tuple[Launch, ...]:
    """``launches`` (of ``report``, in report order) merged with their tier-2 escalation, if any.

    Where the run names an escalation that cannot be used (missing, unreadable, or holding
    another number of launches), warns with ``EscalationWarning`` and returns tier 1 alone.
    """
    from ncuflow.read.extract import iter_launches

    try:
        second_report = escalation_report(report)
        if second_report is None:
            return tuple(launches)
        second = tuple(iter_launches(second_report))
    except NcuflowError as error:
        warnings.warn(EscalationWarning(f"{report}: its tier-2 escalation is not used: {error}"), stacklevel=2)
        return tuple(launches)
    if len(second) != len(launches):
        warnings.warn(EscalationWarning(
            f"{report}: its tier-2 escalation ({second_report}) holds {len(second)} launches, tier 1 "
            f"{len(launches)}; the launches cannot be paired, so tier 1 is used alone."), stacklevel=2)
        return tuple(launches)
    return tuple(merge_launches(a, b) for a, b in zip(launches, second, strict=True))


def read_launches_escalated(report: Path) -> tuple[Launch, ...]:
    """Every intact launch of one report, merged with its run's tier-2 escalation (what a
    reading worker sends back for ``classify``)."""
    from ncuflow.read.extract import read_launches

    return with_escalation(Path(report), read_launches(report))
