"""Facts about this machine for the run manifest: the GPU (nvidia-smi), package versions."""

from __future__ import annotations

import subprocess
from typing import Any


def nvidia_smi_facts(timeout: float = 10.0) -> dict[str, Any]:
    import shutil

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        done = subprocess.run(
            [smi, "--query-gpu=name,uuid,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    first = done.stdout.strip().splitlines()[:1]
    if done.returncode != 0 or not first:
        return {}
    parts = [p.strip() for p in first[0].split(",")]
    if len(parts) < 3:
        return {}
    return {"gpu_name": parts[0], "gpu_uuid": parts[1], "driver_version": parts[2]}


def package_version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
