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
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any

from ncuflow.phases import TraceError
from ncuflow.phases.model.traces import RequestRecord, RequestTrace
from ncuflow.phases.parse.format import JsonFormat, JsonObjects


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
    mean_tpot = obj.get("mean_tpot_ms")
    return RequestTrace(
        path=str(path),
        run=_bench_label(line, obj),
        source_format="bench-json",
        requests=tuple(records),
        has_start_times=False,
        reported_mean_tpot_ms=float(mean_tpot) if isinstance(mean_tpot, int | float) else None,
    )


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
        if (i < len(errors) and errors[i]) or not isinstance(ttft, int | float) or ttft <= 0:
            continue
        if not isinstance(gaps, list) or not all(isinstance(g, int | float) for g in gaps):
            raise TraceError(
                f"{path}:{line}: itls[{i}] is not a list of numbers.",
                "",
                "Pass the unmodified bench_serving output file.",
            )
        times = tuple(accumulate([float(ttft), *map(float, gaps)]))
        declared = _declared_length(lens, i)
        records.append(
            RequestRecord(
                request_id=str(i),
                submit_s=0.0,  # each request on its own clock: times from its submission
                chunk_times_s=times,
                chunk_tokens=(1,) * len(times),
                line=line,
                declared_output_tokens=declared if declared and declared > 0 else None,
            )
        )
    return records


def _declared_length(lens: Any, i: int) -> int | None:
    """``output_lens[i]`` where the result has it as a whole number."""
    return (
        lens[i] if isinstance(lens, list) and i < len(lens) and isinstance(lens[i], int) else None
    )


def _bench_label(line: int, obj: dict[str, Any]) -> str:
    """``line N`` and the benchmark settings the result states, e.g. ``max_concurrency=16``."""
    label_parts = [f"line {line}"]
    for key in ("max_concurrency", "random_output_len", "request_rate"):
        if obj.get(key) is not None:
            label_parts.append(f"{key}={obj[key]}")
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
)
