"""``paged_decode``: page-aware decode attention reading a block table.

The KV cache is ``[physical_pages, page, kv_heads, head_dim]`` (K and V); each request has
a row of ceil(kv_len / page) block-table entries. For page >= 16 the kernel loops over
its pages, loading one block-table entry per page, then over the page's tokens, so the
number of block-table loads and per-page address computations grows as the page shrinks.
Page 1 is below one tile (16 tokens): the kernel then gathers a block-table entry per
token (the token-flat case). ``kv=shared``: every request's row points at the same
physical pages (one prefix, high L2 reuse, unique KV = kv_len tokens); ``kv=distinct``:
each request has its own pages (unique KV = batch x kv_len tokens, DRAM streaming).
Defaults are the study's shared-prefix cell: page=16, kv=shared, batch=32, kv_len=8192
(32 MiB of unique KV, read 32 times).
"""

from __future__ import annotations

from ncuflow.kernels._params import PagedDecodeParams

from ncuflow.cells.contract import CellDefinition, CellInstance


def build(params: PagedDecodeParams, device: str) -> CellInstance:
    from ncuflow.kernels._instances import PagedDecode

    return PagedDecode(params, device)


CELL = CellDefinition(
    name="paged_decode",
    params=(),
    params_type=PagedDecodeParams,
    description=(
        "Page-aware decode attention over a block table (one table load per page); "
        "kv=shared reuses one prefix, kv=distinct streams from DRAM."
    ),
    build=build,
)
