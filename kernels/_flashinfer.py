"""FlashInfer-backed cells (imports torch and flashinfer; built only when flashinfer imports)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import flashinfer
import torch
from ncuflow.kernels._common import (
    describe,
    gqa_attention_reference,
    random_tensor,
    tensor_bytes,
    token_layout,
    torch_dtype,
)

from ncuflow.errors import UsageError

WORKSPACE_BYTES = 128 * 1024 * 1024


def _flashinfer_version() -> str:
    return str(getattr(flashinfer, "__version__", "unknown"))


class FlashInferDecode:
    def __init__(self, params: Mapping[str, Any], device: str) -> None:
        self.batch = int(params["batch"])
        self.kv_len = int(params["kv_len"])
        self.heads = int(params["heads"])
        self.kv_heads = int(params["kv_heads"])
        self.head_dim = int(params["head_dim"])
        self.page = int(params["page"])
        self.kv_mode = str(params["kv"])
        self.layout = str(params["layout"])
        self.dtype_name = str(params["dtype"])
        seed = int(params["seed"])
        if self.heads % self.kv_heads:
            raise UsageError(
                f"heads={self.heads} is not a multiple of kv_heads={self.kv_heads}.",
                "", "Pick heads as a multiple of kv_heads.",
            )
        dtype = torch_dtype(self.dtype_name)
        self.pages_per_request = -(-self.kv_len // self.page)
        shared = self.kv_mode == "shared"
        physical = self.pages_per_request if shared else self.batch * self.pages_per_request
        order = token_layout(physical, self.layout, seed)
        indices = order.repeat(self.batch) if shared else order
        self.kv_indices = indices.to(torch.int32).to(device)
        self.kv_indptr = torch.arange(self.batch + 1, dtype=torch.int32) * self.pages_per_request
        last = self.kv_len - (self.pages_per_request - 1) * self.page
        self.last_page_len = torch.full((self.batch,), last, dtype=torch.int32)
        shape = (physical, self.page, self.kv_heads, self.head_dim)
        self.k_cache = random_tensor(shape, dtype, device, seed + 1)
        self.v_cache = random_tensor(shape, dtype, device, seed + 2)
        self.q = random_tensor((self.batch, self.heads, self.head_dim), dtype, device, seed)
        self.out = torch.empty_like(self.q)
        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self.wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(self.workspace, "NHD")
        self.wrapper.plan(
            self.kv_indptr.to(device), self.kv_indices, self.last_page_len.to(device),
            self.heads, self.kv_heads, self.head_dim, self.page,
            pos_encoding_mode="NONE", q_data_type=dtype, kv_data_type=dtype,
        )
        token_bytes = 2 * self.kv_heads * self.head_dim * self.q.element_size()
        self.unique_kv_bytes = (1 if shared else self.batch) * self.kv_len * token_bytes
        self.expected_bytes = (
            self.unique_kv_bytes + tensor_bytes(self.kv_indices) + 2 * tensor_bytes(self.q)
            + tensor_bytes(self.kv_indptr) + tensor_bytes(self.last_page_len)
        )

    def run(self) -> None:
        self.out = self.wrapper.run(self.q, (self.k_cache, self.v_cache))

    def output(self) -> torch.Tensor:
        return self.out

    def reference(self) -> torch.Tensor:
        scale = 1.0 / math.sqrt(self.head_dim)
        outputs = []
        for request in range(self.batch):
            lo, hi = request * self.pages_per_request, (request + 1) * self.pages_per_request
            pages = self.kv_indices[lo:hi].long()
            tokens = (-1, self.kv_heads, self.head_dim)
            k = self.k_cache[pages].reshape(tokens)[: self.kv_len]
            v = self.v_cache[pages].reshape(tokens)[: self.kv_len]
            outputs.append(gqa_attention_reference(self.q[request], k, v, scale))
        return torch.stack(outputs).to(self.q.dtype)

    def representation(self) -> dict[str, Any]:
        return {
            "backend": f"flashinfer {_flashinfer_version()} BatchDecodeWithPagedKVCacheWrapper(NHD)",
            "dtype": self.dtype_name,
            "kv": self.kv_mode,
            "layout": self.layout,
            "batch": self.batch,
            "kv_len": self.kv_len,
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "q": describe(self.q),
            "k_cache": describe(self.k_cache),
            "v_cache": describe(self.v_cache),
            "kv_indices": describe(self.kv_indices),
            "index_len": self.kv_indices.numel(),
            "page_table_len": self.kv_indices.numel(),
            "requested_page_size": self.page,
            "effective_page_size": self.page,  # what plan() was given
            "pages_per_request": self.pages_per_request,
            "unique_kv_bytes": self.unique_kv_bytes,
            "footprint_bytes": self.unique_kv_bytes + tensor_bytes(self.kv_indices)
            + 2 * tensor_bytes(self.q),
        }


class FlashInferPlan:
    """``plan()`` over index_len token indices: indptr/last_page_len on the host, indices on the GPU."""

    def __init__(self, params: Mapping[str, Any], device: str) -> None:
        self.index_len = int(params["index_len"])
        self.batch = int(params["batch"])
        self.page = int(params["page"])
        self.heads = int(params["heads"])
        self.kv_heads = int(params["kv_heads"])
        self.head_dim = int(params["head_dim"])
        self.dtype = torch_dtype(str(params["dtype"]))
        if self.batch <= 0 or self.index_len < self.batch:
            raise UsageError(
                f"flashinfer_plan needs 0 < batch <= index_len, got batch={self.batch}, "
                f"index_len={self.index_len}.", "", "Raise index_len or lower batch.",
            )
        base, extra = divmod(self.index_len, self.batch)
        tokens = [base + (1 if r < extra else 0) for r in range(self.batch)]
        pages = [-(-t // self.page) for t in tokens]
        self.kv_indptr = torch.tensor([0, *torch.tensor(pages).cumsum(0).tolist()], dtype=torch.int32)
        self.last_page_len = torch.tensor(
            [t - (p - 1) * self.page for t, p in zip(tokens, pages, strict=True)], dtype=torch.int32
        )
        self.kv_indices = torch.arange(int(self.kv_indptr[-1]), dtype=torch.int32, device=device)
        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self.wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(self.workspace, "NHD")
        self.expected_bytes = tensor_bytes(self.kv_indptr) + tensor_bytes(self.last_page_len)
        self.last_seconds: float | None = None

    def run(self) -> None:
        start = time.perf_counter()
        self.wrapper.plan(
            self.kv_indptr, self.kv_indices, self.last_page_len,
            self.heads, self.kv_heads, self.head_dim, self.page,
            pos_encoding_mode="NONE", q_data_type=self.dtype, kv_data_type=self.dtype,
        )
        torch.cuda.synchronize()
        self.last_seconds = time.perf_counter() - start

    def output(self) -> float | None:
        return self.last_seconds

    def reference(self) -> None:
        return None  # plan() has no numeric result to check; flashinfer_decode checks the run

    def representation(self) -> dict[str, Any]:
        return {
            "backend": f"flashinfer {_flashinfer_version()} BatchDecodeWithPagedKVCacheWrapper.plan",
            "batch": self.batch,
            "index_len": self.index_len,
            "page_table_len": self.kv_indices.numel(),
            "effective_page_size": self.page,
            "kv_indptr": describe(self.kv_indptr) | {"device": "cpu"},
            "kv_indices": describe(self.kv_indices) | {"device": str(self.kv_indices.device)},
            "footprint_bytes": self.expected_bytes + tensor_bytes(self.kv_indices),
        }
