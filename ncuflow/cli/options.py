"""Options shared by several commands, defined once: the on-wall threshold, the ncu timeout,
the stability tolerances (with the kernel filter that goes with them)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from ncuflow.analyze.arguments import checked_jobs
from ncuflow.analyze.classify import DEFAULT_THRESHOLD
from ncuflow.analyze.fields import CLASS_TOLERANCES, STABILITY_FIELDS, Tolerances
from ncuflow.cli.params import FiniteFloatRange
from ncuflow.errors import UsageError
from ncuflow.profile import DEFAULT_TIMEOUT_S
from ncuflow.read.jobs import usable_cores
from ncuflow.read.readers import DEFAULT_READER, READERS, use_reader

F = TypeVar("F", bound=Callable[..., Any])

# (0, 1]: validated where the value enters, so a bad one never reaches a stored run or classify.
THRESHOLD_TYPE = FiniteFloatRange(0.0, 1.0, min_open=True)  # refuses nan and inf


def threshold_option(help: str = "On-wall threshold of the max model: a launch whose largest "
                                 "utilization is below it is latency-bound.") -> Callable[[F], F]:
    return click.option("--threshold", type=THRESHOLD_TYPE, default=DEFAULT_THRESHOLD, show_default=True, help=help)


def timeout_option(default: float | None = DEFAULT_TIMEOUT_S,
                   help: str = "Seconds before ncu and its children are stopped.") -> Callable[[F], F]:
    return click.option("--timeout", type=FiniteFloatRange(min=0, min_open=True), default=default,
                        show_default=default is not None, help=help)


def _pct(cls: str) -> float:
    return CLASS_TOLERANCES[cls] * 100.0


def tolerance_options(function: F) -> F:
    """--tol-exact, --tol-near-exact, --tol-bytes, --tol-rate, --tol-time, --tol FIELD=PCT and --kernel."""
    options = [
        click.option("--tol-exact", type=FiniteFloatRange(min=0.0), default=_pct("exact"), show_default=True,
                     help="Tolerance of exact work counters, % (0 = identical)."),
        click.option("--tol-near-exact", type=FiniteFloatRange(min=0.0), default=_pct("near_exact"), show_default=True,
                     help="Tolerance of near-exact counters (inst_issued: re-issued stalls vary), %."),
        click.option("--tol-bytes", type=FiniteFloatRange(min=0.0), default=_pct("bytes"), show_default=True,
                     help="Tolerance of DRAM byte counts, % of the launch's total DRAM bytes."),
        click.option("--tol-rate", type=FiniteFloatRange(min=0.0), default=_pct("rate"), show_default=True,
                     help="Tolerance of rates and ratios (L2 hit, DRAM %, sectors/request), % relative (at least 1 point for %)."),
        click.option("--tol-time", type=FiniteFloatRange(min=0.0), default=_pct("time"), show_default=True,
                     help="Tolerance of the duration, % relative spread (at least 320 ns)."),
        click.option("--tol", "field_tols", multiple=True, metavar="FIELD=PCT",
                     help=f"Tolerance of one field, % (repeatable). Fields: {', '.join(STABILITY_FIELDS)}."),
        click.option("--kernel", default=None, metavar="REGEX",
                     help="Only launches whose kernel name matches this regular expression."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def tolerances_from(tol_exact: float, tol_bytes: float, tol_rate: float, tol_time: float, field_tols: Sequence[str],
                    tol_near_exact: float = _pct("near_exact")) -> Tolerances:
    overrides: dict[str, float] = {}
    for item in field_tols:
        name, equals, value = item.partition("=")
        try:
            overrides[name.strip()] = float(value) / 100.0
        except ValueError:
            equals = ""
        if not equals:
            raise UsageError(
                f"--tol {item!r} is not FIELD=PCT.",
                "A per-field tolerance names a field and a percentage.",
                "Write it like --tol inst_issued=0.01.",
            )
    base = Tolerances(exact=tol_exact / 100.0, near_exact=tol_near_exact / 100.0, bytes=tol_bytes / 100.0,
                      rate=tol_rate / 100.0, time=tol_time / 100.0)
    return base.with_overrides(overrides) if overrides else base


def _first_number(*paths: str) -> int | None:
    for path in paths:
        with contextlib.suppress(OSError, ValueError, IndexError), open(path, encoding="ascii") as handle:
            return int(handle.read().split()[0])
    return None


def available_memory_bytes() -> int | None:
    """Memory this process can still take: the kernel's MemAvailable, less where its control
    group (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) leaves less; None when unknown."""
    available: int | None = None
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    limit = _first_number("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
    used = _first_number("/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory/memory.usage_in_bytes")
    if limit is not None and used is not None and limit < 1 << 60:
        room = max(0, limit - used)
        available = room if available is None else min(available, room)
    return available


# Memory one reading worker may take at its peak (``ncuflow.read.pool``), with room to spare, so that
# N workers fit in memory.
JOB_MEMORY_BYTES = 512 * 2**20


def jobs_bound() -> tuple[int, str]:
    """The most reading workers this machine runs at once, and why: its usable cores, and the
    available memory at ``JOB_MEMORY_BYTES`` a worker."""
    cores = usable_cores()
    memory = available_memory_bytes()
    by_memory = cores if memory is None else max(1, memory // JOB_MEMORY_BYTES)
    why = f"{cores} usable cores" + ("" if memory is None else f", {memory / 2**30:.1f} GiB of memory available")
    return min(cores, by_memory), why


def _bounded_jobs(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """``--jobs`` where it enters: checked as the API checks ``jobs=`` (``checked_jobs``); more
    workers than cores (or than memory holds) only wait for one another and multiply memory, so
    a larger value is lowered to the bound, with one line."""
    value = checked_jobs(value, "--jobs")
    if value == 0:
        return value
    if value is None:  # the pool's own default, which the bound never exceeds
        return None
    bound, why = jobs_bound()
    if value > bound:
        click.echo(f"ncuflow: note: --jobs {value} lowered to {bound}: this machine runs {bound} reading "
                   f"workers at once ({why}).", err=True)
        return bound
    return value


def _use_reader(context: click.Context, parameter: click.Parameter, value: str) -> str:
    use_reader(value)
    return value


def reader_option(function: click.decorators.FC) -> click.decorators.FC:
    """``--reader NAME``: which reader turns report files into launches (``ncuflow.read.readers``)."""
    return click.option(
        "--reader", type=click.Choice(READERS), default=DEFAULT_READER, show_default=True, expose_value=False,
        envvar="NCUFLOW_READER", callback=_use_reader, is_eager=True,
        help="How reports are read: ncuflow's own reader of NVIDIA's documented file format, or NVIDIA's "
             "ncu_report module (the reference, several times slower; also used by the default for a "
             "file version it does not know, and for the units of --metrics-long).",
    )(function)


def jobs_option(function: click.decorators.FC) -> click.decorators.FC:
    """The options of every command that reads reports: ``--jobs N`` (worker processes, see
    ``ncuflow.read.pool``) and ``--reader`` (``reader_option``)."""
    return reader_option(click.option(
        "--jobs", "-j",
        type=int,
        default=None,
        callback=_bounded_jobs,
        help="Read reports in N worker processes besides this one [default: one fewer than the usable "
             "cores; through ncu_report (--reader ncu_report, the units of --metrics-long): the usable "
             "cores, a worker per report, this process reading none]; at most the usable cores, and one "
             "per 512 MiB of available memory. 0 reads everything in this process (through ncu_report, one "
             "worker still: ncu_report can abort its process on a damaged file).",
    )(function))


def echo_notes(notes: Sequence[str] = (), damaged: Sequence[str] = ()) -> None:
    """Each damaged or unreadable run skipped, as a warning line, then the notes (shown safe)."""
    from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text

    for line in damaged:
        click.echo(f"ncuflow: warning: {safe_text(line, limit=SENTENCE_CHARS)}", err=True)
    for note in notes:
        click.echo(f"ncuflow: note: {safe_text(note, limit=SENTENCE_CHARS)}", err=True)
