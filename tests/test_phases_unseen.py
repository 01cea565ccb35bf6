"""Issue 12: traces ``phases`` had never seen. Generated logs with a known truth for what the
shared logs do not show (a PD decode node under closed-loop refill, sweeps without idle
gaps, several generations of requests, a warm-up gap, vLLM speculative decoding and
shutdown), and the same properties checked on the shared real logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ncuflow.cli import cli
from ncuflow.phases.model.results import PhaseKind
from ncuflow.phases.pipeline import build_report
from ncuflow.phases.report import FileReport
from tests.phases_sim import bench_block, simulate_sglang, vllm_windows


def step_s(batch: int) -> float:
    """A decode step that grows with the batch, as on a GPU: 30 ms + 0.2 ms per request."""
    return 0.030 + 0.0002 * batch


def analyse_lines(
    tmp_path: Path, lines: list[str], name: str = "server.log", **options: Any
) -> FileReport:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    (report,) = build_report([path], **options).files
    return report


# --------------------------------------------------------------------------- generated


def test_decode_node_ramp_ends_at_the_plateau(tmp_path: Path) -> None:
    """Requests arrive by KV transfer over ~24 s, then a closed loop keeps #transfer-req
    non-zero while 90–96 of 96 run: the ramp ends where #running-req reaches 96."""
    sim = simulate_sglang(
        stages=[(96, 96 * 4)],
        output_tokens=512,
        step_s=step_s,
        decode_node=True,
        transfer_s=0.5,
        arrival_gap_s=0.25,
    )
    report = analyse_lines(tmp_path, sim.lines + bench_block(sim, max_concurrency=96))
    (run,) = report.runs
    assert run.shape.peak_batch is not None and 90 <= run.shape.peak_batch <= 96
    assert run.phase(PhaseKind.RAMP).span is not None and run.phase(PhaseKind.STEADY).span is not None
    interval = 40 * step_s(96)
    # the first Decode line with ≥ 90 % of 96 running, at most one decode-log interval late
    reached = sim.plateau_reached_s[0] - sim.log_origin_s  # on the log's clock
    assert 0 <= run.phase(PhaseKind.RAMP).span.end_s - reached <= interval + 0.01
    plateau = run.shape.segments[0].plateau
    assert run.shape.segments[0].phase(PhaseKind.STEADY).seconds > 0.9 * plateau.duration_s  # not "ramp", not "mixed"
    assert run.phase(PhaseKind.STEADY).token_s is not None
    assert run.phase(PhaseKind.STEADY).token_s.median == pytest.approx(step_s(95), rel=0.03)
    assert any("PD decode node" in note for note in run.findings.notes)
    rec = report.bench_reconciliation  # requests counted by the result block (no Prefill lines)
    assert rec is not None and rec.requests == 384
    assert abs(rec.residual_share) <= 0.10
    assert [t.name for t in rec.terms][:2] == ["ramp decode", "steady"]  # arrivals do not wait
    assert any(
        "in flight" in n and "= the benchmark's stated max concurrency 96" in n for n in run.findings.notes
    )


def test_sglang_sweep_without_idle_gaps_gives_one_segment_per_level(tmp_path: Path) -> None:
    stages = [(2, 12), (4, 24), (8, 48)] * 2
    sim = simulate_sglang(stages=stages, output_tokens=400, step_s=step_s, arrival_gap_s=0.3)
    report = analyse_lines(tmp_path, sim.lines)
    (run,) = report.runs  # the batch never empties: one run ...
    assert [s.level for s in run.shape.segments] == [2, 4, 8, 2, 4, 8]  # ... six segments
    for segment in run.shape.segments:
        assert segment.phase(PhaseKind.STEADY).token_s is not None
        assert segment.phase(PhaseKind.STEADY).token_s.median == pytest.approx(step_s(segment.level), rel=0.02)
    assert run.shape.steady_batch == 8
    assert run.tokens.harness_tpot_s is None  # several generations: no batch TPOT


def test_vllm_sweep_without_idle_gaps_and_cached_prompts(tmp_path: Path) -> None:
    """c = 1, 2, 4 three times back to back; cached prompts leave a prompt throughput of a
    few tokens/s, which must not disqualify the windows."""
    levels = [(1, 6), (2, 6), (4, 6)] * 3
    lines = vllm_windows(
        levels=levels, step_s=step_s, prompt_tokens_per_request=16, output_tokens=256
    )
    report = analyse_lines(tmp_path, lines, "vllm.log")
    (run,) = report.runs
    assert [s.level for s in run.shape.segments] == [1, 2, 4] * 3
    for segment in run.shape.segments:
        assert segment.phase(PhaseKind.STEADY).token_s is not None
        assert segment.phase(PhaseKind.STEADY).token_s.median == pytest.approx(step_s(segment.level), rel=0.01)
    assert "cached prompt" in run.timing.step_method


def test_vllm_uncached_prompts_are_admissions(tmp_path: Path) -> None:
    lines = vllm_windows(
        levels=[(8, 8)], step_s=step_s, prompt_tokens_per_request=3000, output_tokens=256
    )
    (run,) = analyse_lines(tmp_path, lines, "vllm.log").runs
    assert run.phase(PhaseKind.STEADY).span is None
    assert run.shape.segments[0].phase(PhaseKind.MIXED).token_s is not None


def test_closed_loop_reconciliation_over_several_generations(tmp_path: Path) -> None:
    """32 in flight, 256 requests (8 generations): requests finish at different steps
    (speculative decoding), and each replacement's prefill stalls the batch. bench_serving's mean TPOT must be explained within 10 %, with the ramp wait
    divided over all 256 requests, not the 32 of the ramp."""
    sim = simulate_sglang(
        stages=[(32, 256)],
        output_tokens=128,
        step_s=step_s,
        prefill_s=0.15,
        prefill_batch=4,
        speculative=True,
    )
    report = analyse_lines(tmp_path, sim.lines + bench_block(sim, max_concurrency=32))
    rec = report.bench_reconciliation
    assert rec is not None and rec.requests == 256
    assert rec.reported_tpot_s == pytest.approx(sim.mean_tpot_s, abs=1e-5)
    assert abs(rec.residual_share) <= 0.10
    terms = {t.name: t for t in rec.terms}
    assert {"steady", "mixed", "ramp"} <= set(terms)
    assert sum(t.token_share or 0 for t in rec.terms) == pytest.approx(1.0)
    assert terms["mixed"].per_token_s is not None and terms["steady"].per_token_s is not None
    assert terms["mixed"].per_token_s > terms["steady"].per_token_s * 1.2
    # averaging the ramp wait over the ramp's 32 requests would overstate it 8×
    (run,) = report.runs
    assert run.admission.mean_admission_wait_s is not None
    assert terms["ramp"].value_s == pytest.approx(
        run.admission.mean_admission_wait_s * 32 / 256 / 127, rel=0.01
    )
    assert run.shape.peak_batch == 32


def test_warm_up_gap_is_its_own_interval(tmp_path: Path) -> None:
    sim = simulate_sglang(
        stages=[(64, 64)], output_tokens=1000, step_s=step_s, prefill_batch=8, warmup_s=12.0
    )
    report = analyse_lines(tmp_path, sim.lines + bench_block(sim, max_concurrency=64))
    (run,) = report.runs
    assert run.shape.warmup is not None
    assert 12.0 < run.shape.warmup.duration_s <= 12.0 + 0.2 + 40 * step_s(64) + 0.01  # + prefill
    assert any("warm-up (last admission → first Decode line" in n for n in run.findings.notes)
    rec = run.tokens.reconciliation
    assert rec is not None and "warm-up" in {t.name for t in rec.terms}
    assert abs(rec.residual_share) < 0.05
    bench = report.bench_reconciliation
    assert bench is not None and abs(bench.residual_share) <= 0.10
    quiet = simulate_sglang(stages=[(64, 64)], output_tokens=1000, step_s=step_s)
    (plain,) = analyse_lines(tmp_path, quiet.lines, "quiet.log").runs
    assert not any("warm-up (last admission" in n for n in plain.findings.notes)


def test_vllm_speculative_decoding_collapse_and_shutdown(tmp_path: Path) -> None:
    """Acceptance 2.5 then 1.0: per-token time doubles; the note says why. An
    EngineDeadError traceback after SIGTERM is a shutdown, not an aborted run."""
    lines = vllm_windows(
        levels=[(8, 6)],
        step_s=lambda b: 0.020,
        prompt_tokens_per_request=0,
        output_tokens=256,
        accept=lambda window: 2.5 if window <= 3 else 1.0,
    )
    slow = lines[-6:]  # the three windows at acceptance 1.00 (stats + spec line each)
    for k in range(0, len(slow), 2):
        slow[k] = slow[k].replace(
            "Avg generation throughput: 400.0", "Avg generation throughput: 200.0"
        )
    lines = (
        lines[:-6]
        + slow
        + [
            "(APIServer pid=1) INFO 11-28 15:32:00 [launcher.py:101] Shutting down FastAPI HTTP server.",
            "Traceback (most recent call last):",
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
        ]
    )
    (run,) = analyse_lines(tmp_path, lines, "spec.log").runs
    assert run.timing.accept_len == pytest.approx((2 * 2.5 + 3 * 1.0) / 5)  # the five intervals
    assert any("acceptance length ranged 1.00–2.50" in n for n in run.findings.notes)
    assert run.plot.abort_time_s is None
    assert not any("traceback" in c for c in run.findings.cannot)
    assert any("EngineDeadError" in n and "not aborted" in n for n in run.findings.notes)


# --------------------------------------------------------------------------- real logs


def real(logs: Path, name: str) -> FileReport:
    path = logs / name
    if not path.exists():
        pytest.skip(f"{name} is not in {logs}")
    (report,) = build_report([path]).files
    return report


def test_eagle3_closed_loop_reconciles_within_ten_percent(serving_logs_dir: Path) -> None:
    report = real(serving_logs_dir, "shun8686_qwen3-32b_eagle3_tp4_c78.log")
    main = report.runs[1]
    assert main.shape.peak_batch == 78 and main.server.stated_concurrency == 78
    assert any("= the benchmark's stated max concurrency 78" in n for n in main.findings.notes)
    rec = report.bench_reconciliation
    assert rec is not None and rec.requests == 312
    assert rec.reported_tpot_s == pytest.approx(0.05522)
    assert abs(rec.residual_share) <= 0.10
    names = [t.name for t in rec.terms]
    assert names[:3] == ["steady", "mixed", "drain"] and "ramp" in names and "warm-up" in names
    (segment,) = main.shape.segments
    assert segment.phase(PhaseKind.MIXED).token_s is not None and segment.phase(PhaseKind.DRAIN).token_s is not None
    assert segment.accept_len is not None and 1.3 < segment.accept_len < 1.8
    assert main.shape.warmup is not None and main.shape.warmup.duration_s > 40 * 0.06  # flagged
    assert any("warm-up (last admission" in n for n in main.findings.notes)


@pytest.mark.parametrize(
    ("name", "stated", "per_rank"),
    [
        ("shun8686_qwen3-next-80b_mamba_c80.log", 80, 80),
        ("shun8686_qwen3-480b_dpattn_c288.log", 288, 72),
    ],
)
def test_peaks_from_decode_lines_match_the_stated_concurrency(
    serving_logs_dir: Path, name: str, stated: int, per_rank: int
) -> None:
    report = real(serving_logs_dir, name)
    full = [r for r in report.runs if r.phase(PhaseKind.STEADY).span is not None]
    assert full and all(r.shape.peak_batch == per_rank for r in full)
    assert report.bench is not None and report.bench.max_concurrency == stated
    rec = report.bench_reconciliation
    assert rec is not None and abs(rec.residual_share) <= 0.10
    assert all(
        r.tokens.reconciliation is not None and abs(r.tokens.reconciliation.residual_share) <= 0.10 for r in full
    )


def test_dp_attention_whole_server_rows(serving_logs_dir: Path) -> None:
    report = real(serving_logs_dir, "shun8686_qwen3-480b_dpattn_c288.log")
    assert [row.peak_batch for row in report.server_rows] == [144] * 4
    assert all(row.ranks == 2 and row.steady_batch == 144 for row in report.server_rows)
    assert all(row.rank_spread is not None and row.rank_spread < 0.01 for row in report.server_rows)
    assert any("× 4 ranks = the stated max concurrency 288" in n for n in report.file_notes)
    assert all(any("lockstep" in n for n in r.findings.notes) for r in report.runs)


def test_sweep_levels_each_have_their_own_per_token_time(serving_logs_dir: Path) -> None:
    report = real(serving_logs_dir, "sostrowsk_laguna-s-int4_gb10_sglang_swa_c1-4.log")
    by_level: dict[int, list[float]] = {}
    for run in report.runs:
        # One segment per wave, except run 7: the third c = 2 wave (three Decode lines at 2
        # over 14 s) and the first c = 4 wave, joined because one c = 2 request was still
        # running when the c = 4 wave was admitted. Issue 23's rule holds a level with three
        # Decode lines; the old rule (four lines below the top) had folded that wave into a
        # 23-s "ramp" of level 4.
        expected = [2, 4] if run.identity.run_index == 7 else [s.level for s in run.shape.segments][:1]
        assert [s.level for s in run.shape.segments] == expected
        for segment in run.shape.segments:
            if segment.phase(PhaseKind.STEADY).span is not None and segment.phase(PhaseKind.STEADY).token_s is not None:
                by_level.setdefault(segment.level, []).append(segment.phase(PhaseKind.STEADY).token_s.median)
    medians = {level: sorted(v)[len(v) // 2] for level, v in by_level.items()}
    assert set(medians) == {1, 2, 4}
    assert medians[1] < medians[2] < medians[4]
    assert any("SIGTERM" in n for r in report.runs for n in r.findings.notes)
    assert not any(r.plot.abort_time_s for r in report.runs)


def test_pd_decode_node_never_reaches_its_plateau(serving_logs_dir: Path) -> None:
    """Every rank ramps (running + transfer ≈ 28) until the traceback: no segment."""
    report = real(serving_logs_dir, "shun8686_deepseek-r1_pd-decode-node_crash_dev20260328.log")
    for run in report.runs:
        assert run.shape.segments == ()
        assert run.shape.peak_batch is not None and run.shape.peak_batch <= 28
        assert run.plot.abort_time_s is not None


def test_vllm_runs_show_their_mixed_per_token_time(serving_logs_dir: Path) -> None:
    report = real(serving_logs_dir, "faradawn_llama3-8b_vllm-0.11.2_c1-8.log")
    assert [[s.level for s in r.shape.segments] for r in report.runs] == [[1], [4], [8]]
    for run in report.runs:
        (segment,) = run.shape.segments
        assert segment.phase(PhaseKind.MIXED).token_s is not None and 0.004 < segment.phase(PhaseKind.MIXED).token_s.median < 0.010


def test_json_keeps_old_keys_and_adds_the_new_ones(serving_logs_dir: Path) -> None:
    path = serving_logs_dir / "shun8686_qwen3-32b_eagle3_tp4_c78.log"
    if not path.exists():
        pytest.skip("log missing")
    result = CliRunner().invoke(cli, ["phases", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    run = data["files"][0]["runs"][1]
    old = {
        "run_label",
        "peak_batch",
        "steady_batch",
        "ramp",
        "steady",
        "mixed",
        "drain",
        "admission_span_s",
        "mean_admission_wait_s",
        "requests_admitted",
        "steady_token_s",
        "steady_step_s",
        "harness_tpot_s",
        "reconciliation",
        "cannot",
        "notes",
    }
    new = {"segments", "warmup", "mixed_token_s", "drain_token_s", "accept_len", "requests_total"}
    assert old | new <= set(run)
    rec = data["files"][0]["bench_reconciliation"]
    assert {"steady_term_s", "ramp_term_s", "unexplained_share", "terms", "requests"} <= set(rec)
    assert run["segments"][0]["level"] == 78
    text = CliRunner().invoke(cli, ["phases", str(path)]).output
    assert "segments (one per #running-req plateau" in text
    assert "mixed 42% ×" in text and "cross-check: bench_serving median ITL 30.84 ms" in text


@pytest.mark.parametrize(
    "name", ["shun8686_qwen3-32b_eagle3_tp4_c78.log", "shun8686_qwen3-480b_dpattn_c288.log"]
)
def test_steady_phase_survives_a_small_change_of_tolerance(
    serving_logs_dir: Path, name: str
) -> None:
    """The plateau is judged against Decode lines, not a fraction of an inflated Prefill peak:
    --batch-tolerance 0.04 and 0.05 find the same steady stretches."""
    path = serving_logs_dir / name
    if not path.exists():
        pytest.skip(f"{name} missing")
    spans = []
    for tolerance in (0.04, 0.05):
        (report,) = build_report([path], batch_tolerance=tolerance).files
        spans.append([r.phase(PhaseKind.STEADY).span.duration_s if r.phase(PhaseKind.STEADY).span else None for r in report.runs])
    assert spans[0] == spans[1] and any(s for s in spans[0])


def test_bench_json_leaves_unknowns_none(tmp_path: Path) -> None:
    """No start times: start, end and peak are unknown (None / null), never 0."""
    result = {
        "ttfts": [0.2, 0.3],
        "itls": [[0.04] * 9, [0.04] * 9],
        "output_lens": [10, 10],
        "mean_tpot_ms": 40.0,
    }
    path = tmp_path / "bench.jsonl"
    path.write_text(json.dumps(result) + "\n")
    (report,) = build_report([path]).files
    (run,) = report.runs
    assert run.shape.start_s is None and run.shape.end_s is None and run.shape.peak_batch is None
    data = json.loads(CliRunner().invoke(cli, ["phases", str(path), "--json"]).output)
    (as_json,) = data["files"][0]["runs"]
    assert as_json["start_s"] is None and as_json["peak_batch"] is None
    assert as_json["steady_token_s"]["median"] == pytest.approx(0.04)


def test_a_one_line_dip_does_not_end_a_plateau(tmp_path: Path) -> None:
    """c = 4 where every other window ends just after a request finished (3 running): one
    segment, the dips counted as mixed, the batch never called unstable."""
    lines = vllm_windows(
        levels=[(4, 1), (3, 1)] * 3 + [(4, 1)],
        step_s=step_s,
        prompt_tokens_per_request=8,
        output_tokens=256,
    )
    (run,) = analyse_lines(tmp_path, lines, "dips.log").runs
    (segment,) = run.shape.segments
    assert segment.level == 4
    assert segment.phase(PhaseKind.MIXED).seconds == pytest.approx(30.0)
    assert segment.phase(PhaseKind.STEADY).seconds == pytest.approx(30.0)
