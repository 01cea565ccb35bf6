"""Reports that cannot be measurements are named per launch, never silently classified
(``ncuflow.read.plausibility``, ``Launch.implausible``): rewritten corpus reports."""

from __future__ import annotations

import json
from pathlib import Path

import ncu_report
import pytest
from click.testing import CliRunner

from analysis.report_edit import counters_copied, metric_scaled
from ncuflow.cli import cli
from ncuflow.read.extract import read_launches
from ncuflow.read.plausibility import IDENTICAL_KEY, MEASURED
from ncuflow.read.reportfile import find_reports

JESTES = "jestes15__EE384_FinalProject__profile_output.ncu-rep"  # H100 PCIe: linspace, fill_vector, _kernel_agent ...
ORIGIN, COPIES = 2, (3, 4)  # linspace's counters onto fill_vector (same grid) and _kernel_agent (grid 69)


@pytest.fixture(scope="module")
def identical(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("plausible") / "identical.ncu-rep"
    assert counters_copied(corpus_dir / JESTES, target, ORIGIN, lambda i: i in COPIES,
                           keep=lambda name: name.startswith("launch__")) == len(COPIES)
    return target


def test_no_corpus_report_holds_different_kernels_with_identical_counters(corpus_dir: Path) -> None:
    checked = 0
    for report in find_reports([corpus_dir]):
        launches = read_launches(report)
        assert not [launch.key for launch in launches if IDENTICAL_KEY in launch.implausible], report.name
        checked += len(launches)
    assert checked > 300


def test_different_kernels_with_bit_identical_counters_are_named(identical: Path) -> None:
    launches = read_launches(identical)
    flagged = {launch.action_index for launch in launches if IDENTICAL_KEY in launch.implausible}
    assert flagged == {ORIGIN, *COPIES}
    kernels = {launches[i].kernel.function for i in flagged}
    assert len(kernels) >= 2 and len({launches[i].value("grid_size") for i in flagged}) == 2
    note = launches[COPIES[-1]].notes[IDENTICAL_KEY]
    assert f"#{ORIGIN} {launches[ORIGIN].kernel.function}" in note and "report is wrong" in note
    # NVIDIA's reader reads the very same values: the file is wrong, not the reading
    context = ncu_report.load_report(str(identical))
    actions = [context.range_by_idx(0).action_by_idx(i) for i in sorted(flagged)]
    durations = {action.metric_by_name("gpu__time_duration.sum").as_double() for action in actions}
    assert len(durations) == 1
    assert {launches[i].value("duration_ns") for i in flagged} == durations


def test_the_same_kernel_repeating_its_counters_is_not_flagged(corpus_dir: Path, tmp_path: Path) -> None:
    """jestes15's first two launches are _kernel_agent at grid 69, 3,872 ns each: made bit-identical, they are
    one deterministic kernel timed alike, which can be; not flagged."""
    target = tmp_path / "repeat.ncu-rep"
    counters_copied(corpus_dir / JESTES, target, 0, lambda i: i == 1, keep=lambda name: name.startswith("launch__"))
    launches = read_launches(target)
    first, second = launches[0], launches[1]
    assert first.kernel == second.kernel and first.value("grid_size") == second.value("grid_size")
    assert [first.value(n) for n in MEASURED] == [second.value(n) for n in MEASURED]
    assert not first.implausible and not second.implausible


def test_classify_flags_them_in_json_and_in_the_table(identical: Path) -> None:
    rows = json.loads(CliRunner().invoke(cli, ["classify", "--json", str(identical)]).output)
    assert {row["action"] for row in rows if IDENTICAL_KEY in row["implausible"]} == {ORIGIN, *COPIES}
    assert all(row["implausible"] == [] for row in rows if row["action"] not in (ORIGIN, *COPIES))
    assert all(IDENTICAL_KEY in row["notes"] for row in rows if row["implausible"])
    table = CliRunner().invoke(cli, ["classify", str(identical)], terminal_width=250)
    assert table.exit_code == 0 and "⚠" in table.output
    assert f"implausible {identical.name} #{ORIGIN}: counters cannot be" in table.output


@pytest.mark.parametrize(("metric", "field", "factor"), [
    ("gpu__time_duration.sum", "duration_ns", -4_700.0),  # "GPU time −18,000,000 ns" once
    ("dram__bytes_read.sum", "dram_bytes_read", -1.0),
    ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram_throughput_pct", 1e6),  # 358 %
])
def test_negative_counters_and_impossible_values_are_flagged(corpus_dir: Path, tmp_path: Path, metric: str,
                                                             field: str, factor: float) -> None:
    target = tmp_path / "negative.ncu-rep"
    assert metric_scaled(corpus_dir / JESTES, target, lambda name: name == metric, factor,
                         kernel=lambda index, _: index == ORIGIN) == 1
    launches = read_launches(target)
    assert [launch.action_index for launch in launches if launch.implausible] == [ORIGIN]
    launch = launches[ORIGIN]
    # the field itself, and any field derived from it (a negative time makes a negative rate)
    assert launch.implausible[0] == field and launch.value(field) is None and "stored as" in launch.notes[field]
    assert all(launch.value(name) is None and name in launch.notes for name in launch.implausible)
    rows = json.loads(CliRunner().invoke(cli, ["classify", "--json", str(target)]).output)
    assert next(row for row in rows if row["action"] == ORIGIN)["implausible"] == list(launch.implausible)


def test_store_check_names_the_launches_whose_values_cannot_be(identical: Path, tmp_path: Path) -> None:
    from ncuflow.cells.contract import CellSpec
    from ncuflow.store import write_run
    from tests.test_explain import content_key

    params = {"flag": "on"}
    write_run(tmp_path, CellSpec.of("silu", params), identical, content_key=content_key("silu", params))
    result = CliRunner().invoke(cli, ["store", "check", str(tmp_path)])
    lines = [line for line in result.output.splitlines() if line.startswith("implausible\t")]
    assert len(lines) == 1 + len(COPIES) and all("counters: the same" in line for line in lines)
    assert f"{1 + len(COPIES)} launches whose values cannot be" in result.output
    assert result.exit_code == 0, result.output  # the runs are whole: nothing to move aside


@pytest.mark.parametrize("long_metrics", [False, True])
def test_export_names_the_implausible_launches_in_a_column(identical: Path, tmp_path: Path, long_metrics: bool) -> None:
    """export's launches table carries ``implausible`` as classify --json does, with and without
    --metrics-long (which reads the report launch by launch)."""
    import polars as pl

    out = tmp_path / "launches.parquet"
    argv = ["export", str(identical), "-o", str(out)] + (["--metrics-long"] if long_metrics else [])
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    table = pl.read_parquet(out)
    flagged = {row["action"] for row in table.iter_rows(named=True) if IDENTICAL_KEY in row["implausible"]}
    assert flagged == {launch.action_index for launch in read_launches(identical) if IDENTICAL_KEY in launch.implausible}
    assert flagged == {ORIGIN, *COPIES}
