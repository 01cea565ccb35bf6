"""`ncuflow classify` and `ncuflow export`: the read side on reports from any GPU."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from ncuflow.analyze.classify import DEFAULT_THRESHOLD, classify
from ncuflow.read.pool import read_launches_of, resolve_jobs
from ncuflow.read.reportfile import find_reports


def _threshold_option(function: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--threshold",
        type=click.FloatRange(0.0, 1.0, min_open=True),
        default=DEFAULT_THRESHOLD,
        show_default=True,
        help="On-wall threshold: a launch whose largest utilization is below it is latency-bound.",
    )(function)


def jobs_option(function: click.decorators.FC) -> click.decorators.FC:
    """``--jobs N``: reports are read in N worker processes (see ``ncuflow.read.pool``)."""
    return click.option(
        "--jobs", "-j",
        type=click.IntRange(min=0),
        default=None,
        help="Read reports in N worker processes [default: the usable cores]. Each worker is replaced "
             "after reading 16 MiB of reports, so memory does not grow with their number; "
             "0 reads in this process.",
    )(function)


@contextmanager
def _warnings_to_stderr() -> Iterator[None]:
    """Show library warnings (a damaged last action, ...) as one plain line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for warning in caught:
                click.echo(f"ncuflow: warning: {warning.message}", err=True)


@click.command("classify")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@_threshold_option
@click.option("--json", "as_json", is_flag=True, help="Print the rows as a JSON array of objects.")
@click.option("--evidence", is_flag=True, help="Also print every term compared, its source metric, and what is missing.")
@jobs_option
def classify_command(paths: tuple[Path, ...], threshold: float, as_json: bool, evidence: bool, jobs: int | None) -> None:
    """Per-launch counters and the critical-path verdict of Nsight Compute reports.

    PATHS are report files (.ncu-rep, .ncu-repz, .nsight-cuprof-report) or folders
    searched recursively. Each launch gets DRAM %, L2 hit rate, sectors per request,
    global-load instructions, the utilizations u_dram / u_issue / u_math of the max
    model and the binding wall (dram, l2, l1, issue, math) or `latency` when none is
    above the threshold; NVIDIA's own SpeedOfLight verdict is shown beside ours.
    """
    from ncuflow.output.render import launch_row, print_launch_table

    reports = find_reports(paths)
    per_report = []
    with _warnings_to_stderr():
        for report, launches in read_launches_of(reports, jobs=resolve_jobs(jobs)):
            per_report.append((report, launches, [classify(x, threshold) for x in launches]))
    if as_json:
        rows = [launch_row(x, v) for _, launches, verdicts in per_report for x, v in zip(launches, verdicts, strict=True)]
        click.echo(json.dumps(rows, indent=1))
        return
    from ncuflow.output.render import make_console

    console = make_console()
    for report, launches, verdicts in per_report:
        first = launches[0]
        device = first.device.name or "unknown GPU"
        cc = f" (sm_{first.device.compute_capability.replace('.', '')})" if first.device.compute_capability else ""
        version = f", ncu {first.ncu_version}" if first.ncu_version else ""
        title = f"{report}\n{device}{cc}{version}, {len(launches)} launch{'es' if len(launches) != 1 else ''}"
        print_launch_table(launches, verdicts, console, title=title, evidence=evidence)


@click.command("export")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path), help="The launches parquet file to write.")
@click.option("--metrics-long", is_flag=True, help="Also write every raw metric (long table) to OUTPUT's stem + .metrics.parquet.")
@_threshold_option
@jobs_option
def export_command(paths: tuple[Path, ...], output: Path, metrics_long: bool, threshold: float, jobs: int | None) -> None:
    """Write the launches table of reports to parquet (one row per launch).

    Columns: identity (report, range, action, kernel names, NVTX ranges, device,
    compute capability, SM count, ncu version, store run), every canonical field and
    the raw metric it came from (src_*), the model terms u_* and their sources, the
    verdict, NVIDIA's rule verdict, and the list of missing fields. The schema version
    is in the file's metadata (key ncuflow.schema_version). Nothing is written when a
    report cannot be read.
    """
    from rich.progress import Progress

    from ncuflow.output.export import export_reports

    reports = find_reports(paths)
    with _warnings_to_stderr(), Progress(transient=True, disable=not sys.stderr.isatty(), console=None) as progress:
        task = progress.add_task("reading reports", total=len(reports))

        def advance(index: int, report: Path) -> None:
            progress.update(task, completed=index + 1, description=f"read {report.name}")

        result = export_reports(reports, output, metrics_long=metrics_long, threshold=threshold, progress=advance,
                                jobs=resolve_jobs(jobs))
    click.echo(f"wrote {result.launch_count} launches from {result.report_count} reports to {result.launches_path}")
    if result.metrics_path is not None:
        click.echo(f"wrote {result.metric_rows} raw metric rows to {result.metrics_path}")
