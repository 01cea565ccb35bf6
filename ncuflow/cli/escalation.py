"""``profile``'s escalation: tier 2 for a run whose launches tier 1 leaves undecided.

Never imports polars (the GPU host has none); the read side is optional there.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from rich.markup import escape

from ncuflow.errors import NcuflowError
from ncuflow.profile.ncu import NcuOptions
from ncuflow.profile.passes import ESCALATION_BAND
from ncuflow.read.escalation import EscalationWarning


def escalate_to_tier2(record: Any, options: NcuOptions, store_root: Path, chip: str | None,
                      threshold: float, console: Any, again: Any) -> None:
    """Profile tier 2 when tier 1 leaves a launch undecided; print the verdicts of both together.

    The tier-2 run is stored under STORE/.tier2/ (so it is never mistaken for a replica of
    the cell) with ``escalation_of`` in its manifest, and the tier-1 run folder gets an
    ``escalation.json`` that names it, or says that none was needed
    (``ncuflow.profile.escalate``; ``ncuflow.read.escalation`` merges the two wherever the
    store is read).
    """
    from ncuflow.profile import escalate
    from ncuflow.profile.precheck import check_passes

    try:
        from ncuflow.analyze.classify import classify
        from ncuflow.output.render import print_launch_table
        from ncuflow.read.escalation import with_escalation
        from ncuflow.read.extract import iter_launches
    except ImportError:  # the read side is optional on a bare GPU host
        return
    try:
        launches = tuple(iter_launches(record.report_path))
    except NcuflowError:  # an unreadable report is said where the run is printed
        return
    found = escalate.count_undecided(launches, threshold)
    if found.undecided == 0:
        escalate.record_not_needed(record, found)
        return
    check = check_passes(escalate.tier2_options(options), chip)
    cost = f" ({check.recorded_expected} passes predicted on {check.chip})" if check.passes is not None else ""
    console.print(f"tier 1 leaves {found.undecided} of {found.launches} launches undecided (largest term within "
                  f"{ESCALATION_BAND:g}× below the on-wall threshold {threshold:g}): profiling tier 2{cost}",
                  soft_wrap=True)
    for line in check.lines()[1:] if check.passes is not None else check.lines():
        console.print(escape(line), soft_wrap=True)
    second = again(check.options, escalate.tier2_root(store_root), escalate.escalation_extra(record))
    escalate.record_escalation(record, second)
    console.print(f"stored tier 2 in {second.path}", soft_wrap=True)
    # paired as every reader pairs them: a tier 2 that cannot be read or paired is said, not merged
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", EscalationWarning)
        merged = with_escalation(record.report_path, launches)
    for warning in caught:
        console.print(f"[yellow]{escape(str(warning.message))}[/yellow]", soft_wrap=True)
    if any(issubclass(warning.category, EscalationWarning) for warning in caught):
        return
    print_launch_table(merged, [classify(m, threshold) for m in merged], console,
                       title=f"{record.manifest.get('cell')} {record.run_id}: tier 1 + tier 2 ({second.run_id})")
