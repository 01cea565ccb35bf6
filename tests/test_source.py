"""`ncuflow source`: the hot-spot view checked against NVIDIA's own per-PC values.

The oracle (``analysis/check_source_against_nvidia.py``, which runs it on every corpus report)
reads each launch's per-PC lists whole through ``ncu_report`` (``IMetric``'s
``correlation_ids()`` and ``as_uint64(i)``/``as_double(i)``) and ``source_info(pc)`` for every
address, and ranks them plainly; the view streams the file with ncuflow's reader and keeps only
the top N. They must give the same instructions in the same order, the same counters exactly,
and the same sums per source line.
"""

from __future__ import annotations

import json
import re
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from analysis.check_source_against_nvidia import launch_mismatches, nvidia_lists, ranked
from analysis.nvidia_actions import nvidia_actions
from ncuflow.analyze import hotspots
from ncuflow.analyze.hotspots import Instruction, LaunchHotspots, rank, read_hotspots
from ncuflow.cli import cli
from ncuflow.errors import NcuflowError, UsageError
from ncuflow.read.launch import KernelName
from ncuflow.read.metric_lists import DamagedList, elements
from ncuflow.read.source_counters import EXECUTED, SAMPLES, SECTION_LINE, LaunchSource
from ncuflow.read.source_text import LaunchText
from tests.hostile import run_limited
from tests.protobuf_bytes import list_element, uint64_value

APLAINJANE = "aplainjane__CUDA_Learning__012_sharedMemory_shared_report.ncu-rep"  # file:line, samples
VARIANT3 = "Swagatam1812__hpca-gpu-memory-profiling__variant3.ncu-rep"  # uncoalesced: excess sectors
SPEEDY_SCAN = "thedavidchu__speedy_scan__profile.ncu-rep"  # ncu 2020.3: the older sector names
RAY_TRACER = "wtzhang23__gpu-ray-tracer__report.ncu-rep"  # ncu 2021.1: no sample count, no line info
TRANSPOSE = "Lashi0812__CudaProgramming__profiling_profiles_smemTranspose.ncu-rep"
WITH_COUNTERS = (APLAINJANE, VARIANT3, SPEEDY_SCAN, RAY_TRACER, TRANSPOSE)
WITHOUT_COUNTERS = "2388612861__GPU-DEMO__ncu_detailed_occupancy_report.ncu-rep"
TOP = 5

def _nvidia(path: Path) -> dict[tuple[int, int], Any]:
    return dict(nvidia_actions(path))


@pytest.mark.parametrize("name", WITH_COUNTERS)
def test_the_top_instructions_and_lines_are_nvidias(corpus_dir: Path, name: str) -> None:
    path = corpus_dir / name
    found = read_hotspots(path, lambda launch: True, TOP)
    nvidia = _nvidia(path)
    assert found.launches and not found.notes
    assert found.selected == len(nvidia)
    assert found.without == sum(not nvidia_lists(action) for action in nvidia.values())
    for view in found.launches:
        assert not launch_mismatches(view, nvidia[(view.range_index, view.action_index)], TOP)
    assert any(view.by_samples for view in found.launches)


def test_the_oracle_sees_a_wrong_view(corpus_dir: Path) -> None:
    """The comparison fails where the view is wrong: instructions out of order, a counter off by one,
    a line's sum changed, an excess changed."""
    path = corpus_dir / VARIANT3
    view = read_hotspots(path, lambda launch: True, TOP).launches[0]
    action = _nvidia(path)[(view.range_index, view.action_index)]
    first, second = view.by_samples[:2]
    bumped = Instruction(first.address, {**first.counters, SAMPLES: first.counters[SAMPLES] + 1})
    line = view.lines[0]
    assert view.pair is not None
    excess = view.by_excess[0]
    wrong_excess = Instruction(excess.address, {**excess.counters, view.pair.ideal: excess.counters[view.pair.ideal] + 1})
    for wrong in (replace(view, by_samples=(second, first, *view.by_samples[2:])),
                  replace(view, by_samples=(bumped, *view.by_samples[1:])),
                  replace(view, lines=(replace(line, counters={**line.counters, EXECUTED: 0}), *view.lines[1:])),
                  replace(view, by_excess=(wrong_excess, *view.by_excess[1:]))):
        assert launch_mismatches(wrong, action, TOP)
    assert not launch_mismatches(view, action, TOP)


@pytest.mark.parametrize("name", (VARIANT3, SPEEDY_SCAN))
def test_excess_sectors_are_shown_where_counted(corpus_dir: Path, name: str) -> None:
    """The uncoalesced reports' launches rank instructions by excess sectors (NVIDIA's derived
    excess is compared by ``launch_mismatches``)."""
    found = read_hotspots(corpus_dir / name, lambda launch: True, TOP)
    assert found.launches and all(view.pair and view.total_excess and view.by_excess for view in found.launches)


def test_the_text_is_the_cubins(corpus_dir: Path) -> None:
    """SASS and file:line of the instructions shown are ncu_report's for the same address."""
    found = read_hotspots(corpus_dir / APLAINJANE, lambda launch: True, TOP)
    nvidia = _nvidia(corpus_dir / APLAINJANE)
    checked = 0
    for view in found.launches:
        action = nvidia[(view.range_index, view.action_index)]
        for instruction in view.instructions:
            place = view.places[instruction.address]
            info = action.source_info(instruction.address)
            assert place.sass == action.sass_by_pc(instruction.address).strip() and place.sass
            assert (place.file, place.line) == (info.file_name(), info.line())
            checked += 1
    assert checked


def _run(*args: str) -> Any:
    return CliRunner().invoke(cli, ["source", *args])


class _Undisassembling:
    """An ``IAction`` whose disassembler knows none of its code: ``sass_by_pc`` answers "???" for
    every address, as ncu_report does on the public V100 report kulnaman/lammps output.ncu-rep."""

    def __init__(self, action: Any) -> None:
        self._action = action

    def sass_by_pc(self, address: int) -> str:
        return "???"

    def source_info(self, address: int) -> Any:
        return self._action.source_info(address)


def test_instructions_ncu_report_cannot_disassemble_show_no_sass_and_say_so(
        corpus_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = hotspots._Text.of

    def undisassembled(self: Any, launch: LaunchSource) -> LaunchText | None:
        text = original(self, launch)
        return LaunchText(_Undisassembling(text._action)) if text is not None else None

    monkeypatch.setattr(hotspots._Text, "of", undisassembled)
    shown = [view for view in read_hotspots(corpus_dir / APLAINJANE, lambda launch: True, TOP).launches
             if view.instructions]
    assert shown
    for view in shown:
        assert view.places and not any(place.sass for place in view.places.values())
        assert any(place.line for place in view.places.values())  # file:line still the cubin's
        assert view.note is not None and "no SASS text" in view.note and "-lineinfo" not in view.note
    result = _run(str(corpus_dir / APLAINJANE))
    assert result.exit_code == 0, result.output
    assert "???" not in result.output.replace("answers ???", "")
    assert "no SASS text" in result.output


def test_a_report_without_source_counters_gets_one_line(corpus_dir: Path) -> None:
    result = _run(str(corpus_dir / WITHOUT_COUNTERS))
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and SECTION_LINE in lines[0] and "--section SourceCounters" in lines[0]


def test_json_parquet_and_both_readers_agree(corpus_dir: Path, tmp_path: Path) -> None:
    report = str(corpus_dir / APLAINJANE)
    own = _run(report, "--json", "--top", str(TOP), "--parquet", str(tmp_path / "hot.parquet"))
    reference = _run(report, "--json", "--top", str(TOP), "--reader", "ncu_report")
    assert own.exit_code == 0 and reference.exit_code == 0, own.output + reference.output
    records = json.loads(own.stdout)
    assert records == json.loads(reference.stdout)
    view = read_hotspots(corpus_dir / APLAINJANE, lambda launch: True, TOP)
    assert [[i["address"] for i in r["by_samples"]] for r in records] == [
        [i.address for i in launch.by_samples] for launch in view.launches]
    table = pl.read_parquet(tmp_path / "hot.parquet")
    assert table.height == sum(len(launch.instructions) for launch in view.launches)
    first = view.launches[-1].instructions[0]
    row = table.filter((pl.col("action") == view.launches[-1].action_index) & (pl.col("address") == first.address))
    assert {name: row[name][0] for name in first.counters} == {k: float(v) for k, v in first.counters.items()}


def test_the_selection_options_choose_the_launches(corpus_dir: Path) -> None:
    report = str(corpus_dir / APLAINJANE)
    chosen = _run(report, "--json", "--kernel", "^setColReadCol$")
    assert chosen.exit_code == 0 and [r["kernel"] for r in json.loads(chosen.stdout)] == ["setColReadCol"]
    nothing = _run(report, "--kernel", "no_such_kernel")
    assert isinstance(nothing.exception, UsageError) and "No launch matches" in str(nothing.exception)


def test_an_existing_file_that_is_no_table_is_not_overwritten(corpus_dir: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes.parquet"
    notes.write_text("mine")
    result = _run(str(corpus_dir / APLAINJANE), "--parquet", str(notes))
    assert isinstance(result.exception, NcuflowError) and notes.read_text() == "mine"


# --- hostile lists


def _element(address: int, count: int) -> bytes:
    return list_element(uint64_value(address), uint64_value(count))


def _record(values: dict[int, int]) -> bytes:
    return b"\x08\x01\x12\x02\x28\x00" + b"".join(_element(a, c) for a, c in values.items())


class _Lists:
    def __init__(self, records: dict[str, bytes]) -> None:
        self.records = records

    def counters(self) -> tuple[str, ...]:
        return tuple(self.records)

    def elements(self, name: str) -> Iterator[tuple[int, int | float]]:
        return elements(self.records[name])


def _ranked_with_peak(size: int) -> tuple[LaunchHotspots | None, dict[int, int], int]:
    """A launch whose two lists hold ``size`` distinct addresses, ranked; its samples; the peak of
    what the ranking allocated."""
    base = 0x7F00_0000_0000
    samples = {base + 16 * i: (i * 7919) % 1000 for i in range(size)}
    records = {SAMPLES: _record(samples), "inst_executed": _record(dict.fromkeys(samples, 32))}
    launch = LaunchSource("huge", 0, 0, KernelName("k", "k", "k"), (), _Lists(records))
    tracemalloc.start()
    try:
        return rank(launch, TOP), samples, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_huge_list_is_ranked_in_bounded_memory() -> None:
    """Four times the addresses, about the same memory: only the top N and a bounded table of
    decoded encodings are kept, whatever the lists' length."""
    _, _, small_peak = _ranked_with_peak(10_000)
    found, samples, peak = _ranked_with_peak(40_000)
    assert found is not None and [i.address for i in found.by_samples] == ranked(samples, TOP)
    assert found.total_samples == sum(samples.values())
    assert peak < 1.3 * small_peak, (peak, small_peak)


@pytest.mark.parametrize("damage", ["cut", "wire type", "no address", "text value"])
def test_a_damaged_list_is_a_damaged_list(damage: str) -> None:
    whole = _record({0x1000: 3, 0x1010: 5})
    broken = {
        "cut": whole[:-2],
        "wire type": whole[:6] + b"\x1f" + whole[7:],
        "no address": whole + b"\x1a\x04\x12\x02\x28\x01",
        "text value": whole + b"\x1a\x09\x0a\x02\x28\x01\x12\x03\x0a\x01x",
    }[damage]
    assert list(elements(whole)) == [(0x1000, 3), (0x1010, 5)]
    with pytest.raises(DamagedList):
        list(elements(broken))


def _damaged_copy(source: Path, target: Path) -> str:
    """A copy of the report with one launch's sample list broken in place (same length: the file's
    framing stays whole); the broken launch's kernel name."""
    from ncuflow.read.fileaction import iter_file_actions

    data = bytearray(source.read_bytes())
    for _, _, action in iter_file_actions(source):
        record = action.record(SAMPLES)
        if record and len(list(elements(record))) > 1:
            kernel = action.kernel().function
            break
    at = data.find(record)
    assert at > 0 and data.find(record, at + 1) == -1
    data[at + record.index(b"\x1a", 2)] = 0x1F  # the list's first element: a wire type no message has
    target.write_bytes(bytes(data))
    return kernel


def test_a_report_with_a_damaged_list_shows_the_rest(corpus_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.ncu-rep"
    kernel = _damaged_copy(corpus_dir / APLAINJANE, broken)
    ran = run_limited(["source", str(broken), "--json"], case="source-damaged-list")
    assert ran.code == 0 and not ran.traceback, ran.output
    warnings = [line for line in ran.stderr.splitlines() if line.startswith("ncuflow: warning:")]
    assert len(warnings) == 1 and kernel in warnings[0] and "damaged" in warnings[0]
    shown = [r["kernel"] for r in json.loads(ran.stdout)]
    assert kernel not in shown and len(shown) == len(read_hotspots(corpus_dir / APLAINJANE, lambda x: True, 1)
                                                     .launches) - 1


def test_kernel_names_reach_the_terminal_escaped(corpus_dir: Path, tmp_path: Path) -> None:
    from analysis.report_edit import rename_kernels
    from ncuflow.files.safe_text import _CONTROL

    hostile = tmp_path / "hostile.ncu-rep"
    rename_kernels(corpus_dir / APLAINJANE, hostile,
                   lambda index, old: f"evil\x1b]0;PWNED\x07\x1b[2J{index}\n[bold]x[/bold]\u202e")
    ran = run_limited(["source", str(hostile), "--top", "2"], case="source-hostile-names")
    assert ran.code == 0 and not ran.traceback, ran.output
    assert "evil\\x1b]0;PWNED\\x07" in ran.stdout and "[bold]x[/bold]" in ran.stdout
    assert not [c for c in ran.stdout if c != "\n" and re.match(f"[{_CONTROL}]", c)]


def test_ncu_report_is_not_handed_a_file_it_aborts_on(corpus_dir: Path, tmp_path: Path) -> None:
    """A length pointing past the file makes ncu_report abort its process: the own reader's launches
    before it are shown without text, and --reader ncu_report is refused in one paragraph."""
    from analysis.report_edit import entry_length_set

    past = tmp_path / "past.ncu-rep"
    entry_length_set(corpus_dir / APLAINJANE, past, 0, 3, 10**9)
    ran = run_limited(["source", str(past), "--json"], case="source-length-past-the-file")
    assert ran.code == 0 and not ran.traceback, ran.output
    records = json.loads(ran.stdout)
    assert records and all("ncu_report is not handed a damaged file" in r["note"] for r in records)
    refused = run_limited(["source", str(past), "--reader", "ncu_report"], case="source-length-past-ncu-report")
    assert refused.paragraph() and refused.code == 2 and "not read through ncu_report" in refused.stderr


def _named_as(record: bytes, made: bytes) -> bytes:
    """``made`` (a record naming string 1) naming the metric ``record`` names."""
    end = 1
    while record[end] & 0x80:
        end += 1
    return record[:end + 1] + made[2:]


def test_a_report_with_a_huge_list_is_read_within_limits(corpus_dir: Path, tmp_path: Path) -> None:
    """One launch's sample list made 200,000 addresses long (3 MB) in a real report: the command ends
    within the fault suite's time and memory limits and shows that list's largest counts first."""
    from analysis.report_edit import metric_replaced

    size, base = 200_000, 0x7F00_0000_0000
    samples = {base + 16 * i: (i * 7919) % 100_003 for i in range(size)}
    huge = tmp_path / "huge.ncu-rep"
    made = metric_replaced(corpus_dir / APLAINJANE, huge, SAMPLES,
                           lambda index, record: _named_as(record, _record(samples)) if index == 2 else record)
    assert made
    ran = run_limited(["source", str(huge), "--json", "--kernel", "^setColReadCol$", "--top", str(TOP)],
                      case="source-huge-list")
    assert ran.code == 0 and not ran.traceback, ran.output
    (record,) = json.loads(ran.stdout)
    assert [i["address"] for i in record["by_samples"]] == ranked(samples, TOP)
    assert record["total_samples"] == sum(samples.values())


def test_sector_lists_in_different_orders_are_matched_by_address() -> None:
    """ncu writes a launch's requested and ideal sector lists in the same order; where they are not,
    each address's excess is still its own (and an address the ideal list lacks counts all)."""
    from ncuflow.read.source_counters import SECTOR_PAIRS

    pair = SECTOR_PAIRS[0]
    requested = {0x100: 40, 0x110: 8, 0x120: 64, 0x130: 16}
    ideal = {0x130: 4, 0x120: 8, 0x100: 40}  # another order, 0x110 missing
    launch = LaunchSource("sectors", 0, 0, KernelName("k", "k", "k"), (),
                          _Lists({pair.theoretical: _record(requested), pair.ideal: _record(ideal)}))
    found = rank(launch, TOP)
    assert found is not None and [i.address for i in found.by_excess] == [0x120, 0x130, 0x110]
    assert found.total_excess == 56 + 12 + 8
