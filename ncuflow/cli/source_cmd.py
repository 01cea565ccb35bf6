"""`ncuflow source`: per launch, the hot instructions and source lines from the report's source counters."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ncuflow.cli.options import reader_option
from ncuflow.cli.selection import selection_from, selection_options
from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text

if TYPE_CHECKING:
    from ncuflow.analyze.hotspots import ReportHotspots

MAX_TOP = 10_000


def _warn(line: str) -> None:
    click.echo(f"ncuflow: warning: {safe_text(line, limit=SENTENCE_CHARS)}", err=True)


@click.command("source")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--top", "-n", "top", type=click.IntRange(1, MAX_TOP), default=10, show_default=True,
              help="How many instructions (and source lines) to show per launch and ranking.")
@click.option("--json", "as_json", is_flag=True, help="Print the launches as a JSON array of objects.")
@click.option("--parquet", "-o", "parquet", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the instructions shown to this parquet file (one row per launch and instruction).")
@selection_options
@reader_option
def source_command(paths: tuple[Path, ...], top: int, as_json: bool, parquet: Path | None,
                   kernel: str | None, nvtx: str | None) -> None:
    """Hot spots of each launch from its source counters: the top SASS instructions by warp-stall
    samples (with the stall reasons) and by excess global sectors, and the top source lines.

    PATHS are report files or folders searched recursively. The counters are NVIDIA's
    per-instruction metrics, which ncu stores where the report was collected with its
    SourceCounters section; the SASS text and the file:line of each instruction come from
    the cubin in the report, through NVIDIA's ncu_report module. A report without source
    counters gets one line saying how to collect them.
    """
    from ncuflow.analyze.hotspots import read_hotspots
    from ncuflow.read.reportfile import find_reports

    selection = selection_from(kernel, nvtx)
    reports = find_reports(paths)
    found = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for report in reports:
            found.append(read_hotspots(report, lambda x: selection.keeps_named(x.kernel, x.nvtx), top))
    for warning in caught:
        _warn(str(warning.message))
    for note in (note for report in found for note in report.notes):
        _warn(note)
    if not any(report.selected for report in found):
        _nothing_selected(selection.describe)
    _show(found, as_json)
    if parquet is not None:
        from ncuflow.output.source_export import write_source_table

        rows = write_source_table(found, parquet, reports)
        click.echo(f"wrote {rows} instruction row{'' if rows == 1 else 's'} to {parquet}", err=as_json)


def _show(found: list[ReportHotspots], as_json: bool) -> None:
    from ncuflow.output.source_view import launch_record, print_report, without_line

    if as_json:
        for report in found:
            if not report.launches and report.selected:
                click.echo(f"ncuflow: note: {safe_text(without_line(report), limit=SENTENCE_CHARS)}", err=True)
        click.echo(json.dumps([launch_record(x) for report in found for x in report.launches], indent=1))
        return
    from ncuflow.files import make_console

    console = make_console()
    for report in found:
        if report.selected:
            print_report(report, console)


def _nothing_selected(describe: str) -> None:
    from ncuflow.errors import UsageError

    if not describe:
        return
    raise UsageError(f"No launch matches {describe}.",
                     "The reports hold launches, but none has that kernel name or ran inside that NVTX range.",
                     "Check the names with `ncuflow summary PATH`, or leave the filter out.")
