"""The max model on real reports: u_dram against NVIDIA's figure, agreement with SOLBottleneck."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import ncu_report
import pytest

from ncuflow.analyze.classify import breakdown_group, classify, nvidia_category
from ncuflow.read.extract import iter_launches
from ncuflow.read.reportfile import find_reports

DRAM_PCT = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
H200 = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "h200"


def _corpus_launches(corpus_dir: Path):
    for report in find_reports([corpus_dir]):
        yield from iter_launches(report)


def test_u_dram_is_nvidias_dram_throughput_wherever_the_report_holds_it(corpus_dir: Path) -> None:
    """u_dram is NVIDIA's gpu__dram_throughput read as it is; where a report lacks it, the bytes
    over the peak whose provenance the source names (rated for HBM, measured for GDDR)."""
    compared = computed = 0
    for report in find_reports([corpus_dir, H200]):
        context = ncu_report.load_report(str(report))
        for launch in iter_launches(report):
            action = context.range_by_idx(launch.range_index).action_by_idx(launch.action_index)
            metric = action.metric_by_name(DRAM_PCT)
            term = classify(launch).term("dram")
            if metric is not None and metric.has_value() and math.isfinite(metric.as_double()):
                compared += 1
                assert term.utilization == pytest.approx(metric.as_double() / 100.0, rel=0.01), (report.name, launch.key)
            elif term.utilization is not None and term.source and term.source.startswith("dram_bytes"):
                computed += 1
                assert "peak = " in term.source  # the peak it divides by is named
    assert compared >= 150, f"only {compared} launches hold gpu__dram_throughput"


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
    assert rate >= 0.99


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
    assert breakdown_group("sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_elapsed") == "pipe"
    assert breakdown_group("sm__pipe_tma_cycles_active.avg.pct_of_peak_sustained_elapsed") == "pipe"  # NVIDIA: compute
    assert breakdown_group("sm__inst_executed.avg.pct_of_peak_sustained_elapsed") == "issue"
    assert breakdown_group("lts__ltcfabric2ltc_cycles_active.avg.pct_of_peak_sustained_elapsed") is None  # no wall
    assert nvidia_category("Latency Issue") == "latency"
    assert nvidia_category("Small Grid") == "latency"
    assert nvidia_category("High Memory Throughput") == "memory"
    assert nvidia_category("High Compute Throughput") == "compute"
    assert nvidia_category("Balanced Throughput") == "balanced"


def test_threshold_must_be_a_fraction(corpus_dir: Path) -> None:
    launch = next(iter_launches(corpus_dir / "flyinglandlord__sglang__profile.ncu-rep"))
    with pytest.raises(ValueError):
        classify(launch, threshold=60)


# ----------------------------------------------------------------------------- NVIDIA's classes


def test_every_unit_of_nvidias_two_lists_feeds_a_term_of_its_class(corpus_dir: Path) -> None:
    """The units of sm__throughput's breakdown feed compute terms (issue, pipe, math), those of
    gpu__compute_memory_throughput memory terms (dram, l2, l1): on every report that lists them."""
    from ncuflow.read.extract import iter_report
    from ncuflow.terms import category_of

    seen = 0
    for report in find_reports([corpus_dir]):
        for _, _, action in iter_report(report):
            for lists, category in (("sm__throughput", "compute"), ("gpu__compute_memory_throughput", "memory")):
                listing = action.text(f"breakdown:{lists}.avg.pct_of_peak_sustained_elapsed")
                for metric in (listing or "").split(","):
                    if metric:
                        seen += 1
                        assert category_of(breakdown_group(metric) or "") == category, (report.name, metric)
    assert seen > 10_000


def test_the_terms_of_each_class_give_nvidias_figure(corpus_dir: Path) -> None:
    """Where a report lists the units, the largest memory term is NVIDIA's memory figure and the
    largest compute term its compute figure: the verdict's class is the one NVIDIA's rule tests."""
    checked = 0
    for launch in _corpus_launches(corpus_dir):
        if not launch.breakdown or launch.nvidia_sol is None:
            continue
        verdict = classify(launch)
        for names, figure in ((("dram", "l2", "l1"), "memory_throughput_pct"),
                              (("issue", "pipe", "math"), "sm_throughput_pct")):
            top = max(verdict.utilization(n) or 0.0 for n in names)
            assert top * 100 == pytest.approx(launch.value(figure), abs=0.05), (launch.report, launch.key, figure)
        checked += 1
    assert checked >= 300


def test_a_tie_between_two_readings_of_one_unit_follows_nvidias_class(corpus_dir: Path) -> None:
    """AveryClapp's one_blocktiling on an A10G: l1tex__lsuin_requests and sm__inst_executed_pipe_lsu
    both read the LSU (0.6483 each); NVIDIA's compute figure equals its memory figure, and its rule
    tests compute first: the verdict is the LSU pipe, and says why."""
    launch = next(iter_launches(corpus_dir / "AveryClapp__ESMM-Research__profile_output.ncu-rep"))
    verdict = classify(launch)
    assert verdict.utilization("l1") == verdict.utilization("pipe")
    assert verdict.bound == "pipe" and verdict.tie is not None
    assert "both read the LSU" in verdict.tie and "compute" in verdict.tie
    assert verdict.term("pipe").unit == "LSU pipe"
    # where NVIDIA's memory figure were the larger, the same tie follows it to memory
    flipped = replace(launch, values={**launch.values, "memory_throughput_pct": 70.0, "sm_throughput_pct": 64.0})
    assert classify(flipped).bound == "l1"


def test_the_issue_term_is_issue_slots_and_a_pipe_is_reported_as_that_pipe(corpus_dir: Path) -> None:
    """thedavidchu's scan: the LSU pipe is at 0.49, the issue slots at 0.31."""
    launch = next(iter_launches(corpus_dir / "thedavidchu__speedy_scan__profile.ncu-rep"))
    verdict = classify(launch)
    assert verdict.utilization("issue") == pytest.approx(0.31, abs=0.01)
    assert verdict.term("issue").source == "sm__issue_active.avg.pct_of_peak_sustained_elapsed"
    assert verdict.utilization("pipe") == pytest.approx(0.49, abs=0.01) and verdict.term("pipe").unit == "LSU pipe"


def test_perfworks_puts_every_unit_of_every_chip_in_the_class_of_its_term() -> None:
    """For every chip Perfworks models, the counters of sm__throughput feed compute terms and those
    of gpu__compute_memory_throughput memory terms (NVIDIA's own breakdowns, any chip)."""
    from ncuflow.terms import category_of

    breakdowns = pytest.importorskip("tests.perfworks_breakdown")
    chips = breakdowns.chips_or_skip()
    for chip in chips:
        for top, category in (("sm__throughput", "compute"), ("gpu__compute_memory_throughput", "memory")):
            for counter in breakdowns.counters(chip, top):
                metric = f"{counter}.avg.pct_of_peak_sustained_elapsed"
                assert category_of(breakdown_group(metric) or "") == category, (chip, counter)


def test_nvidias_figures_leave_a_launch_undecided_where_an_uncollected_unit_could_bind() -> None:
    """The H200 copy of 16 MiB: its terms reach u 0.41, NVIDIA's memory figure 42.9 %: decided
    (latency either way). Were the memory figure 70 %, a memory unit the report lacks would be on a
    wall: tier 2 must be collected; were the compute figure the larger while ours is memory, too."""
    from ncuflow.analyze.classify import undecided

    report = next(H200.glob("copy_bandwidth/*mib16-*/*/report.ncu-rep"))
    launch = next(iter(iter_launches(report)))
    assert not undecided(classify(launch)) and classify(launch).bound == "latency"
    hidden_wall = replace(launch, values={**launch.values, "memory_throughput_pct": 70.0})
    assert undecided(classify(hidden_wall)) and classify(hidden_wall).bound == "latency"
    big = next(H200.glob("copy_bandwidth/*mib4096*/*/report.ncu-rep"))
    dram_bound = next(iter(iter_launches(big)))
    assert classify(dram_bound).bound == "dram" and not undecided(classify(dram_bound))
    other_class = replace(dram_bound, values={**dram_bound.values, "sm_throughput_pct": 95.0})
    assert undecided(classify(other_class))


def test_the_table_title_of_a_stored_run_breaks_between_its_spec_and_run_id() -> None:
    """The demo's classify title showed a literal backslash-n ("…splits=8\\nrun"): the line break
    between the cell spec and the run id was escaped with the user's text."""
    from click.testing import CliRunner

    from ncuflow.cli import cli

    run = sorted(H200.glob("paged_decode/*page16*/*/manifest.json"))[0].parent
    result = CliRunner().invoke(cli, ["classify", str(run)], terminal_width=170)
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines()]
    assert "\\n" not in result.output
    assert f"run {run.name}" in lines and any(line.endswith("splits=8") for line in lines), result.output[:600]


def test_as_if_titles_show_a_report_path_as_it_is(corpus_dir: Path, tmp_path: Path) -> None:
    """classify --as-if put the path into rich markup unescaped: '[bold]x.ncu-rep' showed as 'x.ncu-rep'."""
    import shutil

    from click.testing import CliRunner

    from ncuflow.cli import cli

    report = tmp_path / "[bold]x.ncu-rep"
    shutil.copyfile(corpus_dir / "yzwang2000__cudaCode__profile.ncu-rep", report)
    result = CliRunner().invoke(cli, ["classify", "--as-if", "decisive", str(report)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert str(report) in result.output
