"""Issue 31, ``phases-record`` against servers that misbehave: each a process of its own under
the fault suite's limits (2 GiB of address space, 60 s), every completed record kept.

A server that trickles a byte every half second, streams empty events or text forever, never
answers, sends a 100 MB line or an endless one; 1,000 requests in flight; Ctrl-C and
``kill -9`` in the middle of a recording. Each ends within its bound, in bounded memory,
without a traceback, and the trace holds every request that ended (the others' records are
one JSON line each, whatever the bad one did)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ncuflow.phases.detect import load_traces
from tests import sse_server as sse
from tests.hostile import FIGURES, MEMORY_LIMIT, REPO, figures_line, run_limited

SEEN: Counter[str] = Counter()  # records kept and lost, slowest bounded request


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    print(figures_line("recorder figures", SEEN), figures_line("fault suite so far", FIGURES))


def _records(path: Path) -> list[dict[str, object]]:
    return sse.trace_records(path)


def _record(url: str, out: Path, *extra: str, requests: int = 4, concurrency: int = 2, case: str = "") -> tuple:
    ran = run_limited(["phases-record", url, "--model", "m", "--out", str(out), "--requests", str(requests),
                       "--concurrency", str(concurrency), "--max-tokens", "8", *extra], case=case)
    return ran, _records(out)


def _count(records: list[dict[str, object]], expected_good: int) -> None:
    good = sum("error" not in r for r in records)
    SEEN["records_kept"] += good
    SEEN["records_lost"] += expected_good - good


@pytest.mark.parametrize(
    ("behaviour", "said"),
    [
        (sse.TRICKLE, "cut off after 3 s"),
        (sse.EMPTY_FOREVER, "cut off after 3 s"),
        (sse.SILENT, "cut off after 3 s"),
        (sse.ENDLESS_LINE, "an event line longer than 1 MiB"),
        (sse.HUGE_LINE, "an event line longer than 1 MiB"),
        (sse.TEXT_FOREVER, "more than 80 text chunks for --max-tokens 8"),
    ],
)
def test_a_server_that_never_ends_a_request_is_cut_off_at_its_bound(tmp_path: Path, behaviour: str,
                                                                     said: str) -> None:
    """The bad request fails with what it did; the three others are recorded; the command ends
    within --timeout (3 s) of the bad request's start, in bounded memory."""
    out = tmp_path / "trace.jsonl"
    with sse.SseServer(lambda i: behaviour if i == 1 else sse.good_reply()) as server:
        ran, records = _record(server.url, out, "--timeout", "3", case=f"recorder {behaviour}")
    assert ran.code == 1 and not ran.traceback and not ran.timed_out, ran.output
    assert ran.seconds < 10 and ran.peak_mib < 200, (ran.seconds, ran.peak_mib)
    failed = [r for r in records if "error" in r]
    assert len(records) == 4 and len(failed) == 1 and said in str(failed[0]["error"]), records
    assert "3 requests recorded, 1 failed" in ran.stdout and f"first failure: {failed[0]['error']}" in ran.stderr
    _count(records, 3)
    SEEN["slowest_bounded_request_s_x100"] = max(SEEN["slowest_bounded_request_s_x100"], int(ran.seconds * 100))


@pytest.mark.slow
def test_a_thousand_requests_in_flight(tmp_path: Path) -> None:
    """--concurrency 1000 under 2 GiB of address space (8-MiB thread stacks needed 8 GiB: "can't
    start new thread"); the server sees 1,000 requests at once."""
    out = tmp_path / "trace.jsonl"
    with sse.SseServer(lambda i: sse.good_reply(8, step_s=0.3)) as server:
        ran, records = _record(server.url, out, "--timeout", "50", requests=1000, concurrency=1000,
                               case="recorder --concurrency 1000")
    assert ran.code == 0 and not ran.traceback, ran.output[-2000:]
    assert len(records) == 1000 and all("error" not in r for r in records)
    _count(records, 1000)
    SEEN["concurrency_1000_peak_mib"] = int(ran.peak_mib)
    (trace,) = load_traces(out)
    assert len(trace.requests) == 1000


def test_more_workers_than_the_memory_limit_allows_is_one_paragraph_before_any_request(tmp_path: Path) -> None:
    """--concurrency 4096 under 2 GiB of address space: 4096 stacks of 512 KiB do not fit."""
    out = tmp_path / "trace.jsonl"
    with sse.SseServer(lambda i: sse.good_reply(4, step_s=0.5)) as server:
        ran = run_limited(["phases-record", server.url, "--model", "m", "--out", str(out), "--requests", "4096",
                           "--concurrency", "4096", "--max-tokens", "8", "--timeout", "50"],
                          case="recorder --concurrency 4096")
        arrived = server.arrived
    if ran.code == 0:  # a machine whose limits allow it: then every request is recorded
        assert len(_records(out)) == 4096
        return
    assert ran.paragraph() and "Could start only" in ran.stderr and "Nothing was sent" in ran.stderr, ran.output
    assert arrived == 0 and not out.exists()  # refused before the output was touched


def _recording(url: str, out: Path, requests: int, concurrency: int) -> subprocess.Popen[str]:
    import resource

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    return subprocess.Popen(
        [sys.executable, "-m", "ncuflow", "phases-record", url, "--model", "m", "--out", str(out), "--requests",
         str(requests), "--concurrency", str(concurrency), "--max-tokens", "40"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=limits,
    )


def _wait_for_lines(out: Path, count: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while not (out.exists() and out.read_text().count("\n") >= count):
        assert process.poll() is None and time.monotonic() < deadline, "the recorder ended or stalled early"
        time.sleep(0.02)


@pytest.mark.parametrize("how", ["ctrl-c", "kill -9"])
def test_an_interrupted_recording_keeps_every_request_that_ended(tmp_path: Path, how: str) -> None:
    """Four fast requests end, then four that take 40 s each are in flight: Ctrl-C returns at
    once (it waited for all of them before: 27 s, and wrote nothing) and kill -9 loses nothing
    either; the four records are whole JSON lines that phases reads."""
    out = tmp_path / "trace.jsonl"
    with sse.SseServer(lambda i: sse.good_reply(8) if i < 4 else sse.good_reply(40, step_s=1.0)) as server:
        process = _recording(server.url, out, requests=8, concurrency=4)
        _wait_for_lines(out, 4, process)
        time.sleep(0.3)  # the slow four are streaming
        started = time.monotonic()
        process.send_signal(signal.SIGINT if how == "ctrl-c" else signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=30)
        seconds = time.monotonic() - started
    FIGURES["cases"] += 1
    FIGURES["tracebacks"] += "Traceback" in stdout + stderr
    records = _records(out)
    assert len(records) == 4 and all("error" not in r and len(r["chunk_times"]) == 8 for r in records)
    _count(records, 4)
    if how == "ctrl-c":
        assert process.returncode == 130 and "Traceback" not in stderr, stderr
        assert "interrupted: 4 requests recorded, 0 failed" in stderr and "in flight were left out" in stderr
        assert seconds < 2, seconds
        SEEN["ctrl_c_return_ms"] = int(seconds * 1000)
    else:
        assert process.returncode == -signal.SIGKILL
    (trace,) = load_traces(out)
    assert len(trace.requests) == 4


def test_a_concurrency_beyond_the_open_file_limit_is_refused_before_any_request(tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    with sse.SseServer(lambda i: sse.good_reply()) as server:
        argv = [sys.executable, "-m", "ncuflow", "phases-record", server.url, "--model", "m", "--out", str(out),
                "--concurrency", "2000", "--requests", "2000"]
        ran = run_limited([], command=["sh", "-c", 'ulimit -n 256 && exec "$0" "$@"', *argv],
                          case="recorder beyond ulimit -n")
        arrived = server.arrived
    assert ran.paragraph() and "--concurrency 2000 needs 2064 open files; this process may open 256" in ran.stderr
    assert arrived == 0 and not out.exists()


def test_a_recorder_output_that_is_a_link_or_special(tmp_path: Path) -> None:
    """The trace is written where a link leads; a FIFO or /dev/null is refused before a request."""
    real = tmp_path / "real.jsonl"
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with sse.SseServer(lambda i: sse.good_reply()) as server:
        ran, _ = _record(server.url, link, requests=2, case="recorder output a link")
        assert ran.code == 0 and link.is_symlink() and len(_records(real)) == 2
        for target in (fifo, Path("/dev/null")):
            refused = run_limited(["phases-record", server.url, "--model", "m", "--out", str(target)],
                                  case="recorder output special")
            assert refused.paragraph() and "not a regular file" in refused.stderr, refused.output


def test_a_disk_that_fills_mid_recording_keeps_what_was_written(tmp_path: Path) -> None:
    """One page free on a real tmpfs: the records that fit are whole lines phases reads (the line
    the full disk cut is removed), the command says the disk is full, what the trace holds, and stops."""
    from tests.test_faults_io import fill, tmpfs

    with tmpfs(tmp_path / "fs") as fs, sse.SseServer(lambda i: sse.good_reply(4, step_s=0.001)) as server:
        spare = fs / "spare"
        spare.write_bytes(b"\0" * 4096)
        filler = fill(fs)
        spare.unlink()  # 4 KiB left: about 20 records of 60
        out = fs / "trace.jsonl"
        ran = run_limited(["phases-record", server.url, "--model", "m", "--out", str(out), "--requests", "60",
                           "--concurrency", "4", "--max-tokens", "4"], case="recorder on a full disk")
        assert ran.paragraph() and "full" in ran.stderr and str(out) in ran.stderr, ran.output
        assert out.read_text().endswith("\n")  # the line the disk cut was removed: nothing partial is left
        whole = len(_records(out))
        assert 5 < whole < 60
        assert f"holds the {whole} request(s) recorded before" in ran.stderr, ran.stderr
        assert "earlier results are intact" not in ran.stderr  # what it said, untrue, before
        traces = load_traces(out)
        assert sum(len(t.requests) for t in traces) == whole
        SEEN["full_disk_records_kept"] = whole
        filler.unlink()
