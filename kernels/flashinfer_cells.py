"""``flashinfer_decode`` / ``flashinfer_plan``: the study's questions on FlashInfer itself.

Available only when ``flashinfer`` imports (never a hard dependency; on a GPU host without
network it comes from the GPU bundle, ``make gpu-bundle``); ``ncuflow cells`` lists them as
unavailable with the reason otherwise. Both use ``flashinfer.BatchDecodeWithPagedKVCacheWrapper``
(NHD, backend ``fa2``), by default on its tensor-core path as SGLang picks it for fp16/bf16 at
a GQA group >= 4 (``tensor_cores=false``: the CUDA-core batch decode kernel).

- ``flashinfer_decode`` times ``wrapper.run(q, (k_cache, v_cache))`` after ``plan()``.
  ``page=1`` is SGLang's token-flat lowering: kv_indices has batch x kv_len entries whatever
  the engine's page size, and ``layout`` permutes the token slots (contiguous / block128 /
  scatter); ``page`` > 1 passes the page size natively (kv_indices: batch x ceil(kv_len/page)
  page ids; the layout permutes physical pages). ``kv=shared``: every request's indices point
  at one prefix; ``distinct``: each request its own.
- ``flashinfer_plan`` times ``wrapper.plan(...)`` (host work plus its small copies) with a
  host clock over ``index_len`` token indices, the study's plan() sweep (64 ... 2,097,152).
"""

from __future__ import annotations

from ncuflow.kernels._params import FlashInferDecodeParams, FlashInferPlanParams

from ncuflow.cells.contract import CellDefinition, CellInstance


def build_decode(params: FlashInferDecodeParams, device: str) -> CellInstance:
    from ncuflow.kernels._flashinfer import FlashInferDecode

    return FlashInferDecode(params, device)


def build_plan(params: FlashInferPlanParams, device: str) -> CellInstance:
    from ncuflow.kernels._flashinfer import FlashInferPlan

    return FlashInferPlan(params, device)


CELLS = (
    CellDefinition(
        name="flashinfer_decode",
        params=(),
        params_type=FlashInferDecodeParams,
        description="FlashInfer's batch decode wrapper run() (after plan()), page=1 token-flat as SGLang lowers it.",
        build=build_decode,
        requires=("flashinfer", "torch", "cuda"),
    ),
    CellDefinition(
        name="flashinfer_plan",
        params=(),
        params_type=FlashInferPlanParams,
        description="FlashInfer's decode plan() versus index length; host clock.",
        build=build_plan,
        requires=("flashinfer", "torch", "cuda"),
        needs_ncu=False,
        timing="host",
    ),
)
