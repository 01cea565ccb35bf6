"""``copy_bandwidth``: device-to-device copy, the measured DRAM ceiling.

Reads ``mib`` MiB once and writes them once (expected bytes = 2 x mib MiB); the default
1 GiB is far larger than any L2, so the copy streams from DRAM.
"""

from __future__ import annotations

from ncuflow.kernels._params import CopyParams

from ncuflow.cells.contract import CellDefinition, CellInstance


def build(params: CopyParams, device: str) -> CellInstance:
    from ncuflow.kernels._instances import CopyBandwidth

    return CopyBandwidth(params, device)


CELL = CellDefinition(
    name="copy_bandwidth",
    params=(),
    params_type=CopyParams,
    description="Device-to-device copy: the DRAM ceiling (bytes = 2 x mib MiB).",
    build=build,
)
