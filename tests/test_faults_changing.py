"""Fault injection, round four (issue 38): files that change while ncuflow reads them.

- a report overwritten in place again and again (``shutil.copyfile``, as ``cp`` and
  ``ncu --force-overwrite`` do: emptied, then written) while ``classify`` and ``summary`` read
  it: a mapped file killed 4 of 40 runs with SIGBUS (exit 135, no message); each run now ends
  in a result or one paragraph;
- the same through ``--reader ncu_report`` (NVIDIA's module reads the file itself): its
  identity compared before and after, as ncuflow's reader does;
- a report rewritten between the reader's look at it and its reading: "changed while it was read";
- a JSONL trace that gains a line, or whose request turns into an error, between ``phases``'
  two passes: the lines the first pass found, or one paragraph (an ``IndexError`` before).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ncuflow.errors import ReportError
from ncuflow.phases import TraceError
from ncuflow.phases.parse import jsonl
from ncuflow.read import reportformat
from ncuflow.read.extract import read_launches
from tests.hostile import FIGURES, figures_line, run_limited

LARGE = "jestes15__EE384_FinalProject__profile_output.ncu-rep"  # 3.6 MB
OTHER = "AveryClapp__ESMM-Research__profile.ncu-rep"  # 2.9 MB
SIGBUS_EXIT = -signal.SIGBUS
WRITER = """
import shutil, sys, time
a, b, target, pause = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
i = 0
while True:
    shutil.copyfile(a if i % 2 else b, target)
    i += 1
    time.sleep(pause)
"""

READ_AGAIN_AND_AGAIN = """
import sys, warnings
from ncuflow.errors import ReportError
from ncuflow.read.extract import read_launches
warnings.simplefilter("ignore")
for _ in range(100):
    try:
        read_launches(sys.argv[1])
    except ReportError:
        pass  # empty, changed while read, cut: each one paragraph
    except Exception as error:
        print("unexpected", type(error).__name__, error)
"""


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    print(figures_line("fault suite so far", FIGURES))


@pytest.mark.parametrize("pause", [0.0, 0.003])
def test_a_report_overwritten_while_it_is_read_never_kills_the_reader(corpus_dir: Path, tmp_path: Path,
                                                                       pause: float) -> None:
    target = tmp_path / "live.ncu-rep"
    shutil.copyfile(corpus_dir / LARGE, target)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(corpus_dir / LARGE), str(corpus_dir / OTHER),
                               str(target), str(pause)])
    codes = []
    try:
        # one process reading it 100 times: the mapped reader died of SIGBUS in each of 3 such runs
        loop = run_limited([], command=[sys.executable, "-c", READ_AGAIN_AND_AGAIN, str(target)],
                           case=f"changing:report overwritten in place, read 100 times, pause {pause}")
        assert loop.code == 0 and loop.code != SIGBUS_EXIT, loop.output[-2000:]
        assert "unexpected" not in loop.stdout, loop.stdout
        for number in range(8):
            command = ("classify", "summary")[number % 2]
            reader = ("ncuflow", "ncu_report")[number // 4]  # NVIDIA's module reads the file itself
            ran = run_limited([command, "--reader", reader, str(target)],
                              case=f"changing:report overwritten in place, pause {pause}, {reader}")
            codes.append(ran.code)
            assert ran.code != SIGBUS_EXIT and "Bus error" not in ran.output, ran.output[-2000:]
            assert not ran.traceback and not ran.timed_out and ran.code in (0, 2), ran.output[-3000:]
            assert ran.code == 0 or (ran.paragraph() and len(ran.stderr.strip().splitlines()) == 1), ran.stderr
    finally:
        writer.kill()
        writer.wait()
    assert codes


class _WrittenAfterTheFirstLook:
    """``os`` as ``reportformat`` sees it, except that the file is rewritten in place right after its
    first ``fstat``: a real change of the file between the reader's look at it and its reading."""

    def __init__(self, target: Path, other: bytes) -> None:
        self.target, self.other, self.done = target, other, False

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def fstat(self, descriptor: int) -> os.stat_result:
        status = os.fstat(descriptor)
        if not self.done:
            self.done = True
            with self.target.open("r+b") as handle:
                handle.truncate(0)
                handle.write(self.other)
        return status


@pytest.mark.parametrize("copied", [False, True])
def test_a_report_rewritten_while_it_is_read_is_one_paragraph(corpus_dir: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch, copied: bool) -> None:
    """Read into memory, or (above ``MAX_READ_BYTES``) copied to a temporary file: either way compared."""
    target = tmp_path / "live.ncu-rep"
    shutil.copyfile(corpus_dir / LARGE, target)
    if copied:
        monkeypatch.setattr(reportformat, "MAX_READ_BYTES", 1 << 20)
    monkeypatch.setattr(reportformat, "os", _WrittenAfterTheFirstLook(target, (corpus_dir / OTHER).read_bytes()))
    with pytest.raises(ReportError) as caught:
        read_launches(target)
    text = str(caught.value)
    assert "changed while it was read" in text and str(target) in text and len(text.splitlines()) == 1
    monkeypatch.undo()
    assert len(read_launches(target)) == len(read_launches(corpus_dir / OTHER))  # read again once written


def _trace(path: Path, requests: int) -> None:
    lines = [f'{{"submit_time": {i}.0, "chunk_times": [{i}.5, {i}.75], "run": "r"}}' for i in range(requests)]
    path.write_text("\n".join(lines) + "\n")


def _changing_source(path: Path, change: str) -> jsonl.LineSource:
    """The trace's lines, the file changed once the first pass has read them all."""
    calls = 0

    def lines() -> Iterator[jsonl.Line]:
        nonlocal calls
        calls += 1
        with path.open("rb") as handle:
            yield from jsonl.file_lines(path, handle)()
        if calls == 1 and change == "appended":
            with path.open("a") as out:
                out.write('{"submit_time": 99.0, "chunk_times": [99.5], "run": "r"}\n')
        elif calls == 1:
            text = path.read_text().splitlines()
            text[1] = '{"submit_time": 1.0, "chunk_times": [1.5], "error": "timeout"}'
            path.write_text("\n".join(text) + "\n")

    def source() -> Iterator[jsonl.Line]:
        return lines()

    return source


def test_a_trace_that_gains_a_line_between_the_passes_is_read_as_the_first_pass_found_it(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    _trace(path, 5)
    (trace,) = jsonl.parse_request_jsonl(path, _changing_source(path, "appended"))
    assert len(trace.requests) == 5


def test_a_trace_whose_request_changes_between_the_passes_is_one_paragraph(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    _trace(path, 5)
    with pytest.raises(TraceError) as caught:
        jsonl.parse_request_jsonl(path, _changing_source(path, "rewritten"))
    assert "changed while it was read" in str(caught.value)


def test_phases_on_a_trace_being_written_ends_in_a_result_or_a_paragraph(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    _trace(path, 20_000)
    appender = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "i = 20000\n"
        "while True:\n"
        "    with open(sys.argv[1], 'a') as out:\n"
        "        out.write('{\"submit_time\": %d.0, \"chunk_times\": [%d.5], \"run\": \"r\"}\\n' % (i, i))\n"
        "    i += 1\n"), str(path)])
    try:
        for _ in range(2):  # the file grows ~2 MB a second: a first pass chasing its end never ended
            ran = run_limited(["phases", str(path)], case="changing:JSONL trace appended to")
            assert not ran.traceback and not ran.timed_out and ran.code in (0, 2), ran.output[-3000:]
            assert ran.seconds < 30, ran.seconds
            assert ran.code == 0 or ran.paragraph()
    finally:
        appender.kill()
        appender.wait()
