"""Read SGLang ``bench_serving --output-details`` results.

bench_serving appends one JSON object per benchmark to its ``--output-file`` (so the file is
JSONL, one line per benchmark). With ``--output-details`` the object carries per-request
``ttfts`` (s), ``itls`` (list of s per request), ``output_lens`` and ``errors``, plus the
summary (``mean_tpot_ms``…).

What it can give: the TTFT distribution, the inter-token-latency distribution (its median is
the steady per-token time), each request's TPOT and the time it spent above the median ITL
(stalls, mostly while other requests prefill). What it cannot: it has no per-request start
times, so requests cannot be put on one timeline — no batch size over time, no admission
ramp, steady window or drain, and no harness-style batch TPOT.

Values are checked where they enter (``json_values``): a successful request's TTFT and
inter-token latencies are finite durations from 0 to 10^6 s, an output length a whole number
up to 10^9, the reported mean TPOT a finite duration; ``NaN``, ``Infinity``, ``1e308`` or
10^30 is one paragraph naming the line and the field. A request with an error (or a TTFT of
0, bench_serving's mark of a failed one) is left out as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any

from ncuflow.phases import TraceError
from ncuflow.phases.model.traces import RequestRecord, RequestTrace
from ncuflow.phases.parse.format import JsonFormat, JsonObjects
from ncuflow.phases.parse.json_values import (
    MAX_DURATION_S,
    MAX_TOKENS_PER_CHUNK,
    count_or_none,
    duration_or_none,
    shown,
)
from ncuflow.phases.parse.values import MAX_COUNT

FIX = "Pass the unmodified bench_serving output file (bench_serving writes finite numbers)."


def is_bench_object(obj: Any) -> bool:
    return isinstance(obj, dict) and "ttfts" in obj and "itls" in obj


def parse_bench_json(
    path: Path, objects: Sequence[tuple[int, dict[str, Any]]]
) -> tuple[RequestTrace, ...]:
    """One ``RequestTrace`` per benchmark result (line) of the file."""
    return tuple(_bench_trace(path, line, obj) for line, obj in objects)


def _bench_trace(path: Path, line: int, obj: dict[str, Any]) -> RequestTrace:
    """One benchmark result: its successful requests, each on its own clock."""
    records = _bench_records(path, line, obj)
    if not records:
        raise TraceError(
            f"{path}:{line}: no successful request in this benchmark result.",
            "",
            "Check the 'errors' list of the result.",
        )
    return RequestTrace(
        path=str(path),
        run=_bench_label(line, obj),
        source_format="bench-json",
        requests=tuple(records),
        has_start_times=False,
        reported_mean_tpot_ms=_mean_tpot_ms(path, line, obj.get("mean_tpot_ms")),
    )


def _mean_tpot_ms(path: Path, line: int, value: Any) -> float | None:
    """The reported mean TPOT (ms), when the result states one; a value that is no duration is refused."""
    if value is None:
        return None
    milliseconds = duration_or_none(value / 1000 if isinstance(value, int | float) and not isinstance(value, bool)
                                    else None)
    if milliseconds is None:
        raise TraceError(f"{path}:{line}: 'mean_tpot_ms' is {shown(value)}, not a finite number of milliseconds "
                         f"from 0 to {MAX_DURATION_S * 1000:,.0f}.", "", FIX)
    return float(value)


def _bench_records(path: Path, line: int, obj: dict[str, Any]) -> list[RequestRecord]:
    """The requests of one result without an error and with a positive TTFT."""
    ttfts, itls = obj.get("ttfts"), obj.get("itls")
    lens = obj.get("output_lens")
    errors = obj.get("errors") or [""] * (len(ttfts) if isinstance(ttfts, list) else 0)
    if not isinstance(ttfts, list) or not isinstance(itls, list) or len(ttfts) != len(itls):
        raise TraceError(
            f"{path}:{line}: 'ttfts' and 'itls' must be lists of the same length.",
            "This does not look like bench_serving --output-details output.",
            "Re-run bench_serving with --output-details and pass its --output-file.",
        )
    records = []
    for i, (ttft, gaps) in enumerate(zip(ttfts, itls, strict=True)):
        if (isinstance(errors, list) and i < len(errors) and errors[i]) or ttft == 0 or ttft is None:
            continue  # a failed request (bench_serving writes a TTFT of 0 for those)
        times = tuple(accumulate([_duration(path, line, f"ttfts[{i}]", ttft), *_gaps(path, line, i, gaps)]))
        records.append(
            RequestRecord(
                request_id=str(i),
                submit_s=0.0,  # each request on its own clock: times from its submission
                chunk_times_s=times,
                chunk_tokens=(1,) * len(times),
                line=line,
                declared_output_tokens=_declared_length(path, line, lens, i, len(times)),
            )
        )
    return records


def _duration(path: Path, line: int, where: str, value: Any) -> float:
    seconds = duration_or_none(value)
    if seconds is None:
        raise TraceError(f"{path}:{line}: {where} is {shown(value)}, not a finite number of seconds from 0 to "
                         f"{MAX_DURATION_S:,.0f}.", "", FIX)
    return seconds


def _gaps(path: Path, line: int, i: int, gaps: Any) -> list[float]:
    if not isinstance(gaps, list):
        raise TraceError(f"{path}:{line}: itls[{i}] is {shown(gaps)}, not a list of numbers.", "", FIX)
    return [_duration(path, line, f"itls[{i}][{k}]", gap) for k, gap in enumerate(gaps)]


def _declared_length(path: Path, line: int, lens: Any, i: int, chunks: int) -> int | None:
    """``output_lens[i]`` where the result states it (a whole number; 0 or none: not stated)."""
    value = lens[i] if isinstance(lens, list) and i < len(lens) else None
    if value is None or value == 0:
        return None
    if count_or_none(value, low=1) is None or value > MAX_TOKENS_PER_CHUNK * chunks:
        raise TraceError(f"{path}:{line}: output_lens[{i}] is {shown(value)}, not a whole number from 1 to "
                         f"{MAX_COUNT:,} nor more than {MAX_TOKENS_PER_CHUNK} a streamed token time "
                         f"({chunks:,} of them).", "", FIX)
    return int(value)


def _bench_label(line: int, obj: dict[str, Any]) -> str:
    """``line N`` and the benchmark settings the result states, e.g. ``max_concurrency=16``."""
    label_parts = [f"line {line}"]
    for key in ("max_concurrency", "random_output_len", "request_rate"):
        value = obj.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and (abs(value) < 1e12 or value == math.inf):
            label_parts.append(f"{key}={value}")  # a stated setting: request_rate may be inf
    return ", ".join(label_parts)


def _read(path: Path, lines: list[str], objects: JsonObjects) -> tuple[RequestTrace, ...]:
    bad = next((n for n, o in objects if not is_bench_object(o)), None)
    if bad is not None:
        raise TraceError(
            f"{path}:{bad}: a bench_serving result line without 'ttfts'/'itls'.",
            "",
            "Run bench_serving with --output-details, or pass only such results.",
        )
    return parse_bench_json(path, objects)


FORMAT = JsonFormat(
    name="bench-json",
    title="bench_serving --output-details JSON",
    claims=lambda objects: bool(objects) and is_bench_object(objects[0][1]),
    read=_read,
    describe="bench_serving --output-details JSON",
    help="ttfts and itls of each request (no start times)",
)
