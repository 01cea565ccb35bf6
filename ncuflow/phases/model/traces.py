"""What the parsers produce: scheduler statistics lines of a server log and per-request
streaming timestamps, as frozen dataclasses."""

from __future__ import annotations

import bisect
import math
from array import array
from dataclasses import dataclass, field
from typing import NamedTuple

from ncuflow.phases.model.capabilities import Capabilities
from ncuflow.phases.model.settings import ServerSetting


class BatchSample(NamedTuple):
    """One scheduler statistics line of a server log.

    ``kind`` is "prefill" or "decode" (SGLang) or "stats" (vLLM's periodic line).
    ``running`` is the batch size the line reports; for SGLang Prefill lines it is the
    number of requests already running *before* the new ones join.

    A typed, immutable record like the frozen dataclasses elsewhere, but a ``NamedTuple``:
    a log holds millions of these lines and a tuple is built ten times faster (change one
    with ``sample._replace(...)``).
    """

    time_s: float
    kind: str
    running: int
    line: int
    queued: int | None = None
    new_seqs: int | None = None
    new_tokens: int | None = None
    gen_throughput: float | None = None
    prompt_throughput: float | None = None
    accept_len: float | None = None
    pending_tokens: int | None = None  # SGLang chunked prefill: tokens of this request still to come
    incoming: int | None = None  # PD decode node: requests pre-allocated or in KV transfer
    # SGLang chunked prefill: requests of this Prefill batch whose prompt goes on in the
    # next batch (each is counted in #new-seq again there); see ``admitted_seqs``.
    unfinished_seqs: int = 0
    cached_tokens: int | None = None
    # log lines this sample stands for: more than 1 only where a very long log was folded
    # to keep memory bounded (see ``parse.compact``)
    lines: int = 1
    # the KV cache's usage on the line, 0–1 (SGLang token usage, vLLM GPU KV cache usage)
    kv_usage: float | None = None
    # the requests decoding, averaged over the line's window, where the line says so (a
    # vLLM build printing "Avg decode BS: X"): ``running`` also counts those still in prefill
    decoding: float | None = None

    @property
    def admitted_seqs(self) -> int:
        """Requests whose prefill this line completes: they join the running batch.

        #new-seq less a chunked request that goes on in the next batch, so that each
        request is counted once, when it starts decoding.
        """
        return max((self.new_seqs or 0) - self.unfinished_seqs, 0)


@dataclass(frozen=True)
class LogEvent:
    """A line worth telling the user about: retraction, traceback, shutdown."""

    time_s: float | None
    line: int
    kind: str
    text: str


@dataclass(frozen=True)
class BenchSummary:
    """What a bench_serving command line and result block in the same log say."""

    line: int
    output_tokens: int | None = None
    output_tokens_source: str = ""
    mean_tpot_ms: float | None = None
    median_tpot_ms: float | None = None
    mean_ttft_ms: float | None = None
    median_ttft_ms: float | None = None
    median_itl_ms: float | None = None
    max_concurrency: int | None = None
    completed_requests: int | None = None  # 'Successful requests' of the result block


@dataclass(frozen=True)
class RequestTimings:
    """The server's own per-request timing lines of one scheduler (SGLang ``ReqTimeStats``,
    logged when a request finishes), in columns; ``time_s`` (the line's timestamp, when the
    request finished) is non-decreasing.

    ``decode_s`` (``post_prefill_elapsed``: first token to the last) and ``prefill_s``
    (``initial_prefill_elapsed``) are NaN where the line does not say (older SGLang, whose
    ``forward_duration`` holds prefill and decode together). Beyond ``MAX_KEPT`` lines only
    every ``stride``-th line is kept (``seen`` counts them all)."""

    time_s: array = field(default_factory=lambda: array("d"))
    line: array = field(default_factory=lambda: array("q"))
    output_tokens: array = field(default_factory=lambda: array("q"))
    queue_s: array = field(default_factory=lambda: array("d"))
    prefill_s: array = field(default_factory=lambda: array("d"))
    decode_s: array = field(default_factory=lambda: array("d"))
    forward_s: array = field(default_factory=lambda: array("d"))
    stride: int = 1
    seen: int = 0

    def __len__(self) -> int:
        return len(self.time_s)

    def between(self, start_s: float, end_s: float) -> range:
        """Indices of the requests that finished in [start_s, end_s)."""
        return range(bisect.bisect_left(self.time_s, start_s), bisect.bisect_left(self.time_s, end_s))

    def tpot_s(self, index: int) -> float | None:
        """The request's own TPOT: first token to last over its N − 1 later tokens."""
        decode, tokens = self.decode_s[index], self.output_tokens[index]
        if math.isnan(decode) or tokens < 2:
            return None
        return decode / (tokens - 1)


@dataclass(frozen=True)
class RequestArrivals:
    """One line per arriving request (vLLM ``Received request``, SGLang ``Receive:``), in
    columns: when each request that reached the scheduler arrived (non-decreasing), and
    the arrivals that were refused before it (no vLLM ``Added request`` line followed).
    Beyond ``MAX_ARRIVALS`` lines only every ``stride``-th is kept (``seen`` counts all)."""

    time_s: array = field(default_factory=lambda: array("d"))
    line: array = field(default_factory=lambda: array("q"))
    refused_s: array = field(default_factory=lambda: array("d"))
    stride: int = 1
    seen: int = 0
    refused: int = 0  # arrivals refused before the scheduler (``refused_s`` holds the first)

    def between(self, start_s: float, end_s: float) -> range:
        """Indices of the arrivals in (start_s, end_s]."""
        return range(bisect.bisect_right(self.time_s, start_s), bisect.bisect_right(self.time_s, end_s))


@dataclass(frozen=True)
class Rejection:
    """Requests the server refused, by cause (e.g. a prompt longer than the context)."""

    cause: str
    count: int
    first_line: int
    example: str  # the first message, shortened


@dataclass(frozen=True)
class ServiceCounts:
    """What the log says about the requests it served, over the whole file: HTTP statuses of
    the generation endpoints' access lines, refusals by cause, errors (tracebacks that were
    no refusal), and the prompt tokens the prefix cache served."""

    http_status: tuple[tuple[int, int], ...] = ()  # (status, requests), by status
    rejections: tuple[Rejection, ...] = ()
    errors: int = 0
    first_error_line: int = 0
    prefills: int = 0  # admitted batches (SGLang Prefill lines)
    prefills_with_hit: int = 0  # … with a prefix-cache hit (#cached-token > 0)
    prompt_tokens: float = 0.0  # prompt tokens of those admissions (new + cached)
    cached_tokens: float = 0.0  # … served by the prefix cache
    cache_hit_rate: float | None = None  # vLLM: the last "Prefix cache hit rate" it printed


@dataclass(frozen=True)
class ServerTrace:
    """The statistics lines of one scheduler (one DP rank) of one server log."""

    path: str
    capabilities: Capabilities  # what the format says, read by the model (never its name)
    rank: str | None
    clock_origin: str  # wall-clock text of time_s == 0
    samples: tuple[BatchSample, ...]
    events: tuple[LogEvent, ...]
    time_resolution_s: float
    bench: BenchSummary | None = None
    # times of KV-cache retraction lines (all of them, for the decode intervals they hit)
    retraction_times_s: array = field(default_factory=lambda: array("d"))
    requests: RequestTimings | None = None
    arrivals: RequestArrivals | None = None
    service: ServiceCounts = field(default_factory=ServiceCounts)
    # requests each retraction pushed back to the queue (0 where its line does not say)
    retracted_requests: array = field(default_factory=lambda: array("q"))
    # decode steps between two statistics lines, where the format counts its lines in steps
    # (``Capabilities.step_counted_lines``; SGLang's decode_log_interval), else None
    steps_per_line: ServerSetting | None = None

    @property
    def steps_between_lines(self) -> int | None:
        """The value of ``steps_per_line`` where the format counts its lines in decode steps."""
        if not self.capabilities.step_counted_lines or self.steps_per_line is None:
            return None
        return self.steps_per_line.value

    @property
    def engine(self) -> str:
        """The format's registry name, for labels (the model reads ``capabilities``)."""
        return self.capabilities.name


@dataclass(frozen=True)
class RequestRecord:
    """One request of a streaming trace: submit time and the arrival of every chunk."""

    request_id: str
    submit_s: float
    chunk_times_s: tuple[float, ...]
    chunk_tokens: tuple[int, ...]  # tokens carried by each chunk (1 when not recorded)
    line: int
    declared_output_tokens: int | None = None  # when the source states it (bench JSON)

    @property
    def output_tokens(self) -> int:
        if self.declared_output_tokens is not None:
            return self.declared_output_tokens
        return sum(self.chunk_tokens)


@dataclass(frozen=True)
class RequestTrace:
    """The requests of one run of a client-side streaming trace (JSONL or bench JSON)."""

    path: str
    run: str
    source_format: str  # "jsonl" or "bench-json"
    requests: tuple[RequestRecord, ...]
    has_start_times: bool = True
    clock_origin: str = ""
    reported_mean_tpot_ms: float | None = None
    notes: tuple[str, ...] = ()  # what reading the file left out or thinned
    # the source says when each request's first token came (a server that logs only a
    # request's totals, as TGI's router, does not: its TTFT is not told)
    first_token_logged: bool = True
