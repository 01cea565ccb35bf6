"""The worker side of ``ncuflow.read.pool``: a process that runs reading tasks sent to it.

A worker receives ``(index, cwd, function, args, size)`` messages, runs
``function(*args)``, and sends back an ``Outcome`` (the result or the error, and the
warnings raised), until it is told to stop or has read its budget of report bytes.
Importing this module in the worker server (``WARM_REPORT_ENV`` set) reads one small
report once, so that every worker forked from the server starts with ``ncu_report``'s
one-time set-up done; with ``MAIN_PATH_ENV`` set it first imports the command's main
script there, which CPython's forkserver means to do and does not (see below).
"""

from __future__ import annotations

import multiprocessing.connection
import os
import pickle
import signal
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ncuflow.errors import ReportError
from ncuflow.read.heap import HEAP_PER_REPORT_BYTE, make_heap_resident

# Set only while the forkserver starts: the report it reads once so that every worker
# forked from it starts with ncu_report's one-time set-up done (~60 ms per worker otherwise).
WARM_REPORT_ENV = "NCUFLOW_POOL_WARM_REPORT"
# Set only while the forkserver starts: the path of the command's main script (the
# `ncuflow` console script, or a user's own script), imported once in the server.
MAIN_PATH_ENV = "NCUFLOW_POOL_MAIN_PATH"
MAIN_ARGV_ENV = "NCUFLOW_POOL_MAIN_ARGV"  # and its sys.argv (JSON), as every worker sees it


class RemoteTraceback(Exception):
    """The traceback of an unexpected error in a worker, attached as the cause."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f"\n(in the worker process)\n{self.text}"


@dataclass(frozen=True)
class Outcome:
    index: int
    ok: bool
    value: Any  # the result, or the exception
    warned: tuple[tuple[str, type[Warning]], ...]
    retired: bool


def _picklable(error: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


def run_task(function: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any, tuple[tuple[str, type[Warning]], ...]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = function(*args)
            ok = True
        except Exception as error:
            value = _picklable(error)
            value.__cause__ = None if isinstance(error, ReportError) else RemoteTraceback(traceback.format_exc())
            ok = False
    warned = tuple((str(w.message), w.category) for w in caught)
    return ok, value, warned


def worker_main(connection: multiprocessing.connection.Connection, retire_bytes: int, expected_bytes: int) -> None:
    """A worker: run tasks until told to stop, or until it has read ``retire_bytes``.

    Before its first task it makes the heap that reading ``expected_bytes`` of reports
    will need resident in bulk (``ncuflow.read.heap``), while its first task is on its way.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver stops the pool on Ctrl-C
    make_heap_resident(expected_bytes * HEAP_PER_REPORT_BYTE)
    consumed = 0
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, cwd, function, args, size = message
        if cwd != os.getcwd():
            os.chdir(cwd)  # relative report paths mean what they meant to the caller
        ok, value, warned = run_task(function, args)
        consumed += size
        retired = consumed >= retire_bytes
        try:
            connection.send(Outcome(index, ok, value, warned, retired))
        except Exception as error:  # an unpicklable result
            connection.send(Outcome(index, False, RuntimeError(f"The result cannot be sent back: {error}"), warned, retired))
        if retired:
            return


def _import_main_from_environment() -> None:
    """In the forkserver (only there is MAIN_PATH_ENV set): import the main script once.

    A process started from a script runs that script again as ``__mp_main__`` before
    it runs its target. The forkserver is meant to do this once, for every process it
    forks ("__main__" in its preload list), but CPython passes it the path under a key
    it never reads (python/cpython#126631; fixed only after 3.12): every worker ran the script
    again, and the `ncuflow` console script's imports (the CLI, click) added ~20 ms to
    each worker's start, more under load. Importing it here, as the fixed forkserver
    does, lets each worker find it already imported. A script run with ``-m`` is never
    run again, and where this fails the workers run the script themselves, as before.
    """
    path = os.environ.get(MAIN_PATH_ENV)
    if not path:
        return
    import json
    import sys
    from multiprocessing import process, spawn

    current = process.current_process()
    current._inheriting = True  # type: ignore[attr-defined]  # what forkserver.main sets around it
    server_argv = sys.argv
    try:
        sys.argv = json.loads(os.environ.get(MAIN_ARGV_ENV) or "[]") or server_argv
        spawn.import_main_path(path)
    except (Exception, SystemExit):  # e.g. a script that exits at import: the workers then run it themselves
        pass
    finally:
        sys.argv = server_argv
        del current._inheriting  # type: ignore[attr-defined]


def _warm_up_from_environment() -> None:
    """In the forkserver (only there is WARM_REPORT_ENV set): read one small report once."""
    path = os.environ.get(WARM_REPORT_ENV)
    if not path:
        return
    try:
        from ncuflow.read.extract import read_launches

        read_launches(path)
    except Exception:  # a warm-up only: the real read reports any problem
        pass


_import_main_from_environment()
_warm_up_from_environment()
