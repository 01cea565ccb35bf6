"""A tier-1 run and its tier-2 escalation, read as one: each launch with every field either holds.

Which runs escalate, and when, is ``ncuflow.profile.escalation``'s; the store finds a run's
tier-2 run (``ncuflow.store.tier2_runs_of``). Here the two runs' launches are merged, so
that ``classify``, ``export``, ``stability``, ``explain``, ``report`` and ``compare`` of a
store see the verdict ``profile`` printed, not tier 1 alone.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ncuflow.errors import NcuflowError
from ncuflow.read.launch import Launch

if TYPE_CHECKING:  # the store is imported when a run is read, not with this module
    from ncuflow.store import RunRecord


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


def merge_tiers(first: Sequence[Launch], second: Sequence[Launch],
                second_report: Path | str) -> tuple[tuple[Launch, ...], str | None]:
    """Tier 1's launches merged pairwise with tier 2's, in report order; where the counts differ
    they cannot be paired: tier 1's alone, and why."""
    if len(second) != len(first):
        return tuple(first), (f"its tier-2 escalation ({second_report}) holds {len(second)} launches, tier 1 "
                              f"{len(first)}; the launches cannot be paired, so tier 1 is used alone")
    return tuple(merge_launches(a, b) for a, b in zip(first, second, strict=True)), None


def tier2_report(record: RunRecord) -> Path | None:
    """The report of the run's tier-2 escalation, or None where it has none (raises
    ``NcuflowError`` for a pre-schema-3 sidecar that cannot be read)."""
    from ncuflow.store.tiers import tier2_runs_of

    found = tier2_runs_of(record)
    return found[0].report_path if found else None


def with_tier2(record: RunRecord, first: tuple[Launch, ...]) -> tuple[Launch, ...]:
    """A stored run's launches (``first``, read from its report) merged with its tier-2
    escalation where it has one.

    An escalation that cannot be used (unreadable, or holding another number of launches) is
    warned about with ``EscalationWarning``; tier 1's launches are then returned alone.
    """
    from ncuflow.read.extract import read_launches

    try:
        second_report = tier2_report(record)
        if second_report is None:
            return first
        merged, problem = merge_tiers(first, read_launches(second_report), second_report)
    except NcuflowError as error:
        warnings.warn(EscalationWarning(f"{record.report_path}: its tier-2 escalation is not used: {error}"),
                      stacklevel=2)
        return first
    if problem is not None:
        warnings.warn(EscalationWarning(f"{record.report_path}: {problem}"), stacklevel=2)
    return merged


def read_run_launches(record: RunRecord) -> tuple[Launch, ...]:
    """Every intact launch of a stored run, merged with its tier-2 escalation (``with_tier2``)."""
    from ncuflow.read.extract import read_launches

    return with_tier2(record, read_launches(record.report_path))
