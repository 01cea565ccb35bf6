"""The field table, measurements and the tolerance classes, on the H200 replays ncuflow made
(``profiles/reference/h200``: 3 sweeps, headline cells re-profiled to 3 replicas)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.analyze.explain import headline_points
from ncuflow.analyze.fields import (
    CLASSIFY_FIELDS,
    FIELD_TABLE,
    FIELD_UNITS,
    STABILITY_FIELDS,
    WORK_FIELDS,
    WORK_TERMS,
    spec_of,
)
from ncuflow.analyze.measurement import measurements
from ncuflow.analyze.stability import DEFAULT_TOLERANCES, measurement_stability
from ncuflow.analyze.study import analyse, point_stability, points_of
from ncuflow.cli import cli
from ncuflow.read.metrics import FIELDS
from ncuflow.read.runs import load_paths
from ncuflow.spread import quantile, relative_spread

H200 = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "h200"


@pytest.fixture(scope="module")
def h200():  # type: ignore[no-untyped-def]
    return load_paths([H200])


def _by_spec(groups, points):  # type: ignore[no-untyped-def]
    return {(p.spec(), p.function): g for p, g in zip(points, groups, strict=True)}


# ----------------------------------------------------------------------------- the table


def test_every_canonical_field_has_one_row_with_one_unit_spelling() -> None:
    assert set(FIELD_TABLE) == {f.name for f in FIELDS}
    for name in STABILITY_FIELDS:
        spec = FIELD_TABLE[name]
        assert spec.tolerance_class is not None and spec.why, name
        assert spec.unit == spec.canonical.unit  # the unit is read.metrics's, never restated
    assert FIELD_UNITS["dram_bytes"] == "B" and FIELD_TABLE["dram_bytes"].unit == "byte"
    assert all(WORK_TERMS[name] for name in WORK_FIELDS)  # every work counter feeds a model term
    assert spec_of("dram_bytes_write").noise_reference == "dram_bytes"
    assert spec_of("inst_issued").tolerance_class == "near_exact"
    assert spec_of("inst_executed").tolerance_class == "exact"


def test_classify_json_keys_come_from_the_table() -> None:
    from ncuflow.output.render import ROW_KEYS

    assert ROW_KEYS[4:9] == CLASSIFY_FIELDS == (
        "duration_ns", "dram_throughput_pct", "l2_hit_rate_pct", "sectors_per_request", "global_ld_inst",
    )


def test_one_spread_for_replicas_and_for_many_samples() -> None:
    from ncuflow.cells.timing import TimingStats

    samples = [10.0, 11.0, 12.0, 13.0, 100.0]
    assert relative_spread(samples) == pytest.approx(90.0 / 12.0)
    assert TimingStats.of(samples).spread_pct == pytest.approx(100 * relative_spread(samples, 0.1, 0.9))  # type: ignore[operator]
    assert quantile(sorted(samples), 0.9) == pytest.approx(65.2)


# ----------------------------------------------------------------------------- H200 replays


def test_h200_headline_cells_are_stable_where_the_physics_says_so(h200) -> None:  # type: ignore[no-untyped-def]
    """Before the field table's classes, every one of these groups was 'unstable' (inst_issued
    differs by 0.00001–0.18 % between replays; small kernels write back a few hundred KB more or
    less). Paged decode over a shared prefix was, until issue 43: its L2 hit rate moves 2.5–8.3 points
    between replays (which CTA misses first) and DRAM bytes up to 0.56 %, on latency-bound kernels,
    so off the critical path: the headline is stable and the moved fields are named as not binding."""
    analysis = analyse(h200)
    headline = {p.spec() for p in headline_points([g for gs in analysis.sweeps.values() for g in gs])}
    assert len(headline) == 16
    points = points_of(h200, split_content_keys=True)
    groups = point_stability(points, DEFAULT_TOLERANCES)
    checked = 0
    for point, group in zip(points, groups, strict=True):
        if point.spec() not in headline:
            continue
        checked += 1
        assert point.runs == 3 and group.source == "replicas"
        issued = group.field("inst_issued")
        assert issued.minimum != issued.maximum and issued.verdict == "stable"  # near-exact, not identical
        for exact in ("inst_executed", "ldg_inst", "global_ld_requests", "global_ld_sectors"):
            assert group.field(exact).spread == 0.0
        shared_split = point.param("kv") == "shared" and point.function == "paged_decode_split_kernel"
        assert group.verdict == "stable", group.summary()
        if shared_split:  # latency-bound: the hit rate is off the critical path (issue 43), named as moved
            assert "l2_hit_rate_pct" in {f.field for f in group.moved_off_path}
            assert "l2_hit_rate_pct" in group.summary() and "not binding" in group.summary()
            assert "inst_issued" not in group.summary()
    assert checked == 31 - 1  # every headline kernel (both kernels of decode cells); mib=256 was profiled once


def test_h200_write_bytes_are_judged_against_the_launchs_dram_traffic(h200) -> None:  # type: ignore[no-untyped-def]
    points = [p for p in points_of(h200, split_content_keys=True) if p.spec() == "copy_bandwidth:impl=triton,mib=16,seed=0"]
    (point,) = points
    group = measurement_stability(point, label="copy 16 MiB")
    write = group.field("dram_bytes_write")
    assert write.spread == pytest.approx(0.0408, abs=0.001)  # 577,536 … 601,600 B: 4 % of the write bytes
    assert write.reference == "dram_bytes" and write.judged == pytest.approx(0.00138, abs=0.0001)
    assert write.verdict == "stable"
    assert "of dram_bytes" in write.spread_text()
    strict = DEFAULT_TOLERANCES.with_overrides({"inst_issued": 0.0})
    assert measurement_stability(point, label="x", tolerances=strict).verdict == "unstable"  # the old class


def test_h200_stability_cli_names_the_shared_prefix_cells_moves_as_not_binding() -> None:
    result = CliRunner().invoke(cli, ["stability", str(H200), "--strict"], terminal_width=250)
    # the shared-prefix cells' L2 hit rate moves, on latency-bound kernels: named, not binding (issue 43)
    assert result.exit_code == 0, result.output
    assert "31 groups: 30 stable, 0 unstable, 1 insufficient." in result.output
    assert "unstable, not binding" in result.output
    assert "near-exact counters ≤ 0.50 %" in result.output
    loose = CliRunner().invoke(cli, ["stability", str(H200), "--tol", "l2_hit_rate_pct=10", "--tol-bytes", "0.6"])
    assert "30 stable, 0 unstable" in loose.output, loose.output


def test_h200_layout_does_not_reach_the_flat_decode_kernel(h200) -> None:  # type: ignore[no-untyped-def]
    """Scatter vs contiguous indices read the same bytes: 'no effect' on every kernel. With
    inst_issued exact and write bytes judged on their own, this was 'ambiguous' or 'work off
    the critical path' for 3 of the 8 values."""
    analysis = analyse(h200)
    verdicts = [row.verdict for ge in analysis.sweeps["layout"] for row in ge.rows]
    assert verdicts == ["no_effect"] * 8
    pages = [(ge.group.kernel, row.verdict) for ge in analysis.sweeps["page"] for row in ge.rows]
    assert {v for k, v in pages if k.startswith("paged_decode_split_kernel")} == {"critical_path"}


def test_the_baseline_is_the_cells_default_value_where_it_was_measured(h200) -> None:  # type: ignore[no-untyped-def]
    """`explain --vary layout` compared against block128, the alphabetically first value; the
    flat_decode cell runs contiguous when layout is not given, and that is the baseline now."""
    from ncuflow.analyze.study import explain_parameter
    from ncuflow.cells.registry import parameter_defaults

    defaults = parameter_defaults()
    assert defaults["flat_decode"]["layout"] == "contiguous"
    assert {ge.baseline.param("layout") for ge in explain_parameter(h200, "layout")} == {"block128"}
    with_defaults = explain_parameter(h200, "layout", defaults=defaults)
    assert {ge.baseline.param("layout") for ge in with_defaults} == {"contiguous"}
    assert {row.value for ge in with_defaults for row in ge.rows} == {"block128", "scatter"}
    chosen = explain_parameter(h200, "layout", baseline="scatter", defaults=defaults)  # --baseline wins
    assert {ge.baseline.param("layout") for ge in chosen} == {"scatter"}
    # a default that was not measured: the smallest value
    assert {ge.baseline.param("layout") for ge in explain_parameter(
        h200, "layout", defaults={"flat_decode": {"layout": "nowhere"}})} == {"block128"}
    result = CliRunner().invoke(cli, ["explain", str(H200), "--vary", "layout"])
    assert result.exit_code == 0, result.output
    assert result.output.count("baseline layout=contiguous") == 4 and "baseline layout=block128" not in result.output


def test_measurements_group_replicas_and_carry_their_statistics(h200) -> None:  # type: ignore[no-untyped-def]
    found = measurements(h200.runs, split_content_keys=True)
    assert found == points_of(h200, split_content_keys=True)
    copy = next(m for m in found if m.spec() == "copy_bandwidth:impl=triton,mib=4096,seed=0")
    stats = copy.stats("ldg_inst")
    assert copy.stats("ldg_inst") is stats  # computed once
    assert (stats.n, stats.median, stats.spread) == (3, 8_388_608.0, 0.0)
    assert copy.model() is copy.model() and copy.model().bound == "dram"
    assert copy.model(0.95).bound == "latency"  # u_dram 0.85 is below a 0.95 wall
    assert copy.noise_scale("dram_bytes_write") == copy.stats("dram_bytes").median


# ----------------------------------------------------------------------------- the threshold


def test_the_report_draws_the_threshold_it_was_given(h200, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    import ncuflow.output.plots as plots
    from ncuflow.output.report import write_report

    drawn: list[float] = []
    original = plots.plot_terms

    def spy(summaries, path, threshold=0.6, **rest):  # type: ignore[no-untyped-def]
        drawn.append(threshold)
        return original(summaries, path, threshold, **rest)

    monkeypatch.setattr(plots, "plot_terms", spy)
    analysis = analyse(h200, threshold=0.8)
    assert analysis.threshold == 0.8
    write_report(analysis, tmp_path, with_parquet=False)
    assert drawn and set(drawn) == {0.8}


def test_a_threshold_outside_0_1_is_refused_before_anything_runs(tmp_path: Path) -> None:
    from ncuflow.errors import UsageError

    with pytest.raises(UsageError, match="not in \\(0, 1\\]"):
        analyse(load_paths([H200]), threshold=1.5)
    store = tmp_path / "store"
    fake = Path(__file__).parent / "fake_ncu" / "ncu"
    result = CliRunner().invoke(
        cli, ["profile", "copy_bandwidth:mib=64", "--store", str(store), "--ncu", str(fake), "--threshold", "1.5"]
    )
    assert result.exit_code == 2 and "1.5" in result.output and "Traceback" not in result.output
    assert not store.exists()  # nothing was profiled or stored


# ----------------------------------------------------------------------------- host facts, asked once


def test_nvidia_smi_is_asked_in_one_place(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Manifest facts, doctor's GPU check and the cells' driver version all read one nvidia-smi
    query (ncuflow.host): a fake nvidia-smi on PATH answers all three."""
    from ncuflow.cells.timing import driver_version
    from ncuflow.host import package_version, query_gpus
    from ncuflow.profile import doctor
    from ncuflow.profile.facts import nvidia_smi_facts

    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$1" in\n  *index*) echo "0, NVIDIA H200, GPU-1234, 580.65";;\n'
                   '  *name*) echo "NVIDIA H200, GPU-1234, 580.65";;\n  *) echo "580.65";;\nesac\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert nvidia_smi_facts() == {"gpu_name": "NVIDIA H200", "gpu_uuid": "GPU-1234", "driver_version": "580.65"}
    check = doctor.check_gpu()
    assert check.status == "ok" and check.detail == "0, NVIDIA H200, GPU-1234, 580.65"
    assert driver_version(0) == "580.65"
    smi.write_text("#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n")
    assert query_gpus(("name",)).outcome == "failed" and nvidia_smi_facts() == {}
    assert doctor.check_gpu().detail == "nvidia-smi sees no GPU: No devices were found"
    smi.unlink()
    assert query_gpus(("name",)).outcome == "absent"
    assert package_version("no-such-dist", "click") is not None and package_version("no-such-dist") is None


def test_a_hung_nvidia_smi_or_ncu_never_hangs_the_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A wedged driver leaves nvidia-smi in an uninterruptible sleep: SIGKILL does not end it and
    subprocess.run would wait for it forever. Here the kill is made to miss (the one failure a
    user-space fake cannot produce by itself): the question still ends at its timeout + grace."""
    import contextlib
    import os
    import shutil
    import signal
    import subprocess
    import time

    from ncuflow import host
    from ncuflow.host import query_gpus
    from ncuflow.profile.ncu import ncu_version

    pids = tmp_path / "pids"
    for name in ("nvidia-smi", "ncu"):
        fake = tmp_path / name
        fake.write_text(f"#!/bin/sh\necho $$ >> {pids}\nexec {shutil.which('sleep')} 30\n")
        fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(host, "KILL_GRACE_S", 0.5)
    try:
        start = time.monotonic()
        answer = query_gpus(("name",), timeout=0.5)
        assert answer.outcome == "timeout" and "did not answer within 0.5 s" in answer.message
        assert time.monotonic() - start < 3
        # as if SIGKILL had no effect, however it is sent
        monkeypatch.setattr(host.os, "killpg", lambda pid, sig: None)
        monkeypatch.setattr(subprocess.Popen, "kill", lambda self: None)
        start = time.monotonic()
        assert query_gpus(("name",), timeout=0.5).outcome == "timeout"
        assert ncu_version(tmp_path / "ncu", timeout=0.5) is None
        assert time.monotonic() - start < 4
    finally:
        for pid in pids.read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


# ----------------------------------------------------------------------------- one row per counter


def test_a_counter_is_one_row(tmp_path: Path) -> None:
    """The diff docs/ARCHITECTURE.md shows for a new counter, applied to a copy of the package:
    every list, class, column and check follows from that one row."""
    import json
    import shutil
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    doc = (root / "docs" / "ARCHITECTURE.md").read_text()
    diff = doc.split("```diff\n", 1)[1].split("```", 1)[0].splitlines()
    added = [line.strip()[1:] for line in diff if line.strip().startswith("+") and not line.strip().startswith("+++")]
    anchor = next(line.strip() for line in diff if line.strip() and not line.strip().startswith(("+", "-", "@")))
    assert added and anchor == "*LOAD_FIELDS,"
    shutil.copytree(root / "ncuflow", tmp_path / "ncuflow")
    metrics = tmp_path / "ncuflow" / "read" / "metrics.py"
    text = metrics.read_text()
    at = text.index("    *LOAD_FIELDS,\n    CanonicalField(\n        \"inst_executed\"") + len("    *LOAD_FIELDS,\n")
    metrics.write_text(text[:at] + "".join(f"    {line}\n" for line in added) + text[at:])
    probe = r'''
import json
from ncuflow.analyze import fields
from ncuflow.read import metrics
from ncuflow.read.launch import DeviceInfo, KernelName, Launch
import polars as pl
from ncuflow.output.export import launches_schema
values = {f.name: None for f in metrics.FIELDS}
odd = Launch("r", 0, 0, KernelName("k", "k", "k"), (), DeviceInfo(None, "9.0", 132), None,
             {**values, "global_st_inst": 1.5}, {"global_st_inst": "smsp__inst_executed_op_global_st.sum"}, ())
print(json.dumps({
    "tier1": "smsp__inst_executed_op_global_st.sum" in metrics.decisive_metric_names(1),
    "class": fields.FIELD_CLASSES.get("global_st_inst"),
    "work": "global_st_inst" in fields.WORK_FIELDS,
    "evidence": fields.EVIDENCE_ORDER[-1] == "global_st_inst",
    "count": metrics.FIELDS_BY_NAME["global_st_inst"].is_count,
    "int64": launches_schema()["global_st_inst"] == pl.Int64,
    "refused": odd.value("global_st_inst") is None and "whole number" in odd.notes["global_st_inst"],
    "label": fields.spec_of("global_st_inst").label,
}))
'''
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found == {"tier1": True, "class": "exact", "work": True, "evidence": True, "count": True, "int64": True,
                     "refused": True, "label": "gst inst"}, found
