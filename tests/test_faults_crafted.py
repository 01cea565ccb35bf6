"""Fault injection, round four (issue 38): crafted reports, built from real ones in the test's folder.

Every case runs the real command line under the fault suite's limits (``tests.hostile.run_limited``:
60 s, a 2 GiB address space) and must end in a result with a note or one paragraph: no
traceback, no hang, memory bounded by the caps checked before any work.

- a block counting 25 M zero-length results (100 MB, sparse), and the same as a ``.ncu-repz``
  padded with a skippable frame; 1.9 M of them (under the cap: skipped, counted); a block
  counting 1.5 M entries in 8 bytes (corrupted: the blocks before it are read);
- 80 MiB of zeros, or garbage, after the last block;
- a ``.ncu-repz`` expanding 3,000× (the cap is 100× as stated), one cut short;
- every double metric set to 1e308, or to -1e6 (values out of their kind's range: missing with a note);
- a 1.2 GB report where 1 GiB of address space is allowed (copied, then too large to map: one paragraph).

The figures are printed at the end of the module (``pytest -s``) for docs/reliability.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ncuflow.errors import ReportError
from ncuflow.read import reportformat, zstdframes
from ncuflow.read.sanity import RANGES
from tests import crafted
from tests.hostile import FIGURES, Ran, figures_line, run_limited

SMALL = "yzwang2000__cudaCode__profile.ncu-rep"  # 2 launches, 104 KB
LARGE = "jestes15__EE384_FinalProject__profile_output.ncu-rep"  # 18 launches, 3.6 MB
MIB = 2**20


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    print(figures_line("fault suite so far", FIGURES))


def _refused(ran: Ran, *words: str) -> None:
    assert ran.paragraph(), ran.output[-3000:]
    assert ran.code == 2 and len(ran.stderr.strip().splitlines()) == 1, ran.output[-3000:]
    for word in words:
        assert word in ran.stderr, ran.stderr


def _read_with_note(ran: Ran, *words: str) -> None:
    assert ran.code == 0 and not ran.traceback and not ran.timed_out, ran.output[-3000:]
    for word in words:
        assert word in ran.output, ran.output[-3000:]


def test_a_block_counting_25_million_empty_results_is_refused_before_walking(corpus_dir: Path,
                                                                           tmp_path: Path) -> None:
    plain = crafted.with_empty_results(corpus_dir / SMALL, tmp_path / "many.ncu-rep", 25_000_000)
    packed = crafted.compressed(plain, tmp_path / "many.ncu-repz", padding=400_000)
    assert plain.stat().st_size > 100 * MIB // 1.1 and packed.stat().st_size < 500_000
    for command in ("classify", "summary"):
        ran = run_limited([command, str(plain)], case="crafted:25M empty results")
        _refused(ran, f"more than {reportformat.MAX_ENTRIES:,} entries")
        assert ran.seconds < 20 and ran.peak_mib < 600, (ran.seconds, ran.peak_mib)
        ran = run_limited([command, str(packed)], case="crafted:25M empty results, repz padded")
        _refused(ran, f"more than {zstdframes.MAX_EXPANSION} times its size")


def test_empty_results_under_the_cap_are_counted_as_damaged_not_read(corpus_dir: Path, tmp_path: Path) -> None:
    report = crafted.with_empty_results(corpus_dir / SMALL, tmp_path / "some.ncu-rep", 1_900_000)
    ran = run_limited(["classify", "--json", str(report)], case="crafted:1.9M empty results")
    _read_with_note(ran, "1,900,000 actions", "damaged")
    assert len(json.loads(ran.stdout)) == 2
    assert ran.peak_mib < 1024, ran.peak_mib


def test_a_block_counting_more_entries_than_its_payload_holds_is_corrupted(corpus_dir: Path,
                                                                           tmp_path: Path) -> None:
    report = crafted.with_lying_block(corpus_dir / SMALL, tmp_path / "lying.ncu-rep", 1_500_000)
    ran = run_limited(["classify", str(report)], case="crafted:a block counting more than its payload holds")
    _read_with_note(ran, "is corrupted: it counts 1,500,000 entries, more than its 8 bytes", "its 2 actions")


@pytest.mark.parametrize("kind", ["zeros", "garbage"])
def test_bytes_after_the_last_block_are_named_and_left_out(corpus_dir: Path, tmp_path: Path, kind: str) -> None:
    report = crafted.with_trailing_zeros(corpus_dir / SMALL, tmp_path / "padded.ncu-rep", 80 * MIB)
    if kind == "garbage":
        with report.open("r+b") as handle:
            handle.seek(-1000, 2)
            handle.write(b"\x07" * 10)
    for command in ("classify", "summary"):
        ran = run_limited([command, str(report)], case=f"crafted:80 MiB of trailing {kind}")
        _read_with_note(ran, f"are {kind}, no block ncu writes: left out", "its 2 actions")
        assert ran.seconds < 20, ran.seconds  # 4 bytes at a time took ~0.85 s a MiB


def test_a_report_larger_than_the_memory_allowed_is_one_paragraph(corpus_dir: Path, tmp_path: Path) -> None:
    """Above ``MAX_READ_BYTES`` the report is copied to a temporary file and mapped (never the user's
    file: SIGBUS); where the address space allowed is smaller, one paragraph, not a MemoryError."""
    report = crafted.with_trailing_zeros(corpus_dir / SMALL, tmp_path / "large.ncu-rep", 1200 * MIB)
    assert report.stat().st_size > reportformat.MAX_READ_BYTES
    ran = run_limited(["classify", str(report)], memory=1 << 30, case="crafted:1.2 GB report, 1 GiB allowed")
    _refused(ran, "does not fit in the memory this process may use")
    assert "MemoryError" not in ran.output


def test_a_large_report_read_through_its_copy_is_the_report(corpus_dir: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from ncuflow.read.extract import read_launches

    whole = read_launches(corpus_dir / LARGE)
    monkeypatch.setattr(reportformat, "MAX_READ_BYTES", 1 * MIB)
    assert (corpus_dir / LARGE).stat().st_size > reportformat.MAX_READ_BYTES
    assert read_launches(corpus_dir / LARGE) == whole


def test_a_compressed_report_is_held_to_100_times_its_size(corpus_dir: Path, tmp_path: Path) -> None:
    source = (corpus_dir / SMALL).read_bytes()
    bomb = crafted.bomb(tmp_path / "bomb.ncu-repz", source, 60 * MIB)
    assert bomb.stat().st_size * zstdframes.MAX_EXPANSION < 60 * MIB  # accepted under "100x plus 64 MiB"
    ran = run_limited(["classify", str(bomb)], case="crafted:repz expanding 3,000x")
    _refused(ran, f"more than {zstdframes.MAX_EXPANSION} times its size")
    assert ran.seconds < 20
    # 160x its content's frame, 20x the file with a skippable frame of padding: the padding is no size
    padded = crafted.bomb(tmp_path / "padded.ncu-repz", source, 3 * MIB, padding=150_000)
    content_frame = padded.stat().st_size - 150_008
    assert zstdframes.MAX_EXPANSION * content_frame < 3 * MIB and 25 * padded.stat().st_size > 3 * MIB
    ran = run_limited(["classify", str(padded)], case="crafted:repz padded by a skippable frame")
    _refused(ran, f"more than {zstdframes.MAX_EXPANSION} times its size")


def test_a_compressed_report_cut_short_is_said_to_be_cut(corpus_dir: Path, tmp_path: Path) -> None:
    whole = crafted.compressed(corpus_dir / SMALL, tmp_path / "whole.ncu-repz")
    for cut in (100, whole.stat().st_size // 2, whole.stat().st_size - 3):
        report = crafted.compressed(corpus_dir / SMALL, tmp_path / f"cut{cut}.ncu-repz", cut=cut)
        ran = run_limited(["classify", str(report)], case="crafted:repz cut short")
        _refused(ran, "is cut off", "ends inside zstd frame 1")
        assert "b''" not in ran.stderr
    _read_with_note(run_limited(["classify", str(whole)], case="crafted:repz whole"), "kernel_A")


@pytest.mark.parametrize("value", [1e308, -1e6])
def test_metrics_out_of_range_are_missing_with_a_note_never_a_verdict(corpus_dir: Path, tmp_path: Path,
                                                                      value: float) -> None:
    report = tmp_path / "crafted.ncu-rep"
    assert crafted.with_metric_values(corpus_dir / SMALL, report, value) == 2
    ran = run_limited(["classify", "--json", str(report)], case=f"crafted:doubles {value:g}")
    _read_with_note(ran)
    for launch in json.loads(ran.stdout):
        assert launch["bound"] == "unknown" and launch["duration_ns"] is None, launch
        notes = " ".join(f"{field}: {note}" for field, note in launch["notes"].items())
        assert f"stored as {value:,.6g}" in notes and "duration_ns" in notes and "breakdown" in notes
    for argv in (["summary", str(report)], ["export", str(report), "-o", str(tmp_path / "x.parquet")],
                 ["roofline", str(report), "-o", str(tmp_path / "r.png")], ["compare", str(report), str(report)]):
        ran = run_limited(argv, case=f"crafted:doubles {value:g}, {argv[0]}")
        assert not ran.traceback and not ran.timed_out and ran.code in (0, 2), ran.output[-3000:]
        assert "-18,000,000" not in ran.output and "-1,000,000" not in ran.output
        assert ran.code == 0 or ran.paragraph()


def test_the_ranges_hold_every_value_of_the_corpus(corpus_dir: Path) -> None:
    """The range checks leave real measurements alone: no corpus launch gets a range note."""
    from ncuflow.read.extract import read_launches

    kinds = {what for _, _, _, what in RANGES.values()}
    for path in sorted(corpus_dir.glob("*.ncu-rep")):
        try:
            launches = read_launches(path)
        except ReportError:  # a report the reader refuses is another test's
            continue
        for launch in launches:
            ranged = [n for n in launch.notes.values() if any(n.startswith(k) for k in kinds) and "outside" in n]
            assert not ranged and "breakdown" not in launch.notes, (path, ranged)
