"""Open an input, detect its format and hand it to that format's reader.

Every input is opened by ``ncuflow.files.open_regular_file``: a FIFO, a device such as
/dev/zero, a socket or a folder is refused before a byte is read. A server log is read as a
stream, line by line (``parse.lines``): its format is that of its first line a format of
``parse.registry`` claims (SGLang's ``Prefill/Decode batch``, vLLM's ``Running: N reqs``…),
and until that line the lines around it (the bench_serving command, events) go to every
reader. A file whose first non-blank line is JSON is read whole (up to ``MAX_JSON_BYTES``)
by the first JSON format that claims it. ``LogReading.format_name`` (``--format``) skips
detection; its ``given`` settings go to the readers (``FormatOption``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

from ncuflow.files import InputFileError, open_regular_file
from ncuflow.phases import TraceError
from ncuflow.phases.model import LogEvent, RequestTrace, ServerTrace
from ncuflow.phases.parse import jsonl, registry
from ncuflow.phases.parse.format import JsonFormat, LineFormat, LineReader, LogReading
from ncuflow.phases.parse.json_values import BadJson, loads
from ncuflow.phases.parse.lines import LineCounts, numbered_lines, strip_ansi
from ncuflow.phases.parse.unsupported import Recognised, recognised, refusal_words

Trace = ServerTrace | RequestTrace
MAX_JSON_BYTES = 128 << 20


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


def _not_a_format(path: Path, first: tuple[int, str], engine: Recognised | None = None) -> TraceError:
    if engine is not None:
        what, why = refusal_words(engine)
        return TraceError(
            f"{path}:{engine.line}: {what}.", why, f"Pass {registry.described()}, or add its format."
        )
    number, line = first
    text = strip_ansi(line).strip()
    shown = "binary data" if not text.isprintable() else f"first line: {text[:100]!r}"
    return TraceError(
        f"{path}:{number}: not a format ncuflow phases reads ({shown}).",
        "No line of a server-log format ncuflow reads was found (scheduler statistics lines), "
        "and it is not JSON.",
        f"Pass {registry.described()}. A log with only HTTP access lines has no scheduler statistics.",
    )


def read_server_log(
    path: Path, handle: BinaryIO, reading: LogReading, *, forced: LineFormat | None = None
) -> tuple[Trace, ...]:
    """A server log, streamed: one pass, bounded memory. A format whose log has a line per
    request rather than batch statistics gives ``RequestTrace``s."""
    formats = (forced,) if forced is not None else registry.LINE_FORMATS
    readers = [(f, f.reader(path, reading)) for f in formats]
    chosen: LineReader | None = readers[0][1] if forced is not None else None
    claim: tuple[LineFormat, int] | None = (forced, 0) if forced is not None else None
    others: tuple[LineFormat, ...] = ()
    first: tuple[int, str] | None = None
    engine: Recognised | None = None
    counts = LineCounts()
    for number, line in numbered_lines(handle, counts):
        if chosen is None:
            if first is None and line.strip():
                first = (number, line)
            found = next(((f, reader) for f, reader in readers if f.claims(line)), None)
            if found is None:
                for _, reader in readers:
                    reader.context(number, line)
                engine = engine or recognised(number, line)
                continue
            claim, chosen = (found[0], number), found[1]
            others = tuple(f for f in registry.LINE_FORMATS if f is not found[0])
        elif claim is not None and (other := next((f for f in others if f.claims(line)), None)) is not None:
            raise _two_formats(path, claim, (other, number))
        chosen.feed(number, line)
    if chosen is None:
        if first is None:
            raise _empty(path)
        raise _not_a_format(path, first, engine)
    traces = chosen.traces()
    if counts.cut:
        note = LogEvent(
            None, counts.first_cut, "note",
            f"{counts.cut} line(s) longer than 64 KiB were read up to 64 KiB (first at line "
            f"{counts.first_cut}); no scheduler line is that long",
        )
        traces = tuple(
            replace(t, events=(*t.events, note)) if isinstance(t, ServerTrace) else replace(t, notes=(*t.notes, note.text))
            for t in traces
        )
    return traces


def _two_formats(path: Path, first: tuple[LineFormat, int], second: tuple[LineFormat, int]) -> TraceError:
    """A log in which a second server format starts (two logs concatenated): refused, never read
    as the first format alone (the second's runs would vanish without a word)."""
    (one, one_line), (two, two_line) = first, second
    return TraceError(
        f"{path}:{two_line}: a statistics line of the {two.title} format, in a file read as the "
        f"{one.title} format (from its statistics line {one_line}): the file holds two servers' logs.",
        "ncuflow reads one server's log a file; reading it as the first format alone would drop the "
        "second server's runs without a word.",
        f"Split the file where the {two.name} log begins (before line {two_line}) and pass both parts, "
        "or pass --format to read the lines of one format only.",
    )


def _empty(path: Path) -> TraceError:
    return TraceError(
        f"{path} is empty.", "There is no trace to split into phases.", f"Pass {registry.described()}."
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


def _json_traces(path: Path, lines: list[str], forced: JsonFormat | None = None) -> tuple[Trace, ...]:
    objects = _json_objects(path, lines)
    for json_format in (forced,) if forced is not None else registry.JSON_FORMATS:
        if forced is not None or json_format.claims(objects):
            return json_format.read(path, lines, objects)
    engine = next((e for e in (recognised(n, line) for n, line in enumerate(lines, start=1)) if e), None)
    if engine is not None:
        raise _not_a_format(path, (engine.line, engine.text), engine)
    raise TraceError(
        f"{path}: a JSON object that is neither bench_serving --output-details output (no "
        "'ttfts'/'itls') nor a per-request trace (no 'submit_time').",
        "",
        f"Pass {registry.described()}.",
    )


def _claimed_by_a_log_format(lines: list[str]) -> bool:
    return any(f.claims(line) for line in lines for f in registry.LINE_FORMATS)


def _forced(path: Path, format_name: str | None) -> LineFormat | JsonFormat | None:
    if format_name is None:
        return None
    found = registry.format_named(format_name)
    if found is None:
        raise TraceError(
            f"--format {format_name!r} is not a format ncuflow phases reads.",
            "",
            f"Give one of: {', '.join(registry.format_names())}, or leave --format out to detect it.",
        )
    return found


def load_traces(path: Path, reading: LogReading | None = None) -> tuple[Trace, ...]:
    """The traces of one input, in the format it is detected to be (or ``reading.format_name``)."""
    reading = reading or LogReading()
    forced = _forced(path, reading.format_name)
    with open_trace(path) as handle:
        first = _first_meaningful(handle)
        if first is None:
            raise _empty(path)
        handle.seek(0)
        if isinstance(forced, LineFormat):
            return read_server_log(path, handle, reading, forced=forced)
        if isinstance(forced, JsonFormat) or _json_like(first[1]):
            return _json_file(path, handle, reading, forced, first)
        return read_server_log(path, handle, reading)


def _json_file(
    path: Path, handle: BinaryIO, reading: LogReading, forced: JsonFormat | None, first: tuple[int, str]
) -> tuple[Trace, ...]:
    """A file that starts like JSON: read whole as JSON unless it is a server log after all."""
    size = handle.seek(0, 2)
    handle.seek(0)
    first_line = first[1]
    engine = recognised(*first) if forced is None else None
    if engine is not None:  # a known engine's JSON log lines (TGI's router with --json-output)
        raise _not_a_format(path, first, engine)
    if size <= MAX_JSON_BYTES and forced in (None, jsonl.FORMAT) and jsonl.looks_like_request_jsonl(first_line):
        return jsonl.parse_request_jsonl(path, jsonl.file_lines(path, handle))  # streamed, in bounded memory
    if size <= MAX_JSON_BYTES:
        text = handle.read().decode("utf-8", "replace")
        lines = [line.removesuffix("\r") for line in text.split("\n")]
        if lines and not lines[-1]:
            lines.pop()
        if forced is not None or not _claimed_by_a_log_format(lines):
            return _json_traces(path, lines, forced)
        handle.seek(0)
        return read_server_log(path, handle, reading)
    try:
        return read_server_log(path, handle, reading)
    except TraceError:
        raise TraceError(
            f"{path} holds {size:,} bytes and starts like JSON, more than the "
            f"{MAX_JSON_BYTES >> 20} MiB ncuflow reads as a per-request trace, and "
            "it is no server log.",
            "A JSON trace is read whole, into memory.",
            "Split it into one file per run (JSONL lines can be split anywhere).",
        ) from None
