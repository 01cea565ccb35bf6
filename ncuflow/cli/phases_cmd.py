"""``ncuflow phases``: split serving traces into admission ramp, steady decode and drain."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ncuflow.cli.params import FiniteFloatRange
from ncuflow.cli.phases_study import StudyOptions, study_options
from ncuflow.cli.phases_sweep import sweep_cell, sweep_lines, write_sweep
from ncuflow.files.safe_text import safe_text
from ncuflow.phases.parse.format import LogReading
from ncuflow.phases.parse.registry import format_names, format_options, help_rows
from ncuflow.phases.parse.values import MAX_COUNT
from ncuflow.phases.pipeline import build_report
from ncuflow.phases.report import report_to_dict
from ncuflow.phases.selection import RunSelection
from ncuflow.phases.text import render_text

EPILOG = """\b
Inputs (format detected per file):
""" + help_rows() + """

\b
Per-token time comes from each statistics line's batch / generation throughput, cross-checked
against the timestamps. A change of the running batch's plateau (a concurrency sweep) starts a
new segment; requests waiting at a full KV cache (or preempted) make an overload segment; a
log of many runs opens with a session summary.
Examples:
  ncuflow phases server.log --plot timeline.png
  ncuflow phases session.log --runs 3,7-9         # a long session: these runs in detail
  ncuflow phases trace.json --format jsonl         # skip format detection
  ncuflow phases server.log --sweep-for paged_decode -o sweep.toml --vary page=1,16,128
                                                   # a sweep file at the shapes it served
  ncuflow phases ps1_out96.jsonl ps1_out512.jsonl ps128_out96.jsonl ps128_out512.jsonl \\
      --label ps1 --label ps1 --label ps128 --label ps128
"""


SETTING_NAMES = tuple(option.name for _, option in format_options())


def format_setting_options(command: Callable[..., None]) -> Callable[..., None]:
    """One option per server setting a format declares (``FormatOption``), from the registry."""
    for log_format, option in reversed(format_options()):
        command = click.option(
            option.flag,
            option.name,
            type=click.IntRange(option.minimum, option.maximum),
            default=None,
            help=f"{option.help} Default: what the log's server arguments state, else "
            f"{option.default} ({log_format.capabilities.server}'s default).",
        )(command)
    return command


@click.command("phases", epilog=EPILOG)
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--json", "as_json", is_flag=True, help="Print the result as JSON instead of a table."
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a timeline PNG (batch size and per-token time, phases shaded); with "
    "several inputs, one file per input named PATH-<input>.png (with its parent folders where two inputs share a name).",
)
@click.option(
    "--output-tokens",
    "output_tokens",
    type=click.IntRange(2, MAX_COUNT),
    multiple=True,
    help="Output tokens per request (N) when the trace does not say; once for all inputs "
    "or once per input.",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    help="Configuration label per input (once for all, or once per input) for the "
    "amortization test; inputs with the same label and different N are compared.",
)
@click.option(
    "--batch-tolerance",
    type=FiniteFloatRange(0.0, 0.5),
    default=0.05,
    show_default=True,
    help="Relative batch-size change still counted as 'stable'.",
)
@click.option(
    "--skip-malformed",
    is_flag=True,
    help="Leave out unreadable scheduler lines (counted in the notes) instead of stopping.",
)
@click.option(
    "--runs",
    "runs_text",
    default=None,
    metavar="all|none|LIST",
    help="Runs shown in detail: all, none (the session summary alone) or run numbers such as "
    "3,7-9. Default: every run, or for a log of more than 50 runs its summary and the runs "
    "that stand out.",
)
@click.option(
    "--format",
    "format_name",
    type=click.Choice(format_names()),
    default=None,
    help="Read every input as this format instead of detecting it.",
)
@study_options
@format_setting_options
def phases_command(
    inputs: tuple[Path, ...],
    as_json: bool,
    plot_path: Path | None,
    output_tokens: tuple[int, ...],
    labels: tuple[str, ...],
    batch_tolerance: float,
    skip_malformed: bool,
    runs_text: str | None,
    format_name: str | None,
    **given: Any,
) -> None:
    """Split serving traces into segments (one per plateau of the running batch) with their admission
    ramp, warm-up, steady, mixed and drain phases, and reconcile the reported TPOT with
    Σ share × per-token time + (ramp wait + warm-up) / (N − 1)."""
    try:
        selection = RunSelection.parse(runs_text)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--runs") from None
    study = StudyOptions.parse({k: v for k, v in given.items() if k not in SETTING_NAMES})
    reading = LogReading(
        skip_malformed=skip_malformed,
        format_name=format_name,
        given={name: given[name] for name in SETTING_NAMES if given.get(name) is not None},
    )
    cell = sweep_cell(study, inputs)
    report = build_report(
        inputs,
        labels=labels,
        output_tokens=output_tokens,
        reading=reading,
        batch_tolerance=batch_tolerance,
        study=study.inputs(),
    )
    written: list[Path] = []
    if plot_path is not None:
        from ncuflow.phases.plot import plot_report

        written = plot_report(report, plot_path)
    sweep = write_sweep(report, study, cell, inputs) if cell is not None else None
    if as_json:
        data = report_to_dict(report, selection)
        data["plots"] = [str(p) for p in written]
        if sweep is not None:
            data["sweep"] = {"path": str(sweep[0]), "points": sweep[2], "source": sweep[1].source,
                             "taken": list(sweep[1].taken), "not_taken": list(sweep[1].not_taken)}
        click.echo(json.dumps(data, indent=2, default=str))
        return
    # a log's run labels and values reach the terminal escaped, value by value (render_text)
    click.echo(render_text(report, selection), nl=False)
    for file, path in zip(report.files, written, strict=False):  # several inputs: which plot is whose
        click.echo(f"timeline of {safe_text(file.path)} written to {safe_text(path, limit=None)}" if len(written) > 1
                   else f"timeline written to {safe_text(path, limit=None)}")
    for line in sweep_lines(*sweep) if sweep is not None else ():
        click.echo(safe_text(line, limit=None))

