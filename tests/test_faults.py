"""Fault injection, processes: kill -9 at random moments, a hung ncu, concurrent writers.

Every trial runs the real command line (``python -m ncuflow sweep``) with the fake ncu,
kills it (the process, or its whole process group) with SIGKILL at a random moment,
looks for any process left running that belongs to the trial's store, and at the end
resumes the sweep and counts the runs of every point: none may be lost, none doubled,
no temporary folder may be left or come back, and ``store check`` finds no damaged run
(no report cut short). Each trial runs under the fault suite's memory limit
(``tests.hostile.MEMORY_LIMIT``). Kills of ``export`` and ``report`` between their renames
are in ``tests/test_faults_outputs.py``. The figures are printed (run with -s)
and quoted in docs/reliability.md.

NCUFLOW_FAULT_KILLS (default 30) and NCUFLOW_FAULT_SEED (default 9) size and seed it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import resource
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from ncuflow import store
from ncuflow.profile.sweep import load_sweep
from ncuflow.store import lock as point_lock
from tests.hostile import MEMORY_LIMIT

FAKE_NCU = Path(__file__).parent / "fake_ncu" / "ncu"
REPO = Path(__file__).resolve().parent.parent
REPORT_NAME = "yzwang2000__cudaCode__profile.ncu-rep"

SWEEP = """
cell = "copy_bandwidth"
replicas = {replicas}
timeout = 60
[fixed]
impl = "triton"
[axes]
mib = {mibs}
"""


def _sweep_file(folder: Path, replicas: int, mibs: list[int]) -> Path:
    path = folder / "faults.toml"
    path.write_text(SWEEP.format(replicas=replicas, mibs=mibs))
    return path


def _env(corpus_dir: Path, calls: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for key in [k for k in env if k.startswith("FAKE_NCU_")]:
        del env[key]
    env.update({"FAKE_NCU_REPORT": str(corpus_dir / REPORT_NAME), "FAKE_NCU_CALLS": str(calls)})
    env.update(extra)
    return env


def _sweep_command(sweep_file: Path, root: Path) -> list[str]:
    return [sys.executable, "-m", "ncuflow", "sweep", str(sweep_file), "--store", str(root), "--ncu", str(FAKE_NCU)]


def _profiles_called(calls: Path) -> int:
    if not calls.exists():
        return 0
    return sum(1 for line in calls.read_text().splitlines() if "--version" not in json.loads(line))


def _processes_of(root: Path) -> list[int]:
    """Live processes (not zombies) whose command line names the store: ncu, its supervisor, the program."""
    mark = str(root).encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if mark not in (entry / "cmdline").read_bytes():
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def _left_running(root: Path, wait: float = 8.0) -> list[int]:
    """What still runs of the store's processes after ``wait`` s (the supervisor's grace is 5 s)."""
    end = time.monotonic() + wait
    while True:
        alive = _processes_of(root)
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.1)


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _runs_per_key(root: Path) -> Counter[str]:
    return Counter(run.content_key for run in store.iter_runs(root))


def _temporaries(root: Path) -> list[Path]:
    return list(root.rglob(".tmp-*")) if root.exists() else []


# ----------------------------------------------------------------------------- kill -9


@pytest.mark.slow
def test_random_kill_9_loses_nothing_doubles_nothing_leaves_nothing(corpus_dir: Path, tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("NCUFLOW_FAULT_SEED", "9")))
    wanted_kills = int(os.environ.get("NCUFLOW_FAULT_KILLS", "30"))
    calls = tmp_path / "calls.jsonl"
    replicas, mibs = 4, [16, 32, 64, 128, 256, 512]
    sweep_file = _sweep_file(tmp_path, replicas, mibs)
    keys = {p.content_key for p in load_sweep(sweep_file).points}
    figures: Counter[str] = Counter()
    stores: list[Path] = []
    root = tmp_path / "store-0"
    stores.append(root)
    trial = 0
    while figures["kills"] < wanted_kills and trial < 3 * wanted_kills:
        trial += 1
        hung = trial % 5 == 0  # every fifth trial: ncu hangs (with a child), then the kill
        env = _env(corpus_dir, calls, FAKE_NCU_SLEEP="0.3", **({"FAKE_NCU_MODE": "hang"} if hung else {}))
        proc = subprocess.Popen(_sweep_command(sweep_file, root), env=env, cwd=REPO, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT)))
        time.sleep(rng.uniform(1.0, 2.2) if hung else rng.uniform(0.3, 1.8))
        if proc.poll() is None:
            whole_group = rng.random() < 0.5
            if whole_group:
                os.killpg(proc.pid, signal.SIGKILL)
                figures["group_kills"] += 1
            else:
                proc.kill()
                figures["process_kills"] += 1
            figures["kills"] += 1
            figures["hung_kills"] += hung
        proc.wait(timeout=30)
        left = _left_running(root)
        figures["processes_left"] += len(left)
        _kill_all(left)
        if proc.returncode == 0:  # the sweep finished before the kill: start a fresh store
            root = tmp_path / f"store-{len(stores)}"
            stores.append(root)
    for root in stores:  # resume each store to completion, then count
        done = subprocess.run(_sweep_command(sweep_file, root), env=_env(corpus_dir, calls), cwd=REPO,
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Traceback" not in done.stdout + done.stderr
        per_key = _runs_per_key(root)
        assert set(per_key) == keys
        checked = subprocess.run([sys.executable, "-m", "ncuflow", "store", "check", str(root)], cwd=REPO,
                                 capture_output=True, text=True, timeout=120)
        figures["damaged_after_resume"] += checked.returncode != 0  # a report cut short would be named here
        assert checked.returncode == 0 and "0 damaged" in checked.stderr, checked.stdout + checked.stderr
        figures["runs"] += sum(per_key.values())
        figures["lost"] += sum(max(0, replicas - per_key[k]) for k in keys)
        figures["duplicated"] += sum(max(0, per_key[k] - replicas) for k in keys)
        figures["processes_left"] += len(_left_running(root, wait=0.5))
    time.sleep(1.0)  # a late writer would re-create a temporary folder now
    figures["temporary_folders"] = sum(len(_temporaries(root)) for root in stores)
    print("\nfault figures:", json.dumps(dict(figures), sort_keys=True))
    assert figures["kills"] >= wanted_kills
    assert figures["runs"] == len(stores) * len(keys) * replicas
    assert (figures["lost"], figures["duplicated"], figures["processes_left"], figures["temporary_folders"],
            figures["damaged_after_resume"]) == (0, 0, 0, 0, 0)


@pytest.mark.slow
def test_a_hung_ncu_is_stopped_at_the_timeout_even_if_it_ignores_sigterm(corpus_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "store"
    calls = tmp_path / "calls.jsonl"
    child_pid = tmp_path / "child.pid"
    env = _env(corpus_dir, calls, FAKE_NCU_MODE="hang", FAKE_NCU_IGNORE_TERM="1", FAKE_NCU_CHILD_PID_FILE=str(child_pid))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "ncuflow", "profile", "copy_bandwidth:mib=16", "--store", str(root),
                           "--ncu", str(FAKE_NCU), "--timeout", "1"], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert "1 s" in done.stderr or "timed out" in done.stderr.lower() or "timeout" in done.stderr.lower()
    assert time.monotonic() - started < 20
    assert _left_running(root, wait=1.0) == []
    pid = int(child_pid.read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]
    assert _temporaries(root) == [] and list(store.iter_runs(root)) == []


# ----------------------------------------------------------------------------- concurrent writers


@pytest.mark.slow
@pytest.mark.parametrize("apart_s", [0.0, 1.0])
def test_two_concurrent_sweeps_profile_each_replica_once(corpus_dir: Path, tmp_path: Path, apart_s: float) -> None:
    calls = tmp_path / "calls.jsonl"
    root = tmp_path / "store"
    replicas, mibs = 2, [16, 32, 64, 128, 256]
    sweep_file = _sweep_file(tmp_path, replicas, mibs)
    env = _env(corpus_dir, calls, FAKE_NCU_SLEEP="0.3")
    first = subprocess.Popen(_sweep_command(sweep_file, root), env=env, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    time.sleep(apart_s)
    second = subprocess.Popen(_sweep_command(sweep_file, root), env=env, cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    outputs = [p.communicate(timeout=180)[0] for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, outputs
    per_key = _runs_per_key(root)
    assert sorted(per_key.values()) == [replicas] * len(mibs)
    assert _profiles_called(calls) == replicas * len(mibs)  # nothing profiled twice
    assert _temporaries(root) == []


@pytest.mark.slow
def test_a_sweep_and_a_profile_of_one_point_take_turns(corpus_dir: Path, tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    root = tmp_path / "store"
    replicas, mibs = 2, [16, 32, 64]
    sweep_file = _sweep_file(tmp_path, replicas, mibs)
    env = _env(corpus_dir, calls, FAKE_NCU_SLEEP="0.4")
    sweep = subprocess.Popen(_sweep_command(sweep_file, root), env=env, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    profile = subprocess.run([sys.executable, "-m", "ncuflow", "profile", "copy_bandwidth:mib=16", "--store",
                              str(root), "--ncu", str(FAKE_NCU)], env=env, cwd=REPO, capture_output=True,
                             text=True, timeout=120)
    out = sweep.communicate(timeout=180)[0]
    assert sweep.returncode == 0 and profile.returncode == 0, out + profile.stderr
    points = {p.params["mib"]: p.content_key for p in load_sweep(sweep_file).points}
    per_key = _runs_per_key(root)
    # the sweep asks for 2 runs of each point, the profile for 1 more of mib=16: the profile
    # ran first (then the sweep topped up to 2) or after the sweep (then it added its own)
    assert per_key[points[16]] in (replicas, replicas + 1)
    assert per_key[points[32]] == per_key[points[64]] == replicas
    assert _profiles_called(calls) == sum(per_key.values())


# ----------------------------------------------------------------------------- the lock itself


def test_the_point_lock_excludes_other_threads_and_is_reentrant(tmp_path: Path) -> None:
    point = tmp_path / "cell" / "point-12345678"
    with point_lock.point_lock(point) as held:
        assert held is not None
        assert point_lock.try_lock(point) is held  # re-entrant in this thread
        held.release()
        alias = tmp_path / "alias"
        alias.symlink_to(point.parent)
        assert point_lock.try_lock(alias / point.name) is held  # one folder, however it is spelled
        held.release()
        seen: list[object] = []
        worker = threading.Thread(target=lambda: seen.append(point_lock.try_lock(point)))
        worker.start()
        worker.join()
        assert seen == [None]
        assert point_lock.holder(point)["pid"] == os.getpid()
    again = point_lock.try_lock(point)
    assert again is not None
    again.release()


def test_a_lock_of_a_killed_process_is_taken_over(tmp_path: Path) -> None:
    point = tmp_path / "point"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom ncuflow.store import lock\n"
         f"held = lock.try_lock(__import__('pathlib').Path({str(point)!r}))\nprint(held is not None, flush=True)\n"
         "time.sleep(60)"], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
    assert point_lock.try_lock(point) is None
    assert point_lock.holder(point)["pid"] == holder.pid
    holder.kill()
    holder.wait()
    taken = point_lock.acquire(point, timeout=5)
    assert taken is not None
    taken.release()


def test_a_late_writer_never_re_creates_a_removed_run_folder(tmp_path: Path) -> None:
    gone = tmp_path / "cell" / "point" / ".tmp-20260101T000000Z-abcdef-1"
    done = subprocess.run([sys.executable, "-m", "ncuflow.cells.cellrun", "plan_host:index_len=64",
                           "--representation-out", str(gone / "representation.json")],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert not gone.exists() and not gone.parent.exists()
