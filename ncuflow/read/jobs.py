"""How many reading workers a command starts: none, unless the reports are worth their start-up.

A worker costs a start before it reads anything: the worker server's interpreter and its
reading modules, then a fork per worker (``ncuflow.read.pool``). ncuflow's own reader frees
what it parses, so this process can read every report itself; workers pay only where the
reading they take off it is longer than their start. That is decided here, before any pool
starts, from what the reports hold: their bytes (``stat``) and their launches (the result
counts of their block headers, ``ncuflow.read.framing``; a few reads per block), weighed by
the reader's measured costs (``READING_COST``: per report, per launch, per MB, and a pool's
start). The reports are looked at until the decision is made, so a large store costs a few
reports' headers, not all of them.

``--jobs N`` is the user's and is kept as given (``resolve_jobs``); reading through
``ncu_report`` always uses workers (it never frees a parsed report, and keeps a metric's
unit per process). Plain standard library: the command line imports this module, not the
pool's ``multiprocessing``, until a pool is started.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MB = 10**6
# ``--jobs`` not given, and the reports not known where it was resolved: ``map_reports`` decides.
AUTO = -1


@dataclass(frozen=True)
class ReadingCost:
    """What reading costs one process (ncuflow's reader, ``export`` with its model and rows), and
    what a pool of workers costs it: seconds per report, per launch and per MB read in this
    process; the pool's start as it weighs on this process (its server starts on a thread while
    the command imports, ``ncuflow.read.pool.prestart``); and each launch's row handed back from a
    worker. Fitted on this project's 2-core machine to ``export`` of the corpus, its full sets,
    repeated, in one process and with one worker (docs/scaling.md, "When workers start")."""

    per_report: float
    per_launch: float
    per_mb: float
    pool_start: float
    per_row_back: float

    def seconds(self, reports: int, launches: int, size: int) -> float:
        """The reading time of this much work in one process."""
        return reports * self.per_report + launches * self.per_launch + size / MB * self.per_mb

    def gain(self, reports: int, launches: int, size: int, workers: int) -> float:
        """Seconds ``workers`` workers beside this process save on this much work (negative: they cost)."""
        shared = self.seconds(reports, launches, size) * workers / (workers + 1)
        return shared - self.pool_start - launches * self.per_row_back


READING_COST = ReadingCost(per_report=0.00024, per_launch=0.00031, per_mb=0.00057, pool_start=0.05,
                           per_row_back=0.0001)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def report_of(task: Any) -> Path:
    """A pool task's report: the task itself, or the first item of a tuple."""
    return Path(task[0] if isinstance(task, tuple) else task)


def _size_and_launches(report: Path) -> tuple[int, int]:
    """A report's bytes and the launches its block headers count (0 where the framing says nothing)."""
    from ncuflow.read.framing import check_framing

    framing = check_framing(report)
    return framing.size, framing.results


def workers_pay(tasks: Iterable[Any], workers: int, cost: ReadingCost = READING_COST) -> bool:
    """Whether ``workers`` workers beside this process read ``tasks`` sooner than this process
    alone (``ReadingCost.gain``). The reports are looked at one by one until the gain is positive
    (it only grows with more reports), so a large store costs a few reports' headers."""
    if workers < 1:
        return False
    reports = launches = size = 0
    for task in tasks:
        bytes_, counted = _size_and_launches(report_of(task))
        reports, launches, size = reports + 1, launches + counted, size + bytes_
        if reports > 1 and cost.gain(reports, launches, size, workers) > 0:
            return True
    return False


def default_jobs(tasks: Sequence[Any] = (), *, through_ncu_report: bool = False) -> int | None:
    """Worker processes when the command is not told: for reading through ``ncu_report``
    (``through_ncu_report``, or ``--reader ncu_report``) the usable cores, each report in a
    worker of its own; for ncuflow's reader one fewer than the usable cores (this process reads
    too), where the reports are worth their start (``workers_pay``), else none."""
    cores = usable_cores()
    if through_ncu_report or reads_with_ncu_report():
        return cores
    workers = cores - 1
    return workers if workers_pay(tasks, workers) else None


def resolve_jobs(jobs: int | None, tasks: Sequence[Any] | None = None, *,
                 through_ncu_report: bool = False) -> int | None:
    """A ``--jobs`` value as ``map_reports`` takes it: 0 -> None (this process), N -> N; None (not
    given) -> ``default_jobs(tasks)``, or, where the tasks are not known yet, ``AUTO``: decided by
    ``map_reports`` from its own tasks."""
    if jobs is None:
        return AUTO if tasks is None else default_jobs(tasks, through_ncu_report=through_ncu_report)
    return jobs or None


def workers_for(jobs: int | None, tasks: Sequence[Any], *, through_ncu_report: bool = False) -> int | None:
    """What a resolved ``jobs`` means for these tasks: ``AUTO`` decided now, else as given; at least
    one worker ``through_ncu_report`` (it can abort its process on a damaged file: never the caller's)."""
    workers = default_jobs(tasks, through_ncu_report=through_ncu_report) if jobs == AUTO else jobs
    return max(workers or 0, 1) if through_ncu_report else workers


def reads_with_ncu_report() -> bool:
    from ncuflow.read.readers import reads_the_file

    return not reads_the_file()
