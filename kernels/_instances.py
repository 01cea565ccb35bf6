"""Built cells: tensors, launches and torch references (imports torch and triton).

Every instance follows ``ncuflow.cells.CellInstance``. ``representation()`` always holds
``footprint_bytes`` (bytes of every tensor the timed launch touches; ``ncuflow.cells.timing``
rotates copies of a cell whose footprint fits in L2), ``index_len``, ``page_table_len``
and ``effective_page_size`` (the page size the kernel itself sees).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from ncuflow.kernels._common import (
    describe,
    gqa_attention_reference,
    next_power_of_two,
    random_tensor,
    tensor_bytes,
    token_layout,
    torch_dtype,
)
from ncuflow.kernels._params import CopyParams, FlatDecodeParams, PagedDecodeParams
from ncuflow.kernels._triton_kernels import (
    copy_kernel,
    flat_decode_split_kernel,
    merge_splits_kernel,
    paged_decode_split_kernel,
)

COPY_BLOCK = 4096
FLAT_BLOCK_N = 32
MAX_PAGE_TILE = 64
MIN_TILE = 16  # tl.dot needs every dimension >= 16


# ----------------------------------------------------------------------------- copy


class CopyBandwidth:
    """Device-to-device copy of ``mib`` MiB of float32: reads it once, writes it once."""

    def __init__(self, params: CopyParams, device: str) -> None:
        self.impl = params.impl
        self.n_elements = params.mib * (1 << 20) // 4
        self.src = random_tensor((self.n_elements,), torch.float32, device, params.seed)
        self.dst = torch.empty_like(self.src)
        self.expected_bytes = 2 * tensor_bytes(self.src)

    def run(self) -> None:
        if self.impl == "torch":
            self.dst.copy_(self.src)
            return
        grid = (triton_cdiv(self.n_elements, COPY_BLOCK),)
        copy_kernel[grid](self.src, self.dst, self.n_elements, BLOCK=COPY_BLOCK)

    def output(self) -> torch.Tensor:
        return self.dst

    def reference(self) -> torch.Tensor:
        return self.src.clone()

    def representation(self) -> dict[str, Any]:
        return {
            "impl": self.impl,
            "src": describe(self.src),
            "dst": describe(self.dst),
            "dtype": "float32",
            "n_elements": self.n_elements,
            "kernels": ["copy_kernel"] if self.impl == "triton" else ["torch copy_"],
            "grid": [triton_cdiv(self.n_elements, COPY_BLOCK)] if self.impl == "triton" else None,
            "block_elements": COPY_BLOCK if self.impl == "triton" else None,
            "index_len": 0,
            "page_table_len": 0,
            "effective_page_size": None,
            "footprint_bytes": tensor_bytes(self.src) + tensor_bytes(self.dst),
        }


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


# ----------------------------------------------------------------------------- decode shared


class _DecodeBase:
    """Query, split-KV partials and output shared by the two decode cells."""

    kernel_launches = 2  # split kernel + merge kernel
    split_kernel_name = ""

    def __init__(self, params: FlatDecodeParams | PagedDecodeParams, device: str) -> None:
        self.batch = params.batch
        self.kv_len = params.kv_len
        self.heads = params.heads
        self.kv_heads = params.kv_heads
        self.head_dim = params.head_dim
        self.splits = params.splits
        self.seed = params.seed
        self.dtype_name = params.dtype
        self.dtype = torch_dtype(self.dtype_name)
        self.group = params.group
        self.group_pad = max(MIN_TILE, next_power_of_two(self.group))
        self.sm_scale = 1.0 / math.sqrt(self.head_dim)
        self.q = random_tensor((self.batch, self.heads, self.head_dim), self.dtype, device, self.seed)
        self.part_o = torch.empty(
            (self.batch, self.heads, self.splits, self.head_dim), dtype=torch.float32, device=device
        )
        self.part_lse = torch.empty(
            (self.batch, self.heads, self.splits), dtype=torch.float32, device=device
        )
        self.out = torch.empty((self.batch, self.heads, self.head_dim), dtype=self.dtype, device=device)
        self.token_kv_bytes = 2 * self.kv_heads * self.head_dim * self.q.element_size()

    def _merge(self) -> None:
        merge_splits_kernel[(self.batch, self.heads)](
            self.part_o, self.part_lse, self.out,
            self.part_o.stride(0), self.part_o.stride(1), self.part_o.stride(2),
            self.part_lse.stride(0), self.part_lse.stride(1),
            self.out.stride(0), self.out.stride(1),
            NUM_SPLITS=self.splits, SPLITS_PAD=next_power_of_two(self.splits),
            HEAD_DIM=self.head_dim,
        )

    def output(self) -> torch.Tensor:
        return self.out

    def _attention_reference(self, request: int, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """fp32 attention of one request: k, v are [tokens, kv_heads, head_dim]."""
        return gqa_attention_reference(self.q[request], k, v, self.sm_scale)

    def _common_representation(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype_name,
            "batch": self.batch,
            "kv_len": self.kv_len,
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "gqa_group": self.group,
            "splits": self.splits,
            "q": describe(self.q),
            "out": describe(self.out),
            "partials": describe(self.part_o),
            "kernel_launches": self.kernel_launches,
            # ncu profiles both launches inside the NVTX range; the first does the KV work
            "kernels": [self.split_kernel_name, "merge_splits_kernel"],
            "merge_grid": [self.batch, self.heads],
            "split_grid": [self.batch, self.kv_heads, self.splits],
            "logical_kv_bytes": self.batch * self.kv_len * self.token_kv_bytes,
        }


# ----------------------------------------------------------------------------- flat decode


class FlatDecode(_DecodeBase):
    """Token-flat decode: a KV pool of batch*kv_len token slots, one int32 index per token."""

    split_kernel_name = "flat_decode_split_kernel"

    def __init__(self, params: FlatDecodeParams, device: str) -> None:
        super().__init__(params, device)
        self.layout = params.layout
        total = self.batch * self.kv_len
        shape = (total, self.kv_heads, self.head_dim)
        self.k_pool = random_tensor(shape, self.dtype, device, self.seed + 1)
        self.v_pool = random_tensor(shape, self.dtype, device, self.seed + 2)
        slots = token_layout(total, self.layout, self.seed)
        self.kv_indices = slots.to(torch.int32).to(device)
        self.kv_indptr = (torch.arange(self.batch + 1, dtype=torch.int32) * self.kv_len).to(device)
        self.expected_bytes = (
            tensor_bytes(self.k_pool) + tensor_bytes(self.v_pool) + tensor_bytes(self.kv_indices)
            + tensor_bytes(self.kv_indptr) + tensor_bytes(self.q) + tensor_bytes(self.out)
        )

    def run(self) -> None:
        flat_decode_split_kernel[(self.batch, self.kv_heads, self.splits)](
            self.q, self.k_pool, self.v_pool, self.kv_indptr, self.kv_indices,
            self.part_o, self.part_lse, self.sm_scale,
            self.q.stride(0), self.q.stride(1),
            self.k_pool.stride(0), self.k_pool.stride(1),
            self.v_pool.stride(0), self.v_pool.stride(1),
            self.part_o.stride(0), self.part_o.stride(1), self.part_o.stride(2),
            self.part_lse.stride(0), self.part_lse.stride(1),
            GROUP=self.group, GROUP_PAD=self.group_pad, HEAD_DIM=self.head_dim,
            BLOCK_N=FLAT_BLOCK_N, NUM_SPLITS=self.splits,
        )
        self._merge()

    def reference(self) -> torch.Tensor:
        outputs = []
        indptr = self.kv_indptr.cpu().tolist()
        for request in range(self.batch):
            slots = self.kv_indices[indptr[request] : indptr[request + 1]].long()
            outputs.append(self._attention_reference(request, self.k_pool[slots], self.v_pool[slots]))
        return torch.stack(outputs).to(self.dtype)

    def representation(self) -> dict[str, Any]:
        index_len = self.kv_indices.numel()
        footprint = sum(
            tensor_bytes(t)
            for t in (self.q, self.k_pool, self.v_pool, self.kv_indices, self.kv_indptr,
                      self.part_o, self.part_lse, self.out)
        )
        return {
            **self._common_representation(),
            "layout": self.layout,
            "k_pool": describe(self.k_pool),
            "v_pool": describe(self.v_pool),
            "kv_indices": describe(self.kv_indices),
            "kv_indptr": describe(self.kv_indptr),
            "index_len": index_len,
            "page_table_len": index_len,  # token-flat: a page table of page size 1
            "effective_page_size": 1,
            "tile_tokens": FLAT_BLOCK_N,
            "unique_kv_bytes": tensor_bytes(self.k_pool) + tensor_bytes(self.v_pool),
            "footprint_bytes": footprint,
        }


# ----------------------------------------------------------------------------- paged decode


class PagedDecode(_DecodeBase):
    """Page-aware decode over a block table ``[batch, pages_per_request]`` of physical pages.

    ``kv=shared``: one prefix of pages_per_request physical pages, every request's row of
    the block table points at the same pages. ``kv=distinct``: batch*pages_per_request
    physical pages, each request its own. Physical page order is a seeded permutation
    in both, as an allocator would leave it.
    """

    split_kernel_name = "paged_decode_split_kernel"

    def __init__(self, params: PagedDecodeParams, device: str) -> None:
        super().__init__(params, device)
        self.page = params.page
        self.kv_mode = params.kv
        self.pages_per_request = triton_cdiv(self.kv_len, self.page)
        physical_pages = (
            self.pages_per_request if self.kv_mode == "shared" else self.batch * self.pages_per_request
        )
        generator = torch.Generator(device="cpu")
        generator.manual_seed(self.seed)
        order = torch.randperm(physical_pages, generator=generator)
        if self.kv_mode == "shared":
            table = order[None, :].expand(self.batch, -1)
        else:
            table = order.view(self.batch, self.pages_per_request)
        self.block_table = table.to(torch.int32).contiguous().to(device)
        self.seq_lens = torch.full((self.batch,), self.kv_len, dtype=torch.int32).to(device)
        shape = (physical_pages, self.page, self.kv_heads, self.head_dim)
        self.k_cache = random_tensor(shape, self.dtype, device, self.seed + 1)
        self.v_cache = random_tensor(shape, self.dtype, device, self.seed + 2)
        self.physical_pages = physical_pages
        self.page_loop = self.page >= MIN_TILE
        self.tile_tokens = min(self.page, MAX_PAGE_TILE) if self.page_loop else MIN_TILE
        requests_with_own_kv = 1 if self.kv_mode == "shared" else self.batch
        self.unique_kv_bytes = requests_with_own_kv * self.kv_len * self.token_kv_bytes
        self.expected_bytes = (
            self.unique_kv_bytes + tensor_bytes(self.block_table) + tensor_bytes(self.seq_lens)
            + tensor_bytes(self.q) + tensor_bytes(self.out)
        )

    def run(self) -> None:
        paged_decode_split_kernel[(self.batch, self.kv_heads, self.splits)](
            self.q, self.k_cache, self.v_cache, self.block_table, self.seq_lens,
            self.part_o, self.part_lse, self.sm_scale,
            self.q.stride(0), self.q.stride(1),
            self.k_cache.stride(0), self.k_cache.stride(1), self.k_cache.stride(2),
            self.v_cache.stride(0), self.v_cache.stride(1), self.v_cache.stride(2),
            self.block_table.stride(0),
            self.part_o.stride(0), self.part_o.stride(1), self.part_o.stride(2),
            self.part_lse.stride(0), self.part_lse.stride(1),
            GROUP=self.group, GROUP_PAD=self.group_pad, HEAD_DIM=self.head_dim,
            PAGE=self.page, BLOCK_N=self.tile_tokens, NUM_SPLITS=self.splits,
        )
        self._merge()

    def reference(self) -> torch.Tensor:
        outputs = []
        for request in range(self.batch):
            pages = self.block_table[request].long()
            tokens = (-1, self.kv_heads, self.head_dim)
            k = self.k_cache[pages].reshape(tokens)[: self.kv_len]
            v = self.v_cache[pages].reshape(tokens)[: self.kv_len]
            outputs.append(self._attention_reference(request, k, v))
        return torch.stack(outputs).to(self.dtype)

    def representation(self) -> dict[str, Any]:
        table_len = self.block_table.numel()
        footprint = (
            self.unique_kv_bytes
            + sum(tensor_bytes(t) for t in (self.q, self.block_table, self.seq_lens,
                                            self.part_o, self.part_lse, self.out))
        )
        return {
            **self._common_representation(),
            "kv": self.kv_mode,
            "requested_page_size": self.page,
            "effective_page_size": self.page,  # the kernel's PAGE constexpr: no coercion here
            "kernel_path": "page_loop" if self.page_loop else "token_gather",
            "tile_tokens": self.tile_tokens,
            "pages_per_request": self.pages_per_request,
            "physical_pages": self.physical_pages,
            "k_cache": describe(self.k_cache),
            "v_cache": describe(self.v_cache),
            "block_table": describe(self.block_table),
            "seq_lens": describe(self.seq_lens),
            "index_len": table_len,
            "page_table_len": table_len,
            # block-table entries read by all split programs together: each (request, KV
            # head) row of programs reads the request's pages once (page_loop: one scalar
            # load per page) or one entry per token (token_gather)
            "block_table_entry_reads": self.batch * self.kv_heads * (
                self.pages_per_request if self.page_loop else self.kv_len
            ),
            "unique_kv_bytes": self.unique_kv_bytes,
            "footprint_bytes": footprint,
        }
