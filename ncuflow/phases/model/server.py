"""Server logs (SGLang, vLLM): split into runs, and each run into segments and phases.

``split_server_runs`` cuts a scheduler's lines at idle points; ``levels`` finds the shape of
a run (its plateaus, tails and bursts) and ``segments`` builds one segment per plateau or
burst; this module turns them into one ``RunAnalysis`` per run, whose run-level phases are
those of the run's *main segment* (its longest level by time with a steady stretch, else its
longest level; never a burst), from the parts each concept's module gives: ``run_timing``
(the per-token time and how it was derived), ``run_tokens`` (output length and harness
reconciliation), ``server_requests`` (the server's own per-request and arrival lines),
``overload``, ``wind_down`` and ``run_findings`` (what the run says and cannot say).
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence

from ncuflow.phases.model.arrivals import arrival_windows, run_arrivals
from ncuflow.phases.model.intervals import DecodeInterval, decode_intervals, is_decode
from ncuflow.phases.model.levels import TAIL, Item, run_shape
from ncuflow.phases.model.overload import mark_overload, overload_notes, run_overload
from ncuflow.phases.model.prefill import prefill_rate
from ncuflow.phases.model.results import (
    NO_PHASE,
    PhaseKind,
    PhaseSpan,
    PhaseStats,
    RunAdmission,
    RunAnalysis,
    RunFindings,
    RunIdentity,
    RunPlotData,
    RunShape,
    Segment,
    SegmentKind,
    ServerLogFacts,
    TimelinePoint,
    assemble_run,
)
from ncuflow.phases.model.run_findings import level_notes, no_steady, run_findings, shape_notes
from ncuflow.phases.model.run_timing import timing_of_run
from ncuflow.phases.model.run_tokens import run_tokens, with_reconciliation
from ncuflow.phases.model.runs import RunSettings, ServerRun, aborted, peak_batch, split_server_runs
from ncuflow.phases.model.segments import SegmentInputs, build_segments
from ncuflow.phases.model.server_requests import (
    arrival_notes,
    summarise_requests,
    with_request_timings,
)
from ncuflow.phases.model.traces import BatchSample, ServerTrace
from ncuflow.phases.model.wind_down import wind_down_notes, wind_downs


def analyse_server_trace(
    trace: ServerTrace,
    *,
    batch_tolerance: float = 0.05,
    output_tokens: int | None = None,
    run_label_prefix: str = "",
    lockstep_admissions: Sequence[float] = (),
) -> tuple[RunAnalysis, ...]:
    """One ``RunAnalysis`` per run of one scheduler. ``lockstep_admissions``: admission
    times of the other DP-attention ranks, which stall this rank too (ranks step together)."""
    runs = split_server_runs(trace)
    bench = trace.bench
    tokens, source = output_tokens, "--output-tokens" if output_tokens else ""
    if tokens is None and bench is not None and bench.output_tokens is not None:
        tokens, source = bench.output_tokens, bench.output_tokens_source
    settings = RunSettings(
        batch_tolerance=batch_tolerance,
        output_tokens=tokens,
        output_tokens_source=source,
        retraction_times=trace.retraction_times_s,
        lockstep_admissions=tuple(lockstep_admissions),
        stated_concurrency=bench.max_concurrency
        if bench is not None and trace.rank is None
        else None,
        run_label_prefix=run_label_prefix,
        several_runs=len(runs) > 1,
        prefill_rate=prefill_rate(trace.samples, trace.time_resolution_s),
    )
    windows = arrival_windows([run.samples[-1].time_s for run in runs])
    return tuple(
        _analyse_server_run(trace, run, settings, window) for run, window in zip(runs, windows, strict=True)
    )


def _analyse_server_run(
    trace: ServerTrace, run: ServerRun, settings: RunSettings, arrival_window: tuple[float, float]
) -> RunAnalysis:
    samples = run.samples
    prefills = [s for s in samples if s.kind == "prefill"]
    decodes, intervals, items, segments = _run_segments(trace, run, settings)
    main = _main_segment(segments)
    notes, cannot = run_findings(trace, run, settings, decodes, prefills, segments)
    notes.extend(shape_notes(trace.capabilities, segments, [i for i in items if i.kind == TAIL], decodes))
    notes.extend(wind_down_notes(wind_downs(items, decodes, intervals)))
    peak = peak_batch(samples)
    overload, stretches = run_overload(segments, intervals, peak)
    notes.extend(overload_notes(trace.capabilities, segments, overload, stretches))
    admission, readmitted = _ramp_admissions(samples, main) if main else (_admitted(samples), 0)
    requests = summarise_requests(trace.requests, run.window)
    timing = timing_of_run(trace, samples, settings, main, intervals, notes, cannot)
    kind, reasons = no_steady(trace, run, main, segments, len(decodes), settings)
    cannot.extend(reasons)
    timing = with_request_timings(trace.capabilities, timing, requests, intervals, notes, cannot)
    arrivals = None
    if trace.arrivals is not None:
        pushed = next((i.start_s for i in intervals if i.preempted or i.retracted), None)
        arrivals = run_arrivals(trace.arrivals, arrival_window, samples, trace.capabilities, pushed)
        notes.extend(arrival_notes(arrivals, cannot))
    notes.extend(level_notes(trace, decodes, settings, main, peak, readmitted))
    closed_loop = readmitted > 0 or len(segments) > 1
    tokens = run_tokens(trace.capabilities, settings, main, samples, closed_loop, notes, cannot, requests)
    phases = _run_phase_records(main, readmitted, stretches)
    tokens = with_reconciliation(tokens, main, admission, timing, phases[PhaseKind.STEADY].token_s)
    label = f"{settings.run_label_prefix}{'' if trace.rank is None else trace.rank + ' '}run {run.index}"
    return assemble_run(
        RunIdentity(
            trace.path,
            f"{trace.capabilities.name} server log",
            run.index,
            label.strip(),
            trace.rank,
            trace.clock_origin,
        ),
        _run_shape(samples, peak, main, segments, intervals),
        admission,
        timing,
        tokens,
        _plot_data(run, intervals, settings.retraction_times),
        ServerLogFacts(settings.stated_concurrency, kind, requests, arrivals),
        overload,
        phases=phases,
        findings=RunFindings(tuple(cannot), tuple(notes)),
    )


def _run_segments(
    trace: ServerTrace, run: ServerRun, settings: RunSettings
) -> tuple[tuple[BatchSample, ...], list[DecodeInterval], list[Item], tuple[Segment, ...]]:
    """(the run's Decode/stats lines, its decode intervals, its shape, its segments)."""
    samples = run.samples
    intervals = decode_intervals(
        samples,
        steps_per_line=trace.steps_between_lines,
        retraction_times=settings.retraction_times,
        lockstep_admissions=settings.lockstep_admissions,
        retracted_counts=trace.retracted_requests,
    )
    intervals, overload = mark_overload(intervals, infer_preemptions=not trace.capabilities.preemption_lines)
    inputs = SegmentInputs.of(
        samples,
        intervals,
        resolution_s=trace.time_resolution_s,
        tolerance=settings.batch_tolerance,
        steps_per_line=trace.steps_between_lines,
        prefill_rate=settings.prefill_rate,
    )
    items = run_shape(
        inputs.decodes,
        intervals,
        band=2 * settings.batch_tolerance,
        resolution_s=trace.time_resolution_s,
        aborted=aborted(run),
        retractions=run.retractions > 0,
        overload=overload,
    )
    return inputs.decodes, intervals, items, build_segments(inputs, items)


def _main_segment(segments: Sequence[Segment]) -> Segment | None:
    """The run's headline: its longest level by time (the highest of equally long ones),
    among those with a steady stretch where any has one; never a burst, an overload
    stretch or a wind-down step (no segments)."""
    plateaus = [s for s in segments if s.kind is SegmentKind.PLATEAU]
    steady = [s for s in plateaus if s.phase(PhaseKind.STEADY).span is not None and s.phase(PhaseKind.STEADY).token_s is not None]
    pool = steady or plateaus
    return max(pool, key=lambda s: (s.plateau.duration_s, s.level)) if pool else None


def _ramp_arrivals(
    samples: Sequence[BatchSample], start: float, first_on_plateau: int
) -> list[tuple[float, int]]:
    """(time, requests) admitted during the ramp: Prefill lines, or on a PD decode node
    (no Prefill lines) the increases of #running-req between Decode lines."""
    ramp = [s for s in samples[: first_on_plateau + 1] if s.time_s >= start]
    prefills = [(s.time_s, s.admitted_seqs) for s in ramp[:-1] if s.kind == "prefill"]
    if prefills or not any(s.incoming is not None for s in ramp):
        return prefills
    arrivals, seen = [], 0
    for sample in ramp:
        if is_decode(sample) and sample.running > seen:
            arrivals.append((sample.time_s, sample.running - seen))
            seen = sample.running
    return arrivals


def _ramp_admissions(samples: Sequence[BatchSample], segment: Segment) -> tuple[RunAdmission, int]:
    """Admission span and waits of the segment's ramp; and readmissions on its plateau."""
    start = segment.ramp.start_s if segment.ramp is not None else segment.plateau.start_s
    first_on_plateau = next(
        i for i, s in enumerate(samples) if is_decode(s) and s.time_s >= segment.plateau.start_s
    )
    arrivals = _ramp_arrivals(samples, start, first_on_plateau)
    later = sum(
        s.admitted_seqs
        for s in samples[first_on_plateau:]
        if s.kind == "prefill" and s.time_s <= segment.plateau.end_s
    )
    total = sum(s.admitted_seqs for s in samples if s.kind == "prefill")
    admitted = sum(count for _, count in arrivals)
    if not arrivals or not admitted:
        return RunAdmission(requests_total=total or None), later
    last = arrivals[-1][0]
    waits = sum(count * (last - time) for time, count in arrivals)
    return (
        RunAdmission(
            admission_span_s=last - arrivals[0][0],
            mean_admission_wait_s=waits / admitted,
            requests_admitted=admitted,
            total_admission_wait_s=waits,
            requests_total=total or None,
        ),
        later,
    )


def _admitted(samples: Sequence[BatchSample]) -> RunAdmission:
    """A run with no plateau: only how many requests its Prefill lines admitted."""
    total = sum(s.admitted_seqs for s in samples if s.kind == "prefill")
    return RunAdmission(requests_total=total or None)


def _run_shape(
    samples: Sequence[BatchSample],
    peak: int,
    main: Segment | None,
    segments: tuple[Segment, ...],
    intervals: Sequence[DecodeInterval],
) -> RunShape:
    """The run's extent and batch, and its main segment's (its longest level) warm-up."""
    if main is None:
        return RunShape(samples[0].time_s, samples[-1].time_s, peak, segments=segments)
    steady = main.phase(PhaseKind.STEADY).span
    return RunShape(
        start_s=samples[0].time_s,
        end_s=samples[-1].time_s,
        peak_batch=peak,
        steady_batch=_steady_batch(main, intervals) if steady is not None else None,
        warmup=main.warmup,
        warmup_split=main.warmup_split,
        segments=segments,
        main_segment=main.index,
    )


def _steady_batch(segment: Segment, intervals: Sequence[DecodeInterval]) -> float:
    steady = segment.phase(PhaseKind.STEADY).span
    assert steady is not None
    values = [i.running for i in intervals if steady.start_s < i.end_s <= steady.end_s]
    return float(statistics.median(values)) if values else float(segment.level)


def _run_phase_records(main: Segment | None, readmitted: int, overload: PhaseStats) -> dict[PhaseKind, PhaseStats]:
    """The run's phases: its main segment's spans and per-token times (a steady time only
    with its stretch, a drain only after one; mixed only where requests were readmitted),
    and its overload stretches together."""
    if main is None:
        return {PhaseKind.STEADY: NO_PHASE, PhaseKind.OVERLOAD: overload}
    steady = main.phase(PhaseKind.STEADY)
    mixed = None
    if main.phase(PhaseKind.MIXED).seconds > 0 and readmitted:
        after_steady = steady.span is not None and steady.span.end_s < main.plateau.end_s
        mixed_start = steady.span.end_s if steady.span is not None and after_steady else main.plateau.start_s
        mixed = PhaseSpan("mixed", mixed_start, main.plateau.end_s)
    held = steady.span is not None
    return {
        PhaseKind.RAMP: PhaseStats(span=main.ramp),
        PhaseKind.STEADY: PhaseStats(span=steady.span, token_s=steady.token_s if held else None),
        PhaseKind.MIXED: PhaseStats(span=mixed, token_s=main.phase(PhaseKind.MIXED).token_s),
        PhaseKind.DRAIN: PhaseStats(
            span=main.phase(PhaseKind.DRAIN).span if held else None, token_s=main.phase(PhaseKind.DRAIN).token_s
        ),
        PhaseKind.OVERLOAD: overload,
    }


def _plot_data(
    run: ServerRun, intervals: Sequence[DecodeInterval], retractions: Sequence[float]
) -> RunPlotData:
    low, high = bisect.bisect_left(retractions, run.window[0]), bisect.bisect_left(retractions, run.window[1])
    stride = max(1, (high - low) // 1000)  # a plot needs no more lines than that
    return RunPlotData(
        timeline=_timeline(run.samples, intervals),
        retraction_times_s=tuple(retractions[low:high:stride]),
        abort_time_s=next(
            (e.time_s for e in run.events if e.kind == "traceback" and e.time_s is not None),
            None,
        ),
    )


def _timeline(
    samples: Sequence[BatchSample], intervals: Sequence[DecodeInterval]
) -> tuple[TimelinePoint, ...]:
    """Every line of the run; a Decode line carries the per-token time of the interval it
    ends (the value the tables use), the run's first Decode line none."""
    points = []
    decoded = 0  # Decode lines so far: the k-th (from 0) ends intervals[k - 1]
    for s in samples:
        value = None
        if s.kind != "prefill":
            value = intervals[decoded - 1].per_token_s if 0 < decoded <= len(intervals) else None
            decoded += 1
        points.append(
            TimelinePoint(
                s.time_s,
                s.kind,
                s.running + (s.new_seqs or 0) if s.kind == "prefill" else s.running,
                s.queued,
                value,
            )
        )
    return tuple(points)
