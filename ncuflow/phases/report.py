"""Per-file results, the whole-server rows of DP ranks, and their JSON form. Pure.

The text tables are in ``ncuflow.phases.text``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any, get_type_hints

from ncuflow.phases.harness import HarnessCheck
from ncuflow.phases.model import (
    AmortizationResult,
    AmortizationRun,
    BenchSummary,
    ConfigGap,
    Distribution,
    PhaseKind,
    PhaseSpan,
    Reconciliation,
    RunAnalysis,
    Segment,
)
from ncuflow.phases.model.capabilities import Capabilities
from ncuflow.phases.model.results import WARMUP_PREFIX, phase_field, warmup_field
from ncuflow.phases.model.session import SessionSummary
from ncuflow.phases.model.settings import ServerSetting
from ncuflow.phases.selection import RunSelection
from ncuflow.phases.shapes import FileShapes
from ncuflow.phases.study import FileStudy

# 1: before issue 32 (no version key); 2: + schema_version, format_name, capabilities,
# session, runs_total, runs_index; runs may be a selection of a long session's runs
# (``--runs``); overload, arrival and prefill keys. 3 (issue 40): each segment has
# and each run ``phases`` (one object per phase: span, seconds, token_s, tokens,
# weighted_s), the model's records; their flat keys (``steady_token_s``, ``drain_tokens`` …)
# are kept, each read from ``phases`` by the rule ``<phase><suffix>`` (``PHASE_FIELDS``), a
# run's other keys from its part records (``_RUN_PART_OF_KEY``) and ``warmup_<field>`` from
# the warm-up's split (``warmup_field``);
# and (issue 42) ``shapes`` (the shapes each run and stretch served, the server's settings),
# ``harness`` (the timed window outside steady decode) and ``sweep``, null where not made.
# 4: each file's ``settings`` (the server settings the model used: value, source, line,
# given); the top-level ``decode_log_interval`` stays the option's value (or its default),
# one top-level key per ``FormatOption`` row.
# Every older key keeps its name and type.
SCHEMA_VERSION = 4


@dataclass(frozen=True)
class ServerRow:
    """The whole server across its DP-attention ranks over one stretch of time: the runs of
    different ranks that overlap in time (at most one per rank). Batch sizes add up; ranks
    step in lockstep, so the server's per-token time is the slowest rank's."""

    run_index: int  # the row's number, in time order
    ranks: int  # ranks with a run in this stretch
    start_s: float | None
    peak_batch: int  # the sum of those runs' own peaks
    steady_batch: float | None
    steady_token_s: float | None  # the largest of the ranks' steady per-token times
    rank_spread: float | None  # (largest − smallest) / smallest of them
    rank_names: tuple[str, ...] = ()
    run_labels: tuple[str, ...] = ()
    of_ranks: int = 0  # ranks in the log


def _overlap_groups(runs: Sequence[RunAnalysis]) -> list[list[RunAnalysis]]:
    """Runs of different ranks paired by time: a run joins the current group when it
    starts before the group's last line and its rank has no run in the group yet."""
    timed = sorted(
        (r for r in runs if r.identity.rank and r.shape.start_s is not None and r.shape.end_s is not None),
        key=lambda r: (r.shape.start_s or 0.0, r.identity.rank or ""),
    )
    groups: list[list[RunAnalysis]] = []
    group_end = -float("inf")
    for run in timed:
        assert run.shape.start_s is not None and run.shape.end_s is not None
        if groups and run.shape.start_s <= group_end and all(r.identity.rank != run.identity.rank for r in groups[-1]):
            groups[-1].append(run)
            group_end = max(group_end, run.shape.end_s)
        else:
            groups.append([run])
            group_end = run.shape.end_s
    return groups


def server_rows(runs: Sequence[RunAnalysis]) -> tuple[ServerRow, ...]:
    ranks = sorted({r.identity.rank for r in runs if r.identity.rank})
    if len(ranks) < 2:
        return ()
    rows = []
    for index, same in enumerate(_overlap_groups(runs), start=1):
        medians = [r.timing.headline_token_s for r in same if r.timing.headline_token_s is not None]
        batches = [r.shape.steady_batch for r in same if r.shape.steady_batch is not None]
        complete = len(medians) == len(same)
        rows.append(
            ServerRow(
                run_index=index,
                ranks=len(same),
                start_s=min(r.shape.start_s for r in same if r.shape.start_s is not None),
                peak_batch=sum(r.shape.peak_batch or 0 for r in same),
                steady_batch=sum(batches) if len(batches) == len(same) else None,
                steady_token_s=max(medians) if complete else None,
                rank_spread=(max(medians) - min(medians)) / min(medians) if complete else None,
                rank_names=tuple(r.identity.rank or "" for r in same),
                run_labels=tuple(r.identity.run_label for r in same),
                of_ranks=len(ranks),
            )
        )
    return tuple(rows)


@dataclass(frozen=True)
class FileReport:
    path: str
    source_format: str
    config: str
    ranks: tuple[str, ...]
    clock_origin: str
    time_resolution_s: float | None
    runs: tuple[RunAnalysis, ...]
    bench: BenchSummary | None
    bench_reconciliation: Reconciliation | None
    file_notes: tuple[str, ...]
    server_rows: tuple[ServerRow, ...] = ()
    capabilities: Capabilities | None = None  # a server log's format; None for request traces
    session: SessionSummary | None = None  # every run of the file together
    study: FileStudy | None = None  # a server log's served shapes and harness check (phases.study)
    settings: tuple[ServerSetting, ...] = ()  # the server settings the model used, with their source

    @property
    def shapes(self) -> FileShapes | None:
        return self.study.shapes if self.study is not None else None


@dataclass(frozen=True)
class PhasesReport:
    files: tuple[FileReport, ...]
    amortization: tuple[AmortizationResult, ...]
    gaps: tuple[ConfigGap, ...]
    # each format option's value as given, else its default, by name (JSON's top-level keys,
    # e.g. ``decode_log_interval``); the value a file used is in its ``settings``
    options: Mapping[str, int] = field(default_factory=dict)


def amortization_runs(files: Sequence[FileReport]) -> list[AmortizationRun]:
    runs = []
    for report in files:
        for run in report.runs:
            rec = run.tokens.reconciliation
            if rec is None or run.phase(PhaseKind.STEADY).token_s is None:
                continue
            runs.append(
                AmortizationRun(
                    label=f"{Path(report.path).name} {run.identity.run_label}",
                    config=report.config,
                    output_tokens=rec.output_tokens,
                    reported_tpot_s=rec.reported_tpot_s,
                    steady_token_s=rec.steady_term_s,
                )
            )
    return runs


# ----------------------------------------------------------------------------- JSON


# the fields of a Segment in its JSON form, in this order
_SEGMENT_JSON_KEYS: tuple[str, ...] = (
    "index",
    "level",
    "start_s",
    "end_s",
    "ramp",
    "warmup",
    "warmup_excess_s",
    "plateau",
    "steady",
    "steady_s",
    "mixed_s",
    "drain",
    "steady_token_s",
    "mixed_token_s",
    "drain_token_s",
    "steady_tokens",
    "mixed_tokens",
    "drain_tokens",
    "steady_weighted_s",
    "mixed_weighted_s",
    "drain_weighted_s",
    "accept_len",
    "kind",
    "rise",
    "burst_token_s",
    "burst_tokens",
    "burst_weighted_s",
    "headline_token_s",
    "headline_method",
    "below_floor",
    "warmup_prefill_s",
    "warmup_prefill_tokens",
    "warmup_decode_s",
    "overload_s",
    "overload_token_s",
    "overload_tokens",
    "overload_weighted_s",
    "queued_max",
    "kv_usage_max",
    "preempted",
    "preemption_inferred",
    "harness_tpot_s",  # a wave of a request trace (docs/phases.md): its TPOT and what explains it
    "reconciliation",
)
_SEGMENT_OWN_FIELDS = frozenset(f.name for f in fields(Segment)) | {"harness_tpot_s"}
# a run's JSON key that is a field of one of its part records (identity, shape, timing …):
# that part's name, found from the record's own fields
_RUN_PART_OF_KEY: dict[str, str] = {
    f.name: part
    for part, record in get_type_hints(RunAnalysis).items()
    if is_dataclass(record)
    for f in fields(record)
}


def _plain(value: Any) -> Any:
    """A result value as JSON-ready data (dicts, lists, numbers, strings)."""
    if isinstance(value, Distribution):
        return _distribution_dict(value)
    if isinstance(value, PhaseSpan):
        return {"start_s": value.start_s, "end_s": value.end_s, "duration_s": value.duration_s}
    if isinstance(value, Segment):
        return _segment_dict(value)
    if isinstance(value, ServerRow):
        row = dict(value.__dict__)
        row["rank_names"], row["run_labels"] = list(value.rank_names), list(value.run_labels)
        return row
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if isinstance(value, Reconciliation):
        return _reconciliation_dict(value)
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.value
    return value


def _shapes_dict(shapes: FileShapes | None, shown: set[str]) -> dict[str, Any] | None:
    """The shapes of the runs shown (as ``runs`` is), the file's settings whole."""
    if shapes is None:
        return None
    data: dict[str, Any] = _plain(replace(shapes, runs=tuple(r for r in shapes.runs if r.run_label in shown)))
    data["runs_total"] = len(shapes.runs)
    return data


def _harness_dict(check: HarnessCheck | None) -> dict[str, Any] | None:
    if check is None:
        return None
    return {**_plain(check), "outside": dict(check.outside), "line": check.line()}


def _record_value(record: Segment | RunAnalysis, key: str) -> Any:
    """A JSON key of a segment or run: a segment's own field or a run's part's field, else
    a phase's field by the key's rule (``phase_field``), else a field of the warm-up's
    split (``warmup_<field>``)."""
    if isinstance(record, Segment) and key in _SEGMENT_OWN_FIELDS:
        return getattr(record, key)
    if isinstance(record, RunAnalysis) and key in _RUN_PART_OF_KEY:
        return getattr(getattr(record, _RUN_PART_OF_KEY[key]), key)
    known = phase_field(key)
    if known is not None:
        return getattr(record.phase(known[0]), known[1])
    if key.startswith(WARMUP_PREFIX):
        split = record.warmup_split if isinstance(record, Segment) else record.shape.warmup_split
        return warmup_field(split, key.removeprefix(WARMUP_PREFIX))
    raise KeyError(key)


def _record_dict(record: Segment | RunAnalysis, keys: Sequence[str]) -> dict[str, Any]:
    data = {key: _plain(_record_value(record, key)) for key in keys}
    data["phases"] = {kind.value: _plain(stats) for kind, stats in record.phases.items()}
    return data


def _segment_dict(segment: Segment) -> dict[str, Any]:
    return _record_dict(segment, _SEGMENT_JSON_KEYS)


def _distribution_dict(value: Distribution) -> dict[str, Any]:
    return {
        "count": value.count,
        "median": value.median,
        "p10": value.p10,
        "p90": value.p90,
        "min": value.minimum,
        "max": value.maximum,
    }


def _reconciliation_dict(value: Reconciliation) -> dict[str, Any]:
    return {
        "reported": value.reported_label,
        "reported_tpot_s": value.reported_tpot_s,
        "steady_term_s": value.steady_term_s,
        "ramp_s": value.ramp_s,
        "ramp_term_s": value.ramp_term_s,
        "output_tokens": value.output_tokens,
        "predicted_tpot_s": value.predicted_tpot_s,
        "steady_share": value.steady_share,
        "ramp_share": value.ramp_share,
        "unexplained_share": value.residual_share,
        "terms": [_plain(term) for term in value.terms],
        "requests": value.requests,
    }


def _file_dict(f: FileReport, selection: RunSelection) -> dict[str, Any]:
    shown = selection.pick(f.runs)
    return {
        "path": f.path,
        "format": f.source_format,
        "format_name": f.capabilities.name if f.capabilities is not None else None,
        "capabilities": _plain(f.capabilities),
        "config": f.config,
        "ranks": list(f.ranks),
        "clock_origin": f.clock_origin,
        "time_resolution_s": f.time_resolution_s,
        "bench": None if f.bench is None else f.bench.__dict__,
        "bench_reconciliation": _plain(f.bench_reconciliation),
        "notes": list(f.file_notes),
        "settings": {s.name: {k: v for k, v in _plain(s).items() if k != "name"} for s in f.settings},
        "runs": [run_to_dict(r) for r in shown],
        "runs_total": len(f.runs),
        "runs_index": runs_index(f.runs),
        "session": _plain(f.session),
        "server_rows": [_plain(row) for row in f.server_rows],
        "shapes": _shapes_dict(f.shapes, {r.identity.run_label for r in shown}),
        "harness": _harness_dict(f.study.harness if f.study is not None else None),
    }


def runs_index(runs: Sequence[RunAnalysis]) -> dict[str, list[Any]]:
    """Every run of a file in a few columns (bounded: the runs ncuflow keeps)."""
    return {
        "run_label": [r.identity.run_label for r in runs],
        "run_index": [r.identity.run_index for r in runs],
        "start_s": [r.shape.start_s for r in runs],
        "end_s": [r.shape.end_s for r in runs],
        "peak_batch": [r.shape.peak_batch for r in runs],
        "headline_token_s": [r.timing.headline_token_s for r in runs],
        "overload_s": [r.phase(PhaseKind.OVERLOAD).seconds for r in runs],
    }


def run_to_dict(run: RunAnalysis) -> dict[str, Any]:
    keys = [
        "run_label",
        "run_index",
        "rank",
        "source_format",
        "start_s",
        "end_s",
        "peak_batch",
        "steady_batch",
        "ramp",
        "steady",
        "mixed",
        "drain",
        "admission_span_s",
        "mean_admission_wait_s",
        "requests_admitted",
        "ttft_s",
        "steady_token_s",
        "steady_step_s",
        "step_method",
        "output_tokens",
        "output_tokens_source",
        "harness_tpot_s",
        "mean_request_tpot_s",
        "reconciliation",
        "warmup",
        "warmup_excess_s",
        "mixed_token_s",
        "drain_token_s",
        "accept_len",
        "requests_total",
        "total_admission_wait_s",
        "stated_concurrency",
        "main_segment",
        "headline_token_s",
        "headline_method",
        "lone_request_token_s",
        "server_requests",
        "warmup_prefill_s",
        "arrivals",
        "overload",
        "overload_s",
        "overload_token_s",
        "overload_weighted_s",
        "preempted",
        "queue_causes",
    ]
    data = _record_dict(run, keys)
    data["segments"] = [_plain(s) for s in run.shape.segments]
    data["cannot"] = list(run.findings.cannot)
    data["notes"] = list(run.findings.notes)
    return data


def report_to_dict(report: PhasesReport, selection: RunSelection | None = None) -> dict[str, Any]:
    """The report as JSON-ready data (``SCHEMA_VERSION``); a long session's ``runs`` are
    those ``selection`` picks, every run is in ``runs_index`` (columns)."""
    selection = selection or RunSelection()
    return {
        "schema_version": SCHEMA_VERSION,
        **report.options,
        "files": [_file_dict(f, selection) for f in report.files],
        "amortization": [
            {
                "config": a.config,
                "verdict": a.verdict,
                "explanation": a.explanation,
                "fixed_cost_s": a.fixed_cost_s,
                "per_token_cost_s": a.per_token_cost_s,
                "runs": [
                    {
                        "label": r.label,
                        "output_tokens": r.output_tokens,
                        "reported_tpot_s": r.reported_tpot_s,
                        "steady_token_s": r.steady_token_s,
                    }
                    for r in a.runs
                ],
            }
            for a in report.amortization
        ],
        "gaps": [
            {
                "output_tokens": g.output_tokens,
                "configs": list(g.configs),
                "reported_gap": g.reported_gap,
                "steady_gap": g.steady_gap,
            }
            for g in report.gaps
        ],
    }
