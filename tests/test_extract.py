"""Extraction on the corpus of real reports: counts, aliases, provenance, missing fields."""

from __future__ import annotations

from pathlib import Path

import ncu_report
import pytest

from ncuflow.read.extract import iter_launches
from ncuflow.read.metrics import FIELDS
from ncuflow.read.reportfile import find_reports, read_ncu_version

from .conftest import CORPUS_DIR
from .corpus import read_sources

SOURCES = read_sources(CORPUS_DIR) if (CORPUS_DIR / "SOURCES.tsv").is_file() else []


def _raw(path: Path, action_index: int, name: str) -> float | None:
    action = ncu_report.load_report(str(path)).range_by_idx(0).action_by_idx(action_index)
    metric = action.metric_by_name(name)
    if metric is None or not metric.has_value():
        return None
    return float(metric.value())


@pytest.mark.parametrize("entry", SOURCES, ids=[e.file[:60] for e in SOURCES])
def test_every_corpus_report_loads_with_its_launch_count(corpus_dir: Path, entry) -> None:
    launches = list(iter_launches(corpus_dir / entry.file))
    assert len(launches) == entry.total_actions
    assert all(launch.kernel.function for launch in launches)
    # Every field is either valued with a provenance, or missing and listed: never a silent 0.
    for launch in launches:
        for field in FIELDS:
            value = launch.values[field.name]
            assert (value is None) == (field.name in launch.missing)
            assert (value is None) == (field.name not in launch.provenance)
    if entry.gpu_name:
        assert launches[0].device.name == entry.gpu_name


def test_corpus_is_there_and_complete(corpus_dir: Path) -> None:
    reports = find_reports([corpus_dir])
    assert len(reports) == len(SOURCES) >= 40


def test_values_equal_the_raw_metric_they_name(corpus_dir: Path) -> None:
    path = corpus_dir / "AlpriElse__cs599k__rms_norm_matrix_ncu-reports_2025-04-21_v1.ncu-rep"
    launch = next(iter_launches(path))
    assert launch.provenance["duration_ns"] == "gpu__time_duration.sum"
    assert launch.values["duration_ns"] == _raw(path, 0, "gpu__time_duration.sum")
    assert launch.provenance["ldg_sass_inst"] == "smsp__sass_inst_executed_op_global_ld.sum"
    assert launch.values["ldg_sass_inst"] == _raw(path, 0, "smsp__sass_inst_executed_op_global_ld.sum")
    # the total of the kinds an H100 has: LDG, LDGSTS and TMA loads, each read as counted
    assert launch.provenance["global_ld_sass_inst"] == "ldg_sass_inst + ldgsts_sass_inst + tma_ld_sass_inst (LDG, LDGSTS (cp.async), TMA loads)"
    assert launch.values["global_ld_sass_inst"] == sum(
        _raw(path, 0, f"smsp__sass_inst_executed_op_{kind}.sum") or 0 for kind in ("global_ld", "ldgsts", "tma_ld"))
    sectors = _raw(path, 0, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")
    requests = _raw(path, 0, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
    assert sectors and requests
    assert launch.values["sectors_per_request"] == pytest.approx(sectors / requests)
    read = _raw(path, 0, "dram__bytes_read.sum")
    write = _raw(path, 0, "dram__bytes_write.sum")
    assert read is not None and write is not None
    assert launch.values["dram_bytes"] == pytest.approx(read + write)
    assert launch.provenance["dram_bytes"] == "dram__bytes_read.sum + dram__bytes_write.sum"


def test_2022_full_set_takes_the_older_sass_name(corpus_dir: Path) -> None:
    path = corpus_dir / "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep"
    launch = next(iter_launches(path))
    assert launch.provenance["ldg_sass_inst"] == "sass__inst_executed_global_loads"
    assert launch.values["ldg_sass_inst"] == _raw(path, 0, "sass__inst_executed_global_loads")


def test_legacy_format_resolves_through_old_names(corpus_dir: Path) -> None:
    path = corpus_dir / "jhiems__PMKID_Brute-Force__profile.nsight-cuprof-report"
    (launch,) = list(iter_launches(path))
    assert launch.provenance["duration_ns"] == "gpu__time_duration"
    assert launch.values["duration_ns"] == _raw(path, 0, "gpu__time_duration")
    assert launch.provenance["dram_bytes_read"] == "dram__read_bytes"
    assert launch.provenance["l2_hit_rate_pct"] == "lts__request_total_sectors_hitrate_pct"
    assert launch.provenance["ldg_sass_inst"] == "sass__inst_executed_global_loads"
    assert launch.values["global_ld_sass_inst"] == _raw(path, 0, "sass__inst_executed_global_loads")  # sm_61: LDG only
    assert launch.ncu_version is None  # legacy files do not store the writer's version
    assert launch.device.name == "GeForce GTX 1080"


def test_reports_without_sass_metrics_name_what_is_missing(corpus_dir: Path) -> None:
    # A default-set report: no SASS-patched counters, no L1 load counters.
    path = corpus_dir / "spymaster2h__spyinfer__report.ncu-rep"
    launches = list(iter_launches(path))
    assert len(launches) == 105
    for launch in launches:
        assert launch.values["global_ld_inst"] is None and launch.values["global_ld_sass_inst"] is None
        assert "global_ld_inst" in launch.missing and "global_ld_sass_inst" in launch.missing
        assert launch.values["duration_ns"] is not None and launch.values["duration_ns"] > 0


def test_reports_with_only_launch_attributes_become_rows_of_missing_fields(corpus_dir: Path) -> None:
    path = corpus_dir / "skycs97__darknet__profile.nsight-cuprof-report"
    launches = list(iter_launches(path))
    assert len(launches) == 7
    assert all(launch.values["duration_ns"] is None for launch in launches)
    assert all("duration_ns" in launch.missing for launch in launches)


def test_ncu_version_read_from_the_file(corpus_dir: Path) -> None:
    assert read_ncu_version(corpus_dir / "flyinglandlord__sglang__profile.ncu-rep") == "2023.3.0.0 (build 33266684)"
    assert read_ncu_version(corpus_dir / "Abhishek7204__raytracingCuda__profile.ncu-rep") == "2026.2.1.0 (build 38283040)"
    # The search runs from the end of the file; a plain scan from the start agrees on every report.
    import re

    pattern = re.compile(rb"(20\d\d\.\d+\.\d+(?:\.\d+)?) \(build (\d+)\)")
    found = 0
    for report in find_reports([corpus_dir]):
        match = pattern.search(report.read_bytes())
        expected = f"{match.group(1).decode()} (build {match.group(2).decode()})" if match else None
        assert read_ncu_version(report) == expected, report
        found += expected is not None
    assert found >= 30


def test_kernel_names_in_three_forms_and_nvtx(corpus_dir: Path) -> None:
    launch = next(iter_launches(corpus_dir / "flyinglandlord__sglang__profile.ncu-rep"))
    assert launch.kernel.function == "distribution_elementwise_grid_stride_kernel"
    assert launch.kernel.demangled.startswith("void at::native::")
    assert launch.kernel.mangled.startswith("_ZN")
    assert launch.device.compute_capability == "9.0"
    assert launch.device.sm_count == 132
    assert launch.values["passes"] == 42.0


def test_nvtx_ranges_are_read(corpus_dir: Path) -> None:
    launches = list(iter_launches(corpus_dir / "panjd123__cutlass__report.ncu-rep"))
    assert any(launch.nvtx for launch in launches), [launch.nvtx for launch in launches]


def test_ncu_report_is_looked_for_next_to_the_ncu_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ncuflow.read.reportfile import ncu_install_python_dirs

    install = tmp_path / "nsight-compute-2025.3.1"
    (install / "extras" / "python").mkdir(parents=True)
    (install / "extras" / "python" / "ncu_report.py").write_text("# the module ncu ships\n")
    (install / "ncu").write_text("#!/bin/sh\n")
    monkeypatch.setenv("NCU", str(install / "ncu"))
    assert ncu_install_python_dirs()[0] == install / "extras" / "python"
    monkeypatch.setenv("NCU", str(tmp_path / "elsewhere" / "ncu"))
    assert install / "extras" / "python" not in ncu_install_python_dirs()


def test_direct_swig_calls_read_exactly_what_the_public_methods_read(corpus_dir: Path) -> None:
    """Extraction calls ncu_report's SWIG functions directly (for speed): the launches of
    every corpus report must equal those read through the module's public methods, and
    the breakdown and NVIDIA's rule title must come out (not silently empty)."""
    from ncuflow.read.extract import build_launch, metric_calls
    from ncuflow.read.ncureport import NcuReportAction
    from ncuflow.read.reportfile import iter_actions, load_context

    swig, public = metric_calls(ncu_report), metric_calls(ncu_report, use_swig=False)
    assert swig.metric_by_name is not public.metric_by_name  # the fast path is really taken here
    compared = with_breakdown = with_rule = 0
    for report in find_reports([corpus_dir]):
        context = load_context(report)
        for range_index, action_index, action in iter_actions(report, context):
            fast, slow = (
                build_launch(NcuReportAction(action, ncu_report, calls), report=str(report),
                             range_index=range_index, action_index=action_index, ncu_version=None)
                for calls in (swig, public)
            )
            assert fast == slow
            compared += 1
            with_breakdown += bool(fast.breakdown)
            with_rule += fast.nvidia_sol is not None
    assert compared > 400 and with_breakdown > 200 and with_rule > 50, (compared, with_breakdown, with_rule)


def test_a_gpu_host_without_the_wheel_reads_through_the_module_ncu_ships(corpus_dir: Path, tmp_path: Path) -> None:
    """The GPU host has no ncu-report wheel and no polars: ncu_report comes from the ncu
    install's extras/python. Reading there must give the same launches as with the wheel
    (the value kinds come from whichever module was found), and never import polars."""
    import json
    import subprocess
    import sys

    install = tmp_path / "nsight-compute"
    (install / "extras" / "python").mkdir(parents=True)
    (install / "extras" / "python" / "ncu_report").symlink_to(Path(ncu_report.__file__).parent)
    (install / "ncu").write_text("#!/bin/sh\n")
    report = corpus_dir / "flyinglandlord__sglang__profile.ncu-rep"
    program = (
        "import json, sys\n"
        "from ncuflow.read.extract import read_launches\n"
        "from ncuflow.output.launch_rows import export_one_report\n"
        f"launches = read_launches({str(report)!r})\n"
        f"export_one_report(__import__('pathlib').Path({str(report)!r}), None, None, 0)\n"
        "print(json.dumps([sys.modules['ncu_report'].__file__, 'polars' in sys.modules,\n"
        "                  [[l.values, sorted(l.breakdown), l.nvidia_sol] for l in launches]]))\n"
    )
    repo = Path(__file__).resolve().parent.parent
    # -S: no site-packages, so neither the wheel nor polars can be imported
    done = subprocess.run([sys.executable, "-S", "-c", program], capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": str(repo), "NCU": str(install / "ncu"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    module_file, polars_imported, launches = json.loads(done.stdout)
    assert module_file.startswith(str(install)) and not polars_imported
    expected = [[launch.values, sorted(launch.breakdown), launch.nvidia_sol] for launch in iter_launches(report)]
    assert launches == expected and any(breakdown for _, breakdown, _ in launches)
