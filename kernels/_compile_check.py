"""Compile a cell's Triton launches for a GPU architecture without a GPU.

``python -m kernels._compile_check SPEC [--arch 90]`` builds the cell on CPU tensors,
records the exact arguments each ``kernel[grid](...)`` of ``run()`` receives, and
compiles each launch ahead of time with Triton's own compiler and bundled ptxas for the
target (sm_90 = H100/H200 by default). This catches what the CPU interpreter cannot:
type errors in codegen, ``tl.dot`` shape rules, shared-memory overflow... It proves the
kernels compile, not that they are fast. Run it with TRITON_INTERPRET unset.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from ncuflow.cells.registry import get_cell, parse_spec

_POINTER_TYPES = {
    torch.float16: "*fp16",
    torch.bfloat16: "*bf16",
    torch.float32: "*fp32",
    torch.int32: "*i32",
    torch.int64: "*i64",
}


@dataclass(frozen=True)
class CompiledLaunch:
    kernel: str
    grid: tuple[int, ...]
    constexprs: dict[str, Any]
    ptx_global_loads: int  # static count of ld.global in the PTX (not a dynamic count)
    shared_bytes: int


class _Recorder:
    def __init__(self, kernel: Any, sink: list[tuple[Any, tuple[int, ...], tuple[Any, ...], dict[str, Any]]]) -> None:
        self.kernel = kernel
        self.sink = sink

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def launch(*args: Any, **kwargs: Any) -> None:
            self.sink.append((self.kernel, tuple(grid), args, kwargs))

        return launch


@contextmanager
def _recording(module: Any) -> Iterator[list[tuple[Any, tuple[int, ...], tuple[Any, ...], dict[str, Any]]]]:
    sink: list[tuple[Any, tuple[int, ...], tuple[Any, ...], dict[str, Any]]] = []
    originals = {
        name: value for name, value in vars(module).items() if isinstance(value, triton.runtime.JITFunction)
    }
    try:
        for name, value in originals.items():
            setattr(module, name, _Recorder(value, sink))
        yield sink
    finally:
        for name, value in originals.items():
            setattr(module, name, value)


def _signature(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    names = list(kernel.arg_names)
    for name, value in zip(names, args, strict=False):
        if isinstance(value, torch.Tensor):
            signature[name] = _POINTER_TYPES[value.dtype]
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            raise TypeError(f"{name}: cannot type {value!r}")
    for name, value in kwargs.items():
        signature[name] = "constexpr"
        constexprs[name] = value
    missing = [n for n in names if n not in signature]
    if missing:
        raise TypeError(f"{kernel.__name__}: arguments not given: {missing}")
    return signature, constexprs


def compile_cell(spec_text: str, arch: int = 90) -> list[CompiledLaunch]:
    """Compile every Triton launch of the cell's ``run()`` for ``sm_<arch>``."""
    import ncuflow.kernels._instances as instances

    spec = parse_spec(spec_text)
    instance = get_cell(spec.cell).instantiate(spec, "cpu")
    with _recording(instances) as launches:
        instance.run()
    target = GPUTarget("cuda", arch, 32)
    compiled: list[CompiledLaunch] = []
    for kernel, grid, args, kwargs in launches:
        signature, constexprs = _signature(kernel, args, kwargs)
        binary = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=constexprs), target=target)
        compiled.append(
            CompiledLaunch(
                kernel=kernel.__name__,
                grid=grid,
                constexprs=constexprs,
                ptx_global_loads=binary.asm["ptx"].count("ld.global"),
                shared_bytes=int(binary.metadata.shared),
            )
        )
    return compiled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels._compile_check")
    parser.add_argument("spec")
    parser.add_argument("--arch", type=int, default=90, help="SM architecture, e.g. 90 (H100/H200)")
    arguments = parser.parse_args(argv)
    for launch in compile_cell(arguments.spec, arguments.arch):
        print(
            f"{launch.kernel} grid={launch.grid} shared={launch.shared_bytes}B "
            f"ptx ld.global={launch.ptx_global_loads} {launch.constexprs}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
