"""ncu's "L2 Cache Throughput" (lts__throughput) settled by its units, on every launch that holds it."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.analyze.classify import classify
from ncuflow.cli import cli
from ncuflow.read.extract import iter_launches
from ncuflow.read.reportfile import find_reports
from ncuflow.read.throughputs import (
    L2_OUTSIDE_MEMORY_FIGURE,
    L2_THROUGHPUT_UNITS,
    is_wall,
    unit_term,
)

H200 = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "h200"
# compute capability -> the chips Perfworks names for it
CHIPS: dict[str, tuple[str, ...]] = {
    "7.5": ("tu102", "tu104", "tu106", "tu116", "tu117"), "8.0": ("ga100",),
    "8.6": ("ga102", "ga103", "ga104", "ga106", "ga107"), "8.7": ("ga10b",),
    "8.9": ("ad102", "ad103", "ad104", "ad106", "ad107"), "9.0": ("gh100",), "10.0": ("gb100", "gb102"),
    "10.3": ("gb110", "gb112"), "12.0": ("gb202", "gb203", "gb205", "gb206", "gb207"),
}


def _launches(*roots: Path):  # type: ignore[no-untyped-def]
    for report in find_reports(list(roots)):
        yield from iter_launches(report)


def test_every_launch_that_holds_lts_throughput_has_its_reading(corpus_dir: Path) -> None:
    held = above = 0
    for launch in _launches(corpus_dir, H200):
        reading = classify(launch).l2
        pct = launch.value("l2_throughput_pct")
        assert (reading is None) == (pct is None)
        if reading is None:
            continue
        held += 1
        assert reading.throughput == pct and reading.text().startswith(f"L2: lts__throughput {pct:.1f} %")
        data = [v for m, v in launch.breakdown.items() if unit_term(m) == "l2" and is_wall(m)]
        if data and pct > max(data) + 0.05:
            above += 1
            # set by a unit that is not a data-moving L2 unit of the report: only on chips that have one
            assert L2_OUTSIDE_MEMORY_FIGURE.get(launch.device.compute_capability or ""), (launch.report, launch.key)
            assert reading.wall is not True
    assert held >= 440 and above >= 150  # 356 corpus launches and the 91 of the H200 store


def test_where_the_report_lists_every_l2_unit_the_memory_figure_is_their_max(corpus_dir: Path) -> None:
    """NVIDIA's memory figure holds every L2 unit that moves data: above it, lts__throughput is set
    by one of the units it leaves out; on chips without such units the two readings agree."""
    for launch in _launches(corpus_dir):
        pct, memory = launch.value("l2_throughput_pct"), launch.value("memory_throughput_pct")
        if pct is None or memory is None or not launch.breakdown:
            continue
        outside = L2_OUTSIDE_MEMORY_FIGURE.get(launch.device.compute_capability or "")
        if outside == ():
            data = max(v for m, v in launch.breakdown.items() if unit_term(m) == "l2")
            assert pct == pytest.approx(data, abs=0.05), (launch.report, launch.key)


def test_the_h200_copy_reads_l2_above_the_memory_figure_and_no_wall() -> None:
    """Copy 4 GiB: lts__throughput 89 % while NVIDIA's memory figure is 84.6 % (DRAM): the unit
    setting it is the L2 fabric or the real-time port count, neither of them a wall; 16 MiB: 78 %
    against a memory figure of 42.9 %, latency-bound as before."""
    big = next(H200.glob("copy_bandwidth/*mib4096*/*/report.ncu-rep"))
    verdict = classify(next(iter(iter_launches(big))))
    assert verdict.bound == "dram" and verdict.l2 is not None
    assert verdict.l2.throughput == pytest.approx(89.3, abs=0.1) and verdict.l2.wall is False
    assert "lts__ltcfabric2ltc_cycles_active" in verdict.l2.reason and "neither of them a wall" in verdict.l2.reason
    small = next(H200.glob("copy_bandwidth/*mib16-*/*/report.ncu-rep"))
    verdict = classify(next(iter(iter_launches(small))))
    assert verdict.bound == "latency" and verdict.l2 is not None and verdict.l2.wall is False


def test_evidence_prints_the_l2_reading_of_every_launch_that_holds_it() -> None:
    report = next(H200.glob("paged_decode/*kvdistinct*page16*/*/report.ncu-rep"))
    result = CliRunner().invoke(cli, ["classify", str(report), "--evidence"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip().startswith("L2: lts__throughput")]
    assert len(lines) == 2, result.output  # the split kernel and the merge kernel


def test_the_units_outside_the_memory_figure_are_perfworks_own() -> None:
    """For every chip, lts__throughput's counters outside gpu__compute_memory_throughput's are the
    table's (Perfworks' breakdowns: NVPW_MetricsEvaluator_GetThroughputMetricProperties)."""
    breakdowns = pytest.importorskip("tests.perfworks_breakdown")
    known = set(breakdowns.chips_or_skip())
    checked = 0
    for capability, chips in CHIPS.items():
        for chip in (c for c in chips if c in known):
            lts = set(breakdowns.counters(chip, "lts__throughput"))
            memory = set(breakdowns.counters(chip, "gpu__compute_memory_throughput"))
            assert sorted(lts) == sorted(L2_THROUGHPUT_UNITS[capability]), chip
            assert sorted(lts - memory) == sorted(L2_OUTSIDE_MEMORY_FIGURE[capability]), chip
            checked += 1
    assert checked >= 20
