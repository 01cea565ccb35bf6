"""What a server-log run says about itself in words, besides its timing: why it has no
steady phase, its segments, bursts and tails, the stated concurrency against the batch
it held, and what the log cannot tell. Every sentence is made from the values the tables
and the plot show."""

from __future__ import annotations

from collections.abc import Sequence

from ncuflow.phases.model.capabilities import Capabilities
from ncuflow.phases.model.levels import Item
from ncuflow.phases.model.overload import overload_reason
from ncuflow.phases.model.results import (
    PhaseKind,
    Segment,
    SegmentKind,
)
from ncuflow.phases.model.runs import RunSettings, ServerRun, aborted, peak_batch
from ncuflow.phases.model.traces import BatchSample, ServerTrace


def run_findings(
    trace: ServerTrace,
    run: ServerRun,
    settings: RunSettings,
    decodes: Sequence[BatchSample],
    prefills: Sequence[BatchSample],
    segments: Sequence[Segment],
) -> tuple[list[str], list[str]]:
    """(notes, what cannot be derived) for one run of a server log."""
    notes = _run_notes(trace, run, settings, prefills, segments)
    return notes, _run_cannot(trace, settings, decodes, prefills)


def _run_cannot(
    trace: ServerTrace,
    settings: RunSettings,
    decodes: Sequence[BatchSample],
    prefills: Sequence[BatchSample],
) -> list[str]:
    cannot: list[str] = []
    capabilities = trace.capabilities
    if capabilities.prefill_lines and not prefills:
        cannot.append(
            f"no {capabilities.admission_line}s in this run (e.g. a PD decode node): admissions are "
            f"seen only as increases of {capabilities.batch_field} between {capabilities.stats_line}s "
            "(the ramp's waits are estimated from them), so TTFT cannot be measured"
        )
    if len([s for s in decodes if s.running > 0]) < 2:
        cannot.append(
            f"only {len(decodes)} {capabilities.stats_line}(s): the run is shorter than two "
            f"{capabilities.line_interval}s ({trace.steps_between_lines} steps each), so no step time can be derived"
            if capabilities.step_counted_lines
            else f"only {len(decodes)} {capabilities.stats_line}(s) with running requests: too short for the "
            f"{capabilities.stats_window_s or 0:g}-s statistics window"
        )
    if capabilities.prefill_lines and prefills:
        cannot.append("TTFT distribution: a server log has no per-request submit times")
    return cannot


def _run_notes(
    trace: ServerTrace,
    run: ServerRun,
    settings: RunSettings,
    prefills: Sequence[BatchSample],
    segments: Sequence[Segment],
) -> list[str]:
    notes: list[str] = []
    if (
        run.index == 1
        and peak_batch(run.samples) <= 1
        and trace.bench is not None
        and settings.several_runs
    ):
        notes.append(
            "a single request before the benchmark: probably bench_serving's warm-up request"
        )
    for event in run.events:
        if event.kind in ("traceback", "shutdown"):
            notes.append(f"line {event.line}: {event.text}")
    retractions = run.retractions
    if retractions:
        notes.append(
            f"{retractions} retraction(s) (KV cache full, requests pushed back to the queue): "
            "the batch size is not stable around them"
        )
    if len(segments) > 1:
        notes.append(_segments_note(trace.capabilities, segments))
    if settings.lockstep_admissions:
        notes.append(
            "DP attention: ranks step in lockstep, so an admission on any rank counts as an "
            "admission (a mixed interval) for this rank too"
        )
    if trace.capabilities.prefill_lines and not prefills and segments:
        notes.append(
            f"PD decode node: the ramp ends when {trace.capabilities.batch_field} reaches its plateau; requests still "
            "arriving by KV transfer (#transfer-req/#prealloc-req) at the plateau were prefilled "
            "on another node, so they do not make a plateau interval 'mixed'"
        )
    return notes


def _segments_note(capabilities: Capabilities, segments: Sequence[Segment]) -> str:
    """The run's segments listed (the first 12), when there is more than one."""
    shown = ", ".join(
        f"{s.level}{'' if s.kind is SegmentKind.PLATEAU else f' ({s.kind})'}" for s in segments[:12]
    ) + (", …" if len(segments) > 12 else "")
    bursts = any(s.kind is SegmentKind.BURST for s in segments)
    overload = any(s.kind is SegmentKind.OVERLOAD for s in segments)
    return (
        f"{len(segments)} segments (plateaus of {capabilities.batch_field}"
        + (" and bursts" if bursts else "")
        + (" and overload stretches" if overload else "")
        + f": {shown}): each has its own "
        + _ramp_words(bursts, overload)
        + ", per-token time and drain"
    )


def _ramp_words(bursts: bool, overload: bool) -> str:
    kinds = " or ".join(k for k, present in (("a burst", bursts), ("an overload stretch", overload)) if present)
    return f"ramp ({kinds}: its rise)" if kinds else "ramp"


def no_steady(
    trace: ServerTrace,
    run: ServerRun,
    main: Segment | None,
    segments: Sequence[Segment],
    decode_lines: int,
    settings: RunSettings,
) -> tuple[str, list[str]]:
    """(a word for why, the sentences) when no segment of the run has a steady stretch."""
    if any(s.phase(PhaseKind.STEADY).span is not None for s in segments):
        return "", []
    if main is not None:
        kind, reason = no_steady_reason(run, trace.capabilities, main, bool(settings.lockstep_admissions))
        return kind, ["no steady decode phase: " + reason]
    if decode_lines < 2:
        return "", []
    overloaded = overload_reason(trace.capabilities, segments)
    if overloaded is not None:
        return overloaded[0], [overloaded[1]]
    bursts = [s for s in segments if s.kind is SegmentKind.BURST]
    if bursts:
        peaks = ", ".join(str(s.level) for s in bursts[:8]) + (", …" if len(bursts) > 8 else "")
        return "bursts", [
            "no steady decode phase: the batch never held a level; it rose and fell in "
            f"{len(bursts)} burst(s) (peaks {peaks}), each a segment with no steady stretch"
        ]
    ends = " (the run ends in a traceback while still admitting requests)"
    return ("traceback" if aborted(run) else "no-plateau"), [
        f"no steady decode phase: the batch never held a plateau of {trace.capabilities.batch_field}"
        + (ends if aborted(run) else "")
    ]


def no_steady_reason(
    run: ServerRun, capabilities: Capabilities, segment: Segment, lockstep: bool
) -> tuple[str, str]:
    """(a word for why, the sentence) when a plateau has no steady stretch."""
    admission = capabilities.admission_evidence
    if lockstep:
        admission += " or an admission on another DP rank"
    reason = (
        "the batch never held its plateau between two consecutive statistics lines with "
        f"no admission in between ({admission})"
    )
    kind = "admissions"
    if run.retractions:
        kind = "retraction"
        reason += (
            f" (the KV cache filled up: {run.retractions} retraction(s) make the batch size saw-tooth)"
        )
    elif aborted(run):
        kind = "traceback"
        reason += " (the run ends in a traceback while still admitting requests)"
    elif capabilities.stats_window_s is not None:
        kind = "windows"
        reason += (
            f" ({capabilities.server} prints one line per {capabilities.stats_window_s:g} s; every "
            "busy window here also processed prompts)"
        )
    mixed = segment.phase(PhaseKind.MIXED)
    if mixed.token_s is not None:
        reason += (
            f"; the plateau at {segment.level} with admissions ('mixed', {mixed.seconds:.1f} s) "
            f"runs at {mixed.token_s.median * 1000:.2f} ms per token"
        )
    return kind, reason


def shape_notes(
    capabilities: Capabilities, segments: Sequence[Segment], tails: Sequence[Item], decodes: Sequence[BatchSample]
) -> list[str]:
    """Bursts and tails, said once each run, with the rule that made them."""
    notes = []
    bursts = [s for s in segments if s.kind is SegmentKind.BURST]
    if bursts:
        notes.append(
            f"{len(bursts)} burst(s) (the batch rose to a peak it did not hold for three "
            f"{capabilities.stats_line}s, then fell): each is a segment of its own, with its rise and drain and no "
            "steady phase; never part of another segment's ramp or drain"
        )
    if tails:
        held = sum(decodes[t.last].time_s - decodes[t.first].time_s for t in tails)
        levels = ", ".join(str(t.level) for t in tails[:6]) + (", …" if len(tails) > 6 else "")
        notes.append(
            f"{len(tails)} tail(s) (the batch fell to {levels} and held there with no admission "
            f"for {held:.0f} s in all: the last requests finishing): counted in the drain of the "
            "segment before each, not as concurrency levels"
        )
    return notes


def concurrency_note(capabilities: Capabilities, peak: int, stated: int, in_flight: int | None = None) -> str:
    """The peak (from the statistics lines) against the benchmark's stated max concurrency;
    on a PD decode node, requests in flight = the batch + those still arriving by KV transfer
    (SGLang's #transfer-req/#prealloc-req, the only format whose lines count them)."""
    batch, lines = capabilities.batch_field, f"{capabilities.stats_line}s"
    if in_flight is not None and in_flight != peak:
        relation = "=" if in_flight == stated else "≠"
        return (
            f"PD decode node: up to {in_flight} requests in flight ({batch} + "
            f"#transfer-req/#prealloc-req) {relation} the benchmark's stated max concurrency "
            f"{stated}; {batch} peaks at {peak} while replacements are in transfer"
        )
    if peak == stated:
        return f"peak batch {peak} (from {lines}) = the benchmark's stated max concurrency {stated}"
    if peak > stated:
        return (
            f"peak batch {peak} (from {lines}) exceeds the benchmark's stated max "
            f"concurrency {stated}: another client shared the server, or the statistics line "
            "counts requests not yet removed"
        )
    return (
        f"peak batch {peak} (from {lines}) is below the benchmark's stated max "
        f"concurrency {stated}: the server capped the batch (KV cache, {capabilities.batch_cap_option}) "
        "or the client never had that many requests in flight"
    )


def level_notes(
    trace: ServerTrace,
    decodes: Sequence[BatchSample],
    settings: RunSettings,
    main: Segment | None,
    peak: int,
    readmitted: int,
) -> list[str]:
    """The main segment's level against the stated concurrency, and its readmissions."""
    notes = []
    if main is not None and settings.stated_concurrency is not None and peak > 1:
        incoming = [s.running + s.incoming for s in decodes if s.incoming is not None]
        in_flight = max(incoming) if incoming else None
        notes.append(concurrency_note(trace.capabilities, peak, settings.stated_concurrency, in_flight))
    if main is not None and readmitted:
        notes.append(
            f"{readmitted} request(s) were admitted while the batch stayed near {main.level} (a "
            "closed loop refilling finished requests): those intervals mix prefill into decode "
            f"and are counted as 'mixed' ({main.phase(PhaseKind.MIXED).seconds:.0f} s), not steady"
        )
    return notes
