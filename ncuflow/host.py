"""Facts about this machine, asked in one place: installed package versions and nvidia-smi.

Used by the cells (timing facts, availability), the run manifest (``profile.facts``) and
``ncuflow doctor``. Never raises: a question the machine cannot answer gives None, an
empty dict, or an ``SmiAnswer`` that says why.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shutil
import signal
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

# After a timeout, how long the killed process may take to go before it is left behind.
KILL_GRACE_S = 2.0


def run_bounded(command: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str] | None:
    """Run a short question to the machine (``nvidia-smi``, ``ncu --version``); None if it has
    not answered within ``timeout`` seconds. Raises ``OSError`` if it cannot start.

    Unlike ``subprocess.run``, this never waits past ``timeout`` + ``KILL_GRACE_S``: a
    wedged GPU driver keeps nvidia-smi in an uninterruptible sleep that SIGKILL cannot end,
    and ``subprocess.run`` would wait for it forever after its timeout. Such a process (and
    its session, killed as a group) is left behind instead of hanging the command.
    """
    process = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        try:
            process.communicate(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            process.returncode = -signal.SIGKILL  # left behind: no "still running" warning at exit
        return None
    return subprocess.CompletedProcess(list(command), process.returncode, stdout, stderr)


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
        done = run_bounded(command, timeout)
    except OSError as error:
        return SmiAnswer("oserror", message=str(error))
    if done is None:
        return SmiAnswer("timeout", message=f"nvidia-smi did not answer within {timeout:g} s")
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

