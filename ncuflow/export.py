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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from ncuflow import __version__
from ncuflow.classify import DEFAULT_THRESHOLD, TERM_NAMES, Verdict, classify
from ncuflow.errors import NcuflowError
from ncuflow.extract import iter_launches, iter_raw_metrics
from ncuflow.launch import Launch
from ncuflow.metrics import FIELDS

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


def launches_frame(
    launches: Iterable[Launch], verdicts: Iterable[Verdict] | None = None, *, threshold: float = DEFAULT_THRESHOLD
) -> pl.DataFrame:
    """The launches table of already-read launches (verdicts computed when not given)."""
    launch_list = list(launches)
    verdict_list = list(verdicts) if verdicts is not None else [classify(x, threshold) for x in launch_list]
    identities: dict[str, RunIdentity] = {}
    records = []
    for launch, verdict in zip(launch_list, verdict_list, strict=True):
        if launch.report not in identities:
            identities[launch.report] = run_identity(Path(launch.report))
        records.append(launch_record(launch, verdict, identities[launch.report]))
    return pl.DataFrame(records, schema=launches_schema())


def report_launches_frame(report: Path, *, threshold: float = DEFAULT_THRESHOLD) -> pl.DataFrame:
    """The launches table of one report, read one launch at a time."""
    identity = run_identity(report)
    records = [
        launch_record(launch, classify(launch, threshold), identity) for launch in iter_launches(report)
    ]
    return pl.DataFrame(records, schema=launches_schema())


def report_metrics_frame(report: Path) -> pl.DataFrame:
    columns: dict[str, list[Any]] = {name: [] for name in METRICS_SCHEMA}
    for range_index, action_index, metric in iter_raw_metrics(report):
        columns["report"].append(str(report))
        columns["range"].append(range_index)
        columns["action"].append(action_index)
        columns["name"].append(metric.name)
        columns["value"].append(metric.value)
        columns["string_value"].append(metric.string_value)
        columns["unit"].append(metric.unit)
    return pl.DataFrame(columns, schema=METRICS_SCHEMA)


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
    metadata = {
        METADATA_KEY: SCHEMA_VERSION,
        "ncuflow.table": table,
        "ncuflow.version": __version__,
    }
    with atomic_output(target) as temporary:
        frame.write_parquet(temporary, metadata=metadata)


def read_schema_version(path: Path) -> str | None:
    return pl.read_parquet_metadata(path).get(METADATA_KEY)


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
) -> ExportResult:
    """Read every report, then write the tables. Nothing is written if any report fails.

    ``progress`` is called with (report index, report path) before each report.
    """
    if output.exists() and output.is_dir():
        raise NcuflowError(
            f"The output {output} is a folder.",
            "export writes one parquet file.",
            "Give a file name such as launches.parquet.",
        )
    launch_frames: list[pl.DataFrame] = []
    metric_frames: list[pl.DataFrame] = []
    for index, report in enumerate(reports):
        if progress is not None:
            progress(index, report)
        launch_frames.append(report_launches_frame(report, threshold=threshold))
        if metrics_long:
            metric_frames.append(report_metrics_frame(report))
    launches = pl.concat(launch_frames, how="vertical") if launch_frames else pl.DataFrame(schema=launches_schema())
    metrics_path = metrics_path_for(output) if metrics_long else None
    metrics = pl.concat(metric_frames, how="vertical") if metric_frames else None
    if metrics_path is not None and metrics is not None:
        write_parquet(metrics, metrics_path, table="metrics")
    try:
        write_parquet(launches, output, table="launches")
    except BaseException:
        if metrics_path is not None:
            metrics_path.unlink(missing_ok=True)
        raise
    return ExportResult(
        launches_path=output,
        launch_count=launches.height,
        report_count=len(reports),
        metrics_path=metrics_path,
        metric_rows=metrics.height if metrics is not None else None,
    )
