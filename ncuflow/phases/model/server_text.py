"""What a server-log run says about itself in words: how the per-token time was derived,
why there is no steady phase, what the stated concurrency, speculative decoding, bursts,
tails and the server's own per-request timing lines show. Every sentence is made from the
same values the tables and the plot show."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ncuflow.phases.model.capabilities import Capabilities
from ncuflow.phases.model.intervals import DecodeInterval
from ncuflow.phases.model.levels import Item
from ncuflow.phases.model.overload_text import overload_reason
from ncuflow.phases.model.results import (
    ArrivalTimes,
    PhaseKind,
    PhaseSpan,
    Segment,
    SegmentKind,
    ServerRequests,
)
from ncuflow.phases.model.runs import RunSettings, ServerRun, aborted, peak_batch
from ncuflow.phases.model.settings import ServerSetting, SettingSource
from ncuflow.phases.model.stats import Distribution
from ncuflow.phases.model.traces import BatchSample, ServerTrace


def step_method(
    capabilities: Capabilities,
    segment: Segment,
    on_plateau: Sequence[DecodeInterval],
    *,
    steps_per_line: ServerSetting | None,
    resolution_s: float,
    with_throughput: bool,
) -> tuple[str, float | None, list[str]]:
    """(how the per-token time was derived, the step time, notes about it)."""
    tokens = segment.phase(PhaseKind.STEADY).token_s
    if tokens is None:
        return "", None, []
    accept = segment.accept_len
    step = tokens.median * (accept or 1.0)
    if capabilities.stats_window_s is not None:
        return _window_method(capabilities, capabilities.stats_window_s, on_plateau), step, []
    if steps_per_line is None:  # a step-counted format's trace always states it
        return "", step, []
    if not with_throughput:
        return _line_interval_method(steps_per_line, resolution_s), step, []
    method = (
        "per-token time = #running-req / gen throughput on each Decode line of the steady stretch"
    )
    if accept:
        method += f"; speculative decoding: step = per-token × accept len ({accept:.2f})"
    cross_check, notes = _interval_cross_check(
        segment.phase(PhaseKind.STEADY).span,
        on_plateau,
        step,
        steps_per_line=steps_per_line,
        resolution_s=resolution_s,
    )
    return method + cross_check, step, notes


def _window_method(capabilities: Capabilities, window_s: float, on_plateau: Sequence[DecodeInterval]) -> str:
    method = (
        f"per-token time = {capabilities.batch_field} / {capabilities.throughput_field} of each {window_s:g}-s "
        f"{capabilities.server} stats window (a window average, not a step time)"
    )
    if any(i.cached_prompt for i in on_plateau):
        method += (
            "; windows whose prompt throughput is ≤ 10 % of the generation throughput (a "
            "cached prompt) count as steady"
        )
    return method


def _line_interval_method(steps_per_line: ServerSetting, resolution_s: float) -> str:
    """SGLang Decode lines without gen throughput: the step from the time between lines."""
    method = (
        f"step = Δt between Decode lines / {steps_per_line.value} steps ({steps_per_line.stated()}; "
        "no gen throughput on these lines)"
    )
    if resolution_s >= 0.5:
        method += f"; timestamps to {resolution_s:g} s limit each interval's resolution"
    return method


def _interval_cross_check(
    steady: PhaseSpan | None,
    on_plateau: Sequence[DecodeInterval],
    step: float,
    *,
    steps_per_line: ServerSetting,
    resolution_s: float,
) -> tuple[str, list[str]]:
    """(the method's cross-check clause, a note where the timestamps imply another number of
    steps between Decode lines than the one used): the steps the steady stretch implies."""
    if not (steady is not None and steady.duration_s > 0 and step > 0):
        return "", []
    count = max(1, sum(1 for i in on_plateau if steady.start_s < i.end_s <= steady.end_s))
    implied = steady.duration_s / (count * step)
    clause = (
        f"; cross-check: the timestamps imply {implied:.0f} steps between Decode lines "
        f"({steps_per_line.stated()}"
        + (
            f"; ±{resolution_s / steady.duration_s * implied:.0f} from the "
            f"{resolution_s:g}-s timestamps"
            if resolution_s >= 0.5
            else ""
        )
        + ")"
    )
    steps = steps_per_line.value
    if abs(implied - steps) > max(0.15 * steps, 2 * resolution_s / steady.duration_s * implied):
        return clause, [
            f"timestamps imply ≈{implied:.0f} decode steps between Decode lines, "
            f"not {steps}: " + _mismatch_advice(steps_per_line)
        ]
    return clause, []


def _mismatch_advice(steps_per_line: ServerSetting) -> str:
    """What to do where the timestamps imply another step count than the one used."""
    if steps_per_line.source is SettingSource.LOG:
        return (
            f"the log's server arguments state {steps_per_line.name}={steps_per_line.value} "
            f"(line {steps_per_line.line}), so the lines' gen throughput and their timestamps disagree"
        )
    used = "was given" if steps_per_line.source is SettingSource.OPTION else "is the default; the log does not state it"
    return f"check {steps_per_line.flag} ({steps_per_line.value} {used})"


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


def concurrency_note(peak: int, stated: int, in_flight: int | None = None) -> str:
    """The peak (from Decode lines) against the benchmark's stated max concurrency; on a PD
    decode node, requests in flight = #running-req + those still arriving by KV transfer."""
    if in_flight is not None and in_flight != peak:
        relation = "=" if in_flight == stated else "≠"
        return (
            f"PD decode node: up to {in_flight} requests in flight (#running-req + "
            f"#transfer-req/#prealloc-req) {relation} the benchmark's stated max concurrency "
            f"{stated}; #running-req peaks at {peak} while replacements are in transfer"
        )
    if peak == stated:
        return f"peak batch {peak} (from Decode lines) = the benchmark's stated max concurrency {stated}"
    if peak > stated:
        return (
            f"peak batch {peak} (from Decode lines) exceeds the benchmark's stated max "
            f"concurrency {stated}: another client shared the server, or the statistics line "
            "counts requests not yet removed"
        )
    return (
        f"peak batch {peak} (from Decode lines) is below the benchmark's stated max "
        f"concurrency {stated}: the server capped the batch (KV cache, --max-running-requests) "
        "or the client never had that many requests in flight"
    )


def spec_decoding_note(on_plateau: Sequence[DecodeInterval]) -> list[str]:
    """Speculative decoding whose acceptance collapses changes the per-token time with it."""
    pairs = [(i.accept_len, i.per_token_s) for i in on_plateau if i.accept_len and i.per_token_s]
    if len(pairs) < 2:
        return []
    accepts = [a for a, _ in pairs]
    high, low = max(accepts), min(accepts)
    if low >= 0.7 * high:
        return []
    middle = (high + low) / 2
    slow = [t for a, t in pairs if a is not None and a < middle and t is not None]
    fast = [t for a, t in pairs if a is not None and a >= middle and t is not None]
    return [
        f"speculative decoding: acceptance length ranged {low:.2f}–{high:.2f} on the plateau; "
        f"per-token time {statistics.median(fast) * 1000:.2f} ms at high acceptance vs "
        f"{statistics.median(slow) * 1000:.2f} ms at low: a per-token jump that follows the "
        "acceptance, not the kernels"
    ]


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
            "no Prefill lines in this run (e.g. a PD decode node): admissions are seen only as "
            "increases of #running-req between Decode lines (the ramp's waits are estimated "
            "from them), so TTFT cannot be measured"
        )
    if len([s for s in decodes if s.running > 0]) < 2:
        cannot.append(
            f"only {len(decodes)} Decode line(s): the run is shorter than two decode-log "
            f"intervals ({trace.steps_between_lines} steps each), so no step time can be derived"
            if capabilities.step_counted_lines
            else f"only {len(decodes)} stats line(s) with running requests: too short for the "
            "10-s statistics window"
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
            "PD decode node: the ramp ends when #running-req reaches its plateau; requests still "
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


def shape_notes(segments: Sequence[Segment], tails: Sequence[Item], decodes: Sequence[BatchSample]) -> list[str]:
    """Bursts and tails, said once each run, with the rule that made them."""
    notes = []
    bursts = [s for s in segments if s.kind is SegmentKind.BURST]
    if bursts:
        notes.append(
            f"{len(bursts)} burst(s) (the batch rose to a peak it did not hold for three Decode "
            "lines, then fell): each is a segment of its own, with its rise and drain and no "
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


def headline_note(segment: Segment) -> list[str]:
    steady = segment.phase(PhaseKind.STEADY).token_s
    if segment.headline_method != "token-weighted" or steady is None:
        return []
    return [
        "speculative decoding: the acceptance length spreads on the steady stretch, so the "
        f"per-token time shown is token-weighted ({(segment.headline_token_s or 0) * 1000:.2f} ms, "
        "request-seconds per output token, what a mean TPOT is); the median of the Decode "
        f"lines would say {steady.median * 1000:.2f} ms"
    ]


def request_notes(requests: ServerRequests, decode_weighted_s: float | None) -> list[str]:
    """The server's own per-request timing lines against the Decode lines."""
    lengths = requests.output_tokens
    sampled = f" (every {requests.stride}th line kept)" if requests.stride > 1 else ""
    head = (
        f"{requests.requests} request(s) finished in this run by the server's per-request timing "
        f"lines (from line {requests.first_line}){sampled}"
    )
    if lengths is not None and lengths.minimum == lengths.maximum:
        head += f": output {lengths.minimum:.0f} tokens each"
    elif lengths is not None:
        head += f": output {lengths.minimum:.0f}–{lengths.maximum:.0f} tokens (median {lengths.median:.0f})"
    if requests.mean_tpot_s is None or requests.weighted_tpot_s is None:
        return [
            head + "; these lines hold prefill and decode together (forward_duration), so they "
            "give no per-request TPOT"
        ]
    line = (
        f"{head}; their own TPOT: mean {requests.mean_tpot_s * 1000:.2f} ms, token-weighted "
        f"{requests.weighted_tpot_s * 1000:.2f} ms"
    )
    if decode_weighted_s is not None:
        gap = decode_weighted_s / requests.weighted_tpot_s - 1
        line += (
            f"; the Decode lines' token-weighted per-token time over the whole run is "
            f"{decode_weighted_s * 1000:.2f} ms ({gap:+.1%})"
        )
    if requests.ttft_s is not None:
        line += "; the TTFT column is server-side: queue + prefill, from these lines"
    return [line]


def _between(low: Distribution | None, high: Distribution | None) -> str:
    """A median between bounds, in seconds: "0.21–0.93 s", or "≤ 0.93 s" with no lower one."""
    if high is None:
        return "—"
    if low is None:
        return f"≤ {high.median:.2f} s"
    if abs(high.median - low.median) < 0.0005:
        return f"{high.median:.2f} s"
    return f"{low.median:.2f}–{high.median:.2f} s"


def arrival_notes(arrivals: ArrivalTimes | None, cannot: list[str]) -> list[str]:
    """What the arrival lines say about a run; where they bound the TTFT, the "cannot
    tell" that a server log has no submit times is taken back (``cannot`` is edited)."""
    if arrivals is None:
        return []
    head = f"{arrivals.requests} request(s) arrived (the server's arrival lines) over {arrivals.arrival_span_s:.1f} s"
    if arrivals.refused:
        head += f"; {arrivals.refused} more were refused before the scheduler"
    if arrivals.queue_wait_s is None:
        if arrivals.requests:
            head += "; they do not match the admissions the statistics lines count, so no queue wait is given"
        return [head]
    cannot[:] = [c for c in cannot if not c.startswith("TTFT distribution")]
    return [
        f"{head}; admitted within {arrivals.admission_span_s or 0.0:.1f} s of the first arrival; queue "
        f"wait median {_between(arrivals.queue_wait_low_s, arrivals.queue_wait_s)} (p90 ≤ "
        f"{arrivals.queue_wait_s.p90:.2f} s); TTFT median {_between(arrivals.ttft_low_s, arrivals.ttft_high_s)}: "
        f"{arrivals.method}"
    ]
