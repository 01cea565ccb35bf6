"""A store run and its tier-2 escalation are read as one by every reading command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from ncuflow import store
from ncuflow.cli import cli
from ncuflow.read.escalation import ESCALATION_FILE, EscalationWarning, with_escalation
from ncuflow.read.extract import read_launches
from ncuflow.read.runs import load_store

FAKE = Path(__file__).resolve().parent / "fake_ncu" / "ncu"
TIER1 = "Syswea__cuda-fused-linear-layer__profile_report.ncu-rep"  # 3 launches, 2 of them undecided
TIER2 = "AlpriElse__cs599k__rms_norm_matrix_ncu-reports_2025-04-21_v1.ncu-rep"  # 3 launches with DRAM bytes


@pytest.fixture()
def escalated_store(corpus_dir: Path, tmp_path: Path) -> Path:
    """A store profiled with the fake ncu: one tier-1 run, escalated to one tier-2 run whose
    report is then swapped for another 3-launch report, so that the merge is visible
    (tier 1 has no DRAM byte counts; the stand-in for tier 2 has them)."""
    root = tmp_path / "store"
    env = {**os.environ, "NCU": str(FAKE), "COLUMNS": "200", "FAKE_NCU_REPORT": str(corpus_dir / TIER1)}
    done = subprocess.run([sys.executable, "-m", "ncuflow", "profile", "copy_bandwidth:mib=16", "--store", str(root),
                           "--chip", "gh100"], capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert "leaves 2 of 3 launches undecided" in done.stdout
    (tier2,) = store.iter_runs(root / ".tier2")
    shutil.copyfile(corpus_dir / TIER2, tier2.report_path)
    return root


def _tier1_report(root: Path) -> Path:
    (run,) = store.iter_runs(root)
    assert (Path(run.path) / ESCALATION_FILE).is_file()
    return run.report_path


def test_classify_and_export_of_a_store_read_each_run_with_its_escalation(escalated_store: Path, tmp_path: Path) -> None:
    tier1 = read_launches(_tier1_report(escalated_store))
    assert all(launch.values["dram_bytes"] is None for launch in tier1)

    rows = json.loads(CliRunner().invoke(cli, ["classify", str(escalated_store), "--json", "--jobs", "0"]).output)
    assert len(rows) == 3  # the tier-2 run is not a run of its own
    assert all(row["l2_hit_rate_pct"] is not None and "dram_bytes" not in row["missing"] for row in rows)  # tier 2's

    output = tmp_path / "launches.parquet"
    result = CliRunner().invoke(cli, ["export", str(escalated_store), "-o", str(output), "--jobs", "2"])
    assert result.exit_code == 0, result.output
    frame = pl.read_parquet(output)
    assert frame.height == 3 and frame["dram_bytes"].null_count() == 0
    assert set(frame["src_duration_ns"]) == {"gpu__time_duration.sum"}  # tier 1 keeps what it holds
    merged = with_escalation(_tier1_report(escalated_store), tier1)
    assert frame["dram_bytes"].to_list() == [launch.values["dram_bytes"] for launch in merged]

    loaded = load_store(escalated_store, jobs=None)
    assert [launch.values["dram_bytes"] for run in loaded.runs for launch in run.launches] == frame["dram_bytes"].to_list()


def test_a_moved_store_still_finds_its_tier_two_run(escalated_store: Path, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere" / "store"
    shutil.copytree(escalated_store, moved)
    shutil.rmtree(escalated_store)  # escalation.json's path now leads nowhere
    launches = with_escalation(_tier1_report(moved), read_launches(_tier1_report(moved)))
    assert all(launch.values["dram_bytes"] is not None for launch in launches)


def test_a_missing_tier_two_run_is_named_and_tier_one_used_alone(escalated_store: Path) -> None:
    shutil.rmtree(escalated_store / ".tier2")
    report = _tier1_report(escalated_store)
    with pytest.warns(EscalationWarning, match=r"tier-2 escalation is not used: .*not there.*Copy \.tier2/"):
        launches = with_escalation(report, read_launches(report))
    assert launches == read_launches(report)
    result = CliRunner().invoke(cli, ["classify", str(escalated_store), "--json", "--jobs", "0"])
    assert result.exit_code == 0 and len(json.loads(result.stdout)) == 3
    assert "tier-2 escalation is not used" in result.stderr
