"""Sweeps escalate to tier 2 as `profile` does: here and on Ray, resumably, once per run."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from ncuflow import store
from ncuflow.cli import cli
from ncuflow.profile.ncu import decisive_metric_names
from ncuflow.profile.sweep import load_sweep
from ncuflow.profile.sweep_escalation import sweep_here
from ncuflow.read.escalation import ESCALATION_FILE, ESCALATION_FOLDER

FAKE = Path(__file__).parent / "fake_ncu" / "ncu"
UNDECIDED = "Syswea__cuda-fused-linear-layer__profile_report.ncu-rep"  # 2 of its 3 launches undecided
DECIDED = "yzwang2000__cudaCode__profile.ncu-rep"  # every launch decided
SWEEP = """
cell = "copy_bandwidth"
replicas = 1
timeout = 60
[fixed]
impl = "triton"
[axes]
mib = [16, 64]
"""


@pytest.fixture()
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_NCU_CALLS", str(path))
    monkeypatch.setenv("NCU", str(FAKE))
    monkeypatch.delenv("FAKE_NCU_MODE", raising=False)
    return path


def _profiles(calls: Path) -> list[list[str]]:
    lines = calls.read_text().splitlines() if calls.exists() else []
    return [c for c in map(json.loads, lines) if "--version" not in c]


def _tier2_profiles(calls: Path) -> int:
    tier2 = ",".join(decisive_metric_names(2))
    return sum(1 for argv in _profiles(calls) if "--metrics" in argv and argv[argv.index("--metrics") + 1] == tier2)


def _sweep(tmp_path: Path, **kwargs: object) -> tuple[object, str]:
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP)
    out = io.StringIO()
    outcome = sweep_here(load_sweep(path), tmp_path / "store", ncu=str(FAKE), show_progress=False,
                        console=Console(file=out, width=200), **kwargs)  # type: ignore[arg-type]
    return outcome, out.getvalue()


def test_a_sweep_profiles_tier_two_for_undecided_runs_and_a_resume_finishes_what_a_stop_left(
    corpus_dir: Path, tmp_path: Path, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / UNDECIDED))
    outcome, text = _sweep(tmp_path)
    root = tmp_path / "store"
    runs = list(store.iter_runs(root))
    tier2 = list(store.iter_runs(root / ESCALATION_FOLDER))
    assert len(outcome.profiled) == 2 and len(outcome.escalated) == 2  # type: ignore[attr-defined]
    assert len(runs) == 2 and len(tier2) == 2 and _tier2_profiles(calls) == 2
    assert "tier 1 leaves 2 of 3 launches undecided" in text
    named = {json.loads((Path(r.path) / ESCALATION_FILE).read_text())["run_id"] for r in runs}
    assert named == {r.run_id for r in tier2}
    assert all(r.manifest.get("tier") == 2 and r.manifest.get("sweep") for r in tier2)
    # every reader sees each run with its escalation: 2 runs × 3 launches, not 4 runs
    rows = json.loads(CliRunner().invoke(cli, ["classify", str(root), "--json", "--jobs", "0"]).output)
    assert len(rows) == 6

    # a sweep killed after storing a tier-2 run but before naming it: the resume names that run
    first_tier2 = json.loads((Path(runs[0].path) / ESCALATION_FILE).read_text())
    (Path(runs[0].path) / ESCALATION_FILE).unlink()
    before = len(_profiles(calls))
    outcome, _ = _sweep(tmp_path)
    assert len(outcome.escalated) == 1 and len(_profiles(calls)) == before  # type: ignore[attr-defined]
    assert json.loads((Path(runs[0].path) / ESCALATION_FILE).read_text()) == first_tier2
    assert len(list(store.iter_runs(root / ESCALATION_FOLDER))) == 2  # not stored twice

    # a sweep stopped between a run's tier 1 and its tier 2: the resume profiles only that tier 2
    (Path(runs[0].path) / ESCALATION_FILE).unlink()
    shutil.rmtree(first_tier2["path"])
    before = len(_profiles(calls))
    outcome, text = _sweep(tmp_path)
    assert len(outcome.profiled) == 0 and len(outcome.escalated) == 1  # type: ignore[attr-defined]
    assert len(_profiles(calls)) == before + 1 and _tier2_profiles(calls) == 3
    # and a complete sweep profiles nothing at all
    before = len(_profiles(calls))
    outcome, _ = _sweep(tmp_path)
    assert len(_profiles(calls)) == before and not outcome.escalated  # type: ignore[attr-defined]


def test_runs_tier_one_decides_are_marked_once_and_no_escalate_leaves_them_alone(
    corpus_dir: Path, tmp_path: Path, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / DECIDED))
    _sweep(tmp_path, escalate=False)
    root = tmp_path / "store"
    runs = list(store.iter_runs(root))
    assert len(runs) == 2 and not any((Path(r.path) / ESCALATION_FILE).exists() for r in runs)
    outcome, _ = _sweep(tmp_path)  # the first escalating sweep checks them: nothing to profile
    assert not outcome.escalated and _tier2_profiles(calls) == 0  # type: ignore[attr-defined]
    assert not (root / ESCALATION_FOLDER).exists()
    markers = [json.loads((Path(r.path) / ESCALATION_FILE).read_text()) for r in runs]
    assert markers == [{"tier": 2, "needed": False, "launches": 2}] * 2
    stamps = [(Path(r.path) / ESCALATION_FILE).stat().st_mtime_ns for r in runs]
    _sweep(tmp_path)
    assert [(Path(r.path) / ESCALATION_FILE).stat().st_mtime_ns for r in runs] == stamps  # not read again
    rows = json.loads(CliRunner().invoke(cli, ["classify", str(root), "--json", "--jobs", "0"]).output)
    assert len(rows) == 4  # the marker is no escalation to merge


def test_a_ray_sweep_escalates_in_a_second_round_of_tasks(corpus_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(SWEEP)
    root = tmp_path / "store"
    env = {**os.environ, "NCU": str(FAKE), "FAKE_NCU_REPORT": str(corpus_dir / UNDECIDED), "COLUMNS": "200",
           "FAKE_NCU_CALLS": str(tmp_path / "calls.jsonl"), "RAY_DEDUP_LOGS": "0"}
    done = subprocess.run([sys.executable, "-m", "ncuflow", "sweep", str(sweep), "--store", str(root),
                           "--ray-local-gpus", "2", "--ncu", str(FAKE)],
                          capture_output=True, text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 profiled, 2 escalated to tier 2" in done.stdout
    runs = list(store.iter_runs(root))
    tier2 = list(store.iter_runs(root / ESCALATION_FOLDER))
    assert len(runs) == 2 and len(tier2) == 2
    assert {json.loads((Path(r.path) / ESCALATION_FILE).read_text())["run_id"] for r in runs} == {
        r.run_id for r in tier2}
    assert all(r.manifest.get("tier") == 2 and r.manifest.get("ray_node") for r in tier2)
