"""Every Triton kernel against its torch reference, under Triton's CPU interpreter.

Triton 3.6 decides interpreted-or-compiled when ``@triton.jit`` decorates a function
(``triton.knobs.runtime.interpret`` reads ``TRITON_INTERPRET`` then), and
``triton.language`` itself holds jit'd helpers (``tl.zeros``...) decorated when triton
is first imported. So this module sets ``TRITON_INTERPRET=1`` *before* importing
triton, and the fixture (re)imports the kernel modules with it set; the variable is
restored after the import and after this module's tests, so no other test, nor any
subprocess they start, inherits it.
If triton was already imported in compiled mode by an earlier module, this file re-runs
itself in a fresh subprocess (with the variable set) and reports that run's result:
a mismatch there still fails here.

Shapes are small: the whole file takes seconds on two cores.

bf16 is not checked here: the 3.6 interpreter computes garbage for bf16 ``tl.dot`` on
CPU (a 16x16 bf16 dot is off by ~1e10), so bf16 is checked on a GPU only
(test_kernels_gpu.py).
"""

from __future__ import annotations

import functools
import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


@contextmanager
def _interpreter_env() -> Iterator[None]:
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = previous


with _interpreter_env():
    torch = pytest.importorskip("torch")
    triton = pytest.importorskip("triton")

from ncuflow.cells.registry import get_cell, make_spec  # noqa: E402

KERNEL_MODULES = ("ncuflow.kernels._triton_kernels", "ncuflow.kernels._instances")
SMALL = {"batch": 3, "kv_len": 100, "heads": 4, "kv_heads": 2, "head_dim": 16, "splits": 3}
ATOL = 2e-3
RTOL = 2e-2


_SUBPROCESS_FLAG = "NCUFLOW_INTERPRETER_SUBPROCESS"


@functools.cache
def _run_in_subprocess() -> tuple[int, str]:
    env = {**os.environ, "TRITON_INTERPRET": "1", _SUBPROCESS_FLAG: "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider"],
        capture_output=True, text=True, env=env, timeout=900, check=False,
    )
    return done.returncode, done.stdout[-6000:] + done.stderr[-2000:]


@pytest.fixture(scope="module", autouse=True)
def interpreted_kernels() -> Iterator[None]:
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(triton.language.zeros, InterpretedFunction):
        if os.environ.get(_SUBPROCESS_FLAG):
            pytest.fail("triton is in compiled mode even in a fresh process with TRITON_INTERPRET=1")
        # triton was imported in compiled mode by an earlier test module: run this file
        # in a fresh process instead, where the interpreter can be switched on
        returncode, output = _run_in_subprocess()
        if returncode != 0:
            pytest.fail(f"interpreter tests failed in a fresh process:\n{output}")
        pytest.skip("triton was already compiled-mode here; this file passed in a fresh process")
    for name in KERNEL_MODULES:
        sys.modules.pop(name, None)
    # set for this module's tests only: triton also consults it lazily at first launch
    with _interpreter_env():
        module = importlib.import_module("ncuflow.kernels._triton_kernels")
        importlib.import_module("ncuflow.kernels._instances")
        assert isinstance(module.paged_decode_split_kernel, InterpretedFunction)
        try:
            yield
        finally:
            for name in KERNEL_MODULES:
                sys.modules.pop(name, None)


def build(cell: str, **params: Any) -> Any:
    spec = make_spec(cell, params)
    return get_cell(cell).instantiate(spec, "cpu")


def run_and_compare(instance: Any) -> None:
    instance.run()
    output, reference = instance.output(), instance.reference()
    assert output.shape == reference.shape
    assert torch.isfinite(output.float()).all()
    torch.testing.assert_close(output.float(), reference.float(), atol=ATOL, rtol=RTOL)


# ----------------------------------------------------------------------------- copy


@pytest.mark.parametrize("impl", ["triton", "torch"])
def test_copy_matches_reference(impl: str) -> None:
    instance = build("copy_bandwidth", mib=1, impl=impl)
    instance.dst.zero_()
    instance.run()
    assert torch.equal(instance.output(), instance.reference())
    assert instance.expected_bytes == 2 * 2**20
    representation = instance.representation()
    assert representation["n_elements"] == 2**18
    assert representation["footprint_bytes"] == 2 * 2**20


# ----------------------------------------------------------------------------- flat decode


@pytest.mark.parametrize("layout", ["contiguous", "block128", "scatter"])
def test_flat_decode_matches_reference(layout: str) -> None:
    # kv_len 200 x batch 3: 600 slots, so block128 has a partial last block
    instance = build("flat_decode", layout=layout, **{**SMALL, "kv_len": 200})
    run_and_compare(instance)
    representation = instance.representation()
    assert representation["index_len"] == 600
    assert representation["page_table_len"] == 600
    assert representation["effective_page_size"] == 1
    assert representation["layout"] == layout
    assert representation["kv_indices"]["shape"] == [600]
    indices = instance.kv_indices.long()
    assert torch.equal(indices.sort().values, torch.arange(600))  # a permutation of all slots
    contiguous = torch.equal(indices, torch.arange(600))
    assert contiguous == (layout == "contiguous")
    if layout == "block128":
        # each 128-slot block is read as one run, in order; blocks come in shuffled order
        position = torch.empty_like(indices)
        position[indices] = torch.arange(600)
        for block in range(5):
            slots = position[block * 128 : min(600, (block + 1) * 128)]
            assert torch.equal(slots, torch.arange(slots[0], slots[0] + slots.numel()))
        block_order = indices[position[torch.arange(0, 600, 128)].sort().values] // 128
        assert not torch.equal(block_order, torch.arange(5))


def test_flat_decode_layouts_change_values_not_length() -> None:
    representations = [
        build("flat_decode", layout=layout, **SMALL).representation()
        for layout in ("contiguous", "block128", "scatter")
    ]
    keys = ("index_len", "page_table_len", "effective_page_size", "footprint_bytes", "kv_indices")
    for key in keys:
        assert len({repr(r[key]) for r in representations}) == 1, key


# ----------------------------------------------------------------------------- paged decode


@pytest.mark.parametrize("kv", ["shared", "distinct"])
@pytest.mark.parametrize("page", [1, 16, 32, 64, 128])
def test_paged_decode_matches_reference(page: int, kv: str) -> None:
    instance = build("paged_decode", page=page, kv=kv, **SMALL)
    run_and_compare(instance)
    representation = instance.representation()
    pages = -(-100 // page)
    assert representation["effective_page_size"] == page
    assert representation["pages_per_request"] == pages
    assert representation["page_table_len"] == 3 * pages
    assert representation["block_table"]["shape"] == [3, pages]
    assert representation["kernel_path"] == ("token_gather" if page == 1 else "page_loop")
    per_row = 100 if page == 1 else pages  # kv_len entries when gathering per token
    assert representation["block_table_entry_reads"] == 3 * 2 * per_row
    assert representation["kernels"] == ["paged_decode_split_kernel", "merge_splits_kernel"]
    table = instance.block_table
    if kv == "shared":
        assert representation["physical_pages"] == pages
        assert all(torch.equal(table[0], row) for row in table)
        assert representation["unique_kv_bytes"] == 100 * 2 * 2 * 16 * 2
    else:
        assert representation["physical_pages"] == 3 * pages
        assert table.unique().numel() == table.numel()  # every request its own pages
        assert representation["unique_kv_bytes"] == 3 * 100 * 2 * 2 * 16 * 2


def test_page_table_length_falls_as_page_size_grows() -> None:
    lengths = [
        build("paged_decode", page=page, **SMALL).representation()["page_table_len"]
        for page in (1, 16, 32, 64, 128)
    ]
    assert lengths == sorted(lengths, reverse=True) and lengths[0] == 300 and lengths[-1] == 3


@pytest.mark.parametrize(
    "shape",
    [
        {"heads": 2, "kv_heads": 2, "splits": 1},  # MHA, no split
        {"heads": 8, "kv_heads": 1, "splits": 2},  # GQA group 8
        {"kv_len": 20, "splits": 8},  # more splits than pages/tiles: empty splits
        {"head_dim": 32, "kv_len": 33, "batch": 1},  # one token into the second page
    ],
)
@pytest.mark.parametrize("cell_page", [("paged_decode", 16), ("paged_decode", 1), ("flat_decode", None)])
def test_decode_shapes(shape: dict[str, int], cell_page: tuple[str, int | None]) -> None:
    cell, page = cell_page
    params: dict[str, Any] = {**SMALL, **shape}
    if page is not None:
        params["page"] = page
    run_and_compare(build(cell, **params))


def test_reference_agrees_with_torch_sdpa() -> None:
    """The reference itself, against torch's own attention with the KV heads repeated."""
    from ncuflow.kernels._common import gqa_attention_reference

    generator = torch.Generator().manual_seed(1)
    q = torch.randn(8, 32, generator=generator)
    k = torch.randn(50, 2, 32, generator=generator)
    v = torch.randn(50, 2, 32, generator=generator)
    ours = gqa_attention_reference(q, k, v, 32**-0.5)
    keys = k.repeat_interleave(4, dim=1).permute(1, 0, 2)  # [heads, tokens, dim]
    values = v.repeat_interleave(4, dim=1).permute(1, 0, 2)
    theirs = torch.nn.functional.scaled_dot_product_attention(q[:, None, :], keys, values)[:, 0, :]
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_a_wrong_kernel_result_is_caught() -> None:
    """The comparison cellrun records fails when the output is wrong."""
    from ncuflow.cells.cellrun import check_output

    instance = build("paged_decode", page=16, kv="distinct", **SMALL)
    instance.run()
    good = check_output(instance)
    assert good is not None and good["passed"]
    instance.out[1, 2, 3] += 0.5
    bad = check_output(instance)
    assert bad is not None and not bad["passed"] and bad["max_abs_error"] >= 0.4


def test_bad_head_split_is_a_usage_error() -> None:
    from ncuflow.errors import UsageError

    with pytest.raises(UsageError, match="not a multiple of kv_heads"):
        build("paged_decode", heads=6, kv_heads=4)
