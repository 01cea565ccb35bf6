"""Sweep files: expansion, validation, resumable execution with the fake ncu."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from ncuflow import store
from ncuflow.errors import UsageError
from ncuflow.profile.ncu_errors import ApplicationFailed, CounterPermissionDenied
from ncuflow.profile.settings import ProfileSettings, SweepSettings
from ncuflow.profile.sweep import SweepPlan, load_sweep, parse_sweep
from ncuflow.profile.sweep_run import PointStatus, SweepContext, SweepOutcome, run_sweep

FAKE_NCU = Path(__file__).parent / "fake_ncu" / "ncu"
REPO = Path(__file__).resolve().parent.parent
SWEEPS = REPO / "analysis" / "sweeps"
REPORT_NAME = "yzwang2000__cudaCode__profile.ncu-rep"

SMALL = """
cell = "copy_bandwidth"
replicas = 2
timeout = 60
[fixed]
impl = "triton"
[axes]
mib = [16, 64, 256]
"""


@pytest.fixture()
def fake(corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / REPORT_NAME))
    monkeypatch.setenv("FAKE_NCU_CALLS", str(calls))
    monkeypatch.delenv("FAKE_NCU_MODE", raising=False)
    return calls


def _quiet() -> Console:
    return Console(file=io.StringIO(), force_terminal=False)


def _settings(root: Path) -> ProfileSettings:
    return ProfileSettings(store=root, ncu=str(FAKE_NCU))


def _run(plan: SweepPlan, root: Path, **sweep: Any) -> SweepOutcome:
    """One sweep through the library's one call: the plan, the two settings records."""
    return run_sweep(plan, _settings(root), SweepSettings(show_progress=False, **sweep), _quiet())


def point_status(plan: SweepPlan, root: Path) -> list[PointStatus]:
    return SweepContext(plan, _settings(root), SweepSettings(), _quiet()).statuses()


def _sweep_file(tmp_path: Path, text: str = SMALL) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(text)
    return path


def _profiles(calls: Path) -> list[list[str]]:
    if not calls.exists():
        return []
    return [c for c in (json.loads(line) for line in calls.read_text().splitlines()) if "--version" not in c]


# ----------------------------------------------------------------------------- parsing


def test_expansion_is_the_product_with_fixed_values(tmp_path: Path) -> None:
    plan = parse_sweep({"cell": "paged_decode", "replicas": 3, "fixed": {"batch": 8},
                        "axes": {"page": [16, 32, 64], "kv": ["shared", "distinct"]},
                        "ncu": {"metric_set": "full", "launch_count": 1, "cache_control": "none"}})
    assert len(plan.points) == 6 and plan.replicas == 3
    assert {(p.params["page"], p.params["kv"]) for p in plan.points} == {
        (pg, kv) for pg in (16, 32, 64) for kv in ("shared", "distinct")}
    assert all(p.params["batch"] == 8 for p in plan.points)
    assert len({p.content_key for p in plan.points}) == 6
    assert plan.options.metric_set == "full" and plan.options.launch_count == 1
    assert plan.options.cache_control == "none"


def test_points_with_the_same_key_are_profiled_once() -> None:
    # batch 32 is the default: both axis values name the same cell
    plan = parse_sweep({"cell": "copy_bandwidth", "axes": {"mib": [1024, 1024, 16]}})
    assert len(plan.points) == 2


@pytest.mark.parametrize("data", [
    {"axes": {"mib": [1]}},
    {"cell": "copy_bandwidth", "replicas": 0},
    {"cell": "copy_bandwidth", "timeout": -1},
    {"cell": "copy_bandwidth", "surprise": 1},
    {"cell": "copy_bandwidth", "axes": {"mib": []}},
    {"cell": "copy_bandwidth", "axes": {"mib": 16}},
    {"cell": "copy_bandwidth", "fixed": {"mib": 16}, "axes": {"mib": [16]}},
    {"cell": "copy_bandwidth", "ncu": {"replay": "kernel"}},
    {"cell": "copy_bandwidth", "ncu": {"replay_mode": "bogus"}},
    {"cell": "copy_bandwidth", "axes": {"nonexistent_param": [1]}},
    {"cell": "copy_bandwidth", "axes": {"impl": ["cuda"]}},
    {"cell": "no_such_cell"},
])
def test_bad_sweep_files_are_usage_errors(data: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        parse_sweep(data)


def test_toml_errors_are_usage_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("cell = \n")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_sweep(bad)
    with pytest.raises(UsageError, match="does not exist"):
        load_sweep(tmp_path / "missing.toml")


@pytest.mark.parametrize(("name", "points", "cell"), [
    ("flat_decode_layouts.toml", 6, "flat_decode"),
    ("paged_decode_pages.toml", 8, "paged_decode"),
    ("copy_bandwidth_sizes.toml", 3, "copy_bandwidth"),
])
def test_the_studys_sweeps_load(name: str, points: int, cell: str) -> None:
    plan = load_sweep(SWEEPS / name)
    # one run per point: the headline cells get their replicas from `stability --headline`
    assert plan.cell == cell and len(plan.points) == points and plan.replicas == 1
    assert plan.options.metric_set == "decisive"


# ----------------------------------------------------------------------------- running


def test_run_then_rerun_skips_everything(fake: Path, tmp_path: Path) -> None:
    plan = load_sweep(_sweep_file(tmp_path))
    root = tmp_path / "profiles"
    first = _run(plan, root)
    assert len(first.profiled) == 6 and first.skipped_points == 0
    runs = list(store.iter_runs(root))
    assert len(runs) == 6
    assert sorted(r.manifest.provenance.replica or 0 for r in runs) == [0, 0, 0, 1, 1, 1]
    assert all(r.manifest.provenance.sweep == plan.sweep() and r.ref.sweep == "small" for r in runs)
    assert all(r.ref.sweep_axes == ("mib",) for r in runs)
    again = _run(plan, root)
    assert again.profiled == [] and again.skipped_points == 3
    assert len(_profiles(fake)) == 6


def test_only_missing_replicas_are_profiled(fake: Path, tmp_path: Path, corpus_dir: Path) -> None:
    plan = load_sweep(_sweep_file(tmp_path))
    root = tmp_path / "profiles"
    first = plan.points[0]
    store.write_run(root, first.spec, corpus_dir / REPORT_NAME)
    assert [s.needed for s in point_status(plan, root)] == [1, 2, 2]
    outcome = _run(plan, root)
    assert len(outcome.profiled) == 5
    assert all(s.needed == 0 and s.done == 2 for s in point_status(plan, root))


def test_point_failures_stop_or_continue(fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = load_sweep(_sweep_file(tmp_path))
    monkeypatch.setenv("FAKE_NCU_MODE", "appfail")
    with pytest.raises(ApplicationFailed):
        _run(plan, tmp_path / "a")
    assert len(_profiles(fake)) == 1
    outcome = _run(plan, tmp_path / "b", keep_going=True)
    assert len(outcome.failures) == 3 and outcome.profiled == []


def test_a_stopping_failure_is_said_once_and_a_kept_going_one_once_a_point(
    fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from ncuflow.cli import cli

    monkeypatch.setenv("FAKE_NCU_MODE", "appfail")
    command = ["sweep", str(_sweep_file(tmp_path)), "--store", str(tmp_path / "profiles"), "--ncu", str(FAKE_NCU),
               "--no-escalate"]
    stopped = CliRunner().invoke(cli, command)
    assert isinstance(stopped.exception, ApplicationFailed) and "The sweep stopped" in stopped.output
    # the command's error handler says it (once); the sweep no longer says it first as well
    assert "The profiled program exited with code 1" not in stopped.output, stopped.output
    kept_going = CliRunner().invoke(cli, [*command, "--keep-going"])
    assert kept_going.exit_code == 3 and "3 failed" in kept_going.output
    assert kept_going.output.count("The profiled program exited with code 1") == 3, kept_going.output


def test_environment_errors_always_stop(fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = load_sweep(_sweep_file(tmp_path))
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    with pytest.raises(CounterPermissionDenied):
        _run(plan, tmp_path / "p", keep_going=True)
    assert len(_profiles(fake)) == 1


def test_interrupted_sweep_resumes_with_nothing_lost_or_doubled(fake: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in the middle of a profile, then the same command again."""
    sweep_file = _sweep_file(tmp_path)
    root = tmp_path / "profiles"
    monkeypatch.setenv("FAKE_NCU_SLEEP", "0.6")
    command = [sys.executable, "-m", "ncuflow", "sweep", str(sweep_file), "--store", str(root),
               "--ncu", str(FAKE_NCU)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    end = time.monotonic() + 60
    # wait until two runs are complete and a third is being written, then interrupt it
    while time.monotonic() < end:
        done = len(list(store.iter_runs(root)))
        writing = list(root.rglob(".tmp-*")) if root.exists() else []
        if done >= 2 and writing:
            break
        time.sleep(0.02)
    assert len(list(store.iter_runs(root))) >= 2
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, out
    assert "interrupted" in out.lower() and "Traceback" not in out
    before = {r.path for r in store.iter_runs(root)}
    assert 2 <= len(before) < 6
    assert list(root.rglob(".tmp-*")) == []
    calls_before = len(_profiles(fake))

    monkeypatch.setenv("FAKE_NCU_SLEEP", "0")
    again = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    runs = list(store.iter_runs(root))
    assert len(runs) == 6 and before <= {r.path for r in runs}
    plan = load_sweep(sweep_file)
    per_key: dict[str, list[int]] = {}
    for run in runs:
        per_key.setdefault(run.content_key, []).append(run.manifest.provenance.replica or 0)
    assert {k: sorted(v) for k, v in per_key.items()} == {p.content_key: [0, 1] for p in plan.points}
    # the re-run profiled exactly what was missing
    assert len(_profiles(fake)) - calls_before == 6 - len(before)
    assert list(root.rglob(".tmp-*")) == []


def test_sweep_cli_dry_run_lists_points(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ncuflow.cli import cli

    result = CliRunner().invoke(cli, ["sweep", str(_sweep_file(tmp_path)), "--dry-run",
                                      "--store", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    assert "mib=16" in result.output and "mib=256" in result.output
    assert "3 points, 6 profiles to run" in result.output
    assert not (tmp_path / "p").exists()


def test_every_study_sweep_collects_what_settles_l2_throughput() -> None:
    """The GPU study's sweeps (the H200 reference cells and FlashInfer/XQA) collect the decisive
    tier 1 and ncu's "L2 Cache Throughput" with every unit of it (``STUDY_METRICS``), and escalate."""
    from ncuflow.profile.escalation import escalates
    from ncuflow.read.metrics import STUDY_METRICS

    files = sorted(SWEEPS.glob("*.toml")) + sorted((SWEEPS / "flashinfer").glob("*.toml"))
    assert len(files) == 7
    for path in files:
        options = load_sweep(path).options
        assert options.metric_set == "decisive" and options.extra_metrics == STUDY_METRICS, path.name
        assert escalates(options), path.name
