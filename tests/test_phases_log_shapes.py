"""Logs of the shapes that broke ``phases`` (issue 40), written from the engines' own line
formats: agentic waves at a full KV cache, SGLang at a full cache without retractions, a
server killed after its client ended the run, prompts over the context refused with a 400."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.cli import cli
from ncuflow.phases.model.results import PhaseKind
from ncuflow.phases.parse.format import LineFormat
from ncuflow.phases.parse.service import CLIENT_ABORTS, OVER_CONTEXT
from ncuflow.phases.parse.sglang import CAPABILITIES as SGLANG
from ncuflow.phases.parse.vllm import CAPABILITIES as VLLM
from ncuflow.phases.pipeline import build_report
from ncuflow.phases.report import FileReport
from ncuflow.phases.text import render_text

START = datetime(2026, 11, 28, 15, 30, 0)


def vllm_window(index: int, running: int, waiting: int, kv_percent: float, *, step_s: float = 0.05,
                prompt: float = 0.0) -> str:
    """vLLM V1's statistics line (loggers.py) of the ``index``-th 10-s window."""
    moment = START + timedelta(seconds=10 * index)
    generation = running / step_s if running else 0.0
    return (
        f"(APIServer pid=1) INFO {moment:%m-%d %H:%M:%S} [loggers.py:236] Engine 000: Avg prompt "
        f"throughput: {prompt:.1f} tokens/s, Avg generation throughput: {generation:.1f} tokens/s, "
        f"Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: {kv_percent:.1f}%, "
        "Prefix cache hit rate: 50.0%"
    )


def sglang_stamp(t: float) -> str:
    moment = START + timedelta(seconds=t)
    return f"[{moment:%Y-%m-%d %H:%M:%S}]"


def sglang_decode(t: float, running: int, queued: int, usage: float, step_s: float = 0.04) -> str:
    return (
        f"{sglang_stamp(t)} Decode batch, #running-req: {running}, #token: 90000, token usage: {usage:.2f}, "
        f"cuda graph: True, gen throughput (token/s): {running / step_s:.2f}, #queue-req: {queued}, "
    )


def sglang_prefill(t: float, new: int, running: int, queued: int, usage: float) -> str:
    return (
        f"{sglang_stamp(t)} Prefill batch, #new-seq: {new}, #new-token: {new * 800}, #cached-token: 0, "
        f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queued}, "
    )


def analyse(tmp_path: Path, lines: Sequence[str], name: str = "server.log") -> FileReport:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    (report,) = build_report([path]).files
    return report


# ---------------------------------------------------------------- any window shape


def two_waves_at_a_full_cache() -> list[str]:
    """An agentic load at 64: a wave, requests waiting at a full KV cache (98.5 %), the same
    level again, then the end: the two plateaus at 64 around the overload stretch."""
    rows = [(16, 0, 20.0, 3000.0), (64, 0, 60.0, 9000.0), *[(64, 0, 70.0, 100.0)] * 4,
            (60, 30, 98.5, 500.0), (58, 61, 98.5, 500.0), (62, 20, 98.5, 500.0),
            *[(64, 0, 80.0, 100.0)] * 4, (30, 0, 40.0, 0.0), (0, 0, 0.0, 0.0)]
    return [vllm_window(i, r, w, kv, prompt=p) for i, (r, w, kv, p) in enumerate(rows)]


def test_one_level_on_both_sides_of_an_overload_stretch(tmp_path: Path) -> None:
    """Was ``ValueError: min() arg is an empty sequence`` in ``_valley``: the two plateaus at
    64 were merged across the overload stretch between them, which then lay inside one."""
    report = analyse(tmp_path, two_waves_at_a_full_cache())
    (run,) = report.runs
    kinds = [s.kind.value for s in run.shape.segments]
    assert kinds == ["plateau", "overload", "plateau"]
    ends = [(s.plateau.start_s, s.plateau.end_s) for s in run.shape.segments]
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ends))
    assert "overload" in render_text(build_report([tmp_path / "server.log"]))


def test_no_window_shape_breaks_the_analysis(tmp_path: Path) -> None:
    """Random vLLM window sequences (batch, queue and KV usage drawn per window, idle gaps
    included): every one is analysed, its segments in time order and not overlapping."""
    rng = random.Random(40)
    for case in range(60):
        lines = []
        for index in range(rng.randint(2, 24)):
            running = rng.choice([0, rng.randint(1, 8), rng.randint(30, 70), 64, 64])
            waiting = rng.choice([0, 0, rng.randint(1, 61)])
            kv = rng.choice([5.0, 60.0, 95.0, 98.5])
            lines.append(vllm_window(index, running, waiting, kv, prompt=rng.choice([0.0, 50.0, 9000.0])))
        report = analyse(tmp_path, lines, f"case{case}.log")
        for run in report.runs:
            spans = [(s.plateau.start_s, s.plateau.end_s) for s in run.shape.segments]
            assert spans == sorted(spans), (case, lines)
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), (case, lines)


# ---------------------------------------------------------------- preemption


def full_cache_growing_queue(decode: bool) -> list[str]:
    """A batch that falls at a full KV cache while the queue grows (the shape vLLM V1 gives
    when it preempts, and SGLang when it admits less), after a ramp to 48."""
    lines = [sglang_prefill(0.0, 48, 0, 0, 0.3)] if decode else []
    batches = [(48, 0, 0.60), (48, 0, 0.70), (48, 0, 0.80), (46, 4, 0.97), (44, 9, 0.98), (41, 15, 0.99),
               (41, 15, 0.99), (38, 20, 0.99), (40, 10, 0.95), (44, 0, 0.70), (44, 0, 0.60), (44, 0, 0.50)]
    for k, (running, queued, usage) in enumerate(batches):
        lines.append(sglang_decode(2.0 + 2.0 * k, running, queued, usage) if decode
                     else vllm_window(k, running, queued, usage * 100))
    return lines


def test_a_format_that_logs_its_retractions_infers_none(tmp_path: Path) -> None:
    """SGLang logs every retraction: a full cache with a growing queue and no retraction line
    is overload, never 'preempted (inferred …)', in the text and the plot's title."""
    assert SGLANG.preemption_lines and not VLLM.preemption_lines
    report = analyse(tmp_path, full_cache_growing_queue(decode=True))
    text = render_text(build_report([tmp_path / "server.log"]))
    assert report.runs[0].phase(PhaseKind.OVERLOAD).seconds > 0
    assert "preempted" not in text and "inferred" not in text
    assert all(s.preempted == 0 and not s.preemption_inferred for r in report.runs for s in r.shape.segments)


def test_a_format_that_cannot_log_preemptions_infers_them(tmp_path: Path) -> None:
    """vLLM V1 prints no preemption: the same shape there is counted as inferred."""
    report = analyse(tmp_path, full_cache_growing_queue(decode=False))
    assert any(s.preemption_inferred and s.preempted > 0 for r in report.runs for s in r.shape.segments)
    assert "preempted (inferred" in render_text(build_report([tmp_path / "server.log"]))


# ---------------------------------------------------------------- a kill after the client ended


def killed_after_the_client(aborts: int) -> list[str]:
    """A run at 8, ``aborts`` AbortReq lines (the client ended it), then the server killed:
    its monitor thread's traceback ends in psutil.NoSuchProcess (no …Error name)."""
    lines = [sglang_prefill(0.0, 8, 0, 0, 0.1)]
    lines += [sglang_decode(1.0 + k, 8, 0, 0.2) for k in range(8)]
    lines += [f"{sglang_stamp(9.5)} Receive: obj=AbortReq(rid='req-{k}')" for k in range(aborts)]
    lines += [
        "Exception in thread Thread-3 (watchdog):",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/threading.py", line 1075, in _bootstrap_inner',
        "    self.run()",
        '  File "/usr/local/lib/python3.12/dist-packages/psutil/_pslinux.py", line 1645, in wrapper',
        "    raise NoSuchProcess(self.pid, self._name, msg=msg) from None",
        "psutil.NoSuchProcess: process no longer exists (pid=4242)",
        f"{sglang_stamp(12.0)} INFO:     Shutting down",
    ]
    return lines


def test_a_kill_after_the_client_ended_is_no_aborted_run(tmp_path: Path) -> None:
    assert "AbortReq(" in CLIENT_ABORTS
    report = analyse(tmp_path, killed_after_the_client(39))
    (run,) = report.runs
    text = render_text(build_report([tmp_path / "server.log"]))
    assert "was aborted" not in text and "cut short" not in text
    assert "stopped after the client ended the run (39 request(s) aborted" in text
    assert "psutil.NoSuchProcess: process no longer exists (pid=4242)" in text
    assert run.phase(PhaseKind.STEADY).span is not None
    assert report.session is not None and report.session.service.errors == 0  # no error of the server
    assert "errors:" not in text


def test_an_exception_without_client_aborts_still_aborts_the_run_with_its_cause(tmp_path: Path) -> None:
    """The same traceback with no AbortReq before it: an aborted run, its cause the
    exception's last line (was an empty '()')."""
    report = build_report([_write(tmp_path, killed_after_the_client(0))])
    text = render_text(report)
    assert "aborted (psutil.NoSuchProcess: process no longer exists (pid=4242))" in text
    assert report.files[0].session is not None and report.files[0].session.service.errors == 1


def _write(tmp_path: Path, lines: Sequence[str]) -> Path:
    path = tmp_path / "server.log"
    path.write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------- prompts over the context


def over_context_refusals(with_engine_message: bool) -> list[str]:
    """Two prompts over the context: the tokenizer's warning, (the engine's own message,)
    then uvicorn's 400 access line; around them, served requests (200)."""
    lines = [sglang_prefill(0.0, 4, 0, 0, 0.1)]
    lines += [sglang_decode(1.0 + k, 4, 0, 0.2) for k in range(6)]
    for k in range(2):
        lines.append(
            "Token indices sequence length is longer than the specified maximum sequence length for "
            "this model (207362 > 202752). Running this sequence through the model will result in "
            "indexing errors"
        )
        if with_engine_message:
            lines.append(
                f"{sglang_stamp(7.0 + k)} ERROR: The input (207362 tokens) is longer than the model's "
                "context length (202752 tokens)."
            )
        lines.append(f'{sglang_stamp(7.0 + k)} INFO:     127.0.0.1:5{k}000 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request')
    lines += [f'{sglang_stamp(8.0)} INFO:     127.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK'] * 4
    return lines


def test_400s_after_the_tokenizers_over_length_warning_are_prompts_over_the_context(tmp_path: Path) -> None:
    for engine_message in (False, True):
        report = analyse(tmp_path, over_context_refusals(engine_message))
        assert report.session is not None
        (rejection,) = report.session.service.rejections
        assert (rejection.cause, rejection.count) == (OVER_CONTEXT, 2), engine_message
        text = render_text(build_report([tmp_path / "server.log"]))
        assert "does not say" not in text
        assert "refused: 2 request(s), context length" in text


def test_the_json_names_the_kill(tmp_path: Path) -> None:
    path = _write(tmp_path, killed_after_the_client(3))
    result = CliRunner().invoke(cli, ["phases", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert "stopped after the client ended the run" in json.dumps(json.loads(result.output))


# ---------------------------------------------------------------- vLLM's Running and prefill


def agentic_windows(decode_batch: bool) -> list[str]:
    """An agentic load at 40 sessions, half of them in prefill at every window's end (long
    multi-turn prompts): 20 decode at a 50-ms step (400 tokens/s). A build that prints the window's decode
    batch says so at the line's end."""
    lines = []
    for k, running in enumerate([40, 40, 40, 40, 40, 40, 0]):
        line = vllm_window(k, running, 0, 60.0, step_s=0.10, prompt=900.0 if running else 0.0)
        if decode_batch and running:
            line += ", Avg prefill BS: 20.0, Avg decode BS: 20.0."
        lines.append(line)
    return lines


def test_requests_in_prefill_are_kept_out_of_the_decode_batch_where_the_log_says_so(tmp_path: Path) -> None:
    """Running (40) also counts the 20 still in prefill: per-token time is the decode batch
    over the generation throughput (20 / 400 tokens/s = 50 ms, where Running gives 100 ms)
    where the line states it; where it does not, Running is all there is."""
    said = analyse(tmp_path, agentic_windows(decode_batch=True), "said.log").runs[0]
    unsaid = analyse(tmp_path, agentic_windows(decode_batch=False), "unsaid.log").runs[0]
    generation = 40 / 0.10  # the line's Avg generation throughput
    for run, batch in ((said, 20.0), (unsaid, 40.0)):
        per_token = [s.phase(PhaseKind.MIXED).token_s or s.phase(PhaseKind.STEADY).token_s for s in run.shape.segments]
        assert per_token[0] is not None
        assert abs(per_token[0].median - batch / generation) < 1e-6


# ---------------------------------------------------------------- sessions and waves of sessions


def step_s(batch: int) -> float:
    """The step of these logs: 20 ms + 0.5 ms per request decoding."""
    return 0.020 + 0.0005 * batch


def multi_turn_wave(first: int, sessions: int, windows: int, steps: Sequence[int]) -> list[str]:
    """A multi-turn replay of ``sessions`` sessions for ``windows`` 10-s windows (each turn's
    prompt mostly cached: the prompt throughput a few % of the generation), then its
    wind-down: the batch steps down through ``steps`` (three windows each) as sessions
    finish, the others still sending turns, then idle."""
    rows = [(sessions // 3, 4000.0), *[(sessions, 0.0)] * windows]
    rows += [(n, 0.0) for n in steps for _ in range(3)]
    lines = []
    for k, (running, prompt) in enumerate(rows):
        generation = running / step_s(running)
        lines.append(vllm_window(first + k, running, 0, 50.0, step_s=step_s(running),
                                 prompt=prompt or 0.05 * generation))
    lines.append(vllm_window(first + len(rows), 0, 0, 0.0))
    return lines


def two_waves_of_sessions() -> tuple[list[str], dict[int, tuple[int, ...]]]:
    waves = {64: (57, 50, 41, 30, 18, 9), 128: (114, 102, 79, 53, 31, 12)}
    first = multi_turn_wave(0, 64, 160, waves[64])
    second = multi_turn_wave(len(first) + 30, 128, 65, waves[128])
    return first + second, waves


def test_a_wave_of_sessions_is_one_level_and_its_wind_down(tmp_path: Path) -> None:
    """64 then 128 sessions, each winding down in six steps: one level per wave (what the
    client held), its headline the level's step time (never a wind-down window's, which a
    smaller batch makes faster), the wind-down named once with its own per-token time."""
    lines, waves = two_waves_of_sessions()
    report = analyse(tmp_path, lines)
    assert [r.shape.steady_batch for r in report.runs] == list(waves)
    for run, (sessions, steps) in zip(report.runs, waves.items(), strict=True):
        assert [s.level for s in run.shape.segments] == [sessions]
        assert run.timing.headline_token_s is not None
        assert abs(run.timing.headline_token_s - step_s(sessions)) < 1e-3
        (note,) = [n for n in run.findings.notes if n.startswith("wind-down")]
        assert " → ".join(map(str, steps)) in note
        low, high = step_s(steps[-1]) * 1000, step_s(steps[0]) * 1000
        median_ms = float(note.split("per-token ")[1].split(" ms")[0])
        assert low <= median_ms <= high  # its own: between its steps' step times
        (segment,) = run.shape.segments
        assert segment.phase(PhaseKind.DRAIN).span is not None and segment.phase(PhaseKind.DRAIN).span.duration_s >= 3 * 10 * len(steps)


def test_a_sweep_stepping_down_keeps_its_levels(tmp_path: Path) -> None:
    """A closed-loop sweep 64 → 32 → 16 with no idle gap, each held as long as the one
    before it: three levels, no wind-down."""
    rows = [(20, 4000.0)] + [(n, 0.0) for n in (64, 32, 16) for _ in range(20)] + [(0, 0.0)]
    lines = [vllm_window(k, n, 0, 40.0, step_s=step_s(n) if n else 0.05,
                         prompt=p or 0.05 * (n / step_s(n) if n else 0)) for k, (n, p) in enumerate(rows)]
    (run,) = analyse(tmp_path, lines).runs
    assert [s.level for s in run.shape.segments] == [64, 32, 16]
    assert not any(n.startswith("wind-down") for n in run.findings.notes)


def test_the_headline_is_the_longest_level(tmp_path: Path) -> None:
    """32 sessions for 600 s, then 64 for 60 s: the run is summed up by the level it spent
    its time at (32), not the highest."""
    rows = [(10, 4000.0)] + [(32, 0.0)] * 60 + [(64, 3000.0)] + [(64, 0.0)] * 6 + [(0, 0.0)]
    lines = [vllm_window(k, n, 0, 40.0, step_s=step_s(n) if n else 0.05,
                         prompt=p or 0.05 * (n / step_s(n) if n else 0)) for k, (n, p) in enumerate(rows)]
    (run,) = analyse(tmp_path, lines).runs
    assert sorted(s.level for s in run.shape.segments) == [32, 64]
    assert run.shape.steady_batch == 32
    assert run.timing.headline_token_s is not None and abs(run.timing.headline_token_s - step_s(32)) < 1e-3


def test_the_plot_label_sits_on_the_curve_it_names(tmp_path: Path) -> None:
    """The headline's label is placed at the per-token curve's height over the stretch it
    names (a token-weighted headline may state another value than the curve's median)."""
    from dataclasses import replace

    from ncuflow.phases.plot import _on_curve

    lines, _ = two_waves_of_sessions()
    run = analyse(tmp_path, lines).runs[0]
    assert run.phase(PhaseKind.STEADY).span is not None and run.timing.headline_token_s is not None
    moved = replace(run, timing=replace(run.timing, headline_token_s=run.timing.headline_token_s * 0.7))  # a value off the curve
    height = _on_curve(moved, run.phase(PhaseKind.STEADY).span.start_s, run.phase(PhaseKind.STEADY).span.end_s, 0.0)
    assert abs(height - step_s(64)) < 1e-3


# ---------------------------------------------------------------- engines without a format


def test_an_engine_without_a_format_is_named_in_the_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine recognised without a format (one row of parse/unsupported.py; TGI and
    llama.cpp, once there, have formats now: tests/test_phases_per_request.py): one paragraph
    naming the engine, what it logs instead, and that a format is a plug-in (exit 2, no
    traceback), for a text log and a JSON one."""
    from ncuflow.cli import main
    from ncuflow.phases.parse import unsupported

    engine = unsupported.KnownEngine("ToyEngine", ("toy_engine_router",), "one line per request")
    monkeypatch.setattr(unsupported, "KNOWN_ENGINES", (engine,))
    cases = {
        "toy.log": ["2024-07-08T10:20:30Z INFO toy_engine_router: served in 2.3s"] * 3,
        "toy.json": [json.dumps({"target": "toy_engine_router", "message": "served"})] * 3,
    }
    for name, lines in cases.items():
        path = tmp_path / name
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(SystemExit) as ended:
            main(["phases", str(path)])
        output = capsys.readouterr().err
        assert ended.value.code == 2, (name, output)
        assert "Traceback" not in output
        words = " ".join(output.split())
        assert f"a {engine.name} log" in words and "plug-in" in words and "ARCHITECTURE.md" in words, words


def test_help_lists_every_registered_format() -> None:
    """The --help list of formats is the registry's: each format's title and its own row."""
    from ncuflow.phases.parse import registry

    result = CliRunner().invoke(cli, ["phases", "--help"])
    for found in (*registry.LINE_FORMATS, *registry.JSON_FORMATS):
        assert found.title in result.output
        assert found.help.split("\n")[0] in result.output


def test_a_plug_in_format_speaks_its_own_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy format of tests/test_phases_formats.py (one module, one registry row): no
    other format's words (its server's name, its batch and throughput fields, its batch-cap
    option, all from their rows) reach the toy's report; its own do."""
    from ncuflow.phases.parse import registry
    from tests.test_phases_formats import TOY, TOY_FORMAT, toy_log

    monkeypatch.setattr(registry, "LINE_FORMATS", (*registry.LINE_FORMATS, TOY_FORMAT))
    lines = toy_log(tmp_path).read_text().splitlines()
    # a second level and a batch at its cap with a queue: more sentences that name fields
    lines += [f"t={70 + 5 * k} running={16} waiting={4 if k < 6 else 0} tok/s={16 / 0.03:.1f}" for k in range(12)]
    lines += ["t=200 running=0 waiting=0 tok/s=0.0"]
    (tmp_path / "toy.log").write_text("\n".join(lines) + "\n")
    text = render_text(build_report([tmp_path / "toy.log"]))
    assert f"{TOY.batch_field} / {TOY.throughput_field}" in text
    for other in (f.capabilities for f in registry.LINE_FORMATS if f is not TOY_FORMAT):
        for words in (other.server, other.batch_field, other.throughput_field, other.batch_cap_option):
            assert words not in text, (words, text)


def test_a_per_request_format_is_one_module_and_one_registry_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A toy log of one line per finished request (tests/phases_toy_requests.py, one module)
    and one registry row: detected, read as requests, its concurrency from their overlap and
    its TTFT from each request's own times; its report in its own words (no other format's
    title or words, all taken from their rows)."""
    from ncuflow.phases.parse import registry
    from tests.phases_toy_requests import TOY_REQUEST_FORMAT, TOY_REQUESTS

    monkeypatch.setattr(registry, "LINE_FORMATS", (*registry.LINE_FORMATS, TOY_REQUEST_FORMAT))
    lines = [
        f"req=r{k} start={0.1 * k:.3f} first={0.1 * k + 0.5:.3f} end={0.1 * k + 0.5 + 0.025 * 99:.3f} tokens=100"
        for k in range(16)
    ]
    path = tmp_path / "toy.log"
    path.write_text("\n".join(lines) + "\n")
    report = build_report([path])
    (file,) = report.files
    (run,) = file.runs
    assert file.source_format == TOY_REQUESTS.title
    assert run.shape.peak_batch == 16  # all sixteen overlap
    assert run.timing.ttft_s is not None and abs(run.timing.ttft_s.median - 0.5) < 1e-6
    text = render_text(report)
    assert TOY_REQUESTS.title in text
    others = [f for f in (*registry.LINE_FORMATS, *registry.JSON_FORMATS) if f is not TOY_REQUEST_FORMAT]
    for other in others:
        assert other.title not in text
        if isinstance(other, LineFormat):
            for words in (other.capabilities.server, other.capabilities.batch_field, other.capabilities.batch_cap_option):
                assert words not in text, words


# ---------------------------------------------------------------- chunked prefill counting


def queue_total_pending() -> list[str]:
    """Six Prefill lines of 8 requests into a batch of 48, a queue behind them, in a build
    whose ``#pending-token`` is the whole queue's total: printed on every line, yet every
    request joins (the next line's batch says so)."""
    lines, running, t = [], 0, 0.0
    for k in range(6):
        queued = 40 - 8 * k
        lines.append(
            f"{sglang_stamp(t)} Prefill batch, #new-seq: 8, #new-token: 6400, #cached-token: 0, "
            f"token usage: 0.20, #running-req: {running}, #queue-req: {queued}, #pending-token: {queued * 900}, "
        )
        running += 8
        lines.append(sglang_decode(t + 0.5, running, queued, 0.3))
        t += 1.0
    lines += [sglang_decode(t + k, running, 0, 0.3) for k in range(6)]
    return lines


def test_a_queue_total_in_pending_tokens_counts_every_admission(tmp_path: Path) -> None:
    """Was 43 of 48: each line with pending tokens read as one request cut off."""
    (run,) = analyse(tmp_path, queue_total_pending()).runs
    assert run.admission.requests_total == 48
