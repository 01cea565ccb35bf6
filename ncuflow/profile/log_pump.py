"""ncu's output copied into its log through a pipe, the log bounded whatever the program writes.

A profiled program may write without end (``sh -c 'yes spam'`` writes gigabytes a minute):
written straight into the run's ``ncu.log``, that filled the disk and every later read of the
log scanned it whole. ``LogPump`` gives ncu a pipe and copies from it on a thread: the first
``LOG_HEAD_BYTES`` verbatim, then only ncu's own lines (``==...``, up to
``process.NCU_LINES_BYTES``) while the program's last ``PROGRAM_TAIL_LINES`` lines are kept
in memory; when the output ends they follow one line that says how much was cut. The log
is at most head + ncu's lines + tail long, and what judging a run reads of it
(``process.read_log``) is all there.
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import threading
from collections.abc import Callable
from typing import BinaryIO

from ncuflow.profile.process import (
    MAX_LINE_BYTES,
    NCU_LINE,
    NCU_LINES_BYTES,
    PROGRAM_TAIL_LINES,
    READ_CHUNK_BYTES,
)

LOG_HEAD_BYTES = 8 << 20
DRAIN_S = 2.0  # after ncu exits: how long output still in the pipe (or of a leftover) is copied
CUT_NOTE = "[ncuflow] the program's output was cut here"


class LogPump:
    """The write end of a pipe (``writer``, for ncu's stdout and stderr) and a thread copying
    the pipe into ``log`` within the bounds above. Use as a context manager around ncu's run."""

    def __init__(self, log: BinaryIO, head_bytes: int = LOG_HEAD_BYTES) -> None:
        self.log, self.head_bytes = log, head_bytes
        self.drain_s = DRAIN_S
        self.written = self.ncu_bytes = self.cut_bytes = 0
        self._partial = b""
        self._tail: collections.deque[bytes] = collections.deque(maxlen=PROGRAM_TAIL_LINES)
        self._stop = threading.Event()
        self._reader, self.writer = os.pipe()
        self._thread = threading.Thread(target=self._copy, name="ncu-log", daemon=True)

    def __enter__(self) -> LogPump:
        self._thread.start()
        return self

    def spawned(self) -> None:
        """ncu holds the write end now: ours is closed (once), so the pipe ends when ncu's group ends."""
        if self.writer >= 0:
            with contextlib.suppress(OSError):
                os.close(self.writer)
            self.writer = -1

    def __exit__(self, *exc: object) -> None:
        self.spawned()
        self._thread.join(self.drain_s)
        self._stop.set()  # a leftover still holds the pipe: stop copying (its group is stopped next)
        self._thread.join()
        os.close(self._reader)

    def _copy(self) -> None:
        """Copy until the pipe ends (or ``__exit__`` says stop). Should the log refuse a write (a
        full disk), the rest is read and dropped: ncu never blocks on a pipe nobody reads."""
        writable = True
        while not self._stop.is_set():
            ready, _, _ = select.select([self._reader], [], [], 0.1)
            chunk = os.read(self._reader, READ_CHUNK_BYTES) if ready else None
            if chunk == b"":
                break
            if chunk and writable:
                writable = self._written(self._take, chunk)
        if writable:
            self._written(lambda _: self._finish(), b"")

    def _written(self, write: Callable[[bytes], None], chunk: bytes) -> bool:
        """Whether ``write(chunk)`` and a flush reached the log (the progress bar reads it as it comes)."""
        try:
            write(chunk)
            self.log.flush()
        except OSError:  # judging the run names the full disk
            return False
        return True

    def _take(self, chunk: bytes) -> None:
        room = self.head_bytes - self.written
        if room > 0 and not self._partial:
            head = chunk[:room]
            if len(chunk) > room and b"\n" in head:
                head = head[:head.rfind(b"\n") + 1]  # the head ends at a whole line
            self.log.write(head)
            self.written += len(head)
            chunk = chunk[len(head):]
            if not chunk:
                return
            if self.written < self.head_bytes:  # a line longer than the room left: cut from here
                self.written = self.head_bytes
        self._past_head(self._partial + chunk)

    def _past_head(self, data: bytes) -> None:
        """Past the head: ncu's lines written, the program's last lines kept, the rest counted as cut
        (at C speed: a regular expression finds ncu's lines, ``rsplit`` the last lines)."""
        end = data.rfind(b"\n") + 1
        self._partial = data[end:][:MAX_LINE_BYTES]
        body, written = data[:end], 0
        for line in NCU_LINE.findall(body) if self.ncu_bytes < NCU_LINES_BYTES else ():
            if self.ncu_bytes < NCU_LINES_BYTES:
                self.log.write(line[:MAX_LINE_BYTES] + b"\n")
                self.ncu_bytes += min(len(line), MAX_LINE_BYTES) + 1
                written += len(line) + 1
        self.cut_bytes += len(data) - len(self._partial) - written
        last = body.rsplit(b"\n", PROGRAM_TAIL_LINES + 1)[:-1]  # the piece after the last newline is empty
        if len(last) > PROGRAM_TAIL_LINES:
            last = last[1:]  # the first piece holds every earlier line
        self._tail.extend(line[:MAX_LINE_BYTES] for line in last if not line.startswith(b"=="))

    def _finish(self) -> None:
        """The program's last lines, after one line saying how much was left out (if anything was)."""
        kept = [*self._tail, *([self._partial] if self._partial else [])]
        self.cut_bytes += len(self._partial)
        shown = sum(len(line) + 1 for line in kept)
        if self.cut_bytes > shown:
            self.log.write(f"{CUT_NOTE}: {self.cut_bytes - shown:,} bytes of it left out after its first "
                           f"{self.head_bytes:,} bytes (ncu's own lines kept); its last {len(kept)} lines "
                           "follow\n".encode())
        for line in kept:
            self.log.write(line + b"\n")
