"""The benchmark scripts' own housekeeping (their figures come from runs, never from tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.scripts import analysis_script


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_benchs_work_folder_is_removed_by_the_next_and_no_other(tmp_path: Path) -> None:
    bench = analysis_script("bench_extraction")
    dead = tmp_path / f"{bench.BENCH_MARK}{_dead_pid()}-abc"
    live = tmp_path / f"{bench.BENCH_MARK}{os.getpid()}-def"
    unnamed = tmp_path / f"{bench.BENCH_MARK}xyz"
    for folder in (dead, live, unnamed):
        (folder / "scaled").mkdir(parents=True)
    linked = tmp_path / f"{bench.BENCH_MARK}{_dead_pid()}-link"
    linked.symlink_to(live)
    assert bench.remove_dead_benches(tmp_path) == [dead]
    assert not dead.exists()
    assert live.is_dir() and unnamed.is_dir() and linked.is_symlink()
