"""``flashinfer_decode`` / ``flashinfer_plan``: the same questions on FlashInfer itself.

Available only when ``flashinfer`` imports (never a hard dependency); ``ncuflow cells``
lists them as unavailable with the reason otherwise. Both use
``flashinfer.BatchDecodeWithPagedKVCacheWrapper`` with the NHD layout.

- ``flashinfer_decode`` times ``wrapper.run(q, (k_cache, v_cache))`` after ``plan()``.
  ``page=1`` is SGLang's token-flat lowering: kv_indices has batch x kv_len entries and
  ``layout`` permutes the token slots (contiguous / block128 / scatter); for page > 1
  the layout permutes physical pages (block128 then means runs of 128 pages).
- ``flashinfer_plan`` times ``wrapper.plan(...)`` (host work plus its small copies) with
  a host clock over ``index_len`` token indices, the study's plan() sweep.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ncuflow.kernels._params import decode_shape_params

from ncuflow.cells.contract import CellDefinition, CellInstance, ParamSpec


def build_decode(params: Mapping[str, Any], device: str) -> CellInstance:
    from ncuflow.kernels._flashinfer import FlashInferDecode

    return FlashInferDecode(params, device)


def build_plan(params: Mapping[str, Any], device: str) -> CellInstance:
    from ncuflow.kernels._flashinfer import FlashInferPlan

    return FlashInferPlan(params, device)


_PAGE = ParamSpec("page", int, 1, (1, 16, 32, 64, 128), "device page size given to plan()")
_LAYOUT = ParamSpec(
    "layout", str, "contiguous", ("contiguous", "block128", "scatter"),
    "physical order of the slots (page=1) or pages the indices point at",
)

CELLS = (
    CellDefinition(
        name="flashinfer_decode",
        params=(
            _PAGE,
            ParamSpec("kv", str, "distinct", ("shared", "distinct"), "shared prefix or own KV per request"),
            *decode_shape_params(batch=32, kv_len=8192),
            _LAYOUT,
            ParamSpec("seed", int, 0, None, "seed of the data and of the layout", 0),
        ),
        description="FlashInfer's batch decode wrapper run() (after plan()), page=1 token-flat by default.",
        build=build_decode,
        requires=("flashinfer", "torch", "cuda"),
    ),
    CellDefinition(
        name="flashinfer_plan",
        params=(
            ParamSpec("index_len", int, 262144, None, "token indices in the batch (study: 64 ... 2097152)", 1, 2**31 - 1),
            ParamSpec("batch", int, 32, None, "requests", 1, 2**31 - 1),
            _PAGE,
            ParamSpec("heads", int, 32, None, "query heads", 1, 4096),
            ParamSpec("kv_heads", int, 8, None, "KV heads", 1, 4096),
            ParamSpec("head_dim", int, 128, (64, 128, 256), "head dimension"),
            ParamSpec("dtype", str, "fp16", ("fp16", "bf16"), "query and KV dtype"),
        ),
        description="FlashInfer's decode plan() versus index length; host clock.",
        build=build_plan,
        requires=("flashinfer", "torch", "cuda"),
        needs_ncu=False,
        timing="host",
    ),
)
