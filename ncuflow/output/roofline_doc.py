"""The roofline as JSON-ready data: ceilings and points per GPU, with every number's source."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ncuflow.analyze.roofline import LEVELS, Roofline


def rooflines_document(lines: Sequence[Roofline]) -> dict[str, Any]:
    return {"gpus": [
        {
            "device": line.device,
            "sm_clock_hz": line.sm_clock_hz,
            "bandwidth": {c.name: {"bytes_per_s": c.value, "source": c.source, "launches": c.launches}
                          for c in line.bandwidth},
            "compute": {c.name: {"flop_per_s": c.value, "source": c.source, "launches": c.launches}
                        for c in line.compute},
            "points": [
                {
                    "label": p.label, "kernel": p.kernel, "group": p.group, "launches": p.launches,
                    "flops": p.flops, "seconds": p.seconds, "flop_per_s": p.flop_rate, "counted": list(p.counted),
                    "bytes": dict(p.level_bytes), "intensity": {level: p.intensity(level) for level in LEVELS},
                    "bound": p.bound, "share": p.share, "tensor_uncounted": p.tensor_uncounted,
                }
                for p in line.points
            ],
            "not_drawn": [{"label": label, "why": why} for label, why in line.left_out],
        }
        for line in lines
    ]}
