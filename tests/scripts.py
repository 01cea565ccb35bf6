"""The project's analysis scripts (``analysis/*.py``), loaded as modules for tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ANALYSIS = Path(__file__).resolve().parent.parent / "analysis"


def analysis_script(name: str) -> ModuleType:
    """``analysis/<name>.py`` as a fresh module (its ``main`` is not run)."""
    spec = importlib.util.spec_from_file_location(f"analysis_{name}", ANALYSIS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # where dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    return module
