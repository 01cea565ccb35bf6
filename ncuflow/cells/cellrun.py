"""Run one cell once, the way ncu profiles it: ``python -m ncuflow.cells.cellrun SPEC --representation-out PATH``.

Steps: parse the spec; build the cell (allocate and fill every tensor); warm it up and
compile its kernels OUTSIDE the NVTX range, and check the warm-up's output against the
torch reference there (a wrong result stops here, before the profiled launch); push the
range ``ncuflow/<cell>`` (as two nested push/pop ranges, ``ncuflow`` then ``<cell>``: the
form ncu's ``--nvtx-include ncuflow/<cell>/`` matches), launch the timed operation once,
synchronize, pop; write a JSON record to PATH::

    {"cell", "spec", "content_key", "params", "nvtx_range", "nvtx_push_pop_stack", "representation",
     "expected_bytes", "check": {"passed", "max_abs_error", "tolerance"} | null,
     "torch_version", "triton_version", "cuda_runtime_version", "gpu_name", "gpu_uuid",
     "compute_capability", "sm_count", "l2_bytes", "total_memory_bytes", "gpu_index",
     "driver_version", "warmup"}

``gpu_uuid`` is ``torch.cuda.get_device_properties(i).uuid`` written as nvidia-smi
writes it (``GPU-xxxxxxxx-...``); ``driver_version`` comes from NVML or nvidia-smi.

``representation`` says what reached the timed operation (shapes, index_len,
page_table_len, effective_page_size, dtype, footprint_bytes, ...). Without a GPU (or
without torch/triton) a GPU cell exits non-zero with one paragraph on stderr, no
traceback. Host cells (plan_host) run anywhere; the NVTX range is pushed when torch
with CUDA is present.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ncuflow.cells.contract import (
    CellDefinition,
    CellInstance,
    CellSpec,
    nvtx_range_name,
    nvtx_range_stack,
)
from ncuflow.cells.registry import get_cell, parse_spec
from ncuflow.cells.timing import build_device, device_facts, require_runnable
from ncuflow.errors import NcuflowError
from ncuflow.files import atomic_write_text

DEFAULT_WARMUP = 3
ABS_TOLERANCE = 2e-2
REL_TOLERANCE = 2e-2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ncuflow.cells.cellrun",
        description="Run one ncuflow cell once inside its NVTX range (what ncu profiles).",
    )
    parser.add_argument("spec", help="cell spec, e.g. paged_decode:page=16,kv=shared")
    parser.add_argument("--representation-out", type=Path, required=True, help="JSON record to write")
    parser.add_argument("--cells-dir", type=Path, default=None, help="folder of user cell modules")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help="untimed launches first")
    parser.add_argument(
        "--no-check", action="store_true", help="skip the comparison with the torch reference"
    )
    return parser


def check_output(instance: CellInstance) -> dict[str, Any] | None:
    """Compare the last output with the torch reference; None when the cell has none."""
    reference = instance.reference()
    output = instance.output()
    if reference is None:
        return None
    torch = _torch_or_none()
    if torch is None or not (isinstance(reference, torch.Tensor) and isinstance(output, torch.Tensor)):
        return {"passed": bool(output == reference), "max_abs_error": None, "tolerance": "exact"}
    difference = (output.float() - reference.float()).abs()
    max_error = float(difference.max().item()) if difference.numel() else 0.0
    passed = bool(torch.allclose(output.float(), reference.float(), atol=ABS_TOLERANCE, rtol=REL_TOLERANCE))
    return {
        "passed": passed,
        "max_abs_error": max_error,
        "tolerance": f"atol={ABS_TOLERANCE}, rtol={REL_TOLERANCE}",
    }


def run_once(
    definition: CellDefinition, spec: CellSpec, warmup: int, check: bool
) -> tuple[CellInstance, dict[str, Any] | None]:
    """Build, warm up and check outside the range, then launch once inside ``ncuflow/<cell>``.

    The output is compared with the torch reference before the profiled launch (after the
    warm-up launches, at least one when checking), so a cell that computes the wrong result
    stops before ncu sees its range: a wrong kernel is never stored as a measurement.
    """
    device = build_device(definition)
    instance = definition.instantiate(spec, device)
    torch_module = _torch_with_cuda()
    for _ in range(max(1 if check else 0, warmup)):
        instance.run()
    if torch_module is not None:
        torch_module.cuda.synchronize()
    checked = check_output(instance) if check else None
    if checked is not None and not checked["passed"]:
        return instance, checked
    if torch_module is not None:
        stack = nvtx_range_stack(definition.name)
        pushed = 0
        try:
            for part in stack:
                torch_module.cuda.nvtx.range_push(part)
                pushed += 1
            instance.run()
            torch_module.cuda.synchronize()
        finally:
            for _ in range(pushed):
                torch_module.cuda.nvtx.range_pop()
    else:
        instance.run()
    return instance, checked


def _torch_or_none() -> Any:
    """torch when installed (a host cell may run where it is not), else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch_with_cuda() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _write_json(path: Path, record: dict[str, Any]) -> None:
    """Atomically. Into a store's temporary run folder (``.tmp-*``) only while it exists: the
    folder of an interrupted, cleaned-up run is never created again by a late writer."""
    in_run_folder = path.parent.name.startswith(".tmp-")
    atomic_write_text(path, json.dumps(record, indent=2, default=str) + "\n", make_parents=not in_run_folder)


def main(argv: list[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    try:
        spec = parse_spec(arguments.spec, arguments.cells_dir)
        definition = get_cell(spec.cell, arguments.cells_dir)
        require_runnable(definition, "run")
        params = spec.as_dict()
        try:
            instance, check = run_once(definition, spec, arguments.warmup, not arguments.no_check)
        except NcuflowError:
            raise
        except Exception as error:
            if type(error).__name__ == "OutOfMemoryError":
                raise NcuflowError(
                    f"The cell {spec.text()} does not fit in GPU memory.",
                    str(error).splitlines()[0],
                    "Lower batch, kv_len or mib, or free the GPU.",
                ) from None
            raise
        record: dict[str, Any] = {
            "cell": spec.cell,
            "spec": spec.text(),
            "content_key": spec.content_key(),
            "params": params,
            "nvtx_range": nvtx_range_name(spec.cell),
            "nvtx_push_pop_stack": list(nvtx_range_stack(spec.cell)),
            "representation": instance.representation(),
            "expected_bytes": int(instance.expected_bytes),
            "check": check,
            "warmup": arguments.warmup,
            "gpu_name": None,
            "gpu_uuid": None,
            "driver_version": None,
            **device_facts(),
        }
        _write_json(arguments.representation_out, record)
        if check is not None and not check["passed"]:
            raise NcuflowError(
                f"The cell {spec.text()} ran, but its output differs from the torch reference "
                f"(max abs error {check['max_abs_error']}, {check['tolerance']}).",
                "A kernel that computes the wrong result is not a measurement of the right work, "
                "so the profiled launch was not made.",
                f"The record is in {arguments.representation_out}; report it as a bug in the cell.",
            )
    except NcuflowError as error:
        print(f"ncuflow cellrun: {error}", file=sys.stderr)
        return error.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
