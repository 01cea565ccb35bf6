"""ncu_report is the reference: every shared report reads the same through ncuflow's own reader.

Per report, both readers give equal ``Launch`` records (names, NVTX, device, every field and
its provenance, the breakdown, NVIDIA's rule title), and ``export --metrics-long`` writes
identical tables (the launches table; the long table's name, value, string value, kind and
unit, row by row in the same order).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from ncuflow.cli import cli
from ncuflow.output.export import export_reports
from ncuflow.read.extract import count_actions, read_launches
from ncuflow.read.readers import (
    NCU_REPORT_READER,
    NCUFLOW_READER,
    current_reader,
    reading_with,
    use_reader,
)
from tests.nvidia import NVIDIA_ACTIONS_IMPORT, REPO

from .conftest import corpus_reports

REPORTS = corpus_reports()


@pytest.fixture(autouse=True)
def _default_reader_after() -> Iterator[None]:
    yield
    use_reader(NCUFLOW_READER)


@pytest.mark.parametrize("report", REPORTS, ids=[r.name[:60] for r in REPORTS])
def test_both_readers_give_the_same_launches(report: Path) -> None:
    with reading_with(NCU_REPORT_READER):
        reference = read_launches(report)
    ours = read_launches(report)
    assert current_reader() == NCUFLOW_READER
    assert ours == reference and len(ours) == count_actions(report) > 0


def _with_kind(metrics: pl.DataFrame) -> pl.DataFrame:
    """The long table with each row's kind: a number, a string, or no value."""
    kind = (pl.when(pl.col("value").is_not_null()).then(pl.lit("number"))
            .when(pl.col("string_value").is_not_null()).then(pl.lit("string")).otherwise(pl.lit("none")))
    return metrics.with_columns(kind.alias("kind"))


@pytest.mark.slow
def test_both_readers_export_identical_tables_of_every_shared_report(tmp_path: Path) -> None:
    assert len(REPORTS) >= 40
    tables = {}
    for reader in (NCUFLOW_READER, NCU_REPORT_READER):
        with reading_with(reader):
            # jobs=2: the long table reads each report's units in a process of its own
            result = export_reports(REPORTS, tmp_path / f"{reader}.parquet", metrics_long=True, jobs=2)
        assert result.launch_count == 469 and result.metrics_path is not None
        tables[reader] = (pl.read_parquet(result.launches_path), _with_kind(pl.read_parquet(result.metrics_path)))
    (launches, metrics), (ref_launches, ref_metrics) = tables[NCUFLOW_READER], tables[NCU_REPORT_READER]
    assert launches.equals(ref_launches)
    assert metrics.height == ref_metrics.height > 180_000
    assert metrics.equals(ref_metrics)  # name, value, string value, kind and unit, row by row
    assert set(metrics["kind"]) == {"number", "string", "none"}
    assert metrics.filter(pl.col("unit") != "").height > 50_000  # units were really read


def test_the_reader_option_is_on_every_reading_command() -> None:
    runner = CliRunner()
    for command in ("classify", "export", "stability", "explain", "report", "compare", "passes"):
        result = runner.invoke(cli, [command, "--help"])
        assert result.exit_code == 0 and "--reader [ncuflow|ncu_report]" in result.output, command


def test_classify_reads_the_same_with_either_reader(tmp_path: Path) -> None:
    runner = CliRunner()
    reports = [str(r) for r in REPORTS[:6]]
    ours = runner.invoke(cli, ["classify", "--json", *reports])
    reference = runner.invoke(cli, ["classify", "--json", "--reader", "ncu_report", *reports])
    assert ours.exit_code == 0 and reference.exit_code == 0, reference.output
    assert ours.output == reference.output
    refused = runner.invoke(cli, ["classify", "--reader", "nope", *reports])
    assert refused.exit_code != 0 and "nope" in refused.output


FRESH_UNITS = f"""
import json, sys
from pathlib import Path
{NVIDIA_ACTIONS_IMPORT}
units = [[*key, name, action.metric_by_name(name).unit()]
         for key, action in nvidia_actions(Path(sys.argv[1])) for name in action.metric_names()]
print(json.dumps(units))
"""


def test_the_long_tables_units_are_those_ncu_report_gives_in_a_process_of_its_own(tmp_path: Path) -> None:
    """ncu_report keeps a metric's unit per process (read after other reports, thousands of
    units of the corpus change): each report's units must be the ones a fresh process reads."""
    import json
    import subprocess
    import sys

    chosen = [r for r in REPORTS if r.name.startswith(("Alconno", "anuragdogra", "jhiems", "yzwang", "AlpriElse__cs599k__silu_CUDA"))]
    assert len(chosen) == 5
    runner = CliRunner()
    output = tmp_path / "x.parquet"
    done = runner.invoke(cli, ["export", *map(str, chosen), "-o", str(output), "--metrics-long"])
    assert done.exit_code == 0, done.output
    table = pl.read_parquet(tmp_path / "x.metrics.parquet")
    for report in chosen:
        fresh = subprocess.run([sys.executable, "-c", FRESH_UNITS, str(report)], capture_output=True, text=True,
                               timeout=120, check=True, cwd=REPO)
        expected = [tuple(row) for row in json.loads(fresh.stdout)]
        rows = table.filter(pl.col("report") == str(report)).select("range", "action", "name", "unit").rows()
        assert rows == expected, report.name
