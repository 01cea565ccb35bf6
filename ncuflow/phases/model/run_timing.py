"""A server-log run's per-token time: how it was derived (a statistics line's batch over its
generation throughput, a window average, or the time between lines over the decode steps
between them), its cross-check against the timestamps, speculative decoding's acceptance,
its headline, the prefill and warm-up around it, and what the log cannot tell about it.
Every sentence is made from the values the tables and the plot show."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ncuflow.phases.model.capabilities import Capabilities
from ncuflow.phases.model.intervals import DecodeInterval
from ncuflow.phases.model.prefill import prefill_note, warmup_note
from ncuflow.phases.model.results import (
    PhaseKind,
    PhaseSpan,
    RunTiming,
    Segment,
)
from ncuflow.phases.model.runs import RunSettings
from ncuflow.phases.model.settings import ServerSetting, SettingSource
from ncuflow.phases.model.traces import BatchSample, ServerTrace


def timing_of_run(
    trace: ServerTrace,
    run_samples: Sequence[BatchSample],
    settings: RunSettings,
    main: Segment | None,
    intervals: Sequence[DecodeInterval],
    notes: list[str],
    cannot: list[str],
) -> RunTiming:
    """The run's timing record from its main segment; its notes and what the log cannot tell
    about its timing are added to ``notes`` and ``cannot``."""
    steady = main.phase(PhaseKind.STEADY) if main is not None else None
    if main is None or steady is None or steady.span is None or steady.token_s is None:
        return RunTiming(accept_len=main.accept_len if main else None)
    on_plateau = [i for i in intervals if main.plateau.start_s < i.end_s <= main.plateau.end_s]
    method, step, method_notes = step_method(
        trace.capabilities,
        main,
        on_plateau,
        steps_per_line=trace.steps_per_line,
        resolution_s=trace.time_resolution_s,
        with_throughput=any(i.from_throughput for i in on_plateau),
    )
    notes.extend(method_notes)
    notes.extend(spec_decoding_note(on_plateau))
    notes.extend(headline_note(trace.capabilities, main))
    notes.extend(_rough_timing_notes(steady.token_s.count, trace.time_resolution_s))
    steps = trace.steps_between_lines
    interval_s = steps * step if step and steps else None
    notes.extend(warmup_note(trace, run_samples, main, interval_s))
    notes.extend(prefill_note(trace.capabilities, run_samples, settings.prefill_rate, interval_s, trace.time_resolution_s))
    cannot.extend(_unseen_timing(trace, main, intervals, interval_s))
    return RunTiming(
        step_method=method,
        steady_step_s=step,
        accept_len=main.accept_len,
        headline_token_s=main.headline_token_s,
        headline_method=main.headline_method,
    )


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
        return _line_interval_method(capabilities, steps_per_line, resolution_s), step, []
    method = (
        f"per-token time = {capabilities.batch_field} / {capabilities.throughput_field} on each "
        f"{capabilities.stats_line} of the steady stretch"
    )
    if accept:
        method += f"; speculative decoding: step = per-token × accept len ({accept:.2f})"
    cross_check, notes = _interval_cross_check(
        capabilities,
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


def _line_interval_method(capabilities: Capabilities, steps_per_line: ServerSetting, resolution_s: float) -> str:
    """Step-counted lines without a throughput: the step from the time between lines."""
    method = (
        f"step = Δt between {capabilities.stats_line}s / {steps_per_line.value} steps ({steps_per_line.stated()}; "
        f"no {capabilities.throughput_field} on these lines)"
    )
    if resolution_s >= 0.5:
        method += f"; timestamps to {resolution_s:g} s limit each interval's resolution"
    return method


def _interval_cross_check(
    capabilities: Capabilities,
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
        f"; cross-check: the timestamps imply {implied:.0f} steps between {capabilities.stats_line}s "
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
            f"timestamps imply ≈{implied:.0f} decode steps between {capabilities.stats_line}s, "
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


def headline_note(capabilities: Capabilities, segment: Segment) -> list[str]:
    steady = segment.phase(PhaseKind.STEADY).token_s
    if segment.headline_method != "token-weighted" or steady is None:
        return []
    return [
        "speculative decoding: the acceptance length spreads on the steady stretch, so the "
        f"per-token time shown is token-weighted ({(segment.headline_token_s or 0) * 1000:.2f} ms, "
        f"request-seconds per output token, what a mean TPOT is); the median of the "
        f"{capabilities.stats_line}s would say {steady.median * 1000:.2f} ms"
    ]


def _rough_timing_notes(steady_intervals: int, resolution_s: float) -> list[str]:
    """Where the steady step time or the phase boundaries are only roughly known."""
    notes = []
    if steady_intervals < 3:
        notes.append(
            f"the steady stretch covers only {steady_intervals} statistics interval(s): "
            "treat its step time as a rough estimate"
        )
    if resolution_s >= 0.5:
        notes.append(
            f"timestamps have {resolution_s:g}-s resolution: phase boundaries are "
            f"uncertain by ±{resolution_s:g} s"
        )
    return notes


def _unseen_timing(
    trace: ServerTrace,
    main: Segment,
    intervals: Sequence[DecodeInterval],
    interval_s: float | None,
) -> list[str]:
    """What the log cannot tell about the run's timing: a drain past its last statistics line
    (step-counted lines), and where no line is a request's own, any per-request time."""
    cannot = []
    words = trace.capabilities
    last_decode = max((i.end_s for i in intervals), default=main.plateau.end_s)
    if words.step_counted_lines and main.phase(PhaseKind.DRAIN).span is None and main.plateau.end_s >= last_decode:
        cannot.append(
            f"drain not visible: the run's last {words.stats_line} still shows {main.level} "
            f"running requests, so they all finished within one {words.line_interval} "
            f"({trace.steps_between_lines} steps"
            + (f" ≈ {interval_s:.1f} s" if interval_s else "")
            + ") after it"
        )
    if not trace.capabilities.prefill_lines and trace.arrivals is None:
        cannot.append(
            f"{words.server} {words.stats_line}s carry no per-request times: admission span "
            "and TTFT are not measurable"
        )
    return cannot
