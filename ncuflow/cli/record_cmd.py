"""``ncuflow phases-record``: per-request streaming timestamps from an OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path

import click

from ncuflow.cli.params import FiniteFloatRange
from ncuflow.cli.progress import progress_bar
from ncuflow.files import guard_output, os_errors_as_messages, output_target, text_recogniser
from ncuflow.phases.recorder import (
    MAX_CONCURRENCY,
    MAX_REQUESTS,
    MAX_TOKEN_BUDGET,
    TRACE_START,
    RecorderSettings,
    Recording,
    TraceWriter,
)
from ncuflow.phases.recorder_endpoint import parse_endpoint


@click.command("phases-record")
@click.argument("base_url")
@click.option("--model", required=True, help="Model name the server expects.")
@click.option(
    "--out",
    "out_path",
    type=click.Path(path_type=Path),
    required=True,
    help="JSONL file to write (one line per request, written as each request ends).",
)
@click.option("--requests", "n_requests", type=click.IntRange(1, MAX_REQUESTS), default=32, show_default=True)
@click.option("--concurrency", type=click.IntRange(1, MAX_CONCURRENCY), default=32, show_default=True,
              help="Requests in flight (a closed loop: each ended request is replaced by the next).")
@click.option("--max-tokens", type=click.IntRange(2, MAX_TOKEN_BUDGET), default=96, show_default=True)
@click.option(
    "--prompt", default="Write a long story about a lighthouse keeper.", show_default=True
)
@click.option("--chat", is_flag=True, help="Use /v1/chat/completions instead of /v1/completions.")
@click.option(
    "--ignore-eos", is_flag=True, help="Ask SGLang/vLLM to ignore EOS (fixed output length)."
)
@click.option("--run", "run_label", default=None, help="Value of the 'run' field of every record.")
@click.option("--timeout", "timeout_s", type=FiniteFloatRange(min=0, min_open=True), default=600.0,
              show_default=True,
              help="Seconds one request may take in all, from connecting to its last byte; a request "
              "still going then is cut off and recorded as failed.")
@click.option("--api-key", envvar="OPENAI_API_KEY", default=None, show_envvar=True,
              help="Bearer token for a server started with an API key (vLLM/SGLang --api-key); "
              "never written to the trace or shown.")
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
    api_key: str | None,
) -> None:
    """Record per-request streaming timestamps from an OpenAI-compatible server at BASE_URL
    (closed loop: CONCURRENCY requests in flight) for `ncuflow phases`. Each request's record
    is written as it ends: Ctrl-C or a crash keeps every request that ended."""
    settings = RecorderSettings(
        endpoint=parse_endpoint(base_url, chat=chat),
        model=model,
        prompts=(prompt,),
        requests=n_requests,
        concurrency=concurrency,
        max_tokens=max_tokens,
        chat=chat,
        ignore_eos=ignore_eos,
        run=run_label,
        timeout_s=timeout_s,
        api_key=api_key or None,
    )
    kind = "a request trace (JSONL)"
    guard_output(out_path, kind=kind, recognise=text_recogniser(TRACE_START), option="--out")
    target = output_target(out_path, kind=kind, option="--out")
    with Recording(settings) as recording, _opened(target) as writer, progress_bar() as bar:
        step = bar.stage(f"recording {settings.endpoint.url}", n_requests)
        try:
            for record in recording:
                with os_errors_as_messages(target):
                    writer.write(record)
                step(writer.written - 1, out_path)
        except KeyboardInterrupt:
            recording.close()
            click.echo(f"interrupted: {_summary(writer, out_path)}; the requests in flight were left out",
                       err=True)
            raise click.exceptions.Exit(130) from None
    _report(writer, out_path)


def _opened(target: Path) -> TraceWriter:
    with os_errors_as_messages(target):
        return TraceWriter(target)


def _summary(writer: TraceWriter, out_path: Path) -> str:
    return f"{writer.written - writer.failed} requests recorded, {writer.failed} failed -> {out_path}"


def _report(writer: TraceWriter, out_path: Path) -> None:
    click.echo(_summary(writer, out_path))
    if writer.failed:
        click.echo(f"first failure: {writer.first_failure}", err=True)
        click.echo(
            f"ncuflow: {writer.failed} of {writer.written} requests failed; the trace holds them as records "
            "with an 'error' field. Check the server and --model, then record again.",
            err=True,
        )
        raise click.exceptions.Exit(1)
    click.echo(f"analyse with: ncuflow phases {out_path}")
