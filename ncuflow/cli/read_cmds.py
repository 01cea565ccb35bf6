"""`ncuflow classify` and `ncuflow export`: the read side on reports from any GPU."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from ncuflow.analyze.classify import classify
from ncuflow.cli.options import echo_notes, jobs_option, threshold_option
from ncuflow.cli.selection import selection_from, selection_options
from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text
from ncuflow.read.jobs import resolve_jobs
from ncuflow.read.options import READ_DEFAULT, WITH_FINDINGS
from ncuflow.read.runs import prestart_reading, read_sources, sources

_threshold_option = threshold_option()


@contextmanager
def _warnings_to_stderr() -> Iterator[None]:
    """Show library warnings (a damaged last action, ...) as one plain line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for warning in caught:
                click.echo(f"ncuflow: warning: {safe_text(warning.message, limit=SENTENCE_CHARS)}", err=True)


@click.command("classify")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@_threshold_option
@click.option("--json", "as_json", is_flag=True, help="Print the rows as a JSON array of objects.")
@click.option("--evidence", is_flag=True, help="Also print every term compared, its source metric, and what is missing.")
@click.option("--as-if", "as_if", metavar="COLLECTION",
              help="The verdict each launch would have had if only COLLECTION (decisive, tier1, "
              "decisive+tier2, fields) had been gathered, with its escalation, and its cost in passes "
              "on the launch's chip. The reports must hold the collection's metrics (a full set does).")
@selection_options
@jobs_option
def classify_command(paths: tuple[Path, ...], threshold: float, as_json: bool, evidence: bool,
                     as_if: str | None, kernel: str | None, nvtx: str | None, jobs: int | None) -> None:
    """Per-launch counters and the critical-path verdict of Nsight Compute reports.

    PATHS are report files (.ncu-rep, .ncu-repz, .nsight-cuprof-report) or folders
    searched recursively. Each launch gets DRAM %, L2 hit rate, sectors per request,
    global-load instructions, its grid × block, the binding wall of the max model (dram,
    l2, l1, issue, math) with its utilization u, or `latency` when no term is above the
    threshold (with the largest term's u); NVIDIA's own SpeedOfLight verdict beside ours.
    --evidence adds every term, for a latency-bound launch its occupancy and top
    warp-stall reasons where the report holds them, and NVIDIA's findings (its rules'
    messages, the binding wall's first, by estimated speedup) with the metrics they rest
    on; --json carries the findings and source markers of each launch.
    """
    selection = selection_from(kernel, nvtx)
    keep = selection.predicate()
    found = sources(paths)
    if as_if is None:
        jobs = resolve_jobs(jobs, found.reports)  # workers only where the reports are worth their start
        prestart_reading(found, jobs=jobs)  # its start-up overlaps the imports below
    from ncuflow.output.render import launch_row, print_launch_table

    echo_notes(damaged=found.damaged)
    if as_if is not None:
        _classify_as_if(found.reports, as_if, threshold, as_json, evidence, keep)
        return
    from ncuflow.cli.progress import progress_bar

    per_report = []
    with _warnings_to_stderr(), progress_bar() as bar:
        step = bar.stage("reading", len(found.items))
        for source, read, notes in read_sources(found, jobs=jobs, strict=True, progress=step,
                                                options=WITH_FINDINGS if evidence or as_json else READ_DEFAULT):
            for note in notes:  # what the reader said (an escalation not used, a damaged last action)
                click.echo(f"ncuflow: warning: {safe_text(note, limit=SENTENCE_CHARS)}", err=True)
            launches = [x for x in read or () if keep(x)]  # strict: an unreadable report raises
            if launches:
                per_report.append((_title_of(source), launches, [classify(x, threshold) for x in launches]))
    if not per_report:
        _nothing_selected(selection)
    if as_json:
        rows = [launch_row(x, v) for _, launches, verdicts in per_report for x, v in zip(launches, verdicts, strict=True)]
        click.echo(json.dumps(rows, indent=1))
        return
    from ncuflow.files import make_console

    console = make_console()
    for heading, launches, verdicts in per_report:
        first = launches[0]
        device = first.device.name or "unknown GPU"
        cc = f" (sm_{first.device.compute_capability.replace('.', '')})" if first.device.compute_capability else ""
        version = f", ncu {first.ncu_version}" if first.ncu_version else ""
        about = (f"{safe_text(device, 'rich')}{cc}{safe_text(version, 'rich')}, "
                 f"{len(launches)} launch{'es' if len(launches) != 1 else ''}")
        title = "\n".join([*(safe_text(line, "rich") for line in heading), about])
        print_launch_table(launches, verdicts, console, title=title, evidence=evidence)


def _title_of(source: Any) -> tuple[str, ...]:
    """What a table is about, line by line (each shown through ``safe_text`` on its own, so the
    break between them stays a break): a store run by its cell spec and run id (its folder path
    runs to 150 characters and was wrapped mid-word), a plain report by its path as given."""
    if source.record is None:
        return (str(source.report),)
    return (source.record.ref.spec.text(), f"run {source.record.run_id}")


def _nothing_selected(selection: object) -> None:
    from ncuflow.errors import UsageError

    raise UsageError(f"No launch matches {getattr(selection, 'describe', '')}.",
                     "The reports hold launches, but none has that kernel name or ran inside that NVTX range.",
                     "Check the names with `ncuflow summary PATH`, or leave the filter out.")


def _classify_as_if(reports: list[Path], name: str, threshold: float, as_json: bool, evidence: bool,
                    keep: Callable[[Any], bool]) -> None:
    """classify --as-if: the launches as the collection would have recorded them, and the cost.

    Launches whose report lacks what the collection collects are not judged or priced: one
    line per report says which terms it cannot give."""
    from ncuflow.files import make_console
    from ncuflow.output.render import launch_row, print_launch_table
    from ncuflow.profile.asif import as_if, perfworks_cost
    from ncuflow.profile.passes import get_collection, read_report_collection

    collection = get_collection(name)
    cost, why = perfworks_cost(collection)
    if cost is None and why and collection.metrics is not None:
        click.echo(f"ncuflow: warning: passes are not priced: {why}", err=True)
    rows: list[dict[str, object]] = []
    console = None if as_json else make_console()
    with _warnings_to_stderr():
        for report in reports:
            results = [r for r in as_if(report, collection, threshold, cost) if keep(r.launch)]
            info = read_report_collection(report)
            for result in results:
                row = launch_row(result.launch, result.verdict)
                row.update(as_if=collection.name, escalated=result.escalated, chip=result.chip,
                           passes=result.passes if collection.metrics is not None else info.recorded_passes,
                           recorded_passes=info.recorded_passes, holds_collection=result.holds,
                           lacking=list(result.lacking))
                rows.append(row)
            if console is None or not results:
                continue
            held = [r for r in results if r.holds]
            lacking = ", ".join(dict.fromkeys(t for r in results for t in r.lacking))
            shown = safe_text(report, "rich")
            if not held:
                console.print(f"{shown}: does not hold what `{collection.name}` collects ({lacking} cannot be "
                              f"computed from it; it recorded {info.recorded_passes or '?'} passes per launch): "
                              "no verdict or cost as if", highlight=False)
                continue
            escalated = sum(r.escalated for r in held)
            spent = [r.passes for r in held if r.passes is not None]
            cost_text = (f"{sum(spent) / len(spent):.1f} passes per launch on {held[0].chip}"
                         if spent else "passes not priced")
            title = (f"{shown}\nas if only `{collection.name}` had been collected: {cost_text}"
                     f" (this report recorded {info.recorded_passes or '?'} per launch); "
                     f"{escalated} launch{'es' if escalated != 1 else ''} escalated to tier 2")
            print_launch_table([r.launch for r in held], [r.verdict for r in held], console,
                               title=title, evidence=evidence)
            if len(held) < len(results):
                missing = len(results) - len(held)
                console.print(f"  {missing} launch{'' if missing == 1 else 'es'} not shown: {lacking} cannot be "
                              f"computed for {'it' if missing == 1 else 'them'} from the report", highlight=False)
    if as_json:
        click.echo(json.dumps(rows, indent=1))


@click.command("export")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path), help="The launches parquet file to write.")
@click.option("--metrics-long", is_flag=True, help="Also write every raw metric (long table) to OUTPUT's stem + .metrics.parquet.")
@click.option("--findings", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="F.parquet",
              help="Also write NVIDIA's findings and source markers, one row each (docs/findings.md), to this parquet file.")
@_threshold_option
@selection_options
@jobs_option
def export_command(paths: tuple[Path, ...], output: Path, metrics_long: bool, findings: Path | None, threshold: float,
                   kernel: str | None, nvtx: str | None, jobs: int | None) -> None:
    """Write the launches table of reports to parquet (one row per launch).

    Columns: identity (report, range, action, kernel names, NVTX ranges, device,
    compute capability, SM count, ncu version, store run), every canonical field and
    the raw metric it came from (src_*), the model terms u_* and their sources, the
    verdict, NVIDIA's rule verdict, and the list of missing fields. The schema version
    is in the file's metadata (key ncuflow.schema_version). --findings adds a second table:
    one row per NVIDIA finding (rule, title, message, speedup, focus metrics, the wall it
    concerns) and per source marker, and one per launch whose report holds no rule results. Nothing is written when a
    report cannot be read. A store run whose manifest does not validate is skipped with
    one warning line: no row is written without the run's identity.
    """
    from ncuflow.output.launch_rows import ExportOptions, prestart_export

    selection = selection_from(kernel, nvtx)
    found = sources(paths)
    # The worker server starts while polars and rich are imported (~0.1 s of each command).
    jobs = resolve_jobs(jobs, found.reports, through_ncu_report=metrics_long)  # the long table's units: ncu_report
    prestart_export(found.reports, jobs=jobs, metrics_long=metrics_long)
    from ncuflow.cli.progress import progress_bar
    from ncuflow.output.export import export_reports

    echo_notes(damaged=found.damaged)
    with _warnings_to_stderr(), progress_bar() as bar:
        reading = bar.stage("reading", len(found.items))

        def advance(index: int, report: Path) -> None:
            reading(index, report)
            if index + 1 == len(found.items):  # what is left is writing the tables
                bar.stage("writing " + ("the launches and metrics tables" if metrics_long else "the launches table"),
                          None)

        result = export_reports(found, output, metrics_long=metrics_long, progress=advance, jobs=jobs,
                                options=ExportOptions(threshold=threshold, selection=selection), findings=findings)
    click.echo(f"wrote {result.launch_count} launch{'' if result.launch_count == 1 else 'es'} from "
               f"{result.report_count} report{'' if result.report_count == 1 else 's'} to {result.launches_path}")
    if result.metrics_path is not None:
        click.echo(f"wrote {result.metric_rows} raw metric rows to {result.metrics_path}")
    if result.findings_path is not None:
        click.echo(f"wrote {result.finding_rows} finding and marker rows to {result.findings_path}")
