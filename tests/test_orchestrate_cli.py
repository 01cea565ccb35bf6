"""`ncuflow profile` / `doctor` on the command line, with the fake ncu, and the no-polars rule."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow import store
from ncuflow.cells.contract import nvtx_range_name
from ncuflow.cells.registry import list_cells, parse_spec
from ncuflow.cli import cli
from ncuflow.profile import doctor
from ncuflow.read.metrics import decisive_metric_names

FAKE_NCU = Path(__file__).parent / "fake_ncu" / "ncu"
REPO = Path(__file__).resolve().parent.parent
REPORT_NAME = "yzwang2000__cudaCode__profile.ncu-rep"
PROFILING_MODULES = ("ncuflow.profile.ncu", "ncuflow.profile.orchestrate", "ncuflow.store", "ncuflow.profile.sweep",
                     "ncuflow.profile.doctor", "ncuflow.cli.profile_cmds")


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ncuflow", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120, env={**os.environ, **(env or {})})


GPU_CELLS = [c.name for c in list_cells() if c.needs_ncu]
HOST_CELLS = [c.name for c in list_cells() if not c.needs_ncu]


@pytest.mark.parametrize("cell", GPU_CELLS)
def test_dry_run_prints_the_ncu_command_for_every_gpu_cell(cell: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["profile", cell, "--dry-run", "--store", str(tmp_path / "p"),
                                      "--ncu", str(FAKE_NCU)])
    assert result.exit_code == 0, result.output
    line = result.output.strip().splitlines()[0]
    argv = shlex.split(line)
    spec = parse_spec(cell)
    assert argv[0] == str(FAKE_NCU)
    assert argv[argv.index("--nvtx-include") + 1] == nvtx_range_name(cell) + "/"
    # Names the GPU's chip does not know are dropped before ncu runs (none without a GPU).
    dropped = re.findall(r"does not know (.+): dropped before ncu runs", result.output)
    dropped_names = dropped[0].split(", ") if dropped else []
    assert argv[argv.index("--metrics") + 1].split(",") == [m for m in decisive_metric_names() if m not in dropped_names]
    assert argv[argv.index("--replay-mode") + 1] == "kernel"
    tail = argv[argv.index("--force-overwrite") + 1:]
    assert tail[1:5] == ["-P", "-m", "ncuflow.cells.cellrun", spec.text()]  # -P: not the cwd's ncuflow/
    assert tail[5] == "--representation-out"
    export = Path(argv[argv.index("--export") + 1])
    assert export.parent.parent.name == f"{spec.slug()}-{spec.content_key()[:8]}"
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("cell", HOST_CELLS)
def test_host_cells_are_refused_with_a_paragraph(cell: str) -> None:
    result = _run("profile", cell, "--dry-run")
    assert result.returncode == 2
    assert "ncuflow time" in result.stderr and "Traceback" not in result.stderr


def test_dry_run_options_and_program_after_dashes() -> None:
    result = CliRunner().invoke(cli, [
        "profile", "--dry-run", "--ncu", str(FAKE_NCU), "--replay-mode", "application",
        "--cache-control", "none", "--clock-control", "none", "--set", "full", "--section", "Occupancy",
        "--metrics", "a__b.sum,c__d.sum", "--launch-count", "5", "--kernel", "gemm",
        "--nvtx", "step/", "--", "./app", "--size", "4096", "--dry-run"])
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.output.strip().splitlines()[0])
    assert argv[-4:] == ["./app", "--size", "4096", "--dry-run"]  # the program's own flags stay its own
    for flag, value in (("--replay-mode", "application"), ("--cache-control", "none"),
                        ("--clock-control", "none"), ("--set", "full"), ("--section", "Occupancy"),
                        ("--metrics", "a__b.sum,c__d.sum"), ("--launch-count", "5"),
                        ("--kernel-name", "regex:gemm"), ("--nvtx-include", "step/")):
        assert argv[argv.index(flag) + 1] == value


def test_spec_and_program_together_or_nothing_are_errors() -> None:
    both = _run("profile", "copy_bandwidth", "--dry-run", "--", "./app")
    assert both.returncode == 2 and "not both" in both.stderr
    none = _run("profile")
    assert none.returncode == 2 and "Nothing to profile" in none.stderr


def test_profile_success_prints_the_classify_table(corpus_dir: Path, tmp_path: Path) -> None:
    env = {"NCU": str(FAKE_NCU), "FAKE_NCU_REPORT": str(corpus_dir / REPORT_NAME), "COLUMNS": "200"}
    result = _run("profile", "copy_bandwidth:mib=16", "--store", str(tmp_path / "p"), "--replicas", "2",
                  env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("stored ") == 2
    runs = list(store.iter_runs(tmp_path / "p"))
    assert sorted(r.manifest.provenance.replica for r in runs) == [0, 1]
    # the classify table of the run: the report's two kernels and their verdicts
    assert result.stdout.count("kernel_A") == 2 and result.stdout.count("kernel_C") == 2
    assert "latency" in result.stdout


@pytest.mark.parametrize(("mode", "needle", "code"), [
    ("perm", "ERR_NVGPUCTRPERM", 3),
    ("dcgm", "dcgmi profile --pause", 3),  # DCGM holds the counters: named, with how to pause it
    ("nokernels", "profiled no kernel", 3),
    ("appfail", "exited with code 1", 3),
    ("driver", "CUDA driver", 3),
])
def test_profile_failures_are_one_paragraph(mode: str, needle: str, code: int, corpus_dir: Path,
                                           tmp_path: Path) -> None:
    env = {"NCU": str(FAKE_NCU), "FAKE_NCU_REPORT": str(corpus_dir / REPORT_NAME), "FAKE_NCU_MODE": mode}
    result = _run("profile", "copy_bandwidth", "--store", str(tmp_path / "p"), env=env)
    assert result.returncode == code
    message = result.stderr.strip()
    assert message.startswith("ncuflow: ") and needle in message
    assert "Traceback" not in result.stderr and len(message.splitlines()) == 1


def test_time_needs_a_cell_and_a_gpu(tmp_path: Path) -> None:
    program = _run("profile", "--time", "--", "./app")
    assert program.returncode == 2 and "--time times a cell" in program.stderr
    if shutil.which("nvidia-smi") is None:
        cell = _run("profile", "copy_bandwidth", "--time", "--store", str(tmp_path / "p"),
                    env={"NCU": str(FAKE_NCU)})
        assert cell.returncode == 2 and "Cannot time" in cell.stderr and "Traceback" not in cell.stderr
        assert not (tmp_path / "p").exists()


def test_profile_without_ncu_says_where_it_looked(tmp_path: Path) -> None:
    result = _run("profile", "copy_bandwidth", "--store", str(tmp_path / "p"),
                  "--ncu", str(tmp_path / "no-ncu"))
    assert result.returncode == 2 and "not an executable" in result.stderr
    assert "Traceback" not in result.stderr


# ----------------------------------------------------------------------------- doctor


def test_doctor_on_a_machine_without_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi, no ncu
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.setattr(doctor, "NVIDIA_VERSION", tmp_path / "no-driver")
    monkeypatch.setattr(doctor, "NVIDIA_PARAMS", tmp_path / "no-params")
    monkeypatch.setattr("ncuflow.profile.ncu.OPT_NCU_GLOB", str(tmp_path / "opt" / "*" / "ncu"))
    monkeypatch.setattr("ncuflow.profile.ncu.FIXED_NCU_LOCATIONS", (str(tmp_path / "cuda-ncu"),))
    checks = {c.name: c for c in doctor.run_checks()}
    assert checks["gpu"].status == "fail" and "no NVIDIA GPU is visible" in checks["gpu"].detail
    assert checks["ncu"].status == "fail"
    assert checks["counters"].status == "skip"
    assert checks["ncu_report"].status == "ok"
    ok, sentence = doctor.verdict(list(checks.values()))
    assert not ok and "cannot profile" in sentence and "Reading stored reports works" in sentence
    assert "ncuflow doctor" not in (checks["ncu"].fix or "")  # doctor's fix never sends the user to doctor
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    assert result.exit_code == 1  # 0 only where this machine can profile
    data = json.loads(result.output)
    assert data["can_profile"] is False
    assert CliRunner().invoke(cli, ["doctor", "--strict"]).exit_code == 1
    plain = CliRunner().invoke(cli, ["doctor"])
    assert plain.exit_code == 1 and "cannot profile" in plain.output
    assert "ncuflow doctor" not in plain.output


def _gpu_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine that can profile, as doctor sees it: the fake ncu and a fake nvidia-smi on PATH,
    counters open to every user. Returns the PATH folder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ncu").symlink_to(FAKE_NCU)
    smi = bin_dir / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "0, NVIDIA H200, GPU-1234, 580.65"\n')
    smi.chmod(0o755)
    params = tmp_path / "params"
    params.write_text("RmProfilingAdminOnly: 0\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}/usr/bin:/bin")
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.setattr(doctor, "NVIDIA_PARAMS", params)
    return bin_dir


def test_doctor_exits_0_only_where_this_machine_can_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _gpu_host(tmp_path, monkeypatch)
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    data = json.loads(result.output)
    assert data["can_profile"] is True and result.exit_code == 0, result.output
    (tmp_path / "params").write_text("RmProfilingAdminOnly: 1\n")
    if os.geteuid() != 0:  # as root the counters stay open
        result = CliRunner().invoke(cli, ["doctor"])
        assert result.exit_code == 1 and "cannot profile (counters:" in result.output


def test_doctor_names_a_running_dcgm_host_engine_and_how_to_pause_it(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """DCGM's nv-hostengine holds the profiling counters while its profiling module watches them:
    a fake one, started from PATH as DCGM's service starts it, is named with `dcgmi profile --pause`."""
    from ncuflow.profile.dcgm import HOST_ENGINE, PAUSE

    bin_dir = _gpu_host(tmp_path, monkeypatch)
    assert doctor.check_dcgm().status == "ok"  # none runs here (this test's machine)
    engine = bin_dir / HOST_ENGINE
    engine.write_text("#!/bin/sh\nwhile :; do sleep 1; done\n")  # a script runs under its own name (comm)
    engine.chmod(0o755)
    process = subprocess.Popen([HOST_ENGINE], env={"PATH": os.environ["PATH"]})
    try:
        comm, deadline = Path(f"/proc/{process.pid}/comm"), time.monotonic() + 10
        while comm.read_text().strip() != HOST_ENGINE and time.monotonic() < deadline:
            time.sleep(0.05)  # the shell has not yet taken the script's name
        check = doctor.check_dcgm()
        assert check.status == "warn" and str(process.pid) in check.detail, check
        assert check.fix and PAUSE in check.fix
        result = CliRunner().invoke(cli, ["doctor"], terminal_width=200)
        assert PAUSE in result.output and HOST_ENGINE in result.output
        assert result.exit_code == 0  # a warning: ncu may still profile when DCGM's profiling is idle
    finally:
        process.kill()
        process.wait()
    assert doctor.check_dcgm().status == "ok"


def test_doctor_finds_the_fake_ncu() -> None:
    check, path = doctor.check_ncu(str(FAKE_NCU), None)
    assert check.status == "ok" and "2025.3.1.0" in check.detail and path == FAKE_NCU


@pytest.mark.parametrize(("text", "euid", "status"), [
    ("RmProfilingAdminOnly: 0\n", 1000, "ok"),
    ("EnableMSI: 1\nRmProfilingAdminOnly: 1\n", 1000, "fail"),
    ("RmProfilingAdminOnly: 1\n", 0, "ok"),
    ("EnableMSI: 1\n", 1000, "warn"),
])
def test_counter_permission(tmp_path: Path, text: str, euid: int, status: str) -> None:
    params = tmp_path / "params"
    params.write_text(text)
    check = doctor.check_counters(True, params, euid=euid)
    assert check.status == status
    if status == "fail":
        assert check.fix and "NVreg_RestrictProfilingToAdminUsers=0" in check.fix


# ----------------------------------------------------------------------------- no polars


def test_profiling_path_never_imports_polars() -> None:
    code = (
        "import sys\n"
        "sys.modules['polars'] = None  # any `import polars` now raises ImportError\n"
        f"for name in {PROFILING_MODULES!r}:\n"
        "    __import__(name)\n"
        "from ncuflow.cli import main\n"
        "try:\n"
        "    main(['profile', 'copy_bandwidth', '--dry-run', '--ncu', 'ncu'])\n"
        "except SystemExit as done:\n"
        "    assert not done.code, done.code\n"
        "try:\n"
        "    main(['doctor', '--json'])\n"
        "except SystemExit as done:\n"
        "    assert not done.code, done.code\n"
        "from ncuflow.cli import profile_cmds\n"
        "import importlib\n"
        "for name in ('ncuflow.output.render', 'ncuflow.read.extract', 'ncuflow.analyze.classify'):\n"
        "    importlib.import_module(name)\n"
        "print('OK', 'polars' in sys.modules and sys.modules['polars'] is not None)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("OK False")
