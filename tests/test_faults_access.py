"""Fault injection, runs this user cannot read (issue 31): "cannot be read" is its own state.

Before: without read permission (root without CAP_DAC_OVERRIDE), a 104 KB report was "empty
(0 bytes)" and ``store check --repair`` moved it aside, and a run whose manifest was unreadable
too: 2 healthy runs hidden; a run folder of mode 000 failed classify, export, stability and
store check outright ("Choose a folder you can write to"). Now such a run is named as one that
cannot be read, skipped by readers with one line, and never moved. Root reads through any
mode, so each command runs with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped
(``setpriv``), or as it is for a user that is not root.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ncuflow import store
from ncuflow.profile.sweep import parse_sweep
from ncuflow.store import MANIFEST_NAME, REPORT_NAME
from tests.hostile import FIGURES, figures_line, run_limited

SMALL = "yzwang2000__cudaCode__profile.ncu-rep"
SEEN: Counter[str] = Counter()
SETPRIV = shutil.which("setpriv")
AS_ROOT = os.geteuid() == 0
pytestmark = pytest.mark.skipif(AS_ROOT and SETPRIV is None,
                                reason="root reads every file; dropping CAP_DAC_OVERRIDE needs setpriv")


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    print(figures_line("unreadable run figures", SEEN), figures_line("fault suite so far", FIGURES))


def _without_dac_override(args: list[str]) -> list[str]:
    prefix = [SETPRIV, "--bounding-set=-dac_override,-dac_read_search", "--"] if AS_ROOT and SETPRIV else []
    return [*prefix, sys.executable, "-m", "ncuflow", *args]


def _store(root: Path, corpus_dir: Path) -> list[store.RunRecord]:
    plan = parse_sweep({"cell": "copy_bandwidth", "replicas": 1, "axes": {"mib": [16, 32, 64, 128, 256]}})
    return [store.write_run(root, point.spec, corpus_dir / SMALL) for point in plan.points]


def _lock_out(records: list[store.RunRecord]) -> list[Path]:
    """Run 0: its report unreadable; 1: its folder mode 000; 2: its manifest and report unreadable;
    3: its point folder mode 000; 4 stays readable. Returns the paths whose mode was changed."""
    changed = [records[0].report_path, records[1].path, records[2].path / MANIFEST_NAME,
               records[2].path / REPORT_NAME, records[3].path.parent]
    for path in changed:
        os.chmod(path, 0)
    return changed


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if os.access(root, os.R_OK) else []


@pytest.fixture
def locked_store(corpus_dir: Path, tmp_path: Path) -> Iterator[tuple[Path, list[store.RunRecord]]]:
    root = tmp_path / "store"
    records = _store(root, corpus_dir)
    changed = _lock_out(records)
    yield root, records
    for path in changed:
        os.chmod(path, stat.S_IRWXU)


def test_store_check_names_runs_it_cannot_read_and_repair_moves_none(locked_store: tuple[Path, list]) -> None:
    root, records = locked_store
    before = sorted(os.listdir(records[0].path.parent)), sorted(os.listdir(records[2].path.parent))
    for argv in (["store", "check", str(root)], ["store", "check", str(root), "--repair"]):
        ran = run_limited(argv, command=_without_dac_override(argv), case="unreadable-store-check")
        SEEN["cases"] += 1
        assert ran.code == 1 and not ran.traceback, ran.output[-2000:]
        assert "1 complete runs, 0 damaged, 4 cannot be read by this user" in ran.stderr, ran.stderr
        assert "empty" not in ran.output and "moved" not in ran.stdout
        for record in records[:3]:
            assert f"unreadable\t{record.path}" in ran.stdout
        assert f"unreadable\t{records[3].path.parent}\tthe folder cannot be read" in ran.stdout
    after = sorted(os.listdir(records[0].path.parent)), sorted(os.listdir(records[2].path.parent))
    SEEN["healthy_runs_hidden"] += sum(len(b) - len(a) for a, b in zip(after, before, strict=True))
    assert after == before  # nothing moved aside


@pytest.mark.parametrize("command", ["classify", "export", "stability", "compare", "report", "summary"])
def test_every_reader_skips_a_run_it_cannot_read_with_one_line(locked_store: tuple[Path, list], tmp_path: Path,
                                                               command: str) -> None:
    root, _ = locked_store
    argv = {"classify": ["classify", str(root)], "export": ["export", str(root), "-o", str(tmp_path / "x.parquet")],
            "stability": ["stability", str(root)], "compare": ["compare", str(root), str(root)],
            "report": ["report", str(root), "-o", str(tmp_path / "report")],
            "summary": ["summary", str(root)]}[command]
    ran = run_limited(argv, command=_without_dac_override(argv), case="unreadable-read")
    SEEN["cases"] += 1
    assert ran.code == 0 and not ran.traceback, ran.output[-2000:]
    assert "Choose a folder you can write to" not in ran.output and "empty (0 bytes)" not in ran.output
    assert ran.stderr.count("cannot be read") == 4, ran.stderr  # each run named once, the readable one read
    assert "kernel_A" in ran.stdout or command in ("export", "report")


def test_a_report_without_read_permission_is_named_so(corpus_dir: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.ncu-rep"
    shutil.copyfile(corpus_dir / SMALL, report)
    os.chmod(report, 0)
    ran = run_limited(["classify", str(report)], command=_without_dac_override(["classify", str(report)]),
                      case="unreadable-report")
    SEEN["cases"] += 1
    assert ran.code == 2 and not ran.traceback, ran.output  # click's check of the argument, or ncuflow's
    assert "is not readable" in ran.stderr or "cannot be read: Permission denied" in ran.stderr, ran.stderr


def test_a_sweep_counts_a_run_it_cannot_read_as_present_and_says_so(corpus_dir: Path, tmp_path: Path) -> None:
    """Before: the unreadable run counted as missing and was profiled again (3 runs where 2 replicas were asked)."""
    root = tmp_path / "store"
    spec = {"cell": "copy_bandwidth", "replicas": 2, "axes": {"mib": [16]}}
    point = parse_sweep(spec).points[0]
    records = [store.write_run(root, point.spec, corpus_dir / SMALL) for _ in range(2)]
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text('cell = "copy_bandwidth"\nreplicas = 2\n[axes]\nmib = [16]\n')
    calls = tmp_path / "calls.jsonl"
    fake_ncu = Path(__file__).parent / "fake_ncu" / "ncu"
    env = {**os.environ, "FAKE_NCU_REPORT": str(corpus_dir / SMALL), "FAKE_NCU_CALLS": str(calls)}
    os.chmod(records[1].path, 0)
    try:
        argv = ["sweep", str(sweep_file), "--store", str(root), "--ncu", str(fake_ncu)]
        ran = run_limited(argv, command=_without_dac_override(argv), env=env, case="unreadable-sweep")
    finally:
        os.chmod(records[1].path, stat.S_IRWXU)
    SEEN["cases"] += 1
    assert ran.code == 0 and not ran.traceback, ran.output[-2000:]
    assert "1 run(s) of this sweep cannot be read by this user" in ran.output, ran.output
    assert "counted as present, not profiled again" in ran.output
    assert not calls.exists(), calls.read_text()  # nothing profiled
    runs = sorted(name for name in os.listdir(records[0].path.parent) if name != ".lock")
    SEEN["unreadable_runs_profiled_again"] += len(runs) - 2
    assert runs == sorted([records[0].path.name, records[1].path.name])
