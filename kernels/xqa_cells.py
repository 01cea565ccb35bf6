"""``xqa_decode``: FlashInfer's XQA decode kernel, page-aware, the study's second backend.

``flashinfer.xqa`` compiles the page size into the kernel (``TOKENS_PER_PAGE``: 16, 32, 64
or 128) and reads a page table ``[batch, ceil(kv_len / page)]``; each CTA walks its
request's pages, so the number of page-table loads and per-page address computations grows
as the page shrinks. ``kv=shared``: every row of the page table points at one prefix's
pages (the study's cell: B=32, KV 8192, 32 MiB of unique KV read 32 times);
``kv=distinct``: each request its own (the study's cell: B=8, KV 4096, DRAM streaming).
On sm_90 fp16/bf16 KV runs XQA's generic kernel (its GMMA kernel is for fp8 KV).
Available where ``flashinfer`` imports (on the GPU host, from ``make gpu-bundle``).
"""

from __future__ import annotations

from ncuflow.kernels._params import XqaDecodeParams

from ncuflow.cells.contract import CellDefinition, CellInstance


def build(params: XqaDecodeParams, device: str) -> CellInstance:
    from ncuflow.kernels._xqa import XqaDecode

    return XqaDecode(params, device)


CELL = CellDefinition(
    name="xqa_decode",
    params=(),
    params_type=XqaDecodeParams,
    description="FlashInfer's XQA decode over a page table (page size compiled in); kv=shared reuses one prefix.",
    build=build,
    requires=("flashinfer", "torch", "cuda"),
)
