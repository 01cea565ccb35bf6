"""Parameter declarations shared by the decode cells (no torch import)."""

from __future__ import annotations

from ncuflow.cells.contract import ParamSpec

HEAD_DIMS = (16, 32, 64, 128, 256)


def decode_shape_params(batch: int, kv_len: int) -> tuple[ParamSpec, ...]:
    return (
        ParamSpec("batch", int, batch, None, "requests decoded together (one query token each)", 1, 2**31 - 1),
        ParamSpec("kv_len", int, kv_len, None, "KV tokens per request", 1, 2**31 - 1),
        ParamSpec("heads", int, 32, None, "query heads", 1, 4096),
        ParamSpec("kv_heads", int, 8, None, "KV heads (GQA: heads / kv_heads query heads each)", 1, 4096),
        ParamSpec("head_dim", int, 128, HEAD_DIMS, "head dimension"),
        ParamSpec("dtype", str, "fp16", ("fp16", "bf16"), "KV and query dtype"),
    )


def triton_decode_params() -> tuple[ParamSpec, ...]:
    return (
        ParamSpec("splits", int, 8, None, "KV splits per request (split-KV / flash-decoding)", 1, 2**31 - 1),
        ParamSpec("seed", int, 0, None, "seed of the data and of the physical layout", 0),
    )
