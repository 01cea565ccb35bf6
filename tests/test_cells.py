"""Cell registry, spec grammar, user cells, `ncuflow cells` / `ncuflow time` and cellrun.

Nothing here needs torch, triton or a GPU (the Triton kernels are checked in
test_kernels_interpreter.py).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.cells.contract import CellSpec, nvtx_range_name, nvtx_range_stack
from ncuflow.cells.registry import get_cell, gpu_status, list_cells, make_spec, parse_spec
from ncuflow.cells.timing import TimingStats, rotating_copy_count, time_cell
from ncuflow.cli import cli
from ncuflow.errors import NcuflowError, UsageError

BUILTIN = {"copy_bandwidth", "flat_decode", "paged_decode", "plan_host", "flashinfer_decode", "flashinfer_plan"}
REPO_ROOT = Path(__file__).resolve().parent.parent


def _env_without_interpreter() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    return env


# ----------------------------------------------------------------------------- grammar


def test_study_spec_fills_defaults_and_is_canonical() -> None:
    spec = parse_spec("paged_decode:page=16,kv=shared,batch=32,kv_len=8192")
    params = spec.as_dict()
    assert params["page"] == 16 and params["kv"] == "shared"
    assert params["batch"] == 32 and params["kv_len"] == 8192
    assert params["heads"] == 32 and params["kv_heads"] == 8 and params["head_dim"] == 128
    assert [name for name, _ in spec.params] == sorted(params)
    assert spec.text().startswith("paged_decode:batch=32,dtype=fp16,")
    assert "kv=shared,kv_heads=8,kv_len=8192,page=16" in spec.text()


def test_round_trip_and_order_independence() -> None:
    a = parse_spec("flat_decode:layout=scatter,batch=4,kv_len=4096")
    b = parse_spec(" flat_decode : kv_len=4096 , batch=4,layout=scatter ")
    assert a == b
    assert parse_spec(a.text()) == a
    assert a.content_key() == b.content_key()
    assert len(a.content_key()) == 64


def test_defaults_only_spec_equals_explicit_defaults() -> None:
    bare = parse_spec("paged_decode")
    explicit = parse_spec("paged_decode:page=16,kv=shared,batch=32,kv_len=8192")
    assert bare == explicit
    assert make_spec("paged_decode", {"page": 16}) == bare


def test_content_key_and_slug_change_with_a_parameter() -> None:
    page16 = parse_spec("paged_decode:page=16")
    page64 = parse_spec("paged_decode:page=64")
    assert page16.content_key() != page64.content_key()
    assert page16.slug() != page64.slug()
    assert "page16" in page16.slug() and "kvshared" in page16.slug()
    assert all(ch.isalnum() or ch in "-_." for ch in page16.slug())


def test_values_are_typed() -> None:
    spec = parse_spec("plan_host:index_len=64,materialize_indices=yes")
    assert spec.param("index_len") == 64 and isinstance(spec.param("index_len"), int)
    assert spec.param("materialize_indices") is True
    assert "materialize_indices=true" in spec.text()
    assert parse_spec("plan_host:materialize_indices=0").param("materialize_indices") is False
    with pytest.raises(KeyError):
        spec.param("nope")


def test_nvtx_range_name() -> None:
    assert nvtx_range_name("paged_decode") == "ncuflow/paged_decode"
    # pushed as nested ranges: what ncu's --nvtx-include "ncuflow/paged_decode/" matches
    assert nvtx_range_stack("paged_decode") == ("ncuflow", "paged_decode")


@pytest.mark.parametrize(
    ("text", "must_say"),
    [
        ("warp_decode:page=16", ["no cell named 'warp_decode'", "paged_decode", "flat_decode"]),
        ("paged_decode:pagesize=16", ["no parameter 'pagesize'", "page (default 16)", "kv_len"]),
        ("paged_decode:page=sixteen", ["not an integer", "1, 16, 32, 64, 128"]),
        ("paged_decode:page=8", ["not one of its choices", "1, 16, 32, 64, 128"]),
        ("paged_decode:kv=private", ["not one of its choices", "shared, distinct"]),
        ("plan_host:materialize_indices=maybe", ["not true or false"]),
        ("paged_decode:page=16,page=32", ["sets 'page' twice"]),
        ("paged_decode:page=16,,kv=shared", ["empty item"]),
        ("paged_decode:page", ["not key=value"]),
        ("paged_decode:page=", ["not key=value"]),
        ("   ", ["empty"]),
    ],
)
def test_bad_specs_explain_themselves(text: str, must_say: list[str]) -> None:
    with pytest.raises(UsageError) as caught:
        parse_spec(text)
    message = str(caught.value)
    for fragment in must_say:
        assert fragment in message, message
    assert "\n" not in message  # one paragraph


def test_cellspec_without_params() -> None:
    spec = CellSpec(cell="bare", params=())
    assert spec.text() == "bare" and spec.slug() == "default"


# ----------------------------------------------------------------------------- registry


def test_builtin_cells_are_listed_with_params() -> None:
    infos = {info.name: info for info in list_cells()}
    assert set(infos) >= BUILTIN
    assert infos["plan_host"].needs_ncu is False and infos["plan_host"].available
    assert infos["paged_decode"].needs_ncu is True
    page = next(p for p in infos["paged_decode"].params if p.name == "page")
    assert page.default == 16 and page.choices == (1, 16, 32, 64, 128)
    layout = next(p for p in infos["flat_decode"].params if p.name == "layout")
    assert layout.choices == ("contiguous", "block128", "scatter")
    for info in infos.values():
        assert info.available == (info.unavailable_reason is None)


def test_gpu_cells_unavailable_without_gpu_say_why() -> None:
    has_gpu, detail = gpu_status()
    if has_gpu:
        pytest.skip("this machine has a GPU")
    info = next(i for i in list_cells() if i.name == "paged_decode")
    assert not info.available
    assert info.unavailable_reason is not None and detail in info.unavailable_reason


def test_flashinfer_cells_unavailable_with_reason_when_missing() -> None:
    import importlib.util

    if importlib.util.find_spec("flashinfer") is not None:
        pytest.skip("flashinfer is installed here")
    for info in list_cells():
        if info.name.startswith("flashinfer_"):
            assert not info.available
            reason = info.unavailable_reason or ""
            assert "flashinfer" in reason or "torch" in reason or "GPU" in reason


def test_cells_module_works_without_torch(tmp_path: Path) -> None:
    """`ncuflow cells` must work where torch and triton are not installed at all."""
    script = textwrap.dedent(
        """
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "triton", "flashinfer"):
                    raise ModuleNotFoundError(name)
                return None
        sys.meta_path.insert(0, Block())
        import importlib.util
        _find = importlib.util.find_spec
        def find_spec(name, package=None):
            if name.split(".")[0] in ("torch", "triton", "flashinfer"):
                return None
            return _find(name, package)
        importlib.util.find_spec = find_spec
        from ncuflow.cli import main
        main(["cells", "--json"])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
        env=_env_without_interpreter(), timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["gpu"]["available"] is False
    assert "torch is not installed" in payload["gpu"]["detail"]
    cells = {c["name"]: c for c in payload["cells"]}
    assert cells["plan_host"]["available"] is True
    assert cells["paged_decode"]["available"] is False
    assert "torch is not installed" in cells["paged_decode"]["unavailable_reason"]
    assert "torch" not in done.stderr


USER_CELL = '''
"""A user cell: sums a list on the host."""
from ncuflow.cells import CellDefinition, ParamSpec


class SumInstance:
    def __init__(self, params, device):
        self.values = list(range(params["n"]))
        self.expected_bytes = 8 * params["n"]
        self.result = None

    def run(self):
        self.result = sum(self.values)

    def output(self):
        return self.result

    def reference(self):
        return params_n_sum(len(self.values))

    def representation(self):
        return {"index_len": len(self.values), "page_table_len": 0,
                "effective_page_size": None, "footprint_bytes": self.expected_bytes}


def params_n_sum(n):
    return n * (n - 1) // 2


CELL = CellDefinition(
    name="my_sum",
    params=(ParamSpec("n", int, 1000, None, "values summed"),
            ParamSpec("mode", str, "fast", ("fast", "slow"), "unused switch")),
    description="Sum of range(n) on the host.",
    build=lambda params, device: SumInstance(params, device),
    requires=(),
    needs_ncu=False,
    timing="host",
)
'''


@pytest.fixture
def user_cells(tmp_path: Path) -> Path:
    folder = tmp_path / "mycells"
    folder.mkdir()
    (folder / "my_sum.py").write_text(USER_CELL)
    (folder / "_helper.py").write_text("raise RuntimeError('private modules are not scanned')\n")
    return folder


def test_user_cells_dir_adds_a_cell(user_cells: Path) -> None:
    names = {info.name for info in list_cells(user_cells)}
    assert "my_sum" in names and names >= BUILTIN
    assert "my_sum" not in {info.name for info in list_cells()}
    spec = parse_spec("my_sum:n=10", user_cells)
    assert spec.text() == "my_sum:mode=fast,n=10"
    with pytest.raises(UsageError, match="no cell named 'my_sum'"):
        parse_spec("my_sum:n=10")
    result = time_cell(spec, repeats=5, warmup=1, cells_dir=user_cells)
    assert result.clock == "host_perf_counter" and len(result.samples_us) == 5
    assert result.representation["index_len"] == 10
    instance = get_cell("my_sum", user_cells).instantiate(spec, "cpu")
    instance.run()
    assert instance.output() == instance.reference() == 45


def test_user_cell_named_like_a_builtin_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "clash"
    folder.mkdir()
    (folder / "clash.py").write_text(USER_CELL.replace('name="my_sum"', 'name="paged_decode"'))
    with pytest.raises(NcuflowError, match="Two cells are named 'paged_decode'"):
        list_cells(folder)


@pytest.mark.parametrize(
    ("source", "must_say"),
    [
        ("import not_a_module_anywhere\n", "failed to import"),
        ("CELL = 42\n", "not a CellDefinition"),
        (USER_CELL.replace('ParamSpec("n", int, 1000,', 'ParamSpec("n", int, "many",'), "is not of its type int"),
        (USER_CELL.replace('("fast", "slow"), "unused', '("slow",), "unused'), "not among its choices"),
        (USER_CELL.replace('name="my_sum"', 'name="my-sum"'), "identifier"),
    ],
)
def test_broken_user_cells_are_reported(tmp_path: Path, source: str, must_say: str) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "bad_cell.py").write_text(source)
    with pytest.raises(NcuflowError) as caught:
        list_cells(folder)
    assert must_say in str(caught.value)
    assert "bad_cell.py" in str(caught.value)


def test_missing_cells_dir_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        list_cells(tmp_path / "nowhere")


# ----------------------------------------------------------------------------- plan_host


@pytest.mark.parametrize("index_len", [64, 4096, 262144, 2097152])
@pytest.mark.parametrize("page", [1, 16, 128])
def test_plan_host_matches_its_reference(index_len: int, page: int) -> None:
    spec = make_spec("plan_host", {"index_len": index_len, "page": page})
    instance = get_cell("plan_host").instantiate(spec, "cpu")
    instance.run()
    plan = instance.output()
    assert plan == instance.reference()
    representation = instance.representation()
    assert representation["index_len"] == index_len
    assert representation["effective_page_size"] == page
    assert representation["page_table_len"] == sum(-(-t // page) for t in instance.tokens)  # type: ignore[attr-defined]
    assert representation["indptr_len"] == 33
    budget = (132 * 2) // 8
    assert plan.work_items <= max(budget, 32)
    # every request's tiles cover its pages
    assert plan.o_indptr[-1] == plan.work_items


def test_plan_host_materialize_writes_the_index_list() -> None:
    spec = make_spec("plan_host", {"index_len": 5000, "materialize_indices": True})
    instance = get_cell("plan_host").instantiate(spec, "cpu")
    instance.run()
    assert instance.output().indices_written == 5000
    assert instance.output() == instance.reference()
    assert instance.expected_bytes >= 4 * 5000


def test_plan_host_rejects_more_requests_than_tokens_where_the_spec_enters() -> None:
    """The rule between parameters is checked when the spec is parsed, before anything is built."""
    with pytest.raises(UsageError, match="batch <= index_len"):
        make_spec("plan_host", {"index_len": 8, "batch": 32})
    with pytest.raises(UsageError, match="batch <= index_len"):
        parse_spec("plan_host:index_len=8,batch=32")


# ----------------------------------------------------------------------------- timing helpers


def test_timing_stats() -> None:
    stats = TimingStats.of([10.0, 11.0, 12.0, 13.0, 100.0])
    assert stats.median_us == 12.0 and stats.min_us == 10.0 and stats.max_us == 100.0
    assert stats.p10_us == pytest.approx(10.4)
    assert stats.p90_us == pytest.approx(65.2)
    assert stats.spread_pct == pytest.approx(100 * (65.2 - 10.4) / 12.0)
    single = TimingStats.of([5.0])
    assert single.stdev_us == 0.0 and single.spread_pct == 0.0


def test_rotating_copy_count() -> None:
    l2 = 50 * 2**20
    assert rotating_copy_count(2**30, l2, None) == 1  # larger than L2: no rotation
    assert rotating_copy_count(None, l2, None) == 1
    assert rotating_copy_count(32 * 2**20, l2, None) == 7  # ceil(4 * 50 / 32)
    assert rotating_copy_count(1024, l2, None) == 64  # capped
    assert rotating_copy_count(32 * 2**20, l2, 100 * 2**20) == 1  # memory-limited


def test_time_rejects_bad_counts() -> None:
    with pytest.raises(UsageError):
        time_cell(parse_spec("plan_host"), repeats=0)


# ----------------------------------------------------------------------------- CLI


def test_cells_command_table() -> None:
    result = CliRunner().invoke(cli, ["cells"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for name in BUILTIN:
        assert name in result.output
    assert "kv_len=8192" in result.output and "page=16" in result.output
    has_gpu, detail = gpu_status()
    if not has_gpu:
        assert "No GPU on this machine" in result.output
        assert detail in result.output.replace("\n", " ") or "CPU-only" in result.output


@pytest.mark.parametrize("columns", ["80", None])
def test_piped_tables_keep_their_values_whatever_columns_says(columns: str | None) -> None:
    """Piped into a file or another program, a table is not squeezed to rich's 80 columns,
    nor to a COLUMNS=80 left in the environment (the values would be cut to "…")."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | ({"COLUMNS": columns} if columns else {})
    out = subprocess.run([sys.executable, "-m", "ncuflow", "cells"], capture_output=True, text=True,
                         env=env, check=True, timeout=120).stdout
    assert "…" not in out
    for name in BUILTIN:
        assert name in out


def test_cells_command_json_with_user_dir(user_cells: Path) -> None:
    result = CliRunner().invoke(cli, ["cells", "--json", "--cells-dir", str(user_cells)])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    cells = {c["name"]: c for c in payload["cells"]}
    assert cells["my_sum"]["params"][1] == {
        "name": "mode", "type": "str", "default": "fast", "choices": ["fast", "slow"], "help": "unused switch",
        "serves": None,
    }
    assert cells["paged_decode"]["needs_ncu"] is True
    # the serving shape each parameter declares (phases --sweep-for maps a log through it)
    served = {p["name"]: p["serves"] for p in cells["paged_decode"]["params"] if p["serves"]}
    assert served == {"page": "page_size", "batch": "decode_batch", "kv_len": "kv_len", "dtype": "kv_dtype"}


def _ncuflow(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ncuflow", *args], capture_output=True, text=True,
        env=_env_without_interpreter(), timeout=180, check=False,
    )


def test_time_command_runs_plan_host_on_cpu() -> None:
    done = _ncuflow("time", "plan_host:index_len=4096", "--repeats", "7", "--warmup", "1", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["clock"] == "host_perf_counter" and len(payload["samples_us"]) == 7
    assert payload["representation"]["index_len"] == 4096
    assert payload["stats"]["min_us"] <= payload["stats"]["median_us"] <= payload["stats"]["max_us"]


def test_time_command_without_gpu_is_one_paragraph() -> None:
    if gpu_status()[0]:
        pytest.skip("this machine has a GPU")
    done = _ncuflow("time", "paged_decode:page=16")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "Cannot time the cell 'paged_decode'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_time_command_bad_spec_is_a_usage_error() -> None:
    done = _ncuflow("time", "paged_decode:page=7")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "not one of its choices" in done.stderr


# ----------------------------------------------------------------------------- cellrun


def _cellrun(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ncuflow.cells.cellrun", *args], capture_output=True, text=True,
        env=_env_without_interpreter(), timeout=180, check=False,
    )


def test_cellrun_without_gpu_exits_with_a_paragraph(tmp_path: Path) -> None:
    if gpu_status()[0]:
        pytest.skip("this machine has a GPU")
    out = tmp_path / "rep.json"
    done = _cellrun("paged_decode:page=16,kv=shared", "--representation-out", str(out))
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "Cannot run the cell 'paged_decode'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_cellrun_bad_spec(tmp_path: Path) -> None:
    done = _cellrun("paged_decode:kv=private", "--representation-out", str(tmp_path / "r.json"))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "shared, distinct" in done.stderr


def test_cellrun_host_cell_writes_the_record(tmp_path: Path, user_cells: Path) -> None:
    out = tmp_path / "sub" / "rep.json"
    done = _cellrun("plan_host:index_len=1024,page=16", "--representation-out", str(out))
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    assert record["check"] == {"passed": True, "max_abs_error": None, "tolerance": "exact"}
    assert record["cell"] == "plan_host" and record["nvtx_range"] == "ncuflow/plan_host"
    assert record["nvtx_push_pop_stack"] == ["ncuflow", "plan_host"]
    assert record["params"]["page"] == 16
    assert record["representation"]["page_table_len"] == 64
    assert record["representation"]["effective_page_size"] == 16
    for key in ("expected_bytes", "torch_version", "triton_version", "gpu_name", "gpu_uuid", "driver_version"):
        assert key in record
    assert record["spec"] == parse_spec("plan_host:index_len=1024,page=16").text()

    user_out = tmp_path / "user.json"
    done = _cellrun(
        "my_sum:n=5", "--representation-out", str(user_out), "--cells-dir", str(user_cells), "--no-check"
    )
    assert done.returncode == 0, done.stderr
    record = json.loads(user_out.read_text())
    assert record["representation"]["index_len"] == 5 and record["expected_bytes"] == 40


# ----------------------------------------------------------------------------- listing without torch


def test_listing_cells_imports_neither_torch_nor_flashinfer() -> None:
    """`ncuflow cells` stays fast: availability is read from the machine, not from importing torch."""
    code = ("import sys\nfrom ncuflow.cli import main\nmain(['cells', '--json'])\n"
            "print('IMPORTED', sorted(m for m in ('torch', 'triton', 'flashinfer') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                          env=_env_without_interpreter())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "IMPORTED []"


def test_the_light_gpu_probe_agrees_with_torch_here() -> None:
    from ncuflow.cells.registry import gpu_status_from_torch

    assert gpu_status()[0] == gpu_status_from_torch()[0]
    if importlib.util.find_spec("torch") is not None and not gpu_status()[0]:
        assert gpu_status()[1] == gpu_status_from_torch()[1]  # e.g. "torch 2.13.0+cpu is a CPU-only build"


@pytest.mark.parametrize(("text", "cuda"), [
    ("cuda: Optional[str] = '13.0'\n", "13.0"),
    ("cuda = None\n", None),
    ("__version__ = '2.11.0+cu130'\ncuda: Optional[str] = \"13.0\"\nhip = None\n", "13.0"),
    ("cuda: Optional[str] = None\n", None),
])
def test_torch_build_cuda_is_read_from_its_version_file(text: str, cuda: str | None) -> None:
    from ncuflow.cells.registry import _TORCH_CUDA_LINE

    match = _TORCH_CUDA_LINE.search(text)
    assert match is not None and (match.group(1) or None) == cuda


def test_a_rule_between_parameters_stops_a_bad_spec_where_it_enters() -> None:
    with pytest.raises(UsageError, match="not a multiple of kv_heads"):
        parse_spec("xqa_decode:heads=6,kv_heads=4")
    params = get_cell("xqa_decode").make_params(parse_spec("xqa_decode:page=64"))
    assert (params.page, params.batch, params.group) == (64, 32, 4)  # typed, made once from the spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.page = 16  # type: ignore[misc]


def test_typed_parameters_keep_the_stored_content_keys() -> None:
    """The committed H200 store is keyed by the content keys: the typed declarations must not move them."""
    assert make_spec("paged_decode", {"page": 128, "kv": "distinct"}).content_key().startswith("0b2a468d")
    for info in list_cells():
        definition = get_cell(info.name)
        assert definition.params == (definition.params_type.param_specs() if definition.params_type else definition.params)
