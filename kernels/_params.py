"""The built-in cells' typed parameters (frozen dataclasses; no torch import).

Each class is one cell's parameter list: its fields, made with ``param()``, are what
``ncuflow cells`` lists and what the spec grammar accepts; ``build`` receives one instance,
made once from the validated spec. ``check`` holds the rules between parameters, run when a
spec is parsed. The field names and defaults are part of every stored run's content key:
renaming one, or changing a default, makes earlier runs of that cell unreachable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ncuflow.cells.contract import CellParams, param
from ncuflow.errors import UsageError
from ncuflow.serving import ServingShape

HEAD_DIMS = (16, 32, 64, 128, 256)
INT32_MAX = 2**31 - 1
DTYPES = ("fp16", "bf16")
LAYOUTS = ("contiguous", "block128", "scatter")
KV_MODES = ("shared", "distinct")


def batch_param(default: int) -> Any:
    return param(default, "requests decoded together (one query token each)", None, 1, INT32_MAX,
                 serves=ServingShape.DECODE_BATCH)


def kv_len_param(default: int) -> Any:
    return param(default, "KV tokens per request", None, 1, INT32_MAX, serves=ServingShape.KV_LEN)


def heads_param() -> Any:
    return param(32, "query heads", None, 1, 4096)


def kv_heads_param() -> Any:
    return param(8, "KV heads (GQA: heads / kv_heads query heads each)", None, 1, 4096)


def head_dim_param(choices: tuple[int, ...] = HEAD_DIMS) -> Any:
    return param(128, "head dimension", choices)


def dtype_param() -> Any:
    return param("fp16", "KV and query dtype", DTYPES, serves=ServingShape.KV_DTYPE)


def seed_param(what: str = "seed of the data and of the physical layout") -> Any:
    return param(0, what, None, 0)


class _GroupedQueryAttention(CellParams):
    """The rule every decode cell shares: each KV head serves heads / kv_heads query heads."""

    heads: int
    kv_heads: int

    def check(self) -> None:
        if self.heads % self.kv_heads:
            raise UsageError(
                f"heads={self.heads} is not a multiple of kv_heads={self.kv_heads}.",
                "In grouped-query attention each KV head serves heads / kv_heads query heads.",
                "Pick heads as a multiple of kv_heads (e.g. heads=32,kv_heads=8).",
            )

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads


@dataclass(frozen=True)
class CopyParams(CellParams):
    mib: int = param(1024, "MiB copied (read once and written once)", None, 1, 1 << 20)
    impl: str = param("triton", "Triton copy kernel or torch's copy_", ("triton", "torch"))
    seed: int = seed_param("seed of the source data")


@dataclass(frozen=True)
class FlatDecodeParams(_GroupedQueryAttention):
    batch: int = batch_param(32)
    kv_len: int = kv_len_param(8192)
    heads: int = heads_param()
    kv_heads: int = kv_heads_param()
    head_dim: int = head_dim_param()
    dtype: str = dtype_param()
    layout: str = param("contiguous", "physical order of the token slots the indices point at", LAYOUTS)
    splits: int = param(8, "KV splits per request (split-KV / flash-decoding)", None, 1, INT32_MAX)
    seed: int = seed_param()


@dataclass(frozen=True)
class PagedDecodeParams(_GroupedQueryAttention):
    page: int = param(16, "tokens per KV page (the kernel's page size)", (1, 16, 32, 64, 128),
                      serves=ServingShape.PAGE_SIZE)
    kv: str = param("shared", "shared: all requests read the same prefix pages; distinct: each its own", KV_MODES)
    batch: int = batch_param(32)
    kv_len: int = kv_len_param(8192)
    heads: int = heads_param()
    kv_heads: int = kv_heads_param()
    head_dim: int = head_dim_param()
    dtype: str = dtype_param()
    splits: int = param(8, "KV splits per request (split-KV / flash-decoding)", None, 1, INT32_MAX)
    seed: int = seed_param()


@dataclass(frozen=True)
class PlanHostParams(CellParams):
    index_len: int = param(262144, "token indices in the batch (study: 64 ... 2097152)", None, 1, INT32_MAX)
    batch: int = param(32, "requests", None, 1, INT32_MAX)
    page: int = param(1, "device page size the planner sees (1 = token-flat)", None, 1, INT32_MAX,
                      serves=ServingShape.PAGE_SIZE)
    kv_heads: int = param(8, "KV heads (each work item is per KV head)", None, 1, 4096)
    num_sms: int = param(132, "SMs of the target GPU (H200/H100 SXM: 132)", None, 1, 65535)
    ctas_per_sm: int = param(2, "CTAs per SM the planner budgets for", None, 1, 65535)
    materialize_indices: bool = param(False, "also write the index list on the host (the O(index_len) positive control)")

    def check(self) -> None:
        check_batch_fits(self.batch, self.index_len, "plan_host")


def check_batch_fits(batch: int, index_len: int, cell: str) -> None:
    if index_len < batch:
        raise UsageError(
            f"{cell} needs batch <= index_len, got batch={batch}, index_len={index_len}.",
            "Every request holds at least one token.",
            "Raise index_len or lower batch.",
        )


FLASHINFER_HEAD_DIMS = (64, 128, 256)


@dataclass(frozen=True)
class FlashInferDecodeParams(_GroupedQueryAttention):
    page: int = param(1, "device page size given to plan() (1: SGLang's token-flat lowering)", (1, 16, 32, 64, 128),
                      serves=ServingShape.PAGE_SIZE)
    kv: str = param("distinct", "shared prefix or own KV per request", KV_MODES)
    batch: int = batch_param(32)
    kv_len: int = kv_len_param(8192)
    heads: int = heads_param()
    kv_heads: int = kv_heads_param()
    head_dim: int = head_dim_param(FLASHINFER_HEAD_DIMS)
    dtype: str = dtype_param()
    layout: str = param("contiguous", "physical order of the slots (page=1) or pages the indices point at", LAYOUTS)
    tensor_cores: bool = param(True, "the wrapper's tensor-core decode (SGLang's choice for fp16/bf16 at a GQA group >= 4)")
    seed: int = seed_param("seed of the data and of the layout")


@dataclass(frozen=True)
class FlashInferPlanParams(_GroupedQueryAttention):
    index_len: int = param(262144, "token indices in the batch (study: 64 ... 2097152)", None, 1, INT32_MAX)
    batch: int = param(32, "requests", None, 1, INT32_MAX)
    page: int = param(1, "device page size given to plan() (1: SGLang's token-flat lowering)", (1, 16, 32, 64, 128),
                      serves=ServingShape.PAGE_SIZE)
    heads: int = heads_param()
    kv_heads: int = kv_heads_param()
    head_dim: int = head_dim_param(FLASHINFER_HEAD_DIMS)
    dtype: str = dtype_param()
    tensor_cores: bool = param(True, "plan the tensor-core decode (SGLang's choice for fp16/bf16 at a GQA group >= 4)")

    def check(self) -> None:
        super().check()
        check_batch_fits(self.batch, self.index_len, "flashinfer_plan")


@dataclass(frozen=True)
class XqaDecodeParams(_GroupedQueryAttention):
    page: int = param(16, "tokens per KV page: XQA's compile-time page size", (16, 32, 64, 128),
                      serves=ServingShape.PAGE_SIZE)
    kv: str = param("shared", "shared: every request's page-table row points at one prefix; distinct: each its own", KV_MODES)
    batch: int = batch_param(32)
    kv_len: int = kv_len_param(8192)
    heads: int = heads_param()
    kv_heads: int = kv_heads_param()
    head_dim: int = head_dim_param(FLASHINFER_HEAD_DIMS)
    dtype: str = dtype_param()
    seed: int = seed_param()
