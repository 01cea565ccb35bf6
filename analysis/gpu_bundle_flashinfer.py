#!/usr/bin/env python3
"""FlashInfer's side of the GPU bundle: which modules the cells need, their build, and the load probe.

Runs inside the bundle's build environment (it imports flashinfer and torch); the
orchestration (`analysis/gpu_bundle.py`, standard library only) calls it as a script:

    python analysis/gpu_bundle_flashinfer.py compile OUT_DIR     # build every module, copy each .so
    python analysis/gpu_bundle_flashinfer.py probe RECORD.json   # load them with JIT off, reach plan()
    python analysis/gpu_bundle_flashinfer.py load RECORD.json    # on the GPU host: load each, keep each error

The module list is the cells' (kernels/_flashinfer.py, kernels/xqa_cells.py): fp16, head_dim
128, GQA group 4 (32 query heads over 8 KV heads), as the study's shapes. Each spec comes from
FlashInfer's own generator, so its URI is the one the wrapper asks for at run time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

HEAD_DIM = 128
HEADS = 32
KV_HEADS = 8
XQA_PAGES = (16, 32, 64, 128)


def module_specs() -> list[tuple[Any, str]]:
    """(JitSpec, what it is for) for every module the bundle carries."""
    from flashinfer.jit import gen_batch_decode_module
    from flashinfer.jit.attention.modules import _gen_batch_prefill_primary_module
    from flashinfer.jit.xqa import gen_xqa_module

    fp16, idx = torch.float16, torch.int32
    specs: list[tuple[Any, str]] = [
        (gen_batch_decode_module(fp16, fp16, fp16, idx, HEAD_DIM, HEAD_DIM, 0, False, False),
         "flashinfer_decode / flashinfer_plan with tensor_cores=false: the CUDA-core batch decode "
         "kernel and its plan() (BatchDecodeWithPagedKVCacheWrapper, backend fa2)"),
        # the wrapper's tensor-core decode uses the FA2 batch-prefill module ("primary": K and V
        # with equal strides, which the cells' two separate caches have)
        (_gen_batch_prefill_primary_module("fa2", fp16, fp16, fp16, idx, HEAD_DIM, HEAD_DIM, 0, False, False, False),
         "flashinfer_decode / flashinfer_plan with tensor_cores=true (SGLang's choice at a GQA group "
         ">= 4): the tensor-core decode path, FA2 batch prefill kernel and its plan()"),
    ]
    for page in XQA_PAGES:
        specs.append((gen_xqa_module(fp16, fp16, page, HEAD_DIM, HEADS // KV_HEADS, False, fp16),
                      f"xqa_decode page={page}: XQA decode, fp16 Q/KV/output, head_dim {HEAD_DIM}, "
                      f"GQA group {HEADS // KV_HEADS} (sm_90 runs its generic kernel for fp16 KV)"))
    return specs


def compile_all(out_dir: Path) -> list[dict[str, Any]]:
    """Build each module with FlashInfer's own ninja build; copy each .so to OUT/<uri>/<uri>.so."""
    records = []
    for spec, purpose in module_specs():
        started = time.monotonic()
        spec.build(verbose=False)
        seconds = time.monotonic() - started
        target = out_dir / spec.name / f"{spec.name}.so"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(spec.jit_library_path, target)
        records.append({"uri": spec.name, "purpose": purpose, "build_seconds": round(seconds, 1),
                        "bytes": target.stat().st_size})
        print(f"built {spec.name} in {seconds:.0f} s ({target.stat().st_size:,} bytes)", flush=True)
    return records


@contextlib.contextmanager
def _pinned_memory_on_the_host() -> Iterator[None]:
    """A CPU-only torch cannot pin memory; the wrapper asks for one pinned buffer at construction.

    Only the load probe on a machine without CUDA uses this: the buffer is then ordinary host
    memory, which the C++ plan() never reaches because the driver check fails first.
    """
    original = torch.empty

    def empty(*args: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("pin_memory") and not torch.cuda.is_available():
            kwargs["pin_memory"] = False
        return original(*args, **kwargs)

    torch.empty = empty
    try:
        yield
    finally:
        torch.empty = original


def _plan_until_the_driver(tensor_cores: bool) -> dict[str, Any]:
    """The wrapper's plan() on host tensors: loads the AOT module, then the C++ plan() needs a driver."""
    import flashinfer

    workspace = torch.empty(16 << 20, dtype=torch.uint8)
    with _pinned_memory_on_the_host():
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            workspace, "NHD", use_tensor_cores=tensor_cores, backend="fa2")
    indptr = torch.tensor([0, 64, 128], dtype=torch.int32)
    indices = torch.arange(128, dtype=torch.int32)
    last_page_len = torch.ones(2, dtype=torch.int32)
    try:
        wrapper.plan(indptr, indices, last_page_len, HEADS, KV_HEADS, HEAD_DIM, 1,
                     pos_encoding_mode="NONE", q_data_type=torch.float16, kv_data_type=torch.float16)
    except Exception as error:  # the expected end on a machine without a driver
        text = str(error).splitlines()[0][:300]
        # "CUDA Runtime Error: ..." is thrown by the C++ plan() compiled in the module (tvm-ffi's CUDA check)
        return {"reached_plan": text.startswith("CUDA Runtime Error"), "error_type": type(error).__name__, "error": text}
    return {"reached_plan": True, "error_type": None, "error": None}


def probe(record_path: Path) -> int:
    """Load every module with JIT off; record what was opened under the package (for trimming)."""
    opened: set[str] = set()
    package_root: list[str] = []

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if event == "open" and package_root and isinstance(args[0], str) and args[0].startswith(package_root[0]):
            opened.add(args[0])

    sys.addaudithook(audit)
    import flashinfer
    from flashinfer.xqa import get_xqa_module

    package_root.append(str(Path(flashinfer.__file__).resolve().parent) + os.sep)
    result: dict[str, Any] = {"flashinfer": flashinfer.__version__, "torch": torch.__version__,
                              "jit_disabled": bool(os.environ.get("FLASHINFER_DISABLE_JIT")), "paths": {}}
    for tensor_cores in (False, True):
        result["paths"][f"decode_plan_tensor_cores_{str(tensor_cores).lower()}"] = _plan_until_the_driver(tensor_cores)
    for page in XQA_PAGES:
        module = get_xqa_module(torch.float16, torch.float16, page, HEAD_DIM, HEADS // KV_HEADS, False, torch.float16, 1)
        result["paths"][f"xqa_page_{page}"] = {"loaded": callable(getattr(module, "xqa", None))}
    result["opened"] = sorted(p[len(package_root[0]):] for p in opened)
    record_path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "opened"}, indent=2))
    return 0


class _LoadWarnings(logging.Handler):
    """FlashInfer's "Failed to load AOT artifact PATH: REASON" lines (the cause it then hides)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage()[:1000])


def load(record_path: Path) -> int:
    """Load every module the cells use through FlashInfer's own loader (JIT off), each error verbatim.

    Unlike ``probe`` it never calls plan(): on the GPU host the cells themselves do that.
    Exit 0 when every module loaded, 1 otherwise; the record says which and why.
    """
    from flashinfer.jit import core

    warnings = _LoadWarnings()
    core.logger.addHandler(warnings)
    modules: dict[str, Any] = {}
    for spec, purpose in module_specs():
        warnings.lines.clear()
        try:
            spec.build_and_load()
            modules[spec.name] = {"loaded": True, "purpose": purpose}
        except Exception as error:  # FlashInfer's own words are the point of this record
            modules[spec.name] = {"loaded": False, "purpose": purpose, "error": f"{type(error).__name__}: {error}"[:1000],
                                  "flashinfer_log": list(warnings.lines)}
    result = {"flashinfer": _version(), "jit_disabled": bool(os.environ.get("FLASHINFER_DISABLE_JIT")),
              "modules": modules}
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if all(m["loaded"] for m in modules.values()) else 1


def _version() -> str:
    import flashinfer

    return str(getattr(flashinfer, "__version__", "unknown"))


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in {"compile", "probe", "load"}:
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "compile":
        out = Path(argv[1])
        records = compile_all(out)
        (out / "modules.json").write_text(json.dumps(records, indent=2) + "\n")
        return 0
    if argv[0] == "load":
        return load(Path(argv[1]))
    return probe(Path(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
