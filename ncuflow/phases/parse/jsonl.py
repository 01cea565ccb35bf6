"""Read per-request streaming timestamps (JSONL), the format of ``ncuflow phases record``.

Schema, one JSON object per line, one line per request (blank lines and lines starting
with ``#`` are ignored):

- ``submit_time`` (number, seconds, required): when the client sent the request;
- ``chunk_times`` (list of numbers, seconds, required): arrival time of every streamed
  chunk that carried output tokens, non-decreasing, none before ``submit_time``;
- ``chunk_tokens`` (list of integers, optional): output tokens in each chunk (1 each when
  absent);
- ``output_tokens`` (integer, optional): the request's output length when the server
  reports it (e.g. ``usage.completion_tokens``), used instead of the chunk count;
- ``request_id`` (string, optional) and ``run`` (string, optional: requests with the same
  ``run`` form one run; default: the whole file is one run);
- ``error`` (string, optional): a failed request, left out and counted.

All times of a file must come from one clock (any epoch).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

from ncuflow.phases import TraceError
from ncuflow.phases.model.traces import RequestRecord, RequestTrace
from ncuflow.phases.parse.format import JsonFormat, JsonObjects

FIX = (
    "Each line must be one JSON object with 'submit_time' (seconds) and 'chunk_times' (list of "
    "seconds, one per streamed chunk); see `ncuflow phases --help` for the schema."
)


def _number(value: Any, path: Path, line: int, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TraceError(
            f"{path}:{line}: '{key}' is {value!r}, not a finite number of seconds.", "", FIX
        )
    return float(value)


def parse_request_jsonl(path: Path, lines: Sequence[str]) -> tuple[RequestTrace, ...]:
    by_run: dict[str, list[RequestRecord]] = {}
    failed = 0
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        obj = _object(path, number, text)
        if obj.get("error"):
            failed += 1
            continue
        run = str(obj["run"]) if "run" in obj else ""
        by_run.setdefault(run, []).append(_record(path, number, obj))
    if not by_run:
        raise TraceError(
            f"{path}: no requests" + (f" ({failed} failed request(s) only)." if failed else "."),
            "There is nothing to split into phases.",
            FIX,
        )
    if "" in by_run:
        unlabelled = by_run.pop("")
        for index, group in enumerate(split_at_idle(unlabelled), start=1):
            by_run[path.stem if index == 1 else f"{path.stem} #{index}"] = group
        if f"{path.stem} #2" in by_run:
            by_run[f"{path.stem} #1"] = by_run.pop(path.stem)
    _check_runs_do_not_overlap(path, by_run)
    origin = min(r.submit_s for records in by_run.values() for r in records)
    return tuple(
        RequestTrace(
            path=str(path),
            run=run,
            source_format="jsonl",
            requests=tuple(
                replace(
                    r,
                    submit_s=r.submit_s - origin,
                    chunk_times_s=tuple(t - origin for t in r.chunk_times_s),
                )
                for r in records
            ),
            clock_origin=f"{origin:.3f} s on the recorder's clock",
        )
        for run, records in sorted(by_run.items(), key=lambda kv: min(r.submit_s for r in kv[1]))
    )


def _object(path: Path, number: int, text: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as error:
        raise TraceError(
            f"{path}:{number}: not valid JSON ({error.msg} at column {error.colno}).", "", FIX
        ) from None
    if not isinstance(obj, dict):
        raise TraceError(f"{path}:{number}: a JSON {type(obj).__name__}, not an object.", "", FIX)
    return obj


def _record(path: Path, number: int, obj: dict[str, Any]) -> RequestRecord:
    for key in ("submit_time", "chunk_times"):
        if key not in obj:
            raise TraceError(f"{path}:{number}: the request has no '{key}'.", "", FIX)
    submit = _number(obj["submit_time"], path, number, "submit_time")
    chunks = _chunk_times(path, number, obj["chunk_times"], submit)
    return RequestRecord(
        request_id=str(obj.get("request_id", f"line {number}")),
        submit_s=submit,
        chunk_times_s=chunks,
        chunk_tokens=_chunk_tokens(path, number, obj.get("chunk_tokens"), len(chunks)),
        line=number,
        declared_output_tokens=_declared_tokens(path, number, obj.get("output_tokens")),
    )


def _chunk_times(path: Path, number: int, value: Any, submit: float) -> tuple[float, ...]:
    if not isinstance(value, list) or not value:
        raise TraceError(
            f"{path}:{number}: 'chunk_times' is empty or not a list.",
            "A request without streamed chunks has no token times (if it failed, mark it "
            "with an 'error' field so it is left out).",
            FIX,
        )
    chunks = tuple(_number(v, path, number, "chunk_times") for v in value)
    if any(b < a for a, b in pairwise(chunks)):
        raise TraceError(
            f"{path}:{number}: 'chunk_times' go back in time.",
            "Chunks arrive in order on one stream.",
            FIX,
        )
    if chunks[0] < submit:
        raise TraceError(
            f"{path}:{number}: the first chunk arrives {submit - chunks[0]:.3f} s before 'submit_time'.",
            "Submit and chunk times must come from the same clock.",
            FIX,
        )
    return chunks


def _chunk_tokens(path: Path, number: int, value: Any, chunks: int) -> tuple[int, ...]:
    if value is None:
        return (1,) * chunks
    if (
        not isinstance(value, list)
        or len(value) != chunks
        or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
    ):
        raise TraceError(
            f"{path}:{number}: 'chunk_tokens' must be a list of non-negative integers, one per chunk.",
            "",
            FIX,
        )
    return tuple(value)


def _declared_tokens(path: Path, number: int, value: Any) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise TraceError(
            f"{path}:{number}: 'output_tokens' is {value!r}, not a positive integer.", "", FIX
        )
    return value


def split_at_idle(records: list[RequestRecord]) -> list[list[RequestRecord]]:
    """Requests without a 'run' field: a new run starts whenever nothing was in flight."""
    groups: list[list[RequestRecord]] = []
    busy_until = -math.inf
    for record in sorted(records, key=lambda r: r.submit_s):
        if record.submit_s >= busy_until or not groups:
            groups.append([])
        groups[-1].append(record)
        busy_until = max(busy_until, record.chunk_times_s[-1])
    return groups


def _check_runs_do_not_overlap(path: Path, by_run: dict[str, list[RequestRecord]]) -> None:
    spans = sorted(
        (
            min(r.submit_s for r in records),
            max(r.chunk_times_s[-1] for r in records),
            run,
            records[0].line,
        )
        for run, records in by_run.items()
    )
    for (_start_a, end_a, run_a, line_a), (start_b, _end_b, run_b, line_b) in pairwise(spans):
        if start_b < end_a:
            raise TraceError(
                f"{path}: runs '{run_a}' (from line {line_a}) and '{run_b}' (from line {line_b}) overlap "
                f"in time by {end_a - start_b:.3f} s.",
                "Interleaved runs shared the server, so neither has its own admission ramp or steady "
                "batch.",
                "Record each run on its own (one after the other), or give requests of one run the "
                "same 'run' value.",
            )


def _claims(objects: JsonObjects) -> bool:
    """Per-request lines: anything but one JSON object without 'submit_time' (which is no
    trace of any format ncuflow reads)."""
    return not (len(objects) == 1 and isinstance(objects[0][1], dict) and "submit_time" not in objects[0][1])


FORMAT = JsonFormat(
    name="jsonl",
    title="per-request streaming trace (JSONL)",
    claims=_claims,
    read=lambda path, lines, objects: parse_request_jsonl(path, lines),
    describe="per-request streaming timestamps as JSONL ('submit_time' and 'chunk_times' per line)",
)
