"""Line formats of public server logs ``phases`` had never read, one test per variant.

Each log is written here in the exact line format a public log shows (the source is named at
each writer: repository and issue), with values of our own; every expectation is derived
from the values put into the log. docs/phases.md ("Line formats checked against public
logs") lists the variants and their sources."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ncuflow.phases.parse import llamacpp
from ncuflow.phases.pipeline import build_report
from ncuflow.phases.report import FileReport

STEP_S = 0.025  # a decode step
BATCH = 8


def analyse(tmp_path: Path, lines: list[str], name: str = "server.log") -> FileReport:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (file,) = build_report([path]).files
    return file


# ---------------------------------------------------------------- SGLang 0.3: no date


def sglang_time_of_day_log(start: datetime) -> list[str]:
    """SGLang 0.3 (Aug-Nov 2024) stamps its scheduler lines with the time of day only:
    ``[16:43:29 TP0] Prefill batch. #new-seq: 1, #new-token: 2062, #cached-token: 0, cache hit
    rate: 0.00%, token usage: 0.00, #running-req: 0, #queue-req: 0`` and ``[04:40:55 TP0]
    Decode batch. #running-req: 2, #token: 4078, token usage: 0.00, gen throughput (token/s):
    447.31, #queue-req: 0`` (sgl-project/sglang issues 1612 and 1270)."""

    def stamp(t: float) -> str:
        return f"[{start + timedelta(seconds=t):%H:%M:%S} TP0]"

    lines = [
        f"{stamp(0)} Prefill batch. #new-seq: {BATCH}, #new-token: {BATCH * 500}, #cached-token: 0, "
        f"cache hit rate: 0.00%, token usage: 0.00, #running-req: 0, #queue-req: 0"
    ]
    for i in range(1, 40):
        lines.append(
            f"{stamp(i)} Decode batch. #running-req: {BATCH}, #token: {BATCH * (500 + 40 * i)}, token usage: 0.02, "
            f"gen throughput (token/s): {BATCH / STEP_S:.2f}, #queue-req: 0"
        )
    return lines


@pytest.mark.parametrize("start", [datetime(2024, 10, 8, 16, 43, 29), datetime(2024, 10, 8, 23, 59, 40)])
def test_sglang_stamps_without_a_date_are_read_across_midnight(tmp_path: Path, start: datetime) -> None:
    """Refused before ('no timestamp in square brackets'); a run that crosses midnight is one
    run, not time going back; t = 0 is told as the time of day the log prints."""
    file = analyse(tmp_path, sglang_time_of_day_log(start))
    (run,) = file.runs
    assert run.shape.peak_batch == BATCH
    assert run.timing.headline_token_s == pytest.approx(STEP_S)
    assert run.shape.end_s - run.shape.start_s == pytest.approx(39, abs=1)
    assert file.clock_origin == f"{start:%H:%M:%S}"


# ---------------------------------------------------------------- llama.cpp before 2025

SLOTS = 4
PROMPT_MS = 400.0
EVAL_MS = 9600.0
TOKENS = 97  # eval time over the 96 gaps after the first token: 100 ms each
EPOCH0 = 1723569600  # 2024-08-13T17:20:00Z


def _llama_2024_requests() -> list[tuple[int, int, int]]:
    """(end in Unix seconds, slot, task): SLOTS slots, three requests each, back to back."""
    length = round((PROMPT_MS + EVAL_MS) / 1e3)
    return sorted((EPOCH0 + (k + 1) * length, slot, slot * 3 + k) for slot in range(SLOTS) for k in range(3))


def llama_2024_text() -> list[str]:
    """``--log-format text`` of the 2024 server: ``INFO [           print_timings] prompt eval
    time     =      15.62 ms /    12 tokens (...) | tid="…" timestamp=1723569622 id_slot=0
    id_task=0 …`` then ``generation eval time =    3194.22 ms /   783 runs   (...)``
    (ggml-org/llama.cpp issue 9013)."""
    lines = []
    for end, slot, task in _llama_2024_requests():
        tail = f'| tid="139964472983552" timestamp={end} id_slot={slot} id_task={task}'
        lines += [
            f"INFO [           print_timings] prompt eval time     = {PROMPT_MS:10.2f} ms /    12 tokens "
            f"(   33.33 ms per token,    30.00 tokens per second) {tail} t_prompt_processing={PROMPT_MS}",
            f"INFO [           print_timings] generation eval time = {EVAL_MS:10.2f} ms / {TOKENS:5d} runs   "
            f"(   98.97 ms per token,    10.10 tokens per second) {tail} n_decoded={TOKENS}",
            f"INFO [           print_timings]           total time = {PROMPT_MS + EVAL_MS:10.2f} ms {tail}",
        ]
    return lines


def llama_2024_json() -> list[str]:
    """The 2024 server's default JSON log lines: ``{"tid":"…","timestamp":1756831192,"level":
    "INFO","function":"print_timings","line":819,"msg":"prompt eval time     =    7928.04 ms /
    2386 tokens (...)","id_slot":0,"id_task":0,…}`` (public JSON server logs found by
    find_string '"function":"print_timings"'; the 'generation eval time … runs' wording as in
    the text lines of ggml-org/llama.cpp issue 9013)."""
    lines = []
    for end, slot, task in _llama_2024_requests():
        head = {"tid": "125380885884928", "timestamp": end, "level": "INFO", "function": "print_timings"}
        ids = {"id_slot": slot, "id_task": task}
        lines += [
            json.dumps({**head, "line": 819, "msg": f"prompt eval time     = {PROMPT_MS:10.2f} ms /    12 tokens "
                        "(   33.33 ms per token,    30.00 tokens per second)", **ids}, separators=(",", ":")),
            json.dumps({**head, "line": 833, "msg": f"generation eval time = {EVAL_MS:10.2f} ms / {TOKENS:5d} runs   "
                        "(   98.97 ms per token,    10.10 tokens per second)", **ids}, separators=(",", ":")),
            json.dumps({**head, "line": 843, "msg": f"          total time = {PROMPT_MS + EVAL_MS:10.2f} ms", **ids},
                       separators=(",", ":")),
        ]
    return lines


def llama_2023() -> list[str]:
    """The 2023 server (and llama-cpp-python's) ``llama_print_timings:`` block, eval in
    ``runs``, no time (abetlen/llama-cpp-python issue 1354; ggml-org/llama.cpp issue 2237)."""
    lines = []
    for _ in range(3):
        lines += [
            "llama_print_timings:        load time =    1491.98 ms",
            "llama_print_timings:      sample time =       2.17 ms /    26 runs   (    0.08 ms per token, 12009.24 tokens per second)",
            f"llama_print_timings: prompt eval time = {PROMPT_MS:10.2f} ms /    37 tokens (   10.81 ms per token,    92.50 tokens per second)",
            f"llama_print_timings:        eval time = {EVAL_MS:10.2f} ms / {TOKENS:5d} runs   (   98.97 ms per token,    10.10 tokens per second)",
            f"llama_print_timings:       total time = {PROMPT_MS + EVAL_MS:10.2f} ms",
        ]
    return lines


@pytest.mark.parametrize("name, lines", [("text.log", llama_2024_text()), ("json.log", llama_2024_json())])
def test_llama_cpp_2024_print_timings_give_requests_on_the_unix_clock(tmp_path: Path, name: str, lines: list[str]) -> None:
    """Refused before (text: not a format; JSON: read as a request trace without
    submit_time): each block is a request ending at its Unix timestamp, so the slots busy at
    once, TTFT (the prompt eval time) and the per-token time are told."""
    file = analyse(tmp_path, lines, name)
    (run,) = file.runs
    assert file.source_format == llamacpp.CAPABILITIES.title
    assert run.shape.peak_batch == SLOTS
    assert run.admission.requests_total == len(_llama_2024_requests())
    assert run.timing.ttft_s is not None and run.timing.ttft_s.median == pytest.approx(PROMPT_MS / 1e3, abs=1e-6)
    assert run.timing.headline_token_s == pytest.approx(EVAL_MS / 1e3 / (TOKENS - 1), abs=1e-6)
    start = datetime.fromtimestamp(_llama_2024_requests()[0][0] - (PROMPT_MS + EVAL_MS) / 1e3, UTC)
    assert file.clock_origin.startswith(start.isoformat(timespec="seconds"))


def test_llama_cpp_2023_eval_in_runs_is_read(tmp_path: Path) -> None:
    """Refused before ('no eval time line'): the eval line counts its tokens in 'runs'."""
    file = analyse(tmp_path, llama_2023())
    (run,) = file.runs
    assert run.admission.requests_admitted == 3
    assert run.timing.ttft_s is not None and run.timing.ttft_s.median == pytest.approx(PROMPT_MS / 1e3, abs=1e-6)
    assert run.timing.headline_token_s == pytest.approx(EVAL_MS / 1e3 / (TOKENS - 1), abs=1e-6)
    assert llamacpp.NO_CLOCK in file.file_notes


def llama_journald() -> list[str]:
    """``--log-timestamps`` behind journald's prefix: ``Jun 18 08:57:40  llama-Qwen:[1351]:
    10.13.175.674 I slot print_timing: id  0 | task 1684 | …`` (ggml-org/llama.cpp PR 22929),
    the block's timing lines bare behind the same prefix (the newer block shape)."""
    lines = []
    for end, slot, task in _llama_2024_requests():
        seconds = end - EPOCH0 + 30
        prefix = f"Jun 18 08:{seconds // 60 % 60:02d}:{seconds % 60:02d}  llama-Qwen:[1351]: "
        lines += [
            f"{prefix}{seconds // 60}.{seconds % 60:02d}.000.000 I slot print_timing: id  {slot} | task {task} | ",
            f"{prefix}prompt eval time = {PROMPT_MS:10.2f} ms /    25 tokens (   16.00 ms per token,    62.50 tokens per second)",
            f"{prefix}       eval time = {EVAL_MS:10.2f} ms / {TOKENS:5d} tokens (   98.97 ms per token,    10.10 tokens per second)",
            f"{prefix}      total time = {PROMPT_MS + EVAL_MS:10.2f} ms / {25 + TOKENS:5d} tokens",
        ]
    return lines


def test_llama_cpp_timestamps_behind_a_journald_prefix_place_the_requests(tmp_path: Path) -> None:
    """Read before without a clock (the stamp was looked for at the line's start only): no
    concurrency; now the slots busy at once are rebuilt."""
    file = analyse(tmp_path, llama_journald())
    (run,) = file.runs
    assert run.shape.peak_batch == SLOTS
    assert llamacpp.NO_CLOCK not in file.file_notes


# ---------------------------------------------------------------- SGLang: logs with no decode phase


# a PD prefill node's own fields on its Prefill lines, in each version's words: "#unbootstrapped-req:
# 0, #queue-req: 0, #transferring-req: 0" (a sgl-project/sglang P/D bug report of 2025-05-27),
# "#prealloc-req: … #inflight-req: …" and "#bootstrap-req: … #inflight-req: …" (the scheduler's
# report_prefill_stats of later builds, found by find_string 'f"#inflight-req: ')
PD_PREFILL_WORDINGS = (
    "#running-req: 0, #unbootstrapped-req: 0, #queue-req: {queue}, #transferring-req: 4, ",
    "#running-req: 0, #queue-req: {queue}, #prealloc-req: 0, #inflight-req: 4, ",
    "#running-req: 0, #queue-req: {queue}, #pending-token: 0, #bootstrap-req: 0, #inflight-req: 4, cuda graph: False, ",
)


def sglang_pd_prefill_node(wording: str) -> list[str]:
    """A PD-disaggregated prefill node's log: Prefill lines only."""
    start = datetime(2025, 5, 27, 21, 19, 46)
    return [
        f"[{start + timedelta(seconds=i):%Y-%m-%d %H:%M:%S}] Prefill batch. #new-seq: 4, #new-token: 4096, "
        f"#cached-token: 25, token usage: 0.01, {wording.format(queue=20 - i)}input throughput (token/s): 8000.00"
        for i in range(20)
    ]


@pytest.mark.parametrize("wording", PD_PREFILL_WORDINGS)
def test_a_pd_prefill_node_log_is_refused_naming_the_decode_nodes_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], wording: str
) -> None:
    """Read before as one 0-s "run" per Prefill line, each of "peak batch" 4 (the new
    requests, never a decode batch); now one paragraph: a prefill node has no decode phase."""
    from ncuflow.cli import main

    path = tmp_path / "prefill-node.log"
    path.write_text("\n".join(sglang_pd_prefill_node(wording)) + "\n")
    with pytest.raises(SystemExit) as ended:
        main(["phases", str(path)])
    error = capsys.readouterr().err
    assert ended.value.code == 2 and "Traceback" not in error
    assert "prefill-node.log:1:" in error and "prefill node" in error and "decode node's log" in error


def test_a_log_without_a_time_names_sglang_before_0_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang 0.2 printed ``[gpu=0] Decode batch. #running-req: …`` with no time (its source:
    ``f"[gpu={self.gpu_id}] Decode batch. "``); the refusal says why the log cannot be read."""
    from ncuflow.cli import main

    path = tmp_path / "old.log"
    path.write_text(
        f"[gpu=0] Decode batch. #running-req: {BATCH}, #token: 4000, token usage: 0.01, "
        f"gen throughput (token/s): {BATCH / STEP_S:.2f}, #queue-req: 0\n"
    )
    with pytest.raises(SystemExit) as ended:
        main(["phases", str(path)])
    error = capsys.readouterr().err
    assert ended.value.code == 2 and "before 0.3" in error and "cannot be placed in time" in error


# ---------------------------------------------------------------- TGI: the router's colours


def _colour(code: str) -> str:
    return f"\x1b[{code}m"


def tgi_router_lines(*, ansi: bool) -> list[str]:
    """The router's "Success" line (``INFO generate{parameters=GenerateParameters { … }
    total_time="357.867572ms" validation_time="1.96844ms" queue_time="49.382µs"
    inference_time="355.849981ms" time_per_token="14.827082ms" seed="None"}:
    text_generation_router::server: router/src/server.rs:309: Success``, as quoted in
    triton-inference-server/server issue 7395), coloured as ``tracing``'s text format does by
    default (huggingface/text-generation-inference router/src/logging.rs: ``with_ansi`` unless
    LOG_COLORIZE=1): the time dimmed, the level green, each field name italic, ``=`` dimmed."""
    dim, off, italic, green = ("2", "0", "3", "32") if ansi else ("", "", "", "")
    paint = _colour if ansi else (lambda code: "")

    def field(name: str, value: str) -> str:
        return f'{paint(italic)}{name}{paint(off)}{paint(dim)}={paint(off)}"{value}"'

    start = datetime(2024, 7, 1, 10, 0, 0)
    lines = []
    for slot in range(SLOTS):
        for k in range(3):
            end = start + timedelta(seconds=0.01 * slot + 5.0 * (k + 1))
            fields = " ".join([
                field("total_time", "5s"), field("validation_time", "1.96844ms"), field("queue_time", "49.382µs"),
                field("inference_time", f"{TOKENS * 0.05:.2f}s"), field("time_per_token", "50ms"), field("seed", "None"),
            ])
            lines.append(
                f"{paint(dim)}{end:%Y-%m-%dT%H:%M:%S.%f}Z{paint(off)} {paint(green)} INFO{paint(off)} "
                f"generate{{parameters=GenerateParameters {{ max_new_tokens: Some({TOKENS}) }} {fields}}}"
                f"{paint(dim)}:{paint(off)} text_generation_router::server{paint(dim)}:{paint(off)} "
                f"router/src/server.rs:309: Success"
            )
    return lines


def test_tgi_router_lines_in_colour_read_as_the_plain_ones(tmp_path: Path) -> None:
    """Refused before ('a TGI router line without a readable timestamp, total_time…'): the
    colour codes between a field's name, its '=' and its value are stripped."""
    plain = analyse(tmp_path, tgi_router_lines(ansi=False), "plain.log").runs[0]
    coloured = analyse(tmp_path, tgi_router_lines(ansi=True), "colour.log").runs[0]
    assert coloured.shape.peak_batch == plain.shape.peak_batch == SLOTS
    assert coloured.admission.requests_total == plain.admission.requests_total == SLOTS * 3
    assert coloured.timing.mean_request_tpot_s == pytest.approx(0.05)


# ---------------------------------------------------------------- vLLM V0: the lines after the statistics line

V0_DRAFT = 3  # --num-speculative-tokens
V0_ACCEPT = 2.4  # tokens emitted per step


def vllm_v0_log(hit_percent: float) -> list[str]:
    """vLLM V0 (0.6-0.8): the statistics line (``INFO 11-24 03:09:29 [metrics.py:386] Avg prompt
    throughput: … Running: 35 reqs, Swapped: 0 reqs, Pending: 5 reqs, GPU KV cache usage: 95.0%,
    CPU KV cache usage: 0.0%.``), then on lines of their own the counts since the start of
    speculative decoding (``Speculative metrics: Draft acceptance rate: 0.642, System efficiency:
    0.598, Number of speculative tokens: 3, Number of accepted tokens: 8547, Number of draft
    tokens: 13311, Number of emitted tokens: 10616.``, vllm-project/vllm issue of vLLM 0.6.3 on
    'System efficiency') and the prefix cache hit rate (``Prefix cache hit rate: GPU: 62.26%,
    CPU: 0.00%``, vLLM's metrics.py ``log_fn("Prefix cache hit rate: GPU: %.2f%%, CPU: %.2f%%")``)."""
    start = datetime(2024, 10, 16, 19, 5, 0)
    drafted = emitted = 0
    lines = []
    for i, running in enumerate([0, *[BATCH] * 10, 0]):
        stamp = f"{start + timedelta(seconds=10 * i):%m-%d %H:%M:%S}"
        generation = running / STEP_S
        lines.append(
            f"INFO {stamp} metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
            f"{generation:.1f} tokens/s, Running: {running} reqs, Swapped: 0 reqs, Pending: 0 reqs, "
            "GPU KV cache usage: 1.0%, CPU KV cache usage: 0.0%."
        )
        window_emitted = round(generation * 10)
        drafted += round(window_emitted / V0_ACCEPT) * V0_DRAFT
        emitted += window_emitted
        lines += [
            f"INFO {stamp} metrics.py:367] Speculative metrics: Draft acceptance rate: 0.467, System efficiency: "
            f"0.600, Number of speculative tokens: {V0_DRAFT}, Number of accepted tokens: {emitted // 2}, "
            f"Number of draft tokens: {drafted}, Number of emitted tokens: {emitted}.",
            f"INFO {stamp} metrics.py:361] Prefix cache hit rate: GPU: {hit_percent:.2f}%, CPU: 0.00%",
        ]
    return lines


def test_vllm_v0_acceptance_length_and_prefix_hit_rate_are_read(tmp_path: Path) -> None:
    """Both lost before without a word: the acceptance length from the growth of V0's
    speculative counts over each window, and the hit rate from its own line."""
    file = analyse(tmp_path, vllm_v0_log(62.26))
    (run,) = file.runs
    assert run.timing.accept_len == pytest.approx(V0_ACCEPT, rel=1e-3)
    assert run.timing.headline_token_s == pytest.approx(STEP_S)
    assert file.session is not None and file.session.service is not None
    assert file.session.service.cache_hit_rate == pytest.approx(0.6226)
