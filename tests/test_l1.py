"""ncu's "L1/TEX Cache Throughput" (l1tex__throughput) settled by its units, on every launch that holds it
(``ncuflow.analyze.l1``), mirroring the L2 reading (tests/test_l2.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.analyze.classify import classify
from ncuflow.analyze.l1 import EXCEEDS
from ncuflow.cli import cli
from ncuflow.read.extract import iter_launches
from ncuflow.read.reportfile import find_reports
from ncuflow.read.throughputs import L1_IN_MEMORY_FIGURE, L1_OUTSIDE_MEMORY_FIGURE
from tests.test_l2 import CHIPS

H200 = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "h200"
T4 = "armleth__cuda-mlp-inference__report.ncu-rep"


def _launches(*roots: Path):  # type: ignore[no-untyped-def]
    for report in find_reports(list(roots)):
        yield from iter_launches(report)


def test_every_launch_that_holds_l1tex_throughput_has_its_reading(corpus_dir: Path) -> None:
    held = exceeds = 0
    for launch in _launches(corpus_dir, H200):
        verdict = classify(launch)
        pct = launch.value("l1_throughput_pct")
        assert (verdict.l1 is None) == (pct is None)
        if verdict.l1 is None:
            continue
        held += 1
        assert verdict.l1.throughput == pct and verdict.l1.text().startswith(f"L1: l1tex__throughput {pct:.1f} %")
        assert verdict.l1.text() in verdict.evidence_lines()
        u_l1 = verdict.utilization("l1") or 0.0
        if pct - 100 * u_l1 > EXCEEDS:
            exceeds += 1
            # why: set by a unit the model's term leaves out (a TPC count: no wall), or one not in the report
            assert verdict.l1.wall is not True, (launch.report, launch.key)
            assert "leaves out" in verdict.l1.reason or "not in the report" in verdict.l1.reason
            # u_l1 does not take it: it would change no verdict, each such launch being under the threshold
            assert pct / 100 < verdict.threshold and "cannot change the verdict" in verdict.l1.reason
    assert held >= 100 and exceeds >= 8


def test_a_t4_l1_reading_above_u_l1_is_a_tpc_count_and_no_wall(corpus_dir: Path) -> None:
    """A T4 MLP: l1tex__throughput 46.8 % where u_l1 is 0.28: Turing's l1tex__throughput holds TPC-level
    counts (the L1s of two SMs against one L1's peak), which NVIDIA's memory figure leaves out."""
    launch = next(iter_launches(corpus_dir / T4))
    verdict = classify(launch)
    assert launch.device.compute_capability == "7.5" and verdict.l1 is not None
    assert verdict.l1.throughput == pytest.approx(46.79, abs=0.01) and verdict.utilization("l1") == pytest.approx(0.278, abs=0.001)
    assert verdict.l1.wall is False and "TPC-level count" in verdict.l1.reason
    assert "≈ 2 × l1tex__data_pipe_lsu_wavefronts 23.4 %" in verdict.l1.reason
    assert verdict.nvidia is not None and verdict.nvidia.agrees  # NVIDIA's rule reads the memory figure too


def test_evidence_prints_the_l1_reading_of_every_launch_that_holds_it(corpus_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["classify", str(corpus_dir / T4), "--evidence"], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert [line for line in result.output.splitlines() if line.strip().startswith("L1: l1tex__throughput 46.8 %")]
    report = next(H200.glob("paged_decode/*kvdistinct*page16*/*/report.ncu-rep"))
    result = CliRunner().invoke(cli, ["classify", str(report), "--evidence"], terminal_width=250)
    lines = [line for line in result.output.splitlines() if line.strip().startswith("L1: l1tex__throughput")]
    assert len(lines) == 2, result.output  # the split kernel and the merge kernel


def test_the_l1_units_in_and_outside_the_memory_figure_are_perfworks_own() -> None:
    breakdowns = pytest.importorskip("tests.perfworks_breakdown")
    known = set(breakdowns.chips_or_skip())
    checked = 0
    for capability, chips in CHIPS.items():
        if capability not in L1_OUTSIDE_MEMORY_FIGURE:
            continue
        for chip in (c for c in chips if c in known):
            l1 = set(breakdowns.counters(chip, "l1tex__throughput"))
            memory = set(breakdowns.counters(chip, "gpu__compute_memory_throughput"))
            assert sorted(l1 & memory) == sorted(L1_IN_MEMORY_FIGURE[capability]), chip
            assert sorted(l1 - memory) == sorted(L1_OUTSIDE_MEMORY_FIGURE[capability]), chip
            checked += 1
    assert checked >= 20
