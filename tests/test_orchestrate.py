"""Running ncu (the fake one) end to end: success, every failure, timeout, interrupt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ncuflow import store
from ncuflow.cells.registry import parse_spec
from ncuflow.errors import ReportError
from ncuflow.profile.ncu import NcuOptions
from ncuflow.profile.ncu_errors import (
    ApplicationFailed,
    CounterPermissionDenied,
    DriverMismatch,
    MetricNotFound,
    NcuFailed,
    NcuNotFound,
    NoKernelsProfiled,
    ProfileTimeout,
)
from ncuflow.profile.orchestrate import profile
from ncuflow.profile.plan import CellTarget, CommandTarget, ProfileJob, plan_job
from ncuflow.profile.settings import ProfileSettings
from ncuflow.store.manifest import CellFacts

FAKE_NCU = Path(__file__).parent / "fake_ncu" / "ncu"
REPO = Path(__file__).resolve().parent.parent
REPORT_NAME = "yzwang2000__cudaCode__profile.ncu-rep"  # 2 actions, sm_75, ncu 2022.3


@pytest.fixture()
def fake(corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Environment for the fake ncu; returns the folder its side files go to."""
    side = tmp_path / "side"
    side.mkdir()
    representation = side / "representation_src.json"
    representation.write_text(json.dumps({
        "representation": {"index_layout": "scatter", "indices": 262144},
        "expected_bytes": 1073741824, "torch_version": "2.11.0", "triton_version": "3.6.0",
        "gpu_name": "NVIDIA H200", "gpu_uuid": "GPU-1234", "driver_version": "580.65",
        "check": {"passed": True, "max_abs_error": 0.001}, "nvtx_range": "ncuflow/flat_decode",
    }))
    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / REPORT_NAME))
    monkeypatch.setenv("FAKE_NCU_ARGV_OUT", str(side / "argv.json"))
    monkeypatch.setenv("FAKE_NCU_REPRESENTATION", str(representation))
    monkeypatch.setenv("FAKE_NCU_CHILD_PID_FILE", str(side / "child.pid"))
    monkeypatch.delenv("FAKE_NCU_MODE", raising=False)
    return side


def _profile(target: CellTarget | CommandTarget, root: Path, options: NcuOptions | None = None, *,
             progress: object = None, cell_facts: CellFacts | None = None, **settings: object) -> store.RunRecord:
    """One profile through the library's one call: a job, the settings record, the stored run."""
    job = ProfileJob(target, options or NcuOptions(), cell_facts=cell_facts or CellFacts())
    given = {"store": root, "ncu": str(FAKE_NCU), "timeout": 60, **settings}
    return profile(job, ProfileSettings(**given), progress=progress).record  # type: ignore[arg-type]


def _cell(text: str) -> CellTarget:
    return CellTarget(parse_spec(text))


def _leftovers(root: Path) -> list[Path]:
    """Temporary folders anywhere in the store."""
    return [p for p in root.rglob(".tmp-*")] if root.exists() else []


def _pid_gone(pid: int, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie child of ours would still answer; our children are reaped by init
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().split()[2] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_profile_cell_success_stores_a_complete_run(fake: Path, tmp_path: Path, corpus_dir: Path) -> None:
    spec = parse_spec("flat_decode:layout=scatter,kv_len=4096")
    root = tmp_path / "profiles"
    lines: list[str] = []
    timed = {"clock": "cuda_events", "stats": {"median_us": 101.5}}
    record = _profile(CellTarget(spec), root, progress=lines.append,
                      cell_facts=CellFacts(duration_unprofiled=timed))
    assert record.path.parent == root / "flat_decode" / f"{spec.slug()}-{spec.content_key()[:8]}"
    assert record.report_path.read_bytes() == (corpus_dir / REPORT_NAME).read_bytes()
    m = json.loads((record.path / store.MANIFEST_NAME).read_text())
    assert m == record.manifest.to_json() and m["schema_version"] == store.SCHEMA_VERSION == 3
    identity, collection, machine = m["identity"], m["collection"], m["machine"]
    assert identity["cell"] == "flat_decode" and identity["content_key"] == spec.content_key()
    assert identity["params"] == dict(spec.params)
    assert m["outcome"]["exit_status"] == 0 and collection["ncu_version"] == "2025.3.1.0"
    options = collection["options"]
    assert (options["replay_mode"], options["cache_control"], options["clock_control"]) == ("kernel", "all", "base")
    assert options["metric_set"] == "decisive" and options["nvtx_include"] == ["ncuflow/flat_decode/"]
    assert machine["gpu_name"] == "NVIDIA H200" and machine["gpu_uuid"] == "GPU-1234"
    facts = m["cell_facts"]
    assert facts["representation"] == {"index_layout": "scatter", "indices": 262144}
    assert facts["expected_bytes"] == 1073741824 and machine["torch_version"] == "2.11.0"
    assert facts["duration_unprofiled"] == timed and m["outcome"]["wall_time_s"] > 0
    assert facts["check"] == {"passed": True, "max_abs_error": 0.001}
    assert m["outcome"]["actions"] == 2
    assert m["provenance"]["escalation"] is None  # judged by escalation.profile_tier1, not by profile
    # the command stored is exactly what ncu received
    received = json.loads((fake / "argv.json").read_text())
    assert collection["command"][1:] == received
    assert received[received.index("--nvtx-include") + 1].endswith("flat_decode/")
    assert spec.text() in received and "ncuflow.cells.cellrun" in received
    assert "Profiling" in (record.log_path.read_text())
    assert any(line.startswith("==PROF== Profiling") for line in lines)
    assert _leftovers(root) == []
    assert not (record.path / "representation.json").exists()
    assert [r.path for r in store.iter_runs(root)] == [record.path]


def test_profile_command_line_success(fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NCU_RUN_APP", "1")
    root = tmp_path / "profiles"
    argv = [sys.executable, "-c", "print('hello from the app')"]
    record = _profile(CommandTarget(tuple(argv)), root, NcuOptions(kernel_regex="copy", metric_set="full"))
    import shlex

    assert record.cell == "command"
    assert record.manifest.params == {"argv": shlex.join(argv), "kernel": "copy"}
    assert record.manifest.collection.options.metric_set == "full"
    assert record.manifest.cell_facts == CellFacts()
    assert "hello from the app" in record.log_path.read_text()
    received = json.loads((fake / "argv.json").read_text())
    assert received[-3:] == argv and "--kernel-name" in received and "--nvtx" not in received


@pytest.mark.parametrize(("mode", "error"), [
    ("perm", CounterPermissionDenied),
    ("nokernels", NoKernelsProfiled),
    ("badmetric", MetricNotFound),
    ("appfail", ApplicationFailed),
    ("driver", DriverMismatch),
    ("crash", NcuFailed),
    ("errorline", NcuFailed),
    ("noreport", NcuFailed),
    ("emptyreport", ReportError),
])
def test_failures_are_typed_and_store_nothing_complete(
    fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, error: type
) -> None:
    monkeypatch.setenv("FAKE_NCU_MODE", mode)
    root = tmp_path / "profiles"
    spec = parse_spec("paged_decode:page=16")
    with pytest.raises(error) as info:
        _profile(CellTarget(spec), root, drop_unknown_metrics=False)
    assert type(info.value) is error
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    assert list(store.iter_runs(root)) == []
    assert _leftovers(root) == []
    failed = list(root.rglob(".failed-*"))
    assert len(failed) == 1 and (failed[0] / "ncu.log").is_file()
    assert not (failed[0] / "report.ncu-rep").exists()
    manifest = json.loads((failed[0] / "manifest.json").read_text())
    assert manifest["outcome"]["error"] == message
    if mode in ("perm", "nokernels", "badmetric", "appfail", "driver"):
        assert str(failed[0] / "ncu.log") in message


def test_application_failure_with_the_real_program(fake: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NCU_RUN_APP", "1")
    argv = [sys.executable, "-c", "import sys; print('boom: bad input'); sys.exit(3)"]
    with pytest.raises(ApplicationFailed) as info:
        _profile(CommandTarget(tuple(argv)), tmp_path / "p")
    assert info.value.code == 3 and "boom: bad input" in str(info.value)


@pytest.mark.parametrize("ignore_term", [False, True])
def test_timeout_stops_ncu_and_its_children(fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            ignore_term: bool) -> None:
    monkeypatch.setenv("FAKE_NCU_MODE", "hang")
    if ignore_term:
        monkeypatch.setenv("FAKE_NCU_IGNORE_TERM", "1")
    root = tmp_path / "profiles"
    started = time.monotonic()
    with pytest.raises(ProfileTimeout) as info:
        _profile(_cell("copy_bandwidth"), root, timeout=1.5, kill_grace=0.5)
    assert time.monotonic() - started < 8
    assert "1.5 s" in str(info.value)
    child = int((fake / "child.pid").read_text())
    assert _pid_gone(child)
    assert list(store.iter_runs(root)) == [] and _leftovers(root) == []


def test_missing_ncu_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(NcuNotFound):
        _profile(_cell("copy_bandwidth"), tmp_path, ncu=str(tmp_path / "nope"))


def test_plans_touch_nothing(tmp_path: Path) -> None:
    root = tmp_path / "profiles"
    settings = ProfileSettings(store=root, ncu=str(tmp_path / "missing-ncu"))
    plan = plan_job(ProfileJob(_cell("flat_decode")), settings, dry_run=True)
    assert not root.exists()
    assert not plan.ncu_found and plan.command[0] == str(tmp_path / "missing-ncu")
    assert plan.command[plan.command.index("--export") + 1].startswith(str(plan.tmp_path))
    cmd = plan_job(ProfileJob(CommandTarget(("./app",)), NcuOptions(nvtx_include=("step/",))), settings, dry_run=True)
    assert "--nvtx-include" in cmd.command and not root.exists()


_INTERRUPT_SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from ncuflow.cells.registry import parse_spec
    from ncuflow.profile.orchestrate import profile
    from ncuflow.profile.plan import CellTarget, ProfileJob
    from ncuflow.profile.settings import ProfileSettings
    from ncuflow.errors import NcuflowError
    try:
        settings = ProfileSettings(store=Path(sys.argv[1]), ncu=sys.argv[2], timeout=60, kill_grace=0.5)
        profile(ProfileJob(CellTarget(parse_spec("copy_bandwidth"))), settings)
    except NcuflowError as error:
        print("ERROR:", type(error).__name__, error)
        sys.exit(error.exit_code)
""")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_kills_everything_and_leaves_no_folder(fake: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         sig: signal.Signals) -> None:
    monkeypatch.setenv("FAKE_NCU_MODE", "hang")
    root = tmp_path / "profiles"
    proc = subprocess.Popen([sys.executable, "-c", _INTERRUPT_SCRIPT, str(root), str(FAKE_NCU)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    pid_file = fake / "child.pid"
    end = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < end:
        time.sleep(0.05)
    assert pid_file.exists(), "the fake ncu never started"
    assert len(_leftovers(root)) == 1  # the run being written
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 130, out
    assert "ProfileInterrupted" in out and sig.name in out
    assert _pid_gone(int(pid_file.read_text()))
    assert _leftovers(root) == []
    assert list(root.rglob(".failed-*")) == []
    assert list(store.iter_runs(root)) == []


def test_metrics_this_ncu_lacks_are_dropped_and_recorded(fake: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    unknown = ["sm__cycles_elapsed.max", "sm__issue_active.avg.pct_of_peak_sustained_elapsed"]
    monkeypatch.setenv("FAKE_NCU_BAD_METRICS", ",".join(unknown))
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_NCU_CALLS", str(calls))
    notes: list[str] = []
    root = tmp_path / "p"
    record = _profile(_cell("copy_bandwidth"), root, progress=notes.append)
    assert sorted(record.manifest.collection.options.dropped_metrics) == sorted(unknown)
    command = record.manifest.collection.command or ()
    asked = command[command.index("--metrics") + 1].split(",")
    assert not set(unknown) & set(asked)
    assert record.manifest.collection.options.metric_set == "decisive"
    assert any("dropped" in n for n in notes)
    profiled = [json.loads(line) for line in calls.read_text().splitlines()]
    assert len([c for c in profiled if "--version" not in c]) == 3  # two refusals, one success
    assert len(list(root.rglob(".failed-*"))) == 2 and len(list(store.iter_runs(root))) == 1


def test_metric_retries_are_bounded(fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NCU_MODE", "badmetric")  # refuses whatever comes first, forever
    with pytest.raises(MetricNotFound):
        _profile(_cell("copy_bandwidth"), tmp_path / "p")
    assert len(list((tmp_path / "p").rglob(".failed-*"))) == 4


def test_a_users_own_unknown_metric_is_not_dropped(fake: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NCU_BAD_METRICS", "my__metric.sum")
    with pytest.raises(MetricNotFound, match=r"my__metric\.sum"):
        _profile(CommandTarget(("./app",)), tmp_path / "p", NcuOptions(metric_set="full", extra_metrics=("my__metric.sum",)))
    assert len(list((tmp_path / "p").rglob(".failed-*"))) == 1


def test_a_signal_while_ncu_starts_never_orphans_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C landing after the fork but before the Popen object exists: the child is stopped."""
    from ncuflow.profile import process

    real_popen = subprocess.Popen
    started: list[subprocess.Popen[bytes]] = []

    def popen_then_interrupted(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        proc = real_popen(*args, **kwargs)  # type: ignore[call-overload]
        started.append(proc)
        signal.raise_signal(signal.SIGINT)  # arrives before the caller gets the object
        return proc

    monkeypatch.setattr(process.subprocess, "Popen", popen_then_interrupted)
    # Ctrl-C live, as in a terminal (a shell's background job starts with SIGINT ignored: below).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with (tmp_path / "log").open("wb") as log, pytest.raises(KeyboardInterrupt):
            process.spawn_in_new_session([sys.executable, "-c", "import time; time.sleep(30)"], log, env=None,
                                         kill_grace=2)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    (child,) = started
    assert child.poll() is not None  # stopped, not left running in its own session


def test_an_ignored_interrupt_stays_ignored_while_ncu_starts(tmp_path: Path) -> None:
    """A process started with SIGINT ignored (a shell's background job, nohup) keeps ignoring it:
    ncu starts, and the handler is SIG_IGN after as before."""
    from ncuflow.profile import process

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with (tmp_path / "log").open("wb") as log:
            child = process.spawn_in_new_session([sys.executable, "-c", "pass"], log, env=None, kill_grace=2)
        assert child.wait(timeout=30) == 0
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def _documented_exits() -> dict[int, str]:
    """docs/profiling.md's table of `profile`'s exit statuses: code -> when."""
    text = (REPO / "docs" / "profiling.md").read_text()
    table = text[text.index("Exit status of `profile`:"):].split("\n\n")[1]
    rows = [line.strip("|").split("|", 1) for line in table.splitlines()[2:]]
    return {int(code): when.strip() for code, when in rows}


@pytest.mark.parametrize(("mode", "error", "documented"), [
    ("hang", ProfileTimeout, "--timeout"),
    ("crash", NcuFailed, "ncu ran"),
    ("emptyreport", ReportError, "cannot be read"),
])
def test_profiles_exit_status_is_the_one_its_docs_give(fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], mode: str, error: type,
                                                       documented: str) -> None:
    """A timeout is an ncu run that did not finish: `profile` exits with ncu's failure status
    (``NcuFailed``), one ``ncuflow:`` paragraph that says so and names the kept ncu.log, as the docs' table says."""
    from ncuflow.cli import main

    monkeypatch.setenv("FAKE_NCU_MODE", mode)
    root = tmp_path / "profiles"
    with pytest.raises(SystemExit) as exited:
        main(["profile", "--store", str(root), "--ncu", str(FAKE_NCU), "--timeout", "1.5", "--",
              sys.executable, "-c", "pass"])
    said = capsys.readouterr().err.strip()
    assert exited.value.code == error.exit_code and documented in _documented_exits()[error.exit_code]
    assert said.startswith("ncuflow: ") and "\n" not in said and "Traceback" not in said
    assert list(store.iter_runs(root)) == []
    if error is ProfileTimeout:
        assert error.exit_code == NcuFailed.exit_code and "ncu did not finish within 1.5 s" in said
        (log,) = root.rglob(store.LOG_NAME)
        assert str(log) in said and log.parent.name.startswith(".failed-")
