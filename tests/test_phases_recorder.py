"""The streaming recorder against a fake OpenAI-compatible server on loopback only."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.cli.record_cmd import record_command
from ncuflow.phases.detect import load_traces
from ncuflow.phases.model import RequestTrace, analyse_request_trace
from ncuflow.phases.model.results import PhaseKind

STEP_S = 0.01


class FakeStreamingServer(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # silence the test output
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body.get("model") != "fake":
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b'{"error": "no such model"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(
            b'data: {"choices": [{"delta": {"role": "assistant"}}]}\n\n'
        )  # role-only chunk
        self.wfile.flush()
        n = body["max_tokens"]
        for i in range(n):
            time.sleep(STEP_S)
            event = {"choices": [{"delta": {"content": f"t{i} "}}]}
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
        usage = {"choices": [], "usage": {"completion_tokens": n}}
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on loopback in a thread: its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def loopback_server() -> Iterator[str]:
    with serving(FakeStreamingServer) as url:
        yield url


def test_recorder_writes_a_trace_phases_can_read(loopback_server: str, tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    result = CliRunner().invoke(
        record_command,
        [
            loopback_server,
            "--model",
            "fake",
            "--out",
            str(out),
            "--requests",
            "4",
            "--concurrency",
            "4",
            "--max-tokens",
            "20",
            "--chat",
            "--run",
            "fake-run",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "4 requests recorded, 0 failed" in result.output
    records = trace_records(out)
    assert len(records) == 4
    for record in records:
        assert record["run"] == "fake-run" and record["output_tokens"] == 20
        assert len(record["chunk_times"]) == 20  # the role-only chunk is not a token
        assert record["chunk_times"][0] >= record["submit_time"]
    (trace,) = load_traces(out)
    assert isinstance(trace, RequestTrace)
    run = analyse_request_trace(trace)
    assert run.phase(PhaseKind.STEADY).token_s is not None
    assert STEP_S * 0.8 < run.phase(PhaseKind.STEADY).token_s.median < STEP_S * 3


def test_recorder_reports_failed_requests(loopback_server: str, tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    result = CliRunner().invoke(
        record_command,
        [
            loopback_server,
            "--model",
            "other",
            "--out",
            str(out),
            "--requests",
            "2",
            "--concurrency",
            "1",
            "--max-tokens",
            "5",
        ],
    )
    assert result.exit_code == 1  # failed requests are a failure, even though the trace is written
    assert "0 requests recorded, 2 failed" in result.output
    assert all("HTTP 404" in record["error"] for record in trace_records(out))


# ----------------------------------------------------------------------------- issue 31: hostile servers and inputs

from ncuflow.errors import NcuflowError  # noqa: E402
from ncuflow.phases.recorder import RecorderSettings  # noqa: E402
from ncuflow.phases.recorder_endpoint import RecorderError, parse_endpoint  # noqa: E402
from ncuflow.phases.recorder_events import MalformedEvent, read_event  # noqa: E402
from tests.sse_server import (  # noqa: E402
    DONE,
    Reply,
    SseServer,
    good_reply,
    reply_with,
    text_event,
    trace_records,
    usage_event,
)

# Every shape an event can take that is no completion chunk, with what the failure says.
MALFORMED_EVENTS: list[tuple[str, bytes, str]] = [
    ("a list", b"data: [1,2,3]\n\n", "a list, not a JSON object"),
    ("a number", b"data: 5\n\n", "the number 5, not a JSON object"),
    ("null", b"data: null\n\n", "null, not a JSON object"),
    ("a string", b'data: "text"\n\n', "a string, not a JSON object"),
    ("choices a number", b'data: {"choices":5}\n\n', "'choices' is the number 5, not a list"),
    ("choices an object", b'data: {"choices":{"a":1}}\n\n', "'choices' is an object, not a list"),
    ("a choice that is a number", b'data: {"choices":[5]}\n\n', "'choices[0]' is the number 5"),
    ("a choice that is null", b'data: {"choices":[null]}\n\n', "'choices[0]' is null"),
    ("text a number", b'data: {"choices":[{"text":5}]}\n\n', "'choices[0].text' is the number 5, not text"),
    ("delta a list", b'data: {"choices":[{"delta":[1]}]}\n\n', "'choices[0].delta' is a list"),
    ("content a list", b'data: {"choices":[{"delta":{"content":[1]}}]}\n\n', "'choices[0].delta.content' is a list"),
    ("usage a number", b'data: {"usage":5}\n\n', "'usage' is the number 5"),
    ("output tokens -5", usage_event(-5), "'usage.completion_tokens' is the number -5"),
    ("output tokens true", usage_event(True), "'usage.completion_tokens' is a boolean"),
    ("output tokens 10^30", usage_event(10**30), "'usage.completion_tokens' is the number 1000000000000000000000000000000"),
    ("output tokens 2.5", usage_event(2.5), "'usage.completion_tokens' is the number 2.5"),
    ("nested 100k deep", b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n", "JSON nested deeper than 32 levels"),
    ("nested objects", b'data: ' + b'{"a":' * 50_000 + b"\n\n", "JSON nested deeper than 32 levels"),
    ("a 5000-digit integer", b'data: {"choices":[],"n":' + b"9" * 5000 + b"}\n\n", "an integer of 5,000 digits"),
    ("not JSON", b"data: {not json\n\n", "not valid JSON (Expecting property name"),
    ("cut short", b'data: {"choices":[{"text":"x"\n\n', "not valid JSON"),
    ("bytes that are not UTF-8", b"data: \xff\xfe\x00\n\n", "not valid JSON"),
    ("NaN", b"data: NaN\n\n", "the number nan, not a JSON object"),
]


@pytest.mark.parametrize(("shape", "event", "said"), MALFORMED_EVENTS, ids=[c[0] for c in MALFORMED_EVENTS])
def test_a_malformed_event_fails_its_request_and_keeps_the_others(tmp_path: Path, shape: str, event: bytes,
                                                                  said: str) -> None:
    out = tmp_path / "trace.jsonl"
    with SseServer(lambda i: reply_with(event) if i == 1 else good_reply(6)) as server:
        result = CliRunner().invoke(record_command, [server.url, "--model", "m", "--out", str(out), "--requests", "4",
                                                     "--concurrency", "2", "--max-tokens", "6"])
    assert result.exit_code == 1, result.output
    records = trace_records(out)
    failed = [r for r in records if "error" in r]
    assert len(records) == 4 and len(failed) == 1, records
    assert said in failed[0]["error"], failed[0]["error"]
    assert "chunk_times" not in failed[0] and "output_tokens" not in failed[0]
    assert all(len(r["chunk_times"]) == 6 and r["output_tokens"] == 6 for r in records if "error" not in r)
    assert "3 requests recorded, 1 failed" in result.output
    traces = load_traces(out)  # phases reads what the recorder kept: the failed request left out
    assert sum(len(t.requests) for t in traces if isinstance(t, RequestTrace)) == 3


def test_a_usage_count_the_stream_did_not_carry_fails_its_request(tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    reply = Reply((text_event("a"), text_event("b"), usage_event(1_000_000), DONE))
    with SseServer(lambda i: reply) as server:
        result = CliRunner().invoke(record_command, [server.url, "--model", "m", "--out", str(out), "--requests", "1",
                                                     "--max-tokens", "4"])
    assert result.exit_code == 1
    (record,) = trace_records(out)
    assert record["error"] == ("'usage.completion_tokens' is 1,000,000 for 2 text chunk(s), more than 64 tokens "
                               "a chunk")


def test_a_server_error_event_is_the_requests_failure_with_control_characters_escaped(tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    event = b'data: {"error": {"message": "\\u001b]0;owned\\u0007 overloaded", "code": 503}}\n\n'
    with SseServer(lambda i: reply_with(event)) as server:
        result = CliRunner().invoke(record_command, [server.url, "--model", "m", "--out", str(out), "--requests", "1",
                                                     "--max-tokens", "4"])
    assert result.exit_code == 1
    assert "the server sent an error: \\x1b]0;owned\\x07 overloaded" in result.output
    assert "\x1b" not in result.output and "\x07" not in result.output


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://127.0.0.1:99999", "the port 99999 is not from 1 to 65535"),
        ("http://[::1", "an IPv6 address must be written whole in brackets"),
        ("http://127.0.0.1:abc", "the port 'abc' is not a number"),
        ("http://127.0.0.1 :8000", "holds a space or a control character"),
        ("http://127.0.0.1:0", "the port 0 is not from 1 to 65535"),
        ("http://127.0.0.1:-1", "the port '-1' is not a number"),
        ("http://:8000", "it names no host"),
        ("127.0.0.1:8000", "it has no http:// or https://"),
        ("ftp://127.0.0.1", "the scheme is 'ftp'"),
        ("http://127.0.0.1:8000/v1?x=1", "a query or a fragment"),
        ("http://user:pw@127.0.0.1:8000", "credentials"),
        ("http://127.0.0.1:8000\x1b[2J", "a control character"),
        ("", "it is empty"),
    ],
)
def test_a_bad_url_is_refused_with_one_paragraph_before_any_file(tmp_path: Path, url: str, said: str) -> None:
    out = tmp_path / "trace.jsonl"
    result = CliRunner().invoke(record_command, [url, "--model", "m", "--out", str(out)])
    assert isinstance(result.exception, RecorderError), result.output
    assert said in str(result.exception) and "\x1b" not in str(result.exception)
    assert not out.exists()


def test_urls_that_are_good() -> None:
    assert parse_endpoint("http://127.0.0.1:30000", chat=False).path == "/v1/completions"
    assert parse_endpoint("https://h.example/v1/", chat=True).url == "https://h.example:443/v1/chat/completions"
    ipv6 = parse_endpoint("http://[::1]:8000/api", chat=False)
    assert (ipv6.host, ipv6.port, ipv6.path) == ("::1", 8000, "/api/v1/completions")
    assert parse_endpoint("HTTP://Localhost", chat=False).port == 80


@pytest.mark.parametrize(
    ("field", "value"),
    [("requests", 0), ("concurrency", 0), ("concurrency", 100_000), ("max_tokens", 0), ("timeout_s", float("nan")),
     ("timeout_s", 0.0), ("prompts", ()), ("requests", True), ("run", "x" * 201)],
)
def test_the_api_checks_what_the_cli_checks(field: str, value: object) -> None:
    good = {"endpoint": parse_endpoint("http://127.0.0.1:1", chat=False), "model": "m", "prompts": ("p",),
            "requests": 1, "concurrency": 1, "max_tokens": 4}
    with pytest.raises(NcuflowError, match=field):
        RecorderSettings(**{**good, field: value})  # type: ignore[arg-type]


def test_events_that_are_completion_chunks() -> None:
    assert read_event('{"choices":[{"text":"a"}]}').text == "a"
    assert read_event('{"choices":[{"delta":{"role":"assistant"}}]}').text == ""  # role-only: no token
    assert read_event('{"choices":[{"delta":{"reasoning_content":"r","content":null}}]}').text == "r"
    assert read_event('{"choices":[],"usage":{"completion_tokens":7}}').completion_tokens == 7
    assert read_event('{"choices":null,"usage":null}').text == ""
    assert read_event('{"choices":[{"text":"a","logprobs":{"x":-Infinity}}]}').text == "a"  # unused fields unchecked
    assert read_event("[DONE]").done
    with pytest.raises(MalformedEvent):
        read_event('{"choices":[{"text":"a"}],"usage":{"completion_tokens":0}}')


class KeyedStreamingServer(FakeStreamingServer):
    """The fake server started with an API key: 401 without 'Authorization: Bearer sk-test'."""

    def do_POST(self) -> None:
        if self.headers.get("Authorization") != "Bearer sk-test":
            self.send_response(401)
            self.end_headers()
            self.wfile.write(b'{"error": "Unauthorized"}')
            return
        super().do_POST()


def test_a_server_with_an_api_key_is_recorded_and_the_key_is_never_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the runner's own key is not the test's
    common = ["--model", "fake", "--requests", "2", "--concurrency", "2", "--max-tokens", "4"]
    with serving(KeyedStreamingServer) as url:
        refused = CliRunner().invoke(record_command, [url, *common, "--out", str(tmp_path / "none.jsonl")])
        assert refused.exit_code == 1 and "HTTP 401" in refused.output
        by_option = CliRunner().invoke(record_command, [url, *common, "--api-key", "sk-test",
                                                        "--out", str(tmp_path / "option.jsonl")])
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        by_env = CliRunner().invoke(record_command, [url, *common, "--out", str(tmp_path / "env.jsonl")])
    for result, name in ((by_option, "option.jsonl"), (by_env, "env.jsonl")):
        assert result.exit_code == 0 and "2 requests recorded, 0 failed" in result.output, result.output
        assert "sk-test" not in (tmp_path / name).read_text() and "sk-test" not in result.output
    assert "--api-key shows the key" in by_option.output and "--api-key shows" not in by_env.output


@pytest.mark.parametrize("key", ["", "sk test", "sk-test\r\nX-Injected: 1", "k" * 5000, "clé"])
def test_an_api_key_that_no_header_can_carry_is_refused_unshown(key: str) -> None:
    from ncuflow.errors import NcuflowError
    from ncuflow.phases.recorder import RecorderSettings
    from ncuflow.phases.recorder_endpoint import parse_endpoint

    with pytest.raises(NcuflowError, match="api_key") as refused:
        RecorderSettings(endpoint=parse_endpoint("http://127.0.0.1:1", chat=False), model="m", prompts=("p",),
                         requests=1, concurrency=1, max_tokens=4, api_key=key)
    if key:
        assert key not in str(refused.value)  # the key is never shown, not even a wrong one
    assert "sk-test" not in repr(RecorderSettings(endpoint=parse_endpoint("http://127.0.0.1:1", chat=False),
                                                  model="m", prompts=("p",), requests=1, concurrency=1,
                                                  max_tokens=4, api_key="sk-test"))
