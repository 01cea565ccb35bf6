"""Issue 38, ``phases-record``'s secrets, values and output: each case the real command line under
the fault suite's limits (2 GiB of address space, 60 s), against ``tests.sse_server`` on loopback.

Before: a server that echoed the request's headers (a 401 page, an SSE ``error`` event) put the API
key verbatim into the trace and the "first failure" line; ``--api-key`` showed in ``ps``; a URL with
``user:pass@`` was refused with the password in the message; ``--timeout 1e10`` truncated ``--out``
to 0 bytes, then ``OverflowError``; a typo'd port truncated a 20-request trace to 2 error records;
``--out bench_results.jsonl`` overwrote a bench_serving result (anything starting with ``{"`` was
taken for an earlier trace); a request of 3.5 M chunks made a line ``phases`` refuses. Now: every
secret redacted in every output and stream, none in the process list; every value checked before
``--out`` is touched; the recorder replaces only its own trace (known by its header record), and
only with a recording that recorded something; each record within ``--max-record-bytes``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ncuflow.errors import NcuflowError
from ncuflow.phases.detect import load_traces
from ncuflow.phases.parse.jsonl import MAX_LINE_BYTES
from ncuflow.phases.recorder import MAX_RECORD_BYTES, RecorderSettings
from ncuflow.phases.recorder_endpoint import parse_endpoint
from ncuflow.phases.recorder_secrets import REDACTED
from ncuflow.phases.recorder_trace import TraceWriter, trace_header
from tests import sse_server as sse
from tests.hostile import FIGURES, REPO, figures_line, run_limited

# A key with the characters JSON and URLs quote: the server's echo quotes it, the redaction must follow.
KEY = 'sk-live"9f\\Q2-SECRET-7c1e0a'
QUOTED = (KEY, json.dumps(KEY)[1:-1], "SECRET-7c1e0a")  # as sent, as JSON quotes it, its tail alone
SEEN: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    print(figures_line("secrets and recorder output figures", SEEN), figures_line("fault suite so far", FIGURES))


def _no_secret(*texts: str) -> None:
    leaks = [form for form in QUOTED for text in texts if form in text]
    SEEN["secrets_leaked"] += len(leaks)
    assert not leaks, leaks


def _record(url: str, out: Path, *extra: str, env: dict[str, str] | None = None, requests: int = 2,
            case: str = "") -> object:
    return run_limited(["phases-record", url, "--model", "m", "--out", str(out), "--requests", str(requests),
                        "--concurrency", "1", "--max-tokens", "8", *extra], env=env, case=case)


def _key_file(tmp_path: Path) -> Path:
    path = tmp_path / "key"
    path.write_text(KEY + "\n")
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("echo", [sse.ECHO_401, sse.ECHO_EVENT])
@pytest.mark.parametrize("given", ["file", "environment"])
def test_a_server_that_echoes_the_key_puts_it_nowhere(tmp_path: Path, echo: str, given: str) -> None:
    """The headers come back in a 401 page or an SSE error event: the trace and both streams show
    the failure with the key and its Authorization value redacted."""
    out = tmp_path / "trace.jsonl"
    env = {**os.environ, "OPENAI_API_KEY": KEY} if given == "environment" else None
    extra = ("--api-key-file", str(_key_file(tmp_path))) if given == "file" else ()
    with sse.SseServer(lambda i: echo) as server:
        ran = _record(server.url, out, *extra, env=env, case=f"recorder echoes the key ({echo})")
    assert ran.code == 1 and not ran.traceback, ran.output
    _no_secret(out.read_text(), ran.stdout, ran.stderr)
    assert f"Authorization: Bearer {REDACTED}" in ran.stderr or f'"Authorization": "Bearer {REDACTED}"' in ran.stderr
    assert all(REDACTED in str(r["error"]) for r in sse.trace_records(out))
    SEEN["echo_cases"] += 1


def test_a_malformed_event_quoting_the_key_is_cut_after_the_key_is_replaced(tmp_path: Path) -> None:
    """The failure quotes 60 characters of a malformed event: the key is replaced before the cut, so
    not even its head survives."""
    out = tmp_path / "trace.jsonl"
    event = b"data: {not json " + KEY.encode() + b" and more}\n\n"
    with sse.SseServer(lambda i: sse.reply_with(event)) as server:
        ran = _record(server.url, out, "--api-key-file", str(_key_file(tmp_path)), requests=1,
                      case="recorder malformed event quoting the key")
    assert ran.code == 1 and not ran.traceback, ran.output
    _no_secret(out.read_text(), ran.output)
    assert "sk-live" not in out.read_text() + ran.output


def test_a_key_spelled_otherwise_and_cut_by_the_message_leaves_no_head(tmp_path: Path) -> None:
    """The server spells the key with JSON escapes (no form of it is in the line) and the message is
    cut to 300 characters in the middle of it: the head before the cut is replaced too."""
    out = tmp_path / "trace.jsonl"
    spelled = "".join(f"\\u{ord(c):04x}" for c in KEY)
    event = b'data: {"error": {"message": "' + b"x" * 285 + spelled.encode() + b'"}}\n\n'
    with sse.SseServer(lambda i: sse.reply_with(event)) as server:
        ran = _record(server.url, out, "--api-key-file", str(_key_file(tmp_path)), requests=1,
                      case="recorder key cut by the message")
    assert ran.code == 1 and not ran.traceback, ran.output
    (record,) = sse.trace_records(out)
    assert str(record["error"]).endswith(REDACTED + "…"), record
    assert KEY[:7] not in out.read_text() + ran.output


@pytest.mark.parametrize("given", ["file", "environment", "option"])
def test_the_key_is_not_in_the_process_list(tmp_path: Path, given: str) -> None:
    """/proc/PID/cmdline (what ps shows every user) of a running recorder: no key given by file or
    environment; the deprecated --api-key says it shows there."""
    out = tmp_path / "trace.jsonl"
    argv = [sys.executable, "-m", "ncuflow", "phases-record", "", "--model", "m", "--out", str(out), "--requests",
            "1", "--max-tokens", "8", "--timeout", "20"]
    extra = {"file": ["--api-key-file", str(_key_file(tmp_path))], "environment": [], "option": ["--api-key", KEY]}
    env = {**os.environ, "OPENAI_API_KEY": KEY} if given == "environment" else {**os.environ, "OPENAI_API_KEY": ""}
    with sse.SseServer(lambda i: sse.SILENT) as server:
        argv[4] = server.url
        process = subprocess.Popen([*argv, *extra[given]], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while server.arrived == 0 and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert server.arrived == 1, "the recorder did not send its request"
            cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode(errors="replace")
        finally:
            process.send_signal(signal.SIGINT)
            stdout, stderr = process.communicate(timeout=30)
    FIGURES["cases"] += 1
    FIGURES["tracebacks"] += "Traceback" in stdout + stderr
    assert "Traceback" not in stderr and process.returncode == 130, stderr
    _no_secret(stdout, stderr, out.read_text())
    if given == "option":
        assert KEY in cmdline and "--api-key shows the key to every user" in stderr
        SEEN["deprecated_option_warned"] += 1
    else:
        _no_secret(cmdline)
        SEEN["process_lists_checked"] += 1


def test_a_url_with_credentials_is_refused_without_them(tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    ran = run_limited(["phases-record", f"http://admin:{KEY}@127.0.0.1:9/", "--model", "m", "--out", str(out)],
                      case="recorder URL with credentials")
    assert ran.paragraph() and "credentials" in ran.stderr and not out.exists(), ran.output
    _no_secret(ran.output)
    assert "admin" not in ran.output


def _earlier_trace(tmp_path: Path) -> Path:
    """A 20-request trace the recorder wrote (against a good server)."""
    out = tmp_path / "trace.jsonl"
    with sse.SseServer(lambda i: sse.good_reply(8, step_s=0.001)) as server:
        ran = _record(server.url, out, requests=20, case="recorder earlier trace")
    assert ran.code == 0 and len(sse.trace_records(out)) == 20, ran.output
    return out


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("case", "extra"),
    [
        ("timeout 1e10", ("--timeout", "1e10")),
        ("timeout inf", ("--timeout", "inf")),
        ("timeout -1", ("--timeout", "-1")),
        ("max-record-bytes 10", ("--max-record-bytes", "10")),
        ("max-record-bytes past phases", ("--max-record-bytes", str(MAX_LINE_BYTES + 1))),
        ("requests 1e99", ("--requests", "1e99")),
        ("max-tokens -5", ("--max-tokens", "-5")),
        ("key file missing", ("--api-key-file", "/nonexistent/key")),
        ("key file a device", ("--api-key-file", "/dev/zero")),
        ("key twice", ("--api-key-file", "/dev/null", "--api-key", "x")),
    ],
)
def test_a_bad_value_is_refused_before_the_output_is_touched(tmp_path: Path, case: str, extra: tuple[str, ...]) -> None:
    out = _earlier_trace(tmp_path)
    before = out.read_bytes()
    ran = _record(f"http://127.0.0.1:{_unused_port()}", out, *extra, case=f"recorder {case}")
    assert ran.code == 2 and not ran.traceback and not ran.timed_out, ran.output
    assert out.read_bytes() == before  # not truncated, not touched
    SEEN["bad_values_refused_untouched"] += 1


def test_a_timeout_past_the_bound_is_refused_by_the_api_too() -> None:
    with pytest.raises(NcuflowError, match="timeout_s"):
        RecorderSettings(endpoint=parse_endpoint("http://127.0.0.1:1", chat=False), model="m", prompts=("p",),
                         requests=1, concurrency=1, max_tokens=4, timeout_s=1e10)


def test_a_typod_port_keeps_the_earlier_trace(tmp_path: Path) -> None:
    """Every request fails (nothing listens): the earlier 20-request trace stays byte for byte."""
    out = _earlier_trace(tmp_path)
    before = out.read_bytes()
    ran = _record(f"http://127.0.0.1:{_unused_port()}", out, case="recorder typo'd port over a trace")
    assert ran.code == 1 and not ran.traceback, ran.output
    assert out.read_bytes() == before and "keeps its earlier trace" in ran.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ncuflow-tmp-")]
    SEEN["earlier_traces_kept"] += 1


def test_a_recording_replaces_its_own_earlier_trace(tmp_path: Path) -> None:
    out = _earlier_trace(tmp_path)
    with sse.SseServer(lambda i: sse.good_reply(8, step_s=0.001)) as server:
        ran = _record(server.url, out, requests=3, case="recorder over its own trace")
    assert ran.code == 0 and len(sse.trace_records(out)) == 3, ran.output
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ncuflow-tmp-")]


def test_a_kill_while_replacing_keeps_the_earlier_trace(tmp_path: Path) -> None:
    """kill -9 mid-recording over an earlier trace: the earlier trace is whole; the new requests that
    ended are whole lines in the recorder's temporary beside it."""
    out = _earlier_trace(tmp_path)
    before = out.read_bytes()
    with sse.SseServer(lambda i: sse.good_reply(8, step_s=0.001) if i < 2 else sse.SILENT) as server:
        process = subprocess.Popen([sys.executable, "-m", "ncuflow", "phases-record", server.url, "--model", "m",
                                    "--out", str(out), "--requests", "4", "--concurrency", "1", "--max-tokens", "8"],
                                   cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while server.arrived < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        process.kill()
        process.communicate(timeout=30)
    FIGURES["cases"] += 1
    assert out.read_bytes() == before
    (temporary,) = [p for p in tmp_path.iterdir() if p.name.startswith(".ncuflow-tmp-")]
    assert len(sse.trace_records(temporary)) == 2


@pytest.mark.parametrize(
    ("what", "content"),
    [
        ("a bench_serving result", json.dumps({"date": "20250101", "backend": "sglang", "completed": 20,
                                               "ttfts": [0.1] * 20}) + "\n"),
        ("a trace of another tool", json.dumps({"submit_time": 1.0, "chunk_times": [1.1]}) + "\n"),
        ("notes", "my notes\n"),
    ],
)
def test_an_output_the_recorder_did_not_write_is_refused(tmp_path: Path, what: str, content: str) -> None:
    out = tmp_path / "bench_results.jsonl"
    out.write_text(content)
    with sse.SseServer(lambda i: sse.good_reply()) as server:
        ran = _record(server.url, out, case=f"recorder --out over {what}")
        arrived = server.arrived
    assert ran.paragraph() and "Refusing to overwrite" in ran.stderr, ran.output
    assert out.read_text() == content and arrived == 0
    SEEN["foreign_outputs_refused"] += 1


def test_a_record_too_long_for_phases_is_cut_and_says_so(tmp_path: Path) -> None:
    """--max-record-bytes 4096: a 600-chunk stream is cut off where its chunk times would pass it;
    every line is within the bound and phases reads the trace."""
    out = tmp_path / "trace.jsonl"
    with sse.SseServer(lambda i: sse.good_reply(600, step_s=0.0) if i == 0 else sse.good_reply(8)) as server:
        ran = run_limited(["phases-record", server.url, "--model", "m", "--out", str(out), "--requests", "3",
                           "--concurrency", "1", "--max-tokens", "1000", "--max-record-bytes", "4096"],
                          case="recorder record past --max-record-bytes")
    assert ran.code == 1 and not ran.traceback, ran.output
    assert max(len(line) + 1 for line in out.read_bytes().splitlines()) <= 4096
    (cut,) = [r for r in sse.trace_records(out) if "error" in r]
    assert "--max-record-bytes 4,096" in str(cut["error"]) and "chunk_times" not in cut
    assert sum(len(t.requests) for t in load_traces(out)) == 2
    SEEN["records_cut_to_bound"] += 1


def test_the_record_bound_is_what_phases_reads_and_the_writer_holds_it(tmp_path: Path) -> None:
    """The default --max-record-bytes is phases' line limit; a record past it (were the stream's own
    bound not enough) is written as a failed record that says what was cut."""
    assert MAX_RECORD_BYTES == MAX_LINE_BYTES
    out = tmp_path / "trace.jsonl"
    with TraceWriter(out, trace_header("http://127.0.0.1:1/v1/completions", "m"), 4096) as writer:
        writer.write({"request_id": "r0", "submit_time": 1.0, "chunk_times": [1.5] * 2000})
    (record,) = sse.trace_records(out)
    assert "2,000 chunk times" in record["error"] and "chunk_times" not in record


def test_an_output_that_became_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    """--out replaced by a FIFO after the checks (the writer opens it then): one paragraph at once."""
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    script = ("import sys; from pathlib import Path; from ncuflow.phases.recorder_trace import TraceWriter; "
              "from ncuflow.errors import NcuflowError\n"
              "try:\n    TraceWriter(Path(sys.argv[1]), {}, 4096)\n"
              "except NcuflowError as error:\n    print('ncuflow: ' + error.paragraph(), file=sys.stderr); sys.exit(1)")
    ran = run_limited([], command=[sys.executable, "-c", script, str(fifo)], timeout=20,
                      case="recorder output became a FIFO")
    assert ran.paragraph() and "became a special file" in ran.stderr and ran.seconds < 10, ran.output


def test_a_disk_that_fills_while_replacing_says_what_the_trace_holds(tmp_path: Path) -> None:
    """Recording over an earlier trace when one page is free: the new requests that fit (whole lines)
    replace it, and the message says so, how many, and that nothing partial is left."""
    from tests.test_faults_io import fill, tmpfs

    with tmpfs(tmp_path / "fs") as fs, sse.SseServer(lambda i: sse.good_reply(4, step_s=0.001)) as server:
        out = fs / "trace.jsonl"
        earlier = _record(server.url, out, requests=3, case="recorder earlier trace on a tmpfs")
        assert earlier.code == 0, earlier.output
        spare = fs / "spare"
        spare.write_bytes(b"\0" * 4096)
        filler = fill(fs)
        spare.unlink()
        ran = _record(server.url, out, requests=60, case="recorder over its trace on a full disk")
        kept = sse.trace_records(out)
        assert ran.paragraph() and "full" in ran.stderr, ran.output
        assert f"The {len(kept)} request(s) recorded before" in ran.stderr and "replace the earlier trace" in ran.stderr
        assert out.read_text().endswith("\n") and 3 < len(kept) < 60
        assert not [p for p in fs.iterdir() if p.name.startswith(".ncuflow-tmp-")]
        filler.unlink()
    SEEN["full_disk_replacements_said"] += 1
