"""``ncuflow phases-record``: per-request streaming timestamps from an OpenAI-compatible server."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ncuflow.cli.params import FiniteFloatRange
from ncuflow.cli.progress import progress_bar
from ncuflow.errors import UsageError
from ncuflow.files import guard_output, os_errors_as_messages, output_target, read_small_file
from ncuflow.phases.recorder import (
    MAX_CONCURRENCY,
    MAX_RECORD_BYTES,
    MAX_REQUESTS,
    MAX_TIMEOUT_S,
    MAX_TOKEN_BUDGET,
    MIN_RECORD_BYTES,
    RecorderSettings,
    Recording,
)
from ncuflow.phases.recorder_endpoint import parse_endpoint
from ncuflow.phases.recorder_trace import TraceWriter, is_own_trace, trace_header

KEY_VARIABLE = "OPENAI_API_KEY"
MAX_KEY_FILE_BYTES = 64 << 10


@click.command("phases-record")
@click.argument("base_url")
@click.option("--model", required=True, help="Model name the server expects.")
@click.option(
    "--out",
    "out_path",
    type=click.Path(path_type=Path),
    required=True,
    help="JSONL file to write (a header line, then one line per request, written as each request ends); "
    "an earlier trace of the recorder is replaced once a request is recorded, any other file is refused.",
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
@click.option("--timeout", "timeout_s", type=FiniteFloatRange(min=0, max=MAX_TIMEOUT_S, min_open=True), default=600.0,
              show_default=True,
              help="Seconds one request may take in all, from connecting to its last byte; a request "
              "still going then is cut off and recorded as failed.")
@click.option("--api-key-file", type=click.Path(path_type=Path), default=None,
              help=f"File holding the bearer token of a server started with an API key (vLLM/SGLang --api-key); "
              f"else ${KEY_VARIABLE} is used. Never written to the trace or shown.")
@click.option("--api-key", default=None,
              help="Deprecated: a key on the command line shows in `ps` and shell history; use --api-key-file "
              f"or ${KEY_VARIABLE}.")
@click.option("--max-record-bytes", type=click.IntRange(MIN_RECORD_BYTES, MAX_RECORD_BYTES), default=MAX_RECORD_BYTES,
              show_default=True, help="Longest line one request's record may take (what `ncuflow phases` reads); a "
              "stream whose chunk times would not fit is cut off and recorded as failed.")
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
    api_key_file: Path | None,
    api_key: str | None,
    max_record_bytes: int,
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
        api_key=_api_key(api_key, api_key_file),
        max_record_bytes=max_record_bytes,
    )
    kind = "a request trace (JSONL) written by phases-record"
    guard_output(out_path, kind=kind, recognise=is_own_trace, option="--out")
    target = output_target(out_path, kind=kind, option="--out")
    with Recording(settings) as recording, _opened(target, settings) as writer, progress_bar() as bar:
        step = bar.stage(f"recording {settings.redactor.text(settings.endpoint.url)}", n_requests)
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


def _api_key(given: str | None, key_file: Path | None) -> str | None:
    """The key: from --api-key-file, else the deprecated --api-key (with a warning), else the environment."""
    if given is not None and key_file is not None:
        raise UsageError("Both --api-key and --api-key-file were given.", "", "Give --api-key-file alone.")
    if key_file is not None:
        def refused(problem: str) -> UsageError:
            return UsageError(f"Cannot read the API key from {key_file}: {problem}.", "",
                              "Put the key alone in a file of yours (chmod 600), or set $" + KEY_VARIABLE + ".")
        text = read_small_file(key_file, MAX_KEY_FILE_BYTES, what="key", error=refused).strip()
        if not text:
            raise refused("it is empty")
        return text
    if given is not None:
        click.echo(f"ncuflow: warning: --api-key shows the key to every user of this machine (ps, /proc/PID/cmdline) "
                   f"and in shell history; give it with --api-key-file or ${KEY_VARIABLE} instead.", err=True)
        return given or None
    return os.environ.get(KEY_VARIABLE) or None


def _opened(target: Path, settings: RecorderSettings) -> TraceWriter:
    with os_errors_as_messages(target):
        header = trace_header(settings.redactor.text(settings.endpoint.url), settings.redactor.text(settings.model))
        return TraceWriter(target, header, settings.max_record_bytes)


def _summary(writer: TraceWriter, out_path: Path) -> str:
    return f"{writer.written - writer.failed} requests recorded, {writer.failed} failed -> {out_path}"


def _report(writer: TraceWriter, out_path: Path) -> None:
    click.echo(_summary(writer, out_path))
    if writer.kept_earlier:
        click.echo(f"ncuflow: no request was recorded, so {out_path} keeps its earlier trace as it was (the failed "
                   "requests' records were not written over it).", err=True)
    if writer.failed:
        click.echo(f"first failure: {writer.first_failure}", err=True)
        click.echo(
            f"ncuflow: {writer.failed} of {writer.written} requests failed; the trace holds them as records "
            "with an 'error' field. Check the server and --model, then record again.",
            err=True,
        )
        raise click.exceptions.Exit(1)
    click.echo(f"analyse with: ncuflow phases {out_path}")
