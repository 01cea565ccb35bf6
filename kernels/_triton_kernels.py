"""The Triton kernels of the cells (imported only when a cell is built).

Decode attention is split-KV ("flash-decoding"): stage 1 gives each program one
(request, KV head, split) and all query heads of that KV head's GQA group, streaming its
share of the request's KV with an online softmax; stage 2 merges the splits. The two
decode kernels differ only in how they find a token's KV:

- ``flat_decode_split_kernel`` reads one KV index per token from ``kv_indices``
  (token-flat, like SGLang's FlashInfer lowering with device page size 1);
- ``paged_decode_split_kernel`` reads the block table: for pages of at least one tile it
  loops over pages, loading ONE block-table entry per page (a scalar global load plus the
  page's address math), then over the page's tokens; for pages smaller than a tile it
  gathers the block-table entry of every token of the tile. Either way the block-table
  work grows with the page count, so page size reaches the kernel.

Written for Triton 3.6; they also run under ``TRITON_INTERPRET=1`` on CPU tensors.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl


def _install_interpreter_numpy_fix() -> None:
    """Make Triton's interpreter work with numpy >= 2.4 (triton-lang/triton#9171).

    The interpreter holds scalars as shape-(1,) arrays and converts them with ``int()``
    in ``tensor.__index__`` (used by ``range(lo, hi)`` with runtime bounds); numpy 2.4
    made that a TypeError. Upstream's fix squeezes the array first; this applies the same
    fix to the interpreter only (compiled kernels never go through it), and only when
    the interpreter still has the old conversion.
    """
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "_ncuflow_numpy_fix", False):
        return

    def patched(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._ncuflow_numpy_fix = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patched


if triton.knobs.runtime.interpret:
    _install_interpreter_numpy_fix()


@triton.jit
def copy_kernel(SRC, DST, n_elements, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offsets = start + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(DST + offsets, tl.load(SRC + offsets, mask=mask), mask=mask)


@triton.jit
def _attend_tile(q, k, v, token_mask, m_i, l_i, acc, sm_scale):
    """Online-softmax update of one tile: q [G, D], k/v [N, D], token_mask [N]."""
    scores = tl.dot(q, tl.trans(k)) * sm_scale
    scores = tl.where(token_mask[None, :], scores, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(scores, 1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(scores - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc


@triton.jit
def _store_partial(
    PART_O, PART_LSE, b, heads, head_mask, split, offs_d, m_i, l_i, acc,
    stride_po_b, stride_po_h, stride_po_s, stride_pl_b, stride_pl_h,
):
    has_tokens = l_i > 0
    safe_l = tl.where(has_tokens, l_i, 1.0)
    out = acc / safe_l[:, None]
    lse = tl.where(has_tokens, m_i + tl.log(safe_l), float("-inf"))
    o_ptrs = (
        PART_O + b * stride_po_b + heads[:, None] * stride_po_h + split * stride_po_s
        + offs_d[None, :]
    )
    tl.store(o_ptrs, out, mask=head_mask[:, None])
    tl.store(PART_LSE + b * stride_pl_b + heads * stride_pl_h + split, lse, mask=head_mask)


@triton.jit
def flat_decode_split_kernel(
    Q, K, V, KV_INDPTR, KV_INDICES, PART_O, PART_LSE, sm_scale,
    stride_q_b, stride_q_h,
    stride_k_t, stride_k_h,
    stride_v_t, stride_v_h,
    stride_po_b, stride_po_h, stride_po_s,
    stride_pl_b, stride_pl_h,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
):
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_start = tl.load(KV_INDPTR + b)
    seq_len = tl.load(KV_INDPTR + b + 1) - seq_start
    per_split = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
    lo = split * per_split
    hi = tl.minimum(lo + per_split, seq_len)

    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    head_mask = offs_g < GROUP
    heads = kv_head * GROUP + offs_g
    q = tl.load(
        Q + b * stride_q_b + heads[:, None] * stride_q_h + offs_d[None, :],
        mask=head_mask[:, None], other=0.0,
    )
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    for n0 in range(lo, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        token_mask = offs_n < hi
        # one KV index per token: the token-flat representation
        slots = tl.load(KV_INDICES + seq_start + offs_n, mask=token_mask, other=0).to(tl.int64)
        k = tl.load(
            K + slots[:, None] * stride_k_t + kv_head * stride_k_h + offs_d[None, :],
            mask=token_mask[:, None], other=0.0,
        )
        v = tl.load(
            V + slots[:, None] * stride_v_t + kv_head * stride_v_h + offs_d[None, :],
            mask=token_mask[:, None], other=0.0,
        )
        m_i, l_i, acc = _attend_tile(q, k, v, token_mask, m_i, l_i, acc, sm_scale)
    _store_partial(
        PART_O, PART_LSE, b, heads, head_mask, split, offs_d, m_i, l_i, acc,
        stride_po_b, stride_po_h, stride_po_s, stride_pl_b, stride_pl_h,
    )


@triton.jit
def paged_decode_split_kernel(
    Q, K, V, BLOCK_TABLE, SEQ_LENS, PART_O, PART_LSE, sm_scale,
    stride_q_b, stride_q_h,
    stride_k_p, stride_k_t, stride_k_h,
    stride_v_p, stride_v_t, stride_v_h,
    stride_bt_b,
    stride_po_b, stride_po_h, stride_po_s,
    stride_pl_b, stride_pl_h,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    PAGE: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
):
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(SEQ_LENS + b)

    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    head_mask = offs_g < GROUP
    heads = kv_head * GROUP + offs_g
    q = tl.load(
        Q + b * stride_q_b + heads[:, None] * stride_q_h + offs_d[None, :],
        mask=head_mask[:, None], other=0.0,
    )
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    table = BLOCK_TABLE + b * stride_bt_b

    if PAGE >= BLOCK_N:
        # page-aware: loop over this split's pages, one block-table load per page
        num_pages = tl.cdiv(seq_len, PAGE)
        pages_per_split = tl.cdiv(num_pages, NUM_SPLITS)
        p_lo = split * pages_per_split
        p_hi = tl.minimum(p_lo + pages_per_split, num_pages)
        for page in range(p_lo, p_hi):
            physical = tl.load(table + page).to(tl.int64)
            k_page = K + physical * stride_k_p + kv_head * stride_k_h
            v_page = V + physical * stride_v_p + kv_head * stride_v_h
            for t0 in tl.static_range(0, PAGE, BLOCK_N):
                offs_t = t0 + tl.arange(0, BLOCK_N)
                token_mask = page * PAGE + offs_t < seq_len
                k = tl.load(
                    k_page + offs_t[:, None] * stride_k_t + offs_d[None, :],
                    mask=token_mask[:, None], other=0.0,
                )
                v = tl.load(
                    v_page + offs_t[:, None] * stride_v_t + offs_d[None, :],
                    mask=token_mask[:, None], other=0.0,
                )
                m_i, l_i, acc = _attend_tile(q, k, v, token_mask, m_i, l_i, acc, sm_scale)
    else:
        # pages smaller than a tile: each tile gathers the block-table entry of its tokens
        per_split = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
        lo = split * per_split
        hi = tl.minimum(lo + per_split, seq_len)
        for n0 in range(lo, hi, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            token_mask = offs_n < hi
            physical = tl.load(table + offs_n // PAGE, mask=token_mask, other=0).to(tl.int64)
            in_page = offs_n % PAGE
            k = tl.load(
                K + physical[:, None] * stride_k_p + in_page[:, None] * stride_k_t
                + kv_head * stride_k_h + offs_d[None, :],
                mask=token_mask[:, None], other=0.0,
            )
            v = tl.load(
                V + physical[:, None] * stride_v_p + in_page[:, None] * stride_v_t
                + kv_head * stride_v_h + offs_d[None, :],
                mask=token_mask[:, None], other=0.0,
            )
            m_i, l_i, acc = _attend_tile(q, k, v, token_mask, m_i, l_i, acc, sm_scale)
    _store_partial(
        PART_O, PART_LSE, b, heads, head_mask, split, offs_d, m_i, l_i, acc,
        stride_po_b, stride_po_h, stride_po_s, stride_pl_b, stride_pl_h,
    )


@triton.jit
def merge_splits_kernel(
    PART_O, PART_LSE, OUT,
    stride_po_b, stride_po_h, stride_po_s,
    stride_pl_b, stride_pl_h,
    stride_o_b, stride_o_h,
    NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
):
    b = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, SPLITS_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    split_mask = offs_s < NUM_SPLITS
    lse = tl.load(
        PART_LSE + b * stride_pl_b + head * stride_pl_h + offs_s,
        mask=split_mask, other=float("-inf"),
    )
    m = tl.max(lse, 0)
    weights = tl.where(lse > float("-inf"), tl.exp(lse - m), 0.0)
    partial = tl.load(
        PART_O + b * stride_po_b + head * stride_po_h + offs_s[:, None] * stride_po_s
        + offs_d[None, :],
        mask=split_mask[:, None], other=0.0,
    )
    out = tl.sum(weights[:, None] * partial, 0) / tl.sum(weights, 0)
    tl.store(OUT + b * stride_o_b + head * stride_o_h + offs_d, out.to(OUT.dtype.element_ty))
