"""`profile --why` with the fake ncu: the why run (tier 3) is stored beside tier 2, names the run
it explains and its wall, and every reader merges it after tier 2 without changing a field
tier 1 holds; one of other launches is left out with a warning."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from analysis.report_edit import drop_metrics
from ncuflow import store
from ncuflow.profile.why import WHY_BY_WALL, binding_wall
from ncuflow.read.escalation import EscalationWarning, read_run_launches
from ncuflow.read.extract import read_launches
from ncuflow.store import tiers
from ncuflow.store.manifest import Escalation

FAKE = Path(__file__).resolve().parent / "fake_ncu" / "ncu"
UNDECIDED = "Syswea__cuda-fused-linear-layer__profile_report.ncu-rep"  # 3 launches, 2 undecided: tier 2 too
MIXED = "yzwang2000__cudaCode__profile.ncu-rep"  # every launch decided, two verdicts
DURATIONS_ONLY = "2388612861__GPU-DEMO__ncu_report.ncu-rep"  # every launch unknown
H100 = "AlpriElse__cs599k__rms_norm_matrix_ncu-reports_2025-04-21_v1.ncu-rep"  # 3 launches with DRAM bytes


def _profile(root: Path, report: Path, calls: Path, *why: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NCU": str(FAKE), "COLUMNS": "200", "FAKE_NCU_REPORT": str(report),
           "FAKE_NCU_CALLS": str(calls)}
    env.pop("FAKE_NCU_MODE", None)
    done = subprocess.run([sys.executable, "-m", "ncuflow", "profile", "copy_bandwidth:mib=16", "--why", *why,
                           "--store", str(root), "--chip", "gh100"], capture_output=True, text=True, timeout=300,
                          env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _profiles(calls: Path) -> list[list[str]]:
    return [argv for argv in map(json.loads, calls.read_text().splitlines()) if "--version" not in argv
            and "--list-metrics" not in argv]


@pytest.fixture()
def explained(corpus_dir: Path, tmp_path: Path) -> Path:
    """A store of one tier-1 run escalated to tier 2 and explained by a why run of `latency`."""
    root, calls = tmp_path / "store", tmp_path / "calls.jsonl"
    done = _profile(root, corpus_dir / UNDECIDED, calls, "latency")
    assert "leaves 2 of 3 launches undecided" in done.stdout and "stored tier 3 in" in done.stdout
    assert len(_profiles(calls)) == 3
    return root


def test_the_why_run_names_the_run_it_explains_and_collects_its_rows_sections(explained: Path, tmp_path: Path) -> None:
    (run,) = store.iter_runs(explained)
    (second,) = store.iter_runs(explained / tiers.TIER2_FOLDER)
    (third,) = store.iter_runs(explained / tiers.TIER3_FOLDER)
    assert third.manifest.provenance.escalation == Escalation(tier=3, of_run=run.run_id, wall="latency")
    options = third.manifest.collection.options
    assert options.sections == WHY_BY_WALL["latency"].sections and options.import_source and options.metric_set == "none"
    argv = _profiles(tmp_path / "calls.jsonl")[-1]
    assert [argv[i + 1] for i, arg in enumerate(argv) if arg == "--section"] == list(WHY_BY_WALL["latency"].sections)
    assert argv[argv.index("--import-source") + 1] == "yes" and "--metrics" not in argv
    assert tiers.escalations_of(run) == [(2, second), (3, third)]
    assert [r.run_id for r in store.iter_runs(explained)] == [run.run_id]  # neither escalation is a replica


def test_readers_merge_the_why_run_after_tier_two_keeping_tier_ones_fields(explained: Path, corpus_dir: Path) -> None:
    (run,) = store.iter_runs(explained)
    (second,) = store.iter_runs(explained / tiers.TIER2_FOLDER)
    (third,) = store.iter_runs(explained / tiers.TIER3_FOLDER)
    lacking_dram = lambda name: name.startswith("dram__")  # noqa: E731
    drop_metrics(corpus_dir / H100, run.report_path, lacking_dram)
    drop_metrics(corpus_dir / H100, second.report_path, lacking_dram)
    shutil.copyfile(corpus_dir / H100, third.report_path)
    first, merged = read_launches(run.report_path), read_run_launches(run)
    assert len(first) == len(merged) == 3
    for alone, both in zip(first, merged, strict=True):
        assert alone.value("dram_bytes") is None and both.value("dram_bytes") is not None  # from the why run
        assert {k: v for k, v in both.values.items() if k in alone.values and alone.values[k] is not None} == \
            {k: v for k, v in alone.values.items() if v is not None}  # tier 1's fields unchanged


def test_a_why_run_of_other_launches_is_left_out_with_a_warning(explained: Path, corpus_dir: Path) -> None:
    (run,) = store.iter_runs(explained)
    (third,) = store.iter_runs(explained / tiers.TIER3_FOLDER)
    shutil.copyfile(corpus_dir / MIXED, third.report_path)  # 2 launches of other kernels
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        merged = read_run_launches(run)
    said = [str(w.message) for w in caught if issubclass(w.category, EscalationWarning)]
    assert len(said) == 1 and "tier-3 escalation" in said[0] and "cannot be paired" in said[0]
    assert len(merged) == 3
    checked = subprocess.run([sys.executable, "-m", "ncuflow", "store", "check", str(explained)], capture_output=True,
                             text=True, timeout=300, check=False)
    assert "tier-3 escalation" in checked.stdout + checked.stderr


def test_without_a_wall_the_runs_own_verdict_picks_the_row(corpus_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "store"
    done = _profile(root, corpus_dir / MIXED, tmp_path / "calls.jsonl")
    (third,) = store.iter_runs(root / tiers.TIER3_FOLDER)
    wall = binding_wall(read_launches(corpus_dir / MIXED), 0.6)
    assert wall is not None and third.manifest.provenance.escalation is not None
    assert third.manifest.provenance.escalation.wall == wall
    assert third.manifest.collection.options.sections == WHY_BY_WALL[wall].sections
    assert f"profiling the why tier (tier 3) for {wall}:" in done.stdout


def test_a_run_whose_launches_are_all_unknown_gets_no_why_run(corpus_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "store"
    done = _profile(root, corpus_dir / DURATIONS_ONLY, tmp_path / "calls.jsonl")
    assert "no why tier" in done.stdout
    assert not (root / tiers.TIER3_FOLDER).exists()


def test_why_follows_only_the_decisive_collection(corpus_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, "NCU": str(FAKE), "FAKE_NCU_REPORT": str(corpus_dir / MIXED),
           "FAKE_NCU_CALLS": str(tmp_path / "calls.jsonl")}
    done = subprocess.run([sys.executable, "-m", "ncuflow", "profile", "copy_bandwidth:mib=16", "--set", "full", "--why",
                           "--store", str(tmp_path / "store")], capture_output=True, text=True, timeout=300, env=env,
                          check=False)
    assert done.returncode == 2 and "--why follows the decisive collection" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "calls.jsonl").exists()  # refused before ncu ran
