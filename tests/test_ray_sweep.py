"""Sweeps on Ray with the fake ncu: a local Ray instance that declares GPUs (no GPU needed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow import store
from ncuflow.cli import cli
from ncuflow.files.owner import owner_tag, place_token
from ncuflow.profile.plan import CellTarget, ProfileJob
from ncuflow.profile.ray_sweep import (
    SHIPPED_LOG_BYTES,
    ShippedRun,
    commit_shipped,
    log_to_ship,
    profile_point_task,
    ray_doctor_checks,
    remove_dead_scratch,
)
from ncuflow.profile.settings import ProfileSettings
from ncuflow.profile.sweep import load_sweep
from ncuflow.store.manifest import Provenance

REPO = Path(__file__).resolve().parent.parent
FAKE_NCU = REPO / "tests" / "fake_ncu" / "ncu"
REPORT_NAME = "yzwang2000__cudaCode__profile.ncu-rep"
TWELVE = """
cell = "copy_bandwidth"
replicas = 1
timeout = 120
[fixed]
impl = "triton"
[axes]
mib = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
"""


def _have_ray() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


needs_ray = pytest.mark.skipif(not _have_ray(), reason="Ray is not installed (pip install 'ncuflow[ray]'); "
                                                       "`make test` installs it")


@pytest.fixture()
def fake_env(corpus_dir: Path, tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"FAKE_NCU_REPORT": str(corpus_dir / REPORT_NAME), "FAKE_NCU_CALLS": str(tmp_path / "calls.jsonl"),
                "RAY_AUTH_MODE": "disabled"})
    env.pop("FAKE_NCU_MODE", None)
    return env


def _profile_calls(calls: Path) -> int:
    if not calls.exists():
        return 0
    return sum(1 for line in calls.read_text().splitlines() if "--version" not in json.loads(line))


def _task_workers_running_ncu() -> list[int]:
    """Ray worker processes (titled ray::<function> by Ray) in the middle of a profile: ncu is their child."""
    titles: dict[int, bytes] = {}
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                titles[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes()
                parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    workers = {pid for pid, title in titles.items() if title.startswith(b"ray::profile_point_task")}
    found: set[int] = set()
    for pid, title in titles.items():
        if b"fake_ncu" not in title or b"--export" not in title or b"supervise" in title:
            continue  # the (fake) ncu itself, running: its call is already logged
        ancestor = parents.get(pid)
        for _ in range(3):  # ncu runs under ncuflow's supervisor, a child of the task worker
            if ancestor is None or ancestor in workers:
                break
            ancestor = parents.get(ancestor)
        if ancestor in workers:
            found.add(ancestor)
    return sorted(found)


@needs_ray
@pytest.mark.slow
def test_a_ray_sweep_survives_a_killed_worker_and_resumes(tmp_path: Path, fake_env: dict[str, str]) -> None:
    sweep = tmp_path / "twelve.toml"
    sweep.write_text(TWELVE)
    root = tmp_path / "profiles"
    command = [sys.executable, "-m", "ncuflow", "sweep", str(sweep), "--store", str(root), "--ncu", str(FAKE_NCU),
               "--ray-local-gpus", "2"]
    env = {**fake_env, "FAKE_NCU_SLEEP": "1.0"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env)
    killed = None
    deadline = time.monotonic() + 150
    first_seen: dict[int, float] = {}
    while time.monotonic() < deadline and proc.poll() is None and killed is None:
        now = time.monotonic()
        workers = _task_workers_running_ncu()
        first_seen = {pid: first_seen.get(pid, now) for pid in workers}
        # a worker whose ncu has run for 0.3 s (of its 1 s): past its start, its call is logged
        settled = [pid for pid, since in first_seen.items() if now - since >= 0.3]
        if settled and len(list(store.iter_runs(root))) >= 2:
            killed = settled[0]
            os.kill(killed, signal.SIGKILL)  # a worker dies in the middle of a profile
        time.sleep(0.05)
    out, _ = proc.communicate(timeout=180)
    assert killed is not None, "no Ray worker was seen running a profile:\n" + out
    assert proc.returncode == 0, out
    runs = list(store.iter_runs(root))
    plan = load_sweep(sweep)
    assert len(runs) == 12
    assert sorted(r.content_key for r in runs) == sorted(p.content_key for p in plan.points)  # each point once
    assert list(root.rglob(".tmp-*")) == [] and list(root.rglob(".failed-*")) == []
    assert {r.manifest.machine.cuda_visible_devices for r in runs} <= {"0", "1"}
    assert all(r.ref.sweep_axes for r in runs)  # explain reads the swept axes from Ray runs too
    assert _profile_calls(tmp_path / "calls.jsonl") >= 13, out  # the killed task was run again
    assert "12 profiled" in out

    calls = _profile_calls(tmp_path / "calls.jsonl")
    again = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=fake_env, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "done: 0 profiled, 12 points skipped" in again.stdout
    assert _profile_calls(tmp_path / "calls.jsonl") == calls
    assert len(list(store.iter_runs(root))) == 12


def test_a_shipped_run_is_committed_like_a_local_one(tmp_path: Path, fake_env: dict[str, str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FAKE_NCU_REPORT", "FAKE_NCU_CALLS"):
        monkeypatch.setenv(name, fake_env[name])
    sweep = tmp_path / "twelve.toml"
    sweep.write_text(TWELVE)
    point = load_sweep(sweep).points[3]
    job = ProfileJob(CellTarget(point.spec), load_sweep(sweep).options, provenance=Provenance(replica=0))
    settings = ProfileSettings(store=tmp_path / "elsewhere", ncu=str(FAKE_NCU), timeout=60.0)
    shipped = profile_point_task(job, settings, 1)
    assert isinstance(shipped, ShippedRun), shipped
    record = commit_shipped(tmp_path / "profiles", shipped)
    assert record is not None and [r.path for r in store.iter_runs(tmp_path / "profiles")] == [record.path]
    assert record.content_key == point.content_key and record.run_id == shipped.manifest["identity"]["run_id"]
    assert record.path.parent.name == f"{point.spec.slug()}-{point.content_key[:8]}"  # the spec's slug, not a guess
    assert record.report_path.read_bytes() == shipped.report
    assert record.manifest.machine.node and record.manifest.provenance.escalation is not None  # judged on the node
    assert not (tmp_path / "elsewhere").exists()  # the node profiles into a scratch store
    assert not list(Path(tempfile.gettempdir()).glob(f"ncuflow-ray-{owner_tag()}-*"))  # its scratch is gone
    dead = Path(tempfile.gettempdir()) / f"ncuflow-ray-999999999.{place_token()}.1-x"  # a worker killed mid-profile
    foreign = dead.with_name(f"ncuflow-ray-999999999.{'0' * 10}.1-x")  # of another container sharing /tmp
    legacy = dead.with_name("ncuflow-ray-999999999-x")  # named by a pid alone: proves nothing
    for folder in (dead, foreign, legacy):
        folder.mkdir(exist_ok=True)
    try:
        assert dead in remove_dead_scratch() and not dead.exists()
        assert foreign.exists() and legacy.exists()
    finally:
        for folder in (foreign, legacy):
            folder.rmdir()


def test_ray_without_the_package_is_a_usage_error(tmp_path: Path, fake_env: dict[str, str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    sweep = tmp_path / "twelve.toml"
    sweep.write_text(TWELVE)
    result = CliRunner().invoke(cli, ["sweep", str(sweep), "--store", str(tmp_path / "p"), "--ncu", str(FAKE_NCU),
                                      "--ray-local-gpus", "2"])
    assert result.exit_code != 0
    assert "pip install 'ncuflow[ray]'" in str(result.exception)
    assert ray_doctor_checks(None)[0][:2] == ("ray", "info")


@needs_ray
def test_doctor_says_ray_is_importable() -> None:
    import ray

    name, status, detail, _ = ray_doctor_checks(None)[0]
    assert (name, status) == ("ray", "ok") and ray.__version__ in detail


@needs_ray
def test_an_unreachable_cluster_is_one_paragraph_fast(tmp_path: Path, fake_env: dict[str, str]) -> None:
    sweep = tmp_path / "twelve.toml"
    sweep.write_text(TWELVE)
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "ncuflow", "sweep", str(sweep), "--store", str(tmp_path / "p"),
                             "--ncu", str(FAKE_NCU), "--ray", "127.0.0.1:1"],
                            capture_output=True, text=True, cwd=REPO, env=fake_env, timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "Cannot connect to the Ray cluster at 127.0.0.1:1" in result.stderr
    assert time.monotonic() - started < 60
    rows = ray_doctor_checks("127.0.0.1:1")
    assert rows[-1][:2] == ("ray cluster", "fail")


THREE_POINTS_TWO_REPLICAS = """
cell = "copy_bandwidth"
replicas = 2
timeout = 120
[fixed]
impl = "triton"
[axes]
mib = [1, 2, 4]
"""


@needs_ray
@pytest.mark.slow
def test_failing_points_on_ray_are_said_once_each_and_stop_the_sweep_without_keep_going(
    tmp_path: Path, fake_env: dict[str, str]
) -> None:
    """Each replica is its own task: a point whose replicas all fail is one failure, said once."""
    sweep = tmp_path / "three.toml"
    sweep.write_text(THREE_POINTS_TWO_REPLICAS)
    root = tmp_path / "profiles"
    command = [sys.executable, "-m", "ncuflow", "sweep", str(sweep), "--store", str(root), "--ncu", str(FAKE_NCU),
               "--ray-local-gpus", "2", "--no-escalate"]
    env = {**fake_env, "FAKE_NCU_MODE": "appfail"}
    going = subprocess.run([*command, "--keep-going"], capture_output=True, text=True, cwd=REPO, env=env, timeout=180)
    out = going.stdout + going.stderr
    assert going.returncode == 3, out
    assert out.count("failed copy_bandwidth:") == 3 and "0 profiled" in out and "3 failed" in out, out
    # each failed task's log is kept in the driver's store, as a local sweep keeps it, and the
    # error names that copy, not the node's scratch folder (gone when the task ended)
    kept = sorted(root.rglob(".failed-*/ncu.log"))
    assert len(kept) == 6 and all(log.stat().st_size > 0 for log in kept)
    assert str(root) in out.replace("\n", "") and "ncuflow-ray-" not in out
    stopped = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env, timeout=180)
    out = stopped.stdout + stopped.stderr
    assert stopped.returncode != 0 and "The sweep stopped" in out and "done:" not in out, out
    assert "failed copy_bandwidth:" not in out  # the error is said once, by the command, not also as a point's failure
    assert list(store.iter_runs(root)) == []


def test_a_task_ships_a_bounded_log_its_head_and_tail_kept(tmp_path: Path) -> None:
    """A profiled program's output has no bound (1.3 GB of lines in the fault suite): a Ray task
    ships a log whole up to SHIPPED_LOG_BYTES, else its first MiB, a line naming the cut, and its
    end, where ncu writes its errors; a 2 GB log (sparse) is read by seeking, not whole."""
    small = tmp_path / "small.log"
    small.write_bytes(b"==PROF== Connected\nhello\n")
    assert log_to_ship(small) == small.read_bytes()
    assert log_to_ship(tmp_path / "missing.log") == b""

    lines = b"".join(b"line %08d of the program\n" % i for i in range(700_000))  # ~18 MB
    large = tmp_path / "large.log"
    large.write_bytes(lines + b"==ERROR== LaunchFailed\n")
    shipped = log_to_ship(large)
    assert len(shipped) < SHIPPED_LOG_BYTES + 200
    assert shipped.startswith(b"line 00000000 of the program\n")
    assert shipped.endswith(b"==ERROR== LaunchFailed\n")
    left_out = large.stat().st_size - (SHIPPED_LOG_BYTES)
    assert f"[ncuflow: {left_out:,} bytes of this log left out on the Ray node".encode() in shipped

    huge = tmp_path / "huge.log"
    with huge.open("wb") as handle:
        handle.truncate(2 << 30)
        handle.seek((2 << 30) - 6)
        handle.write(b"done.\n")
    shipped = log_to_ship(huge)
    assert shipped.endswith(b"done.\n") and len(shipped) < SHIPPED_LOG_BYTES + 200
