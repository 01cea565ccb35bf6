"""Facts about this machine for the run manifest: the GPU (nvidia-smi), package versions.

Both are asked in ``ncuflow.host`` (shared with the cells and doctor); these are the names
the profiling path uses.
"""

from __future__ import annotations

from typing import Any

from ncuflow.host import gpu_facts, package_version

__all__ = ["nvidia_smi_facts", "package_version"]


def nvidia_smi_facts(timeout: float = 10.0) -> dict[str, Any]:
    """The first GPU's name, UUID and driver version ({} without nvidia-smi or a GPU)."""
    return gpu_facts(timeout)
