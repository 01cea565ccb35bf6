"""Read per-request streaming timestamps (JSONL), the format of ``ncuflow phases-record``.

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

A line whose object holds ``ncuflow_trace`` is the recorder's header (who wrote the file,
from which server): skipped.

All times of a file must come from one clock (any epoch). Values are checked where they
enter (``json_values``): a time is a finite number of at most 10^10 s, a count a whole
number up to 10^9; anything else (``NaN``, ``1e308``, a 5000-digit integer, ``true``) is
one paragraph naming the line and field.

The file is read twice, line by line, in bounded memory, up to where it ended when it was
opened (lines a recorder appends meanwhile are left out): the first pass checks every line
and keeps only each request's span and run (24 bytes a request); the second builds the
requests of the runs analysed. Beyond ``RUNS`` runs (a quiet server's one-request runs),
only every ``stride``-th run in time order is analysed, as for server logs, and a note says
so. A last line cut short (a recorder stopped mid-write) is left out with a note.
"""

from __future__ import annotations

import math
import os
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, BinaryIO

from ncuflow.phases import TraceError
from ncuflow.phases.model.traces import RequestRecord, RequestTrace
from ncuflow.phases.parse.compact import RUNS, ordinal
from ncuflow.phases.parse.format import JsonFormat, JsonObjects
from ncuflow.phases.parse.json_values import (
    MAX_TOKENS_PER_CHUNK,
    BadJson,
    count_or_none,
    loads,
    seconds_or_none,
    shown,
)
from ncuflow.phases.parse.values import MAX_COUNT

FIX = (
    "Each line must be one JSON object with 'submit_time' (seconds) and 'chunk_times' (list of "
    "seconds, one per streamed chunk); see `ncuflow phases --help` for the schema."
)
MAX_LINE_BYTES = 64 << 20  # one request's record (3 million chunk times)
# What the analysis of a run holds, measured (a run of 400,000 requests of 3.5 chunks, one of
# 5,000 requests of 1,000 chunks): about 600 bytes a request and 160 bytes a chunk time.
REQUEST_BYTES = 600
CHUNK_BYTES = 160
MAX_HELD_BYTES = 1_400_000_000  # the runs analysed at once: under the fault suite's 2 GiB with the rest
MAX_LABEL = 200
TRACE_HEADER_KEY = "ncuflow_trace"  # the recorder's header record (phases-record), skipped

# (line number, text, whether the line ended with a newline)
Line = tuple[int, str, bool]
LineSource = Callable[[], Iterator[Line]]


def file_lines(path: Path, handle: BinaryIO) -> LineSource:
    """The lines of ``handle`` from its start to where it ended when the source was made, each time
    the source is called: both passes read the same bytes, and a trace still being written (a
    recorder appending faster than it is read) does not keep the first pass going."""
    size = os.fstat(handle.fileno()).st_size

    def lines() -> Iterator[Line]:
        handle.seek(0)
        number, left = 0, size
        while left > 0 and (chunk := handle.readline(min(MAX_LINE_BYTES + 1, left))):
            left -= len(chunk)
            number += 1
            if len(chunk) > MAX_LINE_BYTES:
                raise TraceError(f"{path}:{number}: a line longer than {MAX_LINE_BYTES >> 20} MiB.",
                                 "No request's record is that long.", FIX)
            complete = chunk.endswith(b"\n")
            yield number, chunk.decode("utf-8", "replace").rstrip("\r\n"), complete

    return lines


def listed_lines(lines: list[str]) -> LineSource:
    return lambda: ((number, text, True) for number, text in enumerate(lines, start=1))


def looks_like_request_jsonl(first_line: str) -> bool:
    """Whether a file whose first meaningful line is ``first_line`` is a per-request trace."""
    return first_line.lstrip().startswith("{") and any(
        f'"{key}"' in first_line for key in ("submit_time", "chunk_times", TRACE_HEADER_KEY))


@dataclass
class _Index:
    """The first pass: every request's span, line and run, in arrays; no request is held.

    Runs are numbered: the labels given by 'run' first, then the groups of requests without
    one (split where nothing was in flight)."""

    submit: array = field(default_factory=lambda: array("d"))
    end: array = field(default_factory=lambda: array("d"))
    line: array = field(default_factory=lambda: array("q"))
    chunks: array = field(default_factory=lambda: array("q"))
    run: array = field(default_factory=lambda: array("q"))  # -1 until runs are numbered: no 'run' field
    labels: dict[str, int] = field(default_factory=dict)
    label_names: list[str] = field(default_factory=list)
    idle_groups: int = 0
    failed: int = 0
    cut_last_line: int = 0


def _requests(path: Path, source: LineSource, index: _Index | None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, object) of every request line that did not fail; counts the failed ones."""
    for number, raw, complete in source():
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        try:
            obj = _object(path, number, text)
        except TraceError:
            if complete:
                raise
            if index is not None:  # the last line, cut short: a recorder stopped mid-write
                index.cut_last_line = number
            return
        if TRACE_HEADER_KEY in obj:
            continue
        if obj.get("error"):
            if index is not None:
                index.failed += 1
            continue
        yield number, obj


def _scan(path: Path, source: LineSource) -> _Index:
    index = _Index()
    for number, obj in _requests(path, source, index):
        record = _record(path, number, obj)
        index.submit.append(record.submit_s)
        index.end.append(record.chunk_times_s[-1])
        index.line.append(number)
        index.chunks.append(len(record.chunk_times_s))
        run = _run_label(path, number, obj)
        index.run.append(-1 if run is None else index.labels.setdefault(run, len(index.labels)))
    _number_idle_groups(index)
    return index


def _number_idle_groups(index: _Index) -> None:
    """Requests without a 'run' field, by submit time: a new run starts whenever nothing was in flight."""
    busy_until = -math.inf
    group = len(index.labels) - 1
    for position in sorted((p for p, run in enumerate(index.run) if run < 0), key=index.submit.__getitem__):
        if index.submit[position] >= busy_until:
            group += 1
        busy_until = max(busy_until, index.end[position])
        index.run[position] = group
    index.idle_groups = group + 1 - len(index.labels)


@dataclass(frozen=True)
class _Runs:
    """Every run's span and first line, indexed by run number, and the run numbers in time order."""

    start: array
    end: array
    first_line: array
    requests: array
    chunks: array
    in_time_order: list[int]

    def held_bytes(self, runs: list[int]) -> int:
        """About what the analysis of ``runs`` holds in memory."""
        return sum(REQUEST_BYTES * self.requests[r] + CHUNK_BYTES * self.chunks[r] for r in runs)


def _runs(index: _Index) -> _Runs:
    count = len(index.labels) + index.idle_groups
    start, end = array("d", [math.inf]) * count, array("d", [-math.inf]) * count
    first_line, requests, chunks = array("q", [0]) * count, array("q", [0]) * count, array("q", [0]) * count
    for position, run in enumerate(index.run):
        if index.submit[position] < start[run]:
            start[run] = index.submit[position]
        end[run] = max(end[run], index.end[position])
        first_line[run] = first_line[run] or index.line[position]
        requests[run] += 1
        chunks[run] += index.chunks[position]
    return _Runs(start, end, first_line, requests, chunks, sorted(range(count), key=start.__getitem__))


def _run_name(path: Path, index: _Index, run: int) -> str:
    labels = len(index.labels)
    if run < labels:
        if len(index.label_names) != labels:
            index.label_names = list(index.labels)  # numbered in order of appearance
        return index.label_names[run]
    return path.stem if index.idle_groups == 1 else f"{path.stem} #{run - labels + 1}"


def parse_request_jsonl(path: Path, source: LineSource) -> tuple[RequestTrace, ...]:
    index = _scan(path, source)
    if not index.submit:
        raise TraceError(
            f"{path}: no requests" + (f" ({index.failed} failed request(s) only)." if index.failed else "."),
            "There is nothing to split into phases.",
            FIX,
        )
    runs = _runs(index)
    _check_runs_do_not_overlap(path, index, runs)
    stride = _stride(path, index, runs)
    kept = runs.in_time_order[::stride]
    origin = min(index.submit)
    records = _kept_records(path, source, index, set(kept), origin)
    short = next((run for run in kept if len(records[run]) != runs.requests[run]), None)
    if short is not None:
        raise _changed(path, runs.first_line[short])
    notes = _notes(index, len(runs.in_time_order), stride)
    return tuple(
        RequestTrace(
            path=str(path),
            run=_run_name(path, index, run),
            source_format="jsonl",
            requests=tuple(records[run]),
            clock_origin=f"{origin:.3f} s on the recorder's clock",
            notes=notes if number == 0 else (),
        )
        for number, run in enumerate(kept)
    )


def _stride(path: Path, index: _Index, runs: _Runs) -> int:
    """Every how many runs, in time order, one is analysed: 1 unless there are more than
    ``RUNS`` or their analysis would hold more than ``MAX_HELD_BYTES``. A single run beyond
    that is refused: its analysis would not fit in bounded memory."""
    order = runs.in_time_order
    stride = 1
    while stride < len(order) and (len(order) > stride * RUNS or runs.held_bytes(order[::stride]) > MAX_HELD_BYTES):
        stride *= 2
    if runs.held_bytes(order[::stride]) > MAX_HELD_BYTES:
        run = order[0]
        raise TraceError(
            f"{path}: run '{_run_name(path, index, run)}' (from line {runs.first_line[run]}) holds "
            f"{runs.requests[run]:,} requests and {runs.chunks[run]:,} chunk times: its analysis would take about "
            f"{runs.held_bytes([run]) / 1e9:.1f} GB, more than the {MAX_HELD_BYTES / 1e9:.1f} GB ncuflow "
            "allows itself.",
            f"A run's requests are analysed together, in memory (about {REQUEST_BYTES} bytes a request and "
            f"{CHUNK_BYTES} a chunk time).",
            "Split the trace into runs (give requests a 'run' value), or record fewer requests per run.",
        )
    return stride


def _kept_records(path: Path, source: LineSource, index: _Index, kept: set[int],
                  origin: float) -> dict[int, list[RequestRecord]]:
    """The second pass: the requests of the runs analysed, read again from their lines (the
    first pass's requests are in line order, so one position walks along)."""
    records: dict[int, list[RequestRecord]] = {run: [] for run in kept}
    position, last = 0, index.line[-1]
    for number, obj in _requests(path, source, None):
        if number > last:
            break  # lines written since the first pass: the trace is read as that pass found it
        while index.line[position] < number:
            position += 1
        if index.line[position] != number:
            raise _changed(path, number)
        if index.run[position] in kept:
            records[index.run[position]].append(_record(path, number, obj, origin))
    return records


def _changed(path: Path, number: int) -> TraceError:
    return TraceError(
        f"{path}: the file changed while it was read (near line {number}, its requests are not those "
        "read a moment before).",
        "ncuflow reads a trace twice, the second time for the runs it analyses; something rewrote "
        "the file in between (lines added at its end are left out, as the first reading ended there).",
        "Analyse the trace once its recorder has stopped writing, or analyse a copy of it.",
    )


def _notes(index: _Index, runs: int, stride: int) -> tuple[str, ...]:
    notes = []
    if stride > 1:
        notes.append(f"the trace holds {runs:,} runs: only every {ordinal(stride)} was analysed, in time order "
                     "(kept in bounded memory)")
    if index.cut_last_line:
        notes.append(f"the last line ({index.cut_last_line}) is cut short, as a recorder stopped mid-write "
                     "leaves it: left out")
    return tuple(notes)


def _object(path: Path, number: int, text: str) -> dict[str, Any]:
    try:
        obj = loads(text)
    except BadJson as error:
        raise TraceError(f"{path}:{number}: {error}.", "", FIX) from None
    if not isinstance(obj, dict):
        raise TraceError(f"{path}:{number}: a JSON {type(obj).__name__}, not an object.", "", FIX)
    return obj


def _run_label(path: Path, number: int, obj: dict[str, Any]) -> str | None:
    if "run" not in obj:
        return None
    run = obj["run"]
    if isinstance(run, bool) or not isinstance(run, str | int | float) or len(str(run)) > MAX_LABEL:
        raise TraceError(f"{path}:{number}: 'run' is {shown(run)}, not a label (text of at most {MAX_LABEL} "
                         "characters, or a number).", "", FIX)
    return str(run)


def _record(path: Path, number: int, obj: dict[str, Any], origin: float = 0.0) -> RequestRecord:
    """The request of one line, its times counted from ``origin``."""
    for key in ("submit_time", "chunk_times"):
        if key not in obj:
            raise TraceError(f"{path}:{number}: the request has no '{key}'.", "", FIX)
    submit = _seconds(obj["submit_time"], path, number, "submit_time")
    chunks = _chunk_times(path, number, obj["chunk_times"], submit)
    return RequestRecord(
        request_id=str(obj.get("request_id", f"line {number}"))[:MAX_LABEL],
        submit_s=submit - origin,
        chunk_times_s=tuple(t - origin for t in chunks) if origin else chunks,
        chunk_tokens=_chunk_tokens(path, number, obj.get("chunk_tokens"), len(chunks)),
        line=number,
        declared_output_tokens=_declared_tokens(path, number, obj.get("output_tokens"), len(chunks)),
    )


def _seconds(value: Any, path: Path, line: int, key: str) -> float:
    seconds = seconds_or_none(value)
    if seconds is None:
        raise TraceError(
            f"{path}:{line}: '{key}' is {shown(value)}, not a finite number of seconds (at most 1e10 in size).",
            "", FIX,
        )
    return seconds


def _chunk_times(path: Path, number: int, value: Any, submit: float) -> tuple[float, ...]:
    if not isinstance(value, list) or not value:
        raise TraceError(
            f"{path}:{number}: 'chunk_times' is empty or not a list.",
            "A request without streamed chunks has no token times (if it failed, mark it "
            "with an 'error' field so it is left out).",
            FIX,
        )
    chunks = tuple(_seconds(v, path, number, "chunk_times") for v in value)
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
    if not isinstance(value, list) or len(value) != chunks or any(count_or_none(t) is None for t in value):
        raise TraceError(
            f"{path}:{number}: 'chunk_tokens' must be a list of whole numbers from 0 to {MAX_COUNT:,}, one per chunk.",
            "",
            FIX,
        )
    return tuple(value)


def _declared_tokens(path: Path, number: int, value: Any, chunks: int) -> int | None:
    if value is not None and count_or_none(value, low=1) is None:
        raise TraceError(
            f"{path}:{number}: 'output_tokens' is {shown(value)}, not a whole number from 1 to {MAX_COUNT:,}.",
            "", FIX,
        )
    if value is not None and value > MAX_TOKENS_PER_CHUNK * chunks:
        raise TraceError(
            f"{path}:{number}: 'output_tokens' is {value:,} for {chunks:,} streamed chunk(s), more than "
            f"{MAX_TOKENS_PER_CHUNK} tokens a chunk.",
            "Per-token times and the harness TPOT would divide by tokens the stream did not carry.",
            FIX,
        )
    return value


def _check_runs_do_not_overlap(path: Path, index: _Index, runs: _Runs) -> None:
    for a, b in pairwise(runs.in_time_order):
        if runs.start[b] < runs.end[a]:
            raise TraceError(
                f"{path}: runs '{_run_name(path, index, a)}' (from line {runs.first_line[a]}) and "
                f"'{_run_name(path, index, b)}' (from line {runs.first_line[b]}) overlap in time by "
                f"{runs.end[a] - runs.start[b]:.3f} s.",
                "Interleaved runs shared the server, so neither has its own admission ramp or steady "
                "batch.",
                "Record each run on its own (one after the other), or give requests of one run the "
                "same 'run' value.",
            )


def _claims(objects: JsonObjects) -> bool:
    """Per-request lines: anything but one JSON object without 'submit_time' (which is no
    trace of any format ncuflow reads)."""
    only = objects[0][1] if len(objects) == 1 else None
    return not (isinstance(only, dict) and "submit_time" not in only and TRACE_HEADER_KEY not in only)


FORMAT = JsonFormat(
    name="jsonl",
    title="per-request streaming trace (JSONL)",
    claims=_claims,
    read=lambda path, lines, objects: parse_request_jsonl(path, listed_lines(lines)),
    describe="per-request streaming timestamps as JSONL ('submit_time' and 'chunk_times' per line)",
    help='one request per line: {"submit_time": s, "chunk_times": [s, ...],\n'
    '"chunk_tokens": [n, ...]?, "output_tokens": n?, "run": "..."?}',
)
