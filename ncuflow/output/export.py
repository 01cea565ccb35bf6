"""Launches -> polars frames -> parquet, written atomically with a schema version.

Two tables (see ARCHITECTURE.md):
- ``launches``: one row per launch: identity, canonical fields, their provenance,
  the model's terms and verdict, NVIDIA's rule verdict, and the missing fields;
- ``metrics`` (long): every raw metric of every launch (name, value, string value, unit).
A report that sits in a profile-store run folder (``manifest.json`` beside it) also
gets the run's identity: cell, params, content key, run id.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from ncuflow import __version__
from ncuflow.analyze.classify import DEFAULT_THRESHOLD, TERM_NAMES, Verdict, classify
from ncuflow.errors import NcuflowError
from ncuflow.read.extract import RawMetric, iter_launches, iter_launches_with_metrics
from ncuflow.read.launch import Launch
from ncuflow.read.metrics import FIELDS

SCHEMA_VERSION = "1"
METADATA_KEY = "ncuflow.schema_version"

_IDENTITY_SCHEMA: dict[str, Any] = {
    "report": pl.String,
    "report_name": pl.String,
    "range": pl.Int32,
    "action": pl.Int32,
    "kernel_function": pl.String,
    "kernel_demangled": pl.String,
    "kernel_mangled": pl.String,
    "nvtx": pl.List(pl.String),
    "device": pl.String,
    "compute_capability": pl.String,
    "sm_count": pl.Int32,
    "ncu_version": pl.String,
    "cell": pl.String,
    "params_json": pl.String,
    "content_key": pl.String,
    "run_id": pl.String,
}


def launches_schema() -> dict[str, Any]:
    schema = dict(_IDENTITY_SCHEMA)
    for field in FIELDS:
        schema[field.name] = pl.Float64
    for field in FIELDS:
        schema[f"src_{field.name}"] = pl.String
    for name in TERM_NAMES:
        schema[f"u_{name}"] = pl.Float64
    for name in TERM_NAMES:
        schema[f"src_u_{name}"] = pl.String
    schema.update(
        {
            "bound": pl.String,
            "threshold": pl.Float64,
            "nvidia_sol": pl.String,
            "nvidia_category": pl.String,
            "nvidia_agrees": pl.Boolean,
            "nvidia_reason": pl.String,
            "missing": pl.List(pl.String),
        }
    )
    return schema


METRICS_SCHEMA: dict[str, Any] = {
    "report": pl.String,
    "range": pl.Int32,
    "action": pl.Int32,
    "name": pl.String,
    "value": pl.Float64,
    "string_value": pl.String,
    "unit": pl.String,
}


@dataclass(frozen=True)
class RunIdentity:
    cell: str | None
    params_json: str | None
    content_key: str | None
    run_id: str | None


_NO_RUN = RunIdentity(None, None, None, None)


def run_identity(report: Path) -> RunIdentity:
    """The store run a report belongs to, from the manifest.json beside it (if any)."""
    manifest_path = report.parent / "manifest.json"
    if not manifest_path.is_file():
        return _NO_RUN
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        return _NO_RUN
    params = manifest.get("params")
    return RunIdentity(
        cell=manifest.get("cell"),
        params_json=json.dumps(params, sort_keys=True) if params is not None else None,
        content_key=manifest.get("content_key"),
        run_id=manifest.get("run_id"),
    )


def launch_record(launch: Launch, verdict: Verdict, identity: RunIdentity = _NO_RUN) -> dict[str, Any]:
    record: dict[str, Any] = {
        "report": launch.report,
        "report_name": Path(launch.report).name,
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
        record[field.name] = launch.value(field.name)
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
        }
    )
    return record


# ---------------------------------------------------------------------------
# writing


def metrics_path_for(output: Path) -> Path:
    """Where `--metrics-long` writes its table: beside the launches file."""
    return output.with_name(output.stem + ".metrics" + output.suffix)


@contextlib.contextmanager
def atomic_output(target: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename onto it only if the block succeeds."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".ncuflow-tmp-{os.getpid()}-{target.name}")
    try:
        yield temporary
        os.replace(temporary, target)
    finally:
        if temporary.exists():
            temporary.unlink()


def write_parquet(frame: pl.DataFrame, target: Path, *, table: str) -> None:
    """Write one frame atomically with the schema version in the file metadata."""
    metadata = {METADATA_KEY: SCHEMA_VERSION, "ncuflow.table": table, "ncuflow.version": __version__}
    with atomic_output(target) as temporary:
        frame.write_parquet(temporary, metadata=metadata)


def read_schema_version(path: Path) -> str | None:
    return pl.read_parquet_metadata(path).get(METADATA_KEY)


class _PartWriter:
    """Accumulates rows and flushes them to numbered parquet parts of at most ``chunk`` rows.

    Keeps memory bounded by the chunk, not by the size of the export: a report with
    thousands of launches never holds all its raw metrics at once.
    """

    def __init__(self, folder: Path, name: str, schema: dict[str, Any], chunk: int) -> None:
        self.folder = folder
        self.name = name
        self.schema = schema
        self.chunk = chunk
        self.columns: dict[str, list[Any]] = {column: [] for column in schema}
        self.parts: list[Path] = []
        self.rows = 0

    def add(self, record: dict[str, Any]) -> None:
        for column, values in self.columns.items():
            values.append(record[column])
        if len(self.columns["report"]) >= self.chunk:
            self.flush()

    def flush(self) -> None:
        pending = len(self.columns["report"])
        if pending == 0 and self.parts:
            return
        part = self.folder / f"{self.name}-{len(self.parts):05d}.parquet"
        pl.DataFrame(self.columns, schema=self.schema).write_parquet(part)
        self.parts.append(part)
        self.rows += pending
        self.columns = {column: [] for column in self.schema}

    def close(self) -> None:
        """Flush what is pending (no empty part: the assembly adds the schema when none exists)."""
        if self.columns["report"]:
            self.flush()


def _assemble(folder: Path, name: str, schema: dict[str, Any], target: Path, *, table: str) -> None:
    """Concatenate the parts named ``name-*`` in name order (= input order) into ``target``."""
    parts = sorted(folder.glob(f"{name}-*.parquet"))
    metadata = {METADATA_KEY: SCHEMA_VERSION, "ncuflow.table": table, "ncuflow.version": __version__}
    with atomic_output(target) as temporary:
        if parts:
            pl.scan_parquet(parts).sink_parquet(temporary, metadata=metadata)
        else:
            pl.DataFrame(schema=schema).write_parquet(temporary, metadata=metadata)


def export_one_report(
    report: Path, folder: Path, index: int, metrics_long: bool, threshold: float, chunk_rows: int
) -> tuple[list[dict[str, Any]], int]:
    """Read one report (once): its launch rows, and its raw metrics as parquet parts in ``folder``.

    Runs in a reading worker (``ncuflow.read.pool``). The launch rows (a few per
    launch) travel back to the caller; the raw metric rows (thousands per launch) are
    written where they are read, as parts named by ``index`` so that the assembly keeps
    the input order. Returns (launch rows, metric row count).
    """
    rows: list[dict[str, Any]] = []
    metrics = _PartWriter(folder, f"metrics-{index:07d}", METRICS_SCHEMA, chunk_rows)
    identity = run_identity(report)
    if metrics_long:
        pairs: Iterator[tuple[Launch, tuple[RawMetric, ...]]] = iter_launches_with_metrics(report)
    else:
        pairs = ((launch, ()) for launch in iter_launches(report))
    for launch, raw in pairs:
        rows.append(launch_record(launch, classify(launch, threshold), identity))
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
    return rows, metrics.rows


@dataclass(frozen=True)
class ExportResult:
    launches_path: Path
    launch_count: int
    report_count: int
    metrics_path: Path | None
    metric_rows: int | None


def export_reports(
    reports: Sequence[Path],
    output: Path,
    *,
    metrics_long: bool = False,
    threshold: float = DEFAULT_THRESHOLD,
    progress: Any = None,
    chunk_rows: int = 200_000,
    jobs: int | None = None,
) -> ExportResult:
    """Read every report, each once, then write the tables. Nothing is written if any report fails.

    Each report is read in ``jobs`` worker processes (see ``ncuflow.read.pool``; None:
    in this process); rows go to temporary parquet parts of at most ``chunk_rows`` rows
    beside the output; the final files are assembled from them in input order (streaming) and
    renamed into place at the end. ``progress`` is called with (report index, report
    path) as each report is done.
    """
    import tempfile

    from ncuflow.read.pool import map_reports

    if output.is_dir():
        raise NcuflowError(
            f"The output {output} is a folder.",
            "export writes one parquet file.",
            "Give a file name such as launches.parquet.",
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    metrics_path = metrics_path_for(output) if metrics_long else None
    with tempfile.TemporaryDirectory(prefix=".ncuflow-tmp-", dir=output.parent) as folder:
        tasks = [(report, Path(folder).resolve(), index, metrics_long, threshold, chunk_rows)
                 for index, report in enumerate(reports)]
        launches = _PartWriter(Path(folder), "launches", launches_schema(), chunk_rows)
        metric_rows = 0
        # ncu_report keeps, per process, the unit it first returned for a metric name: a
        # derived metric read after another report's can carry that report's unit (seen on
        # the corpus: "byte" for a "%" breakdown). The long table is therefore read with
        # a fresh worker per report, so that every unit is the report's own.
        retire = 1 if metrics_long else None
        for rows, metric_count in map_reports(export_one_report, tasks, jobs=jobs, progress=progress,
                                              retire_bytes=retire):
            for row in rows:
                launches.add(row)
            metric_rows += metric_count
        launches.close()
        if metrics_path is not None:
            _assemble(Path(folder), "metrics", METRICS_SCHEMA, metrics_path, table="metrics")
        try:
            _assemble(Path(folder), "launches", launches_schema(), output, table="launches")
        except BaseException:
            if metrics_path is not None:
                metrics_path.unlink(missing_ok=True)
            raise
    return ExportResult(
        launches_path=output,
        launch_count=launches.rows,
        report_count=len(reports),
        metrics_path=metrics_path,
        metric_rows=metric_rows if metrics_long else None,
    )
