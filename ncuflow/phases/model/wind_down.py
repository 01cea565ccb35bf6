"""A level's wind-down: the steps its batch falls through as a multi-turn client's sessions
finish one by one while the others still send turns (see ``levels``: no level of the
client's, no segment). The level's drain runs through them; the run names each wind-down
once, with the steps, their time and their own per-token time (the median of the
intervals from the first step to the last: a smaller batch decodes faster, so it is never
the level's)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ncuflow.phases.model.intervals import DecodeInterval
from ncuflow.phases.model.levels import NO_SEGMENT, WIND_DOWN, Item
from ncuflow.phases.model.stats import Distribution, distribution
from ncuflow.phases.model.traces import BatchSample


@dataclass(frozen=True)
class WindDown:
    """The wind-down steps after one level: their batch sizes, time and per-token time."""

    level: int
    steps: tuple[int, ...]
    start_s: float
    end_s: float
    per_token_s: Distribution | None


def wind_downs(
    items: Sequence[Item], decodes: Sequence[BatchSample], intervals: Sequence[DecodeInterval]
) -> list[WindDown]:
    """Each level's wind-down steps (consecutive, tails between them included), in order."""
    found: list[WindDown] = []
    level: Item | None = None
    chain: list[Item] = []

    def close() -> None:
        steps = [i for i in chain if i.kind == WIND_DOWN]
        if level is not None and steps:
            first, last = chain[0].first, chain[-1].last
            on = intervals[first:last]
            found.append(WindDown(
                level.level,
                tuple(i.level for i in chain),
                decodes[first].time_s,
                decodes[last].time_s,
                distribution([i.per_token_s for i in on if i.per_token_s is not None]),
            ))

    for item in items:
        if item.kind in NO_SEGMENT:
            chain.append(item)
            continue
        close()
        level, chain = item, []
    close()
    return found


def wind_down_notes(found: Sequence[WindDown]) -> list[str]:
    notes = []
    for wind in found:
        steps = " → ".join(str(s) for s in wind.steps)
        per_token = (
            f", per-token {wind.per_token_s.median * 1000:.2f} ms ({wind.per_token_s.p10 * 1000:.1f}–"
            f"{wind.per_token_s.p90 * 1000:.1f})" if wind.per_token_s is not None else ""
        )
        notes.append(
            f"wind-down of level {wind.level}: the batch stepped down {steps} over "
            f"{wind.end_s - wind.start_s:.0f} s{per_token} (sessions finishing while the others "
            "still sent requests): counted in that level's drain, not as concurrency levels"
        )
    return notes
