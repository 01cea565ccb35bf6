"""The fields read after the verdict (issue 22), on real reports: FLOPs and ceilings for the
roofline, L1/L2 traffic, occupancy and warp stalls; missing, never 0, where counters are absent."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from ncuflow.analyze.waiting import occupancy_of
from ncuflow.read.chains import CanonicalField, Source, resolve
from ncuflow.read.deep_metrics import ROOFLINE_METRICS, STALL_REASONS
from ncuflow.read.extract import iter_launches
from ncuflow.read.launch import Launch
from ncuflow.read.metrics import FIELDS_BY_NAME
from tests.corpus import full_set_reports

REFERENCE = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "h200"


def _launches(paths: list[Path]) -> list[Launch]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [x for p in paths for x in iter_launches(p)]


@pytest.fixture(scope="module")
def full_set(corpus_dir: Path) -> list[Launch]:
    return _launches(full_set_reports(corpus_dir))


def test_flop_fields_are_present_on_nine_in_ten_full_set_launches(full_set: list[Launch]) -> None:
    assert len(full_set) >= 50  # 16 reports, 60 launches on the corpus of 2026
    for name in ("flops_fp32", "peak_flops_fp32", "flops_fp64", "dram_bytes", "l2_bytes", "l1_bytes"):
        present = sum(x.value(name) is not None for x in full_set)
        assert present / len(full_set) >= 0.9, (name, present, len(full_set))
    # the one launch without them holds no counters at all (flash_fwd_kernel of the H800 report)
    bare = [x for x in full_set if x.value("flops_fp32") is None]
    assert all(x.value("duration_ns") is None and x.value("inst_executed") is None for x in bare)


def test_a_flop_field_is_missing_never_zero_without_its_counters(corpus_dir: Path) -> None:
    # a default-set report holds no FLOP counter; the H200 runs hold fadd and fmul but not ffma
    default_set = _launches([corpus_dir / "spymaster2h__spyinfer__report.ncu-rep"])
    reference = _launches(sorted(REFERENCE.glob("copy_bandwidth/*/*/report.ncu-rep"))[:2])
    for launch in (*default_set, *reference):
        assert launch.value("flops_fp32") is None and "flops_fp32" in launch.missing
        assert launch.value("peak_flops_fp32") is None
    assert reference and all(x.value("inst_executed") for x in reference)


def test_the_flop_count_is_the_rate_times_the_smsp_cycles(full_set: list[Launch]) -> None:
    """Both spellings ncu stores give the same count: rate × cycles = rate × cycles/s × duration."""
    field = FIELDS_BY_NAME["flops_fp32"]
    by_cycles, by_rate = field.sources[1], field.sources[2]
    checked = 0
    for path in {x.report for x in full_set}:
        import ncu_report

        from ncuflow.read.ncureport import NcuReportAction

        context = ncu_report.load_report(path)
        lookup = NcuReportAction(context.range_by_idx(0).action_by_idx(0), ncu_report).number
        a = [lookup(m) for m in by_cycles.metrics]
        b = [lookup(m) for m in by_rate.metrics]
        if None in a or None in b:
            continue
        assert by_cycles.combine(tuple(a)) == pytest.approx(by_rate.combine(tuple(b)), rel=1e-3)
        checked += 1
    assert checked >= 6


def test_fp32_peaks_are_the_chips_lanes_at_the_launch_clock(full_set: list[Launch]) -> None:
    """ffma peak per cycle × 2 × SM clock: 64 FP32 lanes per SM on GA100, 128 on GA10x/AD10x/GH100."""
    lanes = {"8.0": 64, "8.6": 128, "8.9": 128, "9.0": 128}
    checked = 0
    for launch in full_set:
        cc, peak = launch.device.compute_capability, launch.value("peak_flops_fp32")
        if cc in lanes and peak is not None and launch.device.sm_count:
            expected = launch.device.sm_count * lanes[cc] * 2 * (launch.value("sm_clock_hz") or 0)
            assert peak == pytest.approx(expected, rel=1e-6), launch.report
            checked += 1
    assert checked >= 40


def test_a_peak_from_bytes_and_pct_equals_the_peak_metric(corpus_dir: Path) -> None:
    """The A100 silu report holds both: the writeback peak metric and bytes / pct / duration agree."""
    import ncu_report

    from ncuflow.read.ncureport import NcuReportAction

    field = FIELDS_BY_NAME["l1_peak_bw"]
    context = ncu_report.load_report(str(corpus_dir / "AlpriElse__cs599k__silu_CUDA_ncu-reports_2025-04-21-77_06-MT.ncu-rep"))
    lookup = NcuReportAction(context.range_by_idx(0).action_by_idx(0), ncu_report).number
    direct, derived = field.sources[0], field.sources[2]
    values = [s.combine(tuple(lookup(m) or 0.0 for m in s.metrics)) for s in (direct, derived)]
    assert values[0] == pytest.approx(values[1], rel=0.005)
    assert values[0] == pytest.approx(108 * 128 * (lookup("l1tex__cycles_elapsed.avg.per_second") or 0), rel=1e-6)


def test_occupancy_and_stalls_are_read_from_full_sets(full_set: list[Launch]) -> None:
    counted = [x for x in full_set if x.value("inst_executed") is not None]
    agree = 0
    for launch in counted:
        assert launch.value("occupancy_theoretical_pct") is not None
        assert launch.value("occupancy_limit_registers") is not None
        stalls = [launch.value(f"stall_{r}") for r in STALL_REASONS]
        assert sum(v is not None for v in stalls) >= 15
        # the reasons add up to a warp's cycles between issues (ncu's own figure), within a few %
        cycles = launch.value("warp_cycles_per_issue") or 0.0
        agree += abs(sum(v or 0 for v in stalls) - cycles) <= 0.05 * cycles
    assert agree >= 0.9 * len(counted), (agree, len(counted))


def _field(*sources: Source) -> CanonicalField:
    return CanonicalField("x", "flop", sources, "")


def test_a_formula_source_weights_sums_and_divides() -> None:
    weighted = Source(("a", "b", "c", "d"), "formula", 1e-9, weights=(1.0, 1.0, 2.0), powers=(1.0,))
    values = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4e9}
    assert resolve(_field(weighted), values.get) == (pytest.approx(36.0), weighted.label())
    assert weighted.label() == "(a + b + 2 × c) × d × 1e-09"
    divided = Source(("bytes", "pct", "ns"), "formula", 1e11, weights=(1.0,), powers=(-1.0, -1.0))
    assert divided.label() == "bytes / pct / ns × 1e+11"
    assert resolve(_field(divided), {"bytes": 10.0, "pct": 0.0, "ns": 5.0}.get) == (None, None)  # 0 % of peak
    with pytest.raises(ValueError):
        Source(("a", "b"), "formula", weights=(1.0,))


def test_the_roofline_collection_names_every_flop_and_traffic_counter() -> None:
    for op in ("fadd", "fmul", "ffma", "dadd", "dmul", "dfma", "hadd", "hmul", "hfma"):
        assert f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum" in ROOFLINE_METRICS
    assert "l1tex__m_xbar2l1tex_read_bytes.sum" in ROOFLINE_METRICS and "dram__bytes.sum" in ROOFLINE_METRICS


def test_occupancy_names_a_limiter_only_where_theoretical_occupancy_is_below_every_warp(full_set: list[Launch]) -> None:
    """At 100 % theoretical occupancy the smallest block limit caps nothing: ncu says "not impacted by
    any block limit", where ncuflow said "limited by registers and the warp limit"."""
    seen = {True: 0, False: 0}
    for launch in full_set:
        occupancy = occupancy_of(launch)
        theoretical = launch.value("occupancy_theoretical_pct")
        if occupancy is None or theoretical is None or not occupancy.limiters:
            continue
        full = theoretical >= 100.0
        seen[full] += 1
        text = occupancy.text()
        assert ("limited by" in text) is not full, text
        assert ("not impacted by any block limit" in text) is full, text
    assert seen[True] and seen[False], seen  # both kinds are in the corpus
