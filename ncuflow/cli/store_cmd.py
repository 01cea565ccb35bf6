"""`ncuflow store check STORE [--repair]`: name the damaged runs of a profile store, move them aside."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click


@click.group("store", context_settings={"help_option_names": ["-h", "--help"]})
def store_group() -> None:
    """Look after a profile store (the --store folder of profile, sweep and stability)."""


@click.command("check")
@click.argument("store", type=click.Path(path_type=Path, file_okay=False))
@click.option("--repair", is_flag=True,
              help="Move each damaged run aside to .damaged-<run-id> in its point folder "
                   "(nothing is deleted; a sweep then profiles the point again).")
def check_command(store: Path, repair: bool) -> None:
    """List the damaged runs of STORE: one line each, naming the folder, the file and what is wrong.

    A damaged run is a run folder whose manifest.json does not validate (truncated
    JSON, a required field missing, a field of the wrong type) or whose report is
    missing. Runs written by a newer ncuflow, and runs this user cannot read (no permission),
    are listed but never moved. A folder of stores (profiles/, one store per GPU below it) is
    checked store by store, as `report` reads it. Exits 1 when damaged runs remain or runs
    cannot be read (none found, or all damaged ones moved with --repair: 0).
    """
    from ncuflow.store.check import check_stores

    results = check_stores(store)
    failed = [_report_store(result, repair, named=result.root != Path(store)) for result in results]
    if any(failed):
        raise click.exceptions.Exit(1)


def _report_store(result: Any, repair: bool, named: bool) -> bool:
    """One store's damaged runs and its summary line (named by its folder where several are checked);
    True where damaged runs remain or runs cannot be read."""
    from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text
    from ncuflow.store.check import move_aside

    moved_by_other = 0
    for run in result.damaged:
        kind = "unreadable" if run.unreadable else "newer" if run.newer else "damaged"
        click.echo(f"{kind}\t{safe_text(run.path, limit=None)}\t{safe_text(run.problem, limit=SENTENCE_CHARS)}")
        if repair and run.movable:
            target = move_aside(run)
            moved_by_other += target is None
            click.echo(f"moved\t{safe_text(run.path, limit=None)} -> " + (
                safe_text(target.name, limit=None) if target else "(by another process, meanwhile)"))
    unmerged = _unmerged_escalations(result.runs)
    for run, problem in unmerged:
        click.echo(f"tier2\t{safe_text(run.path, limit=None)}\t{safe_text(problem, limit=SENTENCE_CHARS)}")
    repairable = len(result.repairable)
    summary = f"{result.complete} complete runs, {repairable} damaged"
    newer = len(result.damaged) - repairable - len(result.unreadable)
    if newer:
        summary += f", {newer} written by a newer ncuflow"
    if result.unreadable:
        summary += f", {len(result.unreadable)} cannot be read by this user (not moved: fix their permissions)"
    if unmerged:
        summary += (f", {len(unmerged)} whose tier-2 escalation is not of the same launches or device (read as "
                    "tier 1 alone; profile the point again to escalate it anew)")
    if repair and repairable:
        summary += f"; {repairable} moved aside" + (f" ({moved_by_other} of them by another process meanwhile)"
                                                     if moved_by_other else "")
    elif repairable:
        summary += f"; `ncuflow store check {result.root} --repair` moves them aside"
    click.echo(f"{safe_text(result.root, limit=None)}: {summary}" if named else summary, err=True)
    return bool((repairable and not repair) or result.unreadable or unmerged)


def _unmerged_escalations(runs: Any) -> list[tuple[Any, str]]:
    """The complete runs whose tier-2 escalation readers do not merge, and why (its launches read;
    ``tier2_problem`` is None for a run without one and names a sidecar that cannot be read)."""
    from ncuflow.read.escalation import tier2_problem

    return [(run, problem) for run in runs if (problem := tier2_problem(run)) is not None]


store_group.add_command(check_command)
