"""The worker side of ``ncuflow.read.pool``: a process that runs reading tasks sent to it.

A worker receives ``(index, cwd, reader, function, args)`` messages, runs
``function(*args)`` in that folder with that reader (``ncuflow.read.readers``), and sends
back an ``Outcome`` (the result or the error, and the warnings raised), until it is told
to stop (``None``), or, a fresh worker, after its one task.
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
from ncuflow.read.readers import use_reader


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


def worker_main(connection: multiprocessing.connection.Connection, fresh: bool) -> None:
    """A worker: run tasks until told to stop (a ``fresh`` one: its first task only)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver stops the pool on Ctrl-C
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, cwd, reader, function, args = message
        if cwd != os.getcwd():
            os.chdir(cwd)  # relative report paths mean what they meant to the caller
        use_reader(reader)
        ok, value, warned = run_task(function, args)
        try:
            connection.send(Outcome(index, ok, value, warned))
        except Exception as error:  # an unpicklable result
            connection.send(Outcome(index, False, RuntimeError(f"The result cannot be sent back: {error}"), warned))
        if fresh:
            return
