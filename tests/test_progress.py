"""Long work shows a progress bar on a terminal and nothing when piped."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
COPIES = REPO / "profiles" / "reference" / "h200" / "copy_bandwidth"


def _ncuflow(args: list[str], *, terminal: bool, cwd: Path) -> str:
    """stdout and stderr of one command, on a pseudo-terminal (util-linux `script`) or piped."""
    command = [sys.executable, "-m", "ncuflow", *args]
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    if terminal:
        if shutil.which("script") is None:
            pytest.skip("script (util-linux) is not installed")
        done = subprocess.run(["script", "-qec", " ".join(command), "/dev/null"], capture_output=True, text=True,
                              cwd=cwd, env=env, timeout=300, check=False)
    else:
        done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.mark.parametrize("terminal", [True, False])
def test_report_shows_its_stages_only_on_a_terminal(tmp_path: Path, terminal: bool) -> None:
    """`report` read and drew for 11–19 s showing nothing."""
    output = _ncuflow(["report", str(COPIES), "-o", str(tmp_path / "r")], terminal=terminal, cwd=tmp_path)
    assert ("drawing plots" in output) is terminal and ("reading" in output) is terminal
    assert "wrote" in output and "plots" in output


@pytest.mark.parametrize("terminal", [True, False])
def test_export_and_passes_show_progress_only_on_a_terminal(corpus_dir: Path, tmp_path: Path, terminal: bool) -> None:
    reports = sorted(corpus_dir.glob("jestes15*.ncu-rep")) + sorted(corpus_dir.glob("Swagatam1812*.ncu-rep"))
    output = _ncuflow(["export", *map(str, reports), "-o", str(tmp_path / "l.parquet"), "--metrics-long"],
                      terminal=terminal, cwd=tmp_path)
    assert ("reading" in output) is terminal and "wrote" in output
    output = _ncuflow(["passes", *map(str, reports)], terminal=terminal, cwd=tmp_path)
    assert ("reading" in output) is terminal
