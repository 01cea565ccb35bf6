"""Traces generated from a known ramp and a known steady step: the split and the
reconciliation must recover both within 1 %."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.cli import cli
from ncuflow.phases.detect import load_traces
from ncuflow.phases.model import (
    AmortizationRun,
    RequestTrace,
    ServerTrace,
    amortization_test,
    analyse_request_trace,
    analyse_server_trace,
    config_gaps,
)
from ncuflow.phases.model.results import PhaseKind
from ncuflow.phases.parse.format import LogReading
from ncuflow.phases.parse.sglang import DECODE_LOG_INTERVAL


def write_request_trace(
    path: Path,
    *,
    batch: int,
    ramp_s: float,
    prefill_s: float,
    step_s: float,
    output_tokens: int,
    jitter: float = 0.02,
    seed: int = 1,
    run: str | None = None,
    t0: float = 1_700_000_000.0,
) -> None:
    """Requests submitted evenly over ``ramp_s``; each gets its first token ``prefill_s``
    after submission, then one token every ``step_s`` (± ``jitter`` relative noise)."""
    rng = random.Random(seed)
    lines = []
    for i in range(batch):
        submit = t0 + i * ramp_s / (batch - 1)
        first = submit + prefill_s
        times = [
            first + k * step_s + rng.uniform(-jitter, jitter) * step_s * (k > 0)
            for k in range(output_tokens)
        ]
        record = {"request_id": f"r{i}", "submit_time": submit, "chunk_times": times}
        if run is not None:
            record["run"] = run
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")


def test_request_trace_recovers_ramp_and_step(tmp_path: Path) -> None:
    path = tmp_path / "known.jsonl"
    ramp, prefill, step, n = 2.2, 0.15, 0.0438, 96
    write_request_trace(
        path, batch=32, ramp_s=ramp, prefill_s=prefill, step_s=step, output_tokens=n
    )
    (trace,) = load_traces(path)
    assert isinstance(trace, RequestTrace)
    run = analyse_request_trace(trace)
    assert run.phase(PhaseKind.STEADY).span is not None and run.phase(PhaseKind.RAMP).span is not None and run.phase(PhaseKind.STEADY).token_s is not None
    assert run.shape.steady_batch == 32
    assert run.phase(PhaseKind.STEADY).token_s.median == pytest.approx(step, rel=0.01)
    assert run.admission.admission_span_s == pytest.approx(ramp, rel=0.01)
    assert run.phase(PhaseKind.RAMP).span.duration_s == pytest.approx(ramp + prefill, rel=0.01)
    assert run.timing.ttft_s is not None and run.timing.ttft_s.median == pytest.approx(prefill, rel=0.01)
    rec = run.tokens.reconciliation
    assert rec is not None
    # harness TPOT = (batch end − first token)/(N − 1) = step + ramp/(N − 1)
    assert rec.reported_tpot_s == pytest.approx(step + ramp / (n - 1), rel=0.01)
    assert rec.ramp_s == pytest.approx(ramp, rel=0.01)
    assert abs(rec.residual_share) < 0.01
    assert rec.ramp_share == pytest.approx((ramp / (n - 1)) / (step + ramp / (n - 1)), rel=0.02)


def test_batch_that_never_fills_has_no_steady_phase(tmp_path: Path) -> None:
    """Requests trickle in (one every 0.3 s, 0.4 s of prefill each, 0.35 s of decode): some
    request is always prefilling while the others decode, so the batch never fills."""
    path = tmp_path / "trickle.jsonl"
    lines = []
    for i in range(10):
        submit = i * 0.3
        chunks = [submit + 0.4 + 0.05 * k for k in range(8)]
        lines.append(json.dumps({"submit_time": submit, "chunk_times": chunks}))
    path.write_text("\n".join(lines) + "\n")
    (trace,) = load_traces(path)
    assert isinstance(trace, RequestTrace)
    run = analyse_request_trace(trace)
    assert run.phase(PhaseKind.STEADY).span is None
    assert run.tokens.reconciliation is None
    assert any("never fills" in message for message in run.findings.cannot)


def sglang_log_lines(
    *,
    batch: int,
    admissions: int,
    ramp_s: float,
    step_s: float,
    steady_lines: int,
    interval: int = 40,
    with_throughput: bool = True,
    start: datetime = datetime(2026, 1, 4, 7, 0, 0),
    rank_tag: str = "TP0",
) -> list[str]:
    """An SGLang log with millisecond timestamps: ``admissions`` Prefill lines spread over
    ``ramp_s``, then Decode lines every ``interval`` steps of ``step_s``, then a drain."""
    lines = []
    per = batch // admissions

    def stamp(t: float) -> str:
        moment = start + timedelta(seconds=t)
        return f"[{moment:%Y-%m-%d %H:%M:%S}.{moment.microsecond // 1000:03d} {rank_tag}]"

    for i in range(admissions):
        t = i * ramp_s / (admissions - 1)
        lines.append(
            f"{stamp(t)} Prefill batch, #new-seq: {per}, #new-token: {per * 1000}, #cached-token: 0, "
            f"token usage: 0.10, #running-req: {i * per}, #queue-req: {batch - (i + 1) * per}, "
        )
    t = ramp_s
    for _ in range(steady_lines):
        t += interval * step_s
        throughput = f"gen throughput (token/s): {batch / step_s:.2f}, " if with_throughput else ""
        lines.append(
            f"{stamp(t)} Decode batch, #running-req: {batch}, #token: 1000, token usage: 0.20, "
            f"cuda graph: True, {throughput}#queue-req: 0, "
        )
    remaining = batch
    while remaining > 1:
        remaining //= 2
        t += interval * step_s * 0.8
        lines.append(
            f"{stamp(t)} Decode batch, #running-req: {remaining}, #token: 10, token usage: 0.01, "
            f"cuda graph: True, gen throughput (token/s): {remaining / (step_s * 0.8):.2f}, #queue-req: 0, "
        )
    return lines


@pytest.mark.parametrize("with_throughput", [True, False])
def test_sglang_log_recovers_ramp_and_step(tmp_path: Path, with_throughput: bool) -> None:
    path = tmp_path / "server.log"
    step, ramp = 0.0438, 2.2
    path.write_text(
        "\n".join(
            sglang_log_lines(
                batch=32,
                admissions=8,
                ramp_s=ramp,
                step_s=step,
                steady_lines=20,
                with_throughput=with_throughput,
            )
        )
        + "\n"
    )
    (trace,) = load_traces(path)
    assert isinstance(trace, ServerTrace)
    assert trace.time_resolution_s == pytest.approx(0.001)
    (run,) = analyse_server_trace(trace, output_tokens=20 * 40 + 1)
    assert run.phase(PhaseKind.STEADY).span is not None and run.phase(PhaseKind.RAMP).span is not None and run.phase(PhaseKind.STEADY).token_s is not None
    assert run.shape.steady_batch == 32
    assert run.phase(PhaseKind.STEADY).token_s.median == pytest.approx(step, rel=0.01)
    assert run.admission.admission_span_s == pytest.approx(ramp, rel=0.01)
    # the batch is first seen full at the first Decode line, one interval after the last Prefill
    assert run.phase(PhaseKind.RAMP).span.duration_s == pytest.approx(ramp + 40 * step, rel=0.01)
    assert run.phase(PhaseKind.DRAIN).span is not None and run.phase(PhaseKind.DRAIN).span.duration_s > 0
    if with_throughput:
        assert "gen throughput" in run.timing.step_method and "imply 40 steps" in run.timing.step_method
    else:
        assert "Δt between Decode lines / 40" in run.timing.step_method
    rec = run.tokens.reconciliation
    assert rec is not None and rec.ramp_s == pytest.approx(ramp, rel=0.01)


def test_wrong_decode_log_interval_is_flagged(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(
        "\n".join(
            sglang_log_lines(
                batch=16, admissions=4, ramp_s=1.0, step_s=0.02, steady_lines=10, interval=100
            )
        )
        + "\n"
    )
    (trace,) = load_traces(path)
    assert isinstance(trace, ServerTrace)
    (run,) = analyse_server_trace(trace)  # the default, 40
    check = f"check {DECODE_LOG_INTERVAL.flag} ({DECODE_LOG_INTERVAL.default} is the default"
    assert any(check in note for note in run.findings.notes)
    (right,) = load_traces(path, LogReading(given={DECODE_LOG_INTERVAL.name: 100}))
    assert isinstance(right, ServerTrace)
    (run_right,) = analyse_server_trace(right)
    assert not any(DECODE_LOG_INTERVAL.flag in note for note in run_right.findings.notes)


def study_runs() -> list[AmortizationRun]:
    """The study's numbers: steady 43.80 / 43.83 ms, ramps 2.2 s / 0.7 s, N = 96 and 512."""
    runs = []
    for config, steady, ramp in (("page1", 0.04380, 2.2), ("page128", 0.04383, 0.7)):
        for n in (96, 512):
            runs.append(
                AmortizationRun(f"{config}-{n}", config, n, steady + ramp / (n - 1), steady)
            )
    return runs


def test_amortization_finds_a_fixed_ramp() -> None:
    results = {r.config: r for r in amortization_test(study_runs())}
    assert results["page1"].verdict == "fixed"
    assert results["page1"].fixed_cost_s == pytest.approx(2.2, rel=0.01)
    assert results["page128"].fixed_cost_s == pytest.approx(0.7, rel=0.01)
    gaps = {g.output_tokens: g for g in config_gaps(study_runs())}
    assert gaps[96].reported_gap == pytest.approx(0.308, abs=0.01)
    assert gaps[512].reported_gap == pytest.approx(0.064, abs=0.01)
    assert abs(gaps[96].steady_gap) < 0.001


def test_amortization_finds_a_per_token_cost() -> None:
    runs = [AmortizationRun(f"n{n}", "slow", n, 0.0438 + 0.016, 0.0438) for n in (96, 256, 512)]
    (result,) = amortization_test(runs)
    assert result.verdict == "per-token"
    assert result.per_token_cost_s == pytest.approx(0.016, rel=0.01)


def test_cli_amortization_over_four_recorded_runs(tmp_path: Path) -> None:
    paths = []
    for config, ramp in (("ps1", 2.2), ("ps128", 0.7)):
        for n in (96, 512):
            path = tmp_path / f"{config}_out{n}.jsonl"
            write_request_trace(
                path, batch=32, ramp_s=ramp, prefill_s=0.1, step_s=0.0438, output_tokens=n
            )
            paths.append(path)
    args = [str(p) for p in paths] + [
        "--label",
        "ps1",
        "--label",
        "ps1",
        "--label",
        "ps128",
        "--label",
        "ps128",
        "--json",
    ]
    result = CliRunner().invoke(cli, ["phases", *args])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    verdicts = {a["config"]: a for a in data["amortization"]}
    assert verdicts["ps1"]["verdict"] == "fixed"
    assert verdicts["ps1"]["fixed_cost_s"] == pytest.approx(2.2, rel=0.02)
    assert verdicts["ps128"]["fixed_cost_s"] == pytest.approx(0.7, rel=0.03)
    gap96 = next(g for g in data["gaps"] if g["output_tokens"] == 96)
    assert gap96["reported_gap"] > 0.25 and abs(gap96["steady_gap"]) < 0.01
    text = CliRunner().invoke(cli, ["phases", *args[:-1]])
    assert "fixed" in text.output and "amortization test" in text.output


def test_bench_json_without_start_times(tmp_path: Path) -> None:
    """bench_serving --output-details: ITLs of T with admission stalls early in each request."""
    step, n, stall = 0.040, 200, 3.0
    ttfts, itls = [], []
    for i in range(16):
        gaps = [step] * (n - 1)
        gaps[2] += stall * (16 - i) / 16  # waits for the admissions after its own
        ttfts.append(0.2 + 0.1 * i)
        itls.append(gaps)
    mean_tpot = sum((sum(g) / (n - 1)) for g in itls) / len(itls)
    result = {
        "backend": "sglang",
        "mean_tpot_ms": mean_tpot * 1000,
        "ttfts": ttfts,
        "itls": itls,
        "output_lens": [n] * 16,
        "errors": [""] * 16,
        "max_concurrency": 16,
    }
    path = tmp_path / "bench.jsonl"
    path.write_text(json.dumps(result) + "\n")
    (trace,) = load_traces(path)
    assert isinstance(trace, RequestTrace) and not trace.has_start_times
    run = analyse_request_trace(trace)
    assert run.phase(PhaseKind.STEADY).span is None and run.phase(PhaseKind.RAMP).span is None
    assert any("no per-request start times" in c for c in run.findings.cannot)
    assert run.phase(PhaseKind.STEADY).token_s is not None and run.phase(PhaseKind.STEADY).token_s.median == pytest.approx(
        step, rel=0.01
    )
    rec = run.tokens.reconciliation
    assert rec is not None and abs(rec.residual_share) < 0.01
    assert rec.ramp_s == pytest.approx(stall * sum(range(1, 17)) / 16 / 16, rel=0.01)
    plot = tmp_path / "bench.png"
    out = CliRunner().invoke(cli, ["phases", str(path), "--plot", str(plot)])
    assert out.exit_code == 0, out.output
    assert plot.stat().st_size > 10_000


def test_unlabelled_waves_in_one_jsonl_become_runs(tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_request_trace(first, batch=8, ramp_s=0.5, prefill_s=0.1, step_s=0.02, output_tokens=64)
    write_request_trace(
        second,
        batch=8,
        ramp_s=0.2,
        prefill_s=0.1,
        step_s=0.03,
        output_tokens=64,
        t0=1_700_000_100.0,
    )
    both = tmp_path / "waves.jsonl"
    both.write_text(first.read_text() + second.read_text())
    traces = load_traces(both)
    assert [t.run for t in traces] == ["waves #1", "waves #2"]
    steps = [analyse_request_trace(t).phase(PhaseKind.STEADY).token_s for t in traces if isinstance(t, RequestTrace)]
    assert steps[0] is not None and steps[0].median == pytest.approx(0.02, rel=0.01)
    assert steps[1] is not None and steps[1].median == pytest.approx(0.03, rel=0.01)


def test_vllm_stats_with_a_steady_window(tmp_path: Path) -> None:
    esc = "\x1b[1;36m"
    lines = []
    running = [8, 32, 64, 64, 64, 64, 64, 30, 0]
    prompt = [900.0, 2000.0, 1500.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    for i, (n, p) in enumerate(zip(running, prompt, strict=True)):
        gen = n / 0.020 if n else 0.0
        lines.append(
            f"{esc}(APIServer pid=1)\x1b[0;0m INFO 11-28 15:{30 + i // 6:02d}:{(i * 10) % 60:02d} "
            f"[loggers.py:236] Engine 000: Avg prompt throughput: {p:.1f} tokens/s, Avg generation "
            f"throughput: {gen:.1f} tokens/s, Running: {n} reqs, Waiting: {max(0, 64 - n) if p else 0} reqs, "
            "GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%"
        )
    path = tmp_path / "vllm.log"
    path.write_text("\n".join(lines) + "\n")
    (trace,) = load_traces(path)
    assert isinstance(trace, ServerTrace) and trace.engine == "vllm"
    (run,) = analyse_server_trace(trace)
    # the window ending at t=20 s still had prompts; the four windows after it did not
    assert run.phase(PhaseKind.STEADY).span is not None and run.phase(PhaseKind.STEADY).span.duration_s == pytest.approx(40.0)
    assert run.shape.steady_batch == 64
    assert run.phase(PhaseKind.STEADY).token_s is not None and run.phase(PhaseKind.STEADY).token_s.median == pytest.approx(
        0.020, rel=0.01
    )
    assert run.phase(PhaseKind.RAMP).span is not None and run.phase(PhaseKind.RAMP).span.duration_s == pytest.approx(20.0)
    assert any("no per-request times" in c for c in run.findings.cannot)


def test_run_analysis_is_its_part_records_with_no_field_families() -> None:
    """``RunAnalysis`` is its part records (identity, shape, admission, timing …), each
    given to ``assemble_run`` and kept whole, and its phases as records: no part and no
    segment has a field named ``<phase><suffix>`` (``PHASE_FIELDS``), the warm-up's split is
    one record (no ``warmup_`` family), and no two parts share a field name (a run's JSON
    key is the field of the one part that has it)."""
    import dataclasses
    import typing

    from ncuflow.phases.model import results

    whole = typing.get_type_hints(results.RunAnalysis)
    parts = {name: hint for name, hint in whole.items() if dataclasses.is_dataclass(hint)}
    assert set(whole) == set(parts) | {"phases"}
    assert set(typing.get_args(results.RunPart)) < set(parts.values())
    owner: dict[str, str] = {}
    for part_name, part in parts.items():
        for name in (f.name for f in dataclasses.fields(part)):
            assert name not in owner, f"{name} is in {owner.get(name)} and {part_name}"
            owner[name] = part_name
    for record in (*parts.values(), results.Segment):
        names = [f.name for f in dataclasses.fields(record)]
        # a segment's ramp is its RAMP phase's span, read through it (no field repeats a phase)
        assert not [name for name in names if results.phase_field(name)], record
        assert [name for name in names if name.startswith(results.WARMUP_PREFIX)] in ([], ["warmup_split"])
    assert len(owner) > 30
