"""Decode intervals, ``#running-req`` plateaus and the segments of a server-log run.

A *decode interval* is the time between two consecutive Decode (or vLLM stats) lines of
one scheduler; it carries the per-token time the line reports, the output tokens
generated in it and whether an admission happened inside it. A *plateau* is a stretch of
Decode lines whose batch stays within ``2 × batch_tolerance`` of its largest value; a
one-line dip (a request finished, its replacement not yet in) does not end it. Peaks and
plateaus come from Decode lines only: a Prefill line's ``#running-req`` still counts
finished requests that have not been removed yet.

Each plateau is one *segment* (one concurrency level): its ramp (from the previous
plateau, or the run's start, to the first Decode line on the plateau), its warm-up
interval (last admission of the ramp → first Decode line after it), its steady and mixed
intervals, and its drain (the batch falling towards the next, lower plateau or to the
end of the run).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ncuflow.phases.model.results import PhaseSpan, Segment
from ncuflow.phases.model.stats import Distribution, distribution
from ncuflow.phases.model.traces import BatchSample

# A vLLM window whose prompt throughput is at most this fraction of its generation
# throughput (typically a cached prompt: only a few uncached tokens are computed) is not
# counted as an admission that disqualifies a steady window.
CACHED_PROMPT_FRACTION = 0.10


@dataclass(frozen=True)
class DecodeInterval:
    start_s: float
    end_s: float
    running: int  # batch size on the Decode line that ends the interval
    per_token_s: float | None
    tokens: float | None  # output tokens generated in the interval, all requests together
    admitting: bool  # a Prefill line, prompt throughput or a lockstep rank's admission inside
    retracted: bool
    accept_len: float | None
    cached_prompt: bool = False  # vLLM: prompt throughput small enough to ignore
    from_throughput: bool = False  # per-token time from gen throughput (not Δt / interval)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def per_token_from_throughput(sample: BatchSample) -> float | None:
    """Seconds per output token of one request over the interval ending at ``sample``:
    the scheduler's generated-token rate is shared by ``running`` requests."""
    if sample.gen_throughput is None or sample.gen_throughput <= 0 or sample.running <= 0:
        return None
    return sample.running / sample.gen_throughput


def is_decode(sample: BatchSample) -> bool:
    return sample.kind in ("decode", "stats")


def decode_intervals(
    samples: Sequence[BatchSample],
    *,
    engine: str,
    decode_log_interval: int,
    retraction_times: Sequence[float],
    lockstep_admissions: Sequence[float] = (),
) -> list[DecodeInterval]:
    """One interval per pair of consecutive Decode/stats lines of a run, in order."""
    intervals: list[DecodeInterval] = []
    previous: BatchSample | None = None
    prefill_since_previous = False
    for sample in samples:
        if not is_decode(sample):
            prefill_since_previous = True
            continue
        if previous is not None:
            intervals.append(
                _interval(
                    previous,
                    sample,
                    engine=engine,
                    decode_log_interval=decode_log_interval,
                    own_prefill=prefill_since_previous,
                    retracted=any(previous.time_s < t <= sample.time_s for t in retraction_times),
                    lockstep=any(previous.time_s < t < sample.time_s for t in lockstep_admissions),
                )
            )
        previous, prefill_since_previous = sample, False
    return intervals


def _interval(
    previous: BatchSample,
    sample: BatchSample,
    *,
    engine: str,
    decode_log_interval: int,
    own_prefill: bool,
    retracted: bool,
    lockstep: bool,
) -> DecodeInterval:
    span = sample.time_s - previous.time_s
    per_token = per_token_from_throughput(sample)
    if per_token is None and engine == "sglang" and span > 0 and sample.running > 0:
        per_token = span / decode_log_interval / (sample.accept_len or 1.0)
    tokens: float | None = None
    if sample.gen_throughput is not None:
        tokens = sample.gen_throughput * span
    elif per_token:
        tokens = sample.running * span / per_token
    prompt = sample.prompt_throughput or 0.0
    cached = 0 < prompt <= CACHED_PROMPT_FRACTION * (sample.gen_throughput or 0.0)
    admitting = own_prefill or lockstep or (prompt > 0 and not cached)
    return DecodeInterval(
        start_s=previous.time_s,
        end_s=sample.time_s,
        running=sample.running,
        per_token_s=per_token,
        tokens=tokens,
        admitting=admitting,
        retracted=retracted,
        accept_len=sample.accept_len,
        cached_prompt=cached,
        from_throughput=sample.gen_throughput is not None and sample.gen_throughput > 0,
    )


@dataclass(frozen=True)
class Plateau:
    first: int  # index into the run's decode samples
    last: int
    level: int


def find_plateaus(
    decodes: Sequence[BatchSample], *, tolerance: float, resolution_s: float, aborted: bool = False
) -> list[Plateau]:
    """Plateaus of ``#running-req`` over the Decode lines of a run, in time order.

    The run's highest plateau needs two lines (and one resolution step or two intervals);
    lower ones need four lines (three intervals), so a ramp that pauses for a line or two
    does not become a segment; so does every plateau of a run cut short by a traceback.
    """
    band = 2 * tolerance
    raw: list[Plateau] = []
    index = 0
    # a PD decode node is still ramping while many requests are still incoming
    running = [
        s.running
        if s.incoming is None or s.running >= (1 - band) * (s.running + s.incoming)
        else -1
        for s in decodes
    ]
    while index < len(running):
        if running[index] <= 0:
            index += 1
            continue
        plateau = _grow_plateau(running, index, band)
        raw.append(plateau)
        index = plateau.last + 1
    if not raw:
        return []
    top = max(p.level for p in raw)
    kept = [
        p
        for p in raw
        if p.last - p.first >= 3
        or (
            not aborted
            and p.level >= (1 - band) * top
            and p.last > p.first
            and (
                decodes[p.last].time_s - decodes[p.first].time_s >= resolution_s
                or p.last - p.first >= 2
            )
        )
    ]
    merged: list[Plateau] = []
    for plateau in kept:
        if merged and _within(plateau.level, merged[-1].level, band):
            merged[-1] = Plateau(
                merged[-1].first, plateau.last, max(merged[-1].level, plateau.level)
            )
        else:
            merged.append(plateau)
    return merged


def refilled_plateaus(
    plateaus: Sequence[Plateau],
    decodes: Sequence[BatchSample],
    intervals: Sequence[DecodeInterval],
) -> list[Plateau]:
    """Keep the first and the highest plateau, and any other the client kept refilling.

    A lower plateau with no admission on it is the tail of a drain (the last requests
    finishing), not a concurrency level of its own.
    """
    if not plateaus:
        return []
    top = max(p.level for p in plateaus)
    kept = []
    for number, plateau in enumerate(plateaus):
        refilled = any(
            i.admitting or i.cached_prompt for i in intervals[plateau.first : plateau.last]
        ) or any((d.incoming or 0) > 0 for d in decodes[plateau.first : plateau.last + 1])
        if number == 0 or plateau.level == top or refilled:
            kept.append(plateau)
    return kept


def _within(a: int, b: int, band: float) -> bool:
    return min(a, b) >= (1 - band) * max(a, b)


def _grow_plateau(running: Sequence[int], first: int, band: float) -> Plateau:
    level = floor = running[first]
    last = k = first
    while k + 1 < len(running):
        value = running[k + 1]
        if value > level and floor >= (1 - band) * value:
            level, last, k = value, k + 1, k + 1
        elif (1 - band) * level <= value <= level:
            floor, last, k = min(floor, value), k + 1, k + 1
        elif (
            0 < value < level
            and k + 2 < len(running)
            and (1 - band) * level <= running[k + 2] <= level
        ):
            k += 1  # a one-line dip: a request finished, its replacement not yet running
        else:
            break
    return Plateau(first, last, level)


@dataclass(frozen=True)
class SegmentInputs:
    samples: tuple[BatchSample, ...]
    decodes: tuple[BatchSample, ...]
    intervals: tuple[DecodeInterval, ...]  # intervals[k] ends at decodes[k + 1]
    resolution_s: float
    tolerance: float
    decode_log_interval: int


def build_segments(inputs: SegmentInputs, plateaus: Sequence[Plateau]) -> tuple[Segment, ...]:
    segments: list[Segment] = []
    decodes = inputs.decodes
    run_start, run_end = inputs.samples[0].time_s, inputs.samples[-1].time_s
    for number, plateau in enumerate(plateaus):
        first_s, last_s = decodes[plateau.first].time_s, decodes[plateau.last].time_s
        previous = plateaus[number - 1] if number else None
        following = plateaus[number + 1] if number + 1 < len(plateaus) else None
        if previous is None:
            start = run_start
        elif previous.level < plateau.level:
            start = decodes[previous.last].time_s
        else:
            start = first_s
        if following is None:
            end = run_end
        elif following.level < plateau.level:
            end = decodes[following.first].time_s
        else:
            end = last_s
        segments.append(_segment(inputs, number + 1, plateau, start, end))
    return tuple(segments)


def _segment(
    inputs: SegmentInputs, index: int, plateau: Plateau, start: float, end: float
) -> Segment:
    decodes = inputs.decodes
    first_s, last_s = decodes[plateau.first].time_s, decodes[plateau.last].time_s
    floor = (1 - 2 * inputs.tolerance) * plateau.level
    on_plateau = inputs.intervals[plateau.first : plateau.last]
    steady = [i for i in on_plateau if not i.admitting and not i.retracted and i.running >= floor]
    steady_ids = {id(i) for i in steady}
    mixed = [i for i in on_plateau if id(i) not in steady_ids]
    draining = [i for i in inputs.intervals if last_s < i.end_s <= end]
    ramping = [i for i in inputs.intervals if start < i.end_s <= first_s]
    accept = [i.accept_len for i in on_plateau if i.accept_len is not None]
    warmup = _warmup(inputs.samples, start, first_s)
    steady_tokens = distribution([i.per_token_s for i in steady if i.per_token_s is not None])
    return Segment(
        index=index,
        level=plateau.level,
        start_s=start,
        end_s=end,
        ramp=PhaseSpan("ramp", start, first_s) if first_s > start else None,
        warmup=warmup,
        plateau=PhaseSpan("plateau", first_s, last_s),
        steady=_longest_steady(on_plateau, steady_ids, inputs.resolution_s),
        steady_s=sum(i.duration_s for i in steady),
        mixed_s=sum(i.duration_s for i in mixed),
        drain=PhaseSpan("drain", last_s, end) if end > last_s else None,
        steady_token_s=steady_tokens,
        mixed_token_s=distribution([i.per_token_s for i in mixed if i.per_token_s is not None]),
        drain_token_s=distribution([i.per_token_s for i in draining if i.per_token_s is not None]),
        steady_tokens=_tokens(steady),
        mixed_tokens=_tokens(mixed),
        drain_tokens=_tokens(draining),
        steady_weighted_s=_weighted(steady),
        mixed_weighted_s=_weighted(mixed),
        drain_weighted_s=_weighted(draining),
        accept_len=statistics.fmean(accept) if accept else None,
        ramp_tokens=_tokens(ramping),
        ramp_weighted_s=_weighted(ramping),
        warmup_excess_s=_warmup_excess(
            warmup, steady_tokens, statistics.fmean(accept) if accept else None, inputs
        ),
    )


def _warmup_excess(
    warmup: PhaseSpan | None,
    steady_tokens: Distribution | None,
    accept: float | None,
    inputs: SegmentInputs,
) -> float | None:
    """The warm-up interval less the ordinary decode steps it holds: the Decode-line
    counter runs at an unknown phase, so on average half a decode-log interval of steps."""
    if warmup is None:
        return None
    if steady_tokens is None:
        return warmup.duration_s
    ordinary = inputs.decode_log_interval / 2 * steady_tokens.median * (accept or 1.0)
    return max(0.0, warmup.duration_s - ordinary)


def _warmup(samples: Sequence[BatchSample], start: float, first_s: float) -> PhaseSpan | None:
    """Last admission (Prefill line) of the ramp → the first Decode line after it."""
    last_prefill: int | None = None
    for number, sample in enumerate(samples):
        if sample.kind == "prefill" and start <= sample.time_s <= first_s:
            last_prefill = number
    if last_prefill is None:
        return None
    after = next((s for s in samples[last_prefill + 1 :] if is_decode(s)), None)
    if after is None:
        return None
    return PhaseSpan("warm-up", samples[last_prefill].time_s, after.time_s)


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
