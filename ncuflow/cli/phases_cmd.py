"""``ncuflow phases``: split serving traces into admission ramp, steady decode and drain."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ncuflow.cli.params import FiniteFloatRange
from ncuflow.phases.parse.registry import format_names
from ncuflow.phases.pipeline import build_report
from ncuflow.phases.report import report_to_dict
from ncuflow.phases.selection import RunSelection
from ncuflow.phases.text import render_text

EPILOG = """\b
Inputs (format detected per file):
  SGLang server log     'Prefill batch' / 'Decode batch' lines (any version, DP ranks split)
  vLLM server log       'Running: N reqs, Waiting: M reqs' statistics lines
  JSONL                 one request per line: {"submit_time": s, "chunk_times": [s, ...],
                        "chunk_tokens": [n, ...]?, "output_tokens": n?, "run": "..."?}
  bench_serving JSON    --output-details results (ttfts, itls; no start times)

\b
SGLang prints a Decode line every --decode-log-interval steps; per-token time comes from
#running-req / gen throughput on each line, cross-checked against the timestamps. A change
of the #running-req plateau (a concurrency sweep) starts a new segment; requests waiting at
a full KV cache (or preempted) make an overload segment; a log of many runs opens with a
session summary.
Examples:
  ncuflow phases server.log --plot timeline.png
  ncuflow phases session.log --runs 3,7-9         # a long session: these runs in detail
  ncuflow phases trace.json --format jsonl         # skip format detection
  ncuflow phases ps1_out96.jsonl ps1_out512.jsonl ps128_out96.jsonl ps128_out512.jsonl \\
      --label ps1 --label ps1 --label ps128 --label ps128
"""


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
    "several inputs, one file per input named PATH-<input>.png.",
)
@click.option(
    "--decode-log-interval",
    type=click.IntRange(min=1),
    default=40,
    show_default=True,
    help="SGLang decode steps between two Decode lines (server arg decode_log_interval).",
)
@click.option(
    "--output-tokens",
    "output_tokens",
    type=click.IntRange(min=2),
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
def phases_command(
    inputs: tuple[Path, ...],
    as_json: bool,
    plot_path: Path | None,
    decode_log_interval: int,
    output_tokens: tuple[int, ...],
    labels: tuple[str, ...],
    batch_tolerance: float,
    skip_malformed: bool,
    runs_text: str | None,
    format_name: str | None,
) -> None:
    """Split serving traces into segments (one per #running-req plateau) with their admission
    ramp, warm-up, steady, mixed and drain phases, and reconcile the reported TPOT with
    Σ share × per-token time + (ramp wait + warm-up) / (N − 1)."""
    try:
        selection = RunSelection.parse(runs_text)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--runs") from None
    report = build_report(
        inputs,
        labels=labels,
        output_tokens=output_tokens,
        decode_log_interval=decode_log_interval,
        batch_tolerance=batch_tolerance,
        skip_malformed=skip_malformed,
        format_name=format_name,
    )
    written: list[Path] = []
    if plot_path is not None:
        from ncuflow.phases.plot import plot_report

        written = plot_report(report, plot_path)
    if as_json:
        data = report_to_dict(report, selection)
        data["plots"] = [str(p) for p in written]
        click.echo(json.dumps(data, indent=2, default=str))
        return
    from ncuflow.files.safe_text import safe_text

    # a log's run labels and values reach the terminal escaped (each line, its breaks kept)
    text = render_text(report, selection)
    click.echo("".join(safe_text(line, limit=None) + "\n" for line in text.splitlines()), nl=False)
    for path in written:
        click.echo(f"timeline written to {path}")


@click.command("phases-record")
@click.argument("base_url")
@click.option("--model", required=True, help="Model name the server expects.")
@click.option(
    "--out",
    "out_path",
    type=click.Path(path_type=Path),
    required=True,
    help="JSONL file to write (one line per request).",
)
@click.option("--requests", "n_requests", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--max-tokens", type=click.IntRange(min=2), default=96, show_default=True)
@click.option(
    "--prompt", default="Write a long story about a lighthouse keeper.", show_default=True
)
@click.option("--chat", is_flag=True, help="Use /v1/chat/completions instead of /v1/completions.")
@click.option(
    "--ignore-eos", is_flag=True, help="Ask SGLang/vLLM to ignore EOS (fixed output length)."
)
@click.option("--run", "run_label", default=None, help="Value of the 'run' field of every record.")
@click.option("--timeout", "timeout_s", type=FiniteFloatRange(min=0, min_open=True), default=600.0, show_default=True)
def record_command(
    base_url: str,
    model: str,
    out_path: Path,
    n_requests: int,
    concurrency: int,
    max_tokens: int,
    prompt: str,
    chat: bool,
    ignore_eos: bool,
    run_label: str | None,
    timeout_s: float,
) -> None:
    """Record per-request streaming timestamps from an OpenAI-compatible server at BASE_URL
    (closed loop: CONCURRENCY requests in flight) for `ncuflow phases`."""
    from ncuflow.phases import TraceError
    from ncuflow.phases.recorder import RecorderSettings, record_requests, to_jsonl

    settings = RecorderSettings(
        base_url=base_url,
        model=model,
        prompts=tuple(prompt for _ in range(n_requests)),
        concurrency=concurrency,
        max_tokens=max_tokens,
        chat=chat,
        ignore_eos=ignore_eos,
        run=run_label,
        timeout_s=timeout_s,
    )
    from ncuflow.files import OutputError, atomic_write_text, guard_output, text_recogniser

    try:  # checked before any request is sent
        guard_output(out_path, kind="a request trace (JSONL)", recognise=text_recogniser('{"'),
                     option="--out")
    except OutputError as error:
        raise TraceError(error.what, error.why, error.fix) from None
    records = record_requests(settings)
    try:
        atomic_write_text(out_path, to_jsonl(records))
    except OutputError as error:
        raise TraceError(error.what, error.why, error.fix) from None
    failed = [r for r in records if "error" in r]
    click.echo(
        f"{len(records) - len(failed)} requests recorded, {len(failed)} failed -> {out_path}"
    )
    if failed:
        from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text

        click.echo(f"first failure: {safe_text(failed[0]['error'], limit=SENTENCE_CHARS)}", err=True)
        click.echo(
            f"ncuflow: {len(failed)} of {len(records)} requests failed; the trace holds them "
            "as records with an 'error' field. Check the server and --model, then record again.",
            err=True,
        )
        raise click.exceptions.Exit(1)
    click.echo(f"analyse with: ncuflow phases {out_path}")
