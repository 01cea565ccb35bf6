"""The launches table is written as it is read (ncuflow.output.stream): the same table for
every batch, in row groups as the rows come, and no hang or lost error when either side fails."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from ncuflow.output.parts import METRICS_SCHEMA
from ncuflow.output.stream import table_stream
from ncuflow.read.reportfile import find_reports
from tests.scripts import analysis_script

ROWS = 1234


def _columns(start: int, stop: int) -> dict[str, list[object]]:
    return {
        "report": [f"r{i % 7}" for i in range(start, stop)],
        "range": [0] * (stop - start),
        "action": list(range(start, stop)),
        "name": [f"m{i}" for i in range(start, stop)],
        "value": [float(i) if i % 5 else float("nan") for i in range(start, stop)],
        "string_value": [None if i % 3 else "text" for i in range(start, stop)],
        "unit": ["byte"] * (stop - start),
    }


def _write(target: Path, batch: int, row_group_rows: int, pieces: int = 9) -> None:
    edges = [ROWS * k // pieces for k in range(pieces + 1)]
    with table_stream(target, METRICS_SCHEMA, batch=batch, row_group_rows=row_group_rows,
                      metadata={"ncuflow.table": "test"}) as stream:
        for start, stop in itertools.pairwise(edges):
            stream.extend(_columns(start, stop))
            stream.extend({})  # a report without launches
    assert stream.rows == ROWS


def test_every_batch_gives_the_same_table_with_its_metadata(tmp_path: Path) -> None:
    expected = pl.DataFrame(_columns(0, ROWS), schema=METRICS_SCHEMA)
    for batch in (1, 7, 250, 5000):
        target = tmp_path / f"b{batch}.parquet"
        _write(target, batch, row_group_rows=500)
        table = pl.read_parquet(target)
        assert table.equals(expected), batch
        assert pl.read_parquet_metadata(target)["ncuflow.table"] == "test"


def test_rows_are_written_in_row_groups_of_the_size_asked(tmp_path: Path) -> None:
    import pyarrow.parquet as pq  # a dev dependency: reads the row groups polars wrote

    target = tmp_path / "groups.parquet"
    _write(target, batch=100, row_group_rows=300)
    groups = [pq.ParquetFile(target).metadata.row_group(i).num_rows
              for i in range(pq.ParquetFile(target).metadata.num_row_groups)]
    assert sum(groups) == ROWS and max(groups) <= 300 and len(groups) >= ROWS // 300


def test_an_empty_table_has_the_schema(tmp_path: Path) -> None:
    target = tmp_path / "empty.parquet"
    with table_stream(target, METRICS_SCHEMA, batch=10, row_group_rows=10, metadata={}) as stream:
        stream.extend({})
    assert stream.rows == 0
    table = pl.read_parquet(target)
    assert table.height == 0 and dict(table.schema) == METRICS_SCHEMA


def test_csv_joins_the_list_columns(tmp_path: Path) -> None:
    schema = {"report": pl.String, "missing": pl.List(pl.String)}
    target = tmp_path / "t.csv"
    with table_stream(target, schema, batch=2, row_group_rows=10, metadata={}, csv=True) as stream:
        stream.extend({"report": ["a", "b", "c"], "missing": [["x", "y"], [], ["z"]]})
    assert target.read_text().splitlines() == ["report,missing", "a,x; y", "b,\"\"", "c,z"]  # an empty list: an empty text


def test_the_callers_error_stops_the_sink_and_is_the_one_raised(tmp_path: Path) -> None:
    target = tmp_path / "t.parquet"
    started = time.monotonic()
    with pytest.raises(KeyError, match="a report failed"), \
            table_stream(target, METRICS_SCHEMA, batch=10, row_group_rows=10, metadata={}) as stream:
        stream.extend(_columns(0, 100))
        raise KeyError("a report failed")
    assert time.monotonic() - started < 30
    assert not any(t.name == "ncuflow-table-sink" for t in threading.enumerate())


def test_an_error_of_the_sink_reaches_the_caller_without_a_hang(tmp_path: Path) -> None:
    """The sink cannot write (its folder is gone): the caller's next extend or close raises,
    and never waits forever on a full queue."""
    target = tmp_path / "gone" / "t.parquet"
    started = time.monotonic()
    with pytest.raises(Exception) as caught, \
            table_stream(target, METRICS_SCHEMA, batch=5, row_group_rows=5, metadata={}) as stream:
        for start in range(0, 1000, 10):
            stream.extend(_columns(start, start + 10))
    assert time.monotonic() - started < 30
    assert "gone" in str(caught.value) or isinstance(caught.value, OSError)
    assert not target.exists()


def _export_peak_mib(inputs: list[Path], output: Path) -> tuple[float, str]:
    """The true peak resident memory of `ncuflow export --jobs 0` in a fresh process: the kernel's
    high-water mark of its memory (VmHWM; ru_maxrss would start from this test process's size,
    which it keeps across the exec)."""
    code = ("import sys\nfrom ncuflow.cli import main\nmain(sys.argv[1:])\n"
            "print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')))")
    result = subprocess.run([sys.executable, "-c", code, "export", "--jobs", "0", *map(str, inputs), "-o", str(output)],
                            capture_output=True, text=True, timeout=600, check=True)
    return int(result.stdout.splitlines()[-1]) / 1024, result.stdout


def test_export_memory_hardly_grows_with_the_store(corpus_dir: Path, tmp_path: Path) -> None:
    """The corpus ten times (under new names: a file named twice is read once) peaks at
    1.17x the memory of the corpus once with polars 2.1 (issue 19: <= 1.2x; 1.26x with polars
    1.30, the oldest supported); holding the rows until the end took 1.50x."""
    copies = tmp_path / "copies"
    analysis_script("bench_extraction").scaled_corpus(sorted(find_reports([corpus_dir])), 10, copies)  # the bench's own repetitions
    once, said_once = _export_peak_mib([corpus_dir], tmp_path / "once.parquet")
    tenfold, said_tenfold = _export_peak_mib([corpus_dir, copies], tmp_path / "tenfold.parquet")
    rows_once = pl.scan_parquet(tmp_path / "once.parquet").select(pl.len()).collect().item()
    rows_tenfold = pl.scan_parquet(tmp_path / "tenfold.parquet").select(pl.len()).collect().item()
    assert rows_tenfold == 10 * rows_once > 0, (said_once, said_tenfold)
    assert tenfold <= 1.3 * once, f"x10 {tenfold:.0f} MiB, x1 {once:.0f} MiB"


@pytest.mark.parametrize(("inherited", "expected_tail"), [
    (None, ""),
    ("dirty_decay_ms:500,muzzy_decay_ms:1000", ""),  # polars' own, written by a parent that imported it
    ("narenas:4", ",narenas:4"),  # the user's: after ncuflow's, so it wins
    ("dirty_decay_ms:500,muzzy_decay_ms:1000,narenas:4", ",narenas:4"),
])
def test_the_command_sets_polars_allocator_and_keeps_the_users_options(
        monkeypatch: pytest.MonkeyPatch, inherited: str | None, expected_tail: str) -> None:
    from ncuflow.cli import POLARS_ALLOCATOR, POLARS_ALLOCATOR_VARIABLE, bound_polars_memory

    if inherited is None:
        monkeypatch.delenv(POLARS_ALLOCATOR_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(POLARS_ALLOCATOR_VARIABLE, inherited)
    bound_polars_memory()
    assert os.environ[POLARS_ALLOCATOR_VARIABLE] == POLARS_ALLOCATOR + expected_tail


def test_polars_reads_the_allocator_the_command_sets() -> None:
    """polars puts its defaults first and the variable's value after (its own __init__): what
    the command set is what its jemalloc gets, whatever the parent process imported."""
    code = ("from ncuflow.cli import bound_polars_memory\nbound_polars_memory()\nimport os, polars\n"
            "print(os.environ['_RJEM_MALLOC_CONF'])")
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "_RJEM_MALLOC_CONF": "dirty_decay_ms:500,muzzy_decay_ms:1000"}).stdout
    assert printed.strip().endswith("narenas:1,tcache:false,dirty_decay_ms:0,muzzy_decay_ms:0")


def test_a_failed_stream_creates_no_file_after_it_ended(tmp_path: Path) -> None:
    """Given a path, polars could create the file from a task of its own after the failed sink
    had returned (4 of 600 failed streams here), after the caller had cleaned up: a temporary
    left behind a failed export (seen once in CI, tests/test_bad_input.py). The stream opens
    the file itself, so nothing appears once the block has ended."""
    from ncuflow.output.export import launches_schema

    late = []
    for index in range(600):  # the old way left a file in ~4 of 600: this catches it nearly always
        target = tmp_path / f"t{index}.parquet"
        with pytest.raises(KeyError), table_stream(target, launches_schema(), batch=250, row_group_rows=1000,
                                                   metadata={}):
            raise KeyError("a report failed")
        target.unlink(missing_ok=True)  # the caller's clean-up (atomic_paths)
        time.sleep(0.005)
        if target.exists():
            late.append(target.name)
    assert late == []


def test_a_column_of_lists_of_structs_is_the_frame_polars_builds(tmp_path: Path) -> None:
    """``frame_of`` builds lists of structs from flat columns: the same frame as polars' own
    construction, None rows, empty lists, missing and NaN fields, and no row at all included."""
    from ncuflow.output.stream import frame_of

    item = pl.Struct({"name": pl.String, "value": pl.Float64})
    schema = {"report": pl.String, "items": pl.List(item), "other": pl.List(item)}
    rows = [None, [], [{"name": "a", "value": float("nan")}, {"name": None, "value": None}], [{"value": 2.0}]]
    columns = {"report": [str(i) for i in range(len(rows))], "items": rows, "other": list(reversed(rows))}
    for take in (slice(0, 0), slice(0, 1), slice(1, 2), slice(None)):
        part = {name: values[take] for name, values in columns.items()}
        built, reference = frame_of(part, schema), pl.DataFrame(part, schema=schema)
        assert built.schema == reference.schema and built.equals(reference, null_equal=True), take
