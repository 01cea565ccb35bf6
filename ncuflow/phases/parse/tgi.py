"""TGI (text-generation-inference): its router's line per finished request, text or JSON.

The router logs each request it served once, at INFO, when the request ends ("Success"),
with the request's timing as span fields (Rust ``Duration``s: ``"2.345s"``, ``"23.45ms"``,
``"45.6µs"``)::

    2024-07-08T10:20:30.123456Z  INFO generate_stream{parameters=... total_time="2.35s"
    validation_time="120µs" queue_time="45.6µs" inference_time="2.345s"
    time_per_token="23.45ms" seed="None"}: text_generation_router::server: ...: Success

(with the colour codes of ``tracing``'s text format around each field name and ``=`` unless
the router runs with ``LOG_COLORIZE=1``: router/src/logging.rs ``with_ansi``; they are
stripped) or, with ``--json-output``, the same fields in the object's ``span``. What a line gives:

- the end (the line's time) and the start (the end less ``total_time``), so requests
  overlap on one clock: the concurrency is rebuilt from them;
- ``time_per_token``: TGI's own ``inference_time`` over the generated tokens (prefill
  included), the request's decode time per output token; the generated tokens are
  ``inference_time / time_per_token`` (TGI divides the one by the other);
- ``queue_time``: how long the request waited for a batch.

TGI does not log when a request's first token came, so TTFT is not told (never invented
from these numbers), and its prefill is not told apart from its decode.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ncuflow.phases import TraceError
from ncuflow.phases.model.capabilities import per_request_capabilities
from ncuflow.phases.model.traces import RequestRecord, RequestTrace
from ncuflow.phases.parse.format import LineFormat
from ncuflow.phases.parse.json_values import BadJson, loads
from ncuflow.phases.parse.lines import strip_ansi
from ncuflow.phases.parse.request_chunks import MAX_REQUESTS, beyond_note, logged_request

CAPABILITIES = per_request_capabilities(
    name="tgi",
    title="TGI router log",
    server="TGI",
    admission_evidence="a request's Success line",
    batch_field="requests overlapping",
    throughput_field="time_per_token",
    batch_cap_option="--max-concurrent-requests",
)
FIELDS = ("total_time", "queue_time", "inference_time", "time_per_token")
TEXT_FIELD = {name: re.compile(name + r'="([^"]{1,40})"') for name in FIELDS}
STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?)Z")
DURATION = re.compile(r"^(\d{1,12}(?:\.\d{1,12})?)(s|ms|µs|us|ns)$")
MAX_TOKENS = 10_000_000  # output tokens of one request, at most (more is a line that cannot be)
UNIT_S = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}
TTFT_UNTOLD = (
    "TTFT: TGI's router logs no first-token time (only total, queue and inference time), so it "
    "is not told; each request's per-token time is TGI's own time_per_token (inference time, "
    "prefill included, over its generated tokens)"
)


def claims(line: str) -> bool:
    """A router line with a request's timing (text or JSON)."""
    return "text_generation_router" in line and "time_per_token" in line and "total_time" in line


def duration_s(text: str) -> float | None:
    """A Rust ``Duration`` as TGI prints it ("2.345s", "23.45ms", "45.6µs"), in seconds."""
    found = DURATION.match(text)
    return float(found[1]) * UNIT_S[found[2]] if found else None


def _epoch_s(stamp: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 UTC time; None for a date that cannot be."""
    whole, _, fraction = stamp.partition(".")
    try:
        return datetime.fromisoformat(whole + "+00:00").timestamp() + float("0." + (fraction or "0"))
    except ValueError:  # month 13, hour 25
        return None


def _fields(line: str) -> tuple[str | None, dict[str, str]]:
    """(timestamp text, span fields) of a text or JSON router line."""
    if line.lstrip().startswith("{"):
        try:
            value: Any = loads(line)
        except BadJson:
            return None, {}
        span = value.get("span") if isinstance(value, dict) else None
        if not isinstance(span, dict):
            return None, {}
        stamp = STAMP.search(str(value.get("timestamp", "")))
        return (stamp[1] if stamp else None), {k: str(span[k]) for k in FIELDS if k in span}
    stamp = STAMP.search(line[:80])
    return (stamp[1] if stamp else None), {
        k: found[1] for k, pattern in TEXT_FIELD.items() if (found := pattern.search(line))
    }


@dataclass
class TgiReader:
    """Each router line with a request's timing, as a request on the log's clock."""

    path: Path
    skip_malformed: bool
    requests: list[RequestRecord] = field(default_factory=list)
    queue_s: list[float] = field(default_factory=list)
    origin: tuple[float, str] | None = None
    malformed: int = 0
    beyond: int = 0  # requests past MAX_REQUESTS, left out

    def context(self, number: int, line: str) -> None:
        """Nothing before the first request line is read."""

    def feed(self, number: int, raw: str) -> None:
        if not claims(raw):
            return
        line = strip_ansi(raw)  # the router colours its text lines unless LOG_COLORIZE=1
        if len(self.requests) >= MAX_REQUESTS:
            self.beyond += 1
            return
        stamp, values = _fields(line)
        seconds = {k: duration_s(v) for k, v in values.items()}
        total, inference, per_token = (seconds.get(k) for k in ("total_time", "inference_time", "time_per_token"))
        end = _epoch_s(stamp) if stamp is not None else None
        if end is None or total is None or inference is None or not per_token or inference / per_token > MAX_TOKENS:
            self._malformed(number, line)
            return
        if self.origin is None:
            start = end - total
            self.origin = (start, datetime.fromtimestamp(start, UTC).isoformat(timespec="microseconds"))
        end -= self.origin[0]
        tokens = max(round(inference / per_token), 1)
        first = end - per_token * (tokens - 1)  # so that its later tokens come at TGI's time_per_token
        self.requests.append(logged_request(f"line{number}", (end - total, end), first, tokens, number))
        if (queue := seconds.get("queue_time")) is not None:
            self.queue_s.append(queue)

    def _malformed(self, number: int, line: str) -> None:
        self.malformed += 1
        if not self.skip_malformed:
            raise TraceError(
                f"{self.path}:{number}: a TGI router line without a readable timestamp, total_time, "
                "inference_time or time_per_token (or with more than 10^7 tokens).",
                "Each request's timing comes from these fields; a line without them cannot be placed.",
                "Fix or remove the line, or pass --skip-malformed to leave such lines out.",
            )

    def traces(self) -> tuple[RequestTrace, ...]:
        if not self.requests:
            raise TraceError(
                f"{self.path}: no TGI router line with a request's timing.", "",
                "Pass the router's log at INFO level (its 'Success' lines).",
            )
        origin = self.origin[1] if self.origin else ""
        return (RequestTrace(str(self.path), "log", CAPABILITIES.name, tuple(self.requests),
                             clock_origin=origin, notes=self._notes(), first_token_logged=False),)

    def _notes(self) -> tuple[str, ...]:
        notes = [TTFT_UNTOLD]
        if self.queue_s:
            ordered = sorted(self.queue_s)
            notes.append(
                f"queue (TGI's queue_time, {len(ordered)} requests): median "
                f"{1e3 * statistics.median(ordered):.3g} ms, max {1e3 * ordered[-1]:.3g} ms"
            )
        if self.malformed:
            notes.append(f"{self.malformed} TGI router line(s) without readable timing were left out")
        if self.beyond:
            notes.append(beyond_note(self.beyond))
        return tuple(notes)


FORMAT = LineFormat(
    name="tgi",
    capabilities=CAPABILITIES,
    claims=claims,
    reader=lambda path, reading: TgiReader(path, reading.skip_malformed),
    describe="a TGI router log (text_generation_router lines with total_time and time_per_token, text or JSON)",
    help="TGI's router, text or --json-output: one 'Success' line per request\n"
    "with total_time, queue_time, inference_time, time_per_token",
)
