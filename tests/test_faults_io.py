"""Fault injection, files: full disk, read-only file systems, permission denied, outputs that are not ours.

Each case asserts: a non-zero exit, one paragraph naming the path (never a traceback),
nothing partial left, earlier results intact. A full disk and a read-only file system
are real (a small tmpfs, remounted read-only) where this runs as root and may mount;
elsewhere the write call is made to fail. Permission denied is real: as root the
command runs as ``nobody`` (setpriv), otherwise in a folder without write permission.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ncuflow import store
from ncuflow.cells.contract import CellSpec
from ncuflow.cli import main

FAKE_NCU = Path(__file__).parent / "fake_ncu" / "ncu"
REPO = Path(__file__).resolve().parent.parent
SMALL = "yzwang2000__cudaCode__profile.ncu-rep"  # 2 launches
LARGE = "spymaster2h__spyinfer__report.ncu-rep"  # 105 launches


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The CLI in this process: its exit status and everything it printed (a traceback would raise)."""
    capsys.readouterr()
    try:
        main(argv)
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    out, err = capsys.readouterr()
    return code, out + err


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.startswith((".ncuflow-tmp-", ".tmp-"))]


@contextlib.contextmanager
def tmpfs(folder: Path, size: str = "3m") -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a real tmpfs needs root; the injected-failure tests cover this case")
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> Path:
    """Fill the file system of ``folder`` to the last byte."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for size in (1 << 16, 1 << 12, 1 << 9, 1):
            chunk = b"\0" * size
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, chunk)
    finally:
        os.close(fd)
    return filler


def remount_read_only(folder: Path) -> None:
    done = subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot remount read-only: {done.stderr.strip()}")


def _fake_env(corpus_dir: Path, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NCU_")}
    env.update({"FAKE_NCU_REPORT": str(corpus_dir / SMALL), "FAKE_NCU_CALLS": str(tmp_path / "calls.jsonl")})
    return env


def _cli(args: list[str], env: dict[str, str] | None = None, user: str | None = None,
         cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    prefix = ["setpriv", "--reuid", user, "--regid", user, "--clear-groups"] if user else []
    return subprocess.run([*prefix, sys.executable, "-m", "ncuflow", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


def _is_paragraph(result: subprocess.CompletedProcess[str]) -> bool:
    text = result.stdout + result.stderr
    return result.returncode != 0 and "Traceback" not in text and "ncuflow:" in result.stderr


# ----------------------------------------------------------------------------- full disk


@pytest.mark.slow
def test_export_on_a_full_disk_keeps_the_previous_pair(corpus_dir: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with tmpfs(tmp_path / "fs") as fs:
        out = fs / "out.parquet"
        code, text = run_main(["export", str(corpus_dir / SMALL), "-o", str(out), "--metrics-long"], capsys)
        assert code == 0, text
        metrics = fs / "out.metrics.parquet"
        before = (_digest(out), _digest(metrics))
        filler = fill(fs)
        code, text = run_main(["export", str(corpus_dir / LARGE), "-o", str(out), "--metrics-long"], capsys)
        assert code != 0 and "Traceback" not in text
        assert "full" in text and str(fs) in text
        assert (_digest(out), _digest(metrics)) == before  # the previous pair, untouched and matching
        assert _leftovers(fs) == []
        filler.unlink()


@pytest.mark.slow
def test_export_to_csv_on_a_full_disk_blames_the_disk(corpus_dir: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """polars' CSV writer raises an OSError without errno ("... (os error 28)"): still the full disk."""
    with tmpfs(tmp_path / "fs") as fs:
        filler = fill(fs)
        code, text = run_main(["export", str(corpus_dir / LARGE), "-o", str(fs / "out.csv")], capsys)
        assert code != 0 and "Traceback" not in text
        assert "is full" in text and str(fs) in text
        assert _leftovers(fs) == []
        filler.unlink()


@pytest.mark.slow
def test_sweep_and_profile_on_a_full_disk_blame_the_disk(corpus_dir: Path, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "fs", size="4m") as fs:
        root = fs / "store"
        earlier = store.write_run(root, CellSpec.of("copy_bandwidth", {"mib": 1}), corpus_dir / SMALL, content_key="a" * 64)
        report_before = _digest(earlier.report_path)
        sweep_file = tmp_path / "s.toml"
        sweep_file.write_text('cell = "copy_bandwidth"\n[axes]\nmib = [16, 32]\n')
        filler = fill(fs)
        env = _fake_env(corpus_dir, tmp_path)
        for args in (["sweep", str(sweep_file)], ["profile", "copy_bandwidth:mib=64"]):
            result = _cli([*args, "--store", str(root), "--ncu", str(FAKE_NCU)], env=env)
            assert _is_paragraph(result), result.stdout + result.stderr
            assert "space" in result.stderr or "full" in result.stderr
            assert "ncu.log" not in result.stderr  # no log was written, so none is named
            assert _leftovers(fs) == []
        assert [r.path for r in store.iter_runs(root)] == [earlier.path]
        assert _digest(earlier.report_path) == report_before
        filler.unlink()


def test_a_failed_write_keeps_the_previous_pair(corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Injected at the write call (no tmpfs needed): the disk fills while the launches table is written."""
    import polars as pl

    out = tmp_path / "out.parquet"
    code, text = run_main(["export", str(corpus_dir / SMALL), "-o", str(out), "--metrics-long"], capsys)
    assert code == 0, text
    metrics = tmp_path / "out.metrics.parquet"
    before = (_digest(out), _digest(metrics))
    real_sink = pl.LazyFrame.sink_parquet
    calls: list[object] = []

    def sink_then_fail(self: pl.LazyFrame, path: object, **kwargs: object) -> object:
        calls.append(path)
        if len(calls) == 2:  # the metrics table is written, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_sink(self, path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pl.LazyFrame, "sink_parquet", sink_then_fail)
    code, text = run_main(["export", str(corpus_dir / LARGE), "-o", str(out), "--metrics-long"], capsys)
    assert code != 0 and "Traceback" not in text and "full" in text
    assert (_digest(out), _digest(metrics)) == before
    assert _leftovers(tmp_path) == []


def test_a_failed_rename_of_the_second_file_restores_the_first(corpus_dir: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    import ncuflow.files as files

    out = tmp_path / "out.parquet"
    assert run_main(["export", str(corpus_dir / SMALL), "-o", str(out), "--metrics-long"], capsys)[0] == 0
    metrics = tmp_path / "out.metrics.parquet"
    before = (_digest(out), _digest(metrics))
    real_replace = os.replace

    def replace(source: object, target: object) -> None:
        if Path(str(target)) == out:
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(target))
        real_replace(source, target)  # type: ignore[arg-type]

    monkeypatch.setattr(files.os, "replace", replace)
    code, text = run_main(["export", str(corpus_dir / LARGE), "-o", str(out), "--metrics-long"], capsys)
    monkeypatch.undo()
    assert code != 0 and "Traceback" not in text
    assert (_digest(out), _digest(metrics)) == before  # the metrics file put back
    assert _leftovers(tmp_path) == []


# ----------------------------------------------------------------------------- read-only, permission


@pytest.mark.slow
def test_a_read_only_file_system_is_a_paragraph_for_every_writer(corpus_dir: Path, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "fs", size="8m") as fs:
        root = fs / "store"
        store.write_run(root, CellSpec.of("copy_bandwidth", {"mib": 1}), corpus_dir / SMALL, content_key="b" * 64)
        sweep_file = tmp_path / "s.toml"
        sweep_file.write_text('cell = "copy_bandwidth"\n[axes]\nmib = [16]\n')
        remount_read_only(fs)
        report = str(corpus_dir / SMALL)
        env = _fake_env(corpus_dir, tmp_path)
        cases = [
            ["export", report, "-o", str(fs / "x.parquet")],
            ["report", report, "-o", str(fs / "rep")],
            ["stability", report, "--markdown", str(fs / "s.md")],
            ["sweep", str(sweep_file), "--store", str(root), "--ncu", str(FAKE_NCU)],
        ]
        for args in cases:
            result = _cli(args, env=env)
            assert _is_paragraph(result), (args, result.stdout + result.stderr)
            assert "read-only" in result.stderr, (args, result.stderr)
        assert len(list(store.iter_runs(root))) == 1


@pytest.mark.slow
def test_permission_denied_is_a_paragraph_for_every_writer(corpus_dir: Path, tmp_path: Path) -> None:
    from ncuflow.profile.plan import CommandTarget, ProfileJob

    user = None
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv cannot drop its permissions")
        user = "65534"  # nobody: reaches the folder, cannot write in it
        base = Path(tempfile.mkdtemp(prefix="ncuflow-eacces-", dir="/tmp"))
        base.chmod(0o755)
    else:
        base = tmp_path
    locked = base / "locked"
    root = locked / "store"
    job = ProfileJob(CommandTarget(("true",)))
    point = store.point_dir(root, job.spec(), job.content_key())
    point.mkdir(parents=True)  # the point folder exists, and is not writable
    folders = (point, point.parent, root, locked)
    if user is None:
        for folder in folders:
            folder.chmod(0o555)
    mpl = base / "mpl"
    mpl.mkdir()
    mpl.chmod(0o777)
    report = str(corpus_dir / SMALL)
    env = {**_fake_env(corpus_dir, tmp_path), "MPLCONFIGDIR": str(mpl)}
    cases = [
        ["export", report, "-o", str(locked / "x.parquet")],
        ["report", report, "-o", str(locked / "rep")],
        ["stability", report, "--markdown", str(locked / "s.md"), "--parquet", str(locked / "s.parquet")],
        ["profile", "--store", str(root), "--ncu", str(FAKE_NCU), "--", "true"],
    ]
    try:
        for args in cases:
            result = _cli(args, env=env, user=user)
            assert _is_paragraph(result), (args, result.stdout + result.stderr)
            assert "ermission" in result.stderr, (args, result.stderr)
        assert sorted(p.name for p in locked.iterdir()) == ["store"]
        assert sorted(p.name for p in point.iterdir()) == []
    finally:
        for folder in folders:
            folder.chmod(0o755)
        if user is not None:
            shutil.rmtree(base, ignore_errors=True)
