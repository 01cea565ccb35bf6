"""The max model on real reports: u_dram against NVIDIA's figure, agreement with SOLBottleneck."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import ncu_report
import pytest

from ncuflow.analyze.classify import breakdown_group, classify, nvidia_category
from ncuflow.read.extract import iter_launches
from ncuflow.read.reportfile import find_reports

DRAM_PCT = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"


def _corpus_launches(corpus_dir: Path):
    for report in find_reports([corpus_dir]):
        yield from iter_launches(report)


def test_u_dram_equals_nvidias_dram_throughput(corpus_dir: Path) -> None:
    """NVIDIA's DRAM % divides by the peak at the DRAM clock measured over the launch; u_dram by
    dram_peak_bw (the rated peak for HBM, the measured one capped at the rated for GDDR): the
    same bytes over the same time once both are brought to one peak."""
    compared = 0
    for report in find_reports([corpus_dir]):
        context = ncu_report.load_report(str(report))
        for launch in iter_launches(report):
            action = context.range_by_idx(launch.range_index).action_by_idx(launch.action_index)
            metric = action.metric_by_name(DRAM_PCT)
            verdict = classify(launch)
            u_dram = verdict.utilization("dram")
            if metric is None or not metric.has_value() or u_dram is None:
                continue
            if verdict.term("dram").source != "dram_bytes / dram_peak_bw / duration":
                continue  # only the computed term is a check; the fallback *is* the metric
            compared += 1
            measured_peak = (action.metric_by_name("dram__bytes.sum.peak_sustained").value()
                             * action.metric_by_name("dram__cycles_elapsed.avg.per_second").value())
            peak = launch.value("dram_peak_bw")
            assert peak is not None and peak <= launch.value("dram_rated_bw") * 1.001  # type: ignore[operator]
            assert u_dram * peak == pytest.approx(metric.value() / 100.0 * measured_peak, rel=0.01, abs=1e4), (
                report.name, launch.action_index)
    assert compared >= 50, f"only {compared} launches had both; the check needs real coverage"


def test_agreement_with_nvidia_solbottleneck(corpus_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with_rule = agreeing = 0
    for launch in _corpus_launches(corpus_dir):
        verdict = classify(launch)
        if verdict.nvidia is None:
            continue
        with_rule += 1
        if verdict.nvidia.agrees:
            agreeing += 1
        else:
            assert verdict.nvidia.reason, "every disagreement must carry a reason"
    rate = agreeing / with_rule
    with capsys.disabled():
        print(f"\nSOLBottleneck agreement: {agreeing}/{with_rule} = {rate:.1%}")
    assert with_rule >= 300
    assert rate >= 0.95


def test_verdict_follows_the_largest_term_and_the_threshold(corpus_dir: Path) -> None:
    report = corpus_dir / "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep"
    launch = next(iter_launches(report))
    verdict = classify(launch)
    assert verdict.bound == "l1"  # a conv2d baseline hammering the L1 data pipe (u_l1 ≈ 0.98)
    assert verdict.utilization("l1") == pytest.approx(0.98, abs=0.01)
    assert verdict.term("l1").source == "l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed"
    # Above every term: nothing is on a wall.
    assert classify(launch, threshold=0.99).bound == "latency"
    assert verdict.nvidia is not None and verdict.nvidia.agrees


def test_an_action_with_no_counters_is_unknown_and_names_what_is_missing(corpus_dir: Path) -> None:
    launch = next(iter_launches(corpus_dir / "skycs97__darknet__profile.nsight-cuprof-report"))
    verdict = classify(launch)
    assert verdict.bound == "unknown"
    assert verdict.compared == ()
    assert "gpu__time_duration.sum" in (verdict.term("dram").unavailable or "")


def test_missing_terms_are_left_out_not_zero(corpus_dir: Path) -> None:
    launch = next(iter_launches(corpus_dir / "flyinglandlord__sglang__profile.ncu-rep"))
    stripped = replace(launch, breakdown={}, values={**launch.values, "tensor_pipe_pct": None})
    verdict = classify(stripped)
    assert verdict.utilization("math") is None
    assert "math" in verdict.unavailable
    assert verdict.bound in ("issue", "latency")


def test_breakdown_groups_and_rule_titles() -> None:
    assert breakdown_group("dram__cycles_active.avg.pct_of_peak_sustained_elapsed") == "dram"
    assert breakdown_group("fbpa__dram_sectors.avg.pct_of_peak_sustained_elapsed") == "dram"
    assert breakdown_group("lts__t_sectors.avg.pct_of_peak_sustained_elapsed") == "l2"
    assert breakdown_group("l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed") == "l1"
    assert breakdown_group("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed") == "math"
    assert breakdown_group("sm__pipe_tensor_op_dmma_cycles_active.avg.pct_of_peak_sustained_elapsed") == "math"
    assert breakdown_group("sm__issue_active.avg.pct_of_peak_sustained_elapsed") == "issue"
    assert breakdown_group("sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_elapsed") == "issue"
    assert nvidia_category("Latency Issue") == "latency"
    assert nvidia_category("Small Grid") == "latency"
    assert nvidia_category("High Memory Throughput") == "memory"
    assert nvidia_category("High Compute Throughput") == "compute"
    assert nvidia_category("Balanced Throughput") == "balanced"


def test_threshold_must_be_a_fraction(corpus_dir: Path) -> None:
    launch = next(iter_launches(corpus_dir / "flyinglandlord__sglang__profile.ncu-rep"))
    with pytest.raises(ValueError):
        classify(launch, threshold=60)
