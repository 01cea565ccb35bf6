"""Reading reports in worker processes, with memory bounded by what each worker reads.

``ncu_report`` never frees a parsed report: a process that reads N reports grows by
several times their bytes, without bound. Here each report is read in a worker
process, and a worker exits once it has read ``retire_bytes`` of report files (the
report that crosses the line is finished first); a fresh worker takes its place. The
replacement is started as soon as the retiring worker has been sent its last report,
so no reading slot waits for a start (the two overlap for that one report), and a
retired worker is reaped at the end rather than waited for; at the end, the idle workers
are told to stop and waited for on a thread, while the command goes on. Where a core is left over
(fewer jobs than usable cores), the replacement starts when the worker it replaces is
halfway through its budget, and first makes the heap it will grow to resident in bulk,
on that core (``ncuflow.read.heap``); it takes no report before that worker's last. Peak
memory is about ``2 × jobs × (base + k × (retire_bytes + the largest report))`` at worst,
whatever the number of reports, and N workers read N reports at once.

Starting the worker server takes a few hundred milliseconds (a Python start, the
reading modules, one warm-up read). Meanwhile the driver reads the first reports
itself, at most ``retire_bytes`` in the whole life of the process (its memory is never
given back), and only until the first worker is up; ``prestart`` lets a command start
the server before its own imports. A caller that passes ``retire_bytes`` (a fresh
process per bounded input, see ``export --metrics-long``) gets no reading in the driver.

``map_reports(function, tasks, jobs=N)`` is the one entry point: ``function`` (a
module-level function, so that it pickles by name) is called as ``function(*task)``
in a worker, where a task is a report path or a tuple whose first item is the report
path; results come back in input order, so the output is the same for every ``jobs``.
``jobs=None`` (or 0) calls ``function`` in this process, which is the reference the
tests compare against. An error raised by ``function`` is raised here, when its task
is reached in input order, with its own message (which names the report); warnings it
raises are raised again here. A worker that dies (killed, out of memory, a crash in
native code) is a ``ReportError`` naming the report it was reading; a crash in native
code while the driver itself reads (the first reports, during the start-up) takes the
command down, as ``--jobs 0`` would. Ctrl-C stops every worker (they ignore SIGINT;
the driver terminates them) and propagates.

Workers come from the ``forkserver`` start method where the platform has it (a fresh
worker is a fork of a small server that has already imported the reading modules, so
retiring a worker costs milliseconds), else ``spawn``; never a plain ``fork`` of a
process that may hold threads or a grown ``ncu_report`` heap.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import multiprocessing
import multiprocessing.connection
import multiprocessing.spawn
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ncuflow.errors import ReportError
from ncuflow.read.worker import (
    MAIN_ARGV_ENV,
    MAIN_PATH_ENV,
    WARM_REPORT_ENV,
    Outcome,
    run_task,
    worker_main,
)

R = TypeVar("R")
Task = Path | str | tuple[Any, ...]

# Report bytes a worker reads before it is retired. The memory ncu_report keeps is
# ~9x the bytes of the reports read; 16 MiB keeps a worker near 200 MB above its base.
DEFAULT_RETIRE_BYTES = 16 * 2**20
RETIRE_BYTES_ENV = "NCUFLOW_WORKER_BYTES"
# How many results may wait for an earlier, slower report (per worker).
WINDOW_PER_JOB = 4
_PRELOAD = ["__main__", "ncuflow.read.extract", "ncuflow.read.pool"]
# While a worker is starting, how often the driver looks whether it has started.
_START_POLL_S = 0.005


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def default_jobs() -> int:
    return usable_cores()


def retire_bytes_default() -> int:
    text = os.environ.get(RETIRE_BYTES_ENV, "")
    try:
        return max(1, int(text)) if text else DEFAULT_RETIRE_BYTES
    except ValueError:
        return DEFAULT_RETIRE_BYTES


def _as_tuple(task: Task) -> tuple[Any, ...]:
    return task if isinstance(task, tuple) else (task,)


def _report_of(task: Task) -> Path:
    return Path(_as_tuple(task)[0])


def _size(task: Task) -> int:
    try:
        return os.stat(_report_of(task)).st_size
    except OSError:
        return 0


def _context(preload: tuple[str, ...], warm_report: Path | None) -> Any:
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        from multiprocessing import forkserver

        context = multiprocessing.get_context("forkserver")
        # Takes effect when the server starts (the first pool of this process).
        context.set_forkserver_preload(list(dict.fromkeys([*_PRELOAD, *preload])))
        # the main script's path: the server imports it once (see ncuflow.read.worker)
        main_path = multiprocessing.spawn.get_preparation_data("ncuflow").get("init_main_from_path")
        server_environment = {MAIN_PATH_ENV: main_path, MAIN_ARGV_ENV: json.dumps(sys.argv) if main_path else None}
        if warm_report is not None:
            server_environment[WARM_REPORT_ENV] = str(Path(warm_report).resolve())
        for name, value in server_environment.items():
            if value:
                os.environ[name] = value
        try:
            forkserver.ensure_running()
        finally:
            for name in server_environment:
                os.environ.pop(name, None)
        return context
    return multiprocessing.get_context("spawn")


class _Worker:
    def __init__(self, context: Any, retire_bytes: int, expected_bytes: int) -> None:
        self.connection, child = context.Pipe()
        self.process = context.Process(target=worker_main, args=(child, retire_bytes, expected_bytes), daemon=True)
        self.process.start()
        child.close()
        self.task: int | None = None
        self.retire_bytes = retire_bytes
        self.sent_bytes = 0  # counted as the worker counts them: it retires at the same report
        self.asked = False  # told to stop

    @property
    def leaving(self) -> bool:
        """Its last task has been sent: it retires when that one is done."""
        return self.sent_bytes >= self.retire_bytes

    def leaving_soon(self, early: bool) -> bool:
        """``leaving``, or (``early``) halfway through its budget."""
        return self.sent_bytes * (2 if early else 1) >= self.retire_bytes

    def send(self, index: int, function: Callable[..., Any], task: Task, size: int) -> None:
        self.connection.send((index, os.getcwd(), function, _as_tuple(task), size))
        self.task = index
        self.sent_bytes += size

    def ask_to_stop(self) -> None:
        """Tell an idle worker to exit (it does once it reads this); a busy one is left be."""
        if self.asked or self.task is not None:
            return
        self.asked = True
        try:
            if self.process.is_alive():
                self.connection.send(None)
        except (OSError, ValueError):
            pass

    def stop(self, grace: float = 1.0) -> None:
        self.ask_to_stop()
        self.process.join(grace if self.task is None else 0)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(grace)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()

    def reap(self, grace: float = 1.0) -> None:
        """Wait for a retired worker (it exits by itself after its last result), killing it if it hangs."""
        self.process.join(grace)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def _died(report: Path, exitcode: int | None) -> ReportError:
    how = f"was killed by signal {-exitcode}" if exitcode is not None and exitcode < 0 else f"exited with status {exitcode}"
    return ReportError(
        f"The worker process reading {report} {how} before it finished.",
        "Reports are read in worker processes; one died while reading this report: it ran out of "
        "memory (the kernel's OOM killer sends signal 9) or ncu_report crashed on the file.",
        "Read it alone (`ncuflow classify REPORT --jobs 1`) to see which; with less memory, "
        f"use fewer --jobs or a smaller {RETIRE_BYTES_ENV} (bytes of reports a worker reads before it is replaced).",
    )


def _deliver(outcome: Outcome) -> Any:
    for message, category in outcome.warned:
        warnings.warn(message, category, stacklevel=3)
    if not outcome.ok:
        raise outcome.value
    return outcome.value


def _smallest(reports: Sequence[Task], sizes: Sequence[int]) -> Path | None:
    """The smallest readable report: what the worker server reads once to warm up."""
    sized = [(size, index) for index, size in enumerate(sizes) if size > 0]
    return _report_of(reports[min(sized)[1]]) if sized else None


def prestart(function: Callable[..., Any], reports: Sequence[Task], *, jobs: int | None,
             preload: Sequence[str] = ()) -> None:
    """Start the worker server now, without waiting for it, if ``map_reports`` will need it.

    The server takes a few hundred milliseconds to import and warm up; a command that
    calls this before its own imports and planning overlaps the two. Takes effect once
    per process (the first server is the one every later pool uses).
    """
    if jobs and len(reports) > 1:
        _context((function.__module__, *preload), _smallest(reports, [_size(task) for task in reports]))


def map_reports(
    function: Callable[..., R],
    tasks: Sequence[Task],
    *,
    jobs: int | None = None,
    retire_bytes: int | None = None,
    progress: Callable[[int, Path], None] | None = None,
    preload: Sequence[str] = (),
) -> Iterator[R]:
    """``function(*task)`` for every task, in input order; in ``jobs`` worker processes.

    A single task is run in this process (one report read once needs no bound), unless
    ``retire_bytes`` is given (a caller that needs a fresh process per report).
    ``progress(index, report)`` is called as each result is handed over. ``preload``
    names modules the workers will need besides ``function``'s own (imported once, in
    the server the workers are forked from, when this process starts its first pool).
    """
    if not jobs or (len(tasks) == 1 and retire_bytes is None):  # a worker would only add its start-up
        for index, task in enumerate(tasks):
            if progress is not None:
                progress(index, _report_of(task))
            yield function(*_as_tuple(task))
        return
    yield from _pool_map(function, list(tasks), jobs, retire_bytes, progress, tuple(preload))


class _DriverBudget:
    """Report bytes this process may still read itself while its workers start.

    Starting the worker server costs a few hundred milliseconds (a Python start, the
    reading modules, one warm-up read); the driver reads the next reports in the
    meantime instead of waiting. Its memory grows with what it reads and is never given
    back, so it reads at most one worker's budget in the whole life of the process.
    """

    left: int | None = None

    @classmethod
    def take(cls, size: int) -> bool:
        """Whether the driver may read a report of ``size`` bytes (and count it if so)."""
        if cls.left is None:
            cls.left = retire_bytes_default()
        if cls.left <= 0:
            return False
        cls.left -= max(size, 1)  # the report that crosses the line is read whole, like a worker's
        return True


class _Starter:
    """Starts workers on a background thread: a start waits for the worker server, which
    is still importing and warming up at the first start, and the driver reads meanwhile."""

    def __init__(self, context: Any, retire_bytes: int) -> None:
        self._context = context
        self._retire_bytes = retire_bytes
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ncuflow-pool-start")
        self._pending: list[concurrent.futures.Future[_Worker]] = []

    @property
    def pending(self) -> int:
        return len(self._pending)

    def request(self, expected_bytes: int) -> None:
        """Start a worker that will likely read ``expected_bytes`` of reports."""
        self._pending.append(self._executor.submit(_Worker, self._context, self._retire_bytes, expected_bytes))

    def started(self, wait: bool = False) -> list[_Worker]:
        """The workers started since the last call (``wait``: at least one, if any is pending)."""
        if wait and self._pending:
            concurrent.futures.wait(self._pending, return_when=concurrent.futures.FIRST_COMPLETED)
        done = [future for future in self._pending if future.done()]
        self._pending = [future for future in self._pending if not future.done()]
        return [future.result() for future in done]  # a failed start raises here

    def close(self) -> None:
        """Have the workers still starting stopped as soon as they start; do not wait for them.

        (A start still pending at the end means the driver read the last reports itself.)
        """
        for future in self._pending:
            future.add_done_callback(_stop_started)
        self._pending = []
        self._executor.shutdown(wait=False)


def _stop_started(future: concurrent.futures.Future[_Worker]) -> None:
    if future.exception() is None:
        future.result().stop()


def _pool_map(
    function: Callable[..., R], tasks: list[Task], jobs: int, retire_bytes: int | None,
    progress: Callable[[int, Path], None] | None, preload: tuple[str, ...],
) -> Iterator[R]:
    sizes = [_size(task) for task in tasks]
    bytes_from = list(itertools.accumulate(reversed(sizes), initial=0))[::-1]  # bytes of tasks[i:]
    context = _context((function.__module__, *preload), _smallest(tasks, sizes))
    # The driver reads too while workers start, unless the caller asked for a fresh
    # process per bounded amount of input (ncu_report's per-process state, see export).
    driver_may_read = retire_bytes is None
    # Making a heap resident costs ~3/4 of the page faults it saves: a gain only on a spare core.
    spare_core = jobs < usable_cores()
    budget = retire_bytes or retire_bytes_default()
    starter = _Starter(context, budget)
    workers: list[_Worker] = []
    retired: list[_Worker] = []
    ever_started = False  # the driver reads only until the first worker is up
    window = max(1, jobs) * WINDOW_PER_JOB
    done: dict[int, Outcome] = {}
    next_task = 0
    next_yield = 0
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
            started = starter.started()
            workers.extend(started)
            ever_started = ever_started or bool(started)
            # At most ``jobs`` workers read that have not been sent their last task (the
            # oldest first): a replacement takes over as its predecessor reads its last.
            reading = sum(w.task is not None and not w.leaving for w in workers)
            for worker in workers:
                if next_task >= len(tasks) or next_task >= next_yield + window or reading >= jobs:
                    break
                if worker.task is None and not worker.leaving:
                    worker.send(next_task, function, tasks[next_task], sizes[next_task])
                    next_task += 1
                    reading += not worker.leaving
            # A worker that has been sent its last task (on a spare core: half its budget)
            # no longer counts, so that its replacement is ready when it leaves.
            staying = sum(not w.leaving_soon(spare_core) for w in workers)
            while staying + starter.pending < min(jobs, len(tasks) - next_task):
                # what it will likely read: its budget, or its share of what is left
                starter.request(min(budget, bytes_from[next_task] // jobs) if spare_core else 0)
            busy = [w for w in workers if w.task is not None]
            may_take = next_task < len(tasks) and next_task < next_yield + window
            if may_take and driver_may_read and not ever_started and _DriverBudget.take(sizes[next_task]):
                ok, value, warned = run_task(function, _as_tuple(tasks[next_task]))
                done[next_task] = Outcome(next_task, ok, value, warned, retired=False)
                next_task += 1
                continue
            if not busy:
                started = starter.started(wait=True)  # nothing to collect: wait for a start
                workers.extend(started)
                ever_started = ever_started or bool(started)
                continue
            ready = multiprocessing.connection.wait(
                [w.connection for w in busy] + [w.process.sentinel for w in busy],
                timeout=_START_POLL_S if starter.pending else None,
            )
            for worker in busy:
                if worker.connection not in ready and worker.process.sentinel not in ready:
                    continue
                assert worker.task is not None
                try:
                    if worker.connection not in ready and not worker.connection.poll(0):
                        raise EOFError  # the process ended and sent nothing
                    outcome = worker.connection.recv()
                except (EOFError, OSError):
                    worker.process.join()
                    raise _died(_report_of(tasks[worker.task]), worker.process.exitcode) from None
                done[outcome.index] = outcome
                worker.task = None
                if outcome.retired:  # it is exiting by itself: reaped at the end, not waited for now
                    worker.connection.close()
                    workers.remove(worker)
                    retired = [w for w in retired if w.process.exitcode is None]  # forget those gone
                    retired.append(worker)
    finally:
        starter.close()
        if next_yield >= len(tasks):  # all done: every worker is idle
            _stop_meanwhile(workers, retired)
        else:  # an error or Ctrl-C: stopped before the error goes on
            for worker in workers:
                worker.stop()
            for worker in retired:
                worker.reap()


def _stop_meanwhile(workers: list[_Worker], retired: list[_Worker]) -> None:
    """Tell the idle workers to stop, and wait for them on a thread while the command goes on.

    A worker that has read its budget takes ~12 ms to give back its memory as it exits;
    waited for in turn, the workers of a 2-job pool held a command up by ~30 ms (5 % of
    exporting the corpus) at its end. The thread waits for each, killing one that hangs,
    as ``stop`` and ``reap`` do; at exit, multiprocessing joins whatever it has not.
    """
    for worker in workers:
        worker.ask_to_stop()

    def wait() -> None:
        for worker in workers:
            worker.stop()
        for worker in retired:
            worker.reap()

    threading.Thread(target=wait, name="ncuflow-pool-stop", daemon=True).start()


def resolve_jobs(jobs: int | None) -> int | None:
    """A ``--jobs`` value as ``map_reports`` takes it: None -> the usable cores, 0 -> this process."""
    if jobs is None:
        return default_jobs()
    return jobs or None

