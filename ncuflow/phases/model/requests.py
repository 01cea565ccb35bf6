"""Per-request streaming traces (JSONL): the batch rebuilt from request events."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import pairwise

from ncuflow.phases.model.bench import analyse_without_start_times
from ncuflow.phases.model.results import (
    NO_PHASE,
    PhaseKind,
    PhaseSpan,
    PhaseStats,
    Reconciliation,
    RunAdmission,
    RunAnalysis,
    RunFindings,
    RunIdentity,
    RunPlotData,
    RunShape,
    RunTiming,
    RunTokens,
    TimelinePoint,
    assemble_run,
)
from ncuflow.phases.model.stats import Distribution, distribution
from ncuflow.phases.model.traces import RequestRecord, RequestTrace
from ncuflow.phases.model.waves import MIN_GAPS, Wave, find_waves, stable_stretches, wave_segment

BatchStretch = tuple[float, float, int, int]  # (start, end, decoding, prefilling)


def analyse_request_trace(
    trace: RequestTrace,
    *,
    batch_tolerance: float = 0.05,
    output_tokens: int | None = None,
    run_index: int = 1,
) -> RunAnalysis:
    requests = trace.requests
    notes: list[str] = []
    ttft = distribution([r.chunk_times_s[0] - r.submit_s for r in requests if r.chunk_times_s and trace.first_token_logged])
    lengths = sorted(r.output_tokens for r in requests)
    tokens = output_tokens or (lengths[len(lengths) // 2] if lengths else None)
    tokens_source = "--output-tokens" if output_tokens else "median chunk tokens per request"
    if lengths and lengths[0] != lengths[-1] and not output_tokens:
        notes.append(
            f"requests differ in output length ({lengths[0]}–{lengths[-1]} tokens): the "
            f"harness formula uses the median, {tokens}"
        )
    per_request_tpot = [
        (r.chunk_times_s[-1] - r.chunk_times_s[0]) / (r.output_tokens - 1)
        for r in requests
        if r.output_tokens > 1 and len(r.chunk_times_s) > 1
    ]
    mean_request_tpot = statistics.fmean(per_request_tpot) if per_request_tpot else None
    if not trace.has_start_times:
        return analyse_without_start_times(
            trace, ttft, tokens, tokens_source, mean_request_tpot, run_index
        )
    timing = RunTiming(
        step_method="per-token time = gap between consecutive streamed chunks of one request "
        "(divided by the chunk's tokens) inside the steady stretch",
        ttft_s=ttft,
        mean_request_tpot_s=mean_request_tpot,
    )
    return _analyse_timeline(
        trace, timing, RunTokens(tokens, tokens_source), batch_tolerance, run_index, notes
    )


def _analyse_timeline(
    trace: RequestTrace,
    timing: RunTiming,
    tokens: RunTokens,
    batch_tolerance: float,
    run_index: int,
    notes: list[str],
) -> RunAnalysis:
    """Requests on one clock: rebuild the batch, find the steady stretch, reconcile."""
    requests = trace.requests
    cannot: list[str] = []
    start_s = min(r.submit_s for r in requests)
    end_s = max(r.chunk_times_s[-1] for r in requests)
    stretches = _batch_segments(requests)
    peak = max((d for _, _, d, _ in stretches), default=0)
    typical_gap = _typical_gap(requests)
    waves = find_waves(requests, stable_stretches(stretches, peak, batch_tolerance, MIN_GAPS * typical_gap))
    if len(waves) >= 2:
        return _analyse_waves(trace, waves, (timing, tokens), peak, run_index, notes)
    best = _longest_stable(stretches, peak, batch_tolerance)
    if best is not None and best[1] - best[0] < 5 * typical_gap:
        notes.append(
            f"the longest stable stretch lasts {best[1] - best[0]:.3f} s, under 5 token intervals: "
            "not counted as steady decode"
        )
        best = None
    shape = RunShape(start_s, end_s, peak)
    phases: dict[PhaseKind, PhaseStats] = {}
    admission = RunAdmission()
    if best is None:
        cannot.append(
            f"no steady decode phase: the batch never held ≥ {100 * (1 - batch_tolerance):.0f} % "
            f"of its peak size ({peak}) with no request prefilling — the batch never fills"
        )
    else:
        shape, phases, admission = _steady_phases(requests, stretches, best, shape)
        steady_tokens = phases[PhaseKind.STEADY].token_s
        timing = replace(timing, steady_step_s=steady_tokens.median if steady_tokens else None)
        if steady_tokens is None:
            cannot.append("no two consecutive chunks of one request fall inside the steady stretch")
    generations = _generations_note(requests, best)
    if generations:
        cannot.append(generations)
    else:
        steady = phases.get(PhaseKind.STEADY, NO_PHASE).token_s
        tokens = _harness(tokens, steady, admission, end_s - min(r.chunk_times_s[0] for r in requests))
    return _assemble(
        trace, run_index, (shape, phases), (admission, timing, tokens), RunFindings(tuple(cannot), tuple(notes))
    )


def _generations_note(requests: Sequence[RequestRecord], best: tuple[float, float] | None) -> str:
    """Why there is no harness TPOT where not every request decoded through the steady
    stretch (requests admitted after it began or finished before it ended: generations)."""
    if best is None:
        return ""
    outside = sum(1 for r in requests if r.chunk_times_s[0] > best[0] or r.chunk_times_s[-1] < best[1])
    if not outside:
        return ""
    return (
        f"harness-style batch TPOT: {outside} of {len(requests)} requests did not decode through the "
        "steady stretch (admitted after it began or finished before it ended), so (batch end − first "
        "token)/(N − 1) would span several generations of requests"
    )


def _analyse_waves(
    trace: RequestTrace,
    waves: Sequence[Wave],
    known: tuple[RunTiming, RunTokens],
    peak: int,
    run_index: int,
    notes: list[str],
) -> RunAnalysis:
    """Two or more waves: one segment each, the run row showing the longest-held one."""
    timing, tokens = known
    requests = trace.requests
    segments = tuple(wave_segment(k, w, requests, tokens.output_tokens) for k, w in enumerate(waves, start=1))
    main = max(segments, key=lambda s: (s.phase(PhaseKind.STEADY).seconds, -s.index))
    start_s = min(r.submit_s for r in requests)
    end_s = max(r.chunk_times_s[-1] for r in requests)
    members = [requests[i] for i in waves[main.index - 1].members]
    firsts = sorted(r.chunk_times_s[0] for r in members)
    admission = RunAdmission(
        admission_span_s=firsts[-1] - firsts[0],
        mean_admission_wait_s=statistics.fmean(firsts[-1] - t for t in firsts),
        requests_admitted=len(members),
        total_admission_wait_s=sum(firsts[-1] - t for t in firsts),
        requests_total=len(requests),
    )
    shape = RunShape(start_s, end_s, peak, float(main.level), segments=segments, main_segment=main.index)
    steady = main.phase(PhaseKind.STEADY).token_s
    phases = {
        PhaseKind.RAMP: PhaseStats(span=main.ramp),
        PhaseKind.STEADY: PhaseStats(span=main.phase(PhaseKind.STEADY).span, token_s=steady),
        PhaseKind.DRAIN: PhaseStats(span=main.phase(PhaseKind.DRAIN).span),
    }
    notes.append(
        f"{len(segments)} waves (generations of requests that filled the batch together, at "
        f"{', '.join(str(s.level) for s in segments[:8])}): each is a segment with its own ramp, steady, "
        "drain and harness-style TPOT"
    )
    cannot = [
        f"harness-style TPOT over the whole trace: its {len(segments)} waves are {len(segments)} "
        "generations of requests; each wave's own is reconciled on its segment"
    ]
    timing = replace(timing, steady_step_s=steady.median if steady else None)
    return _assemble(
        trace, run_index, (shape, phases), (admission, timing, tokens), RunFindings(tuple(cannot), tuple(notes))
    )


def _assemble(
    trace: RequestTrace,
    run_index: int,
    shaped: tuple[RunShape, Mapping[PhaseKind, PhaseStats]],
    parts: tuple[RunAdmission, RunTiming, RunTokens],
    findings: RunFindings,
) -> RunAnalysis:
    """A request trace's run (its shape and phases), with its timeline and token gaps for the plot."""
    shape, phases = shaped
    admission, timing, tokens = parts
    return assemble_run(
        RunIdentity(trace.path, trace.source_format, run_index, trace.run, None, trace.clock_origin),
        shape,
        admission,
        timing,
        tokens,
        RunPlotData(timeline=_timeline(trace.requests), token_gaps=_token_gaps(trace.requests)),
        phases=phases,
        findings=findings,
    )


def _timeline(requests: Sequence[RequestRecord]) -> tuple[TimelinePoint, ...]:
    """The batch at every request event (decoding, prefilling), for the plot."""
    stretches = _batch_segments(requests)
    end_s = max(r.chunk_times_s[-1] for r in requests)
    return tuple(
        TimelinePoint(a, "prefill" if p else "decode", d, p, None) for a, _, d, p in stretches
    ) + ((TimelinePoint(end_s, "decode", 0, 0, None),) if stretches else ())


def _longest_stable(
    stretches: Sequence[BatchStretch], peak: int, tolerance: float
) -> tuple[float, float] | None:
    """The longest run of prefill-free stretches at one batch size near the peak
    (per-request traces are exact: a stretch keeps one batch size; any change ends it)."""
    best: tuple[float, float] | None = None
    current: tuple[float, float, int] | None = None
    for a, b, decoding, prefilling in [*stretches, (math.inf, math.inf, -1, 1)]:
        ok = prefilling == 0 and peak > 0 and decoding >= (1 - tolerance) * peak
        if ok and current is not None and decoding == current[2]:
            current = (current[0], b, decoding)
            continue
        if current is not None and (best is None or current[1] - current[0] > best[1] - best[0]):
            best = (current[0], current[1])
        current = (a, b, decoding) if ok else None
    return best


def _typical_gap(requests: Sequence[RequestRecord]) -> float:
    gaps = [
        (r.chunk_times_s[k] - r.chunk_times_s[k - 1]) / max(r.chunk_tokens[k], 1)
        for r in requests
        for k in range(1, len(r.chunk_times_s))
    ]
    return statistics.median(gaps) if gaps else 0.0


def _steady_phases(
    requests: Sequence[RequestRecord],
    stretches: Sequence[BatchStretch],
    best: tuple[float, float],
    shape: RunShape,
) -> tuple[RunShape, dict[PhaseKind, PhaseStats], RunAdmission]:
    """The steady stretch ``best`` (its ramp before, its drain after, its per-token times)
    and the admissions before it."""
    a, b = best
    assert shape.start_s is not None and shape.end_s is not None
    steady_batch = float(statistics.median(d for s0, s1, d, _ in stretches if s0 >= a and s1 <= b))
    intervals = [
        (r.chunk_times_s[k] - r.chunk_times_s[k - 1]) / r.chunk_tokens[k]
        for r in requests
        for k in range(1, len(r.chunk_times_s))
        if r.chunk_times_s[k - 1] >= a and r.chunk_times_s[k] <= b and r.chunk_tokens[k] > 0
    ]
    first_tokens = [r.chunk_times_s[0] for r in requests]
    admitted_before = [t for t in first_tokens if t <= a]
    admission = RunAdmission(requests_admitted=len(admitted_before), requests_total=len(requests))
    if admitted_before:
        last = max(admitted_before)
        admission = replace(
            admission,
            admission_span_s=last - min(first_tokens),
            mean_admission_wait_s=statistics.fmean(last - t for t in admitted_before),
            total_admission_wait_s=sum(last - t for t in admitted_before),
        )
    phases = {
        PhaseKind.RAMP: PhaseStats(span=PhaseSpan("ramp", shape.start_s, a)),
        PhaseKind.STEADY: PhaseStats(span=PhaseSpan("steady", a, b), token_s=distribution(intervals)),
        PhaseKind.DRAIN: PhaseStats(span=PhaseSpan("drain", b, shape.end_s)),
    }
    return replace(shape, steady_batch=steady_batch), phases, admission


def _harness(
    tokens: RunTokens, steady_token_s: Distribution | None, admission: RunAdmission, batch_span_s: float
) -> RunTokens:
    """Harness TPOT = (batch end − first token)/(N − 1), reconciled when steady is known."""
    n = tokens.output_tokens
    if n is None or n <= 1:
        return tokens
    harness = batch_span_s / (n - 1)
    reconciliation = None
    if steady_token_s is not None and admission.admission_span_s is not None:
        reconciliation = Reconciliation(
            reported_label="harness TPOT (batch end − first token)/(N − 1)",
            reported_tpot_s=harness,
            steady_term_s=steady_token_s.median,
            ramp_term_s=admission.admission_span_s / (n - 1),
            ramp_s=admission.admission_span_s,
            output_tokens=n,
        )
    return replace(tokens, harness_tpot_s=harness, reconciliation=reconciliation)


def _token_gaps(requests: Sequence[RequestRecord]) -> tuple[tuple[float, float], ...]:
    gaps = [
        (r.chunk_times_s[k], (r.chunk_times_s[k] - r.chunk_times_s[k - 1]) / r.chunk_tokens[k])
        for r in requests
        for k in range(1, len(r.chunk_times_s))
        if r.chunk_tokens[k] > 0
    ]
    stride = max(1, len(gaps) // 20000)
    return tuple(sorted(gaps[::stride]))


def _batch_segments(requests: Sequence[RequestRecord]) -> list[tuple[float, float, int, int]]:
    """(start, end, decoding, prefilling) for every interval between two request events:
    a request is prefilling from submit to first token, decoding from first to last token."""
    changes: dict[float, list[int]] = {}
    for r in requests:
        first, last = r.chunk_times_s[0], r.chunk_times_s[-1]
        changes.setdefault(r.submit_s, [0, 0])[1] += 1
        changes.setdefault(first, [0, 0])[1] -= 1
        changes.setdefault(first, [0, 0])[0] += 1
        changes.setdefault(last, [0, 0])[0] -= 1
    times = sorted(changes)
    segments = []
    decoding = prefilling = 0
    for a, b in pairwise(times):
        decoding += changes[a][0]
        prefilling += changes[a][1]
        segments.append((a, b, decoding, prefilling))
    return segments
