"""Loads of every kind from NVIDIA's per-opcode SASS table (``ncuflow.read.opcodes``), checked against
``ncu_report``'s reading of the same table on every corpus launch that holds it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.report_edit import drop_metrics, metric_replaced
from ncuflow.analyze.classify import classify
from ncuflow.cli import cli
from ncuflow.read.extract import read_launches
from ncuflow.read.opcodes import GENERIC_LOADS, KIND_OPCODES, OPCODE_TABLE, SPLIT_BY_GENERIC
from ncuflow.read.readers import READERS, reading_with
from ncuflow.read.reportfile import find_reports
from tests.nvidia import nvidia_actions
from tests.protobuf_bytes import list_element, string_value, uint64_value

JESTES = "jestes15__EE384_FinalProject__profile_output.ncu-rep"  # H100 PCIe (sm_90), full set
VARIANT3 = "Swagatam1812__hpca-gpu-memory-profiling__variant3.ncu-rep"  # A100 conv2d, full set


def _nvidia_tables(report: Path) -> dict[tuple[int, int], dict[str, float]]:
    tables: dict[tuple[int, int], dict[str, float]] = {}
    for key, action in nvidia_actions(report):
        metric = action.metric_by_name(OPCODE_TABLE)
        if metric is not None and metric.correlation_ids() is not None:
            ids = metric.correlation_ids()
            tables[key] = {ids.as_string(i): metric.as_double(i) for i in range(metric.num_instances())}
    return tables


@pytest.mark.parametrize("reader", READERS)
def test_load_kinds_equal_nvidias_per_opcode_counts_on_every_launch_with_the_table(corpus_dir: Path,
                                                                                    reader: str) -> None:
    with_table = from_table = generic = 0
    for report in find_reports([corpus_dir]):
        tables = _nvidia_tables(report)
        if not tables:
            continue
        with reading_with(reader):
            launches = read_launches(report)
        for launch in launches:
            table = tables.get((launch.range_index, launch.action_index))
            if table is None:
                continue
            with_table += 1
            split = any(table.get(op) for op in GENERIC_LOADS)
            generic += split
            for name, opcodes in KIND_OPCODES.items():
                if split and name == SPLIT_BY_GENERIC and launch.provenance.get(name, "").startswith(OPCODE_TABLE):
                    pytest.fail(f"{report.name} {launch.key}: LDG taken from the table beside generic loads")
                if split and name == SPLIT_BY_GENERIC:
                    continue
                # NVIDIA's count of the kind's opcodes (0 where the table holds none of them), as its own counter
                # reads it or, where the report has no counter, from the table itself
                assert launch.value(name) == sum(table.get(op, 0.0) for op in opcodes), (report.name, launch.key, name)
                from_table += launch.provenance[name].startswith(OPCODE_TABLE)
            if not split:  # every kind the chip has is known: the total is formed, never withheld
                assert launch.value("global_ld_inst") is not None, (report.name, launch.key, launch.notes)
    assert with_table >= 90 and from_table >= with_table and generic >= 2


def test_a_kind_the_table_does_not_list_is_a_zero(corpus_dir: Path) -> None:
    """The cutlass GEMM loads by LDGSTS only: its table lists no LDG, so LDG is 0 and the hardware total
    is formed (it was 'LDG not counted … no total')."""
    launch = read_launches(corpus_dir / "panjd123__cutlass__report.ncu-rep")[0]
    assert launch.value("ldg_inst") == 0.0 and "(no LDG executed: 0)" in launch.provenance["ldg_inst"]
    assert launch.value("global_ld_inst") == launch.value("ldgsts_inst") == 21504
    assert "global_ld_inst" not in launch.notes


def _with_opcodes(record: bytes, extra: dict[str, int]) -> bytes:
    """A per-opcode record with more elements appended (a repeated field: appended is as written)."""
    return record + b"".join(list_element(string_value(opcode), uint64_value(count)) for opcode, count in extra.items())


def test_tma_loads_counted_only_by_the_table_are_counted(corpus_dir: Path, tmp_path: Path) -> None:
    """A Blackwell MLA decode kernel's 25,728 UTMALDG and 8,192 UBLKCP, no TMA counter collected: made
    here by adding them to an H100 launch's table and dropping its TMA counter."""
    no_counter = tmp_path / "no-tma-counter.ncu-rep"
    drop_metrics(corpus_dir / JESTES, no_counter, lambda name: name == "smsp__inst_executed_op_tma_ld.sum")
    target = tmp_path / "tma.ncu-rep"
    extra = {"UTMALDG": 25_728, "UBLKCP": 8_192}
    assert metric_replaced(no_counter, target, OPCODE_TABLE,
                           lambda index, record: _with_opcodes(record, extra) if index == 2 else record) > 0
    for reader in READERS:
        with reading_with(reader):
            launches = read_launches(target)
        tma = launches[2]
        assert tma.value("tma_ld_inst") == sum(extra.values()), reader
        assert tma.provenance["tma_ld_inst"] == f"{OPCODE_TABLE}[UTMALDG + UBLKCP]"
        assert tma.value("global_ld_inst") == tma.value("ldg_inst") + tma.value("ldgsts_inst") + sum(extra.values())
        other = launches[3]
        assert other.value("tma_ld_inst") == 0 and "(no UTMALDG, UBLKCP executed: 0)" in other.provenance["tma_ld_inst"]
    assert _nvidia_tables(target)[(0, 2)]["UTMALDG"] == 25_728  # NVIDIA's reader reads the table as rewritten


_MEMORY = ("dram__", "lts__", "l1tex__", "gpu__dram", "gpu__compute_memory", "breakdown:gpu__compute_memory",
           "smsp__sass_inst_executed_op_global", "sass__inst_executed_global", "smsp__inst_executed_op_global")


def test_a_verdict_without_the_memory_terms_says_so(corpus_dir: Path, tmp_path: Path) -> None:
    """A report without memory sections (a GB10 report) was called latency or compute-bound from the
    compute terms alone, without a word: now the JSON and the table say the memory side is unknown."""
    target = tmp_path / "no-memory.ncu-rep"
    drop_metrics(corpus_dir / VARIANT3, target, lambda name: name.startswith(_MEMORY))
    launch = read_launches(target)[0]
    verdict = classify(launch)
    assert verdict.without_memory is not None and "memory side is unknown" in verdict.without_memory
    assert {"dram", "l2", "l1"} <= set(verdict.unavailable) and verdict.compared
    rows = json.loads(CliRunner().invoke(cli, ["classify", "--json", str(target)]).output)
    assert all("memory side is unknown" in row["without_memory"] for row in rows)
    table = CliRunner().invoke(cli, ["classify", str(target)], terminal_width=250)
    assert "memory unknown" in table.output
    intact = json.loads(CliRunner().invoke(cli, ["classify", "--json", str(corpus_dir / VARIANT3)]).output)
    assert all(row["without_memory"] is None for row in intact)
