"""Issue 32: ``phases`` under overload and over long sessions. Logs written by step-level
engines with a KV cache (``tests.phases_sim_load``) in the formats vLLM (0.6 V0 and V1)
and SGLang print, with a known truth: preemption is overload, not drain; admission is
measured where arrival lines exist; a long prefill is not warm-up; a session of a thousand
runs reads in one summary; context-length refusals are named; two waves are two segments."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.cli import cli
from ncuflow.phases.model import RunAnalysis
from ncuflow.phases.model.results import PhaseKind, SegmentKind
from ncuflow.phases.pipeline import build_report
from ncuflow.phases.report import FileReport
from ncuflow.phases.text import render_text
from tests import phases_sim_load as load


def write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def analyse(path: Path) -> FileReport:
    (report,) = build_report([path]).files
    return report


def overload_segments(run: RunAnalysis) -> list:
    return [s for s in run.shape.segments if s.kind is SegmentKind.OVERLOAD]


# --------------------------------------------------------------------------- overload


@pytest.mark.parametrize("v0", [False, True])
def test_preemption_at_a_full_cache_is_overload_not_drain(tmp_path: Path, v0: bool) -> None:
    """400 requests at once outgrow the KV cache: the batch peaks, the engine preempts for
    two minutes (Waiting rises while Running falls at 100 % usage), then the queue empties
    and the batch drains. vLLM V1 logs no preemption (inferred); V0 warns every 50th."""
    sim = load.vllm_burst_overload(400, v0=v0)
    report = analyse(write(tmp_path, "vllm.log", sim.lines))
    (run,) = report.runs
    (stretch,) = overload_segments(run)
    preempted_at = [t for t, running, waiting, usage in sim.windows if waiting and usage > 0.99]
    assert stretch.plateau.start_s <= min(preempted_at) and stretch.plateau.end_s >= max(preempted_at)
    assert stretch.preempted > 0 and stretch.preemption_inferred is (not v0)
    truth = sum(r.preempted for r in sim.requests)
    if v0:  # the cumulative counter of the warnings, one warning every 50 preemptions
        assert truth - 50 < stretch.preempted <= truth
    else:  # a lower bound: what the counts at the windows' ends show
        assert 0 < stretch.preempted <= truth
    # its per-token time is the step at the batches it ran at, never a drain's
    steps = [s for t, batch, s in sim.decode_steps if stretch.plateau.start_s < t - 1 < stretch.plateau.end_s and s]
    assert stretch.phase(PhaseKind.OVERLOAD).token_s is not None
    assert min(steps) * 0.9 < stretch.phase(PhaseKind.OVERLOAD).token_s.median < max(steps) * 1.1
    assert stretch.phase(PhaseKind.DRAIN).span is not None and stretch.phase(PhaseKind.DRAIN).span.start_s >= stretch.plateau.end_s
    assert run.phase(PhaseKind.OVERLOAD).seconds == stretch.phase(PhaseKind.OVERLOAD).seconds > 60
    text = render_text(build_report([tmp_path / "vllm.log"]))
    assert "overload" in text and ("inferred" in text) is (not v0)
    assert not any("drain" in n and "overload" not in n for n in run.findings.cannot)


def test_kv_bound_queue_on_the_shared_logs_is_overload(serving_logs_dir: Path) -> None:
    path = serving_logs_dir / "sgldocs_openai-batch_2025-06-10.log"
    if not path.exists():
        pytest.skip("log missing")
    (run,) = analyse(path).runs
    (stretch,) = overload_segments(run)
    assert stretch.queued_max > 4000 and stretch.kv_usage_max == pytest.approx(0.99)
    # the #retracted_reqs of its retraction lines, nothing inferred: SGLang logs every one
    retracted = [int(n) for n in re.findall(r"#retracted_reqs: (\d+)", path.read_text())]
    assert retracted and stretch.preempted == sum(retracted)
    assert not stretch.preemption_inferred
    assert all(s.kind is not SegmentKind.PLATEAU for s in run.shape.segments)  # no level of the client's
    assert any("full KV cache" in c for c in run.findings.cannot)


def test_queue_causes_are_named(tmp_path: Path) -> None:
    sim = load.vllm_burst_overload(400)
    (run,) = analyse(write(tmp_path, "vllm.log", sim.lines)).runs
    causes = {c.cause: c for c in run.overload.queue_causes}
    assert set(causes) == {"KV cache full", "admissions still prefilling"}
    assert causes["admissions still prefilling"].max_queued == max(w for _, _, w, _ in sim.windows[:2])


# --------------------------------------------------------------------------- admission


def test_vllm_arrival_lines_bound_queue_wait_and_ttft(tmp_path: Path) -> None:
    sim = load.vllm_burst_overload(400)
    (run,) = analyse(write(tmp_path, "vllm.log", sim.lines)).runs
    arrivals = run.server.arrivals
    assert arrivals is not None and arrivals.requests == 400 and arrivals.refused == 0
    assert not any("not measurable" in c for c in run.findings.cannot)
    waits = sorted((r.admitted_s or 0.0) - r.arrival.time_s for r in sim.requests)
    first_tokens = sorted((r.first_s or 0.0) - r.arrival.time_s for r in sim.requests)
    assert arrivals.queue_wait_low_s is not None and arrivals.queue_wait_s is not None
    # the bounds hold the true median (windows of 10 s: at most one window apart)
    assert arrivals.queue_wait_low_s.median - 1 <= statistics.median(waits) <= arrivals.queue_wait_s.median + 1
    assert arrivals.ttft_high_s is not None and arrivals.ttft_high_s.median + 1 >= statistics.median(first_tokens)
    assert arrivals.admission_span_s is not None and arrivals.admission_span_s + 1 >= max(waits)


def test_sglang_arrival_lines_give_exact_queue_waits(tmp_path: Path) -> None:
    sim = load.sglang_long_context()
    (run,) = analyse(write(tmp_path, "sglang.log", sim.lines)).runs
    arrivals = run.server.arrivals
    assert arrivals is not None and arrivals.requests == 2
    waits = [(r.admitted_s or 0.0) - r.arrival.time_s for r in sim.requests]
    assert arrivals.queue_wait_s is not None and arrivals.queue_wait_low_s is not None
    assert arrivals.queue_wait_s.maximum == pytest.approx(max(waits), abs=1.0)  # 1-s timestamps
    assert arrivals.queue_wait_s.median == arrivals.queue_wait_low_s.median  # exact, not bounds
    assert not any(c.startswith("TTFT distribution") for c in run.findings.cannot)


# --------------------------------------------------------------------------- long prefill


def test_a_long_prefill_is_not_warm_up_and_its_queue_is_named(tmp_path: Path) -> None:
    """Prompts of 24.3K and 22.7K tokens, a KV pool of 25,169: each prefill takes ~2 s and
    the second request waits (#queue-req 1, token usage 0.97) for the first one's cache."""
    sim = load.sglang_long_context()
    report = analyse(write(tmp_path, "sglang.log", sim.lines))
    (run,) = report.runs
    text = render_text(build_report([tmp_path / "sglang.log"]))
    assert "graph capture" not in text and "first-step warm-up" not in text
    (stretch,) = overload_segments(run)
    assert stretch.queued_max == 1 and stretch.kv_usage_max is not None and stretch.kv_usage_max > 0.95
    assert "full KV cache" in text
    prefill = next(n for n in run.findings.notes if n.startswith("prefill:"))
    seconds = float(prefill.split("≈ ")[-1].split(" s")[0])
    assert seconds == pytest.approx(24_300 / 12_000, rel=0.2)
    assert "not warm-up" in prefill


def test_a_long_prefill_without_a_prefill_throughput_is_still_no_warm_up(tmp_path: Path) -> None:
    sim = load.sglang_long_context(chunk=32_768)  # one Prefill line per prompt: no chains
    path = write(tmp_path, "sglang.log", sim.lines)
    (run,) = analyse(path).runs
    text = render_text(build_report([path]))
    assert "graph capture" not in text and "first-step warm-up" not in text
    prefill = next(n for n in run.findings.notes if n.startswith("prefill:"))
    assert "24,300 tokens" in prefill and "up to that much prefill" in prefill
    assert any("cannot be told apart" in n for n in run.findings.notes)


def test_warm_up_column_agrees_with_the_reconciliation(serving_logs_dir: Path) -> None:
    path = serving_logs_dir / "shun8686_qwen3-next-80b_mamba_c80.log"
    if not path.exists():
        pytest.skip("log missing")
    report = analyse(path)
    text = render_text(build_report([path]))
    for run in report.runs:
        rec = run.tokens.reconciliation
        if rec is None:
            continue
        terms = {t.name: t for t in rec.terms}
        split = run.shape.warmup_split
        assert run.shape.warmup is not None and split is not None and split.prefill_s is not None
        # the interval is the last admission's prefill + ordinary decode steps + warm-up
        assert split.prefill_s + split.excess_s < run.shape.warmup.duration_s
        assert terms["warm-up"].detail.startswith(f"{split.excess_s:.2f} s")
        row = next(line for line in text.splitlines() if line.strip().startswith(run.identity.run_label + " "))
        assert f" {split.excess_s:.1f} s " in row


# --------------------------------------------------------------------------- sessions


def test_a_thousand_run_session_reads_in_one_summary(tmp_path: Path) -> None:
    sim = load.sglang_session(1000)
    path = write(tmp_path, "session.log", sim.lines)
    result = CliRunner().invoke(cli, ["phases", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) <= 200
    assert "session: 1,000 runs" in lines[1] and "1,000 requests" in lines[1]
    per_token = next(line for line in lines if "per-token over the session" in line)
    assert "13.60 ms" in per_token  # the lone request's step, 13.5 ms + 0.1 ms
    cached = sum(r.arrival.cached for r in sim.requests)
    prompts = sum(r.arrival.cached + r.arrival.prompt for r in sim.requests)
    hits = sum(1 for r in sim.requests if r.arrival.cached)
    cache = next(line for line in lines if "prefix cache" in line)
    assert f"hit on {hits:,} of 1,000" in cache and f"{cached:,} of {prompts:,}" in cache
    data = CliRunner().invoke(cli, ["phases", str(path), "--json"]).output
    assert len(data) < 400_000
    parsed = json.loads(data)["files"][0]
    assert parsed["runs_total"] == 1000 and len(parsed["runs_index"]["start_s"]) == 1000
    assert len(parsed["runs"]) < 20 and parsed["session"]["runs"] == 1000
    every = json.loads(CliRunner().invoke(cli, ["phases", str(path), "--json", "--runs", "all"]).output)
    assert len(every["files"][0]["runs"]) == 1000
    some = CliRunner().invoke(cli, ["phases", str(path), "--runs", "3,7-9"]).output
    assert [line.split()[1] for line in some.splitlines() if line.startswith("  run ")][1:] == ["3", "7", "8", "9"]


def test_context_length_refusals_are_named_not_errors(tmp_path: Path) -> None:
    """A two-day debate through vLLM: its turns outgrow the 8,192-token context, and vLLM
    prints a traceback for each refusal (HTTP 400)."""
    sim = load.vllm_debate()
    path = write(tmp_path, "debate.log", sim.lines)
    report = analyse(path)
    refused = sum(1 for r in sim.requests if r.refused)
    assert refused >= 5
    session = report.session
    assert session is not None
    (rejection,) = session.service.rejections
    assert rejection.cause == "context length" and rejection.count == refused
    assert dict(session.service.http_status)[400] == refused and session.service.errors == 0
    assert session.runs_aborted == 0 and not any(r.plot.abort_time_s for r in report.runs)
    assert not any("traceback" in n for r in report.runs for n in r.findings.notes)
    text = CliRunner().invoke(cli, ["phases", str(path)]).output
    assert f"refused: {refused} request(s), context length" in text


def test_a_prompt_over_the_schedulers_limit_is_its_own_cause(tmp_path: Path) -> None:
    """vLLM's scheduler warns and finishes a prompt over its limit unserved (no HTTP error):
    a refusal of its own cause, not a context-length 400 (the limit may be
    max_num_batched_tokens)."""
    sim = load.vllm_debate()
    at = next(k for k, line in enumerate(sim.lines) if line.startswith("(APIServer pid=1) INFO ") and "loggers.py" in line)
    stamp = " ".join(sim.lines[at].split()[3:5])
    warning = f"(EngineCore_0 pid=2) WARNING {stamp} [scheduler.py:1204] Input prompt (9000 tokens) is too long and exceeds limit of 2048"
    path = write(tmp_path, "debate.log", [*sim.lines[:at], warning, warning.replace("9000", "9001"), *sim.lines[at:]])
    session = analyse(path).session
    assert session is not None
    causes = {r.cause: r.count for r in session.service.rejections}
    assert causes.pop("context length") == sum(1 for r in sim.requests if r.refused)
    ((cause, count),) = causes.items()
    assert cause.startswith("prompt limit") and count == 2


# --------------------------------------------------------------------------- waves


def test_two_waves_of_a_trace_are_two_segments(tmp_path: Path) -> None:
    records = load.jsonl_waves(16, 8, output=256, step_s=0.00656)
    path = write(tmp_path, "waves.jsonl", [json.dumps(r) for r in records])
    (run,) = analyse(path).runs
    assert [s.level for s in run.shape.segments] == [8, 8]
    assert run.tokens.harness_tpot_s is None and any("2 generations" in c for c in run.findings.cannot)
    for segment in run.shape.segments:
        assert segment.phase(PhaseKind.STEADY).token_s is not None
        assert segment.phase(PhaseKind.STEADY).token_s.median == pytest.approx(0.00656, rel=0.02)
        rec = segment.reconciliation
        assert rec is not None and abs(rec.residual_share) < 0.02
        assert rec.reported_tpot_s == pytest.approx(0.00656, rel=0.03)  # one generation's own
    text = render_text(build_report([path]))
    assert "seg 1:" in text and "seg 2:" in text
    # the JSON carries each wave's own TPOT and its reconciliation, as docs/phases.md says
    (run_json,) = json.loads(CliRunner().invoke(cli, ["phases", str(path), "--json"]).output)["files"][0]["runs"]
    for segment, shown in zip(run.shape.segments, run_json["segments"], strict=True):
        assert shown["harness_tpot_s"] == segment.harness_tpot_s == segment.reconciliation.reported_tpot_s
        assert shown["reconciliation"]["reported_tpot_s"] == segment.harness_tpot_s


def test_a_single_generation_keeps_its_harness_tpot(tmp_path: Path) -> None:
    records = load.jsonl_waves(8, 8)
    (run,) = analyse(write(tmp_path, "one.jsonl", [json.dumps(r) for r in records])).runs
    assert run.shape.segments == () and run.tokens.harness_tpot_s is not None


# --------------------------------------------------------------------------- hostile lines


def test_request_lines_that_attack_the_reader_cost_linear_time(tmp_path: Path) -> None:
    """Lines of 60,000 characters shaped against each new pattern (access lines, preemption
    warnings, exception lines inside an open traceback, arrival lines with huge ids), and
    50,000 arrivals whose "Added" line never comes: read in seconds, in bounded memory,
    nothing taken as data that is not."""
    import time

    sim = load.vllm_burst_overload(40)
    attacks = [
        '(APIServer pid=1) INFO:     ' + '"POST /v1/completions' * 3000 + ' HTTP/1.1" ',
        "WARNING 08-12 09:00:12 scheduler.py:1] " + "is preempted by " * 4000,
        "Traceback (most recent call last):",
        "a." * 30_000,
        "(APIServer pid=1) INFO 08-12 09:00:12 [logger.py:43] Received request " + "x" * 60_000 + ": prompt: ''",
    ]
    flood = [
        f"(APIServer pid=1) INFO 08-12 09:00:13 [logger.py:43] Received request flood-{k}: prompt: 'x'"
        for k in range(50_000)
    ]
    lines = sim.lines[:6] + attacks + flood + sim.lines[6:]
    path = write(tmp_path, "hostile.log", lines)
    began = time.process_time()
    (report,) = build_report([path]).files
    assert time.process_time() - began < 10  # 2 s here; a quadratic reader took minutes
    session = report.session
    assert session is not None and session.service.errors <= 1
    arrivals = report.runs[0].server.arrivals
    assert arrivals is not None and arrivals.refused >= 50_000 - 4096  # never added: refused


def test_a_batch_that_falls_window_after_window_held_no_level(tmp_path: Path) -> None:
    """588 → 572 → 539 → 490 (each window lower, within 10 % of the last): a burst and its
    fall, never 'steady at 555' nor tails 'held' at each level."""
    sim = load.vllm_burst_that_never_holds()
    (run,) = analyse(write(tmp_path, "vllm.log", sim.lines)).runs
    kinds = [s.kind for s in run.shape.segments]
    assert kinds == [SegmentKind.BURST, SegmentKind.OVERLOAD]
    assert run.phase(PhaseKind.STEADY).span is None and not any("tail" in n for n in run.findings.notes)
    burst = run.shape.segments[0]
    assert burst.phase(PhaseKind.BURST).token_s is not None
    peak_steps = [s for t, batch, s in sim.decode_steps if 30 < t <= 50 and s]
    assert burst.phase(PhaseKind.BURST).token_s.median == pytest.approx(statistics.fmean(peak_steps), rel=0.1)


@pytest.mark.parametrize("rewrite", ["suffix", "other"])
def test_added_lines_whose_ids_differ_do_not_refuse_arrivals(tmp_path: Path, rewrite: str) -> None:
    """An engine that adds a suffix to the request id, or logs another id altogether: every
    arrival is still an arrival (none refused for want of a matching 'Added' line)."""
    sim = load.vllm_burst_overload(400)
    lines = []
    for k, line in enumerate(sim.lines):
        if "Added request chatcmpl-" in line:
            head, _, rid = line.partition("Added request ")
            line = head + "Added request " + (rid.removesuffix(".") + "-9f3a2c1b." if rewrite == "suffix" else f"{k}.")
        lines.append(line)
    (run,) = analyse(write(tmp_path, "vllm.log", lines)).runs
    assert run.server.arrivals is not None and run.server.arrivals.requests == 400 and run.server.arrivals.refused == 0


def test_every_refusal_marker_passes_the_cheap_line_test() -> None:
    from ncuflow.phases.parse.service import REFUSAL_CAUSES, REFUSAL_HINTS

    for _, markers in REFUSAL_CAUSES:
        assert all(any(hint in marker for hint in REFUSAL_HINTS) for marker in markers), markers
