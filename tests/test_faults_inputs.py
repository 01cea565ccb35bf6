"""Fault injection, input: every hostile input gets one paragraph where it enters, and no output is replaced.

Sweep files of the wrong types, numbers out of range or not finite, regexes that do
not compile, baselines the store does not hold, files that are not regular, outputs
that name an input or someone else's file, and ncu paths that mean what they say.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ncuflow import store
from ncuflow.cells.contract import CellSpec
from ncuflow.errors import UsageError
from ncuflow.profile.sweep import load_sweep
from tests.test_faults_io import run_main

FAKE_NCU = Path(__file__).parent / "fake_ncu" / "ncu"
REPO = Path(__file__).resolve().parent.parent
SMALL = "yzwang2000__cudaCode__profile.ncu-rep"
OTHER = "spymaster2h__spyinfer__report.ncu-rep"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- sweep files


BAD_SWEEPS = [
    ('cell = "copy_bandwidth"\n[ncu]\nlaunch_count = "abc"\n', "ncu.launch_count", 3),
    ('cell = "copy_bandwidth"\n[ncu]\nsections = [1, 2]\n', "ncu.sections", 3),
    ('cell = "copy_bandwidth"\nfixed = 3\n', "fixed = 3", 2),
    ('cell = "copy_bandwidth"\nncu = "x"\n', "ncu = 'x'", 2),
    ('cell = "copy_bandwidth"\n[ncu]\nkernel = ["a"]\n', "ncu.kernel", 3),
    ('cell = "copy_bandwidth"\n[ncu]\nkernel = "(["\n', "ncu.kernel", 3),
    ('cell = "copy_bandwidth"\ntimeout = nan\n', "timeout = nan", 2),
    ('cell = "copy_bandwidth"\ntimeout = inf\n', "timeout = inf", 2),
    ('cell = "copy_bandwidth"\nreplicas = true\n', "replicas = True", 2),
    ('cell = "copy_bandwidth"\n[ncu]\nreplay_mode = "bogus"\n', "one of: kernel", 3),
    ('cell = "copy_bandwidth"\n[axes]\nmib = [16, nan]\n', "axes.mib", 3),
    ('cell = "copy_bandwidth"\n[fixed]\nmib = -5\n', "out of range", None),
    ('cell = "copy_bandwidth"\n[axes]\nmib = [16, 99999999999999999]\n', "out of range", None),
]


@pytest.mark.parametrize(("text", "named", "line"), BAD_SWEEPS)
def test_bad_sweep_files_are_one_paragraph_naming_the_key_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, named: str, line: int | None) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UsageError) as caught:
        load_sweep(path)
    message = str(caught.value)
    assert named in message
    if line is not None:
        assert f"line {line}" in message
    code, output = run_main(["sweep", str(path), "--dry-run", "--store", str(tmp_path / "s")], capsys)
    assert code == 2 and "Traceback" not in output and named in output


def test_a_sweep_file_that_is_not_utf8_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(b'cell = "copy_bandwidth"\n# caf\xe9\n')
    code, output = run_main(["sweep", str(path), "--dry-run"], capsys)
    assert code == 2 and "not UTF-8" in output and "line 2" in output


@pytest.mark.parametrize("command", [["sweep", "SWEEP"], ["profile", "copy_bandwidth", "--dry-run"],
                                     ["stability", "copy_bandwidth"]])
@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_timeout_that_is_not_a_positive_finite_number_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], value: str) -> None:
    sweep = tmp_path / "ok.toml"
    sweep.write_text('cell = "copy_bandwidth"\n')
    argv = [str(sweep) if a == "SWEEP" else a for a in command]
    code, output = run_main([*argv, "--timeout", value, "--store", str(tmp_path / "s")], capsys)
    assert code == 2 and "Traceback" not in output and "--timeout" in output
    assert not (tmp_path / "s").exists()


# ----------------------------------------------------------------------------- numbers, regexes, baselines


@pytest.mark.parametrize(("argv", "words"), [
    (["time", "plan_host:index_len=99999999999999"], "valid range is 1 ... 2147483647"),
    (["profile", "copy_bandwidth:mib=-5", "--dry-run"], "valid range is 1"),
    (["profile", "copy_bandwidth:mib=0", "--dry-run"], "out of range"),
    (["profile", "copy_bandwidth:seed=99999999999999999999", "--dry-run"], "out of range"),
    (["profile", "copy_bandwidth", "--kernel", "([", "--dry-run"], "does not compile"),
    (["classify", "/dev/zero"], "character device"),
    (["classify", "--threshold", "nan", "x.ncu-rep"], "not a finite number"),
    (["stability", "x.ncu-rep", "--tol", "inst_issued=nan"], "finite number"),
])
def test_numbers_and_regexes_are_checked_where_they_enter(argv: list[str], words: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, output = run_main(argv, capsys)
    assert code == 2 and "Traceback" not in output and words in output
    assert "empty" not in output


def test_a_kernel_regex_that_does_not_compile_never_reaches_ncu(corpus_dir: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / SMALL))
    monkeypatch.setenv("FAKE_NCU_CALLS", str(calls))
    code, output = run_main(["profile", "--kernel", "([", "--store", str(tmp_path / "s"), "--ncu", str(FAKE_NCU),
                             "--", "true"], capsys)
    assert code == 2 and "does not compile" in output
    assert not calls.exists() and not (tmp_path / "s").exists()


def test_report_baseline_must_be_a_value_in_the_store(corpus_dir: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "store"
    for mib in (16, 64):
        store.write_run(root, CellSpec.of("copy_bandwidth", {"impl": "triton", "mib": mib, "seed": 0}), corpus_dir / SMALL, content_key=hashlib.sha256(str(mib).encode()).hexdigest())
    for baseline, words in (("mib=999", "no run has mib=999"), ("pages=1", "not a swept parameter")):
        code, output = run_main(["report", str(root), "-o", str(tmp_path / f"out-{baseline}"), "--baseline", baseline],
                                capsys)
        assert code == 2 and words in output and "Traceback" not in output
        assert not (tmp_path / f"out-{baseline}").exists()
    code, output = run_main(["report", str(root), "-o", str(tmp_path / "ok"), "--baseline", "mib=64"], capsys)
    assert code == 0, output


def test_a_fifo_named_like_a_report_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "x.ncu-rep"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "ncuflow", "classify", str(fifo)], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "FIFO" in done.stderr and "Traceback" not in done.stderr


# ----------------------------------------------------------------------------- outputs that are not ours


def test_outputs_never_replace_an_input_or_a_file_that_is_not_theirs(corpus_dir: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "mine.ncu-rep"
    other = tmp_path / "other.ncu-rep"
    shutil.copyfile(corpus_dir / SMALL, mine)
    shutil.copyfile(corpus_dir / OTHER, other)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    launches = tmp_path / "launches.parquet"
    assert run_main(["export", str(mine), "-o", str(launches)], capsys)[0] == 0
    before = {p: _digest(p) for p in (mine, other, notes, launches)}
    refused = [
        ["export", str(mine), "-o", str(mine)],
        ["export", str(mine), "-o", str(other)],
        ["export", str(mine), "-o", str(notes)],
        ["stability", str(mine), "--markdown", str(mine)],
        ["stability", str(mine), "--markdown", str(other)],
        ["stability", str(mine), "--parquet", str(launches)],  # a launches table is not a stability table
        ["explain", str(mine), "--vary", "x", "--markdown", str(notes)],
        ["explain", str(mine), "--vary", "x", "--parquet", str(other)],
    ]
    for argv in refused:
        code, output = run_main(argv, capsys)
        assert code == 2 and "Refusing" in output and "Traceback" not in output, (argv, output)
    assert {p: _digest(p) for p in before} == before
    # the metrics sibling of an export belongs to the export: someone else's file there stops it whole
    (tmp_path / "new.metrics.parquet").write_text("not ours\n")
    code, output = run_main(["export", str(mine), "-o", str(tmp_path / "new.parquet"), "--metrics-long"], capsys)
    assert code == 2 and "new.metrics.parquet" in output and not (tmp_path / "new.parquet").exists()
    # a report folder with someone's report.md in it
    folder = tmp_path / "rep"
    folder.mkdir()
    (folder / "report.md").write_text("# My own report\n")
    code, output = run_main(["report", str(mine), "-o", str(folder)], capsys)
    assert code == 2 and "Refusing" in output and sorted(p.name for p in folder.iterdir()) == ["report.md"]
    code, output = run_main(["report", str(tmp_path), "-o", str(tmp_path)], capsys)
    assert code == 2 and "input" in output


def test_an_earlier_output_of_the_same_kind_is_replaced(corpus_dir: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    report = str(corpus_dir / SMALL)
    out = tmp_path / "out.parquet"
    for _ in range(2):
        assert run_main(["export", report, "-o", str(out), "--metrics-long"], capsys)[0] == 0
        assert run_main(["stability", report, "--markdown", str(tmp_path / "s.md"),
                         "--parquet", str(tmp_path / "s.parquet")], capsys)[0] == 0
        assert run_main(["report", report, "-o", str(tmp_path / "rep")], capsys)[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


# ----------------------------------------------------------------------------- ncu paths


def _wrong_ncu_on_path(folder: Path) -> Path:
    """An `ncu` on PATH that must never run: it leaves a mark and fails."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    wrong = bin_dir / "ncu"
    wrong.write_text(f"#!/bin/sh\ntouch {folder / 'WRONG_NCU_RAN'}\nexit 1\n")
    wrong.chmod(0o755)
    return bin_dir


def test_dot_slash_ncu_is_the_file_in_the_current_folder(corpus_dir: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copyfile(FAKE_NCU, work / "ncu")
    (work / "ncu").chmod(0o755)
    bin_dir = _wrong_ncu_on_path(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NCU_") and k != "NCU"}
    env.update({"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_NCU_REPORT": str(corpus_dir / SMALL)})
    base = [sys.executable, "-m", "ncuflow"]
    runs = [
        ([*base, "profile", "--store", "p1", "--ncu", "./ncu", "--", "true"], env),
        ([*base, "profile", "--store", "p2", "--", "true"], {**env, "NCU": "./ncu"}),
    ]
    for argv, run_env in runs:
        done = subprocess.run(argv, cwd=work, env=run_env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    manifests = [json.loads(p.read_text()) for p in work.glob("p*/*/*/*/manifest.json")]
    assert len(manifests) == 2 and {m["collection"]["ncu_path"] for m in manifests} == {str(work / "ncu")}
    assert not (tmp_path / "WRONG_NCU_RAN").exists()
    doctor = subprocess.run([*base, "doctor", "--json", "--ncu", "./ncu"], cwd=work, env=env, capture_output=True,
                            text=True, timeout=120)
    check = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "ncu")
    assert str(work / "ncu") in check["detail"] and "--ncu" in check["detail"]
    missing = subprocess.run([*base, "profile", "--ncu", "./nothere", "--", "true"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert str(work / "nothere") in missing.stderr and "does not exist" in missing.stderr
    bare = subprocess.run([*base, "profile", "--ncu", "ncu-nowhere", "--", "true"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    assert bare.returncode == 2 and "no program of that name is on PATH" in bare.stderr
