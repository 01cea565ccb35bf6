"""The one device call, without the device: its parts here, and the dry run on a bare Python 3.12.

`make gpu-rehearsal` runs the whole device command (docs/gpu-host.md) on a host-like environment (minutes,
a 5 GB environment, the GPU bundle): not part of `make test`. What runs here is cheap: the
dry run in a copy of the tracked tree on a Python 3.12 with nothing installed (skipped where
no Python 3.12 is found), the device command, the deadlines, what is written under $OUT,
and the steps' handling of a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "analysis"))

import flashinfer_points  # noqa: E402
import gpu_call  # noqa: E402
import gpu_rehearsal  # noqa: E402
import study_steps  # noqa: E402


def test_the_dry_run_works_on_a_bare_python_312() -> None:
    try:
        python = gpu_rehearsal.find_python312()
    except gpu_rehearsal.RehearsalError as error:
        pytest.skip(str(error))
    done = gpu_rehearsal.dry_run(python)
    assert gpu_rehearsal.dry_run_problems(done) == []
    assert "No module named 'ncuflow'" not in done.stdout + done.stderr
    assert "18 profiled points + 5 plan() timings" in done.stdout
    # the steps in order of value per second: plan() before any ncu, the GPU tests last
    order = [line.split(". ", 1)[1].split(":")[0] for line in done.stdout.splitlines() if line.startswith("  ") and ". " in line[:6]]
    assert order == [step.name for step in study_steps.STEPS]
    assert order.index("plan() timings") < order.index("one point of each cell") < order.index("sweeps")
    assert order[-1] == "pytest -m gpu"


def test_the_device_command_is_bounded_and_writes_under_out() -> None:
    command = gpu_rehearsal.device_command()
    assert len(command) <= 2000
    assert "timeout -k" in command and '--out "$OUT"' in command and "pipefail" in command
    seconds = [float(word) for word in command.split("timeout -k ")[1].split()[:2]]
    budget = float(command.split("--budget-s ")[1].split()[0])
    assert budget + 30 <= seconds[1] and sum(seconds) < gpu_rehearsal.CALL_TIMEOUT_S  # it kills itself first
    assert study_steps.GPU_TESTS == ("tests/test_flashinfer_gpu.py",)  # not the Triton GPU tests


def test_a_page_that_shows_the_device_command_shows_the_one_the_rehearsal_runs() -> None:
    """docs/gpu-host.md holds the command; a copy shown elsewhere (the README) may not drift from it."""
    command = gpu_rehearsal.device_command()
    for page in (REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))):
        shown = [line.strip() for line in page.read_text().splitlines() if "run_study_on_gpu.py --part" in line
                 and "timeout -k" in line]
        assert all(line == command for line in shown), page


def test_a_command_is_stopped_at_its_deadline_with_its_children(tmp_path: Path) -> None:
    child_pid = tmp_path / "child.pid"
    script = ("import subprocess, sys, time\n"
              f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              f"open({str(child_pid)!r}, 'w').write(str(child.pid))\n"
              "print('working', flush=True)\n"
              "time.sleep(60)\n")
    started = time.monotonic()
    done = gpu_call.run_until([sys.executable, "-c", script], time.monotonic() + 2, cwd=tmp_path, echo=False)
    assert time.monotonic() - started < 15
    assert done.code is None and done.status is gpu_call.Status.TIMED_OUT
    assert "working" in done.tail and "stopped at its deadline" in done.cause()
    assert not _alive(int(child_pid.read_text()))  # the grandchild went with its group


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper is not)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.1)
    return True


def test_a_command_past_its_deadline_is_not_started(tmp_path: Path) -> None:
    done = gpu_call.run_until(["true"], time.monotonic() - 1, cwd=tmp_path)
    assert done.status is gpu_call.Status.TIMED_OUT and "no time left" in done.cause()


def test_each_deadline_is_the_cap_or_the_budget_less_the_close() -> None:
    budget = gpu_call.Budget(100.0, close_s=10.0)
    assert 29 < budget.deadline(30.0) - time.monotonic() <= 30
    assert 89 < budget.deadline(500.0) - time.monotonic() <= 90
    budget.started -= 95  # 5 s left, less than the close keeps
    assert budget.deadline(30.0) - time.monotonic() <= 0


def test_the_record_is_rewritten_under_out_after_each_step(tmp_path: Path) -> None:
    repo, out = tmp_path / "repo", tmp_path / "out"
    (repo / "store" / "cell" / "point").mkdir(parents=True)
    (repo / "store" / "cell" / "point" / "report.ncu-rep").write_bytes(b"x" * 100)
    record = gpu_call.CallRecord(repo, out, repo / "summary.json", {"store": "store"},
                                 [gpu_call.Bundle("cell.tgz", ("store/cell", "store/missing"))])
    budget = gpu_call.Budget(60.0)
    record.add(gpu_call.Outcome("first", gpu_call.Status.OK, 1.0), budget)
    first = json.loads((out / "summary.json").read_text())
    assert [s["step"] for s in first["steps"]] == ["first"]
    record.add(gpu_call.Outcome("second", gpu_call.Status.FAILED, 2.0, "cmd", "its own words"), budget)
    second = json.loads((out / "summary.json").read_text())
    assert [s["status"] for s in second["steps"]] == ["ok", "failed"] and second["steps"][1]["cause"] == "its own words"
    assert second["status_counts"] == {"ok": 1, "failed": 1}
    with tarfile.open(out / "cell.tgz") as tar:
        assert tar.getnames()[-1] == "store/cell/point/report.ncu-rep"
    assert sorted(p.name for p in out.iterdir()) == ["cell.tgz", "summary.json"]  # no temporary left
    assert gpu_rehearsal.out_problems(out) == []


def test_a_tarball_over_the_tools_limit_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_call, "MAX_OUT_FILE_BYTES", 10)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "big").write_bytes(os.urandom(4096))
    record = gpu_call.CallRecord(tmp_path, tmp_path / "out", tmp_path / "s.json", {}, [gpu_call.Bundle("r.tgz", ("runs",))])
    record.add(gpu_call.Outcome("x", gpu_call.Status.OK, 0.0), gpu_call.Budget(60.0))
    assert "r.tgz is" in record.problems[0] and "split" in record.problems[0]


def test_the_first_point_sweep_keeps_the_sweeps_settings(tmp_path: Path) -> None:
    from ncuflow.profile.sweep import load_sweep

    for path in flashinfer_points.sweep_files():
        whole, first = load_sweep(path), load_sweep(study_steps.one_point_sweep(path, tmp_path))
        assert len(first.points) == 1 and first.points[0].content_key == whole.points[0].content_key
        assert first.options == whole.options and first.name == whole.name and first.timeout == whole.timeout
        assert tomllib.loads(study_steps.one_point_sweep(path, tmp_path).read_text())["ncu"] == \
            tomllib.loads(path.read_text())["ncu"]


def test_a_sweep_without_its_extra_metrics_keeps_everything_else(tmp_path: Path) -> None:
    from ncuflow.profile.sweep import load_sweep

    path = flashinfer_points.sweep_files()[0]
    whole = load_sweep(path)
    plain = load_sweep(study_steps.rewritten_sweep(path, tmp_path, first_point=False, extra_metrics=False))
    assert whole.options.extra_metrics and not plain.options.extra_metrics
    assert [p.content_key for p in plain.points] == [p.content_key for p in whole.points]
    assert plain.options.metric_set == whole.options.metric_set and plain.name == whole.name


def test_the_bare_command_writes_elsewhere_and_over_its_last_report(tmp_path: Path) -> None:
    command = ["ncu", "--export", "/store/report.ncu-rep", "python3", "-m", "ncuflow.cells.cellrun", "x",
               "--representation-out", "/store/rep.json"]
    bare = study_steps._bare_command(command, tmp_path)
    assert bare[1] == "--force-overwrite" and str(tmp_path / "report.ncu-rep") in bare
    assert str(tmp_path / "representation.json") in bare and "/store/report.ncu-rep" not in bare


def test_a_counter_refusal_is_remembered_with_ncuflows_words() -> None:
    from ncuflow.profile.ncu_errors import CounterPermissionDenied

    call = study_steps.Call(Path("/s"), Path("/b"), [], gpu_call.Budget(60.0),
                            gpu_call.CallRecord(REPO, None, Path("/dev/null"), {}, []), {})
    assert call.ncu_blocked("sweeps") is None
    tail = "sweep: 1 point\n" + str(CounterPermissionDenied())
    call.note_refusal(gpu_call.Finished(("ncuflow",), 3, 1.0, "", tail))
    blocked = call.ncu_blocked("sweeps")
    assert blocked is not None and blocked.status is gpu_call.Status.SKIPPED
    assert "ERR_NVGPUCTRPERM" in blocked.cause and "ncu was refused" in blocked.cause


def test_a_step_that_raises_does_not_stop_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(call: study_steps.Call, deadline: float) -> gpu_call.Outcome:
        raise RuntimeError("a bug in one step")

    def fine(call: study_steps.Call, deadline: float) -> gpu_call.Outcome:
        return gpu_call.Outcome("fine", gpu_call.Status.OK, 0.0)

    monkeypatch.setattr(study_steps, "STEPS", (study_steps.Step("broken", 0.5, broken, ""),
                                               study_steps.Step("fine", 0.5, fine, "")))
    monkeypatch.setattr(study_steps, "runs_in_store", lambda store: {})
    code = study_steps.run_steps(tmp_path / "store", tmp_path / "bundle", 60.0, [], tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "flashinfer-call-store.json").read_text())
    assert code == 1 and [(s["step"], s["status"]) for s in summary["steps"]] == [("broken", "failed"), ("fine", "ok")]
    assert "RuntimeError: a bug in one step" in summary["steps"][0]["cause"]


def test_a_missing_bundle_skips_what_needs_it_and_says_why(tmp_path: Path) -> None:
    budget = gpu_call.Budget(60.0)
    call = study_steps.Call(tmp_path / "store", tmp_path / "no-bundle", [], budget,
                            gpu_call.CallRecord(tmp_path, None, tmp_path / "s.json", {}, []), dict(os.environ))
    probe = study_steps.probe_bundle(call, time.monotonic() + 30)
    assert probe.status is gpu_call.Status.FAILED and "make gpu-bundle" in probe.cause
    plan = study_steps.time_plan(call, time.monotonic() + 30)
    assert plan.status is gpu_call.Status.SKIPPED and "bundle could not be activated" in plan.cause
    first = study_steps.first_points(call, time.monotonic() + 30)
    assert set(first.result) == set(flashinfer_points.CELLS)
    assert all("left out" in str(v) for v in first.result.values())


def test_the_fake_ncu_can_hang_on_one_point(tmp_path: Path) -> None:
    fake = REPO / "tests" / "fake_ncu" / "ncu"
    report = sorted((REPO / gpu_rehearsal.FAKE_REPORT).rglob("report.ncu-rep"))[0]
    env = {**os.environ, "FAKE_NCU_HANG_ON": "page=32", "FAKE_NCU_REPORT": str(report)}
    done = gpu_call.run_until([str(fake), "--export", str(tmp_path / "r"), "python3", "x:page=32"], time.monotonic() + 3,
                              cwd=tmp_path, env=env, echo=False)
    assert done.code is None  # hung until its deadline
    other = subprocess.run([str(fake), "--version"], env=env, capture_output=True, text=True, check=False, timeout=30)
    assert other.returncode == 0


STOPPED_CALL = r'''
import sys, time
sys.path[:0] = [{analysis!r}, {repo!r}]
import gpu_call, study_steps

def sleeper(call, deadline):
    done = gpu_call.run_until(["sleep", "60"], deadline, cwd={tmp!r}, echo=False)
    return gpu_call.Outcome("sleeper", done.status, done.seconds)

study_steps.STEPS = (study_steps.Step("sleeper", 1.0, sleeper, ""),)
study_steps.runs_in_store = lambda store: {{}}
sys.exit(study_steps.run_steps(study_steps.Path({tmp!r}) / "store", study_steps.Path("/b"), 300.0, [],
                               study_steps.Path({tmp!r}) / "out"))
'''


def _children_named(name: str) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if stat.read_bytes().split(b"\0")[:2] == [b"sleep", name.encode()]:
                found.append(int(stat.parent.name))
        except OSError:
            continue
    return [pid for pid in found if _alive(pid)]


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])
def test_a_stopped_call_leaves_no_command_running(tmp_path: Path, signal_name: str) -> None:
    """The device command's timeout sends SIGTERM (then SIGKILL): the running command goes too,
    and on SIGTERM the summary says where the call stopped."""
    import signal as signals

    script = STOPPED_CALL.format(analysis=str(REPO / "analysis"), repo=str(REPO), tmp=str(tmp_path))
    process = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while not _children_named("60") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _children_named("60"), "the step's command did not start"
    process.send_signal(getattr(signals, signal_name))
    code = process.wait(timeout=30)
    deadline = time.monotonic() + 10
    while _children_named("60") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _children_named("60") == []
    if signal_name == "SIGTERM":
        assert code == 143
        summary = json.loads((tmp_path / "out" / "flashinfer-call-store.json").read_text())
        assert summary["steps"] == [{**summary["steps"][0], "status": "timed out", "cause": "stopped by signal SIGTERM"}]
