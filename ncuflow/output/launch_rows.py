"""One report -> its launch rows (and, for the long table, its raw-metric parquet parts).

What a reading worker runs for ``export``. Kept apart from ``export`` so that the
workers, and the server they are forked from, never import polars unless the long
metrics table is asked for: the worker server starts while the driver waits.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ncuflow.analyze.classify import DEFAULT_THRESHOLD, Verdict, classify
from ncuflow.analyze.selection import Selection
from ncuflow.read.escalation import read_run_launches, with_escalations
from ncuflow.read.extract import iter_launches_with_metrics, read_launches
from ncuflow.read.launch import Launch
from ncuflow.read.metrics import FIELDS
from ncuflow.read.options import READ_DEFAULT, ReadOptions
from ncuflow.read.plausibility import flag_identical_counters
from ncuflow.read.runs import manifest_kernel_filter

if TYPE_CHECKING:  # a plain report's rows import no store
    from ncuflow.store import RunRecord, RunRef


@dataclass(frozen=True)
class RunIdentity:
    cell: str | None
    params_json: str | None
    content_key: str | None
    run_id: str | None


_NO_RUN = RunIdentity(None, None, None, None)


def run_identity(ref: RunRef | None) -> RunIdentity:
    """The store run a report's rows belong to (all None for a plain report)."""
    if ref is None:
        return _NO_RUN
    return RunIdentity(
        cell=ref.cell,
        params_json=json.dumps(dict(ref.params), sort_keys=True),
        content_key=ref.content_key,
        run_id=ref.run_id,
    )


@functools.lru_cache(maxsize=64)
def _file_name(report: str) -> str:
    """A report's file name (the same for every launch of it: worked out once)."""
    return Path(report).name


def launch_record(launch: Launch, verdict: Verdict, identity: RunIdentity = _NO_RUN) -> dict[str, Any]:
    record: dict[str, Any] = {
        "report": launch.report,
        "report_name": _file_name(launch.report),
        "range": launch.range_index,
        "action": launch.action_index,
        "kernel_function": launch.kernel.function,
        "kernel_demangled": launch.kernel.demangled,
        "kernel_mangled": launch.kernel.mangled,
        "nvtx": list(launch.nvtx),
        "device": launch.device.name,
        "compute_capability": launch.device.compute_capability,
        "sm_count": launch.device.sm_count,
        "ncu_version": launch.ncu_version,
        "cell": identity.cell,
        "params_json": identity.params_json,
        "content_key": identity.content_key,
        "run_id": identity.run_id,
    }
    for field in FIELDS:
        value = launch.value(field.name)
        record[field.name] = int(value) if value is not None and field.is_count else value
    for field in FIELDS:
        record[f"src_{field.name}"] = launch.provenance.get(field.name)
    for term in verdict.terms:
        record[f"u_{term.name}"] = term.utilization
    for term in verdict.terms:
        record[f"src_u_{term.name}"] = term.source if term.available else f"unavailable: {term.unavailable}"
    nvidia = verdict.nvidia
    record.update(
        {
            "bound": verdict.bound,
            "threshold": verdict.threshold,
            "nvidia_sol": launch.nvidia_sol,
            "nvidia_category": nvidia.category if nvidia else None,
            "nvidia_agrees": nvidia.agrees if nvidia else None,
            "nvidia_reason": nvidia.reason if nvidia else None,
            "missing": list(launch.missing),
            "notes": [f"{name}: {note}" for name, note in launch.notes.items()],
            "implausible": list(launch.implausible),
        }
    )
    return record


Columns = dict[str, list[Any]]


def worker_modules(metrics_long: bool) -> tuple[str, ...]:
    """What an export worker imports besides this module: polars' part writer for the long table."""
    return ("ncuflow.output.parts",) if metrics_long else ()


def prestart_export(reports: Sequence[Path], *, jobs: int | None, metrics_long: bool) -> None:
    """``ncuflow.read.pool.prestart`` for a later ``export_reports`` of ``reports``: the same
    worker function and modules, started before the command imports polars."""
    from ncuflow.read.pool import prestart

    prestart(export_one_report, [(report,) for report in reports], jobs=jobs, preload=worker_modules(metrics_long),
             fresh_workers=metrics_long)


def as_columns(records: list[dict[str, Any]]) -> Columns:
    """Rows (dicts with the same keys) as one list per column: what travels back from a
    worker (a few lists unpickle many times faster than hundreds of dicts)."""
    if not records:
        return {}
    return {name: [record[name] for record in records] for name in records[0]}


@dataclass(frozen=True)
class ExportOptions:
    """What an export writes of each launch: the verdict at ``threshold``, the launches ``selection``
    keeps, and what is read besides the fields (``read.findings``: the findings table's rows)."""

    threshold: float = DEFAULT_THRESHOLD
    selection: Selection | None = None
    read: ReadOptions = READ_DEFAULT


@dataclass(frozen=True)
class ExportedReport:
    """What one report gives an export: its launch rows and finding rows (as columns), the raw
    metric rows it wrote as parts, and the warnings to show."""

    rows: Columns
    metric_rows: int
    warnings: tuple[str, ...]
    finding_rows: Columns


def export_one_report(report: Path, record: RunRecord | None, folder: Path | None, index: int,
                      metrics_long: bool = False, chunk_rows: int = 200_000,
                      options: ExportOptions = ExportOptions()) -> ExportedReport:
    """Read one report (once): its launch rows, its finding rows where asked for, and its raw
    metrics as parquet parts in ``folder``.

    Runs in a reading worker (``ncuflow.read.pool``). The launch rows (a few per
    launch) travel back to the caller, as columns; the raw metric rows (thousands per
    launch) are written where they are read, as parts named by ``index`` so that the
    assembly keeps the input order. A store run's launches are merged with its tier-2
    escalation.
    """
    import warnings

    keep = _keeper(record, options.selection)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if metrics_long:
            assert folder is not None
            launches, metric_rows = _launches_writing_metrics(report, record, folder, index, chunk_rows, keep,
                                                              options.read)
        else:
            launches, metric_rows = (read_run_launches(record, options.read) if record is not None
                                     else read_launches(report, options.read)), 0
    if keep is not None:
        launches = tuple(x for x in launches if keep(x))
    identity = run_identity(record.ref if record is not None else None)
    verdicts = [classify(x, options.threshold) for x in launches]
    rows = as_columns([launch_record(x, v, identity) for x, v in zip(launches, verdicts, strict=True)])
    findings: Columns = {}
    if options.read.findings:
        from ncuflow.output.finding_rows import finding_rows

        findings = as_columns([row for x, v in zip(launches, verdicts, strict=True)
                               for row in finding_rows(x, v, identity.run_id)])
    return ExportedReport(rows, metric_rows, tuple(f"{report}: {w.message}" for w in caught), findings)


def _keeper(record: RunRecord | None, selection: Selection | None) -> Callable[[Launch], bool] | None:
    """The launches exported: those the run was profiled (or imported) for, and the selection's."""
    run_keep = manifest_kernel_filter(record.manifest) if record is not None else None
    chosen = selection.predicate() if selection is not None else None
    if run_keep is None or chosen is None:
        return run_keep or chosen
    return lambda launch: run_keep(launch) and chosen(launch)


def _launches_writing_metrics(report: Path, record: RunRecord | None, folder: Path, index: int, chunk_rows: int,
                              keep: Callable[[Launch], bool] | None = None, read: ReadOptions = READ_DEFAULT,
                              ) -> tuple[tuple[Launch, ...], int]:
    """The report's launches (with their escalation), its raw metrics streamed to parts as they are read."""
    # polars: only the long table needs it here
    from ncuflow.output.parts import METRICS_SCHEMA, PartWriter

    metrics = PartWriter(folder, f"metrics-{index:07d}", METRICS_SCHEMA, chunk_rows)
    tier1: list[Launch] = []  # a few fields each; the raw metrics stream to parts as they come
    for launch, raw in iter_launches_with_metrics(report, read):
        tier1.append(launch)
        if keep is not None and not keep(launch):
            continue  # not selected: no raw metric rows either
        for metric in raw:
            metrics.add(
                {
                    "report": str(report),
                    "range": launch.range_index,
                    "action": launch.action_index,
                    "name": metric.name,
                    "value": metric.value,
                    "string_value": metric.string_value,
                    "unit": metric.unit,
                }
            )
    metrics.close()
    launches = flag_identical_counters(tuple(tier1))  # as read_launches names them
    return (with_escalations(record, launches, read) if record is not None else launches), metrics.rows
