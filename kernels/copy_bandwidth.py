"""``copy_bandwidth``: device-to-device copy, the measured DRAM ceiling.

Reads ``mib`` MiB once and writes them once (expected bytes = 2 x mib MiB); the default
1 GiB is far larger than any L2, so the copy streams from DRAM.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ncuflow.cells.contract import CellDefinition, CellInstance, ParamSpec


def build(params: Mapping[str, Any], device: str) -> CellInstance:
    from ncuflow.kernels._instances import CopyBandwidth

    return CopyBandwidth(params, device)


CELL = CellDefinition(
    name="copy_bandwidth",
    params=(
        ParamSpec("mib", int, 1024, None, "MiB copied (read once and written once)", 1, 1 << 20),
        ParamSpec("impl", str, "triton", ("triton", "torch"), "Triton copy kernel or torch's copy_"),
        ParamSpec("seed", int, 0, None, "seed of the source data", 0),
    ),
    description="Device-to-device copy: the DRAM ceiling (bytes = 2 x mib MiB).",
    build=build,
)
