"""Options shared by several commands, defined once: the on-wall threshold, the ncu timeout,
the stability tolerances (with the kernel filter that goes with them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from ncuflow.analyze.classify import DEFAULT_THRESHOLD
from ncuflow.analyze.fields import CLASS_TOLERANCES, STABILITY_FIELDS, Tolerances
from ncuflow.cli.params import FiniteFloatRange
from ncuflow.errors import UsageError
from ncuflow.profile import DEFAULT_TIMEOUT_S
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
        type=click.IntRange(min=0),
        default=None,
        help="Read reports in N worker processes besides this one [default: one fewer than the usable "
             "cores; through ncu_report (--reader ncu_report, the units of --metrics-long): the usable "
             "cores, a worker per report, this process reading none]. 0 reads everything in this process.",
    )(function))
