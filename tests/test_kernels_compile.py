"""The Triton kernels compile for the H200 (sm_90) on a machine without a GPU.

Triton's compiler and its bundled ptxas need no GPU: ``kernels._compile_check`` records
the exact launches of each cell's ``run()`` on CPU tensors and compiles them for
sm_90. This catches codegen errors the CPU interpreter cannot (``tl.dot`` shape rules,
types, shared memory). It runs in a subprocess, away from the interpreter mode that
test_kernels_interpreter.py puts triton in.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

# find, don't import: importing triton here would put it in compiled mode for the whole
# pytest process before test_kernels_interpreter.py can ask for the interpreter
if importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None:
    pytest.skip("torch and triton are not installed", allow_module_level=True)

SMALL = "batch=2,kv_len=256"
SPECS = {
    "copy_bandwidth:mib=1": ["copy_kernel"],
    "copy_bandwidth:mib=1,impl=torch": [],
    f"flat_decode:{SMALL},layout=scatter": ["flat_decode_split_kernel", "merge_splits_kernel"],
    f"flat_decode:{SMALL},dtype=bf16,head_dim=64,splits=5": ["flat_decode_split_kernel", "merge_splits_kernel"],
    **{
        f"paged_decode:{SMALL},page={page}": ["paged_decode_split_kernel", "merge_splits_kernel"]
        for page in (1, 16, 32, 64, 128)
    },
    f"paged_decode:{SMALL},page=16,dtype=bf16,kv=distinct": ["paged_decode_split_kernel", "merge_splits_kernel"],
    f"paged_decode:{SMALL},page=128,head_dim=256,heads=64": ["paged_decode_split_kernel", "merge_splits_kernel"],
}


@pytest.mark.slow
def test_every_launch_compiles_for_sm90() -> None:
    script = textwrap.dedent(
        f"""
        import json, dataclasses
        from ncuflow.kernels._compile_check import compile_cell
        out = {{}}
        for spec in {list(SPECS)!r}:
            out[spec] = [dataclasses.asdict(c) for c in compile_cell(spec, arch=90)]
        print(json.dumps(out))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for spec, kernels in SPECS.items():
        assert [launch["kernel"] for launch in results[spec]] == kernels, spec
        for launch in results[spec]:
            assert launch["shared_bytes"] < 228 * 1024  # fits an H100/H200 SM
    page_tiles = {
        page: results[f"paged_decode:{SMALL},page={page}"][0]["constexprs"]["BLOCK_N"]
        for page in (1, 16, 32, 64, 128)
    }
    assert page_tiles == {1: 16, 16: 16, 32: 32, 64: 64, 128: 64}
