"""Reading reports in worker processes, where that pays: many reports on several cores.

``map_reports(function, tasks, jobs=N)`` is the one entry point: ``function`` (a
module-level function, so that it pickles by name) is called as ``function(*task)``, where
a task is a report path or a tuple whose first item is the report path; results come back
in input order, so the output is the same for every ``jobs``. ``jobs=None`` (or 0) calls
``function`` in this process, the reference the tests compare against.

ncuflow's own reader frees what it parses, so a process reads any number of reports in
bounded memory, and reading in this process costs no start-up. By default (``ncuflow.read.jobs``) one worker per
usable core but one reads beside it where the reports' bytes and launches are worth the
workers' start, and none where this process alone finishes sooner (docs/scaling.md). A pool's workers are started once, on a
thread, and each reads report after report (two sent ahead, so that it never waits for
this process); this process reads too, from the first report on, while they start and
between their results. ``fresh_workers=True`` gives every task a process of its own
instead, and this process reads none: what reading through ``ncu_report`` needs (it never
frees a parsed report, and keeps a metric's unit per process, see ``ncuflow.read.units``).

Reading through ``ncu_report`` is never done in this process, even for ``jobs=0``: it can abort
its process on a damaged file (SIGABRT), which in a worker is a ``ReportError`` naming the file
and here would end the command; a worker server whose warm-up crashed so is started again.

An error raised by ``function`` is raised here, when its task is reached in input order,
with its own message (which names the report); warnings it raises are raised again here.
A worker that dies (killed, out of memory, a crash in native code) is a ``ReportError``
naming the report it was reading. Ctrl-C stops every worker (they ignore SIGINT; this
process terminates them) and propagates. Workers come from the ``forkserver`` start
method where the platform has it (each a fork of a small server that has imported the
reading modules once, ``ncuflow.read.server``), else ``spawn``; never a plain ``fork`` of
a process that may hold threads. The reader setting (``ncuflow.read.readers``) and the current folder travel with
each task.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ncuflow.errors import ReportError
from ncuflow.read.jobs import (
    default_jobs,
    reads_with_ncu_report,
    report_of,
    resolve_jobs,
    usable_cores,
    workers_for,
)
from ncuflow.read.readers import current_reader

if TYPE_CHECKING:  # multiprocessing and the worker side are imported when a pool starts, not before
    import concurrent.futures

    from ncuflow.read.worker import Outcome

__all__ = ["default_jobs", "map_reports", "prestart", "resolve_jobs", "usable_cores"]  # jobs: ncuflow.read.jobs

R = TypeVar("R")
Task = Path | str | tuple[Any, ...]

# How many results may wait for an earlier, slower report (per reading process).
WINDOW_PER_JOB = 4
# Tasks sent ahead to a lasting worker, so that it has the next while this process reads.
TASKS_IN_FLIGHT = 2
# A worker server that died (ncu_report's warm-up crashed on a report) is started again this often.
SERVER_RESTARTS = 5
# While a worker is starting, how often this process looks whether it has started.
_START_POLL_S = 0.005
_PRELOAD = ["ncuflow.read.extract", "ncuflow.read.fileaction", "ncuflow.read.schema", "ncuflow.read.pool"]


def _as_tuple(task: Task) -> tuple[Any, ...]:
    return task if isinstance(task, tuple) else (task,)


_report_of = report_of


def _size(task: Task) -> int:
    try:
        return os.stat(_report_of(task)).st_size
    except OSError:
        return 0


def _smallest(tasks: Sequence[Task]) -> Path | None:
    """The smallest readable report: what the server of an ``ncu_report`` pool reads to warm up."""
    sized = [(size, index) for index, size in enumerate(map(_size, tasks)) if size > 0]
    return _report_of(tasks[min(sized)[1]]) if sized else None


def _context(function: Callable[..., Any], tasks: Sequence[Task], fresh: bool, preload: Sequence[str]) -> Any:
    from ncuflow.read.server import worker_context

    return worker_context([*_PRELOAD, function.__module__, *preload], _smallest(tasks) if fresh else None)


def prestart(function: Callable[..., Any], reports: Sequence[Task], *, jobs: int | None,
             preload: Sequence[str] = (), fresh_workers: bool = False) -> None:
    """Start the worker server now, if ``map_reports`` will need it: it takes a Python start
    and the reading modules' imports, which then overlap the command's own. Once per process."""
    fresh = fresh_workers or reads_with_ncu_report()
    jobs = workers_for(jobs, reports, through_ncu_report=fresh)
    if jobs and (len(reports) > 1 or fresh):
        _context(function, reports, fresh, preload)


class _Worker:
    """One worker process and the tasks sent to it that it has not answered yet, oldest first."""

    def __init__(self, context: Any, fresh: bool) -> None:
        from ncuflow.read.worker import worker_main

        self.connection, child = context.Pipe()
        self.process = context.Process(target=worker_main, args=(child, fresh), daemon=True)
        for attempt in range(SERVER_RESTARTS + 1):
            try:
                self.process.start()
                break
            except (EOFError, ConnectionError):  # the worker server died: its ncu_report warm-up crashed on a
                if attempt == SERVER_RESTARTS:  # file. Once it is gone, the next start starts it again without
                    raise  # the warm-up, and that report is read (and crashes) in a worker of its own
                time.sleep(0.05 * (attempt + 1))
                self.process = context.Process(target=worker_main, args=(child, fresh), daemon=True)
        child.close()
        self.tasks: list[int] = []
        self.fresh = fresh

    def send(self, index: int, function: Callable[..., Any], task: Task) -> None:
        self.connection.send((index, os.getcwd(), current_reader(), function, _as_tuple(task)))
        self.tasks.append(index)

    def stop(self, grace: float = 1.0) -> None:
        """Ask an idle worker to exit (a busy one is terminated), wait, and kill it if it hangs."""
        if not self.tasks:
            with contextlib.suppress(OSError, ValueError):
                self.connection.send(None)
        else:
            self.process.terminate()
        self.process.join(grace)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()


class _Starter:
    """Starts workers on a background thread: the first start waits for the worker server,
    which is still importing the reading modules, and this process reads meanwhile."""

    def __init__(self, context: Any, fresh: bool) -> None:
        import concurrent.futures

        self._context, self._fresh = context, fresh
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ncuflow-pool-start")
        self._pending: list[concurrent.futures.Future[_Worker]] = []

    @property
    def pending(self) -> int:
        return len(self._pending)

    def request(self) -> None:
        self._pending.append(self._executor.submit(_Worker, self._context, self._fresh))

    def started(self, wait: bool = False) -> list[_Worker]:
        """The workers started since the last call (``wait``: at least one, if any is pending)."""
        if wait and self._pending:
            import concurrent.futures

            concurrent.futures.wait(self._pending, return_when=concurrent.futures.FIRST_COMPLETED)
        done = [future for future in self._pending if future.done()]
        self._pending = [future for future in self._pending if not future.done()]
        return [future.result() for future in done]  # a failed start raises here

    def close(self) -> None:
        """Have the workers still starting stopped as soon as they are up; do not wait for them."""
        for future in self._pending:
            future.add_done_callback(_stop_started)
        self._pending = []
        self._executor.shutdown(wait=False)


def _stop_started(future: concurrent.futures.Future[_Worker]) -> None:
    if future.exception() is None:
        future.result().stop()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "an unknown signal"


def _died(report: Path, exitcode: int | None) -> ReportError:
    if exitcode is not None and exitcode > 0:  # Python itself ended the worker: no signal, no crash
        return ReportError(
            f"The worker process reading {report} exited with status {exitcode} before it finished.",
            "A worker that ends with a status, not a signal, was ended by Python or by a library's exit() "
            "outside the reading (an error while reading comes back as that error); most often as it "
            "starts: a script run as `python SCRIPT.py` is imported again in every worker, and one that "
            "calls ncuflow at its top level starts workers from a worker, which Python refuses.",
            'Put the script\'s calls under `if __name__ == "__main__":`, or read in this process '
            "(`jobs=0`, `--jobs 0`).",
        )
    how = (f"was killed by signal {-exitcode} ({_signal_name(-exitcode)})" if exitcode is not None and exitcode < 0
           else f"exited with status {exitcode}")
    return ReportError(
        f"The worker process reading {report} {how} before it finished.",
        "Reports are read in worker processes; one died while reading this report: it ran out of "
        "memory (the kernel's OOM killer sends signal 9) or native code crashed on the file.",
        "Read it alone (`ncuflow classify REPORT --jobs 0`) to see which; with less memory, use fewer --jobs.",
    )


def _deliver(outcome: Outcome) -> Any:
    for message, category in outcome.warned:
        warnings.warn(message, category, stacklevel=3)
    if not outcome.ok:
        raise outcome.value
    return outcome.value


def map_reports(
    function: Callable[..., R],
    tasks: Sequence[Task],
    *,
    jobs: int | None = None,
    fresh_workers: bool = False,
    progress: Callable[[int, Path], None] | None = None,
    preload: Sequence[str] = (),
) -> Iterator[R]:
    """``function(*task)`` for every task, in input order; in ``jobs`` worker processes (and this one;
    ``ncuflow.read.jobs.AUTO``: as many as these tasks are worth, ``default_jobs``).

    ``fresh_workers``: a new process for every task (``ncu_report``'s per-process state), even
    for a single task; always so where this process reads through ``ncu_report``. ``progress(index, report)`` is called as each result is handed over.
    ``preload`` names modules the workers will need besides ``function``'s own (imported once,
    in the server the workers are forked from, when this process starts its first pool).
    """
    fresh_workers = fresh_workers or reads_with_ncu_report()
    jobs = workers_for(jobs, tasks, through_ncu_report=fresh_workers)
    if not jobs or (len(tasks) == 1 and not fresh_workers):  # a worker would only add its start-up
        for index, task in enumerate(tasks):
            if progress is not None:
                progress(index, _report_of(task))
            yield function(*_as_tuple(task))
        return
    yield from _pool_map(function, list(tasks), jobs, fresh_workers, progress, tuple(preload))


def _pool_map(function: Callable[..., R], tasks: list[Task], jobs: int, fresh: bool,
              progress: Callable[[int, Path], None] | None, preload: tuple[str, ...]) -> Iterator[R]:
    from ncuflow.read.worker import Outcome, run_task

    context = _context(function, tasks, fresh, preload)
    # This process reads too, unless each task needs a process of its own (fresh workers).
    driver_reads = not fresh
    starter = _Starter(context, fresh)
    workers: list[_Worker] = []
    window = (jobs + 1) * WINDOW_PER_JOB
    depth = 1 if fresh else TASKS_IN_FLIGHT
    done: dict[int, Outcome] = {}
    next_task = next_yield = 0
    finished = False
    try:
        while next_yield < len(tasks):
            while next_yield in done:
                outcome = done.pop(next_yield)
                if progress is not None:
                    progress(next_yield, _report_of(tasks[next_yield]))
                next_yield += 1
                yield _deliver(outcome)
            if next_yield >= len(tasks):
                break
            workers.extend(starter.started())
            _start_as_needed(starter, workers, jobs, len(tasks) - next_task, fresh)
            for worker in workers:
                while len(worker.tasks) < depth and next_task < min(len(tasks), next_yield + window):
                    worker.send(next_task, function, tasks[next_task])
                    next_task += 1
            if driver_reads and next_task < min(len(tasks), next_yield + window):
                ok, value, warned = run_task(function, _as_tuple(tasks[next_task]))
                done[next_task] = Outcome(next_task, ok, value, warned)
                next_task += 1
                _collect(workers, tasks, done, timeout=0)
            elif any(worker.tasks for worker in workers):
                _collect(workers, tasks, done, timeout=_START_POLL_S if starter.pending else None)
            else:
                workers.extend(starter.started(wait=True))  # nothing to collect: wait for a start
        finished = True
    finally:
        starter.close()
        for worker in workers:
            worker.stop(grace=1.0 if finished else 0.5)


def _start_as_needed(starter: _Starter, workers: list[_Worker], jobs: int, unassigned: int, fresh: bool) -> None:
    """Keep ``jobs`` workers for the tasks not yet sent (a fresh worker leaves after its one task)."""
    busy = sum(bool(worker.tasks) for worker in workers) if fresh else 0
    free = len(workers) - busy
    while free + starter.pending < min(jobs - busy, unassigned):
        starter.request()


def _collect(workers: list[_Worker], tasks: list[Task], done: dict[int, Outcome], timeout: float | None) -> None:
    """Receive the results that are ready (waiting up to ``timeout``; None: until one is)."""
    import multiprocessing.connection

    busy = [w for w in workers if w.tasks]
    ready = multiprocessing.connection.wait([w.connection for w in busy] + [w.process.sentinel for w in busy],
                                            timeout=timeout)
    for worker in busy:
        if worker.connection not in ready and worker.process.sentinel not in ready:
            continue
        # A pipe whose worker has ended reads as ready, and its recv() as EOFError: the worker died.
        while worker.tasks and (worker.connection in ready or worker.connection.poll(0)):
            try:
                outcome = worker.connection.recv()
            except (EOFError, OSError):
                worker.process.join()
                raise _died(_report_of(tasks[worker.tasks[0]]), worker.process.exitcode) from None
            done[outcome.index] = outcome
            worker.tasks.remove(outcome.index)
            ready = [c for c in ready if c is not worker.connection]
        if worker.fresh and not worker.tasks:  # it exits by itself after its task
            worker.process.join()
            worker.connection.close()
            workers.remove(worker)
