"""The trace ``phases-record`` writes: its header, its records (each bounded), the file it replaces.

The first line is the recorder's header record, ``{"ncuflow_trace": "phases-record", ...}``:
how a later recording knows the file as its own, by what it wrote (a bench_serving result
also starts with ``{"``); ``phases`` skips it. Each request's record is one line, written as
the request ends, of at most ``max_record_bytes`` with its newline (what ``phases`` reads):
a longer one is written as a failed record that says what was cut.

Where the lines go:

- a new path (or an empty file): the file itself, line by line, so Ctrl-C, a crash or
  ``kill -9`` keep every request that ended;
- an earlier trace of the recorder: a temporary file beside it, renamed onto it when the
  recording ends with at least one request recorded. When none was (a typo'd port: every
  request failed) the earlier trace is kept as it was and the temporary removed. A ``kill -9``
  leaves the earlier trace whole and the new requests in the temporary
  (``.ncuflow-tmp-PID-recording-NAME``), which the next ncuflow output in that folder removes;
- anything else was refused before (``guard_output`` with ``is_own_trace``).

A write the system refuses (a full disk, a quota) cuts the file back to its last whole line
and raises an ``OutputError`` that says what the trace holds and what became of the earlier one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from ncuflow.files import OutputError, os_error, temporary_beside, text_recogniser
from ncuflow.phases.parse.jsonl import MAX_LABEL, TRACE_HEADER_KEY

RECORDER = "phases-record"
TRACE_VERSION = 1
HEADER_START = json.dumps({TRACE_HEADER_KEY: RECORDER})[:-1]  # how the header line begins
is_own_trace = text_recogniser(HEADER_START)


def trace_header(endpoint_url: str, model: str) -> dict[str, Any]:
    """The recorder's first line: who wrote the file, from which server and model, when."""
    return {TRACE_HEADER_KEY: RECORDER, "version": TRACE_VERSION, "endpoint": endpoint_url,
            "model": model[:MAX_LABEL], "started": time.time()}


def _became_special(path: Path) -> OutputError:
    return OutputError(f"Refusing to write a request trace (JSONL) to {path}: it became a special file (a FIFO "
                       "or device) after the recorder checked it.", "Nothing was written to it.",
                       "Give --out the path of a regular file.")


def _open_flags(replacing: bool) -> int:
    # never blocks (a FIFO put there meanwhile is refused, not waited on); never follows a link
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    return flags | getattr(os, "O_NONBLOCK", 0) | (os.O_EXCL if replacing else os.O_TRUNC)


class TraceWriter:
    """The JSONL trace at ``path`` (a real path: ``output_target``'s), one flushed line per record."""

    def __init__(self, path: Path, header: dict[str, Any], max_record_bytes: int) -> None:
        self.path = path
        self.max_record_bytes = max_record_bytes
        self.written = 0
        self.failed = 0
        self.first_failure = ""
        self.kept_earlier = False
        self.replacing = os.path.lexists(path) and os.lstat(path).st_size > 0
        self._file = temporary_beside(path, "recording-") if self.replacing else path
        try:
            self._fd = os.open(self._file, _open_flags(self.replacing), 0o644)
        except OSError as error:
            if error.errno == errno.ENXIO:  # a FIFO no one reads, put there meanwhile
                raise _became_special(path) from None
            raise
        self._whole = 0  # bytes of whole lines written
        self._refused_once = False
        if not stat.S_ISREG(os.fstat(self._fd).st_mode):
            os.close(self._fd)
            raise _became_special(path)
        self._line(header)

    @property
    def recorded(self) -> int:
        return self.written - self.failed

    def write(self, record: dict[str, Any]) -> None:
        """One record as one line (cut to its fields but its chunk times when it would be too long)."""
        self._line(self._bounded(record))
        self.written += 1
        if "error" in record:
            self.failed += 1
            self.first_failure = self.first_failure or str(record["error"])

    def _bounded(self, record: dict[str, Any]) -> dict[str, Any]:
        size = len(json.dumps(record)) + 1
        if size <= self.max_record_bytes:
            return record
        kept = {key: record[key] for key in ("request_id", "run", "submit_time") if key in record}
        chunks = len(record.get("chunk_times", ()))
        return kept | {"error": f"the record was {size:,} bytes ({chunks:,} chunk times), longer than "
                                f"--max-record-bytes {self.max_record_bytes:,}: written without its chunk times"}

    def _line(self, record: dict[str, Any]) -> None:
        data = memoryview((json.dumps(record) + "\n").encode())
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError as error:
            self._refused_once = True
            raise self._refused(error) from None
        self._whole = os.lseek(self._fd, 0, os.SEEK_CUR)

    def _refused(self, error: OSError) -> OutputError:
        """The system refused a write: the file cut back to its whole lines, said as it is."""
        try:
            os.ftruncate(self._fd, self._whole)
            lines = "whole lines: the line being written was removed"
        except OSError:
            lines = "its last line may be cut short, which phases leaves out"
        base = os_error(error, self.path)
        if not self.replacing:
            holds = f"{self.path} holds the {self.recorded} request(s) recorded before ({lines})."
        elif self.recorded:
            holds = (f"The {self.recorded} request(s) recorded before ({lines}) replace the earlier trace at "
                     f"{self.path}.")
        else:
            holds = f"No request was recorded: the earlier trace at {self.path} is kept as it was."
        return OutputError(base.what, f"{base.why} {holds} The requests after it were not recorded.",
                           "Free some space there (or give --out a path on another file system), then record again.")

    def close(self) -> None:
        """Flush the trace to disk; an earlier trace is replaced now, or kept when nothing was recorded."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        try:
            with contextlib.suppress(*((OSError,) if self._refused_once else ())):  # already said
                os.fsync(fd)
        finally:
            os.close(fd)
            if self.replacing:
                self._settle()

    def _settle(self) -> None:
        if self.recorded:
            os.replace(self._file, self.path)
            return
        self.kept_earlier = True
        with contextlib.suppress(OSError):
            os.unlink(self._file)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
