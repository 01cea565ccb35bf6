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

from analysis.report_edit import drop_metrics
from ncuflow import store
from ncuflow.cli import cli
from ncuflow.read.escalation import EscalationWarning, read_run_launches, with_escalations
from ncuflow.read.extract import read_launches
from ncuflow.read.runs import load_paths
from ncuflow.store import tiers

FAKE = Path(__file__).resolve().parent / "fake_ncu" / "ncu"
TIER1 = "Syswea__cuda-fused-linear-layer__profile_report.ncu-rep"  # 3 launches, 2 of them undecided: escalated
TIER2 = "AlpriElse__cs599k__rms_norm_matrix_ncu-reports_2025-04-21_v1.ncu-rep"  # 3 launches with DRAM bytes


@pytest.fixture()
def escalated_store(corpus_dir: Path, tmp_path: Path) -> Path:
    """A store profiled with the fake ncu: one tier-1 run, escalated to one tier-2 run; then both
    reports are swapped for one 3-launch report of one GPU, tier 1's without its DRAM counters
    (``analysis.report_edit.drop_metrics``), so that the merge is visible: the same launches on the
    same device, tier 1 without DRAM byte counts, tier 2 with them."""
    root = tmp_path / "store"
    env = {**os.environ, "NCU": str(FAKE), "COLUMNS": "200", "FAKE_NCU_REPORT": str(corpus_dir / TIER1)}
    done = subprocess.run([sys.executable, "-m", "ncuflow", "profile", "copy_bandwidth:mib=16", "--store", str(root),
                           "--chip", "gh100"], capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert "leaves 2 of 3 launches undecided" in done.stdout
    (tier2,) = store.iter_runs(root / ".tier2")
    (tier1,) = store.iter_runs(root)
    shutil.copyfile(corpus_dir / TIER2, tier2.report_path)
    drop_metrics(corpus_dir / TIER2, tier1.report_path, lambda name: name.startswith("dram__"))
    return root


def _tier1(root: Path) -> store.RunRecord:
    (run,) = store.iter_runs(root)
    escalation = run.manifest.provenance.escalation
    assert escalation is not None and escalation.tier == 1 and escalation.undecided == 2 and escalation.launches == 3
    return run


def test_the_tiers_are_named_in_their_manifests_not_in_a_sidecar(escalated_store: Path) -> None:
    run = _tier1(escalated_store)
    (tier2,) = store.iter_runs(escalated_store / ".tier2")
    assert tier2.manifest.provenance.escalation == store.manifest.Escalation(tier=2, of_run=run.run_id)
    assert tiers.tier2_runs_of(run) == [tier2]
    assert not (run.path / "escalation.json").exists()  # nothing is written into a committed run


def test_classify_and_export_of_a_store_read_each_run_with_its_escalation(escalated_store: Path, tmp_path: Path) -> None:
    tier1 = read_launches(_tier1(escalated_store).report_path)
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
    merged = read_run_launches(_tier1(escalated_store))
    assert frame["dram_bytes"].to_list() == [launch.values["dram_bytes"] for launch in merged]

    loaded = load_paths([escalated_store], jobs=None)
    assert [launch.values["dram_bytes"] for run in loaded.runs for launch in run.launches] == frame["dram_bytes"].to_list()


def test_a_moved_store_still_finds_its_tier_two_run(escalated_store: Path, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere" / "store"
    shutil.copytree(escalated_store, moved)
    shutil.rmtree(escalated_store)
    launches = read_run_launches(_tier1(moved))
    assert all(launch.values["dram_bytes"] is not None for launch in launches)


def test_a_store_copied_without_its_tier_two_folder_reads_tier_one(escalated_store: Path) -> None:
    shutil.rmtree(escalated_store / ".tier2")
    run = _tier1(escalated_store)
    assert read_run_launches(run) == read_launches(run.report_path)
    result = CliRunner().invoke(cli, ["classify", str(escalated_store), "--json", "--jobs", "0"])
    assert result.exit_code == 0 and len(json.loads(result.stdout)) == 3


def test_a_tier_two_run_of_another_launch_count_is_named_and_tier_one_used(escalated_store: Path,
                                                                           corpus_dir: Path) -> None:
    (tier2,) = store.iter_runs(escalated_store / ".tier2")
    shutil.copyfile(corpus_dir / "yzwang2000__cudaCode__profile.ncu-rep", tier2.report_path)
    run = _tier1(escalated_store)
    with pytest.warns(EscalationWarning, match="cannot be paired"):
        launches = with_escalations(run, read_launches(run.report_path))
    assert launches == read_launches(run.report_path)


def _as_schema_2(run: store.RunRecord, data: dict[str, object]) -> None:
    """Rewrite a run's manifest as an ncuflow before schema 3 wrote it (flat keys)."""
    manifest = run.manifest
    flat = {"schema_version": 2, "cell": manifest.cell, "params": dict(manifest.params),
            "content_key": manifest.content_key, "run_id": manifest.run_id, "metric_set": "decisive",
            "replica": 0, **data}
    (run.path / store.MANIFEST_NAME).write_text(json.dumps(flat))


def test_a_schema_two_store_with_its_escalation_sidecar_still_reads_both_tiers(escalated_store: Path) -> None:
    """Before schema 3 the tier-1 run held escalation.json naming the tier-2 run, and the tier-2
    manifest said escalation_of: both are still read."""
    run = _tier1(escalated_store)
    (tier2,) = store.iter_runs(escalated_store / ".tier2")
    _as_schema_2(run, {})
    _as_schema_2(tier2, {"escalation_of": run.run_id, "tier": 2})
    (run.path / "escalation.json").write_text(json.dumps({"tier": 2, "run_id": tier2.run_id, "path": "/gone"}))
    (old,) = store.iter_runs(escalated_store)
    assert old.manifest.schema_version == 2 and old.manifest.provenance.escalation is None
    launches = read_run_launches(old)
    assert all(launch.values["dram_bytes"] is not None for launch in launches)
    from ncuflow.profile.escalation import needs_tier2

    assert needs_tier2(old) is False  # decided before schema 3: its sidecar says so


def test_an_unreadable_escalation_sidecar_is_named_and_tier_one_used(escalated_store: Path) -> None:
    run = _tier1(escalated_store)
    _as_schema_2(run, {})
    shutil.rmtree(escalated_store / ".tier2")
    (run.path / "escalation.json").write_text("[1, 2")
    (old,) = store.iter_runs(escalated_store)
    with pytest.warns(EscalationWarning, match=r"escalation\.json cannot be read: it is not valid JSON"):
        launches = read_run_launches(old)
    assert launches == read_launches(old.report_path)
