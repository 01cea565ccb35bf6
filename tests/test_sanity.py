"""Values that cannot be (``ncuflow.read.sanity``): clamped or left missing with a note, never data."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from ncuflow.cli import cli
from ncuflow.read.extract import read_launches
from ncuflow.read.launch import DeviceInfo, KernelName, Launch
from ncuflow.read.metrics import FIELDS, resolve

JESTES = "jestes15__EE384_FinalProject__profile_output.ncu-rep"  # H100 PCIe, 18 launches of 3.8 µs to 2 ms
SGLANG = "flyinglandlord__sglang__profile.ncu-rep"  # H800: flash_fwd_kernel's counters stored as NaN


def _launch(raw: dict[str, float]) -> Launch:
    """A launch as extraction builds it from raw metric values (the alias chains of read.metrics)."""
    values, provenance, missing = {}, {}, []
    for field in FIELDS:
        value, source = resolve(field, raw.get)
        values[field.name] = value
        if source is None:
            missing.append(field.name)
        else:
            provenance[field.name] = source
    return Launch("r.ncu-rep", 0, 0, KernelName("k", "k", "k"), (), DeviceInfo("GPU", "9.0", 132), None,
                  values, provenance, tuple(missing))


def test_a_hit_rate_above_100_is_clamped_with_the_stored_value_in_a_note() -> None:
    launch = _launch({"lts__t_sector_hit_rate.pct": 100.43})
    assert launch.value("l2_hit_rate_pct") == 100.0
    assert "100.43" in launch.notes["l2_hit_rate_pct"] and "clamped to 100" in launch.notes["l2_hit_rate_pct"]
    assert _launch({"lts__t_sector_hit_rate.pct": 99.5}).notes == {}


def test_sectors_per_request_over_zero_requests_is_undefined_not_zero() -> None:
    """ncu's own average stores 0.0 for 0 sectors over 0 requests; the ratio is undefined."""
    launch = _launch({"l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": 0.0,
                      "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 0.0,
                      "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio": 0.0})
    assert launch.value("sectors_per_request") is None and "sectors_per_request" in launch.missing
    assert "undefined" in launch.notes["sectors_per_request"] and "sectors_per_request" not in launch.provenance


def test_zero_request_launches_of_a_real_report_say_why_sectors_per_request_is_missing(corpus_dir: Path) -> None:
    launches = read_launches(corpus_dir / JESTES)
    zero = [x for x in launches if x.value("global_ld_requests") == 0]
    assert len(zero) == 9
    assert all(x.value("sectors_per_request") is None and "undefined" in x.notes["sectors_per_request"] for x in zero)


def test_a_count_that_is_not_a_whole_number_is_missing() -> None:
    launch = _launch({"smsp__inst_executed.sum": 12.5, "dram__bytes_read.sum": -32.0})
    assert launch.value("inst_executed") is None and "not a whole number" in launch.notes["inst_executed"]
    assert launch.value("dram_bytes_read") is None


def test_the_peak_dram_bandwidth_of_one_hbm_gpu_is_one_number(corpus_dir: Path) -> None:
    """From the DRAM clock measured over each launch, one H100 PCIe's peak ran 2.04–2.27 TB/s
    (above its rated 2.04 on the 4 µs kernels); HBM has one memory clock: 1280 B × 1.593 GHz."""
    launches = read_launches(corpus_dir / JESTES)
    assert {x.value("dram_peak_bw") for x in launches} == {1280 * 1_593_000 * 1000.0}
    assert all("HBM" in x.provenance["dram_peak_bw"] for x in launches)
    short = min(launches, key=lambda x: x.value("duration_ns") or 0)
    assert short.value("duration_ns") == pytest.approx(3840.0)


def test_a_gddr_peak_measured_above_its_rating_is_the_rating(corpus_dir: Path) -> None:
    launches = read_launches(corpus_dir / "AveryClapp__ESMM-Research__profile_output.ncu-rep")
    capped = [x for x in launches if "dram_peak_bw" in x.notes]
    assert [x.action_index for x in capped] == [2]
    assert capped[0].value("dram_peak_bw") == capped[0].value("dram_rated_bw") == pytest.approx(600.096e9)
    assert "603.476 GB/s" in capped[0].notes["dram_peak_bw"]
    assert all(x.value("dram_peak_bw") <= x.value("dram_rated_bw") for x in launches)  # type: ignore[operator]


def test_counters_ncu_stored_as_nan_are_said_to_be_nan(corpus_dir: Path) -> None:
    """flash_fwd_kernel's counters are NaN in the report: it read as 'no source metric'."""
    launch = read_launches(corpus_dir / SGLANG)[4]
    assert launch.kernel.function == "flash_fwd_kernel" and launch.value("duration_ns") is None
    assert "gpu__time_duration.sum" in launch.not_numbers
    assert launch.notes["duration_ns"] == "ncu stored gpu__time_duration.sum as NaN: not measured"
    result = CliRunner().invoke(cli, ["classify", str(corpus_dir / SGLANG), "--evidence"])
    assert result.exit_code == 0, result.output
    # every decisive counter and the roofline/occupancy/stall ones: 95 stored as NaN, 59 fields unmeasured
    assert "#4 flash_fwd_kernel: ncu stored 95 of its counters as NaN, so 59 fields are not measured" in result.output
    assert "duration_ns (ncu stored gpu__time_duration.sum as NaN: not measured)" in result.output
    json_rows = CliRunner().invoke(cli, ["classify", str(corpus_dir / SGLANG), "--json"])
    import json

    assert "as NaN" in json.loads(json_rows.output)[4]["notes"]["inst_executed"]


def test_count_columns_are_integers_in_the_export(corpus_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "l.parquet"
    result = CliRunner().invoke(cli, ["export", str(corpus_dir / JESTES), "-o", str(out)])
    assert result.exit_code == 0, result.output
    frame = pl.read_parquet(out)
    for name in ("inst_executed", "global_ld_sectors", "dram_bytes", "grid_size", "passes", "sm_count"):
        assert frame.schema[name] == pl.Int64, name
    for name in ("duration_ns", "l2_hit_rate_pct", "dram_peak_bw", "sectors_per_request"):
        assert frame.schema[name] == pl.Float64, name
    assert frame["inst_executed"].to_list()[0] == 13832
    assert any("undefined" in note for note in frame["notes"].explode().drop_nulls().to_list())


@pytest.mark.parametrize(("metric", "field", "stored", "kept"), [
    ("gpu__time_duration.sum", "duration_ns", 0.0, False),
    ("gpu__time_duration.sum", "duration_ns", -1e6, False),
    ("gpu__time_duration.sum", "duration_ns", 1e308, False),
    ("gpu__time_duration.sum", "duration_ns", 3_800.0, True),
    ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram_throughput_pct", -1e6, False),
    ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram_throughput_pct", 250.0, False),
    ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram_throughput_pct", 104.0, True),
    ("lts__t_sector_hit_rate.pct", "l2_hit_rate_pct", -1e6, False),
])
def test_a_value_outside_its_kinds_range_is_missing_with_the_stored_value_in_a_note(
        metric: str, field: str, stored: float, kept: bool) -> None:
    launch = _launch({metric: stored})
    if kept:
        assert launch.value(field) == stored and field not in launch.notes
    else:
        assert launch.value(field) is None and field in launch.missing and field not in launch.provenance
        assert f"stored as {stored:,.6g}" in launch.notes[field] and "no measurement" in launch.notes[field]


def test_breakdown_units_outside_the_percent_range_leave_the_model_with_one_note() -> None:
    launch = _launch({})
    crafted = replace(launch, breakdown={"dram__cycles_active.avg.pct_of_peak_sustained_elapsed": -1e6,
                                         "lts__t_sectors.avg.pct_of_peak_sustained_elapsed": 40.0})
    assert list(crafted.breakdown) == ["lts__t_sectors.avg.pct_of_peak_sustained_elapsed"]
    assert "1 unit stored outside" in crafted.notes["breakdown"] and "-1e+06" in crafted.notes["breakdown"]
