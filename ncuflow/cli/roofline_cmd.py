"""`ncuflow roofline PATH... -o F.png`: the hierarchical roofline of reports, one panel per GPU."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ncuflow.cli.options import echo_notes, jobs_option, threshold_option
from ncuflow.cli.selection import selection_from, selection_options
from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text


@click.command("roofline")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The PNG file to write.")
@click.option("--per", type=click.Choice(["kernel", "launch"]), default="kernel", show_default=True,
              help="One point per kernel and setting (its launches pooled), or one per launch.")
@click.option("--json", "as_json", is_flag=True, help="Also print the points and ceilings as one JSON object.")
@threshold_option(help="On-wall threshold of the max model (the verdict that colours each point).")
@selection_options
@jobs_option
def roofline_command(paths: tuple[Path, ...], output: Path, per: str, as_json: bool, threshold: float,
                     kernel: str | None, nvtx: str | None, jobs: int | None) -> None:
    """Achieved FLOP/s against arithmetic intensity to DRAM, L2 and L1, with the chip's ceilings.

    FLOPs come from the FP32/FP64/FP16 instruction counters (and tensor-pipe instructions)
    that full-set and roofline-section reports store; the ceilings from the reports' own
    peak metrics at the launches' clocks. Each point is coloured by the max model's
    verdict; kernels without FLOP counts, or with none, are named under the chart.
    """
    from ncuflow.analyze.roofline import describe_point, pages, point_groups, rooflines
    from ncuflow.files import guard_output, png_recogniser
    from ncuflow.read.jobs import resolve_jobs

    guard_output(output, kind="an ncuflow plot", recognise=png_recogniser, inputs=paths, option="-o/--output")
    loaded = selection_from(kernel, nvtx).load(paths, jobs=resolve_jobs(jobs))
    echo_notes(loaded.notes, loaded.damaged)  # each damaged or unreadable run skipped, named once
    lines = rooflines(point_groups(loaded.runs, per), threshold)
    from ncuflow.output.roofline_plot import plot_rooflines

    shown = pages(lines)
    files = [output, *(page_path(output, number) for number in range(2, len(shown) + 1))]
    for extra in files[1:]:  # every page's file checked before any is written
        guard_output(extra, kind="an ncuflow plot", recognise=png_recogniser, inputs=paths, option="-o/--output")
    for page, path in zip(shown or ((),), files, strict=True):
        plot_rooflines(page, path)
    if len(files) > 1:
        click.echo(f"ncuflow: note: {len(lines)} GPUs, at most 6 panels a page: {output} shows the "
                   f"{len(shown[0])} with the most to draw, " + ", ".join(
                       f"{path} {', '.join(safe_text(r.device) for r in page)}"
                       for page, path in zip(shown[1:], files[1:], strict=True)) + ".", err=True)
    if as_json:
        from ncuflow.output.roofline_doc import rooflines_document

        click.echo(json.dumps(rooflines_document(lines), indent=1))
    else:
        for line in lines:
            click.echo(f"{safe_text(line.device)}: {len(line.points)} points, {len(line.left_out)} not drawn")
            for number, point in enumerate(line.points, start=1):
                click.echo(f"  {number:>2}. {safe_text(point.label)} [{safe_text(point.group)}] {point.bound}: "
                           f"{safe_text(describe_point(point, line), limit=SENTENCE_CHARS)}")
    click.echo(f"wrote {', '.join(str(path) for path in files)}")


def page_path(output: Path, number: int) -> Path:
    """The file of page ``number`` (from 2) of a roofline written to ``output``: roofline-2.png ..."""
    return output.with_name(f"{output.stem}-{number}{output.suffix}")
