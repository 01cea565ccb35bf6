"""Why a latency-bound launch waits: occupancy, its limiter and the stall reasons, on real reports."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.analyze.classify import classify
from ncuflow.analyze.waiting import occupancy_of, stall_shares, why_waiting
from ncuflow.cli import cli
from ncuflow.read.extract import iter_launches
from tests.corpus import full_set_reports

CUTLASS = "panjd123__cutlass__report.ncu-rep"  # A100, 3 latency-bound GEMM launches, full set
SPY = "spymaster2h__spyinfer__report.ncu-rep"  # A10, default set: occupancy but no stall reasons


def test_every_latency_bound_full_set_launch_gets_occupancy_and_stalls(corpus_dir: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        launches = [x for p in full_set_reports(corpus_dir) for x in iter_launches(p)]
    latency = [x for x in launches if classify(x).bound == "latency"]
    assert len(latency) >= 10
    for launch in latency:
        waiting = why_waiting(launch)
        assert waiting.occupancy is not None and waiting.occupancy.limiters, launch.report
        assert waiting.occupancy.achieved_pct is not None
        assert waiting.stalls and waiting.absent == ()
        shares = [s.share for s in waiting.stalls]
        assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1.0 + 1e-9
        assert all(s.reason != "selected" for s in waiting.stalls)


def test_the_cutlass_gemm_is_limited_by_registers_and_shared_memory(corpus_dir: Path) -> None:
    first = next(iter(iter_launches(corpus_dir / CUTLASS)))
    occupancy = occupancy_of(first)
    assert occupancy is not None
    assert occupancy.limiters == ("registers", "shared_mem") and occupancy.blocks_per_sm == 2
    assert occupancy.theoretical_pct == pytest.approx(12.5) and occupancy.achieved_pct == pytest.approx(6.0, abs=0.1)
    assert "8 of 64 warps" in occupancy.text()
    assert [s.reason for s in stall_shares(first)][:2] == ["wait", "long_scoreboard"]


def test_classify_evidence_says_why_and_what_is_absent(corpus_dir: Path) -> None:
    full = CliRunner().invoke(cli, ["classify", "--evidence", str(corpus_dir / CUTLASS)])
    assert full.exit_code == 0, full.output
    assert full.output.count("why it waits, occupancy:") == 3 and full.output.count("why it waits, warp stalls:") == 3
    default = CliRunner().invoke(cli, ["classify", "--evidence", str(corpus_dir / SPY)])
    assert default.exit_code == 0
    assert "why it waits, occupancy: achieved" in default.output
    assert "not in the report: warp-stall reasons" in default.output
    assert "`ncuflow passes --collection stalls` prices them" in default.output
    # a launch on a wall gets no such line
    naive = CliRunner().invoke(cli, ["classify", "--evidence", str(corpus_dir / "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep")])
    assert "why it waits" not in naive.output


def test_the_collections_that_price_the_absent_counters_exist() -> None:
    from ncuflow.profile.passes import get_collection
    from ncuflow.read.deep_metrics import OCCUPANCY_METRICS, STALL_METRICS

    assert get_collection("stalls").metrics == STALL_METRICS
    assert get_collection("occupancy").metrics == OCCUPANCY_METRICS
    assert "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio" in STALL_METRICS
