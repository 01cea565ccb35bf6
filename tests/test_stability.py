"""Replay stability on real reports: repeated launches inside corpus reports, stores, the CLI."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from ncuflow.analyze.stability import (
    DEFAULT_TOLERANCES,
    Tolerances,
    field_stability,
    relative_spread,
    repeated_launch_stability,
    stability_of,
)
from ncuflow.analyze.stability_table import stability_frame
from ncuflow.cells.contract import CellSpec
from ncuflow.cli import cli
from ncuflow.errors import UsageError
from ncuflow.read.extract import iter_launches

SPY = "spymaster2h__spyinfer__report.ncu-rep"  # 105 launches of one kernel, default set (A10)
SKEL = "SkeletonSkelettron__Yanni__prof.ncu-rep"  # 31 launches, 3 kernels, instructions only
SILU = "AlpriElse__cs599k__silu_CUDA_ncu-reports_2025-04-21-77_06-MT.ncu-rep"  # 3 launches, full set
JESTES = "jestes15__EE384_FinalProject__profile_output.ncu-rep"  # 18 launches, 6 kernels, full set
BWD = "bwd29__self-join-MiSTIC__profile.ncu-rep"  # 154 launches, 5 kernels
CONV = "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep"  # 4 launches of one conv2d, full set (A100)


def _launches(corpus_dir: Path, name: str) -> list:
    return list(iter_launches(corpus_dir / name))


# ----------------------------------------------------------------------------- pure rules


def test_relative_spread_rules() -> None:
    assert relative_spread([5.0]) is None
    assert relative_spread([3.0, 3.0, 3.0]) == 0.0
    assert relative_spread([0.0, 0.0, 256.0]) == math.inf  # zero median, values differ
    assert relative_spread([100.0, 102.0, 101.0]) == pytest.approx(2.0 / 101.0)


def test_exact_counters_must_be_identical_and_bytes_have_a_band() -> None:
    assert field_stability("inst_executed", [750.0, 750.0], DEFAULT_TOLERANCES).verdict == "stable"
    assert field_stability("inst_executed", [750.0, 751.0], DEFAULT_TOLERANCES).verdict == "unstable"
    assert field_stability("dram_bytes", [1e6, 1.001e6], DEFAULT_TOLERANCES).verdict == "stable"  # 0.1 %
    assert field_stability("dram_bytes", [1e7, 1.003e7], DEFAULT_TOLERANCES).verdict == "unstable"  # 0.3 %
    # an absolute floor for bytes: a 32-thread kernel reads 256 B in one replay and 512 B in the next
    assert field_stability("dram_bytes", [256.0, 512.0], DEFAULT_TOLERANCES).verdict == "stable"
    assert field_stability("dram_bytes", [1e6, 1.003e6], DEFAULT_TOLERANCES).verdict == "stable"  # 3 kB < 4 KiB
    # sectors are near-exact, like the sectors per request they make: a spread of 4e-8 is stable
    sectors = [4_850_000_000.0, 4_850_000_207.0]
    assert field_stability("global_ld_sectors", sectors, DEFAULT_TOLERANCES).verdict == "stable"
    assert field_stability("sectors_per_request", [8.0, 8.0 * (1 + 4e-8)], DEFAULT_TOLERANCES).verdict == "stable"
    assert field_stability("duration_ns", [], DEFAULT_TOLERANCES).verdict == "missing"
    assert field_stability("duration_ns", [1.0], DEFAULT_TOLERANCES).verdict == "insufficient"


def test_tolerances_describe_and_reject_unknown_fields() -> None:
    text = Tolerances().describe()
    assert "exact work counters identical" in text and "bytes ≤ 0.20 %" in text and "time ≤ 2.00 %" in text
    with pytest.raises(UsageError, match="no_such_field"):
        Tolerances().with_overrides({"no_such_field": 0.1})
    assert Tolerances().with_overrides({"inst_issued": 0.001}).of("inst_issued") == 0.001


# ----------------------------------------------------------------------------- real reports


def test_105_launches_of_one_kernel_spread_and_missing_fields(corpus_dir: Path) -> None:
    launches = _launches(corpus_dir, SPY)
    groups, singles = repeated_launch_stability(launches, report_label=SPY)
    assert singles == [] and len(groups) == 1
    group = groups[0]
    assert group.launches == 105 and group.kernel == "__cuda_linear_fp32_fp16_kernel"
    duration = group.field("duration_ns")
    assert (duration.minimum, duration.maximum, duration.median) == (17184.0, 17760.0, 17408.0)
    assert duration.spread == pytest.approx((17760 - 17184) / 17408)
    # no work counter in a default-set report: nothing shows the 105 launches repeat one work, so
    # the spreads are shown but the group is not called unstable (it was, before work was checked)
    assert group.verdict == "insufficient"
    assert "no work counter" in group.summary() and "105 launches" in group.summary()
    assert [f.field for f in group.unstable_fields] == ["duration_ns"]
    # DRAM % of peak moves with the duration: 23.04–23.81 % is 3.3 % relative but 0.77 of a
    # percentage point, inside the 1-point floor of percentages (the field table)
    throughput = group.field("dram_throughput_pct")
    assert throughput.spread == pytest.approx(0.0328, abs=1e-3) and throughput.verdict == "stable"
    # a default-set report holds no work counters: they are named as missing, not zero
    assert "inst_executed" in group.missing_fields and "dram_bytes" in group.missing_fields
    # taken as replicas (as runs of one cell setting are), the duration is what is unstable
    replicas = stability_of(launches, label="x")
    assert replicas.verdict == "unstable" and "duration_ns 3.31 % > 2.00 %" in replicas.summary()
    loose = Tolerances(time=0.05, rate=0.05)
    assert stability_of(launches, label="x", tolerances=loose).verdict == "stable"


def test_repeated_launches_with_different_work_are_different_work_judged_within_each_work(corpus_dir: Path) -> None:
    """initLayer is launched 6 times with one configuration, but one launch executes 825
    instructions and five 750: different work, never replay noise (it was 'unstable');
    the five that repeat one work are judged on their own."""
    groups, singles = repeated_launch_stability(_launches(corpus_dir, SKEL), report_label=SKEL)
    by_kernel = {g.kernel: g for g in groups}
    assert singles == ["copyLayers [grid=1, block=1]"]
    init = by_kernel["initLayer"]
    assert init.launches == 6 and init.verdict == "different_work" and init.work_fields == ("inst_executed",)
    assert sorted((w.value("inst_executed"), w.launches) for w in init.works) == [(750.0, 5), (825.0, 1)]
    assert "inst_executed 750 (5 launches) / 825 (1 launch)" in init.summary()
    (same,) = init.parts
    assert same.launches == 5 and same.verdict == "stable" and same.field("inst_executed").spread == 0.0
    copies = by_kernel["copyDeviceDataElements"]
    assert copies.verdict == "different_work" and [p.launches for p in copies.parts] == [23]
    assert copies.parts[0].verdict == "unstable"  # same work, durations 5.1–6.0 µs: really disagree
    assert [f.field for f in copies.parts[0].unstable_fields] == ["duration_ns"]


def test_full_set_replays_only_inst_issued_differs_within_its_near_exact_band(corpus_dir: Path) -> None:
    """Three launches of one kernel: every counter identical except issued instructions, which
    differ by 0.0009 % (re-issued stalls): inside the near-exact band, outside 'identical'."""
    launches = _launches(corpus_dir, SILU)
    group = stability_of(launches, label="silu")
    issued = group.field("inst_issued")
    assert issued.tolerance_class == "near_exact" and issued.minimum != issued.maximum
    assert group.verdict == "stable"
    assert group.field("inst_executed").spread == 0.0
    assert group.field("dram_bytes").verdict == "stable"
    strict = DEFAULT_TOLERANCES.with_overrides({"inst_issued": 0.0})
    assert [f.field for f in stability_of(launches, label="silu", tolerances=strict).unstable_fields] == ["inst_issued"]


def test_two_instantiations_of_one_kernel_name_stay_apart(corpus_dir: Path) -> None:
    groups, _ = repeated_launch_stability(_launches(corpus_dir, JESTES), report_label=JESTES)
    agents = [g for g in groups if g.kernel == "_kernel_agent"]
    assert sorted(g.launches for g in agents) == [4, 6]
    assert len({g.label for g in agents}) == 2  # told apart by a tag of the mangled name
    six = next(g for g in agents if g.launches == 6)
    assert six.field("inst_executed").spread == 0.0
    scan = next(g for g in groups if g.kernel == "DeviceScanKernel")
    # 17,838 vs 17,894 instructions and 1,135 vs 1,153 requests (a decoupled look-back scan
    # spins for as long as its predecessor takes): two works, each done once, nothing to judge
    assert scan.verdict == "different_work" and scan.work_fields == ("inst_executed", "global_ld_requests")
    assert scan.parts == ()


# ----------------------------------------------------------------------------- CLI


def test_cli_stability_strict_markdown_and_parquet(corpus_dir: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    md, pq = tmp_path / "s.md", tmp_path / "s.parquet"
    result = runner.invoke(cli, ["stability", str(corpus_dir / SPY), "--markdown", str(md), "--parquet", str(pq)])
    assert result.exit_code == 0, result.output
    assert "duration_ns" in result.output and "3.31 %" in result.output and "insufficient" in result.output
    assert "Tolerances used: exact work counters identical" in result.output
    assert runner.invoke(cli, ["stability", str(corpus_dir / SPY), "--strict"]).exit_code == 0  # not judged
    # same work; the L2 hit rate moves 8.45 points off the critical path: not a failure
    assert runner.invoke(cli, ["stability", str(corpus_dir / CONV), "--strict"]).exit_code == 0
    strict = runner.invoke(cli, ["stability", str(corpus_dir / CONV), "--strict", "--tol-time", "0.001"])
    assert strict.exit_code == 1, strict.output  # its time spreads 0.0046 % (1,728 ns): past a 0.001 % band
    loose = runner.invoke(cli, ["stability", str(corpus_dir / CONV), "--strict", "--tol-rate", "10", "--tol-bytes",
                                "1", "--tol", "global_ld_sectors=0.001"])
    assert loose.exit_code == 0, loose.output
    assert "rates and ratios ≤ 10.00 %" in loose.output
    text = md.read_text()
    assert "| duration_ns | time | ≤ 2.00 % | 105 |" in text
    frame = pl.read_parquet(pq)
    row = frame.filter(pl.col("field") == "duration_ns").row(0, named=True)
    assert row["n"] == 105 and row["max"] == 17760.0 and row["verdict"] == "insufficient"
    assert frame.filter(pl.col("field") == "inst_executed")["field_verdict"].to_list() == ["missing"]


def test_cli_stability_of_a_154_launch_report(corpus_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["stability", str(corpus_dir / BWD), "--kernel", "ExclusiveSum"])
    assert result.exit_code == 0, result.output
    assert "DeviceRadixSortExclusiveSumKernel" in result.output and "22 launches" in result.output
    assert "1 group:" in result.output and "1 groups" not in result.output


def test_a_percentage_spread_is_said_in_points(corpus_dir: Path) -> None:
    """The L2 hit rate of four conv2d launches runs 79.63–88.08 %: 8.45 points against a band of
    1.75 points (2 % of its median); it read '9.65 % > 2.00 %', as if it were points."""
    (group,), _ = repeated_launch_stability(_launches(corpus_dir, CONV), report_label=CONV)
    hit = group.field("l2_hit_rate_pct")
    assert hit.points == pytest.approx(8.45, abs=0.01) and hit.band == pytest.approx(1.75, abs=0.01)
    assert hit.spread_text() == "8.45 points (9.65 % of median)"
    assert hit.tolerance_text() == "≤ 1.75 points (2.00 % of median, at least 1)"
    assert "l2_hit_rate_pct 8.45 points > 1.75 points" in group.summary()
    assert "dram_bytes 0.58 % > 0.20 %" in group.summary()  # a byte count stays relative
    assert "%" not in group.summary().split("l2_hit_rate_pct")[1].split(",")[0]


def test_corpus_unstable_groups_are_only_same_work_replicas_that_disagree(corpus_dir: Path) -> None:
    """Over the shared corpus, `stability` called 39 of 49 groups unstable, most of them launches
    whose work is unknown (no instruction counter) or differs (initLayer, DeviceScanKernel, ...).
    Now every unstable group's launches hold one work, shown by their counters."""
    from ncuflow.analyze.fields import spec_of
    from ncuflow.analyze.stability import flat
    from ncuflow.analyze.stability_run import StabilityRequest, check_stability
    from ncuflow.analyze.work import work_key, work_measured

    findings = check_stability(StabilityRequest(paths=(corpus_dir,)))
    groups = flat(findings.groups)
    launches = {launch.key: launch for path in sorted(corpus_dir.iterdir()) if path.suffix == ".ncu-rep"
                for launch in iter_launches(path)}
    unstable = [g for g in groups if g.verdict == "unstable"]
    # what turns a headline is on the critical path (time, work, the binding term's fields, the verdict);
    # a field off it that moved is named, and leaves the headline stable (the conv2d, issue 43)
    assert unstable and all(g.deciding_unstable or not g.decision.agrees for g in unstable)
    off_path = [g for g in groups if g.verdict == "stable" and g.moved_off_path]
    assert any(g.kernel == "kernel_conv2d_baseline" for g in off_path)
    for group in off_path:
        assert all(not (spec_of(f.field).terms & group.decision.bounds) for f in group.moved_off_path)
        assert "not binding" in group.summary()
    # what the bands used to call unstable: a sector spread of 0.02 % (near-exact now), a few
    # hundred bytes of a tiny scan (under the 4 KiB floor)
    stable = {g.kernel for g in groups if g.verdict == "stable"}
    assert {"conv2d_variant3_kernel", "DeviceScanInitKernel"} <= stable
    for group in unstable:
        members = tuple(launches[key] for key in group.keys)
        assert work_measured(members), group.label
        assert len({work_key(launch) for launch in members}) == 1, group.label
    different = [g for g in findings.groups if g.verdict == "different_work"]
    assert {g.kernel for g in different} == {
        "initLayer", "copyDeviceDataElements", "distribution_elementwise_grid_stride_kernel", "DeviceScanKernel"}
    for group in different:
        assert group.work_fields and all(len(part.keys) >= 2 for part in group.parts)
        assert all(group.label in part.label for part in group.parts)


def test_cli_stability_of_store_replicas(corpus_dir: Path, tmp_path: Path) -> None:
    from ncuflow.store import write_run
    from tests.test_explain import content_key

    params = {"flag": "on"}
    for _ in range(2):
        write_run(tmp_path, CellSpec.of("silu", params), corpus_dir / SILU, content_key=content_key("silu", params))
    result = CliRunner().invoke(cli, ["stability", str(tmp_path), "--tol", "inst_issued=0.01"])
    assert result.exit_code == 0, result.output
    assert "silu:flag=on" in result.output and "replicas: 6 launches, 2 runs" in result.output
    assert "0 unstable" in result.output


def test_cli_stability_reprofiles_a_cell_spec_with_the_fake_ncu(corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CELL_SPEC path end to end on a CPU: the fake ncu writes a real report per replica."""
    fake = Path(__file__).parent / "fake_ncu" / "ncu"
    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / SILU))
    store = tmp_path / "store"
    result = CliRunner().invoke(
        cli, ["stability", "copy_bandwidth:mib=64", "--replicas", "3", "--store", str(store), "--ncu", str(fake), "--strict",
              "--tol-near-exact", "0"]
    )
    assert result.exit_code == 1, result.output  # inst_issued differs between the report's launches
    assert "replicas: 9 launches, 3 runs" in result.output
    assert len(list(store.rglob("manifest.json"))) == 3


def test_cli_stability_needs_something(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["stability"])
    assert result.exit_code != 0
    assert "Nothing to check" in str(result.exception) or "Nothing to check" in result.output


def test_cli_stability_headline_reprofiles_baseline_and_extremes(corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--headline picks each swept parameter's baseline and extremes from a store and re-profiles
    just those (fake ncu writing a real report; the store's runs are real corpus reports)."""
    from ncuflow.cells.registry import parse_spec
    from ncuflow.store import write_run

    store = tmp_path / "store"
    for mib in (64, 128, 256):
        spec = parse_spec(f"copy_bandwidth:mib={mib}")
        write_run(store, CellSpec.of(spec.cell, spec.as_dict()), corpus_dir / SILU, content_key=spec.content_key())
    fake = Path(__file__).parent / "fake_ncu" / "ncu"
    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / SILU))
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_NCU_CALLS", str(calls))
    new_store = tmp_path / "new"
    result = CliRunner().invoke(
        cli, ["stability", "--headline", str(store), "--replicas", "2", "--store", str(new_store), "--ncu", str(fake)]
    )
    assert result.exit_code == 0, result.output
    profiled = [line for line in calls.read_text().splitlines() if line != '["--version"]']
    assert len(profiled) == 4  # mib=64 (baseline, smallest) and mib=256, twice each
    assert "mib=64" in result.output and "mib=256" in result.output and "mib=128" not in result.output
    assert result.output.count("replicas: 6 launches, 2 runs") == 2


def test_launch_configuration_keeps_repeats_apart_when_extracted(corpus_dir: Path) -> None:
    """When extraction records grid and block sizes, launches of one kernel with different
    configurations are different groups (the note about pooling disappears)."""
    import dataclasses

    launches = _launches(corpus_dir, SPY)
    assert all(x.values["grid_size"] is not None for x in launches)  # extraction records it
    configured = [
        dataclasses.replace(x, values={**x.values, "grid_size": 1024.0 if i % 3 else 512.0, "block_size": 256.0})
        for i, x in enumerate(launches)
    ]
    groups, _ = repeated_launch_stability(configured, report_label=SPY)
    assert sorted(g.launches for g in groups) == [35, 70]
    assert all(not g.notes for g in groups)
    assert any("[grid=512, block=256]" in g.label for g in groups)
    # Without the configuration (older extractions), repeats are pooled by name, with a note.
    unconfigured = [
        dataclasses.replace(x, values={**x.values, "grid_size": None, "block_size": None}) for x in launches
    ]
    plain, _ = repeated_launch_stability(unconfigured, report_label=SPY)
    assert "launch configuration (grid, block) is not in the extracted launches" in plain[0].notes[0]


def test_store_replicas_are_runs_of_one_content_key(corpus_dir: Path, tmp_path: Path) -> None:
    """Two runs with the same parameters but different content keys (another measurement
    setup) are not replicas of each other."""
    from ncuflow.store import write_run

    params = {"flag": "on"}
    write_run(tmp_path, CellSpec.of("silu", params), corpus_dir / SILU, content_key="a" * 64)
    write_run(tmp_path, CellSpec.of("silu", params), corpus_dir / SILU, content_key="b" * 64)
    result = CliRunner().invoke(cli, ["stability", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "silu:flag=on [silu_kernel [grid=8,192, block=256]] key aaaaaaaa" in result.output
    assert "silu:flag=on [silu_kernel [grid=8,192, block=256]] key bbbbbbbb" in result.output
    assert "replicas:" not in result.output and result.output.count("repeated launches: 3 launches, 1 run") == 2


def test_conv2d_is_stable_on_what_decides_and_names_what_moved_off_the_critical_path(corpus_dir: Path) -> None:
    """The demo's A100 conv2d: its L2 hit rate moves 8.45 points and its DRAM bytes 0.58 % over four
    launches, on a kernel bound by its L1 whose time spreads 0.0046 %. The verdict, its binding term,
    the time and the work are stable; what moved is named as off the critical path (it read 'unstable')."""
    from ncuflow.analyze.classify import classify
    from ncuflow.analyze.fields import spec_of

    launches = _launches(corpus_dir, CONV)
    (group,), _ = repeated_launch_stability(launches, report_label=CONV)
    bounds = {classify(launch).bound for launch in launches}
    assert group.decision is not None and group.decision.bounds == bounds and len(bounds) == 1
    (bound,) = bounds
    assert group.verdict == "stable", group.summary()
    assert group.field("duration_ns").verdict == "stable" and group.field("duration_ns").decides
    moved = {f.field for f in group.moved_off_path}
    assert {"l2_hit_rate_pct", "dram_bytes"} <= moved
    assert all(bound not in spec_of(name).terms for name in moved)  # none feeds the binding term
    assert group.field("l2_hit_rate_pct").verdict == "unstable"  # the per-field verdict is kept
    summary = group.summary()
    assert f"verdict {bound} in all 4 launches" in summary
    assert "moved off the critical path: l2_hit_rate_pct 8.45 points > 1.75 points (not binding)" in summary
    frame = stability_frame([group])
    assert frame.filter(pl.col("field") == "l2_hit_rate_pct")[["field_verdict", "decides"]].row(0) == ("unstable", False)
    result = CliRunner().invoke(cli, ["stability", str(corpus_dir / CONV)], terminal_width=250)
    assert "1 stable, 0 unstable" in result.output and "unstable, not binding" in result.output


def test_a_field_feeding_the_binding_term_still_turns_the_headline(corpus_dir: Path) -> None:
    """The same launches judged as if their L2 bound them: the hit rate then decides, and the group is unstable."""
    from dataclasses import replace as replaced

    from ncuflow.analyze.decides import Decision

    (group,), _ = repeated_launch_stability(_launches(corpus_dir, CONV), report_label=CONV)
    as_l2 = Decision((("l2", 4),))
    from ncuflow.analyze.decides import decides
    from ncuflow.analyze.stability import group_verdict

    fields = tuple(replaced(f, decides=decides(f.field, as_l2)) for f in group.fields)
    assert group_verdict(fields, 4, as_l2) == "unstable"
    assert group_verdict(group.fields, 4, Decision((("l1", 3), ("dram", 1)))) == "unstable"  # verdicts differ
