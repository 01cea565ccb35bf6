"""Which reader turns report files into actions: ncuflow's own, or NVIDIA's ``ncu_report``.

- ``ncuflow`` (the default): reads NVIDIA's documented file format itself
  (``ncuflow.read.reportformat``, ``ncuflow.read.schema``): fast, frees what it parses.
  A file version or layout it does not know is read with ``ncu_report`` instead, with a
  warning that names it; where the ``protobuf`` package is missing (a GPU host with no
  network, whose profiling path never needs it) it reads with ``ncu_report`` silently.
- ``ncu_report``: NVIDIA's Python module, the reference: the launches it gives are those
  the default reader is tested to give on every shared report.

The choice is one setting per process (``use_reader``, set by the ``--reader`` option of
every reading command); ``ncuflow.read.pool`` hands it to its workers with each task.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

from ncuflow.errors import UsageError

NCUFLOW_READER = "ncuflow"
NCU_REPORT_READER = "ncu_report"
READERS = (NCUFLOW_READER, NCU_REPORT_READER)
DEFAULT_READER = NCUFLOW_READER


class UnknownLayoutWarning(UserWarning):
    """A report the default reader does not know, read with ``ncu_report`` instead."""


class _Setting:
    reader = DEFAULT_READER


def current_reader() -> str:
    return _Setting.reader


def use_reader(name: str) -> None:
    """Read reports with ``name`` (one of ``READERS``) from now on, in this process."""
    if name not in READERS:
        raise UsageError(
            f"There is no report reader named {name!r}.",
            f"ncuflow reads reports with one of: {', '.join(READERS)}.",
            f"Pass --reader {DEFAULT_READER} (the default) or --reader {NCU_REPORT_READER}.",
        )
    _Setting.reader = name


@contextlib.contextmanager
def reading_with(name: str) -> Iterator[None]:
    """Read with ``name`` inside the block, then with the reader set before it."""
    before = current_reader()
    use_reader(name)
    try:
        yield
    finally:
        _Setting.reader = before


@functools.cache
def file_reader_available() -> bool:
    """Whether ncuflow's own reader can run here (it needs the ``protobuf`` package)."""
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        return False
    return True


def reads_the_file() -> bool:
    """Whether reports are read from the file by ncuflow's own reader in this process now."""
    return current_reader() == NCUFLOW_READER and file_reader_available()
