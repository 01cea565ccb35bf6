"""Facts about this machine, asked in one place: installed package versions and nvidia-smi.

Used by the cells (timing facts, availability), the run manifest (``profile.facts``) and
``ncuflow doctor``. Never raises: a question the machine cannot answer gives None, an
empty dict, or an ``SmiAnswer`` that says why.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal


def package_version(*names: str) -> str | None:
    """The installed version of the first distribution found among ``names``, without importing it."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


SmiOutcome = Literal["ok", "absent", "timeout", "oserror", "failed"]


@dataclass(frozen=True)
class SmiAnswer:
    """What ``nvidia-smi --query-gpu`` said: one row of fields per GPU, or why there is none."""

    outcome: SmiOutcome
    rows: tuple[tuple[str, ...], ...] = ()
    message: str = ""  # the error, or nvidia-smi's own first line when it failed

    @property
    def ok(self) -> bool:
        return self.outcome == "ok" and bool(self.rows)


def query_gpus(fields: Sequence[str], *, timeout: float = 10.0, index: int | None = None) -> SmiAnswer:
    """``nvidia-smi --query-gpu=FIELDS --format=csv,noheader`` (one GPU with ``index``)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return SmiAnswer("absent", message="nvidia-smi is not on PATH")
    command = [smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"]
    if index is not None:
        command.append(f"--id={index}")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return SmiAnswer("timeout", message=f"nvidia-smi did not answer within {timeout:g} s")
    except OSError as error:
        return SmiAnswer("oserror", message=str(error))
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        said = (done.stderr or done.stdout).strip().splitlines()[:1]
        return SmiAnswer("failed", message=said[0] if said else "")
    return SmiAnswer("ok", tuple(tuple(part.strip() for part in line.split(",")) for line in lines))


def gpu_facts(timeout: float = 10.0) -> dict[str, Any]:
    """The first GPU's name, UUID and driver version for a run manifest ({} when unknown)."""
    answer = query_gpus(("name", "uuid", "driver_version"), timeout=timeout)
    if not answer.ok or len(answer.rows[0]) < 3:
        return {}
    name, uuid, driver = answer.rows[0][:3]
    return {"gpu_name": name, "gpu_uuid": uuid, "driver_version": driver}


def driver_version(index: int = 0) -> str | None:
    """The NVIDIA driver version, from NVML when present, else nvidia-smi; None if neither."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    answer = query_gpus(("driver_version",), timeout=20.0, index=index)
    return answer.rows[0][0] if answer.ok else None


def has_nvidia_smi() -> bool:
    return shutil.which("nvidia-smi") is not None
