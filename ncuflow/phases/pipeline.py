"""From input paths to a ``PhasesReport``: load (I/O), then the pure analysis."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ncuflow.phases import TraceError
from ncuflow.phases.detect import Trace, load_traces
from ncuflow.phases.model import (
    AmortizationResult,
    BenchSummary,
    Reconciliation,
    RequestTrace,
    RunAnalysis,
    ServerTrace,
    amortization_test,
    analyse_request_trace,
    analyse_server_trace,
    closed_loop_reconciliation,
    config_gaps,
)
from ncuflow.phases.model.capabilities import STATS_LINE, Capabilities
from ncuflow.phases.model.floor import flag_below_floor
from ncuflow.phases.model.results import PhaseKind
from ncuflow.phases.model.session import summarise_session
from ncuflow.phases.model.settings import ServerSetting
from ncuflow.phases.model.traces import ServiceCounts
from ncuflow.phases.parse import registry
from ncuflow.phases.parse.format import LogReading
from ncuflow.phases.report import (
    FileReport,
    PhasesReport,
    ServerRow,
    amortization_runs,
    server_rows,
)
from ncuflow.phases.study import StudyInputs, study_of_file


def per_input(
    values: Sequence[str] | Sequence[int], count: int, option: str
) -> list[str | int | None]:
    """One value for every input (repeat a single value), or exactly one per input."""
    if not values:
        return [None] * count
    if len(values) == 1:
        return [values[0]] * count
    if len(values) != count:
        raise TraceError(
            f"{option} was given {len(values)} times for {count} inputs.",
            f"{option} takes either one value for all inputs or one value per input, in order.",
            f"Give {option} once, or {count} times.",
        )
    return list(values)


def analyse_file(
    path: Path,
    *,
    config: str,
    reading: LogReading,
    batch_tolerance: float,
    output_tokens: int | None,
    study: StudyInputs | None = None,
) -> FileReport:
    traces = load_traces(path, reading)
    runs, notes = _analyse_traces(
        traces,
        batch_tolerance=batch_tolerance,
        output_tokens=output_tokens,
    )
    header = _file_header(traces)
    bench = header.bench
    runs = flag_below_floor(runs)
    bench_rec = closed_loop_reconciliation(runs, bench) if bench is not None else None
    rows = server_rows(runs)
    words = header.capabilities.stats_line if header.capabilities is not None else STATS_LINE
    notes.extend(_bench_notes(runs, bench, bench_rec, rows, words))
    return FileReport(
        path=str(path),
        source_format=header.source_format,
        config=config,
        ranks=header.ranks,
        clock_origin=header.clock_origin,
        time_resolution_s=header.time_resolution_s,
        runs=tuple(runs),
        bench=bench,
        bench_reconciliation=bench_rec,
        file_notes=tuple(notes),
        server_rows=rows,
        capabilities=header.capabilities,
        session=summarise_session(runs, header.service),
        study=study_of_file(path, traces, runs, study),
        settings=header.settings,
    )


@dataclass(frozen=True)
class _FileHeader:
    """What a file's traces say about the file as a whole (the last trace that says it wins)."""

    source_format: str
    ranks: tuple[str, ...]
    clock_origin: str
    time_resolution_s: float | None
    bench: BenchSummary | None
    capabilities: Capabilities | None
    service: ServiceCounts
    settings: tuple[ServerSetting, ...]


def _file_header(traces: Sequence[Trace]) -> _FileHeader:
    bench = None
    resolution: float | None = None
    ranks: list[str] = []
    clock = ""
    source_format = ""
    capabilities = None
    service = ServiceCounts()
    settings: tuple[ServerSetting, ...] = ()
    for trace in traces:
        clock = trace.clock_origin
        source_format = _source_format(trace)
        if isinstance(trace, ServerTrace):
            capabilities = trace.capabilities
            service = trace.service
            bench = trace.bench
            resolution = trace.time_resolution_s
            settings = (trace.steps_per_line,) if trace.steps_per_line is not None else ()
            if trace.rank:
                ranks.append(trace.rank)
    return _FileHeader(source_format, tuple(ranks), clock, resolution, bench, capabilities, service, settings)


def _source_format(trace: Trace) -> str:
    if isinstance(trace, ServerTrace):
        return trace.capabilities.title
    found = registry.format_named(trace.source_format)
    return found.title if found is not None else trace.source_format


def _analyse_traces(
    traces: Sequence[Trace],
    *,
    batch_tolerance: float,
    output_tokens: int | None,
) -> tuple[list[RunAnalysis], list[str]]:
    """The runs of every trace of a file, and the server logs' notes (each once)."""
    admissions = _admissions_by_rank(traces)
    runs: list[RunAnalysis] = []
    notes: list[str] = []
    for trace in traces:
        if isinstance(trace, ServerTrace):
            runs.extend(
                analyse_server_trace(
                    trace,
                    batch_tolerance=batch_tolerance,
                    output_tokens=output_tokens,
                    lockstep_admissions=_other_ranks(admissions, trace.rank),
                )
            )
            for event in trace.events:
                if event.kind in ("malformed", "note") and event.text not in notes:
                    notes.append(event.text)
        else:
            assert isinstance(trace, RequestTrace)
            notes.extend(note for note in trace.notes if note not in notes)
            runs.append(
                analyse_request_trace(
                    trace,
                    batch_tolerance=batch_tolerance,
                    output_tokens=output_tokens,
                    run_index=len(runs) + 1,
                )
            )
    return runs, notes


def _bench_notes(
    runs: Sequence[RunAnalysis],
    bench: BenchSummary | None,
    bench_rec: Reconciliation | None,
    rows: Sequence[ServerRow],
    stats_line: str,
) -> list[str]:
    """What the bench_serving result block adds: a TPOT left unreconciled, DP concurrency
    (``stats_line``: what the format calls its statistics lines)."""
    notes = []
    if bench is not None and bench.mean_tpot_ms is not None and bench_rec is None:
        notes.append(
            f"the bench_serving result block (line {bench.line}) reports mean TPOT "
            f"{bench.mean_tpot_ms:.2f} ms, but no run has both a steady phase and admission "
            "times to reconcile it with"
        )
    if rows and bench is not None and bench.max_concurrency is not None:
        notes.append(dp_concurrency_note(runs, bench.max_concurrency, stats_line))
    return notes


def _admissions_by_rank(traces: Sequence[Trace]) -> dict[str, tuple[float, ...]]:
    """Prefill times of every DP-attention rank of an SGLang log (ranks step in lockstep)."""
    return {
        trace.rank: tuple(s.time_s for s in trace.samples if s.kind == "prefill")
        for trace in traces
        if isinstance(trace, ServerTrace) and trace.capabilities.prefill_lines and trace.rank
    }


def _other_ranks(admissions: dict[str, tuple[float, ...]], rank: str | None) -> tuple[float, ...]:
    if rank is None or not rank.startswith("DP"):
        return ()
    return tuple(sorted(t for other, times in admissions.items() if other != rank for t in times))


def dp_concurrency_note(runs: Sequence[RunAnalysis], stated: int, stats_line: str) -> str:
    """The stated max concurrency against the DP ranks' peaks (from the statistics lines)."""
    ranks = sorted({r.identity.rank for r in runs if r.identity.rank})
    peaks: dict[str, int] = {}
    for r in runs:
        if r.identity.rank and r.phase(PhaseKind.STEADY).span is not None:
            peaks[r.identity.rank] = max(peaks.get(r.identity.rank, 0), r.shape.peak_batch or 0)
    per_rank = sorted(set(peaks.values()))
    if len(per_rank) == 1 and per_rank[0] > 0:
        peak = per_rank[0]
        if peak * len(ranks) == stated:
            return f"peak batch {peak} per rank × {len(ranks)} DP ranks = the stated max concurrency {stated}"
        if stated % peak == 0:
            return (
                f"peak batch {peak} per rank (from {stats_line}s) × {stated // peak} ranks = the stated "
                f"max concurrency {stated}: the log holds {len(ranks)} of those {stated // peak} DP ranks"
            )
    total = sum(peaks.values())
    return (
        f"the DP ranks in the log peak at {total} requests together (from {stats_line}s); the "
        f"stated max concurrency is {stated}"
    )


def build_report(
    paths: Sequence[Path],
    *,
    labels: Sequence[str] = (),
    output_tokens: Sequence[int] = (),
    reading: LogReading | None = None,
    batch_tolerance: float = 0.05,
    study: StudyInputs | None = None,
) -> PhasesReport:
    reading = reading or LogReading()
    given = reading.given
    label_for = per_input(labels, len(paths), "--label")
    tokens_for = per_input(output_tokens, len(paths), "--output-tokens")
    files = []
    for path, label, tokens in zip(paths, label_for, tokens_for, strict=True):
        files.append(
            analyse_file(
                path,
                config=str(label) if label is not None else path.stem,
                reading=reading,
                batch_tolerance=batch_tolerance,
                output_tokens=int(tokens) if tokens is not None else None,
                study=study,
            )
        )
    runs = amortization_runs(files)
    amortization: tuple[AmortizationResult, ...] = ()
    if len({r.output_tokens for r in runs}) >= 2:
        amortization = amortization_test(runs)
    return PhasesReport(
        files=tuple(files),
        amortization=amortization,
        gaps=config_gaps(runs),
        options={o.name: given.get(o.name, o.default) for _, o in registry.format_options()},
    )
