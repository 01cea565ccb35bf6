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
from ncuflow.files.safe_text import shortened
from ncuflow.read.launch import Launch
from ncuflow.read.options import READ_DEFAULT, ReadOptions

if TYPE_CHECKING:  # the store is imported when a run is read, not with this module
    from ncuflow.store import RunRecord


class EscalationWarning(UserWarning):
    """A run names a tier-2 escalation that cannot be used: its launches are tier 1's alone."""


def merge_launches(first: Launch, second: Launch) -> Launch:
    """One launch seen by two runs (tier 1, then its tier-2 escalation): every field either holds.

    A field tier 1 holds keeps tier 1's value and provenance; the breakdown is the union; NVIDIA's
    findings are tier 1's, or tier 2's where tier 1 holds none (a decisive collection runs no rule).
    """
    values = dict(first.values)
    provenance = dict(first.provenance)
    for name, value in second.values.items():
        if values.get(name) is None and value is not None:
            values[name] = value
            if name in second.provenance:
                provenance[name] = second.provenance[name]
    missing = tuple(name for name in first.missing if values.get(name) is None)
    rules = first.rule_results if first.rule_results is None or first.rule_results.held else second.rule_results
    return replace(first, values=values, provenance=provenance, missing=missing,
                   breakdown={**second.breakdown, **first.breakdown}, rule_results=rules)


def _mismatch(first: Launch, second: Launch, index: int) -> str | None:
    """Why two launches are not one launch seen twice: another kernel, another device, another
    launch configuration (None: they match)."""
    if (first.kernel.mangled or first.kernel.function) != (second.kernel.mangled or second.kernel.function):
        return (f"launch {index} is {shortened(first.kernel.function, 80)!r} in tier 1 and "
                f"{shortened(second.kernel.function, 80)!r} in tier 2")
    if (first.device.name, first.device.compute_capability) != (second.device.name, second.device.compute_capability):
        return (f"tier 1 ran on {first.device.name or 'an unknown GPU'} (compute capability "
                f"{first.device.compute_capability or '?'}), tier 2 on {second.device.name or 'an unknown GPU'} "
                f"({second.device.compute_capability or '?'})")
    for name in ("grid_size", "block_size"):  # where both runs collected it
        if None not in (first.value(name), second.value(name)) and first.value(name) != second.value(name):
            return f"launch {index}'s {name} is {first.value(name)} in tier 1 and {second.value(name)} in tier 2"
    return None


def merge_tiers(first: Sequence[Launch], second: Sequence[Launch],
                second_report: Path | str) -> tuple[tuple[Launch, ...], str | None]:
    """Tier 1's launches merged pairwise with tier 2's, in report order, where each pair is one
    launch seen twice (the same kernel, device and launch configuration); otherwise they cannot
    be paired: tier 1's alone, and why."""
    if len(second) != len(first):
        return tuple(first), (f"its tier-2 escalation ({second_report}) holds {len(second)} launches, tier 1 "
                              f"{len(first)}; the launches cannot be paired, so tier 1 is used alone")
    for index, (a, b) in enumerate(zip(first, second, strict=True)):
        problem = _mismatch(a, b, index)
        if problem is not None:
            return tuple(first), (f"its tier-2 escalation ({second_report}) is not of the same launches: {problem}; "
                                  "its values are not used, so tier 1 is used alone")
    return tuple(merge_launches(a, b) for a, b in zip(first, second, strict=True)), None


def tier2_problem(record: RunRecord) -> str | None:
    """Why the run's tier-2 escalation is not merged (another GPU's report, other kernels, another
    number of launches, an unreadable escalation), or None: what ``store check`` reports."""
    from ncuflow.read.extract import read_launches

    try:
        second_report = tier2_report(record)
        if second_report is None:
            return None
        return merge_tiers(read_launches(record.report_path), read_launches(second_report), second_report)[1]
    except NcuflowError as error:
        return f"its tier-2 escalation cannot be used: {error}"


def tier2_report(record: RunRecord) -> Path | None:
    """The report of the run's tier-2 escalation, or None where it has none (raises
    ``NcuflowError`` for a pre-schema-3 sidecar that cannot be read)."""
    from ncuflow.store.tiers import tier2_runs_of

    found = tier2_runs_of(record)
    return found[0].report_path if found else None


def with_tier2(record: RunRecord, first: tuple[Launch, ...], options: ReadOptions = READ_DEFAULT,
               ) -> tuple[Launch, ...]:
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
        merged, problem = merge_tiers(first, read_launches(second_report, options), second_report)
    except NcuflowError as error:
        warnings.warn(EscalationWarning(f"{record.report_path}: its tier-2 escalation is not used: {error}"),
                      stacklevel=2)
        return first
    if problem is not None:
        warnings.warn(EscalationWarning(f"{record.report_path}: {problem}"), stacklevel=2)
    return merged


def read_run_launches(record: RunRecord, options: ReadOptions = READ_DEFAULT) -> tuple[Launch, ...]:
    """Every intact launch of a stored run, merged with its tier-2 escalation (``with_tier2``)."""
    from ncuflow.read.extract import read_launches

    return with_tier2(record, read_launches(record.report_path, options), options)
