"""The GPU bundle (`make gpu-bundle`): its parts on a fake package, and the real bundle loading here.

The load test needs a built bundle (.gpu-bundle/), its build environment and CUDA 13.0's
nvcc; it is skipped cleanly without them (CI has none: building takes minutes and is not
part of `make test`). With them it unpacks the packed package and reaches FlashInfer's C++
plan(), which must fail with the insufficient-driver error on a machine without a GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "analysis"))

import flashinfer_points  # noqa: E402
import gpu_bundle  # noqa: E402
import study_flashinfer  # noqa: E402


def _fake_package(root: Path) -> Path:
    package = root / "flashinfer"
    for name in ("__init__.py", "jit/core.py", "data/csrc/used.jinja", "data/csrc/unused.cu",
                 "data/include/big.cuh", "data/aot/m/m.so", "data/cutlass/x.py", "artifacts.json"):
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(name)
    return package


def test_trim_keeps_python_the_opened_data_files_and_the_modules(tmp_path: Path) -> None:
    package = _fake_package(tmp_path)
    counts = gpu_bundle.trim(package, ["data/csrc/used.jinja"])
    left = sorted(str(p.relative_to(package)) for p in package.rglob("*") if p.is_file())
    assert left == ["__init__.py", "artifacts.json", "data/aot/m/m.so", "data/csrc/used.jinja", "jit/core.py"]
    assert counts == {"files_kept": 5, "files_removed": 3}
    assert not (package / "data" / "include").exists()  # emptied folders go too


def test_pack_is_reproducible(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _fake_package(site)
    first, second = tmp_path / "a.tar.xz", tmp_path / "b.tar.xz"
    gpu_bundle.pack(site, first)
    (site / "flashinfer" / "__init__.py").touch()  # a new mtime must not change the bytes
    gpu_bundle.pack(site, second)
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as tar:
        assert all(m.mtime == 0 and m.uid == 0 for m in tar.getmembers())


def test_a_damaged_bundle_is_refused_in_one_paragraph(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    archive = bundle / gpu_bundle.ARCHIVE
    archive.write_bytes(b"payload")
    entry = {"name": archive.name, "bytes": 7, "sha256": gpu_bundle.sha256(archive)}
    (bundle / "manifest.json").write_text(json.dumps({"files": [entry]}))
    assert gpu_bundle.read_manifest(bundle)["files"] == [entry]
    archive.write_bytes(b"payloaD")
    with pytest.raises(gpu_bundle.BundleError, match="differs from what"):
        gpu_bundle.read_manifest(bundle)
    with pytest.raises(gpu_bundle.BundleError, match="make gpu-bundle"):
        gpu_bundle.read_manifest(tmp_path / "nowhere")


def test_the_headline_points_are_each_sweeps_corners() -> None:
    path = flashinfer_points.SWEEPS / "flashinfer_decode_pages.toml"
    corners = flashinfer_points.corner_points(path)
    assert [(p["page"], p["kv"]) for p in corners] == [(1, "shared"), (1, "distinct"), (128, "shared"), (128, "distinct")]
    specs = flashinfer_points.headline_specs()
    assert len(specs) == len(set(specs)) == 9  # page=1,kv=distinct is a corner of two sweeps


def test_the_why_tier_takes_one_headline_spec_of_each_cell_first() -> None:
    specs, why = flashinfer_points.headline_specs(), flashinfer_points.why_specs()
    assert sorted(why) == sorted(specs)
    cells = [spec.split(":", 1)[0] for spec in why]
    first_of_each = len(set(cells))
    assert sorted(set(cells[:first_of_each])) == sorted(set(cells)) == sorted(flashinfer_points.CELLS)
    assert why[:first_of_each] == [next(s for s in specs if s.startswith(cell + ":")) for cell in cells[:first_of_each]]
    left_out = flashinfer_points.why_specs(frozenset({"xqa_decode"}))
    assert left_out and all(not spec.startswith("xqa_decode:") for spec in left_out)


def test_each_point_names_the_module_it_loads() -> None:
    modules = [{"uri": "batch_prefill_x"}, {"uri": "batch_decode_x"},
               *({"uri": f"xqa_input_f16_page_size_{p}_head_dim_128"} for p in (16, 32, 64, 128))]
    assert study_flashinfer.needed_module("xqa_decode", {"page": 32}, modules).endswith("_page_size_32_head_dim_128")
    assert study_flashinfer.needed_module("flashinfer_decode", {"tensor_cores": True}, modules) == "batch_prefill_x"
    assert study_flashinfer.needed_module("flashinfer_plan", {"tensor_cores": False}, modules) == "batch_decode_x"
    assert study_flashinfer.needed_module("xqa_decode", {"page": 8}, modules) == "(not in this bundle)"


def test_the_dry_run_lists_every_point_without_a_gpu() -> None:
    done = subprocess.run([sys.executable, str(REPO / "analysis" / "run_study_on_gpu.py"), "--part", "flashinfer",
                           "--dry-run"], capture_output=True, text=True, timeout=300, check=False, cwd=REPO)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.count("  flashinfer_decode:") == 11 and out.count("  xqa_decode:") == 8
    assert out.count("  flashinfer_plan:") == 5 and "18 profiled points" in out
    assert "pytest -m gpu: tests/test_flashinfer_gpu.py" in out and "headline re-profiles (the sweeps' corners)" in out
    from ncuflow.profile import perfworks

    try:
        perfworks.load()
    except perfworks.PerfworksUnavailable:
        assert "passes: tier-1 passes: unknown here" in out
    else:  # predicted offline by Perfworks for gh100, beside each point
        assert "passes: tier 1 " in out and out.count("passes ~") == 19


BUILT = (REPO / ".gpu-bundle" / "manifest.json").is_file() and gpu_bundle.venv_python().exists()


@pytest.mark.skipif(not BUILT, reason="no built GPU bundle here (make gpu-bundle)")
def test_the_bundle_loads_here_up_to_the_driver() -> None:
    try:
        gpu_bundle.cuda_home()
    except gpu_bundle.BundleError as error:
        pytest.skip(str(error))
    done = subprocess.run([sys.executable, str(REPO / "analysis" / "gpu_bundle.py"), "check"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["jit_disabled"] and result["flashinfer"] == gpu_bundle.FLASHINFER
    for path in ("decode_plan_tensor_cores_false", "decode_plan_tensor_cores_true"):
        assert result["paths"][path]["reached_plan"], path
        assert "cudaErrorInsufficientDriver" in result["paths"][path]["error"], result["paths"][path]
    for page in (16, 32, 64, 128):
        assert result["paths"][f"xqa_page_{page}"]["loaded"]
    manifest = gpu_bundle.read_manifest(REPO / ".gpu-bundle")
    assert manifest["bundle_bytes"] <= gpu_bundle.MAX_BUNDLE_BYTES
    assert {m["uri"].split("_")[0] for m in manifest["modules"]} == {"batch", "xqa"}
    assert all("libcuda.so.1" in m["needed"] for m in manifest["modules"])


API_CHECK = r'''
import inspect, json, torch, flashinfer
from ncuflow.cells.registry import parse_spec, get_cell
from ncuflow.kernels._flashinfer import PagedKv
from ncuflow.kernels._xqa import semaphore_count

spec = parse_spec("xqa_decode:batch=3,kv_len=100,page=32,kv=distinct")
params = get_cell("xqa_decode").make_params(spec)
cache = PagedKv(params, params.page, "scatter", "cpu")
ids = cache.page_ids
q = torch.zeros(3, 1, 32, 128, dtype=torch.float16)
seq = torch.full((3, 1), 100, dtype=torch.int32).view(torch.uint32)
sem = torch.zeros(semaphore_count(3, 8), dtype=torch.int32).view(torch.uint32)
# the call XqaDecode.run makes, bound to the installed flashinfer.xqa's signature
inspect.signature(flashinfer.xqa).bind(q, cache.k_cache, cache.v_cache, ids, seq, q, torch.zeros(8, dtype=torch.uint8),
                                        sem, 8, 32, kv_layout="NHD", sm_count=132)
init = inspect.signature(flashinfer.BatchDecodeWithPagedKVCacheWrapper.__init__)
init.bind(None, torch.zeros(8, dtype=torch.uint8), "NHD", use_tensor_cores=True, backend="fa2")
shared = PagedKv(get_cell("xqa_decode").make_params(parse_spec("xqa_decode:batch=4,kv_len=64,page=16")), 16, "scatter", "cpu")
print(json.dumps({"distinct_ids": sorted(ids.reshape(-1).tolist()), "shape": list(ids.shape),
                  "k_cache": list(cache.k_cache.shape), "last_page_len": cache.last_page_len(),
                  "shared_rows_equal": bool((shared.page_ids == shared.page_ids[0]).all()),
                  "shared_pages": shared.physical_pages, "unique_kv_bytes": shared.unique_kv_bytes}))
'''


@pytest.mark.skipif(not gpu_bundle.venv_python().exists(), reason="no bundle build environment here (make gpu-bundle)")
def test_the_cells_call_flashinfer_as_its_installed_api_says() -> None:
    """Against the real flashinfer 0.7.2 (the build env's): the arguments bind, the KV layout is as declared."""
    done = subprocess.run([str(gpu_bundle.venv_python()), "-c", API_CHECK], capture_output=True, text=True,
                          timeout=300, check=False, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["shape"] == [3, 4] and result["distinct_ids"] == list(range(12))  # ceil(100/32) pages each, all own
    assert result["k_cache"] == [12, 32, 8, 128] and result["last_page_len"] == 100 - 3 * 32
    assert result["shared_rows_equal"] and result["shared_pages"] == 4
    assert result["unique_kv_bytes"] == 64 * 2 * 8 * 128 * 2  # one prefix of 64 tokens, K and V, fp16


LOAD_ERROR_CHECK = r'''
import json, torch
from flashinfer.xqa import get_xqa_module
from ncuflow.errors import NcuflowError
from ncuflow.kernels._flashinfer import loading_flashinfer

said = {}
for head_dim in (128, 64):  # in the bundle but unloadable here (no libcuda.so.1), and not in the bundle at all
    try:
        with loading_flashinfer(f"XQA head_dim {head_dim}"):
            get_xqa_module(torch.float16, torch.float16, 16, head_dim, 4, False, torch.float16, 1)
        said[head_dim] = "loaded"
    except NcuflowError as error:
        said[head_dim] = str(error)
print(json.dumps(said))
'''


@pytest.mark.skipif(not BUILT, reason="no built GPU bundle here (make gpu-bundle)")
def test_a_module_that_will_not_load_is_named_with_flashinfers_reason(tmp_path: Path) -> None:
    site = tmp_path / "site"
    gpu_bundle.unpack(REPO / ".gpu-bundle", site)
    env = {"PYTHONPATH": f"{site}:{REPO}", "PATH": "/usr/bin:/bin", "FLASHINFER_DISABLE_JIT": "1",
           "FLASHINFER_CUDA_ARCH_LIST": gpu_bundle.ARCH_LIST,
           "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "workspace"), "HOME": str(tmp_path)}
    done = subprocess.run([str(gpu_bundle.venv_python()), "-c", LOAD_ERROR_CHECK], capture_output=True, text=True,
                          timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert "found its prebuilt module for XQA head_dim 128 but could not load it" in said["128"]
    assert "libcuda.so.1: cannot open shared object file" in said["128"]  # FlashInfer's own reason, kept
    assert said["64"].startswith("FlashInfer has no prebuilt module for XQA head_dim 64")
