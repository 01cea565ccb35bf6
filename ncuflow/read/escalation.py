"""A tier-1 run and its escalations, read as one: each launch with every field any of them holds.

Which runs escalate, and when, is ``ncuflow.profile.escalation``'s (tier 2) and
``ncuflow.profile.why``'s (the why tier 3); the store finds a run's escalation runs
(``ncuflow.store.tiers.escalations_of``). Here their launches are merged into tier 1's, in
that order, so that ``classify``, ``export``, ``stability``, ``explain``, ``report`` and
``compare`` of a store see the verdict ``profile`` printed, not tier 1 alone; a field tier 1
holds is never changed by a later tier.
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
    """One launch seen by two runs (tier 1, then an escalation of it): every field either holds.

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


def _mismatch(first: Launch, second: Launch, index: int, tier: int) -> str | None:
    """Why two launches are not one launch seen twice: another kernel, another device, another
    launch configuration (None: they match)."""
    if (first.kernel.mangled or first.kernel.function) != (second.kernel.mangled or second.kernel.function):
        return (f"launch {index} is {shortened(first.kernel.function, 80)!r} in tier 1 and "
                f"{shortened(second.kernel.function, 80)!r} in tier {tier}")
    if (first.device.name, first.device.compute_capability) != (second.device.name, second.device.compute_capability):
        return (f"tier 1 ran on {first.device.name or 'an unknown GPU'} (compute capability "
                f"{first.device.compute_capability or '?'}), tier {tier} on {second.device.name or 'an unknown GPU'} "
                f"({second.device.compute_capability or '?'})")
    for name in ("grid_size", "block_size"):  # where both runs collected it
        if None not in (first.value(name), second.value(name)) and first.value(name) != second.value(name):
            return f"launch {index}'s {name} is {first.value(name)} in tier 1 and {second.value(name)} in tier {tier}"
    return None


def merge_tiers(first: Sequence[Launch], second: Sequence[Launch],
                second_report: Path | str, tier: int = 2) -> tuple[tuple[Launch, ...], str | None]:
    """Tier 1's launches merged pairwise with those of its tier-``tier`` escalation, in report
    order, where each pair is one launch seen twice (the same kernel, device and launch
    configuration); otherwise they cannot be paired: tier 1's alone, and why."""
    what = f"its tier-{tier} escalation ({second_report})"
    if len(second) != len(first):
        return tuple(first), (f"{what} holds {len(second)} launches, tier 1 "
                              f"{len(first)}; the launches cannot be paired, so tier 1 is used alone")
    for index, (a, b) in enumerate(zip(first, second, strict=True)):
        problem = _mismatch(a, b, index, tier)
        if problem is not None:
            return tuple(first), (f"{what} is not of the same launches: {problem}; "
                                  "its values are not used, so tier 1 is used alone")
    return tuple(merge_launches(a, b) for a, b in zip(first, second, strict=True)), None


def tier2_problem(record: RunRecord) -> str | None:
    """Why one of the run's escalations is not merged (another GPU's report, other kernels,
    another number of launches, an unreadable escalation), or None: what ``store check`` reports."""
    from ncuflow.read.extract import read_launches

    try:
        first = None
        for tier, path in escalation_reports(record):
            first = first if first is not None else read_launches(record.report_path)
            problem = merge_tiers(first, read_launches(path), path, tier)[1]
            if problem is not None:
                return problem
        return None
    except NcuflowError as error:
        return f"its escalation cannot be used: {error}"


def escalation_reports(record: RunRecord) -> list[tuple[int, Path]]:
    """The reports of the run's escalations as (tier, report), in the order they are merged
    (raises ``NcuflowError`` for a pre-schema-3 sidecar that cannot be read)."""
    from ncuflow.store.tiers import escalations_of

    return [(tier, run.report_path) for tier, run in escalations_of(record)]


def with_escalations(record: RunRecord, first: tuple[Launch, ...], options: ReadOptions = READ_DEFAULT,
                     ) -> tuple[Launch, ...]:
    """A stored run's launches (``first``, read from its report) merged with its escalations
    (tier 2, then the why tier 3) where it has any.

    An escalation that cannot be used (unreadable, or holding another number of launches) is
    warned about with ``EscalationWarning`` and left out; the others are still merged.
    """
    from ncuflow.read.extract import read_launches
    from ncuflow.store.tiers import escalation_runs_of

    try:
        reports = escalation_reports(record)
    except NcuflowError as error:  # a pre-schema-3 sidecar naming tier 2: the why runs are still merged
        warnings.warn(EscalationWarning(f"{record.report_path}: its tier-2 escalation is not used: {error}"),
                      stacklevel=2)
        reports = [(3, run.report_path) for run in escalation_runs_of(record, 3)]
    merged = first
    for tier, path in reports:
        try:
            merged_now, problem = merge_tiers(merged, read_launches(path, options), path, tier)
        except NcuflowError as error:
            warnings.warn(EscalationWarning(f"{record.report_path}: its tier-{tier} escalation is not used: {error}"),
                          stacklevel=2)
            continue
        if problem is not None:
            warnings.warn(EscalationWarning(f"{record.report_path}: {problem}"), stacklevel=2)
            continue
        merged = merged_now
    return merged


def read_run_launches(record: RunRecord, options: ReadOptions = READ_DEFAULT) -> tuple[Launch, ...]:
    """Every intact launch of a stored run, merged with its escalations (``with_escalations``)."""
    from ncuflow.read.extract import read_launches

    return with_escalations(record, read_launches(record.report_path, options), options)
