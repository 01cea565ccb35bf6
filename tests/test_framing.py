"""``ncuflow.read.framing``: is a report's framing whole? On every real report of the corpus and the
committed H200 store, and on copies of them cut short at every kind of place."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from ncuflow.read.framing import check_framing, framing_problem, payload_size
from tests.conftest import REFERENCE_DIR, corpus_reports

REPORTS = corpus_reports() + sorted(REFERENCE_DIR.rglob("report.ncu-rep"))
SMALL = "yzwang2000__cudaCode__profile.ncu-rep"


def _block_ends(data: bytes) -> list[int]:
    """Where each block of a whole report ends (read here independently of the module: length,
    header, payload size from the header's field 5)."""
    at = 8 + struct.unpack_from("<I", data, 4)[0]
    ends = [at]
    while at < len(data):
        length = struct.unpack_from("<I", data, at)[0]
        at += 4 + length + payload_size(data[at + 4: at + 4 + length])
        ends.append(at)
    return ends


@pytest.mark.parametrize("report", REPORTS, ids=lambda p: p.name if p.parent.name != p.name else str(p))
def test_every_real_report_is_whole(report: Path) -> None:
    framing = check_framing(report)
    assert framing.verdict == "whole", framing
    assert framing.blocks >= 1 and framing.size == report.stat().st_size and framing_problem(report) is None
    assert check_framing(report, entries=True) == framing  # every entry fits its block: nothing overruns


def test_the_corpus_and_the_committed_store_are_all_checked(corpus_dir: Path) -> None:
    assert len(REPORTS) >= 40 + 49  # 40 corpus reports (ncu 2019 to 2025) and the 49 runs of the H200 store


def test_a_copy_cut_anywhere_inside_a_block_is_cut_and_says_where(corpus_dir: Path, tmp_path: Path) -> None:
    data = (corpus_dir / SMALL).read_bytes()
    ends = _block_ends(data)
    assert ends[-1] == len(data) and len(ends) == 14
    cuts = sorted({*range(5, 12), *(e + d for e in ends[:-1] for d in (1, 3, 4, 5, 40)),
                   *(e - 1 for e in ends[1:]), *range(12, len(data), 997)} - set(ends))
    copy = tmp_path / "cut.ncu-rep"
    for size in cuts:
        copy.write_bytes(data[:size])
        framing = check_framing(copy)
        assert framing.verdict == "cut", (size, framing)
        whole = sum(1 for e in ends[1:] if e <= size)
        assert framing.blocks == whole, (size, framing)
        problem = framing_problem(copy)
        assert problem is not None and problem.startswith("it is cut short: the file") and f"({size} bytes)" in problem
    for size in ends:  # cut exactly between two blocks: whole by its framing (the module says so)
        copy.write_bytes(data[:size])
        assert check_framing(copy).verdict == "whole"


def test_what_is_no_report_or_not_this_layout(tmp_path: Path) -> None:
    empty = tmp_path / "empty.ncu-rep"
    empty.write_bytes(b"")
    assert framing_problem(empty) == "it is empty (0 bytes)"
    text = tmp_path / "text.ncu-rep"
    text.write_text("version https://git-lfs.github.com/spec/v1\n")
    assert "report signature" in (framing_problem(text) or "")
    odd = tmp_path / "odd.ncu-rep"  # the signature, a file header, then a block header of an unknown wire type
    odd.write_bytes(b"NVR\x00" + struct.pack("<I", 2) + b"\x08\x07" + struct.pack("<I", 2) + b"\x0f\x00")
    assert check_framing(odd).verdict == "unknown" and framing_problem(odd) is None  # the reader decides
    huge = tmp_path / "huge.ncu-rep"  # a header length no report has
    huge.write_bytes(b"NVR\x00" + struct.pack("<I", 2) + b"\x08\x07" + struct.pack("<I", 2**31))
    assert check_framing(huge).verdict == "unknown"
    assert check_framing(Path("/dev/zero")).verdict == "unknown"  # never read: not a regular file
    assert check_framing(tmp_path / "absent.ncu-rep").verdict == "unknown"
