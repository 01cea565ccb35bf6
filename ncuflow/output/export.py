"""Launches -> polars frames -> parquet, written atomically with a schema version.

Three tables (docs/ARCHITECTURE.md):
- ``launches``: one row per launch: identity, canonical fields, their provenance,
  the model's terms and verdict, NVIDIA's rule verdict, and the missing fields;
- ``metrics`` (long): every raw metric of every launch (name, value, string value, unit);
- ``findings`` (``--findings``): one row per NVIDIA finding and per source marker of every
  launch, and one per launch whose report holds no rule results (``output.finding_rows``).
A report that sits in a profile-store run folder (``manifest.json`` beside it) also
gets the run's identity: cell, params, content key, run id.
"""

from __future__ import annotations

import contextlib
import uuid
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl

from ncuflow import __version__
from ncuflow.analyze.classify import TERM_NAMES
from ncuflow.errors import NcuflowError, UsageError
from ncuflow.files import (
    TMP_MARK,
    OutputError,
    as_output_error,
    atomic_path,
    atomic_paths,
    guard_output,
    os_errors_as_messages,
    output_target,
    parquet_table_recogniser,
    remove_temporaries,
    text_recogniser,
)
from ncuflow.files.owner import owner_tag
from ncuflow.output.launch_rows import (
    ExportedReport,
    ExportOptions,
    export_one_report,
    worker_modules,
)
from ncuflow.output.parts import METRICS_SCHEMA
from ncuflow.output.stream import TableStream, table_stream
from ncuflow.read.escalation import EscalationWarning
from ncuflow.read.metrics import FIELDS
from ncuflow.read.runs import Sources, sources

# 2 (issue 30): global_ld_inst is the hardware total of the load kinds the chip has (LDG, LDGSTS,
# TMA), beside its SASS-patched counterpart and each kind; u_pipe; l2_throughput_pct is lts__throughput.
SCHEMA_VERSION = "2"
# The launches table is written as it is read (``ncuflow.output.stream``). What it holds
# beyond the process's fixed cost: a batch of rows (a launch row is ~10 KiB as Python objects,
# ~3.7 KiB in a polars frame: 181 columns), the queued frames, the row group being filled, and
# what polars' parquet writer keeps of every row group written until the file is closed:
# ~4 KiB a column, ~0.7 MiB a row group of the launches table, whatever its rows. 1,000 rows
# a row group weighs the two (the corpus x10, one process: 500 rows 95 MiB, 1,000 rows 96 MiB,
# 2,000 rows 102 MiB; x40: 115, 106 and 108 MiB).
LAUNCH_BATCH_ROWS = 250
LAUNCH_ROW_GROUP_ROWS = 1_000
# rows per row group of the assembled long metrics table (6 columns a row)
METRIC_ROW_GROUP_ROWS = 100_000
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
        schema[field.name] = pl.Int64 if field.is_count else pl.Float64  # counts are whole numbers
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
            "notes": pl.List(pl.String),  # "field: why it holds what it holds" (read.sanity)
            # the fields whose stored values cannot be, and "counters" where another kernel of the
            # report holds the very same ones (read.sanity, read.plausibility); empty when plausible
            "implausible": pl.List(pl.String),
        }
    )
    return schema


# The findings table (``export --findings``; docs/findings.md): one row per finding, marker, or
# launch without rule results (``kind``).
_FOCUS_METRIC = pl.Struct({"name": pl.String, "value": pl.Float64, "severity": pl.String, "info": pl.String})
FINDINGS_SCHEMA: dict[str, Any] = {
    "report": pl.String, "range": pl.Int32, "action": pl.Int32, "kernel_function": pl.String, "run_id": pl.String,
    "bound": pl.String, "kind": pl.String, "order": pl.Int32, "rule": pl.String, "rule_name": pl.String,
    "section": pl.String, "type": pl.String, "title": pl.String, "message": pl.String, "message_raw": pl.String,
    "speedup": pl.Float64, "speedup_type": pl.String, "concerns": pl.List(pl.String), "on_binding": pl.Boolean,
    "focus_metrics": pl.List(_FOCUS_METRIC), "marker_kind": pl.String, "address": pl.UInt64, "file": pl.String,
    "line": pl.Int64,
}


# ---------------------------------------------------------------------------
# writing


def metrics_path_for(output: Path) -> Path:
    """Where `--metrics-long` writes its table: beside the launches file."""
    return output.with_name(output.stem + ".metrics" + output.suffix)


@contextlib.contextmanager
def atomic_output(target: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename onto it only if the block succeeds."""
    with atomic_path(target) as temporary:
        yield temporary


def _metadata(table: str, export_id: str | None = None) -> dict[str, str]:
    metadata = {METADATA_KEY: SCHEMA_VERSION, "ncuflow.table": table, "ncuflow.version": __version__}
    if export_id is not None:
        metadata["ncuflow.export_id"] = export_id  # the same in the launches and metrics files of one export
    return metadata


def refuse_undecodable_folder(target: Path, *, kind: str, option: str) -> None:
    """polars takes paths as text: a folder whose name holds a byte that is not UTF-8 cannot be
    written by it (the file's own name can: its temporary's name is plain, ``files.temporary_beside``)."""
    try:
        str(output_target(target).parent).encode("utf-8")
    except UnicodeEncodeError:
        raise OutputError(
            f"Refusing to write {kind} to {target}: the name of its folder holds a byte that is not UTF-8 text.",
            "The parquet writer (polars) takes only paths that are text; the file itself may have any name.",
            f"Give {option} a folder whose name is UTF-8 text.",
        ) from None


def refuse_other_format(target: Path, option: str) -> None:
    """Refuse a parquet output whose name says another format (``--parquet x.csv``)."""
    if target.suffix and target.suffix.lower() not in PARQUET_SUFFIXES:
        raise UsageError(
            f"{option} {target.name} names a {target.suffix} file, and this table is written as parquet.",
            "ncuflow writes a file in the format its extension names, or refuses it.",
            f"Name it {target.stem}.parquet.",
        )


def guard_parquet(target: Path, *, table: str, inputs: Sequence[Path] = (), option: str = "the output") -> None:
    """Refuse ``target`` unless it is new or an earlier ncuflow parquet table of the same kind."""
    kind = f"an ncuflow {table} parquet table"
    guard_output(target, kind=kind, recognise=parquet_table_recogniser(table), inputs=inputs, option=option)
    refuse_undecodable_folder(target, kind=kind, option=option)


def write_parquet(frame: pl.DataFrame, target: Path, *, table: str, inputs: Sequence[Path] = (),
                  option: str = "the output", metadata: dict[str, str] | None = None) -> None:
    """Write one frame atomically with the schema version (and ``metadata``) in the file metadata.

    Refuses a target that is an input or an existing file that is not a parquet table
    of the same kind written by ncuflow (``files.guard_output``).
    """
    guard_parquet(target, table=table, inputs=inputs, option=option)
    with atomic_output(target) as temporary:
        frame.write_parquet(temporary, metadata={**_metadata(table), **(metadata or {})})


def read_schema_version(path: Path) -> str | None:
    return pl.read_parquet_metadata(path).get(METADATA_KEY)


class MismatchedPairError(NcuflowError):
    """The launches and metrics tables beside each other were written by different exports."""


def _parquet_metadata(path: Path) -> dict[str, str]:
    """A parquet file's key-value metadata; one paragraph where the file is missing or no parquet."""
    try:
        return dict(pl.read_parquet_metadata(path))
    except FileNotFoundError:
        raise NcuflowError(f"{path} does not exist.", "", "Pass the file that `ncuflow export -o` wrote.") from None
    except Exception as error:  # polars' error for a file that is not parquet, or cut short
        raise NcuflowError(f"{path} cannot be read as a parquet file: {error}.", "",
                           "Export again: `ncuflow export` writes the file whole or not at all.") from None


def read_export(launches_path: Path) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """An export's launches table and, where it has one, its long metrics table, checked as a pair.

    Both files of one export carry the same ``ncuflow.export_id``. A metrics table from
    another export (an export without ``--metrics-long`` after one with it, an export killed
    between its two renames, two exports to one output at once) is a mismatched pair:
    refused with one paragraph, never joined to launches it does not describe.
    """
    launches_meta = _parquet_metadata(launches_path)
    if launches_meta.get("ncuflow.table") != "launches":
        raise NcuflowError(
            f"{launches_path} is not an ncuflow launches table.",
            "`ncuflow export` writes it with ncuflow.table = launches in the parquet metadata.",
            "Pass the file that `ncuflow export -o` wrote.",
        )
    metrics_path = metrics_path_for(launches_path)
    wanted = launches_meta.get("ncuflow.export_id")
    if not metrics_path.is_file():
        return pl.read_parquet(launches_path), None
    found = _parquet_metadata(metrics_path).get("ncuflow.export_id")
    if wanted is None or found != wanted:
        raise MismatchedPairError(
            f"Mismatched pair: {metrics_path} does not belong to {launches_path}: its export id is {found}, "
            f"the launches' {wanted}.",
            "It was written by another export (an export without --metrics-long after one with it, one "
            "killed between renaming its two files, or two exports to this output at once), so its rows "
            "describe other launches.",
            f"Export again with --metrics-long to write a matching pair, or delete {metrics_path.name}.",
        )
    return pl.read_parquet(launches_path), pl.read_parquet(metrics_path)


def _assemble(folder: Path, name: str, schema: dict[str, Any], temporary: Path, *,
              metadata: dict[str, str], row_group_rows: int) -> None:
    """Concatenate the parts named ``name-*`` in name order (= input order) into ``temporary``
    (the caller renames it into place with its pair), streaming, ``row_group_rows`` rows a row group."""
    parts = sorted(folder.glob(f"{name}-*.parquet"))
    if parts:
        pl.scan_parquet(parts, low_memory=True).sink_parquet(temporary, metadata=metadata,
                                                              row_group_size=row_group_rows)
    else:
        pl.DataFrame(schema=schema).write_parquet(temporary, metadata=metadata)


class StaleMetricsWarning(UserWarning):
    """A long metrics table beside a launches table that a later export replaced without it."""


def _warn_if_stale_metrics(output: Path) -> None:
    """Name the ``.metrics.parquet`` an earlier ``--metrics-long`` export left beside ``output``:
    it describes that export's launches, not the new table (their export ids differ)."""
    sibling = metrics_path_for(output)
    try:
        metadata = pl.read_parquet_metadata(sibling) if sibling.is_file() else {}
    except Exception:  # not a parquet file: not ours to speak of
        return
    if metadata.get("ncuflow.table") == "metrics":
        warnings.warn(StaleMetricsWarning(
            f"{sibling} is the long metrics table of an earlier export (export id "
            f"{metadata.get('ncuflow.export_id', 'none')}), not of the launches just written to {output}. "
            "Delete it, or export again with --metrics-long to write a matching pair."), stacklevel=3)


def _prepare_findings(findings: Path, output: Path, reports: Sequence[Path]) -> None:
    """Refuse a findings table that cannot be written: not parquet, the launches output, an input,
    someone else's file."""
    refuse_other_format(findings, "--findings")
    if output_target(findings) == output_target(output):
        raise UsageError(f"--findings {findings} is the launches output too.", "Each table is a file of its own.",
                         "Name the findings table findings.parquet.")
    guard_parquet(findings, table="findings", inputs=reports, option="--findings")


def _findings_stream(findings: Path | None, temporaries: Sequence[Path],
                     export_id: str) -> contextlib.AbstractContextManager[TableStream | None]:
    """The findings table's stream into its temporary (the one before the launches'), or nothing."""
    if findings is None:
        return contextlib.nullcontext()
    return table_stream(temporaries[-2], FINDINGS_SCHEMA, batch=LAUNCH_BATCH_ROWS,
                        row_group_rows=LAUNCH_ROW_GROUP_ROWS * 10, metadata=_metadata("findings", export_id))


@dataclass(frozen=True)
class ExportResult:
    launches_path: Path
    launch_count: int
    report_count: int
    metrics_path: Path | None
    metric_rows: int | None
    findings_path: Path | None = None
    finding_rows: int | None = None


# What the output's extension names: the launches table is written in that format.
PARQUET_SUFFIXES: tuple[str, ...] = (".parquet", ".pq")
CSV_SUFFIX = ".csv"


def output_format(output: Path, metrics_long: bool = False) -> str:
    """"parquet" or "csv", from the output's extension; any other extension is refused, never
    written as parquet under a name that says otherwise."""
    suffix = output.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    if suffix == CSV_SUFFIX:
        if metrics_long:
            raise UsageError(
                f"--metrics-long writes parquet only, and {output.name} names CSV.",
                "The long table is paired with the launches table by an export id in both files' "
                "parquet metadata, which CSV cannot carry.",
                f"Name the output {output.with_suffix('.parquet').name}, or drop --metrics-long.",
            )
        return "csv"
    raise UsageError(
        f"{output.name} does not name a format export writes"
        + (f" ({suffix} is not one)." if suffix else " (it has no extension)."),
        "export writes the launches table as parquet (.parquet, .pq) or CSV (.csv), in the format "
        "the extension names.",
        f"Name the output {output.stem}.parquet or {output.stem}.csv.",
    )


def csv_header() -> str:
    """The start of a launches CSV's first line (how an earlier one is recognised)."""
    return ",".join(launches_schema())[:200]


def _prepare_outputs(output: Path, metrics_long: bool, reports: Sequence[Path]) -> Path | None:
    """Refuse outputs that cannot be written (a folder, an input, another file's name, an
    extension of another format), make the folder, clear dead temporaries; the metrics table's
    path where it is asked for."""
    if output.is_dir():
        raise NcuflowError(
            f"The output {output} is a folder.",
            "export writes one parquet or CSV file.",
            "Give a file name such as launches.parquet.",
        )
    try:
        csv = output_format(output, metrics_long) == "csv"
    except UsageError:  # an input or someone's file under that name is said first, as such
        guard_output(output, kind="a launches table", recognise=parquet_table_recogniser("launches"),
                     inputs=reports, option="-o/--output")
        raise
    metrics_path = metrics_path_for(output) if metrics_long else None
    guard_output(output, kind="a launches CSV" if csv else "a launches table",
                 recognise=text_recogniser(csv_header()) if csv else parquet_table_recogniser("launches"),
                 inputs=reports, option="-o/--output")
    refuse_undecodable_folder(output, kind="a launches table", option="-o/--output")
    if metrics_path is not None:
        guard_output(metrics_path, kind="a metrics table", recognise=parquet_table_recogniser("metrics"),
                     inputs=reports, option="-o/--output (its .metrics.parquet sibling)")
    with os_errors_as_messages(output.parent, "create the folder"):
        output.parent.mkdir(parents=True, exist_ok=True)
    remove_temporaries(output.parent)
    return metrics_path


def _read_all(tasks: list[tuple[Any, ...]], tables: tuple[TableStream, TableStream | None], metrics_long: bool,
              jobs: int | None, progress: Any) -> tuple[int, int]:
    """Every report read (in ``jobs`` workers), its rows added to ``launches``: (reports, metric rows).

    The long table's units come from ncu_report (``ncuflow.read.units``), which keeps, per
    process, the unit it first returned for a metric name: a derived metric read after
    another report's can carry that report's unit (seen on the corpus: "byte" for a "%"
    breakdown). It is therefore read with a fresh worker per report.
    """
    from ncuflow.read.pool import map_reports

    launches, findings = tables
    exported = metric_rows = 0
    done: ExportedReport
    for done in map_reports(export_one_report, tasks, jobs=jobs, progress=progress, fresh_workers=metrics_long,
                            preload=worker_modules(metrics_long)):
        for line in done.warnings:
            warnings.warn(EscalationWarning(line), stacklevel=3)
        exported += 1
        launches.extend(done.rows)
        if findings is not None:
            findings.extend(done.finding_rows)
        metric_rows += done.metric_rows
    return exported, metric_rows


def export_reports(
    found: Sources | Sequence[Path],
    output: Path,
    *,
    metrics_long: bool = False,
    progress: Any = None,
    chunk_rows: int = 200_000,
    jobs: int | None = None,
    options: ExportOptions | None = None,
    findings: Path | None = None,
) -> ExportResult:
    """Read every source (store run or report), each once, then write the tables. Nothing is
    written if any report fails; a damaged run (named in ``found.notes``) has no rows.
    ``options`` holds the threshold and selection; ``findings`` names the findings table, written
    with the others (NVIDIA's findings are read only then).

    Each report is read in ``jobs`` worker processes (see ``ncuflow.read.pool``; None: in
    this process). The launches table is written as the rows come (``ncuflow.output.stream``),
    to a temporary file beside the output; the long metrics table goes to temporary parquet
    parts of at most ``chunk_rows`` rows, assembled in input order (streaming) at the end.
    Both are renamed into place together at the end. ``progress`` is called with (report
    index, report path) as each report is done.
    """
    import tempfile

    if not isinstance(found, Sources):  # paths: what they hold, as every reader finds it
        found = sources(list(found))
    options = options or ExportOptions()
    metrics_path = _prepare_outputs(output, metrics_long, found.reports)
    if findings is not None:
        _prepare_findings(findings, output, found.reports)
        options = replace(options, read=replace(options.read, findings=True))
    export_id = uuid.uuid4().hex
    targets = [path for path in (metrics_path, findings) if path is not None] + [output]
    csv = output_format(output) == "csv"
    with os_errors_as_messages(output.parent), \
            tempfile.TemporaryDirectory(prefix=f"{TMP_MARK}{owner_tag()}-parts-", dir=output.parent) as folder, \
            atomic_paths(targets) as temporaries:  # on any failure the previous pair is left as it was
        parts = Path(folder)
        tasks = [(source.report, source.record, parts.resolve(), index, metrics_long, chunk_rows, options)
                 for index, source in enumerate(found.items)]
        with table_stream(temporaries[-1], launches_schema(), batch=LAUNCH_BATCH_ROWS,
                          row_group_rows=LAUNCH_ROW_GROUP_ROWS, metadata=_metadata("launches", export_id),
                          csv=csv) as launches, _findings_stream(findings, temporaries, export_id) as found_rows:
            try:
                exported, metric_rows = _read_all(tasks, (launches, found_rows), metrics_long, jobs, progress)
            except Exception as error:  # a worker's parquet part on a full disk comes back as polars' error
                raise as_output_error(error, output) from None
        if metrics_path is not None:
            _assemble(parts, "metrics", METRICS_SCHEMA, temporaries[0], metadata=_metadata("metrics", export_id),
                      row_group_rows=METRIC_ROW_GROUP_ROWS)
    finding_count = found_rows.rows if found_rows is not None else None
    if metrics_path is None and not csv:
        _warn_if_stale_metrics(output)
    return ExportResult(
        launches_path=output,
        launch_count=launches.rows,
        report_count=exported,
        metrics_path=metrics_path,
        metric_rows=metric_rows if metrics_long else None,
        findings_path=findings,
        finding_rows=finding_count,
    )
