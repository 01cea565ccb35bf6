"""The streaming recorder against a fake OpenAI-compatible server on loopback only."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.cli.phases_cmd import record_command
from ncuflow.phases.detect import load_traces
from ncuflow.phases.model import RequestTrace, analyse_request_trace

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


@pytest.fixture
def loopback_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeStreamingServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


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
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 4
    for record in records:
        assert record["run"] == "fake-run" and record["output_tokens"] == 20
        assert len(record["chunk_times"]) == 20  # the role-only chunk is not a token
        assert record["chunk_times"][0] >= record["submit_time"]
    (trace,) = load_traces(out)
    assert isinstance(trace, RequestTrace)
    run = analyse_request_trace(trace)
    assert run.steady_token_s is not None
    assert STEP_S * 0.8 < run.steady_token_s.median < STEP_S * 3


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
    assert all("HTTP 404" in json.loads(line)["error"] for line in out.read_text().splitlines())
