"""The segments of a server-log run: one per plateau or burst of its shape (``levels``).

A plateau segment has its ramp (from the valley before it, or the run's first line, to its
first Decode line), its warm-up (the ramp's last admission → the first Decode line after
it), its steady and mixed intervals (without and with an admission, Prefill line, vLLM
prompt throughput or another DP rank's admission) and its drain (its last Decode line → the
valley after it, or the run's last line; through any tail). A burst segment has no ramp
(a burst is never called one): its climb from the valley is its ``rise``, its rise and peak
intervals are in ``burst_*`` and its fall is its drain; it never held its level, so nothing
in it is steady.

Every interval is found by index, so building the segments of a run costs time linear in
its lines, however many segments it has.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ncuflow.phases.model.intervals import DecodeInterval, is_decode
from ncuflow.phases.model.levels import BURST, NO_SEGMENT, OVERLOAD, Item
from ncuflow.phases.model.prefill import PrefillRate, split_warmup
from ncuflow.phases.model.results import PhaseKind, PhaseSpan, PhaseStats, Segment, WarmupSplit
from ncuflow.phases.model.stats import Distribution, distribution
from ncuflow.phases.model.traces import BatchSample

# Speculative decoding whose acceptance length spreads by more than this (p90 − p10 over the
# median, over the steady intervals) makes the token-weighted per-token time the headline:
# the median of the lines weighs a low-acceptance interval (few tokens) like a high one.
ACCEPT_SPREAD = 0.2


@dataclass(frozen=True)
class SegmentInputs:
    samples: tuple[BatchSample, ...]
    decodes: tuple[BatchSample, ...]
    intervals: tuple[DecodeInterval, ...]  # intervals[k] ends at decodes[k + 1]
    resolution_s: float
    tolerance: float
    steps_per_line: int | None  # decode steps between two statistics lines, where counted so
    decode_at: tuple[int, ...] = ()  # index in samples of each Decode line
    prefill_rate: PrefillRate | None = None  # the scheduler's prefill throughput

    @staticmethod
    def of(
        samples: Sequence[BatchSample],
        intervals: Sequence[DecodeInterval],
        *,
        resolution_s: float,
        tolerance: float,
        steps_per_line: int | None,
        prefill_rate: PrefillRate | None = None,
    ) -> SegmentInputs:
        decode_at = tuple(i for i, s in enumerate(samples) if is_decode(s))
        return SegmentInputs(
            tuple(samples),
            tuple(samples[i] for i in decode_at),
            tuple(intervals),
            resolution_s,
            tolerance,
            steps_per_line,
            decode_at,
            prefill_rate,
        )


def build_segments(inputs: SegmentInputs, items: Sequence[Item]) -> tuple[Segment, ...]:
    kept = [item for item in items if item.kind not in NO_SEGMENT]
    return tuple(_segment(inputs, number, item) for number, item in enumerate(kept, start=1))


def _bounds(inputs: SegmentInputs, item: Item) -> tuple[float, float]:
    decodes = inputs.decodes
    start = inputs.samples[0].time_s if item.rise_from < 0 else decodes[item.rise_from].time_s
    end = inputs.samples[-1].time_s if item.fall_to >= len(decodes) else decodes[item.fall_to].time_s
    return start, end


def _segment(inputs: SegmentInputs, index: int, item: Item) -> Segment:
    rise = inputs.intervals[max(item.rise_from, 0) : item.first]
    on = inputs.intervals[item.first : item.last]
    base = _bare_segment(inputs, index, item, on)
    if item.kind == BURST:
        return _burst(base, [*rise, *on])
    if item.kind == OVERLOAD:
        return _overload(base, on)
    return _with_steady(base, inputs, item, rise, on)


def _bare_segment(
    inputs: SegmentInputs, index: int, item: Item, on: Sequence[DecodeInterval]
) -> Segment:
    """The segment's bounds, ramp, warm-up, plateau and drain, with nothing steady yet."""
    decodes, intervals = inputs.decodes, inputs.intervals
    first_s, last_s = decodes[item.first].time_s, decodes[item.last].time_s
    start, end = _bounds(inputs, item)
    falling = (
        intervals[item.last : item.fall_to]
        if item.fall_to < len(decodes)
        else intervals[item.last :]
    )
    accept = [i.accept_len for i in on if i.accept_len is not None]
    ramp = _ramp(inputs, item, start, first_s)
    return Segment(
        index=index,
        level=item.level,
        start_s=start,
        end_s=end,
        warmup=_warmup(inputs, item),
        plateau=PhaseSpan("plateau", first_s, last_s),
        phases={
            **({PhaseKind.RAMP: PhaseStats(ramp)} if ramp is not None else {}),
            PhaseKind.DRAIN: _stats(falling, PhaseSpan("drain", last_s, end) if end > last_s else None),
        },
        accept_len=statistics.fmean(accept) if accept else None,
        queued_max=max((max(i.queued, i.start_queued) for i in on), default=0),
    )


def _burst(base: Segment, climb: Sequence[DecodeInterval]) -> Segment:
    """A burst: its climb to the peak is its rise (no ramp, no warm-up, nothing steady). Its
    per-token time is that of its intervals without an admission where it has any (a vLLM
    window that prefilled a burst of prompts says more about the prefill than the batch);
    its tokens and token-weighted time count every interval (the reconciliation's shares)."""
    start, first_s = base.start_s, base.plateau.start_s
    shown = [i for i in climb if not i.admitting] or list(climb)
    return replace(
        base,
        kind=BURST,
        warmup=None,
        rise=PhaseSpan("rise", start, first_s) if first_s > start else None,
        phases={**_without_ramp(base), PhaseKind.BURST: replace(_stats(climb), token_s=_per_token(shown))},
    )


def _overload(base: Segment, on: Sequence[DecodeInterval]) -> Segment:
    """An overload stretch: like a burst, a rise and a drain; its own intervals in
    ``overload_*``, with the queue, the cache and the requests pushed back."""
    start, first_s = base.start_s, base.plateau.start_s
    usage = [i.kv_usage for i in on if i.kv_usage is not None]
    return replace(
        base,
        kind=OVERLOAD,
        warmup=None,
        rise=PhaseSpan("rise", start, first_s) if first_s > start else None,
        phases={**_without_ramp(base), PhaseKind.OVERLOAD: _stats(on, base.plateau, seconds=sum(i.duration_s for i in on))},
        kv_usage_max=max(usage) if usage else None,
        preempted=sum(i.preempted for i in on),
        preemption_inferred=any(i.preempted for i in on) and not any(i.retracted for i in on),
    )


def _without_ramp(base: Segment) -> dict[PhaseKind, PhaseStats]:
    """A segment's phases less its ramp: a burst or an overload stretch rises instead."""
    return {kind: stats for kind, stats in base.phases.items() if kind is not PhaseKind.RAMP}


def _with_steady(
    base: Segment,
    inputs: SegmentInputs,
    item: Item,
    rise: Sequence[DecodeInterval],
    on: Sequence[DecodeInterval],
) -> Segment:
    """A plateau's intervals split into steady (no admission, batch held) and mixed."""
    floor = (1 - 2 * inputs.tolerance) * item.level
    steady = [i for i in on if not i.admitting and not i.retracted and i.running >= floor]
    steady_ids = {id(i) for i in steady}
    mixed = [i for i in on if id(i) not in steady_ids]
    steady_tokens = _per_token(steady)
    headline, method = _headline(steady, steady_tokens)
    split = _warmup_split(base.warmup, _last_admission_tokens(inputs, item), headline, base.accept_len, inputs)
    return replace(
        base,
        phases={
            **base.phases,
            PhaseKind.STEADY: _stats(
                steady, _longest_steady(on, steady_ids, inputs.resolution_s), seconds=sum(i.duration_s for i in steady)
            ),
            PhaseKind.MIXED: _stats(mixed, None, seconds=sum(i.duration_s for i in mixed)),
            PhaseKind.RAMP: PhaseStats(base.ramp, tokens=_tokens(rise), weighted_s=_weighted(rise)),
        },
        headline_token_s=headline,
        headline_method=method,
        warmup_split=split,
    )


def _headline(
    steady: Sequence[DecodeInterval], tokens: Distribution | None
) -> tuple[float | None, str]:
    """The steady per-token time a segment is summed up by: the median of its lines, or,
    where speculative decoding's acceptance length spreads (``ACCEPT_SPREAD``), the
    token-weighted mean (request-seconds per token, what a mean TPOT is)."""
    if tokens is None:
        return None, ""
    accepts = sorted(i.accept_len for i in steady if i.accept_len)
    weighted = _weighted(steady)
    if len(accepts) >= 2 and weighted is not None:
        median = statistics.median(accepts)
        low = accepts[int(0.1 * (len(accepts) - 1))]
        high = accepts[round(0.9 * (len(accepts) - 1))]
        if median > 0 and (high - low) / median > ACCEPT_SPREAD:
            return weighted, "token-weighted"
    return tokens.median, "median"


def _ramp(inputs: SegmentInputs, item: Item, start: float, first_s: float) -> PhaseSpan | None:
    """From the valley (or the run's first line) to the first Decode line of the item; with
    1-s timestamps an admission ramp that fits in one second is kept (shown as "<1 s")."""
    if first_s > start:
        return PhaseSpan("ramp", start, first_s)
    if inputs.resolution_s >= 0.5 and _admissions_before(inputs, item):
        return PhaseSpan("ramp", start, first_s)
    return None


def _ramp_lines(inputs: SegmentInputs, item: Item) -> range:
    """Indices in samples of the lines from the valley (or the run's start) to the item's first Decode line."""
    low = 0 if item.rise_from < 0 else inputs.decode_at[item.rise_from] + 1
    return range(low, inputs.decode_at[item.first])


def _admissions_before(inputs: SegmentInputs, item: Item) -> bool:
    return any(inputs.samples[i].kind == "prefill" for i in _ramp_lines(inputs, item))


def _warmup(inputs: SegmentInputs, item: Item) -> PhaseSpan | None:
    """The ramp's last admission (Prefill line) → the first Decode line after it."""
    lines = _ramp_lines(inputs, item)
    last = next((i for i in reversed(lines) if inputs.samples[i].kind == "prefill"), None)
    if last is None:
        return None
    after = bisect.bisect_right(inputs.decode_at, last)
    if after >= len(inputs.decode_at):
        return None
    return PhaseSpan("warm-up", inputs.samples[last].time_s, inputs.decodes[after].time_s)


def _last_admission_tokens(inputs: SegmentInputs, item: Item) -> int:
    """The new tokens of the ramp's last admission (its Prefill line)."""
    lines = _ramp_lines(inputs, item)
    last = next((i for i in reversed(lines) if inputs.samples[i].kind == "prefill"), None)
    return (inputs.samples[last].new_tokens or 0) if last is not None else 0


def _warmup_split(
    warmup: PhaseSpan | None,
    tokens: int,
    steady_token_s: float | None,
    accept: float | None,
    inputs: SegmentInputs,
) -> WarmupSplit | None:
    """The warm-up interval less the last admission's own prefill (its tokens over the
    prefill throughput) and the ordinary decode steps it holds (the Decode-line counter
    runs at an unknown phase, so on average half a decode-log interval of steps)."""
    if warmup is None:
        return None
    ordinary = 0.0
    if steady_token_s is not None and inputs.steps_per_line:
        ordinary = inputs.steps_per_line / 2 * steady_token_s * (accept or 1.0)
    return split_warmup(warmup.duration_s, tokens, inputs.prefill_rate, ordinary)


def _longest_steady(
    on_plateau: Sequence[DecodeInterval], steady_ids: set[int], resolution_s: float
) -> PhaseSpan | None:
    best: tuple[float, float, int] | None = None
    current: list[DecodeInterval] = []
    for interval in [*on_plateau, None]:
        if interval is not None and id(interval) in steady_ids:
            current.append(interval)
            continue
        if current:
            span = (current[0].start_s, current[-1].end_s, len(current))
            if best is None or (span[1] - span[0], span[2]) > (best[1] - best[0], best[2]):
                best = span
        current = []
    if best is None or not (best[1] - best[0] >= resolution_s or best[2] >= 2):
        return None
    return PhaseSpan("steady", best[0], best[1])


def _per_token(intervals: Sequence[DecodeInterval]) -> Distribution | None:
    return distribution([i.per_token_s for i in intervals if i.per_token_s is not None])


def _stats(intervals: Sequence[DecodeInterval], span: PhaseSpan | None = None, *, seconds: float = 0.0) -> PhaseStats:
    """A phase's record from its intervals."""
    return PhaseStats(span, seconds, _per_token(intervals), _tokens(intervals), _weighted(intervals))


def _tokens(intervals: Sequence[DecodeInterval]) -> float | None:
    known = [i.tokens for i in intervals if i.tokens is not None]
    return sum(known) if known else None


def _weighted(intervals: Sequence[DecodeInterval]) -> float | None:
    """Token-weighted per-token time: request-seconds of decoding per output token."""
    pairs = [(i.per_token_s, i.tokens) for i in intervals if i.per_token_s and i.tokens]
    total = sum(tokens for _, tokens in pairs if tokens)
    if not pairs or total <= 0:
        return None
    return sum(per_token * tokens for per_token, tokens in pairs if per_token and tokens) / total
