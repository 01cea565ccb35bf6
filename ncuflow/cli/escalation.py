"""``profile``'s escalation: tier 2 for a run whose launches tier 1 leaves undecided.

Never imports polars (the GPU host has none); the read side is optional there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape

from ncuflow.errors import NcuflowError
from ncuflow.profile.ncu import NcuOptions
from ncuflow.profile.passes import ESCALATION_BAND


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

    found = escalate.undecided_launches(record, threshold)
    if found is None:  # no read side on a bare GPU host, or an unreadable report (said elsewhere)
        return
    if found.undecided == 0:
        escalate.record_not_needed(record, found)
        return
    try:
        from ncuflow.analyze.classify import classify
        from ncuflow.output.render import print_launch_table
        from ncuflow.read.escalation import merge_launches
        from ncuflow.read.extract import iter_launches
    except ImportError:  # pragma: no cover - undecided_launches needed the same modules
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
    try:
        launches = list(iter_launches(record.report_path))
        launches2 = list(iter_launches(second.report_path))
    except NcuflowError as error:
        console.print(f"[yellow]The tier-2 report cannot be read:[/yellow] {error}")
        return
    if len(launches2) != len(launches):
        console.print(f"[yellow]tier 2 profiled {len(launches2)} launches, tier 1 {len(launches)}: "
                      "not merged[/yellow]")
        return
    merged = [merge_launches(a, b) for a, b in zip(launches, launches2, strict=True)]
    print_launch_table(merged, [classify(m, threshold) for m in merged], console,
                       title=f"{record.manifest.get('cell')} {record.run_id}: tier 1 + tier 2 ({second.run_id})")
