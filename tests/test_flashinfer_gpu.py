"""FlashInfer's cells on a real GPU: each output against the torch reference, the representation.

Marked ``gpu`` (skipped without nvidia-smi and ncu, see conftest) and skipped where
flashinfer cannot be found (on the H200 it comes from the GPU bundle: `source env.sh`
after `python3 analysis/gpu_bundle.py activate DIR`). Shapes are the bundle's: fp16,
head_dim 128, 32 query heads over 8 KV heads.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="flashinfer is not importable here"),
]

SMALL = "batch=4,kv_len=4096"


def _cellrun(spec: str, out: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-m", "ncuflow.cells.cellrun", spec, "--representation-out", str(out)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr
    record: dict[str, Any] = json.loads(out.read_text())
    return record


@pytest.mark.parametrize(
    "spec",
    [
        *(f"flashinfer_decode:{SMALL},page={page},kv={kv}" for page in (1, 16) for kv in ("shared", "distinct")),
        f"flashinfer_decode:{SMALL},page=1,layout=scatter",
        f"flashinfer_decode:{SMALL},page=1,tensor_cores=false",
        *(f"xqa_decode:{SMALL},page={page},kv={kv}" for page in (16, 128) for kv in ("shared", "distinct")),
        "xqa_decode:batch=3,kv_len=1000,page=32,kv=distinct",  # a part-filled last page
    ],
)
def test_flashinfer_cells_match_the_torch_reference(spec: str, tmp_path: Path) -> None:
    record = _cellrun(spec, tmp_path / "rep.json")
    assert record["check"] is not None and record["check"]["passed"], record["check"]
    representation = record["representation"]
    page = int(spec.split("page=")[1].split(",")[0])
    assert representation["device_page_size"] == page == representation["effective_page_size"]
    assert representation["coercion"] is None
    kv_len = int(spec.split("kv_len=")[1].split(",")[0])
    batch = int(spec.split("batch=")[1].split(",")[0])
    assert representation["index_len"] == batch * -(-kv_len // page)


def test_flashinfer_plan_times_on_the_host() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ncuflow", "time", "flashinfer_plan:index_len=65536", "--repeats", "10", "--json"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["clock"] == "host_perf_counter" and payload["representation"]["index_len"] == 65536
    assert 0 < payload["stats"]["median_us"] < 100_000
