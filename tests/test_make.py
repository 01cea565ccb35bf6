"""The Makefile's set-up is done once: a second `make demo` / `make test` goes straight to its job."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The Makefile and what its stamps are keyed on, with a venv whose python only logs its calls."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "install_real_ncu.sh").write_text("echo real-ncu >> calls.log\n")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\necho "python $*" >> "$(dirname "$0")/../../calls.log"\n')
    python.chmod(0o755)
    return tmp_path


def _make(folder: Path, *targets: str) -> list[str]:
    log = folder / "calls.log"
    log.unlink(missing_ok=True)
    done = subprocess.run(["make", "-s", *targets], cwd=folder, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MAKEFLAGS": ""}, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return log.read_text().splitlines() if log.exists() else []


def test_a_second_demo_and_test_do_not_install_again(checkout: Path) -> None:
    first = _make(checkout, "demo")
    assert any("pip install" in line for line in first) and any("analysis/demo.py" in line for line in first)
    second = _make(checkout, "demo")
    assert second == [line for line in first if "demo.py" in line]  # only the job
    tests = _make(checkout, "test")
    assert any("'.[dev,cells,passes,ray]'" in line or ".[dev,cells,passes,ray]" in line for line in tests)
    assert "real-ncu" in tests
    again = _make(checkout, "test")
    assert again == ["python -m pytest -q"]
    assert _make(checkout, "demo") == [line for line in first if "demo.py" in line]  # the test set-up covers it


def test_a_changed_pyproject_installs_again(checkout: Path) -> None:
    _make(checkout, "demo")
    time.sleep(1.1)  # file times of one second's resolution
    (checkout / "pyproject.toml").touch()
    assert any("pip install" in line for line in _make(checkout, "demo"))
