"""The ``xqa_decode`` cell's instance: ``flashinfer.xqa`` over a page table (imports torch and flashinfer).

Arguments as FlashInfer 0.7.2's ``flashinfer.xqa`` documents them: q ``[batch, beam_width=1,
heads, head_dim]``; K and V caches ``[pages, page, kv_heads, head_dim]`` (NHD); the page
table ``[batch, pages_per_request]`` int32; seq_lens ``[batch, 1]`` uint32; a scratch
workspace (uint8) and zeroed semaphores (uint32). q_scale = kv_scale = 1, so the softmax
scale is 1/sqrt(head_dim), as the torch reference uses.
"""

from __future__ import annotations

from typing import Any

import flashinfer
import torch
from ncuflow.kernels._common import describe, random_tensor, tensor_bytes
from ncuflow.kernels._flashinfer import PagedKv, flashinfer_version, loading_flashinfer
from ncuflow.kernels._params import XqaDecodeParams

SCRATCH_BYTES = 256 << 20


def semaphore_count(batch: int, kv_heads: int) -> int:
    """Semaphores XQA's multi-block mode uses: two per (request, KV head) sequence and a margin."""
    sequences = batch * kv_heads
    return 2 * (-(-sequences // 2) * 2 + 2 + sequences + 2)


class XqaDecode:
    """One decode step of ``batch`` requests through XQA, the page size compiled into the kernel."""

    def __init__(self, params: XqaDecodeParams, device: str) -> None:
        self.params = params
        self.cache = PagedKv(params, params.page, "scatter", device)  # an allocator's page order
        self.page_table = self.cache.page_ids  # [batch, pages_per_request], int32
        self.seq_lens = torch.full((params.batch, 1), params.kv_len, dtype=torch.int32, device=device).view(torch.uint32)
        self.q = random_tensor((params.batch, 1, params.heads, params.head_dim), self.cache.dtype, device, params.seed)
        self.out = torch.empty_like(self.q)
        self.scratch = torch.zeros(SCRATCH_BYTES, dtype=torch.uint8, device=device)
        self.semaphores = torch.zeros(semaphore_count(params.batch, params.kv_heads), dtype=torch.int32,
                                      device=device).view(torch.uint32)
        self.sm_count = torch.cuda.get_device_properties(device).multi_processor_count
        self.expected_bytes = (
            self.cache.unique_kv_bytes + tensor_bytes(self.page_table) + 2 * tensor_bytes(self.q)
            + tensor_bytes(self.seq_lens)
        )

    def run(self) -> None:
        p = self.params
        with loading_flashinfer(f"XQA ({p.dtype}, page {p.page}, head_dim {p.head_dim}, GQA group {p.group})"):
            flashinfer.xqa(
                self.q, self.cache.k_cache, self.cache.v_cache, self.page_table, self.seq_lens, self.out,
                self.scratch, self.semaphores, p.kv_heads, p.page, kv_layout="NHD", sm_count=self.sm_count,
            )

    def output(self) -> torch.Tensor:
        return self.out

    def reference(self) -> torch.Tensor:
        return self.cache.reference(self.q[:, 0]).unsqueeze(1)

    def representation(self) -> dict[str, Any]:
        p = self.params
        table_len = self.page_table.numel()
        return {
            "backend": f"flashinfer {flashinfer_version()} xqa (NHD)",
            "xqa_kernel": "generic (mha.cu)" if p.dtype in {"fp16", "bf16"} else "sm90 GMMA",
            "dtype": p.dtype, "batch": p.batch, "kv_len": p.kv_len, "heads": p.heads,
            "kv_heads": p.kv_heads, "head_dim": p.head_dim, "gqa_group": p.group,
            "q": describe(self.q),
            "page_table": describe(self.page_table),
            "seq_lens": describe(self.seq_lens),
            "index_len": table_len,
            "page_table_len": table_len,
            "requested_page_size": p.page,
            "effective_page_size": p.page,  # XQA's TOKENS_PER_PAGE: the module is chosen by it
            "device_page_size": p.page,
            "coercion": None,
            "sm_count": self.sm_count,
            "semaphores": describe(self.semaphores),
            **self.cache.representation(),
            "footprint_bytes": self.cache.unique_kv_bytes + tensor_bytes(self.page_table) + 2 * tensor_bytes(self.q),
        }
