"""The worker server of ``ncuflow.read.pool``: the process every worker is forked from.

It imports the reading modules once (its preload list, with this module in it). Two more
things are done there, once, for pools whose workers each read one report through
``ncu_report`` (``fresh_workers``), where every worker's start counts:

- the command's main script is imported, as CPython's forkserver means to and does not
  (python/cpython#126631, fixed only after 3.12): otherwise every worker runs the script
  again, and the `ncuflow` console script's imports (the CLI, click) add ~20 ms to each;
- one small report is read through ``ncu_report``, so that its one-time set-up (~0.2 s a
  process) is done before the fork (a chip's own set-up is still done per worker). Only
  values are read there, never a unit: ``ncu_report`` keeps a metric's unit per process,
  and every worker must find its report's own (``ncuflow.read.units``).

The server learns both from environment variables set only while it starts.

The server is started as ``python -c ...``, which puts the current folder first on
``sys.path``; CPython 3.11's server imports its preload list before it takes the command's
own ``sys.path`` (3.12's never does), so run from a folder holding a directory named
``ncuflow`` (a clone beside one's work, an empty folder) it would import that, and every
worker forked from it too. It is started with ``PYTHONSAFEPATH`` (Python's ``-P``: no
current folder on ``sys.path``), removed again before any worker is forked.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.spawn
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

WARM_REPORT_ENV = "NCUFLOW_POOL_WARM_REPORT"
MAIN_PATH_ENV = "NCUFLOW_POOL_MAIN_PATH"
MAIN_ARGV_ENV = "NCUFLOW_POOL_MAIN_ARGV"  # and its sys.argv (JSON), as every worker sees it
SAFE_PATH_ENV = "PYTHONSAFEPATH"  # Python's own: no current folder on sys.path (3.11+)
OWN_SAFE_PATH_ENV = "NCUFLOW_POOL_SAFE_PATH"  # set with it where ncuflow set it: the server removes both


def worker_context(preload: Sequence[str], warm_report: Path | None = None) -> Any:
    """The multiprocessing context workers are started from: the forkserver, started now
    (if this process has not yet) with ``preload`` and, given ``warm_report``, the
    ``ncu_report`` set-up above; ``spawn`` where the platform has no forkserver."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    from multiprocessing import forkserver

    context = multiprocessing.get_context("forkserver")
    # Takes effect when the server starts (the first pool of this process).
    context.set_forkserver_preload(list(dict.fromkeys([*preload, __name__])))
    environment: dict[str, str | None] = {}
    if not os.environ.get(SAFE_PATH_ENV):  # a user's own setting is kept, and stays for the workers
        environment = {SAFE_PATH_ENV: "1", OWN_SAFE_PATH_ENV: "1"}
    if warm_report is not None:
        main_path = multiprocessing.spawn.get_preparation_data("ncuflow").get("init_main_from_path")
        environment |= {WARM_REPORT_ENV: str(Path(warm_report).resolve()), MAIN_PATH_ENV: main_path,
                        MAIN_ARGV_ENV: json.dumps(sys.argv) if main_path else None}
    for name, value in environment.items():
        if value:
            os.environ[name] = value
    try:
        forkserver.ensure_running()
    finally:
        for name in environment:
            os.environ.pop(name, None)
    return context


def _import_main_from_environment() -> None:
    """In the server (only there is MAIN_PATH_ENV set): import the main script once, with the
    command's own arguments. A script that fails or exits at import leaves the server as it
    was: each worker then runs it itself."""
    path = os.environ.get(MAIN_PATH_ENV)
    if not path:
        return
    from multiprocessing import process, spawn

    current = process.current_process()
    current._inheriting = True  # type: ignore[attr-defined]  # what forkserver.main sets around it
    server_argv = sys.argv
    try:
        sys.argv = json.loads(os.environ.get(MAIN_ARGV_ENV) or "[]") or server_argv
        spawn.import_main_path(path)
    except (Exception, SystemExit):
        pass
    finally:
        sys.argv = server_argv
        del current._inheriting  # type: ignore[attr-defined]


def _warm_up_from_environment() -> None:
    """In the server (only there is WARM_REPORT_ENV set): read one small report through ncu_report."""
    path = os.environ.get(WARM_REPORT_ENV)
    if not path:
        return
    try:
        from ncuflow.read.extract import read_launches
        from ncuflow.read.readers import NCU_REPORT_READER, reading_with

        with reading_with(NCU_REPORT_READER), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the server's stderr is the user's: the real read warns, once
            read_launches(path)
    except Exception:  # a warm-up only: the real read reports any problem
        pass


def _forget_safe_path() -> None:
    """In the server: the ``PYTHONSAFEPATH`` ncuflow set for its start is not passed on to the
    workers (nor to what they may start); a user's own is."""
    if os.environ.pop(OWN_SAFE_PATH_ENV, None):
        os.environ.pop(SAFE_PATH_ENV, None)


_forget_safe_path()
_import_main_from_environment()
_warm_up_from_environment()
