"""FlashInfer-backed cells (imports torch and flashinfer; built only when flashinfer imports).

``PagedKv`` is the KV cache both FlashInfer cells and XQA read: ``[physical_pages, page,
kv_heads, head_dim]`` for K and for V, and each request's list of physical page ids (page 1:
token slots). ``loading_flashinfer`` turns FlashInfer's "no prebuilt module and JIT is off"
into one paragraph: FlashInfer's own load failure when the module is there but does not
load, else the GPU bundle's shapes.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import time
from collections.abc import Iterator
from typing import Any

import flashinfer
import torch
from ncuflow.kernels._common import (
    describe,
    gqa_attention_reference,
    random_tensor,
    tensor_bytes,
    token_layout,
    torch_dtype,
)
from ncuflow.kernels._params import FlashInferDecodeParams, FlashInferPlanParams, XqaDecodeParams

from ncuflow.errors import NcuflowError

WORKSPACE_BYTES = 128 * 1024 * 1024
BACKEND = "fa2"


def flashinfer_version() -> str:
    return str(getattr(flashinfer, "__version__", "unknown"))


class _LoadFailures(logging.Handler):
    """FlashInfer's own words when a prebuilt module is there but will not load.

    FlashInfer logs "Failed to load AOT artifact PATH: REASON" (on its ``flashinfer.jit``
    logger) and then, with JIT off, raises the same "not found in the JIT cache" error as
    when no module exists at all: the reason (``libcuda.so.1: cannot open shared object
    file``, an undefined symbol, a wrong architecture) is only in that log line.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "Failed to load AOT artifact" in text:  # module paths shortened to their file names
            reason = re.sub(r"/\S+/([^/\s]+\.so)\b", r"\1", text.split(". Trying another provider")[0])
            self.lines.append(reason[:800])


def _jit_logger() -> logging.Logger | None:
    try:  # flashinfer.jit.core.logger is its own Logger instance, not logging.getLogger's
        from flashinfer.jit import core
    except ImportError:
        return None
    found = getattr(core, "logger", None)
    return found if isinstance(found, logging.Logger) else None


@contextlib.contextmanager
def loading_flashinfer(what: str) -> Iterator[None]:
    """FlashInfer's missing-module error (JIT off) as one paragraph, with FlashInfer's own reason."""
    failures, logger = _LoadFailures(), _jit_logger()
    if logger is not None:
        logger.addHandler(failures)
    try:
        yield
    except RuntimeError as error:
        text = str(error)
        if "JIT" not in text and "jit" not in text:
            raise
        raise _module_error(what, text, failures.lines) from None
    finally:
        if logger is not None:
            logger.removeHandler(failures)


def _module_error(what: str, text: str, load_failures: list[str]) -> NcuflowError:
    if load_failures:
        return NcuflowError(
            f"FlashInfer found its prebuilt module for {what} but could not load it: {load_failures[-1]}",
            "With JIT off FlashInfer then reports the module as missing; the load failure above is "
            "the cause (a library the module needs is not on the loader's path, or it was built "
            "for another driver or architecture).",
            "On a GPU host the driver's libcuda.so.1 must be loadable (`ldconfig -p | grep libcuda`); "
            "`python3 analysis/gpu_bundle.py check` lists each module's needed libraries.",
        )
    return NcuflowError(
        f"FlashInfer has no prebuilt module for {what} here, and it may not compile one.",
        text.splitlines()[0][:400],
        "The GPU bundle (`make gpu-bundle`) carries fp16, head_dim 128, 32 query heads over 8 KV "
        "heads (XQA: pages 16/32/64/128): use those shapes, or add the shape to "
        "analysis/gpu_bundle_flashinfer.py and rebuild it.",
    )


class PagedKv:
    """A paged KV cache and each request's page ids, shared or distinct across requests."""

    def __init__(self, params: FlashInferDecodeParams | XqaDecodeParams, page: int, layout: str, device: str) -> None:
        self.batch, self.kv_len, self.page = params.batch, params.kv_len, page
        self.kv_heads, self.head_dim = params.kv_heads, params.head_dim
        self.shared = params.kv == "shared"
        self.dtype = torch_dtype(params.dtype)
        self.pages_per_request = -(-params.kv_len // page)
        self.physical_pages = self.pages_per_request * (1 if self.shared else params.batch)
        order = token_layout(self.physical_pages, layout, params.seed)
        rows = order[None, :].expand(params.batch, -1) if self.shared else order.view(params.batch, -1)
        self.page_ids = rows.to(torch.int32).contiguous().to(device)  # [batch, pages_per_request]
        shape = (self.physical_pages, page, params.kv_heads, params.head_dim)
        self.k_cache = random_tensor(shape, self.dtype, device, params.seed + 1)
        self.v_cache = random_tensor(shape, self.dtype, device, params.seed + 2)
        self.token_bytes = 2 * params.kv_heads * params.head_dim * self.k_cache.element_size()
        self.unique_kv_bytes = (1 if self.shared else params.batch) * params.kv_len * self.token_bytes

    def last_page_len(self) -> int:
        return self.kv_len - (self.pages_per_request - 1) * self.page

    def reference(self, q: torch.Tensor) -> torch.Tensor:
        """fp32 attention of every request (q: [batch, heads, head_dim]), in q's dtype."""
        scale = 1.0 / math.sqrt(self.head_dim)
        outputs = []
        for request in range(self.batch):
            pages = self.page_ids[request].long()
            tokens = (-1, self.kv_heads, self.head_dim)
            k = self.k_cache[pages].reshape(tokens)[: self.kv_len]
            v = self.v_cache[pages].reshape(tokens)[: self.kv_len]
            outputs.append(gqa_attention_reference(q[request], k, v, scale))
        return torch.stack(outputs).to(q.dtype)

    def representation(self) -> dict[str, Any]:
        return {
            "kv": "shared" if self.shared else "distinct",
            "pages_per_request": self.pages_per_request,
            "physical_pages": self.physical_pages,
            "k_cache": describe(self.k_cache),
            "v_cache": describe(self.v_cache),
            "unique_kv_bytes": self.unique_kv_bytes,
        }


class FlashInferDecode:
    """``BatchDecodeWithPagedKVCacheWrapper.run`` after ``plan()``: page 1 token-flat, else native pages."""

    def __init__(self, params: FlashInferDecodeParams, device: str) -> None:
        self.params = params
        self.cache = PagedKv(params, params.page, params.layout, device)
        self.kv_indices = self.cache.page_ids.reshape(-1)
        self.kv_indptr = torch.arange(params.batch + 1, dtype=torch.int32) * self.cache.pages_per_request
        self.last_page_len = torch.full((params.batch,), self.cache.last_page_len(), dtype=torch.int32)
        self.q = random_tensor((params.batch, params.heads, params.head_dim), self.cache.dtype, device, params.seed)
        self.out = torch.empty_like(self.q)
        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        with loading_flashinfer(f"decode ({params.dtype}, head_dim {params.head_dim}, tensor_cores={params.tensor_cores})"):
            self.wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                self.workspace, "NHD", use_tensor_cores=params.tensor_cores, backend=BACKEND)
            self.wrapper.plan(
                self.kv_indptr.to(device), self.kv_indices, self.last_page_len.to(device),
                params.heads, params.kv_heads, params.head_dim, params.page,
                pos_encoding_mode="NONE", q_data_type=self.cache.dtype, kv_data_type=self.cache.dtype,
            )
        self.expected_bytes = (
            self.cache.unique_kv_bytes + tensor_bytes(self.kv_indices) + 2 * tensor_bytes(self.q)
            + tensor_bytes(self.kv_indptr) + tensor_bytes(self.last_page_len)
        )

    def run(self) -> None:
        self.out = self.wrapper.run(self.q, (self.cache.k_cache, self.cache.v_cache))

    def output(self) -> torch.Tensor:
        return self.out

    def reference(self) -> torch.Tensor:
        return self.cache.reference(self.q)

    def representation(self) -> dict[str, Any]:
        p = self.params
        index_len = self.kv_indices.numel()
        return {
            "backend": f"flashinfer {flashinfer_version()} BatchDecodeWithPagedKVCacheWrapper(NHD, backend={BACKEND})",
            "decode_kernel": "tensor-core (FA2 batch prefill)" if p.tensor_cores else "CUDA-core batch decode",
            "use_tensor_cores": p.tensor_cores,
            "dtype": p.dtype, "layout": p.layout, "batch": p.batch, "kv_len": p.kv_len,
            "heads": p.heads, "kv_heads": p.kv_heads, "head_dim": p.head_dim, "gqa_group": p.group,
            "q": describe(self.q),
            "kv_indices": describe(self.kv_indices),
            "index_len": index_len,
            "page_table_len": index_len,  # FlashInfer's page table is the flat index list
            "requested_page_size": p.page,
            "effective_page_size": p.page,  # what plan() and run() were given
            "device_page_size": p.page,
            "token_flat": p.page == 1,
            "coercion": None,  # the cell passes its page size unchanged
            "last_page_len": self.cache.last_page_len(),
            **self.cache.representation(),
            "footprint_bytes": self.cache.unique_kv_bytes + tensor_bytes(self.kv_indices) + 2 * tensor_bytes(self.q),
        }


class FlashInferPlan:
    """``plan()`` over index_len token indices: indptr/last_page_len on the host, indices on the GPU."""

    def __init__(self, params: FlashInferPlanParams, device: str) -> None:
        self.params = params
        self.dtype = torch_dtype(params.dtype)
        base, extra = divmod(params.index_len, params.batch)
        tokens = [base + (1 if r < extra else 0) for r in range(params.batch)]
        pages = [-(-t // params.page) for t in tokens]
        self.kv_indptr = torch.tensor([0, *torch.tensor(pages).cumsum(0).tolist()], dtype=torch.int32)
        self.last_page_len = torch.tensor(
            [t - (p - 1) * params.page for t, p in zip(tokens, pages, strict=True)], dtype=torch.int32)
        self.kv_indices = torch.arange(int(self.kv_indptr[-1]), dtype=torch.int32, device=device)
        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self.wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_tensor_cores=params.tensor_cores, backend=BACKEND)
        self.expected_bytes = tensor_bytes(self.kv_indptr) + tensor_bytes(self.last_page_len)
        self.last_seconds: float | None = None

    def run(self) -> None:
        p = self.params
        start = time.perf_counter()
        with loading_flashinfer(f"plan() ({p.dtype}, head_dim {p.head_dim}, tensor_cores={p.tensor_cores})"):
            self.wrapper.plan(
                self.kv_indptr, self.kv_indices, self.last_page_len,
                p.heads, p.kv_heads, p.head_dim, p.page,
                pos_encoding_mode="NONE", q_data_type=self.dtype, kv_data_type=self.dtype,
            )
        torch.cuda.synchronize()
        self.last_seconds = time.perf_counter() - start

    def output(self) -> float | None:
        return self.last_seconds

    def reference(self) -> None:
        return None  # plan() has no numeric result to check; flashinfer_decode checks the run

    def representation(self) -> dict[str, Any]:
        p = self.params
        return {
            "backend": f"flashinfer {flashinfer_version()} BatchDecodeWithPagedKVCacheWrapper.plan (backend={BACKEND})",
            "use_tensor_cores": p.tensor_cores,
            "batch": p.batch,
            "index_len": p.index_len,
            "page_table_len": self.kv_indices.numel(),
            "requested_page_size": p.page,
            "effective_page_size": p.page,
            "device_page_size": p.page,
            "coercion": None,
            "kv_indptr": describe(self.kv_indptr) | {"device": "cpu"},
            "kv_indices": describe(self.kv_indices) | {"device": str(self.kv_indices.device)},
            "dtype": p.dtype,
            "footprint_bytes": self.expected_bytes + tensor_bytes(self.kv_indices),
        }
