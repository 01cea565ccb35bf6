"""Explain on real data: launches of corpus reports with known counter differences, and
stores built from corpus reports (one kernel per run, chosen with the run's kernel filter)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.analyze.change import compare_field
from ncuflow.analyze.explain import (
    choose_baseline,
    explain_group,
    explain_value,
    headline_points,
    vary_groups,
)
from ncuflow.analyze.point import Point
from ncuflow.cli import cli
from ncuflow.read.extract import iter_launches
from ncuflow.read.launch import Launch

JESTES = "jestes15__EE384_FinalProject__profile_output.ncu-rep"  # H100 PCIe, full set
SILU = "AlpriElse__cs599k__silu_CUDA_ncu-reports_2025-04-21-77_06-MT.ncu-rep"  # A100, 3 launches
RMS = "AlpriElse__cs599k__rms_norm_matrix_ncu-reports_2025-04-21_v1.ncu-rep"  # H100 PCIe, 3 launches
LASHI = "Lashi0812__CudaProgramming__profiling_profiles_smemTranspose.ncu-rep"  # RTX 4090, 5 kernels once each
SPY = "spymaster2h__spyinfer__report.ncu-rep"  # A10, 105 launches, durations only


def content_key(cell: str, params: dict) -> str:
    return hashlib.sha256(json.dumps({"cell": cell, "params": params}, sort_keys=True).encode()).hexdigest()


def point(value: object, launches: list[Launch], param: str = "p") -> Point:
    return Point("cell", ((param, value),), launches[0].kernel.function, tuple(launches))


@pytest.fixture(scope="module")
def jestes(corpus_dir: Path) -> dict[str, list[Launch]]:
    launches = list(iter_launches(corpus_dir / JESTES))
    return {
        # thrust fill (13,832 instructions, ~3.9 µs) and thrust transform (19,365) share the name
        "fill": [x for x in launches if "uninitialized_fill" in x.kernel.demangled],
        "transform": [x for x in launches if "__transform" in x.kernel.demangled],
        "init": [x for x in launches if x.kernel.function == "DeviceScanInitKernel"],
        "scan": [x for x in launches if x.kernel.function == "DeviceScanKernel"],
    }


# ----------------------------------------------------------------------------- the field rule


def test_field_rule_with_and_without_replicas() -> None:
    # known noise, ranges apart, beyond tolerance -> changed (durations in ns: 100 µs)
    assert compare_field("duration_ns", [100_000, 101_000], [110_000, 111_000]).state == "changed"
    # known noise, inside the band -> unchanged
    assert compare_field("duration_ns", [100_000, 101_000], [100_500, 101_500]).state == "unchanged"
    # replicas disagree beyond 10 % (5 x 2 %) and overlap -> ambiguous
    assert compare_field("duration_ns", [100_000, 120_000], [101_000, 119_000]).state == "ambiguous"
    # one side measured once: 1.4 % of duration is not decidable, 12 % is
    assert compare_field("duration_ns", [100_000], [101_400]).state == "ambiguous"
    assert compare_field("duration_ns", [100_000], [112_000]).state == "changed"
    # a 6 µs kernel: 176 ns (3 %) apart is inside the 320 ns floor of the duration's noise
    # band (launch jitter, the field table), 400 ns (6.8 %) is a change
    assert compare_field("duration_ns", [5_824, 5_888], [6_016, 6_048]).state == "unchanged"
    assert compare_field("duration_ns", [5_824, 5_888], [6_240, 6_272]).state == "changed"
    # identical integer counts are unchanged even without replicas
    assert compare_field("inst_executed", [750], [750]).state == "unchanged"
    assert compare_field("inst_executed", [750], [751]).state == "ambiguous"
    assert compare_field("inst_executed", [], [751]).state == "missing"


# ----------------------------------------------------------------------------- real launches


def test_more_instructions_and_longer_time_is_the_critical_path(jestes: dict[str, list[Launch]]) -> None:
    row = explain_value("p", point("fill", jestes["fill"]), point("transform", jestes["transform"]))
    assert (row.work, row.time, row.verdict) == ("yes", "yes", "critical_path")
    assert row.field("inst_executed").ratio == pytest.approx(19365 / 13832)
    assert "inst_executed +40.0 %" in row.deltas and "duration +33.9 %" in row.deltas
    assert row.value_model.bound == "latency"


def test_work_at_the_launch_latency_floor_is_off_the_critical_path(jestes: dict[str, list[Launch]]) -> None:
    """DeviceScanInitKernel runs 72 instructions, the thrust fill 13,832: both take ~3.9 µs."""
    row = explain_value("p", point("init", jestes["init"]), point("fill", jestes["fill"]))
    assert row.verdict == "off_critical_path"
    assert row.field("inst_executed").state == "changed"
    assert row.field("duration_ns").state == "unchanged"
    assert "inst_executed ×192" in row.deltas and "binding: latency" in row.deltas


def test_same_work_same_time_does_not_reach_the_kernel(corpus_dir: Path) -> None:
    launches = list(iter_launches(corpus_dir / SILU))
    row = explain_value("p", point("off", launches), point("on", launches))
    assert (row.work, row.time, row.verdict) == ("no", "no", "no_effect")
    # inst_issued differs between replays (noise 0.0009 %), yet stays inside its band
    assert row.field("inst_issued").state == "unchanged"
    assert row.verdict_text == "the parameter does not reach the kernel"


def test_time_moved_without_counted_work(corpus_dir: Path) -> None:
    """The silu launches with their counters untouched and the duration moved by +8 %: the
    counters stay real; only the duration is changed, to exercise the fourth verdict."""
    launches = list(iter_launches(corpus_dir / SILU))
    slower = [
        dataclasses.replace(x, values={**x.values, "duration_ns": (x.values["duration_ns"] or 0) * 1.08})
        for x in launches
    ]
    row = explain_value("p", point("a", launches), point("b", slower))
    assert (row.work, row.time, row.verdict) == ("no", "yes", "time_without_work")
    assert any("SM clock" in reason for reason in row.reasons)


def test_single_launches_stay_ambiguous_unless_far_outside(corpus_dir: Path) -> None:
    kernels = {x.kernel.function: x for x in iter_launches(corpus_dir / LASHI)}
    near = explain_value("p", point("pad", [kernels["transposeSmemPad"]]), point("unroll", [kernels["transposeSmemUnrollPad"]]))
    assert near.verdict == "ambiguous" and near.lean == "off_critical_path"
    assert near.work == "yes" and near.time == "unknown"
    assert any("unknown noise" in r for r in near.reasons)
    far = explain_value("p", point("copy", [kernels["copyGmem"]]), point("naive", [kernels["naiveGmem"]]))
    assert far.verdict == "critical_path" and "duration +313.1 %" in far.deltas


def test_no_counters_or_different_gpus_are_ambiguous(corpus_dir: Path) -> None:
    spy = list(iter_launches(corpus_dir / SPY))
    row = explain_value("p", point("first", spy[:50]), point("second", spy[50:]))
    assert row.verdict == "ambiguous" and row.work == "unknown"
    assert any("no work counter" in r for r in row.reasons)
    silu, rms = list(iter_launches(corpus_dir / SILU)), list(iter_launches(corpus_dir / RMS))
    crossed = explain_value("p", point("a100", silu), point("h100", rms))
    assert crossed.verdict == "ambiguous"
    assert "different GPUs" in crossed.reasons[0]


# ----------------------------------------------------------------------------- stores


def build_store(root: Path, corpus_dir: Path) -> Path:
    """Three cells from real reports: scan (stage sweep), silu (a flag the kernel never sees),
    transpose (implementation sweep, one launch per run)."""
    from ncuflow.cells.contract import CellSpec
    from ncuflow.store import write_run
    from ncuflow.store.collection import NcuOptions
    from ncuflow.store.manifest import Collection

    def add(cell: str, params: dict, report: str, kernel: str | None = None, regex: str | None = None) -> None:
        write_run(root, CellSpec.of(cell, params), corpus_dir / report, content_key=content_key(cell, params),
                  collection=Collection(NcuOptions(kernel_regex=regex), kernel_name=kernel))

    add("scan", {"stage": "init", "n": 1}, JESTES, "DeviceScanInitKernel")
    add("scan", {"stage": "fill", "n": 1}, JESTES, regex="uninitialized_fill")
    add("scan", {"stage": "scan", "n": 1}, JESTES, "DeviceScanKernel")
    add("silu", {"flag": "off"}, SILU)
    add("silu", {"flag": "on"}, SILU)
    for value, kernel in [("copy", "copyGmem"), ("naive", "naiveGmem"), ("smem", "transposeSmem"),
                          ("smem_pad", "transposeSmemPad")]:
        add("transpose", {"impl": value}, LASHI, kernel)
    return root


@pytest.fixture(scope="module")
def store(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("store"), corpus_dir)


def test_store_groups_baselines_and_headline(store: Path) -> None:
    from ncuflow.analyze.study import points_of
    from ncuflow.read.runs import load_paths

    points = points_of(load_paths([store]))
    groups = vary_groups(points, "stage")
    assert len(groups) == 1 and groups[0].values == ("fill", "init", "scan")
    assert choose_baseline(groups[0]).param("stage") == "fill"
    explained = explain_group(groups[0], baseline="init")
    verdicts = {row.value: row.verdict for row in explained.rows}
    assert verdicts == {"fill": "off_critical_path", "scan": "critical_path"}
    heads = headline_points([explained])
    assert sorted(str(p.param("stage")) for p in heads) == ["fill", "init", "scan"]


def test_cli_explain_on_stores(store: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["explain", str(store), "--vary", "stage", "--baseline", "init",
                                 "--markdown", str(tmp_path / "e.md"), "--parquet", str(tmp_path / "e.parquet")])
    assert result.exit_code == 0, result.output
    assert "work changes off the critical path" in result.output
    assert "work reaches the critical path" in result.output
    flag = runner.invoke(cli, ["explain", str(store), "--vary", "flag"])
    assert "the parameter does not reach the kernel" in flag.output
    impl = runner.invoke(cli, ["explain", str(store), "--vary", "impl", "--baseline", "smem"])
    assert "ambiguous (leans: work changes off the critical path)" in impl.output
    import polars as pl

    frame = pl.read_parquet(tmp_path / "e.parquet")
    assert sorted(frame["verdict"].to_list()) == ["critical_path", "off_critical_path"]
    assert "| fill | work changes off the critical path |" in (tmp_path / "e.md").read_text()


def test_cli_explain_names_the_parameters_when_the_one_asked_is_absent(store: Path) -> None:
    result = CliRunner().invoke(cli, ["explain", str(store), "--vary", "page"])
    assert result.exit_code != 0
    message = str(result.exception)
    assert "No runs differ only in 'page'" in message and "flag, impl, stage" in message


def test_time_and_work_moved_but_not_in_the_binding_term_is_ambiguous(corpus_dir: Path) -> None:
    """silu is DRAM-bound (u_dram 0.77): more instructions with the same bytes cannot explain a
    slower kernel, so the verdict stays open. The real launches with only the instruction counts
    and the duration moved."""
    launches = list(iter_launches(corpus_dir / SILU))
    moved = [
        dataclasses.replace(x, values={**x.values, "inst_executed": round((x.values["inst_executed"] or 0) * 1.3),
                                       "inst_issued": round((x.values["inst_issued"] or 0) * 1.3),
                                       "duration_ns": (x.values["duration_ns"] or 0) * 1.1})
        for x in launches
    ]
    row = explain_value("p", point("a", launches), point("b", moved))
    assert (row.work, row.time) == ("yes", "yes")
    assert row.verdict == "ambiguous" and row.lean == "critical_path"
    assert any("feeds the binding term (dram" in reason for reason in row.reasons)
