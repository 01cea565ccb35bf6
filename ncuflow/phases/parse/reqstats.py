"""SGLang's own per-request timing lines, logged when a request finishes
(``--enable-request-time-stats-logging``), in both spellings SGLang has used::

    Req Time Stats(rid=…, input len=1024, output len=512, type=unified): queue_duration=1.20ms,
        forward_duration=20503.33ms, start_time=…
    ReqTimeStats(rid=…, input_len=1024, cached_input_len=0, output_len=512, attempts=0,
        type=unified): queue_duration=1.20ms, initial_prefill_elapsed=210.11ms,
        post_prefill_elapsed=20293.22ms, forward_duration=20503.33ms, entry_time=…

``post_prefill_elapsed`` runs from the request's first token to its last, so its TPOT is
``post_prefill_elapsed / (output_len − 1)``, what bench_serving calls TPOT. The older line has
only ``forward_duration`` (prefill and decode together): no TPOT, only output lengths and
queue times. Lines of PD-disaggregated requests (``type=prefill``/``decode``) are counted but
not used. Values are checked like every other (``values``): a line that cannot be read is
left out and counted, never taken as data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ncuflow.phases.model.traces import RequestTimings
from ncuflow.phases.parse.values import BadValue, count_value, rate_value, split_fields

MARKERS = ("ReqTimeStats(", "Req Time Stats(")
MAX_KEPT = 1 << 19


def find_marker(line: str) -> int:
    """Where a per-request timing line's ``(`` opens, or -1."""
    for marker in MARKERS:
        at = line.find(marker)
        if at >= 0:
            return at + len(marker)
    return -1


@dataclass(frozen=True)
class RequestLine:
    output_tokens: int
    queue_s: float
    prefill_s: float  # NaN when the line does not say
    decode_s: float  # NaN when the line does not say
    forward_s: float
    unified: bool


def _duration(fields: dict[str, str], key: str) -> float:
    if key not in fields:
        return math.nan
    text = fields[key]
    if not text.endswith("ms"):
        raise BadValue(key, text, "a duration in ms")
    return rate_value(key, text[:-2]) / 1000.0


def parse_request_line(line: str, opening: int) -> RequestLine:
    """The fields of a timing line whose ``(`` ends at ``opening``; raises ``BadValue``."""
    head, found, tail = line[opening:].partition("):")
    if not found:
        raise BadValue("Req Time Stats", line[opening : opening + 40], "a complete timing line")
    header = {k.replace(" ", "_"): v for k, v in split_fields(head, "=").items()}
    body = split_fields(tail, "=")
    if "output_len" not in header:
        raise BadValue("output len", "", "a count")
    forward = _duration(body, "forward_duration")
    if math.isnan(forward):
        raise BadValue("forward_duration", "", "a duration in ms")
    return RequestLine(
        output_tokens=count_value("output len", header["output_len"]),
        queue_s=_duration(body, "queue_duration"),
        prefill_s=_duration(body, "initial_prefill_elapsed"),
        decode_s=_duration(body, "post_prefill_elapsed"),
        forward_s=forward,
        unified=header.get("type", "unified") == "unified",
    )


@dataclass
class RequestTimingLog:
    """The timing lines of one scheduler as they are read (columns; see ``RequestTimings``)."""

    columns: RequestTimings = field(default_factory=RequestTimings)
    stride: int = 1
    seen: int = 0
    other_types: int = 0

    def add(self, time_s: float, line: int, request: RequestLine) -> None:
        if not request.unified:
            self.other_types += 1
            return
        self.seen += 1
        if (self.seen - 1) % self.stride:
            return
        c = self.columns
        c.time_s.append(time_s)
        c.line.append(line)
        c.output_tokens.append(request.output_tokens)
        c.queue_s.append(request.queue_s)
        c.prefill_s.append(request.prefill_s)
        c.decode_s.append(request.decode_s)
        c.forward_s.append(request.forward_s)
        if len(c.time_s) > MAX_KEPT:
            self._thin()

    def _thin(self) -> None:
        """Keep every other line (and from now on every 2·stride-th): bounded memory."""
        c = self.columns
        self.columns = RequestTimings(
            time_s=c.time_s[::2],
            line=c.line[::2],
            output_tokens=c.output_tokens[::2],
            queue_s=c.queue_s[::2],
            prefill_s=c.prefill_s[::2],
            decode_s=c.decode_s[::2],
            forward_s=c.forward_s[::2],
        )
        self.stride *= 2

    def timings(self) -> RequestTimings | None:
        if not self.seen:
            return None
        c = self.columns
        return RequestTimings(
            c.time_s, c.line, c.output_tokens, c.queue_s, c.prefill_s, c.decode_s, c.forward_s,
            stride=self.stride, seen=self.seen,
        )
