"""`ncuflow export` and `ncuflow classify` end to end on real reports."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from ncuflow.cells.contract import CellSpec
from ncuflow.cli import cli
from ncuflow.output.export import SCHEMA_VERSION, metrics_path_for, read_schema_version
from ncuflow.output.render import ROW_KEYS
from ncuflow.terms import BOUND_NAMES as BOUNDS

from .corpus import read_sources


def test_export_whole_corpus_counts_and_schema(corpus_dir: Path, tmp_path: Path) -> None:
    output = tmp_path / "launches.parquet"
    result = CliRunner().invoke(cli, ["export", str(corpus_dir), "-o", str(output), "--metrics-long"])
    assert result.exit_code == 0, result.output
    frame = pl.read_parquet(output)
    sources = read_sources(corpus_dir)
    assert frame.height == sum(entry.total_actions for entry in sources)
    per_report = dict(frame.group_by("report_name").len().iter_rows())
    for entry in sources:
        assert per_report[entry.file] == entry.total_actions, entry.file
    assert read_schema_version(output) == SCHEMA_VERSION
    # identity, canonical fields with provenance, model terms and verdicts
    for column in ("kernel_function", "kernel_demangled", "kernel_mangled", "nvtx", "device", "ncu_version",
                   "duration_ns", "src_duration_ns", "u_dram", "src_u_dram", "bound", "nvidia_sol", "missing"):
        assert column in frame.columns
    assert set(frame["bound"].unique()) <= set(BOUNDS) and "u_pipe" in frame.columns
    # a missing field is null and listed, never 0
    no_duration = frame.filter(pl.col("duration_ns").is_null())
    assert no_duration.height > 0
    assert all("duration_ns" in missing for missing in no_duration["missing"].to_list())
    metrics = pl.read_parquet(metrics_path_for(output))
    assert set(metrics.columns) == {"report", "range", "action", "name", "value", "string_value", "unit"}
    assert metrics.height > 100_000
    assert read_schema_version(metrics_path_for(output)) == SCHEMA_VERSION
    durations = metrics.filter(
        (pl.col("name") == "gpu__time_duration.sum") & pl.col("value").is_not_null() & pl.col("value").is_not_nan()
    )
    assert durations.height == frame.filter(pl.col("src_duration_ns") == "gpu__time_duration.sum").height


def test_export_values_match_classify_json(corpus_dir: Path, tmp_path: Path) -> None:
    report = corpus_dir / "spymaster2h__spyinfer__report.ncu-rep"
    output = tmp_path / "one.parquet"
    runner = CliRunner()
    assert runner.invoke(cli, ["export", str(report), "-o", str(output)]).exit_code == 0
    result = runner.invoke(cli, ["classify", "--json", str(report)])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) == 105
    assert list(rows[0]) == list(ROW_KEYS)
    frame = pl.read_parquet(output)
    assert frame["duration_ns"].to_list() == [row["duration_ns"] for row in rows]
    assert frame["bound"].to_list() == [row["bound"] for row in rows]
    assert all(row["global_ld_inst"] is None and "global_ld_inst" in row["missing"] for row in rows)


def test_classify_table_shows_nvidia_verdict_beside_ours(corpus_dir: Path) -> None:
    report = corpus_dir / "AlpriElse__cs599k__rms_norm_matrix_ncu-reports_2025-04-21_v1.ncu-rep"
    result = CliRunner().invoke(cli, ["classify", "--evidence", str(report)])
    assert result.exit_code == 0, result.output
    assert "NVIDIA H100 PCIe" in result.output
    assert "NVIDIA" in result.output and "memory" in result.output
    assert "u_dram=" in result.output  # the evidence line names the terms compared


def test_threshold_option_changes_verdicts(corpus_dir: Path) -> None:
    report = corpus_dir / "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep"
    runner = CliRunner()
    default = json.loads(runner.invoke(cli, ["classify", "--json", str(report)]).output)
    strict = json.loads(runner.invoke(cli, ["classify", "--json", "--threshold", "0.99", str(report)]).output)
    assert {row["bound"] for row in default} == {"l1"}
    assert {row["bound"] for row in strict} == {"latency"}


@pytest.mark.parametrize("bad", ["0", "1.5", "-1"])
def test_threshold_out_of_range_is_a_usage_error(corpus_dir: Path, bad: str) -> None:
    result = CliRunner().invoke(cli, ["classify", "--threshold", bad, str(corpus_dir)])
    assert result.exit_code == 2


def test_streaming_export_in_small_chunks_gives_the_same_tables(corpus_dir: Path, tmp_path: Path) -> None:
    from ncuflow.output.export import export_reports

    reports = [corpus_dir / "spymaster2h__spyinfer__report.ncu-rep", corpus_dir / "flyinglandlord__sglang__profile.ncu-rep"]
    whole = export_reports(reports, tmp_path / "whole.parquet", metrics_long=True)
    chunked = export_reports(reports, tmp_path / "chunked.parquet", metrics_long=True, chunk_rows=37)
    assert whole.launch_count == chunked.launch_count == 110
    assert pl.read_parquet(whole.launches_path).equals(pl.read_parquet(chunked.launches_path))
    assert chunked.metrics_path is not None and whole.metrics_path is not None
    assert pl.read_parquet(whole.metrics_path).equals(pl.read_parquet(chunked.metrics_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "chunked.metrics.parquet", "chunked.parquet", "whole.metrics.parquet", "whole.parquet"
    ]


def test_classify_works_on_every_corpus_report(corpus_dir: Path) -> None:
    runner = CliRunner()
    rows = json.loads(runner.invoke(cli, ["classify", "--json", str(corpus_dir)]).output)
    assert len(rows) == sum(entry.total_actions for entry in read_sources(corpus_dir))
    table = runner.invoke(cli, ["classify", str(corpus_dir)])
    assert table.exit_code == 0
    assert table.output.count("launch") >= len(read_sources(corpus_dir))  # one titled table per report


def test_export_of_a_store_carries_each_runs_identity(corpus_dir: Path, tmp_path: Path) -> None:
    from ncuflow.store import write_run

    for page, name in ((16, "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep"), (64, "flyinglandlord__sglang__profile.ncu-rep")):
        write_run(tmp_path / "store", CellSpec.of("paged_decode", {"page": page}), corpus_dir / name, content_key=f"{page:064d}")
    output = tmp_path / "store.parquet"
    assert CliRunner().invoke(cli, ["export", str(tmp_path / "store"), "-o", str(output)]).exit_code == 0
    frame = pl.read_parquet(output)
    assert frame.height == 4 + 5
    assert set(frame["cell"].to_list()) == {"paged_decode"}
    pages = {json.loads(p)["page"] for p in frame["params_json"].to_list()}
    assert pages == {16, 64}
    assert frame.filter(pl.col("kernel_function") == "kernel_conv2d_baseline")["content_key"].unique().to_list() == [f"{16:064d}"]


def test_a_metrics_table_left_by_an_earlier_long_export_is_named(corpus_dir: Path, tmp_path: Path) -> None:
    from ncuflow.output.export import StaleMetricsWarning, export_reports

    reports = [corpus_dir / "Syswea__cuda-fused-linear-layer__profile_report.ncu-rep"]
    output = tmp_path / "launches.parquet"
    export_reports(reports, output, metrics_long=True)
    first_id = pl.read_parquet_metadata(output)["ncuflow.export_id"]
    with pytest.warns(StaleMetricsWarning, match=rf"launches.metrics.parquet is the long metrics table of an "
                                                  rf"earlier export \(export id {first_id}\)"):
        export_reports(reports, output)
    assert pl.read_parquet_metadata(output)["ncuflow.export_id"] != first_id
    result = CliRunner().invoke(cli, ["export", str(reports[0]), "-o", str(output)])
    assert result.exit_code == 0 and "export again with --metrics-long" in result.stderr
    export_reports(reports, output, metrics_long=True)  # a matching pair again: nothing to say
    import warnings as warnings_module

    with warnings_module.catch_warnings():
        warnings_module.simplefilter("error", StaleMetricsWarning)
        (tmp_path / "launches.metrics.parquet").unlink()
        export_reports(reports, output)


def test_read_export_gives_the_pair_and_refuses_a_metrics_table_of_another_export(
    corpus_dir: Path, tmp_path: Path
) -> None:
    from ncuflow.errors import NcuflowError
    from ncuflow.output.export import export_reports, read_export

    reports = [corpus_dir / "Syswea__cuda-fused-linear-layer__profile_report.ncu-rep"]
    first, second = tmp_path / "a" / "launches.parquet", tmp_path / "b" / "launches.parquet"
    export_reports(reports, first, metrics_long=True)
    export_reports(reports, second, metrics_long=True)
    launches, metrics = read_export(first)
    assert launches.height == 3 and metrics is not None and metrics.height > 100
    assert set(metrics["action"]) == set(launches["action"])
    # what a crash between the two renames leaves: one export's metrics beside another's launches
    shutil.copyfile(second.with_name("launches.metrics.parquet"), first.with_name("launches.metrics.parquet"))
    with pytest.raises(NcuflowError, match=r"does not belong to .*Export again with --metrics-long"):
        read_export(first)
    first.with_name("launches.metrics.parquet").unlink()
    assert read_export(first)[1] is None
    with pytest.raises(NcuflowError, match="not an ncuflow launches table"):
        read_export(second.with_name("launches.metrics.parquet"))


def test_part_writer_gives_the_same_rows_for_every_chunk(tmp_path: Path) -> None:
    """Rows become a part every ``chunk`` rows: the table is the same, in parts of ``chunk`` rows."""
    import polars as pl

    from ncuflow.output.parts import METRICS_SCHEMA, PartWriter

    rows = [{"report": f"r{i % 7}", "range": 0, "action": i, "name": f"m{i}", "value": float(i),
             "string_value": None, "unit": "byte"} for i in range(1234)]
    tables = []
    for chunk in (10_000, 1234, 300, 37, 1):
        folder = tmp_path / f"{chunk}"
        folder.mkdir()
        writer = PartWriter(folder, "metrics", METRICS_SCHEMA, chunk)
        for row in rows:
            writer.add(row)
        writer.close()
        assert writer.rows == len(rows) and len(writer.parts) == -(-len(rows) // chunk)
        assert max(pl.scan_parquet(part).select(pl.len()).collect().item() for part in writer.parts) <= chunk
        tables.append(pl.concat([pl.read_parquet(part) for part in writer.parts]))
    assert all(table.equals(tables[0]) for table in tables) and tables[0].height == len(rows)


JESTES = "jestes15__EE384_FinalProject__profile_output.ncu-rep"


def test_export_to_a_csv_name_writes_csv(corpus_dir: Path, tmp_path: Path) -> None:
    """`-o x.csv` wrote parquet under a .csv name; now the extension names the format."""
    runner = CliRunner()
    csv, parquet = tmp_path / "x.csv", tmp_path / "x.parquet"
    for target in (csv, csv, parquet):  # the second CSV replaces the first: ncuflow wrote it
        result = runner.invoke(cli, ["export", str(corpus_dir / JESTES), "-o", str(target)])
        assert result.exit_code == 0, result.output
    assert "wrote 18 launches from 1 report to" in result.output
    assert not csv.read_bytes().startswith(b"PAR1")
    table, reference = pl.read_csv(csv, infer_schema_length=None), pl.read_parquet(parquet)
    assert table.height == reference.height == 18 and table.columns == reference.columns
    assert table["inst_executed"].to_list() == reference["inst_executed"].to_list()
    assert table["missing"][0] == "; ".join(reference["missing"][0])  # lists joined


def test_export_refuses_an_extension_it_does_not_write(corpus_dir: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    for name, args in (("x.json", []), ("x", []), ("x.csv", ["--metrics-long"])):
        result = runner.invoke(cli, ["export", str(corpus_dir / JESTES), "-o", str(tmp_path / name), *args])
        assert result.exit_code != 0
        message = str(result.exception) + result.output
        assert ".parquet" in message and "csv" in message.lower(), message
        assert not (tmp_path / name).exists()
    assert list(tmp_path.iterdir()) == []


def test_the_same_report_named_twice_and_in_its_folder_is_exported_once(corpus_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "reports"
    folder.mkdir()
    report = folder / JESTES
    shutil.copy(corpus_dir / JESTES, report)
    output = tmp_path / "dup.parquet"
    result = CliRunner().invoke(cli, ["export", str(report), str(report), str(folder), "-o", str(output)])
    assert result.exit_code == 0, result.output
    assert "wrote 18 launches from 1 report to" in result.output
    assert pl.read_parquet(output).height == 18


def test_a_parquet_option_refuses_a_name_of_another_format(corpus_dir: Path, tmp_path: Path) -> None:
    for command in (["stability"], ["explain", "--vary", "x"]):
        result = CliRunner().invoke(cli, [*command, str(corpus_dir / JESTES), "--parquet", str(tmp_path / "s.csv")])
        assert result.exit_code != 0 and "s.parquet" in str(result.exception) + result.output
        assert not (tmp_path / "s.csv").exists()
