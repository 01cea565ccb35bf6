"""Cells on a real GPU: correctness (fp16 and bf16), the NVTX record, CUDA-event timing.

Marked ``gpu`` (skipped without nvidia-smi and ncu, see conftest). Everything runs in
subprocesses with TRITON_INTERPRET unset, because test_kernels_interpreter.py leaves
triton in interpreter mode inside the pytest process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

MEDIUM = "batch=4,kv_len=4096"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}


def _cellrun(spec: str, out: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "ncuflow.cells.cellrun", spec, "--representation-out", str(out)],
        capture_output=True, text=True, env=_env(), timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr
    record: dict[str, Any] = json.loads(out.read_text())
    return record


def _time(spec: str, *extra: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "ncuflow", "time", spec, "--json", *extra],
        capture_output=True, text=True, env=_env(), timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr
    payload: dict[str, Any] = json.loads(done.stdout)
    return payload


@pytest.mark.parametrize(
    "spec",
    [
        "copy_bandwidth:mib=256",
        "copy_bandwidth:mib=256,impl=torch",
        *(f"flat_decode:{MEDIUM},layout={layout}" for layout in ("contiguous", "block128", "scatter")),
        f"flat_decode:{MEDIUM},dtype=bf16",
        *(f"paged_decode:{MEDIUM},page={page},kv={kv}" for page in (1, 16, 32, 64, 128) for kv in ("shared", "distinct")),
        f"paged_decode:{MEDIUM},page=16,dtype=bf16",
        "paged_decode",  # the study's default cell
    ],
)
def test_cellrun_on_gpu_matches_reference(spec: str, tmp_path: Path) -> None:
    record = _cellrun(spec, tmp_path / "rep.json")
    assert record["check"] is None or record["check"]["passed"], record["check"]
    assert record["gpu_name"] and record["gpu_uuid"].startswith("GPU-")
    assert record["nvtx_range"] == f"ncuflow/{record['cell']}"
    assert record["expected_bytes"] > 0
    representation = record["representation"]
    for key in ("index_len", "page_table_len", "effective_page_size", "footprint_bytes", "dtype"):
        assert key in representation


def test_copy_bandwidth_is_near_the_dram_ceiling() -> None:
    payload = _time("copy_bandwidth", "--repeats", "30")
    assert payload["clock"] == "cuda_events"
    assert payload["rotating_copies"] == 1  # 2 GiB footprint: no rotation
    assert payload["achieved_gbps"] > 1000, payload["stats"]


def test_shared_paged_decode_rotates_buffers() -> None:
    payload = _time("paged_decode:page=16,kv=shared", "--repeats", "30")
    assert payload["rotating_copies"] > 1
    assert payload["footprint_bytes"] < payload["l2_bytes"]
    assert "cold" in payload["label"]
    stats = payload["stats"]
    assert stats["min_us"] <= stats["median_us"] <= stats["max_us"]
