"""ncuflow from Python: launches, verdicts, summaries, comparisons and rooflines for a notebook.

The functions behind ``ncuflow.launches``, ``ncuflow.classify``, ``ncuflow.findings``, ``ncuflow.summary``,
``ncuflow.compare`` and ``ncuflow.roofline`` (``docs/api.md``). Each takes what the
commands take — report files, folders of reports, run folders or profile stores — and
returns a polars frame or frozen records; none imports click or the command line.

Reports are read in this process by default (``jobs=None``), by ncuflow's own reader, which
keeps nothing of a report once it is read; ``jobs=N`` reads them in N worker processes, as the
commands do. Where ``ncu_report`` reads, every report is read in a worker process whatever
``jobs`` says (``ncuflow.read.pool.map_reports``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ncuflow.analyze.arguments import (
    checked_jobs,
    checked_pairs,
    checked_per,
    checked_threshold,
    checked_top,
)
from ncuflow.analyze.classify import DEFAULT_THRESHOLD
from ncuflow.analyze.classify import classify as classify_launch
from ncuflow.analyze.compare import Comparison, compare_loaded
from ncuflow.analyze.fields import Tolerances
from ncuflow.analyze.roofline import Roofline, point_groups, rooflines
from ncuflow.analyze.selection import Selection
from ncuflow.analyze.stability import DEFAULT_TOLERANCES
from ncuflow.analyze.summary import ReportSummary, summarize, summary_rows
from ncuflow.errors import UsageError
from ncuflow.read.options import READ_DEFAULT, WITH_FINDINGS, ReadOptions
from ncuflow.read.runs import Loaded

__all__ = ["classify", "compare", "findings", "launches", "roofline", "summaries", "summary"]

PathsLike = str | Path | Iterable[str | Path]

SUMMARY_SCHEMA: dict[str, Any] = {
    "report": pl.String, "label": pl.String, "device": pl.String, "rank": pl.Int32, "short_name": pl.String,
    "kernel": pl.String, "function": pl.String, "grid_size": pl.Float64, "block_size": pl.Float64,
    "launches": pl.Int64, "total_ns": pl.Float64, "median_ns": pl.Float64, "share": pl.Float64, "bound": pl.String,
    "verdicts": pl.String, "binding_term": pl.String, "binding_u": pl.Float64, "top_finding": pl.String,
    "top_speedup": pl.Float64,
}


def _paths(paths: PathsLike) -> list[Path]:
    """The paths given, checked as the command line's arguments are: text or ``os.PathLike`` each."""
    listed: list[object]
    if isinstance(paths, str | os.PathLike):
        listed = [paths]
    else:
        try:
            listed = list(paths)
        except TypeError:  # not iterable: 123
            listed = [paths]
    for item in listed:
        if not isinstance(item, str | os.PathLike):
            raise UsageError(f"The path {item!r:.60} is not a path: it must be a string or a pathlib.Path.", "",
                             "Give a report file, a folder or a store as a string or a Path, or a list of them.")
    return [Path(p) for p in listed if isinstance(p, str | os.PathLike)]


def _load(paths: PathsLike, kernel: str | None, nvtx: str | None, jobs: int | None,
          threshold: float = DEFAULT_THRESHOLD, options: ReadOptions = READ_DEFAULT) -> Loaded:
    """The selected launches, every argument checked first by the rule its option has (``arguments``)."""
    checked_threshold(threshold)
    return Selection(kernel=kernel, nvtx=nvtx).load(_paths(paths), jobs=checked_jobs(jobs), options=options)


def launches(paths: PathsLike, *, kernel: str | None = None, nvtx: str | None = None,
             threshold: float = DEFAULT_THRESHOLD, jobs: int | None = None) -> pl.DataFrame:
    """One row per launch with the columns of ``ncuflow export`` (identity, every field and its
    source, the model's terms and verdict, NVIDIA's, the missing fields)."""
    from ncuflow.output.export import launches_schema
    from ncuflow.output.launch_rows import launch_record, run_identity

    loaded = _load(paths, kernel, nvtx, jobs, threshold)
    records = []
    for run in loaded.runs:
        identity = run_identity(run.ref)
        records += [launch_record(x, classify_launch(x, threshold), identity) for x in run.launches]
    return pl.DataFrame(records, schema=launches_schema())


def classify(paths: PathsLike, *, kernel: str | None = None, nvtx: str | None = None,
             threshold: float = DEFAULT_THRESHOLD, jobs: int | None = None) -> pl.DataFrame:
    """One row per launch with the keys of ``ncuflow classify --json``, plus the device, the launch
    configuration and the binding term with its utilization."""
    from ncuflow.output.render import FINDING_KEYS, ROW_KEYS, binding_utilization, launch_row

    loaded = _load(paths, kernel, nvtx, jobs, threshold)
    rows = []
    for run in loaded.runs:
        for launch in run.launches:
            verdict = classify_launch(launch, threshold)
            term, u = binding_utilization(verdict)
            row = {key: value for key, value in launch_row(launch, verdict).items() if key not in FINDING_KEYS}
            row["notes"] = [f"{name}: {note}" for name, note in launch.notes.items()]  # what a value does not say
            rows.append({**row, "device": launch.device.name,
                         "grid_size": launch.value("grid_size"), "block_size": launch.value("block_size"),
                         "binding_term": term, "binding_u": u})
    schema: dict[str, Any] = {key: pl.Float64 for key in ROW_KEYS if key not in FINDING_KEYS}
    schema.update({"report": pl.String, "range": pl.Int32, "action": pl.Int32, "kernel": pl.String,
                   "bound": pl.String, "nvidia_sol": pl.String, "missing": pl.List(pl.String),
                   "notes": pl.List(pl.String),
                   "device": pl.String, "grid_size": pl.Float64, "block_size": pl.Float64,
                   "binding_term": pl.String, "binding_u": pl.Float64})
    return pl.DataFrame(rows, schema=schema)


def findings(paths: PathsLike, *, kernel: str | None = None, nvtx: str | None = None,
             threshold: float = DEFAULT_THRESHOLD, jobs: int | None = None) -> pl.DataFrame:
    """NVIDIA's findings and source markers: the rows of ``ncuflow export --findings`` (docs/findings.md),
    one per finding, per marker, and per launch whose report holds no rule results (``kind``)."""
    from ncuflow.output.export import FINDINGS_SCHEMA
    from ncuflow.output.finding_rows import finding_rows

    loaded = _load(paths, kernel, nvtx, jobs, threshold, WITH_FINDINGS)
    rows = [row for run in loaded.runs for x in run.launches for row in finding_rows(x, classify_launch(x, threshold))]
    return pl.DataFrame(rows, schema=FINDINGS_SCHEMA)


def summaries(paths: PathsLike, *, top: int | None = None, kernel: str | None = None, nvtx: str | None = None,
              threshold: float = DEFAULT_THRESHOLD, jobs: int | None = None) -> tuple[ReportSummary, ...]:
    """``ncuflow summary`` as frozen records: one ``ReportSummary`` per report, its kernels by time."""
    top = checked_top(top)
    return summarize(_load(paths, kernel, nvtx, jobs, threshold, WITH_FINDINGS).runs, threshold=threshold, top=top)


def summary(paths: PathsLike, *, top: int | None = None, kernel: str | None = None, nvtx: str | None = None,
            threshold: float = DEFAULT_THRESHOLD, jobs: int | None = None) -> pl.DataFrame:
    """One row per kernel (full name and grid × block) of every report: launches, total and median
    duration, share of the report's GPU time (summing to 1 per report), verdicts, binding u."""
    found = summaries(paths, top=top, kernel=kernel, nvtx=nvtx, threshold=threshold, jobs=jobs)
    return pl.DataFrame(summary_rows(found), schema=SUMMARY_SCHEMA)


def compare(base: PathsLike, new: PathsLike, *, pairs: Sequence[tuple[str, str]] = (), kernel: str | None = None,
            nvtx: str | None = None, threshold: float = DEFAULT_THRESHOLD,
            tolerances: Tolerances = DEFAULT_TOLERANCES, jobs: int | None = None) -> Comparison:
    """``ncuflow compare`` as a frozen ``Comparison``: ``matched`` (each with ``how``: matched,
    reconfigured or paired, the judged fields and per-run totals), ``only_base``, ``only_new``."""
    base_paths, new_paths, named_pairs = _paths(base), _paths(new), checked_pairs(pairs)
    return compare_loaded(_load(base_paths, kernel, nvtx, jobs, threshold), _load(new_paths, kernel, nvtx, jobs),
                          base_label=", ".join(map(str, base_paths)), new_label=", ".join(map(str, new_paths)),
                          tolerances=tolerances, threshold=threshold, pairs=named_pairs)


def roofline(paths: PathsLike, *, per: str = "kernel", kernel: str | None = None, nvtx: str | None = None,
             threshold: float = DEFAULT_THRESHOLD, jobs: int | None = None) -> tuple[Roofline, ...]:
    """The hierarchical roofline per GPU as frozen records (ceilings, points, what was left out)."""
    per = checked_per(per)
    return rooflines(point_groups(_load(paths, kernel, nvtx, jobs, threshold).runs, per), threshold)
