"""``plan_host``: host-side decode planning over index lengths (timed with a host clock).

Index lengths of the study: 64 ... 2,097,152 (``index_len``). The planner reads the
per-request indptr (batch + 1 entries) like FlashInfer's decode ``plan()``; see
``kernels/_planning.py``. Pure Python: runs on any machine, no ncu, no GPU.
"""

from __future__ import annotations

from ncuflow.kernels._params import PlanHostParams

from ncuflow.cells.contract import CellDefinition, CellInstance


def build(params: PlanHostParams, device: str) -> CellInstance:
    from ncuflow.kernels._planning import PlanHost

    return PlanHost(params, device)


CELL = CellDefinition(
    name="plan_host",
    params=(),
    params_type=PlanHostParams,
    description="Host-side split-KV decode planning versus index length; host clock, no GPU.",
    build=build,
    requires=(),
    needs_ncu=False,
    timing="host",
)
