"""``flat_decode``: token-flat decode attention, one KV index per token.

The KV pool holds batch x kv_len token slots ``[slots, kv_heads, head_dim]`` (K and V);
``kv_indices`` (int32, length batch x kv_len) maps each request's tokens to slots, as
SGLang's FlashInfer lowering does with device page size 1. ``layout`` permutes the
physical slots while the index length stays batch x kv_len: ``contiguous`` (in order),
``block128`` (128-token runs in shuffled block order), ``scatter`` (random permutation).

Footprint = batch x kv_len x kv_heads x head_dim x 2 (K, V) x 2 bytes: the default
(32 x 8192 x 8 x 128 x 2 x 2) is 1 GiB (1.07 GB) of KV plus 1 MiB of indices.
"""

from __future__ import annotations

from ncuflow.kernels._params import FlatDecodeParams

from ncuflow.cells.contract import CellDefinition, CellInstance


def build(params: FlatDecodeParams, device: str) -> CellInstance:
    from ncuflow.kernels._instances import FlatDecode

    return FlatDecode(params, device)


CELL = CellDefinition(
    name="flat_decode",
    params=(),
    params_type=FlatDecodeParams,
    description=(
        "Token-flat decode attention (one KV index per token); layouts permute physical "
        "slots at a fixed index length. Default footprint 1 GiB of KV."
    ),
    build=build,
)
