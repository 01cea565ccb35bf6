"""ncuflow's reader of the report file format on hostile and unusual files: one paragraph, no
traceback, bounded time; a version or layout it does not know goes to ncu_report."""

from __future__ import annotations

import random
import struct
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import zstandard

from ncuflow.errors import ReportError
from ncuflow.read import reportformat
from ncuflow.read.extract import read_launches
from ncuflow.read.layout import varint_bytes
from ncuflow.read.readers import NCU_REPORT_READER, UnknownLayoutWarning, reading_with
from ncuflow.read.reportfile import DamagedActionWarning
from tests.hostile import make_special_file

SOURCE = "spymaster2h__spyinfer__report.ncu-rep"  # 105 launches in 116 blocks
SMALL = "yzwang2000__cudaCode__profile.ncu-rep"  # 2 launches


def _read(path: Path) -> tuple[tuple, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        launches = read_launches(path)
    return launches, [str(w.message) for w in caught]


def test_a_report_cut_anywhere_gives_its_complete_launches_or_one_paragraph(corpus_dir: Path, tmp_path: Path) -> None:
    original = (corpus_dir / SOURCE).read_bytes()
    whole = read_launches(corpus_dir / SOURCE)
    cut = tmp_path / "cut.ncu-rep"
    started = time.monotonic()
    seen_partial = 0
    for percent in range(1, 100, 3):
        cut.write_bytes(original[: len(original) * percent // 100])
        try:
            launches, said = _read(cut)
        except ReportError as error:
            assert str(cut) in str(error) and ("no profiled launch" in str(error) or "damaged" in str(error))
            continue
        assert launches == tuple(x.__class__(**{**x.__dict__, "report": str(cut)}) for x in whole[: len(launches)])
        assert 0 < len(launches) < len(whole)
        assert said and all(str(cut) in line and "cut off" in line for line in said)
        seen_partial += 1
    assert seen_partial > 20
    assert time.monotonic() - started < 60


def test_corrupted_bytes_never_give_a_traceback(corpus_dir: Path, tmp_path: Path) -> None:
    original = (corpus_dir / SMALL).read_bytes()
    noise = random.Random(7)
    bad = tmp_path / "noisy.ncu-rep"
    for _ in range(60):
        data = bytearray(original)
        for _ in range(noise.randint(1, 40)):
            data[noise.randrange(4, len(data))] = noise.randrange(256)
        bad.write_bytes(bytes(data))
        try:
            _read(bad)
        except ReportError as error:
            assert str(bad) in str(error)


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "folder", "lfs", "empty", "huge_length"])
def test_hostile_files_are_one_paragraph(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "hostile.ncu-rep"
    if make_special_file(path, kind):
        pass
    elif kind == "lfs":
        path.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 2149700\n")
    elif kind == "empty":
        path.write_bytes(b"")
    else:  # a file header that claims 4 GiB
        path.write_bytes(b"NVR\x00" + struct.pack("<I", 2**32 - 1) + b"\x08\x07")
    with pytest.raises(ReportError) as caught:
        read_launches(path)
    assert str(path) in str(caught.value) and len(str(caught.value).splitlines()) == 1


def test_deep_nesting_in_a_result_is_a_damaged_action_not_a_crash(corpus_dir: Path, tmp_path: Path) -> None:
    """A result entry of 10,000 nested unknown fields (the parser's depth limit) is damage."""
    original = (corpus_dir / SMALL).read_bytes()
    nested = b""
    for _ in range(10_000):
        nested = b"\xfa\x07" + varint_bytes(len(nested)) + nested  # field 127, length-delimited
    payload = struct.pack("<I", len(nested)) + nested
    block = b"\x10\x01\x28" + varint_bytes(len(payload))  # NumResults 1, PayloadSize
    bad = tmp_path / "nested.ncu-rep"
    bad.write_bytes(original + struct.pack("<I", len(block)) + block + payload)
    launches, said = _read(bad)
    assert len(launches) == 2 and any("damaged" in line for line in said)


def test_a_compressed_report_reads_as_the_plain_one(corpus_dir: Path, tmp_path: Path) -> None:
    compressed = tmp_path / "small.ncu-repz"
    compressed.write_bytes(zstandard.ZstdCompressor().compress((corpus_dir / SMALL).read_bytes()))
    plain = read_launches(corpus_dir / SMALL)
    ours = read_launches(compressed)
    with reading_with(NCU_REPORT_READER):
        reference = read_launches(compressed)
    assert ours == reference
    assert [x.values for x in ours] == [x.values for x in plain] and len(ours) == 2


def test_a_compression_bomb_is_refused(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.ncu-repz"
    bomb.write_bytes(zstandard.ZstdCompressor().compress(b"NVR\x00" + bytes(400 * 2**20)))
    started = time.monotonic()
    with pytest.raises(ReportError, match="expands to more than"):
        read_launches(bomb)
    assert time.monotonic() - started < 30


def test_an_unknown_version_is_named_and_read_with_ncu_report(corpus_dir: Path, tmp_path: Path) -> None:
    data = bytearray((corpus_dir / SMALL).read_bytes())
    assert data[8:10] == b"\x08\x07"  # FileHeader { Version: 7 }
    data[9] = 8
    newer = tmp_path / "newer.ncu-rep"
    newer.write_bytes(bytes(data))
    with pytest.warns(UnknownLayoutWarning, match="format version 8"):
        launches = read_launches(newer)
    with reading_with(NCU_REPORT_READER):
        assert launches == read_launches(newer)


def test_an_unknown_version_without_ncu_report_is_one_paragraph_naming_it(
    corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ncuflow.read import reportfile

    def missing() -> None:
        raise ReportError("Cannot read Nsight Compute reports: the Python module ncu_report is not importable.")

    monkeypatch.setattr(reportfile, "import_ncu_report", missing)
    data = bytearray((corpus_dir / SMALL).read_bytes())
    data[9] = 9
    newer = tmp_path / "newer.ncu-rep"
    newer.write_bytes(bytes(data))
    with pytest.raises(ReportError) as caught:
        read_launches(newer)
    text = str(caught.value)
    assert str(newer) in text and "format version 9" in text and "pip install ncu-report" in text
    assert len(text.splitlines()) == 1


def test_range_results_are_a_layout_read_with_ncu_report(corpus_dir: Path, tmp_path: Path) -> None:
    original = (corpus_dir / SMALL).read_bytes()
    entry = b"\x08\x01"  # a RangeResult { ThreadID: 1 }
    payload = struct.pack("<I", len(entry)) + entry
    block = b"\x38\x01\x28" + varint_bytes(len(payload))  # NumRangeResults 1, PayloadSize
    ranged = tmp_path / "ranged.ncu-rep"
    ranged.write_bytes(original + struct.pack("<I", len(block)) + block + payload)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            read_launches(ranged)
        except ReportError as error:  # ncu_report may refuse what it was given
            assert str(ranged) in str(error)
    assert any(issubclass(w.category, UnknownLayoutWarning) and "range results" in str(w.message) for w in caught)


def test_caps_on_the_string_table_and_the_entries(corpus_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reportformat, "MAX_STRINGS", 100)
    with pytest.raises(ReportError, match="string table holds more than 100 names"):
        read_launches(corpus_dir / SMALL)
    monkeypatch.setattr(reportformat, "MAX_STRINGS", 10**9)
    monkeypatch.setattr(reportformat, "MAX_ENTRIES", 1)
    with pytest.raises(ReportError, match="more than 1 entries"):
        read_launches(corpus_dir / SOURCE)


def test_a_cut_report_warns_once_naming_its_damage(corpus_dir: Path, tmp_path: Path) -> None:
    original = (corpus_dir / SOURCE).read_bytes()
    cut = tmp_path / "cut.ncu-rep"
    cut.write_bytes(original[: int(len(original) * 0.6)])
    with pytest.warns(DamagedActionWarning) as caught:
        launches = read_launches(cut)
    assert 0 < len(launches) < 105 and len(caught) == 1


def test_without_protobuf_reports_are_read_with_ncu_report(corpus_dir: Path) -> None:
    """The GPU host's profiling path has no protobuf: reading falls back to ncu_report, silently."""
    program = (
        "import sys, warnings\n"
        "sys.modules['google.protobuf'] = None\n"
        "warnings.simplefilter('error')\n"
        "from ncuflow.read.extract import read_launches\n"
        "from ncuflow.read.readers import reads_the_file\n"
        f"launches = read_launches({str(corpus_dir / SMALL)!r})\n"
        "assert not reads_the_file() and 'google.protobuf' not in [m for m in sys.modules if sys.modules[m]]\n"
        "print(len(launches), launches[0].values['duration_ns'])\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    expected = read_launches(corpus_dir / SMALL)
    assert done.stdout.split() == ["2", str(expected[0].values["duration_ns"])]


NEW_FIELDS = ("num_cmdlist_results", "num_graph_results", "num_graphs")  # block header fields 8-10 (ncu 2025.3 on)


def test_the_block_header_fields_of_ncu_2025_3_are_read_natively(corpus_dir: Path, tmp_path: Path) -> None:
    """ncu 2025.3 on writes NumCmdlistResults, NumGraphResults and NumGraphs (fields 8-10) after
    NumRangeResults; a report carrying them as 0 (every block, made here from a corpus report) is read
    by ncuflow's reader, no fallback, and reads as NVIDIA's reader reads it."""
    from analysis.report_edit import block_fields_set
    from ncuflow.read.fileaction import iter_file_actions
    from ncuflow.read.schema import messages

    target = tmp_path / "ncu-2025.3.ncu-rep"
    assert block_fields_set(corpus_dir / SOURCE, target, **dict.fromkeys(NEW_FIELDS, 0)) == 105
    schema = messages()
    data = target.read_bytes()
    (length,) = struct.unpack_from("<I", data, 4)
    (header_length,) = struct.unpack_from("<I", data, 8 + length)
    header = schema.block_header.FromString(data[12 + length:12 + length + header_length])
    assert all(header.HasField(name) for name in NEW_FIELDS)  # written, even as 0
    assert sum(1 for _ in iter_file_actions(target)) == 105  # ncuflow's own reader: no UnknownLayout
    launches, warned = _read(target)
    assert not warned
    with reading_with(NCU_REPORT_READER):
        reference = read_launches(target)
    assert [(x.kernel, x.values, x.breakdown, x.nvidia_sol) for x in launches] == [
        (x.kernel, x.values, x.breakdown, x.nvidia_sol) for x in reference]


@pytest.mark.parametrize("field", NEW_FIELDS)
def test_entries_that_are_no_launches_are_a_layout_left_to_ncu_report(corpus_dir: Path, tmp_path: Path,
                                                                     field: str) -> None:
    from analysis.report_edit import block_fields_set
    from ncuflow.read.fileaction import iter_file_actions

    target = tmp_path / "graphs.ncu-rep"
    block_fields_set(corpus_dir / SMALL, target, **{field: 1})
    with pytest.raises(reportformat.UnknownLayout, match=f"block header field {field}"):
        next(iter_file_actions(target))
