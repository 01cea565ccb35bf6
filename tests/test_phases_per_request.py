"""Per-request server logs: TGI's router (text and JSON) and llama.cpp's server (print_timing
blocks, with and without --log-timestamps), each one module and one registry row.

The logs are written here in the engines' line formats: TGI's router span fields as its
``generate``/``generate_stream`` INFO "Success" lines print them (Rust ``Duration``s), and
llama.cpp's ``slot print_timing`` block as ``llama-server`` prints it, both the newer shape
(every line behind the slot prefix, ``M.SS.mmm.uuu I`` timestamps) and the older one (a
header line, then the timing lines bare). Every expectation is derived from the values put
into the log, never a copied result."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ncuflow.phases.parse import llamacpp, registry, tgi
from ncuflow.phases.parse.format import LineFormat, LogReading
from ncuflow.phases.pipeline import build_report
from ncuflow.phases.report import FileReport
from ncuflow.phases.text import render_text

SLOTS = 4  # requests served at once (TGI's client concurrency; llama-server's --parallel)
WAVES = 6  # requests per slot, back to back
PER_TOKEN_S = 0.0235
TOKENS = 100
PROMPT_S = 0.4
QUEUE_S = 0.0123
BASE = datetime(2024, 7, 8, 10, 20, 0, tzinfo=UTC)


def _closed_loop() -> list[tuple[float, float]]:
    """(start, end) of each request, in the order they end: SLOTS requests at once, each
    slot starting its next request as the last ends, the slots staggered a little."""
    length = PROMPT_S + PER_TOKEN_S * TOKENS
    spans = [(0.05 * slot + k * length, 0.05 * slot + (k + 1) * length) for slot in range(SLOTS) for k in range(WAVES)]
    return sorted(spans, key=lambda span: span[1])


def _tgi_fields(total: float) -> dict[str, str]:
    inference = PER_TOKEN_S * TOKENS
    return {
        "total_time": f"{total:.9f}s", "validation_time": "120.5µs", "queue_time": f"{QUEUE_S * 1e3:.6f}ms",
        "inference_time": f"{inference:.9f}s", "time_per_token": f"{PER_TOKEN_S * 1e3:.6f}ms", "seed": "None",
    }


def tgi_text() -> list[str]:
    lines = ["2024-07-08T10:19:59.000000Z  INFO text_generation_router::server: router/src/server.rs:2266: Connected"]
    for start, end in _closed_loop():
        stamp = (BASE + timedelta(seconds=end)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        fields = " ".join(f'{k}="{v}"' for k, v in _tgi_fields(end - start).items())
        lines.append(
            f"{stamp}  INFO generate_stream{{parameters=GenerateParameters {{ best_of: None, max_new_tokens: "
            f"Some({TOKENS}), seed: None }} {fields}}}: text_generation_router::server: router/src/server.rs:591: Success"
        )
    return lines


def tgi_json() -> list[str]:
    lines = []
    for start, end in _closed_loop():
        stamp = (BASE + timedelta(seconds=end)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        span = {**_tgi_fields(end - start), "name": "generate_stream"}
        lines.append(json.dumps({
            "timestamp": stamp, "level": "INFO", "message": "Success", "target": "text_generation_router::server",
            "filename": "router/src/server.rs", "line_number": 591, "span": span, "spans": [span],
        }))
    return lines


def _llama_stamp(seconds: float) -> str:
    micros = round(seconds * 1e6)
    return f"{micros // 60_000_000}.{micros // 1_000_000 % 60:02d}.{micros // 1000 % 1000:03d}.{micros % 1000:03d}"


def _timing_lines(eval_tokens: int) -> tuple[str, str, str]:
    eval_ms = PER_TOKEN_S * 1e3 * (eval_tokens - 1)  # the gaps after the first token
    return (
        f"prompt eval time = {PROMPT_S * 1e3:10.2f} ms / {283:5d} tokens ({PROMPT_S * 1e3 / 283:8.2f} ms per token, "
        f"{283 / PROMPT_S:8.2f} tokens per second)",
        f"       eval time = {eval_ms:10.2f} ms / {eval_tokens:5d} tokens ({eval_ms / eval_tokens:8.2f} ms per token, "
        f"{eval_tokens / eval_ms * 1e3:8.2f} tokens per second)",
        f"      total time = {PROMPT_S * 1e3 + eval_ms:10.2f} ms / {283 + eval_tokens:5d} tokens",
    )


def llama_log(*, stamps: bool, prefixed: bool) -> list[str]:
    """llama-server's log: a print_timing block as each request ends."""
    length = PROMPT_S + PER_TOKEN_S * (TOKENS - 1)
    ends = sorted((0.05 * slot + (k + 1) * length, slot, slot * WAVES + k) for slot in range(SLOTS) for k in range(WAVES))
    lines = ["main: server is listening on http://127.0.0.1:8080 - starting the main loop"]
    for end, slot, task in ends:
        stamp = f"{_llama_stamp(end)} I " if stamps else ""
        prefix = f"slot print_timing: id {slot:2d} | task {task} | "
        body = _timing_lines(TOKENS)
        lines += [stamp + prefix + text for text in body] if prefixed else [stamp + prefix, *body]
        lines.append(f"{stamp}slot      release: id {slot:2d} | task {task} | stop processing: n_tokens = 383, truncated = 0")
    return lines


def report_of(tmp_path: Path, name: str, lines: list[str]) -> FileReport:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (file,) = build_report([path]).files
    return file


def _no_other_rows_words(text: str, own: LineFormat) -> None:
    """No other registered format's title or words reach the report."""
    for other in (*registry.LINE_FORMATS, *registry.JSON_FORMATS):
        if other is own:
            continue
        assert other.title not in text, other.title
        if isinstance(other, LineFormat):
            words = (other.capabilities.server, other.capabilities.batch_field, other.capabilities.batch_cap_option)
            for word in words:
                assert word not in text, (word, text)


@pytest.mark.parametrize("name, lines", [("tgi.log", tgi_text()), ("tgi.json", tgi_json())])
def test_tgi_router_lines_give_concurrency_per_token_time_and_queue(tmp_path: Path, name: str, lines: list[str]) -> None:
    """Text or --json-output: concurrency from the requests' overlap (a line's time less its
    total_time is the start), the per-token time TGI's own time_per_token, the queue time
    it logged, and TTFT not told (TGI logs no first-token time)."""
    file = report_of(tmp_path, name, lines)
    (run,) = file.runs
    assert file.source_format == tgi.CAPABILITIES.title
    assert run.shape.peak_batch == SLOTS
    assert run.timing.headline_token_s is not None and abs(run.timing.headline_token_s - PER_TOKEN_S) < 1e-6
    assert run.timing.mean_request_tpot_s is not None and abs(run.timing.mean_request_tpot_s - PER_TOKEN_S) < 1e-6
    assert run.timing.ttft_s is None
    assert tgi.TTFT_UNTOLD in file.file_notes
    assert any(f"median {QUEUE_S * 1e3:.3g} ms" in note for note in file.file_notes), file.file_notes
    text = render_text(build_report([tmp_path / name]))
    assert tgi.CAPABILITIES.title in text and "TTFT: TGI's router logs no first-token time" in text
    _no_other_rows_words(text, tgi.FORMAT)


def test_tgi_text_and_json_read_alike(tmp_path: Path) -> None:
    text_run = report_of(tmp_path, "a.log", tgi_text()).runs[0]
    json_run = report_of(tmp_path, "b.json", tgi_json()).runs[0]
    assert (text_run.shape.peak_batch, text_run.admission.requests_total) == (json_run.shape.peak_batch, json_run.admission.requests_total)
    assert text_run.timing.headline_token_s == pytest.approx(json_run.timing.headline_token_s, rel=1e-9)


def test_tgi_durations_in_every_unit_rust_prints() -> None:
    assert tgi.duration_s("2.345s") == pytest.approx(2.345)
    assert tgi.duration_s("23.45ms") == pytest.approx(0.02345)
    assert tgi.duration_s("45.6µs") == pytest.approx(45.6e-6)
    assert tgi.duration_s("950ns") == pytest.approx(950e-9)
    assert tgi.duration_s("1e308s") is None and tgi.duration_s("NaNs") is None


@pytest.mark.parametrize("broken", [
    lambda line: line.replace('time_per_token="', 'time_per_token="x'),  # no number
    lambda line: line.replace("2024-07-08T", "2024-13-08T"),  # a month that is not
    lambda line: line.replace(f'time_per_token="{PER_TOKEN_S * 1e3:.6f}ms"', 'time_per_token="1ns"'),  # 10^9 tokens
])
def test_a_tgi_line_without_timing_is_one_paragraph_or_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], broken: Callable[[str], str]
) -> None:
    from ncuflow.cli import main

    lines = tgi_text()
    lines[3] = broken(lines[3])
    path = tmp_path / "tgi.log"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SystemExit) as ended:
        main(["phases", str(path)])
    output = capsys.readouterr().err
    assert ended.value.code == 2 and "Traceback" not in output and "tgi.log:4" in output, output
    (file,) = build_report([path], reading=LogReading(skip_malformed=True)).files
    assert file.runs[0].admission.requests_total == SLOTS * WAVES - 1
    assert any("left out" in note for note in file.file_notes)


@pytest.mark.parametrize("prefixed", [True, False])
def test_llama_cpp_blocks_with_timestamps(tmp_path: Path, prefixed: bool) -> None:
    """--log-timestamps: each block's time is its request's end; less prompt and eval time,
    its start: the slots busy at once from the overlap, TTFT the prompt eval time, and the
    per-token time the eval time over the N − 1 gaps after the first token."""
    file = report_of(tmp_path, "llama.log", llama_log(stamps=True, prefixed=prefixed))
    (run,) = file.runs
    assert file.source_format == llamacpp.CAPABILITIES.title
    assert run.shape.peak_batch == SLOTS
    assert run.timing.ttft_s is not None and run.timing.ttft_s.median == pytest.approx(PROMPT_S, abs=1e-5)
    assert run.timing.headline_token_s is not None and run.timing.headline_token_s == pytest.approx(PER_TOKEN_S, abs=1e-6)
    assert llamacpp.TTFT_SERVER in file.file_notes and llamacpp.NO_CLOCK not in file.file_notes
    text = render_text(build_report([tmp_path / "llama.log"]))
    _no_other_rows_words(text, llamacpp.FORMAT)


def test_llama_cpp_without_timestamps_tells_what_it_can(tmp_path: Path) -> None:
    """No --log-timestamps: TTFT and per-token time per request; no concurrency, no phases,
    and the report says why and what to pass."""
    file = report_of(tmp_path, "llama.log", llama_log(stamps=False, prefixed=True))
    (run,) = file.runs
    assert run.shape.peak_batch is None
    assert run.timing.ttft_s is not None and run.timing.ttft_s.median == pytest.approx(PROMPT_S, abs=1e-5)
    assert run.timing.headline_token_s is not None and run.timing.headline_token_s == pytest.approx(PER_TOKEN_S, abs=1e-6)
    assert llamacpp.NO_CLOCK in file.file_notes
    text = render_text(build_report([tmp_path / "llama.log"]))
    assert "--log-timestamps" in text
    _no_other_rows_words(text, llamacpp.FORMAT)


def test_per_request_formats_are_registry_rows_and_no_longer_refused() -> None:
    from ncuflow.phases.parse.unsupported import KNOWN_ENGINES

    assert tgi.FORMAT in registry.LINE_FORMATS and llamacpp.FORMAT in registry.LINE_FORMATS
    assert not any(engine.name.startswith(("TGI", "llama.cpp")) for engine in KNOWN_ENGINES)


def test_a_log_of_more_requests_than_kept_says_how_many_were_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory is bounded: beyond MAX_REQUESTS a reader counts the requests it leaves out,
    and a note says so (the cap lowered here so that the test stays small)."""
    from ncuflow.phases.parse import request_chunks

    for module in (tgi, llamacpp, request_chunks):
        monkeypatch.setattr(module, "MAX_REQUESTS", 10)
    tgi_file = report_of(tmp_path, "tgi.log", tgi_text())
    llama_file = report_of(tmp_path, "llama.log", llama_log(stamps=True, prefixed=True))
    for file in (tgi_file, llama_file):
        assert file.runs[0].admission.requests_total == 10
    note = request_chunks.beyond_note(SLOTS * WAVES - 10)
    assert note in tgi_file.file_notes and note in llama_file.file_notes
