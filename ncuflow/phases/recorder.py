"""Record per-request streaming timestamps from any OpenAI-compatible endpoint (stdlib only).

Sends ``requests`` streaming completions with ``concurrency`` workers in a closed loop (all
workers start together, each takes the next prompt when its request ends) and yields one
record per request as it ends, in the schema of ``ncuflow.phases.parse.jsonl``:
``submit_time`` and the arrival time of every chunk that carried text, plus
``output_tokens`` from the final usage chunk when the server sends one. Times are
``time.time()`` at the start plus ``time.perf_counter()`` deltas: one monotonic clock with
sub-millisecond resolution.

Every request is bounded whatever the server does: ``timeout_s`` is its whole time, from
connecting to the last byte (a watchdog shuts the socket of a request past it, so a server
that trickles a byte every half second, or streams forever, is cut off there); an event line
is read up to ``MAX_LINE_BYTES`` and a stream up to ``max_chunks`` text chunks; each event is
checked by shape (``recorder_events``). A request that breaks a bound or sends a malformed
event is a record with an ``error`` field; the others go on. ``TraceWriter`` writes each
record as it arrives (one flushed line), so Ctrl-C, a crash or ``kill -9`` keep every request
that ended; Ctrl-C returns at once (the workers are daemon threads, their sockets are shut).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import queue
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ncuflow.files.streamed import open_streamed_output
from ncuflow.phases.parse.json_values import MAX_TOKENS_PER_CHUNK, count_or_none, shown
from ncuflow.phases.parse.jsonl import MAX_LABEL
from ncuflow.phases.recorder_endpoint import Endpoint, RecorderError
from ncuflow.phases.recorder_events import MalformedEvent, printable, read_event

MAX_LINE_BYTES = 1 << 20  # an event line; a completion chunk is a few hundred bytes
MAX_CONCURRENCY = 4096
MAX_REQUESTS = 1_000_000_000
MAX_TOKEN_BUDGET = 10_000_000
MAX_API_KEY = 4096  # an API key is a token of printable characters; sent as 'Authorization: Bearer KEY'
WORKER_STACK_BYTES = 512 << 10  # 1,000 workers in 0.5 GiB of address space, not 8 GiB
SPARE_DESCRIPTORS = 64
WATCHDOG_TICK_S = 0.05


@dataclass(frozen=True)
class RecorderSettings:
    """One recording: where, what to send, how many, and each request's bound.

    Checked on construction (the CLI and the API share the checks)."""

    endpoint: Endpoint
    model: str
    prompts: tuple[str, ...]  # request i sends prompts[i % len(prompts)]
    requests: int
    concurrency: int
    max_tokens: int
    chat: bool = False
    ignore_eos: bool = False
    run: str | None = None
    timeout_s: float = 600.0
    api_key: str | None = field(default=None, repr=False)  # never shown: sent as a bearer token

    def __post_init__(self) -> None:
        problems = [
            f"{name} is {shown(value)}, not {want}"
            for name, value, ok, want in (
                ("requests", self.requests, _whole(self.requests, 1, MAX_REQUESTS), f"from 1 to {MAX_REQUESTS:,}"),
                ("concurrency", self.concurrency, _whole(self.concurrency, 1, MAX_CONCURRENCY),
                 f"from 1 to {MAX_CONCURRENCY:,}"),
                ("max_tokens", self.max_tokens, _whole(self.max_tokens, 1, MAX_TOKEN_BUDGET),
                 f"from 1 to {MAX_TOKEN_BUDGET:,}"),
                ("timeout_s", self.timeout_s, _positive_finite(self.timeout_s), "a finite number of seconds above 0"),
                ("prompts", len(self.prompts), bool(self.prompts), "at least one prompt"),
                ("run", self.run, self.run is None or len(self.run) <= MAX_LABEL,
                 f"a label of at most {MAX_LABEL} characters (what phases reads)"),
                ("api_key", _Unshown.key(self.api_key), _token(self.api_key),
                 f"1 to {MAX_API_KEY:,} printable ASCII characters without spaces (an HTTP bearer token)"),
            )
            if not ok
        ]
        if problems:
            raise RecorderError(f"Cannot record: {'; '.join(problems)}.", "",
                                "Give each setting a value in its range.")

    @property
    def max_chunks(self) -> int:
        """Text chunks a request may stream: one per token and as many again (a server splits
        text, never past the budget by this much), then it is cut off."""
        return 2 * self.max_tokens + 64

    def prompt(self, index: int) -> str:
        return self.prompts[index % len(self.prompts)]


class _Unshown:
    """What a message says of a secret in place of its value."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    @classmethod
    def key(cls, value: Any) -> _Unshown:
        return cls(f"a key of {len(value):,} characters" if isinstance(value, str) else type(value).__name__)


def _token(value: Any) -> bool:
    """None, or what an Authorization header may carry: printable ASCII, no space, no line break."""
    return value is None or (isinstance(value, str) and 0 < len(value) <= MAX_API_KEY
                             and all("!" <= c <= "~" for c in value))


def _whole(value: Any, low: int, high: int) -> bool:
    return count_or_none(value, low, high) is not None


def _positive_finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


class _Clock:
    def __init__(self) -> None:
        self.wall0 = time.time()
        self.perf0 = time.perf_counter()

    def now(self) -> float:
        return self.wall0 + (time.perf_counter() - self.perf0)


def _body(settings: RecorderSettings, prompt: str) -> bytes:
    body: dict[str, Any] = {
        "model": settings.model,
        "max_tokens": settings.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }
    if settings.chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if settings.ignore_eos:
        body["ignore_eos"] = True
    return json.dumps(body).encode()


class _Connection(http.client.HTTPConnection):
    """Keeps its socket: ``getresponse`` hands a response that ends at close its socket and
    forgets it (``sock`` is None), but the watchdog must still be able to shut it."""

    kept: socket.socket | None = None

    def connect(self) -> None:
        super().connect()
        self.kept = self.sock


class _TlsConnection(http.client.HTTPSConnection):
    kept: socket.socket | None = None

    def connect(self) -> None:
        super().connect()
        self.kept = self.sock


def _connection(endpoint: Endpoint, timeout_s: float) -> _Connection | _TlsConnection:
    if endpoint.scheme == "https":
        return _TlsConnection(endpoint.host, endpoint.port, timeout=timeout_s)
    return _Connection(endpoint.host, endpoint.port, timeout=timeout_s)


class _Watchdog:
    """Shuts the socket of every request past its deadline (and of all of them on ``cut_all``):
    a blocked read then ends at once, whatever the server sends or withholds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[int, tuple[_Connection | _TlsConnection, float]] = {}
        self._cut: set[int] = set()
        self._stopped = threading.Event()
        self._all = False
        threading.Thread(target=self._run, name="ncuflow-recorder-watchdog", daemon=True).start()

    def watch(self, key: int, connection: _Connection | _TlsConnection, deadline: float) -> None:
        with self._lock:
            self._watched[key] = (connection, deadline)

    def release(self, key: int) -> bool:
        """Stop watching ``key``; whether it was cut off."""
        with self._lock:
            self._watched.pop(key, None)
            cut = key in self._cut
            self._cut.discard(key)
            return cut

    def cut_all(self) -> None:
        with self._lock:
            self._all = True
            self._sweep(math.inf)
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(WATCHDOG_TICK_S):
            with self._lock:
                self._sweep(time.monotonic())

    def _sweep(self, now: float) -> None:
        for key, (connection, deadline) in self._watched.items():
            if deadline <= now or self._all:
                self._cut.add(key)
                sock = connection.kept
                if sock is not None:  # again each tick: a socket still connecting has none yet
                    with contextlib.suppress(OSError):
                        socket.socket.shutdown(sock, socket.SHUT_RDWR)


@dataclass
class _Stream:
    """What a response streamed: text chunk arrivals, the final token count, how it ended."""

    chunk_times: list[float]
    output_tokens: int | None = None
    error: str | None = None
    done: bool = False  # the server said [DONE]
    timed_out: bool = False  # no byte came for the request's whole time


def _read_stream(response: http.client.HTTPResponse, settings: RecorderSettings, clock: _Clock,
                 stream: _Stream) -> None:
    """Fill ``stream`` from the response's event lines until it ends or breaks a bound."""
    events = 0
    while True:
        raw = response.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        arrived = clock.now()
        if len(raw) > MAX_LINE_BYTES:
            stream.error = f"an event line longer than {MAX_LINE_BYTES >> 20} MiB; stopped reading"
            return
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        events += 1
        try:
            event = read_event(line[5:].strip())
        except MalformedEvent as error:
            stream.error = f"event {events} is no completion chunk: {error}"
            return
        if event.done:
            stream.done = True
            return
        if event.error is not None:
            stream.error = f"the server sent an error: {event.error}"
            return
        if event.text:
            stream.chunk_times.append(arrived)
            if len(stream.chunk_times) > settings.max_chunks:
                stream.error = (f"more than {settings.max_chunks:,} text chunks for --max-tokens "
                                f"{settings.max_tokens}; stopped reading")
                return
        if event.completion_tokens is not None:
            stream.output_tokens = event.completion_tokens


def _headers(settings: RecorderSettings) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if settings.api_key is not None:
        headers["Authorization"] = f"Bearer {settings.api_key}"
    return headers


# How every trace the recorder writes begins (``record_one``'s first key): how ``--out`` knows an
# earlier trace of its own (a bench_serving result, or any other JSON, is someone else's file).
TRACE_START = '{"request_id": "r'


def record_one(settings: RecorderSettings, index: int, clock: _Clock, watchdog: _Watchdog) -> dict[str, Any]:
    """One request, start to end, within ``settings.timeout_s`` in all."""
    record: dict[str, Any] = {"request_id": f"r{index}"}
    if settings.run is not None:
        record["run"] = settings.run
    record["submit_time"] = clock.now()
    stream = _Stream([])
    connection = _connection(settings.endpoint, settings.timeout_s)
    watchdog.watch(index, connection, time.monotonic() + settings.timeout_s)
    try:
        connection.request("POST", settings.endpoint.path, body=_body(settings, settings.prompt(index)),
                           headers=_headers(settings))
        response = connection.getresponse()
        if response.status != 200:
            stream.error = f"HTTP {response.status}: {printable(response.read(300).decode('utf-8', 'replace'))}"
        else:
            _read_stream(response, settings, clock, stream)
    except TimeoutError:  # no byte for timeout_s: the request's whole time is up
        stream.timed_out = True
    except (OSError, http.client.HTTPException) as error:
        stream.error = f"{type(error).__name__}: {printable(str(error))}"
    finally:
        cut = (watchdog.release(index) and not stream.done) or stream.timed_out
        connection.close()
    if cut:
        stream.error = (f"cut off after {settings.timeout_s:g} s (--timeout, a request's whole time): "
                        f"{len(stream.chunk_times)} text chunk(s) had arrived")
    elif stream.error is None and not stream.chunk_times:
        stream.error = "the stream carried no text"
    elif stream.error is None and (stream.output_tokens or 0) > MAX_TOKENS_PER_CHUNK * len(stream.chunk_times):
        stream.error = (f"'usage.completion_tokens' is {stream.output_tokens:,} for {len(stream.chunk_times):,} "
                        f"text chunk(s), more than {MAX_TOKENS_PER_CHUNK} tokens a chunk")
    if stream.error is not None:
        record["error"] = stream.error
        return record
    record["chunk_times"] = stream.chunk_times
    if stream.output_tokens is not None:
        record["output_tokens"] = stream.output_tokens
    return record


def _ensure_descriptors(connections: int) -> None:
    """Raise the soft limit of open files to what ``connections`` sockets need, or refuse."""
    try:
        import resource
    except ImportError:  # not POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = connections + SPARE_DESCRIPTORS
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard == resource.RLIM_INFINITY or hard >= need:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
            return
        except (ValueError, OSError):
            pass
    raise RecorderError(
        f"--concurrency {connections} needs {need} open files; this process may open {hard}.",
        "Each request in flight holds a socket.",
        f"Lower --concurrency to {max(1, hard - SPARE_DESCRIPTORS)} or less, or raise the limit (ulimit -n).",
    )


@dataclass(frozen=True)
class _WorkerFailed:
    error: BaseException


_WORKER_DONE = object()


class _Loop:
    """The closed loop's shared state: the next request, the stop flag, what ended."""

    def __init__(self, settings: RecorderSettings) -> None:
        self.settings = settings
        self.clock = _Clock()
        self.watchdog = _Watchdog()
        self.ended: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.stop = threading.Event()
        self.go = threading.Event()
        self._lock = threading.Lock()
        self._next = 0

    def take(self) -> int | None:
        with self._lock:
            if self.stop.is_set() or self._next >= self.settings.requests:
                return None
            self._next += 1
            return self._next - 1

    def work(self) -> None:
        try:
            self.go.wait()
            while (index := self.take()) is not None:
                record = record_one(self.settings, index, self.clock, self.watchdog)
                if self.stop.is_set():
                    return  # interrupted: the request did not end, it is not a record
                self.ended.put(record)
        except BaseException as error:  # a bug: shown in the main thread, never swallowed
            self.ended.put(_WorkerFailed(error))
        finally:
            self.ended.put(_WORKER_DONE)

    def start_workers(self) -> int:
        count = min(self.settings.concurrency, self.settings.requests)
        previous = threading.stack_size()
        started = 0
        try:
            threading.stack_size(WORKER_STACK_BYTES)
            for number in range(count):
                threading.Thread(target=self.work, name=f"ncuflow-recorder-{number}", daemon=True).start()
                started += 1
        except RuntimeError as error:  # the system's limit on threads
            self.stop.set()
            self.go.set()
            raise RecorderError(
                f"Could start only {started} of the {count} workers --concurrency {count} needs ({error}).",
                "The recorder runs one thread per request in flight; the system's limit on threads or memory "
                "allows no more. Nothing was sent.",
                f"Lower --concurrency (below {max(1, started)}), or raise the limit on threads.",
            ) from None
        finally:
            threading.stack_size(previous)
        return count


class Recording:
    """The closed loop, ready: limits checked and workers started (waiting) on construction, so
    a recording that cannot run is refused before a request is sent or a file is touched.

    Iterating starts it and yields each request's record as the request ends (in the order
    they end). ``close`` (leaving the ``with`` block, Ctrl-C while it waits) stops it at once:
    no new request starts and the sockets of those in flight are shut; they yield nothing."""

    def __init__(self, settings: RecorderSettings) -> None:
        _ensure_descriptors(min(settings.concurrency, settings.requests))
        self._loop = _Loop(settings)
        try:
            self._workers = self._loop.start_workers()
        except RecorderError:
            self.close()
            raise

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._loop.go.set()
        while self._workers:
            item = self._loop.ended.get()
            if item is _WORKER_DONE:
                self._workers -= 1
            elif isinstance(item, _WorkerFailed):
                raise item.error
            else:
                yield item

    def close(self) -> None:
        self._loop.stop.set()
        self._loop.go.set()
        self._loop.watchdog.cut_all()

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TraceWriter:
    """The JSONL trace, one line per record, each written by one flushed ``write`` as it comes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.written = 0
        self.failed = 0
        self.first_failure = ""
        self._fd = open_streamed_output(path)

    def write(self, record: dict[str, Any]) -> None:
        data = memoryview((json.dumps(record) + "\n").encode())
        while data:
            data = data[os.write(self._fd, data):]
        self.written += 1
        if "error" in record:
            self.failed += 1
            self.first_failure = self.first_failure or str(record["error"])

    def close(self) -> None:
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
