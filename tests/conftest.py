"""Shared fixtures: where the real data lives, and the gpu marker."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def _first_existing(*candidates: Path) -> Path:
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return candidates[0]


# The corpus of real reports made by others: never copied into the project.
CORPUS_DIR = Path(
    os.environ.get("NCUFLOW_CORPUS")
    or _first_existing(REPO_ROOT.parent / "shared" / "ncu-reports", REPO_ROOT / "shared" / "ncu-reports")
)
SERVING_LOGS_DIR = Path(
    os.environ.get("NCUFLOW_SERVING_LOGS")
    or _first_existing(REPO_ROOT.parent / "shared" / "serving-logs", REPO_ROOT / "shared" / "serving-logs")
)
REFERENCE_DIR = REPO_ROOT / "profiles" / "reference"


def corpus_reports() -> list[Path]:
    if not CORPUS_DIR.is_dir():
        return []
    return sorted(
        p for p in CORPUS_DIR.iterdir() if p.suffix in {".ncu-rep", ".ncu-repz", ".nsight-cuprof-report"}
    )


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    if not CORPUS_DIR.is_dir():
        pytest.skip(f"the report corpus is not at {CORPUS_DIR}; set NCUFLOW_CORPUS")
    return CORPUS_DIR


@pytest.fixture(scope="session")
def serving_logs_dir() -> Path:
    if not SERVING_LOGS_DIR.is_dir():
        pytest.skip(f"the serving logs are not at {SERVING_LOGS_DIR}; set NCUFLOW_SERVING_LOGS")
    return SERVING_LOGS_DIR


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    have_gpu = shutil.which("nvidia-smi") is not None and shutil.which("ncu") is not None
    if have_gpu:
        return
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU and the ncu CLI")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
