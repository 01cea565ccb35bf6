"""`ncuflow summary PATH...`: where the GPU time goes, per kernel and launch configuration."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ncuflow.analyze.arguments import checked_top
from ncuflow.cli.options import echo_notes, jobs_option, threshold_option
from ncuflow.cli.selection import selection_from, selection_options


@click.command("summary")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--top", type=int, default=None, metavar="N", callback=lambda ctx, param, value: checked_top(value, "--top"),
              help="Show the N kernels with the most GPU time per report; the rest is one 'other' row.")
@click.option("--json", "as_json", is_flag=True, help="Print the summaries as one JSON object (full kernel names).")
@click.option("--csv", "as_csv", is_flag=True, help="Print one CSV row per kernel of every report.")
@click.option("--per-report", is_flag=True,
              help="One table per report, instead of one per GPU summed over the reports.")
@threshold_option()
@selection_options
@jobs_option
def summary_command(paths: tuple[Path, ...], top: int | None, as_json: bool, as_csv: bool, per_report: bool,
                    threshold: float, kernel: str | None, nvtx: str | None, jobs: int | None) -> None:
    """The kernels that take the GPU time: over all the reports, per GPU, or per report.

    PATHS are reports, folders of reports, run folders or profile stores (a store run is
    one report). Several reports are rolled up: one table per GPU, each kernel (full name
    and launch configuration, grid × block) summed over the reports that hold it, with how
    many do; --per-report gives one table per report. Per kernel: launches, total and median
    duration, share of the GPU time (the shares of a table sum to 1), the max model's verdicts
    with their counts, the binding term's median utilization (the largest term's, for a
    latency-bound kernel), and NVIDIA's finding with the largest estimated speedup ("no rules"
    where the report holds no rule results). Sorted by total time.
    """
    from ncuflow.analyze.summary import roll_up, summarize
    from ncuflow.errors import UsageError
    from ncuflow.read.jobs import resolve_jobs
    from ncuflow.read.options import WITH_FINDINGS

    if as_json and as_csv:
        raise UsageError("--json and --csv both ask for the whole output.", "", "Pass one of them.")
    loaded = selection_from(kernel, nvtx).load(paths, jobs=resolve_jobs(jobs), options=WITH_FINDINGS)
    echo_notes(loaded.notes, loaded.damaged)  # each damaged or unreadable run skipped, named once
    several = sum(1 for run in loaded.runs if run.launches) > 1
    summaries = (roll_up if several and not per_report else summarize)(loaded.runs, threshold=threshold, top=top)
    from ncuflow.output.summary_table import print_summaries, summaries_csv, summaries_document

    if as_json:
        click.echo(json.dumps(summaries_document(summaries, threshold), indent=1))
    elif as_csv:
        click.echo(summaries_csv(summaries), nl=False)
    else:
        print_summaries(summaries)
