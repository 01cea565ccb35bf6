"""Packaging: every subpackage is installed, and the cells live inside the ncuflow namespace."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_subpackage_is_listed_for_installation() -> None:
    setuptools = _pyproject()["tool"]["setuptools"]  # type: ignore[index]
    listed = set(setuptools["packages"])  # type: ignore[index]
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "ncuflow").rglob("__init__.py")}
    assert found | {"ncuflow.kernels"} == listed, sorted(found ^ (listed - {"ncuflow.kernels"}))
    assert setuptools["package-dir"] == {"ncuflow.kernels": "kernels"}  # type: ignore[index]


def test_the_cells_import_as_ncuflow_kernels_and_never_as_kernels(tmp_path: Path) -> None:
    """Run outside the checkout, so the current folder cannot supply a top-level ``kernels``."""
    code = (
        "import importlib.util, ncuflow.kernels, ncuflow.kernels.paged_decode\n"
        "print(ncuflow.kernels.__file__)\n"
        "print(importlib.util.find_spec('kernels'))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    location, top_level = result.stdout.splitlines()
    assert Path(location) == ROOT / "kernels" / "__init__.py"
    assert top_level == "None"


def test_a_checkout_that_is_not_installed_still_finds_its_cells(tmp_path: Path) -> None:
    """The GPU host runs `python -m ncuflow` from a checkout with nothing installed."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import ncuflow.kernels.copy_bandwidth as cell\n"
        "print(cell.__file__)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"}
    result = subprocess.run([sys.executable, "-S", "-c", code, str(ROOT)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, check=False, env=env)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == ROOT / "kernels" / "copy_bandwidth.py"
