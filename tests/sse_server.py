"""A fake OpenAI-compatible streaming server on loopback that misbehaves on demand.

``SseServer(plan)`` serves ``/v1/completions`` and ``/v1/chat/completions``; ``plan(index)``
says what request ``index`` (in arrival order) gets: a ``Reply`` of SSE lines, each sent
after its delay, or one of the raw behaviours (a byte every half second, an endless line,
text forever, silence). Responses are HTTP/1.0 streams that end when the server closes the
connection, as a server that never sends ``[DONE]`` would.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

STEP_S = 0.01


def text_event(text: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"text": text}]}).encode() + b"\n\n"


def usage_event(tokens: object) -> bytes:
    return b"data: " + json.dumps({"choices": [], "usage": {"completion_tokens": tokens}}).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True)
class Reply:
    """What one request gets: an HTTP status and the body's pieces, ``step_s`` apart."""

    pieces: tuple[bytes, ...]
    status: int = 200
    step_s: float = STEP_S


def good_reply(tokens: int = 8, step_s: float = STEP_S) -> Reply:
    return Reply((*(text_event(f"t{i} ") for i in range(tokens)), usage_event(tokens), DONE), step_s=step_s)


def reply_with(event: bytes, tokens: int = 4) -> Reply:
    """Good text chunks, then ``event`` (a whole ``data:`` line, or any bytes), then the rest."""
    head = tuple(text_event(f"t{i} ") for i in range(tokens // 2))
    tail = tuple(text_event(f"t{i} ") for i in range(tokens // 2, tokens))
    return Reply((*head, event, *tail, usage_event(tokens), DONE))


# raw behaviours: a name instead of a Reply
TRICKLE = "trickle"  # "data: {" then one byte every 0.5 s, never a newline
ENDLESS_LINE = "endless-line"  # "data: " then 'x' as fast as the socket takes it, forever
HUGE_LINE = "huge-line"  # one 100 MB line, then a newline and [DONE]
TEXT_FOREVER = "text-forever"  # a text chunk every 10 ms, forever
EMPTY_FOREVER = "empty-forever"  # events without text as fast as possible, forever
SILENT = "silent"  # read the request, answer nothing, keep the connection open
ECHO_401 = "echo-401"  # HTTP 401 whose body is the request's headers (a proxy's error page)
ECHO_EVENT = "echo-event"  # a text chunk, then an SSE error event quoting the request's headers as JSON

Plan = Callable[[int], "Reply | str"]


@dataclass
class _State:
    plan: Plan
    arrived: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    closing: threading.Event = field(default_factory=threading.Event)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        state = self.server.state
        with state.lock:
            index = state.arrived
            state.arrived += 1
        behaviour = state.plan(index)
        if behaviour in (ECHO_401, ECHO_EVENT):
            behaviour = self._echo(behaviour)
        try:
            if isinstance(behaviour, Reply):
                self._reply(behaviour)
            else:
                self._raw(behaviour, state.closing)
        except OSError:  # the recorder hung up: what a bounded client does
            pass

    def _echo(self, behaviour: str) -> Reply:
        """The request's headers sent back, as a careless server or proxy does."""
        headers = dict(self.headers.items())
        if behaviour == ECHO_401:
            said = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
            return Reply((f"Unauthorized. You sent:\r\n{said}".encode(),), status=401)
        error = {"error": {"message": f"bad request {json.dumps(headers)}", "headers": headers}}
        return Reply((text_event("t0 "), b"data: " + json.dumps(error).encode() + b"\n\n", DONE))

    def _start(self, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.flush()

    def _reply(self, reply: Reply) -> None:
        self._start(reply.status)
        for piece in reply.pieces:
            time.sleep(reply.step_s)
            self.wfile.write(piece)
            self.wfile.flush()

    def _raw(self, behaviour: str, closing: threading.Event) -> None:
        if behaviour == SILENT:
            closing.wait(120)
            return
        self._start()
        for piece, pause in _raw_pieces(behaviour):
            if closing.is_set():
                return
            self.wfile.write(piece)
            self.wfile.flush()
            if pause:
                time.sleep(pause)


def _raw_pieces(behaviour: str) -> Iterator[tuple[bytes, float]]:
    if behaviour == TRICKLE:
        yield b"data: {", 0.5
        while True:
            yield b" ", 0.5
    elif behaviour == ENDLESS_LINE:
        yield b"data: ", 0.0
        block = b"x" * (1 << 16)
        while True:
            yield block, 0.0
    elif behaviour == HUGE_LINE:
        yield b"data: ", 0.0
        block = b"x" * (1 << 20)
        for _ in range(100):
            yield block, 0.0
        yield b"\n\n" + DONE, 0.0
    elif behaviour == TEXT_FOREVER:
        while True:
            yield text_event("t "), 0.01
    elif behaviour == EMPTY_FOREVER:
        while True:
            yield b'data: {"choices": []}\n\n' * 64, 0.0
    else:
        raise ValueError(behaviour)


class _Server(ThreadingHTTPServer):
    request_queue_size = 2048  # a recorder of 1,000 connections at once
    daemon_threads = True
    state: _State


class SseServer:
    """``with SseServer(plan) as url:`` serves on loopback until the block ends."""

    def __init__(self, plan: Plan) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.state = _State(plan)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def arrived(self) -> int:
        return self._server.state.arrived

    def __enter__(self) -> SseServer:
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.state.closing.set()
        self._server.shutdown()
        self._server.server_close()


def trace_records(path: Path) -> list[dict[str, Any]]:
    """The request records of a trace ``phases-record`` wrote: the lines after its header record."""
    from ncuflow.phases.recorder_trace import HEADER_START

    lines = path.read_text().splitlines()
    assert lines and lines[0].startswith(HEADER_START), lines[:1]
    return [json.loads(line) for line in lines[1:]]
