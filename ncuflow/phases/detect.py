"""Open an input, detect its format and hand it to the right parser.

Every input is opened by ``ncuflow.files.open_regular_file``: a FIFO, a device such as
/dev/zero, a socket or a folder is refused before a byte is read. A server log is read as a
stream, line by line (``parse.lines``): its format is that of its first scheduler statistics
line (SGLang's ``Prefill/Decode batch`` or vLLM's ``Running: N reqs``), and until that line
the lines around it (the bench_serving command, events) go to both readers. A file whose
first non-blank line is JSON is a per-request trace or a bench_serving result, read whole
(up to ``MAX_JSON_BYTES``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

from ncuflow.files import InputFileError, open_regular_file
from ncuflow.phases import TraceError
from ncuflow.phases.model import LogEvent, RequestTrace, ServerTrace
from ncuflow.phases.parse.bench import is_bench_object, parse_bench_json
from ncuflow.phases.parse.json_values import BadJson, loads
from ncuflow.phases.parse.jsonl import (
    file_lines,
    listed_lines,
    looks_like_request_jsonl,
    parse_request_jsonl,
)
from ncuflow.phases.parse.lines import LineCounts, numbered_lines
from ncuflow.phases.parse.sglang import SglangReader, claims_sglang, looks_like_sglang
from ncuflow.phases.parse.vllm import VllmReader, claims_vllm, looks_like_vllm, strip_ansi

Trace = ServerTrace | RequestTrace
MAX_JSON_BYTES = 128 << 20

FORMATS = (
    "an SGLang server log ('Prefill batch' / 'Decode batch' lines), a vLLM server log "
    "('Running: N reqs, Waiting: M reqs' lines), per-request streaming timestamps as JSONL "
    "('submit_time' and 'chunk_times' per line) or bench_serving --output-details JSON"
)


def open_trace(path: Path) -> BinaryIO:
    try:
        handle: BinaryIO = open_regular_file(path, kind="a serving trace")
    except InputFileError as error:
        raise TraceError(error.what, error.why, error.fix) from None
    return handle


def _first_meaningful(handle: BinaryIO) -> tuple[int, str] | None:
    for number, line in numbered_lines(handle):
        if line.strip():
            return number, line
    return None


def _json_like(text: str) -> bool:
    text = text.lstrip()
    return text.startswith(("{", "[")) and not text.startswith("[20")


def _not_a_format(path: Path, first: tuple[int, str]) -> TraceError:
    number, line = first
    text = strip_ansi(line).strip()
    shown = "binary data" if not text.isprintable() else f"first line: {text[:100]!r}"
    return TraceError(
        f"{path}:{number}: not a format ncuflow phases reads ({shown}).",
        "No SGLang Prefill/Decode batch lines and no vLLM statistics lines were found, and it is not JSON.",
        f"Pass {FORMATS}. A log with only HTTP access lines has no scheduler statistics.",
    )


def read_server_log(
    path: Path, handle: BinaryIO, *, skip_malformed: bool = False
) -> tuple[ServerTrace, ...]:
    """A server log, streamed: one pass, bounded memory."""
    sglang, vllm = SglangReader(path, skip_malformed), VllmReader(path, skip_malformed)
    chosen: SglangReader | VllmReader | None = None
    first: tuple[int, str] | None = None
    counts = LineCounts()
    for number, line in numbered_lines(handle, counts):
        if chosen is None:
            if first is None and line.strip():
                first = (number, line)
            if claims_sglang(line):
                chosen = sglang
            elif claims_vllm(strip_ansi(line)):
                chosen = vllm
            else:
                sglang.context(number, line)
                vllm.context(number, line)
                continue
        chosen.feed(number, line)
    if chosen is None:
        if first is None:
            raise _empty(path)
        raise _not_a_format(path, first)
    traces = chosen.traces()
    if counts.cut:
        note = LogEvent(
            None, counts.first_cut, "note",
            f"{counts.cut} line(s) longer than 64 KiB were read up to 64 KiB (first at line "
            f"{counts.first_cut}); no scheduler line is that long",
        )
        traces = tuple(replace(t, events=(*t.events, note)) for t in traces)
    return traces


def _empty(path: Path) -> TraceError:
    return TraceError(
        f"{path} is empty.", "There is no trace to split into phases.", f"Pass {FORMATS}."
    )


def _json_objects(path: Path, lines: list[str]) -> list[tuple[int, Any]]:
    whole = "\n".join(lines)
    try:
        obj = loads(whole)
    except BadJson:
        pass
    else:
        if isinstance(obj, list):
            return [(1, o) for o in obj]
        return [(1, obj)]
    objects = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            objects.append((number, loads(line)))
        except BadJson as error:
            raise TraceError(
                f"{path}:{number}: {error}.",
                "A JSONL trace needs one complete JSON object per line.",
                "Fix or remove the line, or pass the trace as the recorder or bench_serving wrote it.",
            ) from None
    return objects


def _json_traces(path: Path, lines: list[str]) -> tuple[Trace, ...]:
    objects = _json_objects(path, lines)
    if objects and is_bench_object(objects[0][1]):
        bench = [(n, o) for n, o in objects if is_bench_object(o)]
        if len(bench) != len(objects):
            bad = next(n for n, o in objects if not is_bench_object(o))
            raise TraceError(
                f"{path}:{bad}: a bench_serving result line without 'ttfts'/'itls'.",
                "",
                "Run bench_serving with --output-details, or pass only such results.",
            )
        return parse_bench_json(path, bench)
    if len(objects) == 1 and isinstance(objects[0][1], dict) and "submit_time" not in objects[0][1]:
        raise TraceError(
            f"{path}: a JSON object that is neither bench_serving --output-details output (no "
            "'ttfts'/'itls') nor a per-request trace (no 'submit_time').",
            "",
            f"Pass {FORMATS}.",
        )
    return parse_request_jsonl(path, listed_lines(lines))


def load_traces(path: Path, *, skip_malformed: bool = False) -> tuple[Trace, ...]:
    with open_trace(path) as handle:
        first = _first_meaningful(handle)
        if first is None:
            raise _empty(path)
        handle.seek(0)
        if _json_like(first[1]):
            size = handle.seek(0, 2)
            handle.seek(0)
            if size <= MAX_JSON_BYTES and looks_like_request_jsonl(first[1]):
                return parse_request_jsonl(path, file_lines(path, handle))  # streamed
            if size <= MAX_JSON_BYTES:
                text = handle.read().decode("utf-8", "replace")
                lines = [line.removesuffix("\r") for line in text.split("\n")]
                if lines and not lines[-1]:
                    lines.pop()
                if not looks_like_sglang(lines) and not looks_like_vllm(strip_ansi(x) for x in lines):
                    return _json_traces(path, lines)
                handle.seek(0)
            else:
                try:
                    return read_server_log(path, handle, skip_malformed=skip_malformed)
                except TraceError:
                    raise TraceError(
                        f"{path} holds {size:,} bytes and starts like JSON, more than the "
                        f"{MAX_JSON_BYTES >> 20} MiB ncuflow reads as a per-request trace, and "
                        "it is no server log.",
                        "A JSON trace is read whole, into memory.",
                        "Split it into one file per run (JSONL lines can be split anywhere).",
                    ) from None
        return read_server_log(path, handle, skip_malformed=skip_malformed)
