"""Helpers shared by the cells: dtypes, seeded permutations, sizes. Imports torch."""

from __future__ import annotations

from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {"fp16": torch.float16, "bf16": torch.bfloat16}


def torch_dtype(name: str) -> torch.dtype:
    return DTYPES[name]


def generator(seed: int) -> torch.Generator:
    """A CPU generator: permutations are made on the host so every device gets the same."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    return gen


def token_layout(count: int, layout: str, seed: int, run: int = 128) -> torch.Tensor:
    """Physical slot of each logical token position, as int64 on the CPU.

    ``contiguous``: slot i for token i. ``block128``: contiguous runs of ``run`` slots in a
    shuffled block order. ``scatter``: a random permutation of all slots.
    """
    if layout == "contiguous":
        return torch.arange(count, dtype=torch.int64)
    if layout == "block128":
        blocks = (count + run - 1) // run
        order = torch.randperm(blocks, generator=generator(seed))
        slots = (order[:, None] * run + torch.arange(run)[None, :]).reshape(-1)
        # a partial last block keeps only slots that exist
        return slots[slots < count]
    if layout == "scatter":
        return torch.randperm(count, generator=generator(seed))
    raise ValueError(f"unknown layout {layout!r}")


def random_tensor(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int) -> torch.Tensor:
    """Values in [-1, 1) drawn on the device (fast for GB-sized pools), reproducible by seed."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    out = torch.empty(shape, dtype=dtype, device=device)
    out.uniform_(-1.0, 1.0, generator=gen)
    return out


def tensor_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def describe(tensor: torch.Tensor) -> dict[str, Any]:
    """Shape, dtype and size of a tensor, for a representation record."""
    return {
        "shape": list(tensor.shape),
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "bytes": tensor_bytes(tensor),
    }


def next_power_of_two(value: int) -> int:
    power = 1
    while power < value:
        power *= 2
    return power


def gqa_attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float
) -> torch.Tensor:
    """fp32 decode attention of one request.

    q: [heads, head_dim]; k, v: [tokens, kv_heads, head_dim]; returns [heads, head_dim].
    Query head h uses KV head h // (heads / kv_heads).
    """
    heads, head_dim = q.shape
    kv_heads = k.shape[1]
    grouped = q.float().view(kv_heads, heads // kv_heads, head_dim)
    scores = torch.einsum("hgd,lhd->hgl", grouped, k.float()) * sm_scale
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("hgl,lhd->hgd", weights, v.float()).reshape(heads, head_dim)
