"""``plan_host``: host-side decode planning over index lengths (timed with a host clock).

Index lengths of the study: 64 ... 2,097,152 (``index_len``). The planner reads the
per-request indptr (batch + 1 entries) like FlashInfer's decode ``plan()``; see
``kernels/_planning.py``. Pure Python: runs on any machine, no ncu, no GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ncuflow.cells.contract import CellDefinition, CellInstance, ParamSpec


def build(params: Mapping[str, Any], device: str) -> CellInstance:
    from ncuflow.kernels._planning import PlanHost

    return PlanHost(params, device)


CELL = CellDefinition(
    name="plan_host",
    params=(
        ParamSpec("index_len", int, 262144, None, "token indices in the batch (study: 64 ... 2097152)", 1, 2**31 - 1),
        ParamSpec("batch", int, 32, None, "requests", 1, 2**31 - 1),
        ParamSpec("page", int, 1, None, "device page size the planner sees (1 = token-flat)", 1, 2**31 - 1),
        ParamSpec("kv_heads", int, 8, None, "KV heads (each work item is per KV head)", 1, 4096),
        ParamSpec("num_sms", int, 132, None, "SMs of the target GPU (H200/H100 SXM: 132)", 1, 65535),
        ParamSpec("ctas_per_sm", int, 2, None, "CTAs per SM the planner budgets for", 1, 65535),
        ParamSpec(
            "materialize_indices", bool, False, None,
            "also write the index list on the host (the O(index_len) positive control)",
        ),
    ),
    description="Host-side split-KV decode planning versus index length; host clock, no GPU.",
    build=build,
    requires=(),
    needs_ncu=False,
    timing="host",
)
