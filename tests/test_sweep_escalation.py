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
from ncuflow.profile import escalation
from ncuflow.profile.ncu import decisive_metric_names
from ncuflow.profile.settings import EscalationPolicy, ProfileSettings, SweepSettings
from ncuflow.profile.sweep import load_sweep
from ncuflow.profile.sweep_run import SweepOutcome, run_sweep
from ncuflow.store.manifest import Escalation
from ncuflow.store.tiers import TIER2_FOLDER, tier2_runs_of
from ncuflow.terms import MODEL_VERSION

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


def _sweep(tmp_path: Path, escalate: bool = True) -> tuple[SweepOutcome, str]:
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP)
    out = io.StringIO()
    settings = ProfileSettings(store=tmp_path / "store", ncu=str(FAKE), escalation=EscalationPolicy(enabled=escalate))
    outcome = run_sweep(load_sweep(path), settings, SweepSettings(show_progress=False), Console(file=out, width=200))
    return outcome, out.getvalue()


def test_a_sweep_profiles_tier_two_for_undecided_runs_and_a_resume_finishes_what_a_stop_left(
    corpus_dir: Path, tmp_path: Path, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / UNDECIDED))
    outcome, text = _sweep(tmp_path)
    root = tmp_path / "store"
    runs = list(store.iter_runs(root))
    tier2 = list(store.iter_runs(root / TIER2_FOLDER))
    assert len(outcome.profiled) == 2 and len(outcome.escalated) == 2
    assert len(runs) == 2 and len(tier2) == 2 and _tier2_profiles(calls) == 2
    assert "tier 1 leaves 2 of 3 launches undecided" in text
    assert all(r.manifest.provenance.escalation == Escalation(tier=1, undecided=2, launches=3, model=MODEL_VERSION)
               for r in runs)
    assert {r.manifest.provenance.escalation.of_run for r in tier2 if r.manifest.provenance.escalation} == {
        r.run_id for r in runs}
    assert all(r.manifest.provenance.sweep and r.manifest.provenance.replica == 0 for r in tier2)
    assert not any((r.path / "escalation.json").exists() for r in runs)  # no sidecar, no write into a run
    # every reader sees each run with its escalation: 2 runs × 3 launches, not 4 runs
    rows = json.loads(CliRunner().invoke(cli, ["classify", str(root), "--json", "--jobs", "0"]).output)
    assert len(rows) == 6

    # a sweep stopped between a run's tier 1 and its tier 2: the resume profiles only that tier 2
    (lost,) = tier2_runs_of(runs[0])
    shutil.rmtree(lost.path)
    before = len(_profiles(calls))
    outcome, text = _sweep(tmp_path)
    assert len(outcome.profiled) == 0 and len(outcome.escalated) == 1
    assert len(_profiles(calls)) == before + 1 and _tier2_profiles(calls) == 3
    assert [r.manifest.provenance.escalation for r in tier2_runs_of(runs[0])] == [
        Escalation(tier=2, of_run=runs[0].run_id)]
    # and a complete sweep profiles nothing at all
    before = len(_profiles(calls))
    outcome, _ = _sweep(tmp_path)
    assert len(_profiles(calls)) == before and not outcome.escalated


def test_runs_are_judged_when_stored_so_a_later_sweep_reads_no_report(
    corpus_dir: Path, tmp_path: Path, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / DECIDED))
    _sweep(tmp_path, escalate=False)
    root = tmp_path / "store"
    runs = list(store.iter_runs(root))
    assert [r.manifest.provenance.escalation for r in runs] == [
        Escalation(tier=1, undecided=0, launches=2, model=MODEL_VERSION)] * 2

    def never(*args: object) -> None:
        raise AssertionError("a run judged when stored was read again")

    with monkeypatch.context() as patched:
        patched.setattr(escalation, "undecided_in_report", never)
        outcome, _ = _sweep(tmp_path)  # the first escalating sweep takes the judgement: nothing to profile
    assert not outcome.escalated and _tier2_profiles(calls) == 0
    assert not (root / TIER2_FOLDER).exists()
    rows = json.loads(CliRunner().invoke(cli, ["classify", str(root), "--json", "--jobs", "0"]).output)
    assert len(rows) == 4
    # a judgement made by another version of the model is made again (the report read anew)
    monkeypatch.setattr(escalation, "MODEL_VERSION", MODEL_VERSION + 1)
    assert all(escalation.needs_tier2(run) is None for run in runs)


def test_a_run_stored_without_a_judgement_is_read_and_judged_by_the_next_sweep(
    corpus_dir: Path, tmp_path: Path, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose report its GPU host could not read (no reader there), or from a store made before
    escalation: the next sweep reads it (in a worker) and profiles tier 2 where it is undecided."""
    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / UNDECIDED))
    monkeypatch.setattr(escalation, "judge", lambda launches, threshold: None)  # as if unread on the host
    _sweep(tmp_path, escalate=False)
    monkeypatch.undo()
    monkeypatch.setenv("FAKE_NCU_CALLS", str(calls))
    monkeypatch.setenv("NCU", str(FAKE))
    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / UNDECIDED))
    runs = list(store.iter_runs(tmp_path / "store"))
    assert all(r.manifest.provenance.escalation is None for r in runs)
    outcome, text = _sweep(tmp_path)
    assert len(outcome.escalated) == 2 and "tier 1 leaves 2 of 3 launches undecided" in text


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
    tier2 = list(store.iter_runs(root / TIER2_FOLDER))
    assert len(runs) == 2 and len(tier2) == 2
    assert {t.manifest.provenance.escalation.of_run for t in tier2 if t.manifest.provenance.escalation} == {
        r.run_id for r in runs}
    assert all(r.manifest.machine.node for r in [*runs, *tier2])  # made on a Ray node, shipped back
