"""Finding ncu, building its command line, and reading its log (no GPU, no real ncu)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ncuflow.errors import UsageError
from ncuflow.profile import ncu as ncu_mod
from ncuflow.profile.ncu import (
    NcuOptions,
    build_command,
    find_ncu,
    ncu_version,
    nvtx_include_for_range,
    parse_version_output,
)
from ncuflow.profile.ncu_errors import (
    ApplicationFailed,
    CounterPermissionDenied,
    DriverMismatch,
    MetricNotFound,
    NcuFailed,
    NcuNotFound,
    NoKernelsProfiled,
    error_from_log,
    parse_log,
)
from ncuflow.read.metrics import decisive_metric_names

FAKE_NCU = Path(__file__).parent / "fake_ncu" / "ncu"
APP = ["python3", "-m", "ncuflow.cells.cellrun", "flat_decode:batch=32", "--representation-out", "/r/x.json"]


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# ----------------------------------------------------------------------------- finding


def test_find_order_option_env_path_opt_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opt_old = _exe(tmp_path / "opt" / "2024.3.2" / "ncu")
    opt_new = _exe(tmp_path / "opt" / "2025.10.1" / "ncu")
    cuda = _exe(tmp_path / "cuda" / "bin" / "ncu")
    on_path = _exe(tmp_path / "bin" / "ncu")
    by_env = _exe(tmp_path / "env" / "ncu")
    explicit = _exe(tmp_path / "explicit" / "ncu")
    monkeypatch.setattr(ncu_mod, "OPT_NCU_GLOB", str(tmp_path / "opt" / "*" / "ncu"))
    monkeypatch.setattr(ncu_mod, "FIXED_NCU_LOCATIONS", (str(cuda),))
    env = {"PATH": str(tmp_path / "bin"), "NCU": str(by_env)}
    assert find_ncu(explicit, env) == (explicit, "--ncu")
    assert find_ncu(None, env) == (by_env, "NCU")
    assert find_ncu(None, {"PATH": str(tmp_path / "bin")}) == (on_path, "PATH")
    # newest /opt version first (numeric, not lexical: 2025.10 > 2024.3)
    assert find_ncu(None, {"PATH": ""}) == (opt_new, "/opt/nvidia/nsight-compute")
    opt_new.unlink()
    assert find_ncu(None, {"PATH": ""})[0] == opt_old
    opt_old.unlink()
    assert find_ncu(None, {"PATH": ""}) == (cuda, "/usr/local/cuda")
    cuda.unlink()
    with pytest.raises(NcuNotFound) as info:
        find_ncu(None, {"PATH": ""})
    text = str(info.value)
    assert "NCU" in text and "PATH" in text and "--ncu" in text
    assert "Traceback" not in text


def test_explicit_ncu_that_is_not_executable_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "ncu"
    with pytest.raises(NcuNotFound, match="not an executable"):
        find_ncu(missing, {"PATH": ""})
    with pytest.raises(NcuNotFound, match="NCU"):
        find_ncu(None, {"PATH": "", "NCU": str(missing)})


def test_version_from_fake_and_real_text() -> None:
    assert ncu_version(FAKE_NCU) == "2025.3.1.0"
    real = ("NVIDIA (R) Nsight Compute Command Line Profiler\n"
            "Copyright (c) 2018-2024 NVIDIA Corporation\n"
            "Version 2024.3.2.0 (build 34861637) (public-release)\n")
    assert parse_version_output(real) == "2024.3.2.0"
    assert parse_version_output("garbage") is None
    assert ncu_version(Path("/nonexistent/ncu")) is None


# ----------------------------------------------------------------------------- options and command


def _value(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_default_command_is_decisive_kernel_replay(tmp_path: Path) -> None:
    cmd = build_command("/x/ncu", NcuOptions(nvtx_include=("ncuflow:flat_decode/",)),
                        tmp_path / "report.ncu-rep", APP)
    assert cmd[0] == "/x/ncu"
    assert _value(cmd, "--target-processes") == "all"
    assert _value(cmd, "--replay-mode") == "kernel"
    assert _value(cmd, "--cache-control") == "all"
    assert _value(cmd, "--clock-control") == "base"
    assert "--nvtx" in cmd and _value(cmd, "--nvtx-include") == "ncuflow:flat_decode/"
    assert _value(cmd, "--metrics").split(",") == list(decisive_metric_names())
    assert "--set" not in cmd and "--section" not in cmd
    assert _value(cmd, "--export") == str(tmp_path / "report.ncu-rep")
    assert "--force-overwrite" in cmd
    assert cmd[-len(APP):] == APP
    assert "--launch-count" not in cmd and "--kernel-name" not in cmd


@pytest.mark.parametrize("replay", ["kernel", "application", "range", "app-range"])
@pytest.mark.parametrize("cache", ["all", "none"])
@pytest.mark.parametrize("clock", ["base", "none"])
def test_replay_cache_clock_combinations(replay: str, cache: str, clock: str) -> None:
    opts = NcuOptions(replay_mode=replay, cache_control=cache, clock_control=clock)
    cmd = build_command("ncu", opts, "r.ncu-rep", ["./app"])
    assert (_value(cmd, "--replay-mode"), _value(cmd, "--cache-control"),
            _value(cmd, "--clock-control")) == (replay, cache, clock)


def test_sets_sections_metrics_filters() -> None:
    full = build_command("ncu", NcuOptions(metric_set="full"), "r", ["./a"])
    assert _value(full, "--set") == "full" and "--metrics" not in full
    sections = build_command(
        "ncu", NcuOptions(metric_set="none", sections=("SpeedOfLight", "MemoryWorkloadAnalysis")),
        "r", ["./a"])
    assert "--set" not in sections and "--metrics" not in sections
    assert [sections[i + 1] for i, a in enumerate(sections) if a == "--section"] == [
        "SpeedOfLight", "MemoryWorkloadAnalysis"]
    extra = build_command("ncu", NcuOptions(metric_set="basic", extra_metrics=("a__b.sum",)), "r", ["./a"])
    assert _value(extra, "--set") == "basic" and _value(extra, "--metrics") == "a__b.sum"
    filt = build_command("ncu", NcuOptions(kernel_regex="gemm.*", launch_count=3, launch_skip=2),
                         "r", ["./a"])
    assert _value(filt, "--kernel-name") == "regex:gemm.*"
    assert _value(filt, "--launch-count") == "3" and _value(filt, "--launch-skip") == "2"
    assert "--nvtx" not in filt
    two = build_command("ncu", NcuOptions(nvtx_include=("a/", "b/")), "r", ["./a"])
    assert two.count("--nvtx") == 1 and two.count("--nvtx-include") == 2


def test_arguments_are_passed_verbatim_never_through_a_shell() -> None:
    app = ["./my app", "--name=$(rm -rf /)", "a;b", "'quoted'"]
    cmd = build_command("ncu", NcuOptions(), "r", app)
    assert cmd[-4:] == app


@pytest.mark.parametrize("kwargs", [
    {"replay_mode": "bogus"}, {"cache_control": "some"}, {"clock_control": "max"},
    {"metric_set": "everything"}, {"launch_count": 0}, {"launch_skip": -1},
    {"metric_set": "none"}, {"sections": ("",)}, {"target_processes": "some"},
])
def test_invalid_options_are_usage_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        NcuOptions(**kwargs)  # type: ignore[arg-type]


def test_no_program_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        build_command("ncu", NcuOptions(), "r", [])


def test_nvtx_expression() -> None:
    assert nvtx_include_for_range("ncuflow:paged_decode") == "ncuflow:paged_decode/"
    # '/' is ncu's nesting delimiter: the name is read as range paged_decode inside ncuflow
    assert nvtx_include_for_range("ncuflow/paged_decode") == "ncuflow/paged_decode/"
    assert nvtx_include_for_range("x/") == "x/"
    with pytest.raises(UsageError):
        nvtx_include_for_range("dom@range")
    with pytest.raises(UsageError):
        nvtx_include_for_range("  ")


def test_the_collection_label_is_for_people_the_options_are_the_record() -> None:
    assert NcuOptions().label() == "decisive"
    assert NcuOptions(metric_set="full", sections=("A",), exclude_metrics=("x__y.sum",)).label() == (
        "full; sections: A; -metrics: x__y.sum")


@pytest.mark.parametrize("field", ["sections", "extra_metrics", "nvtx_include", "exclude_metrics"])
def test_a_value_that_would_reach_ncu_as_an_option_of_its_own_is_refused(field: str) -> None:
    """A sweep file's `nvtx = "--export=/x"` must never become ncu's --export."""
    with pytest.raises(UsageError, match="starts with '-'"):
        NcuOptions(**{field: ("--export=/x",)})  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the log

PERM = ("==PROF== Connected to process 5183 (/usr/bin/python3.12)\n"
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
        "Performance Counters on the target device 0. For instructions on enabling permissions "
        "and to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM\n"
        "==PROF== Disconnected from process 5183\n"
        "==ERROR== The application returned an error code (1).\n")
NOKERNELS = ("==PROF== Connected to process 1 (/bin/app)\n==PROF== Disconnected from process 1\n"
             "==WARNING== No kernels were profiled.\n"
             "==WARNING== Profiling kernels launched by child processes requires the --target-processes all option.\n")
BADMETRIC = ("==PROF== Connected to process 20101 (/usr/bin/python3.10)\n"
             "==ERROR== Failed to find metric regex:^sm__active_cycles_sum(\\.(sum|min|max|avg|pct|ratio|max_rate))?$\n")
APPFAIL = ("==PROF== Connected to process 9 (/usr/bin/python3)\n"
           "AttributeError: module 'torch' has no attribute 'float8_e8m0fnu'\n"
           "==PROF== Disconnected from process 9\n"
           "==ERROR== The application returned an error code (1).\n"
           "==WARNING== No kernels were profiled.\n")
DRIVER = ("==ERROR== Nsight Compute failed to connect to the CUDA driver (stub libcuda.so[.1] on path?).\n"
          "==ERROR== The application returned an error code (1).\n")
DRIVER2 = ("==ERROR== An error was reported by the counter measurement library:\n"
           "==ERROR== Failed to initialize the profiler: LibraryNotLoaded. Check that a compatible "
           "driver library is loaded.\n==PROF== Trying to shutdown target application\n"
           "==ERROR== The application returned an error code (9).\n")
OK = ("==PROF== Connected to process 7 (/usr/bin/python3)\n"
      '==PROF== Profiling "copy_kernel" - 0: 0%....50%....100% - 9 passes\n'
      '==PROF== Profiling "copy_kernel" - 1: 0%....50%....100% - 9 passes\n'
      "==PROF== Disconnected from process 7\n==PROF== Report: /tmp/r.ncu-rep\n")
CRASH = ('==PROF== Profiling "volta_h884gemm" - 18: 0%....50%.... - 19 passes\n'
         '==ERROR== Failed to profile "volta_h884gemm" in process 24701\n'
         "==PROF== Trying to shutdown target application\n"
         "==ERROR== An error occurred while trying to profile.\n")


def test_parse_log_counts_and_flags() -> None:
    found = parse_log(OK)
    assert found.profiled_kernels == 2 and not found.errors and found.report_line
    assert parse_log(PERM).permission_denied
    assert parse_log(NOKERNELS).no_kernels
    assert parse_log(BADMETRIC).failed_metrics == ("sm__active_cycles_sum",)
    assert parse_log(APPFAIL).app_exit_code == 1
    plain = parse_log("==ERROR== Failed to find metric dram__foo.sum\n")
    assert plain.failed_metrics == ("dram__foo.sum",)


@pytest.mark.parametrize(("text", "code", "kind"), [
    (PERM, 1, CounterPermissionDenied),
    (NOKERNELS, 0, NoKernelsProfiled),
    (BADMETRIC, 1, MetricNotFound),
    (APPFAIL, 1, ApplicationFailed),
    (DRIVER, 1, DriverMismatch),
    (DRIVER2, 9, DriverMismatch),
    (CRASH, 1, NcuFailed),
    ("", -11, NcuFailed),
])
def test_each_failure_becomes_its_typed_error(text: str, code: int, kind: type) -> None:
    error = error_from_log(text, code, filters="NVTX 'x/'", ncu_version="2025.3.1.0",
                           log_path=Path("/s/ncu.log"))
    assert type(error) is kind
    message = str(error)
    assert "\n" not in message and "Traceback" not in message
    assert "/s/ncu.log" in message
    assert error is not None and error.what and error.why and error.fix


def test_specific_messages_name_the_detail() -> None:
    metric = error_from_log(BADMETRIC, 1, filters="", ncu_version="2025.3.1.0")
    assert "sm__active_cycles_sum" in str(metric)
    app = error_from_log(APPFAIL, 1, filters="")
    assert "float8_e8m0fnu" in str(app) and "code 1" in str(app)
    crash = error_from_log("", -6, filters="")
    assert "signal 6" in str(crash)
    none = error_from_log(NOKERNELS, 0, filters="NVTX 'ncuflow:x/'")
    assert "ncuflow:x/" in str(none) and "nested" not in str(none)
    nested = error_from_log(NOKERNELS, 0, filters="NVTX 'ncuflow/x/'")
    assert "one range nested in another" in str(nested)


def test_success_is_no_error() -> None:
    assert error_from_log(OK, 0, filters="") is None
    # exit 0 but an ==ERROR== line is not success
    assert isinstance(error_from_log(OK + "==ERROR== something\n", 0, filters=""), NcuFailed)


def test_app_output_mentioning_driver_is_not_a_driver_error() -> None:
    text = OK.replace("==PROF== Disconnected", "note: driver not supported on this OS, fine\n==PROF== Disconnected")
    assert error_from_log(text, 0, filters="") is None


def test_fake_ncu_is_executable() -> None:
    assert os.access(FAKE_NCU, os.X_OK)
    assert FAKE_NCU.read_text().startswith("#!/usr/bin/env python3")


def test_an_unknown_breakdown_request_is_named_with_its_prefix() -> None:
    """ncu's `breakdown:` syntax (the GPU study asks for lts__throughput's units so): the name
    ncu refused is the whole request, not the word before the colon."""
    from ncuflow.profile.ncu_errors import parse_log

    line = ("==ERROR== Failed to find metric regex:^breakdown:lts__throughput\\.avg\\.pct_of_peak_sustained_elapsed"
            "(\\.(sum|min|max|avg|pct|ratio|max_rate))?$")
    assert parse_log(line).failed_metrics == ("breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed",)
