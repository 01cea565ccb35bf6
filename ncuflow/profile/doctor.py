"""``ncuflow doctor``: can this machine profile, and if not, exactly why not.

Every check is a plain subprocess or file read with a timeout; nothing imports torch
(slow, and it may initialise CUDA) or polars. On a machine with no GPU the checks
still run and say so plainly.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ncuflow import __version__
from ncuflow.errors import NcuflowError
from ncuflow.files.patterns import linear_engine
from ncuflow.host import has_nvidia_smi, package_version, query_gpus
from ncuflow.profile.dcgm import HOST_ENGINE, PAUSE, PROC, RESUME, host_engine_pids
from ncuflow.profile.ncu import find_ncu, ncu_version
from ncuflow.read.reportfile import ncu_install_python_dirs

Status = Literal["ok", "warn", "fail", "skip", "info"]
NVIDIA_PARAMS = Path("/proc/driver/nvidia/params")
NVIDIA_VERSION = Path("/proc/driver/nvidia/version")
REQUIRED = ("ncu", "ncu_report", "gpu", "counters")


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str | None = None


def _dist_version(*names: str) -> str | None:
    return package_version(*names)


def check_ncu(explicit: str | None, env: Mapping[str, str] | None) -> tuple[Check, Path | None]:
    try:
        path, how = find_ncu(explicit, env, hint="")  # its fix never sends the user back to doctor
    except NcuflowError as error:
        return Check("ncu", "fail", error.what, f"{error.why} {error.fix}"), None
    version = ncu_version(path, timeout=30)
    if version is None:
        return Check("ncu", "warn", f"{path} (found by {how}) but `ncu --version` gave no version",
                     "Run it by hand to see why; a broken install or missing libraries."), path
    return Check("ncu", "ok", f"Nsight Compute {version} at {path} (found by {how})"), path


def check_ncu_report(ncu: Path | None) -> Check:
    spec = importlib.util.find_spec("ncu_report")
    if spec is not None:
        try:
            import ncu_report  # noqa: F401  (the import is the check)
        except Exception as error:
            return Check("ncu_report", "fail", f"installed but fails to import: {type(error).__name__}: {error}",
                         "Reinstall it: pip install --force-reinstall ncu-report.")
        version = _dist_version("ncu-report", "ncu_report") or "unknown version"
        return Check("ncu_report", "ok", f"importable ({version}, {spec.origin})")
    extras = ncu_install_python_dirs(ncu)
    if extras:  # ncuflow imports it from there by itself (read.reportfile.import_ncu_report)
        return Check("ncu_report", "ok", f"from the ncu install: {extras[0]} (the ncu-report wheel is not installed)")
    return Check("ncu_report", "fail", "the Python module ncu_report is not importable",
                 "pip install ncu-report (or add <nsight-compute>/extras/python to PYTHONPATH).")


def check_gpu(timeout: float = 15.0) -> Check:
    if not has_nvidia_smi():
        if NVIDIA_VERSION.exists():
            return Check("gpu", "warn", "an NVIDIA driver is loaded but nvidia-smi is not on PATH",
                         "Install the driver utilities (nvidia-utils) or add nvidia-smi to PATH.")
        return Check("gpu", "fail",
                     "no NVIDIA GPU is visible on this machine (nvidia-smi is not on PATH and no "
                     "NVIDIA driver is loaded)",
                     "Profile on a machine with an NVIDIA GPU and driver (in Docker: --gpus all); "
                     "reading stored reports (classify, export, stability, explain, report) works here.")
    answer = query_gpus(("index", "name", "uuid", "driver_version"), timeout=timeout)
    if answer.outcome == "timeout":
        return Check("gpu", "fail", answer.message,
                     "The driver may be wedged; check `dmesg` and `nvidia-smi` by hand.")
    if answer.outcome == "oserror":
        return Check("gpu", "fail", f"nvidia-smi cannot run: {answer.message}", "Reinstall the NVIDIA driver utilities.")
    if not answer.ok:
        return Check("gpu", "fail", "nvidia-smi sees no GPU" + (f": {answer.message}" if answer.message else ""),
                     "Check the driver installation; in Docker run with --gpus all.")
    return Check("gpu", "ok", "; ".join(", ".join(row) for row in answer.rows))


def read_profiling_admin_only(params: Path = NVIDIA_PARAMS) -> int | None:
    """RmProfilingAdminOnly from the driver's parameters, or None when unknown."""
    try:
        text = params.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "RmProfilingAdminOnly":
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


def check_counters(gpu_ok: bool, params: Path = NVIDIA_PARAMS, euid: int | None = None) -> Check:
    if not gpu_ok and not params.exists():
        return Check("counters", "skip", "not applicable: no NVIDIA driver is loaded")
    value = read_profiling_admin_only(params)
    uid = os.geteuid() if euid is None else euid
    if value is None:
        return Check("counters", "warn", f"RmProfilingAdminOnly not found in {params}",
                     "A profile will tell: ERR_NVGPUCTRPERM means counters are restricted.")
    if value == 0:
        return Check("counters", "ok", "RmProfilingAdminOnly=0: every user may read the GPU counters")
    if uid == 0:
        return Check("counters", "ok", "RmProfilingAdminOnly=1, and ncuflow runs as root")
    return Check("counters", "fail",
                 "RmProfilingAdminOnly=1: only administrators may read the GPU counters "
                 "(ncu will fail with ERR_NVGPUCTRPERM)",
                 "Run as root (in Docker: --cap-add=SYS_ADMIN), or set "
                 "`options nvidia NVreg_RestrictProfilingToAdminUsers=0` in /etc/modprobe.d/ and "
                 "reload the driver.")


def check_dcgm(proc: Path = PROC) -> Check:
    """DCGM's host engine, whose profiling module holds the counters ncu needs while it runs."""
    pids = host_engine_pids(proc)
    if not pids:
        return Check("dcgm", "ok", f"no DCGM host engine ({HOST_ENGINE}) runs here (one outside this "
                     "container would not be seen)")
    listed = ", ".join(map(str, pids[:5])) + (f" and {len(pids) - 5} more" if len(pids) > 5 else "")
    return Check("dcgm", "warn",
                 f"DCGM's host engine {HOST_ENGINE} runs (pid {listed}): while its profiling module watches "
                 "the GPU (dcgm-exporter's DCGM_FI_PROF_* fields) it holds the performance counters, and ncu "
                 "fails with 'a driver resource was unavailable'",
                 f"Pause DCGM's profiling while you profile: `{PAUSE}`, then `{RESUME}` after "
                 "(where dcgm-exporter runs in a Kubernetes pod, run them in that pod).")


def check_packages() -> list[Check]:
    checks = [Check("python", "info", f"{sys.version.split()[0]} ({sys.executable}); ncuflow {__version__}")]
    for module, dist, needed in (("torch", "torch", True), ("triton", "triton", True),
                                 ("flashinfer", "flashinfer-python", False)):
        version = _dist_version(dist, module)
        if version:
            checks.append(Check(module, "ok", version))
        elif needed:
            checks.append(Check(module, "warn", "not installed: the built-in cells need it",
                                "pip install 'ncuflow[cells]'"))
        else:
            checks.append(Check(module, "info", "not installed (the flashinfer cells are skipped)",
                                "pip install 'ncuflow[flashinfer]'"))
    engine = linear_engine()
    checks.append(Check("google-re2", "ok", f"kernel patterns searched in linear time by {engine}") if engine else
                  Check("google-re2", "warn", "not installed: kernel patterns (--kernel) are searched by Python's re, "
                        "which has no time bound", "pip install google-re2"))
    return checks


def run_checks(ncu: str | None = None, env: Mapping[str, str] | None = None) -> list[Check]:
    ncu_check, ncu_path = check_ncu(ncu, env)
    gpu = check_gpu()
    return [ncu_check, check_ncu_report(ncu_path), gpu, check_counters(gpu.status == "ok"), check_dcgm(),
            *check_packages()]


def verdict(checks: list[Check]) -> tuple[bool, str]:
    """(can profile here, one plain sentence)."""
    blocking = [c for c in checks if c.name in REQUIRED and c.status in ("fail", "skip")]
    if not blocking:
        return True, "This machine can profile: ncu, ncu_report, a GPU and counter access are all present."
    reasons = "; ".join(f"{c.name}: {c.detail.rstrip('.')}" for c in blocking)
    return False, f"This machine cannot profile ({reasons}). Reading stored reports works here."
