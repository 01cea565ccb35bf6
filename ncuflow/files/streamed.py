"""An output written as it goes, not renamed into place whole (the recorder's JSONL trace,
each record one flushed write as its request ends, so a kill keeps every record written).

It cannot be written to a temporary and renamed, so it is opened where it is, carefully:
without blocking (a FIFO put at the path after the checks would wait for a reader forever),
without following a link put there meanwhile (``O_NOFOLLOW``), and checked once open
(``fstat``): only a regular file is truncated and written. Plain standard library.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def open_streamed_output(path: Path) -> int:
    """``path`` opened for writing, truncated, if it is a regular file. Opened without blocking (a
    FIFO put there after the checks would wait for a reader forever) and checked once open (fstat):
    anything else is refused before a byte is written (``OSError``, shown as one paragraph)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as error:
        if error.errno not in (errno.ENXIO, errno.ELOOP):  # a FIFO without a reader; a link put there
            raise
        raise OSError(errno.EINVAL, "it is no longer a regular file (replaced meanwhile)", str(path)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "it is no longer a regular file (replaced meanwhile)", str(path))
    os.set_blocking(fd, True)
    os.ftruncate(fd, 0)
    return fd
