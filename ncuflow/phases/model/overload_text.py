"""What an overloaded run says in words: its overload stretches (requests waiting at a full
KV cache, requests pushed back), why else its requests waited, and why it has no steady
phase when overload is all it had. Every number is one the tables and the plot show."""

from __future__ import annotations

from collections.abc import Sequence

from ncuflow.phases.model.capabilities import Capabilities
from ncuflow.phases.model.overload import CAP, PREFILL
from ncuflow.phases.model.results import PhaseKind, PhaseStats, RunOverload, Segment, SegmentKind


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

