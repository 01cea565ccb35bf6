"""Overload: stretches where the KV cache, not the client, sets the batch.

An interval (two consecutive Decode/statistics lines) is *overloaded* when requests still
wait for admission at its end (``#queue-req``, vLLM ``Waiting``) while the KV cache is full
(usage at least ``KV_FULL`` on a line of the interval), or when requests are pushed back to the
queue inside it (SGLang retraction lines, vLLM V0 preemption warnings). Only a format
that cannot log each one (``Capabilities.preemption_lines`` false: vLLM V1 prints none,
V0 every 50th) has a preemption *inferred* where, at a full cache, ``Running`` fell while
``Waiting`` rose; SGLang logs every retraction, so none logged is none. The queue around an overloaded interval is the cache's too (SGLang
admits against the cache its running requests will need, so its queue stays while the
usage saw-tooths under retractions): the whole queued stretch, from where the batch stopped
rising, is an *overload stretch* (``overload_stretches``): a segment of its own kind
(``overload``), with its own per-token time, never folded into steady, mixed, burst or
drain, and the batch levels it passes through are no concurrency levels.

Requests also wait for other reasons, each named with its cause (``queue_causes``):
the batch at its cap (``--max-running-requests``, ``--max-num-seqs``) with room in the
KV cache, or admissions still being prefilled (a burst of arrivals, a long prompt).

In words (``overload_notes``, ``overload_reason``): its overload stretches, why else its
requests waited, and why a run has no steady phase when overload is all it had; every
number is one the tables and the plot show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ncuflow.phases.model.capabilities import Capabilities
from ncuflow.phases.model.intervals import DecodeInterval
from ncuflow.phases.model.results import (
    NO_PHASE,
    PhaseKind,
    PhaseSpan,
    PhaseStats,
    QueueCause,
    RunOverload,
    Segment,
    SegmentKind,
)
from ncuflow.phases.model.stats import distribution

KV_FULL = 0.90  # KV cache usage from which a waiting request is waiting for cache


CAP_SHARE = 0.98  # a batch this close to its run's peak, with room in the cache, is at its cap


KV, CAP, PREFILL = "KV cache full", "batch at its cap", "admissions still prefilling"


def inferred_preemptions(interval: DecodeInterval) -> int:
    """Requests a full cache pushed back inside an interval without a line saying so:
    ``Running`` fell while ``Waiting`` rose (the smaller of the two moves)."""
    if interval.preempted or interval.kv_usage is None or interval.kv_usage < KV_FULL:
        return 0
    fell, rose = interval.start_running - interval.running, interval.queued - interval.start_queued
    return min(fell, rose) if fell > 0 and rose > 0 else 0


def queued(interval: DecodeInterval) -> bool:
    return max(interval.queued, interval.start_queued) > 0


def _overloaded(interval: DecodeInterval) -> bool:
    """Requests pushed back inside, or still waiting at its end line with the cache full."""
    if interval.retracted or interval.preempted:
        return True
    return interval.queued > 0 and interval.kv_usage is not None and interval.kv_usage >= KV_FULL


def overload_stretches(intervals: Sequence[DecodeInterval]) -> list[tuple[int, int]]:
    """(first, last) indices of the intervals of each overload stretch, in order.

    A stretch of consecutive intervals ending with requests waiting that holds an
    overloaded interval is overload from that interval on to where the queue empties
    (requests pushed back are readmitted while the cache frees), and back over the
    queued intervals before it where the batch did not rise (a rise with a queue is an
    admission ramp). Retractions with no queue count alone."""
    stretches: list[tuple[int, int]] = []
    index = 0

    def waiting(k: int) -> bool:
        return intervals[k].queued > 0 or _overloaded(intervals[k])

    while index < len(intervals):
        if not waiting(index):
            index += 1
            continue
        end = index
        while end + 1 < len(intervals) and waiting(end + 1):
            end += 1
        hit = next((k for k in range(index, end + 1) if _overloaded(intervals[k])), None)
        if hit is not None:
            first = hit
            while first > index and intervals[first - 1].running <= intervals[first - 1].start_running:
                first -= 1
            stretches.append((first, end))
        index = end + 1
    return stretches


def mark_overload(
    intervals: Sequence[DecodeInterval], *, infer_preemptions: bool
) -> tuple[list[DecodeInterval], list[tuple[int, int]]]:
    """The intervals with ``overloaded`` set, and the overload stretches. Preemptions are
    inferred (and counted) only where ``infer_preemptions``: a format whose log says each
    one (``Capabilities.preemption_lines``) logged none where it printed none."""
    stretches = overload_stretches(intervals)
    inside = {k for first, last in stretches for k in range(first, last + 1)}

    def inferred(interval: DecodeInterval) -> int:
        return inferred_preemptions(interval) if infer_preemptions else 0

    marked = [
        replace(i, overloaded=True, preempted=i.preempted or inferred(i))
        if k in inside
        else i
        for k, i in enumerate(intervals)
    ]
    return marked, stretches


def queue_causes(intervals: Sequence[DecodeInterval], peak: int) -> tuple[QueueCause, ...]:
    """Why requests waited, interval by interval: a full KV cache (overload), the batch held
    at its peak with requests waiting at both ends and room in the cache (its cap), or
    admissions still prefilling (a ramp's queue)."""
    found: dict[str, list[float]] = {}
    for interval in intervals:
        if not queued(interval):
            continue
        if interval.overloaded or (interval.kv_usage is not None and interval.kv_usage >= KV_FULL):
            cause = KV
        elif (
            peak > 0
            and min(interval.running, interval.start_running) >= CAP_SHARE * peak
            and min(interval.queued, interval.start_queued) > 0
        ):
            cause = CAP
        else:
            cause = PREFILL
        entry = found.setdefault(cause, [0.0, 0.0])
        entry[0] += interval.duration_s
        entry[1] = max(entry[1], interval.queued, interval.start_queued)
    return tuple(QueueCause(c, d, int(m)) for c, (d, m) in found.items())


def run_overload(
    segments: Sequence[Segment], intervals: Sequence[DecodeInterval], peak: int
) -> tuple[RunOverload, PhaseStats]:
    """A run's overload stretches together (its ``OVERLOAD`` phase), and the causes of its
    queues."""
    stretches = [s for s in segments if s.kind is SegmentKind.OVERLOAD]
    causes = queue_causes(intervals, peak)
    if not stretches:
        return RunOverload(queue_causes=causes), NO_PHASE
    inside = [i for i in intervals if i.overloaded]
    pairs = [(i.per_token_s, i.tokens) for i in inside if i.per_token_s and i.tokens]
    tokens = sum(t for _, t in pairs if t)
    stats = PhaseStats(
        span=PhaseSpan("overload", stretches[0].plateau.start_s, stretches[-1].plateau.end_s),
        seconds=sum(s.phase(PhaseKind.OVERLOAD).seconds for s in stretches),
        token_s=distribution([i.per_token_s for i in inside if i.per_token_s is not None]),
        weighted_s=sum(p * t for p, t in pairs if p and t) / tokens if tokens > 0 else None,
    )
    return RunOverload(preempted=sum(s.preempted for s in stretches), queue_causes=causes), stats


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def pushed_back(capabilities: Capabilities, segments: Sequence[Segment]) -> str:
    """How requests were pushed back in the overload stretches, in words ("" if none)."""
    stretches = [s for s in segments if s.kind is SegmentKind.OVERLOAD]
    count = sum(s.preempted for s in stretches)
    if not count:
        return ""
    if any(s.preemption_inferred for s in stretches):
        return (
            f"at least {count} request(s) preempted (inferred: {capabilities.server} logged no "
            "preemption; at a full cache the running batch fell while the queue rose)"
        )
    return f"{count} request(s) pushed back to the queue ({capabilities.preemption_word}s)"


def _stretch_facts(capabilities: Capabilities, segments: Sequence[Segment]) -> str:
    stretches = [s for s in segments if s.kind is SegmentKind.OVERLOAD]
    usage = [s.kv_usage_max for s in stretches if s.kv_usage_max is not None]
    facts = [f"up to {max(s.queued_max for s in stretches)} waiting"]
    if usage:
        facts.append(f"KV cache usage up to {max(usage):.0%}")
    levels = [s.level for s in stretches]
    facts.append(f"batch up to {max(levels)}")
    back = pushed_back(capabilities, segments)
    if back:
        facts.append(back)
    return "; ".join(facts)


def overload_notes(
    capabilities: Capabilities, segments: Sequence[Segment], overload: RunOverload, stretches: PhaseStats
) -> list[str]:
    """The run's overload stretches (``stretches``: its ``OVERLOAD`` phase) and the other
    causes of its queues."""
    notes = []
    if stretches.seconds > 0:
        per_token = stretches.token_s
        timing = (
            f": per-token {_ms(per_token.median)} ({per_token.p10 * 1000:.1f}–{per_token.p90 * 1000:.1f})"
            if per_token is not None
            else ""
        )
        count = sum(1 for s in segments if s.kind is SegmentKind.OVERLOAD)
        notes.append(
            f"overload: {stretches.seconds:.1f} s in {count} stretch(es) with requests waiting at a "
            f"full KV cache ({_stretch_facts(capabilities, segments)}){timing}; the KV cache, not "
            "the client, set the batch there: counted as its own phase, not steady, burst or drain"
        )
    for cause in overload.queue_causes:
        if cause.cause == CAP:
            notes.append(
                f"requests waited {cause.duration_s:.0f} s (up to {cause.max_queued}) with the batch at "
                f"its cap and room in the KV cache: the server's batch limit ({capabilities.batch_cap_option}) "
                "held them back"
            )
        elif cause.cause == PREFILL:
            notes.append(
                f"requests waited {cause.duration_s:.0f} s (up to {cause.max_queued}) while decoding "
                "went on, with room in the KV cache and the batch below its cap: admissions still "
                "being prefilled (a burst of arrivals or long prompts)"
            )
    return notes


def overload_reason(capabilities: Capabilities, segments: Sequence[Segment]) -> tuple[str, str] | None:
    """(a word, the sentence) for a run with no steady phase whose batch was in overload."""
    stretches = [s for s in segments if s.kind is SegmentKind.OVERLOAD]
    if not stretches:
        return None
    total = sum(s.phase(PhaseKind.OVERLOAD).seconds for s in stretches)
    return "overload", (
        "no steady decode phase: requests waited at a full KV cache "
        f"({_stretch_facts(capabilities, segments)}) for {total:.1f} s: the batch was set by the "
        "cache (overload), and held no level of the client's between two statistics lines without "
        f"an admission ({capabilities.admission_evidence})"
    )
