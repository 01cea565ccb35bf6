"""The shapes a serving run gives its kernels: one row per shape, shared by the two halves.

``phases`` states these shapes from a server log (the batch and KV length it decoded at, the
server's own settings); a cell's contract declares which of them each of its parameters
takes (``param(..., serves=ServingShape.DECODE_BATCH)``), so a sweep file is written from a
log through the cell's own declaration, never by matching names. A plain vocabulary: it
imports nothing of the project and is read by ``phases`` and ``cells`` alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ServingShape(StrEnum):
    """A shape of the work a server gave its kernels."""

    DECODE_BATCH = "decode_batch"
    KV_LEN = "kv_len"
    PREFILL_CHUNK = "prefill_chunk"
    PAGE_SIZE = "page_size"
    ATTENTION_BACKEND = "attention_backend"
    KV_DTYPE = "kv_dtype"
    TP_SIZE = "tp_size"
    DP_SIZE = "dp_size"
    CUDA_GRAPH_BS = "cuda_graph_bs"
    SPECULATIVE = "speculative"


@dataclass(frozen=True)
class ShapeRow:
    """What a shape is, and for a server setting the keys the engines print it under."""

    shape: ServingShape
    meaning: str
    keys: tuple[str, ...] = ()  # server-argument names (SGLang ServerArgs, vLLM config) it is printed as

    @property
    def setting(self) -> bool:
        """A server setting (stated once, by the server or the user) rather than a measured shape."""
        return bool(self.keys)

    @property
    def flag(self) -> str:
        """How a user states it where the log does not: ``--setting page_size=16``."""
        return f"--setting {self.shape.value}=VALUE"


SHAPES: tuple[ShapeRow, ...] = (
    ShapeRow(ServingShape.DECODE_BATCH, "requests decoded together (#running-req on Decode lines)"),
    ShapeRow(ServingShape.KV_LEN, "KV tokens per request (#token / #running-req on Decode lines)"),
    ShapeRow(ServingShape.PREFILL_CHUNK, "prompt tokens per Prefill batch (#new-token)"),
    ShapeRow(ServingShape.PAGE_SIZE, "tokens per KV page", ("page_size", "block_size")),
    ShapeRow(ServingShape.ATTENTION_BACKEND, "attention kernel library",
             ("attention_backend", "decode_attention_backend", "VLLM_ATTENTION_BACKEND")),
    ShapeRow(ServingShape.KV_DTYPE, "KV-cache data type", ("kv_cache_dtype",)),
    ShapeRow(ServingShape.TP_SIZE, "tensor-parallel ranks", ("tp_size", "tensor_parallel_size")),
    ShapeRow(ServingShape.DP_SIZE, "data-parallel ranks", ("dp_size", "data_parallel_size")),
    ShapeRow(ServingShape.CUDA_GRAPH_BS, "batch sizes captured as CUDA graphs",
             ("cuda_graph_bs", "cuda_graph_max_bs", "cuda_graph_sizes", "cudagraph_capture_sizes")),
    ShapeRow(ServingShape.SPECULATIVE, "speculative decoding",
             ("speculative_algorithm", "speculative_config", "speculative_num_draft_tokens")),
)
ROWS = {row.shape: row for row in SHAPES}
SETTINGS = tuple(row for row in SHAPES if row.setting)
