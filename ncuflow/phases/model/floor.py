"""No per-token time below what one request alone achieves, unflagged.

A request decoding alone is as fast as decoding gets: a larger batch never makes one
request's tokens come faster. A per-token time well below the *lone-request time* (the
fastest steady per-token time of the log's level-1 plateaus, per scheduler) therefore cannot be
true: it comes from a statistics interval over which the batch shrank while the line counted
it at the end (vLLM's ``Running`` at the end of its 10-s window, SGLang's ``#running-req``
at its Decode line) — the window-end snapshot bias. The intervals already use the mean of
the batch at both ends; any segment value that is still more than ``TOLERANCE`` below the
lone-request time is flagged (``Segment.below_floor``; ``!`` in the tables) and said in a
note, as a lower bound. A log with no lone request cannot be checked this way; the note
on window-averaged per-token times says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ncuflow.phases.model.results import PhaseKind, RunAnalysis, Segment, SegmentKind
from ncuflow.phases.model.stats import Distribution

TOLERANCE = 0.05


def lone_request_times(runs: Sequence[RunAnalysis]) -> dict[str | None, float]:
    """Per scheduler: the fastest steady per-token time of its level-1 plateaus (requests
    alone can differ, e.g. in context length; the fastest is the floor for all)."""
    found: dict[str | None, list[float]] = {}
    for run in runs:
        for segment in run.shape.segments:
            if (
                segment.kind is SegmentKind.PLATEAU
                and segment.level == 1
                and segment.phase(PhaseKind.STEADY).span is not None
                and segment.headline_token_s is not None
            ):
                found.setdefault(run.identity.rank, []).append(segment.headline_token_s)
    return {rank: min(values) for rank, values in found.items()}


def _values(segment: Segment) -> list[tuple[str, float | None]]:
    lone = segment.level == 1 and segment.kind is SegmentKind.PLATEAU  # those make the floor
    return [
        ("steady", segment.headline_token_s if segment.phase(PhaseKind.STEADY).span is not None and not lone else None),
        *(
            (kind.value, _median(segment.phase(kind).token_s))
            for kind in (PhaseKind.MIXED, PhaseKind.BURST, PhaseKind.OVERLOAD, PhaseKind.DRAIN)
        ),
    ]


def _median(values: Distribution | None) -> float | None:
    return values.median if values is not None else None


def flag_below_floor(runs: Sequence[RunAnalysis]) -> list[RunAnalysis]:
    floors = lone_request_times(runs)
    out = []
    for run in runs:
        floor = floors.get(run.identity.rank)
        if floor is None:
            out.append(run)
            continue
        limit = floor * (1 - TOLERANCE)
        segments = []
        flagged: list[str] = []
        for segment in run.shape.segments:
            below = tuple(
                name for name, value in _values(segment) if value is not None and value < limit
            )
            for name, value in _values(segment):
                if name in below and value is not None:
                    flagged.append(f"segment {segment.index} {name} {value * 1000:.2f} ms")
            segments.append(replace(segment, below_floor=below) if below else segment)
        notes = list(run.findings.notes)
        if flagged:
            shown = ", ".join(flagged[:6]) + (f" and {len(flagged) - 6} more" if len(flagged) > 6 else "")
            notes.append(
                f"window-end bias: {shown} below the lone-request per-token time "
                f"({floor * 1000:.2f} ms, the fastest level-1 plateau of the log): one request cannot decode "
                "faster in a larger batch, so the batch shrank inside those statistics intervals "
                "while the line counted it at their end; read them as lower bounds (marked ! in "
                "the tables)"
            )
        out.append(
            replace(
                run,
                shape=replace(run.shape, segments=tuple(segments)),
                findings=replace(run.findings, notes=tuple(notes)),
                timing=replace(run.timing, lone_request_token_s=floor),
            )
        )
    return out
