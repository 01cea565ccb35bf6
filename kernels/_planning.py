"""Host-side decode planning, pure Python (no torch): what ``plan_host`` times.

``plan_decode`` does what a split-KV decode planner (FlashInfer's ``plan()`` for the
decode wrapper) does on the host: from ``kv_indptr`` (batch + 1 entries, in pages) it
finds the smallest KV chunk (in pages) whose work items fit the CTA budget, then lists
the work items (request, KV tile) and the output offsets per request. It reads the
indptr only, never the index list itself: its cost grows with the batch and with
log(pages per request), not with the index length. ``materialize_indices=True`` adds the
host pass that writes the index list (O(index_len)): the positive control whose cost
does grow with the length.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any

from ncuflow.kernels._params import PlanHostParams


@dataclass(frozen=True)
class DecodePlan:
    chunk_pages: int
    request_indices: tuple[int, ...]
    kv_tile_indices: tuple[int, ...]
    o_indptr: tuple[int, ...]
    indices_written: int

    @property
    def work_items(self) -> int:
        return len(self.request_indices)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _work_items(lengths: list[int], chunk: int) -> int:
    return sum(_ceil_div(n, chunk) for n in lengths)


def _tiles(lengths: list[int], chunk: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    request_indices: list[int] = []
    kv_tile_indices: list[int] = []
    o_indptr = [0]
    for request, length in enumerate(lengths):
        tiles = _ceil_div(length, chunk) if length else 0
        request_indices.extend([request] * tiles)
        kv_tile_indices.extend(range(tiles))
        o_indptr.append(o_indptr[-1] + tiles)
    return tuple(request_indices), tuple(kv_tile_indices), tuple(o_indptr)


def plan_decode(
    kv_indptr: array, num_kv_heads: int, max_ctas: int, materialize_indices: bool = False
) -> DecodePlan:
    """Binary search of the KV chunk size, then the work-item lists."""
    lengths = [kv_indptr[i + 1] - kv_indptr[i] for i in range(len(kv_indptr) - 1)]
    budget = max(1, max_ctas // max(1, num_kv_heads))
    low, high = 1, max(max(lengths, default=1), 1)
    while low < high:
        middle = (low + high) // 2
        if _work_items(lengths, middle) <= budget:
            high = middle
        else:
            low = middle + 1
    request_indices, kv_tile_indices, o_indptr = _tiles(lengths, low)
    written = 0
    if materialize_indices:
        indices = array("i", range(kv_indptr[-1]))
        written = len(indices)
    return DecodePlan(low, request_indices, kv_tile_indices, o_indptr, written)


def plan_decode_reference(
    kv_indptr: array, num_kv_heads: int, max_ctas: int, materialize_indices: bool = False
) -> DecodePlan:
    """The same plan by a linear scan of chunk sizes: the correctness reference."""
    lengths = [kv_indptr[i + 1] - kv_indptr[i] for i in range(len(kv_indptr) - 1)]
    budget = max(1, max_ctas // max(1, num_kv_heads))
    longest = max(max(lengths, default=1), 1)
    chunk = next(c for c in range(1, longest + 1) if _work_items(lengths, c) <= budget or c == longest)
    request_indices, kv_tile_indices, o_indptr = _tiles(lengths, chunk)
    return DecodePlan(
        chunk, request_indices, kv_tile_indices, o_indptr, kv_indptr[-1] if materialize_indices else 0
    )


class PlanHost:
    """``index_len`` token indices spread evenly over ``batch`` requests, in pages of ``page``."""

    def __init__(self, params: PlanHostParams, device: str) -> None:
        self.index_len = params.index_len
        self.batch = params.batch
        self.page = params.page
        self.kv_heads = params.kv_heads
        self.max_ctas = params.num_sms * params.ctas_per_sm
        self.materialize = params.materialize_indices
        base, extra = divmod(self.index_len, self.batch)
        self.tokens = [base + (1 if r < extra else 0) for r in range(self.batch)]
        pages = [_ceil_div(t, self.page) for t in self.tokens]
        indptr = [0]
        for count in pages:
            indptr.append(indptr[-1] + count)
        self.kv_indptr = array("i", indptr)
        self.last_page_len = array("i", [t - (p - 1) * self.page for t, p in zip(self.tokens, pages, strict=True)])
        self._plan: DecodePlan | None = None
        index_bytes = 4 * self.kv_indptr[-1] if self.materialize else 0
        self.expected_bytes = 4 * (len(self.kv_indptr) + len(self.last_page_len)) + index_bytes

    def run(self) -> None:
        self._plan = plan_decode(self.kv_indptr, self.kv_heads, self.max_ctas, self.materialize)

    def output(self) -> DecodePlan | None:
        return self._plan

    def reference(self) -> DecodePlan:
        return plan_decode_reference(self.kv_indptr, self.kv_heads, self.max_ctas, self.materialize)

    def representation(self) -> dict[str, Any]:
        plan = self._plan or plan_decode(self.kv_indptr, self.kv_heads, self.max_ctas, False)
        return {
            "batch": self.batch,
            "index_len": self.index_len,
            "page_table_len": self.kv_indptr[-1],
            "effective_page_size": self.page,
            "indptr_len": len(self.kv_indptr),
            "last_page_len_len": len(self.last_page_len),
            "planner_reads": "kv_indptr only" if not self.materialize else "kv_indptr + writes the index list",
            "max_ctas": self.max_ctas,
            "chunk_pages": plan.chunk_pages,
            "work_items": plan.work_items,
            "footprint_bytes": self.expected_bytes,
            "dtype": "int32",
        }
