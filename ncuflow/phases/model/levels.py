"""The shape of a run: the levels its batch held, the bursts it peaked in, and what rises
into and falls out of each. One rule, the same everywhere in a run:

- a *plateau* is a stretch of Decode lines whose batch stays within ``2 × batch_tolerance``
  of its level (a one-line dip does not end it) and is *held*: at least three lines (two
  intervals); the run's top level also counts with two lines a timestamp step apart. A run
  cut short by a traceback needs four lines for every level. A stretch whose batch falls
  line after line (never rising, falling on two thirds of its intervals) is no level held,
  however slowly it falls: requests finishing;
- a held plateau that the batch *fell* to from the item before it, without dipping below
  it on the way and with no admission while on it, is a *tail*: the last requests of what
  came before finishing. A tail is no segment: the drain of the item before it runs on
  through it;
- a held plateau the batch fell to in the same way *with* admissions on it, held for less
  than ``WIND_DOWN_SHARE`` of the level it falls from (the nearest segment before it), is a
  step of that level's *wind-down*: sessions of a multi-turn client finishing one by one,
  the others still sending turns (114, 102, 79, 53 … after a level of 128). No level of the
  client's, no segment: like a tail, the drain of the level runs through it, and the run
  names its wind-down with its own per-token time (``wind_down_notes``). A level held as
  long as the one before it (a sweep stepping down) stays a level.
  Every other held plateau is a segment (a concurrency level);
- between two held plateaus (or the run's start and end, at batch 0), a peak above both
  that the batch did not hold is a *burst*: a segment of its own, whose level is its peak,
  with no steady phase. It is never part of a ramp or a drain;
- between two consecutive items the batch has a lowest point (the *valley*): the item on
  the left drains down to it (its *drain*), the item on the right rises from it (its
  *ramp*). A rise straight from one level to a higher one is the higher one's ramp, and the
  lower one has no drain; a fall is the higher one's drain.

Under KV-cache retractions only the highest plateau is a level (the batch saw-tooths
between sizes the client never chose), and no bursts are sought in the saw-tooth.

An *overload* stretch (``overload``: requests waiting at a full KV cache, or pushed back to
the queue) is an item of its own: the levels its batch passes through are set by the cache,
not by the client, so no plateau or burst is sought inside it; it is an anchor between
which the others are found, and the batch falls from it to the next valley (its drain).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from ncuflow.phases.model.intervals import DecodeInterval
from ncuflow.phases.model.results import SegmentKind
from ncuflow.phases.model.traces import BatchSample

PLATEAU, BURST, OVERLOAD = SegmentKind.PLATEAU, SegmentKind.BURST, SegmentKind.OVERLOAD
TAIL = "tail"  # an item that is no segment: the drain of the one before it runs through it
WIND_DOWN = "wind-down"  # … likewise, with admissions on it: a step of a level's wind-down
NO_SEGMENT = (TAIL, WIND_DOWN)
WIND_DOWN_SHARE = 1 / 3  # a step held less than this share of its level's time is wind-down


@dataclass(frozen=True, slots=True)
class Plateau:
    first: int  # index into the run's Decode lines
    last: int
    level: int


@dataclass(frozen=True, slots=True)
class Item:
    """One plateau, tail or burst of a run, with the valleys before and after it: indices
    into the run's Decode lines (-1: the run's start; len(lines): the run's end)."""

    kind: str
    first: int
    last: int
    level: int
    rise_from: int = -1
    fall_to: int = -1


def within(a: int, b: int, band: float) -> bool:
    return min(a, b) >= (1 - band) * max(a, b)


def masked_batch(decodes: Sequence[BatchSample], band: float) -> list[int]:
    """#running-req of each Decode line; -1 where a PD decode node is still ramping (many
    requests still arriving by KV transfer)."""
    return [
        s.running
        if s.incoming is None or s.running >= (1 - band) * (s.running + s.incoming)
        else -1
        for s in decodes
    ]


def grow_plateau(running: Sequence[int], first: int, band: float) -> Plateau:
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


def raw_plateaus(running: Sequence[int], band: float) -> list[Plateau]:
    found: list[Plateau] = []
    index = 0
    while index < len(running):
        if running[index] <= 0:
            index += 1
            continue
        plateau = grow_plateau(running, index, band)
        found.append(plateau)
        index = plateau.last + 1
    return found


def falling(values: Sequence[int]) -> bool:
    """The batch fell line after line (never rising, falling on at least two thirds of its
    intervals): requests finishing, not a level it held."""
    steps = list(itertools.pairwise(values))
    if not steps or any(b > a for a, b in steps):
        return False
    return 3 * sum(1 for a, b in steps if b < a) >= 2 * len(steps)


def held_plateaus(
    decodes: Sequence[BatchSample], running: Sequence[int], *, band: float, resolution_s: float,
    aborted: bool, walls: Sequence[Plateau] = (),
) -> list[Plateau]:
    """The plateaus the batch held (see the module), same-level neighbours with no peak
    between them merged; never across one of ``walls`` (the overload stretches: anchors of
    their own, which a merged plateau would swallow)."""
    raw = raw_plateaus(running, band)
    if not raw:
        return []
    top = max(p.level for p in raw)

    def held(p: Plateau) -> bool:
        lines = p.last - p.first + 1
        if falling(running[p.first : p.last + 1]):
            return False
        if aborted:
            return lines >= 4
        if lines >= 3:
            return True
        return (
            lines == 2
            and p.level >= (1 - band) * top
            and decodes[p.last].time_s - decodes[p.first].time_s >= resolution_s
        )

    merged: list[Plateau] = []
    for plateau in (p for p in raw if held(p)):
        if merged and within(plateau.level, merged[-1].level, band):
            between = running[merged[-1].last + 1 : plateau.first]
            ceiling = max(plateau.level, merged[-1].level)
            walled = any(merged[-1].last < w.first and w.last < plateau.first for w in walls)
            if not walled and not any(v > ceiling and not within(v, ceiling, band) for v in between):
                merged[-1] = Plateau(merged[-1].first, plateau.last, ceiling)
                continue
        merged.append(plateau)
    return merged


def _bases(values: Sequence[int], wall: int) -> list[float]:
    """For each line, the lowest batch between it and the nearest higher line before it
    (or, if there is none, down to the anchor ``wall``, which counts as ground at its own
    level): one pass with a stack, linear in the lines."""
    inf = float("inf")
    stack: list[list[float]] = []  # [value, lowest value between it and the entry above]
    bases: list[float] = []
    for value in values:
        low = inf
        while stack:
            low = min(low, stack[-1][1])
            if stack[-1][0] > value:
                break
            low = min(low, stack.pop()[0])
        if stack:
            stack[-1][1] = low
            bases.append(low)
        else:
            bases.append(min(low, wall))
        stack.append([value, inf])
    return bases


def find_bursts(
    running: Sequence[int], lo: int, hi: int, left: int, right: int, band: float
) -> list[Plateau]:
    """Peaks in running[lo..hi] (the lines between two anchors at batch ``left`` and
    ``right``) that rise above the lowest point on either side of them (down to the nearest
    higher line, or the anchor) by more than the band: bursts, in time order. A peak's
    neighbours within the band of it belong to it."""
    if lo > hi:
        return []
    values = list(running[lo : hi + 1])
    before = _bases(values, left)
    after = _bases(values[::-1], right)[::-1]
    peak = [
        v > 0 and v > max(a, b) and not within(v, int(max(a, b, 0)), band)
        for v, a, b in zip(values, before, after, strict=True)
    ]
    found: list[Plateau] = []
    index = 0
    while index < len(values):
        if not peak[index]:
            index += 1
            continue
        last = index
        while last + 1 < len(values) and peak[last + 1]:
            last += 1
        level = max(values[index : last + 1])
        first = index
        floor = found[-1].last - lo if found else -1
        while first - 1 > floor and values[first - 1] > 0 and within(values[first - 1], level, band):
            first -= 1
        while last + 1 < len(values) and not peak[last + 1] and values[last + 1] > 0 and within(values[last + 1], level, band):
            last += 1
        found.append(Plateau(lo + first, lo + last, level))
        index = last + 1
    return found


def _valley(running: Sequence[int], lo: int, hi: int, *, rising: bool) -> int:
    """The lowest line of running[lo..hi]: the last of equal lows before a rise, the first
    before a fall."""
    low = min(running[lo : hi + 1])
    indices = [i for i in range(lo, hi + 1) if running[i] == low]
    return indices[-1] if rising else indices[0]


def refilled(plateau: Plateau, decodes: Sequence[BatchSample], intervals: Sequence[DecodeInterval]) -> bool:
    """Requests were admitted while the batch stayed on the plateau."""
    on = intervals[plateau.first : plateau.last]
    return any(i.admitting or i.cached_prompt for i in on) or any(
        (d.incoming or 0) > 0 for d in decodes[plateau.first : plateau.last + 1]
    )


def run_shape(
    decodes: Sequence[BatchSample],
    intervals: Sequence[DecodeInterval],
    *,
    band: float,
    resolution_s: float,
    aborted: bool,
    retractions: bool,
    overload: Sequence[tuple[int, int]] = (),
) -> list[Item]:
    """The plateaus, tails, bursts and overload stretches of one run in time order, with
    their valleys. ``overload``: (first, last) intervals of each overload stretch."""
    running = masked_batch(decodes, band)
    stretches = [Plateau(first, last + 1, max(running[first : last + 2])) for first, last in overload]
    free = list(running)
    for stretch in stretches:
        free[stretch.first : stretch.last + 1] = [-1] * (stretch.last - stretch.first + 1)
    held = held_plateaus(decodes, free, band=band, resolution_s=resolution_s, aborted=aborted, walls=stretches)
    if retractions and held:
        held = [max(held, key=lambda p: (p.level, p.last - p.first))]
    kinds = {id(p): PLATEAU for p in held} | {id(s): OVERLOAD for s in stretches}
    anchors = sorted([*held, *stretches], key=lambda p: p.first)
    items: list[tuple[str, Plateau]] = []
    bounds = [Plateau(-1, -1, 0), *anchors, Plateau(len(running), len(running), 0)]
    for number, (left, right) in enumerate(itertools.pairwise(bounds)):
        if not (aborted or retractions) and len(running) >= 2:
            for burst in find_bursts(free, left.last + 1, right.first - 1, left.level, right.level, band):
                items.append((BURST, burst))
        if number < len(anchors):
            items.append((kinds[id(right)], right))
    return _with_valleys(_tails(items, running, decodes, intervals, band), running)


def _tails(
    items: Sequence[tuple[str, Plateau]],
    running: Sequence[int],
    decodes: Sequence[BatchSample],
    intervals: Sequence[DecodeInterval],
    band: float,
) -> list[tuple[str, Plateau]]:
    """A held plateau the batch fell to from the item before it, with no dip below it on the
    way, is a tail (no admission on it) or a step of a wind-down (held briefly against the
    level before it)."""
    out: list[tuple[str, Plateau]] = []
    for kind, plateau in items:
        if kind == PLATEAU and out:
            before = out[-1][1]
            fell = before.level > plateau.level and not within(before.level, plateau.level, band)
            between = [v for v in running[before.last + 1 : plateau.first] if v > 0]
            dipped = bool(between) and min(between) < (1 - band) * plateau.level
            if fell and not dipped:
                if not refilled(plateau, decodes, intervals):
                    kind = TAIL
                elif _brief(plateau, _owner(out), decodes):
                    kind = WIND_DOWN
        out.append((kind, plateau))
    return out


def _owner(items: Sequence[tuple[str, Plateau]]) -> tuple[str, Plateau] | None:
    """The last item that is a segment."""
    return next((item for item in reversed(items) if item[0] not in NO_SEGMENT), None)


def _brief(plateau: Plateau, owner: tuple[str, Plateau] | None, decodes: Sequence[BatchSample]) -> bool:
    """Held for less than ``WIND_DOWN_SHARE`` of the plateau of the level it fell from."""
    if owner is None or owner[0] != PLATEAU:
        return False
    level = owner[1]
    held = decodes[plateau.last].time_s - decodes[plateau.first].time_s
    return held < WIND_DOWN_SHARE * (decodes[level.last].time_s - decodes[level.first].time_s)


def _with_valleys(items: Sequence[tuple[str, Plateau]], running: Sequence[int]) -> list[Item]:
    """Each item with the valley it rises from and the one it falls to; the fall of a tail or
    a wind-down step belongs to the last item before it that is a segment."""
    end = len(running)
    valleys = [-1]
    for (_, left), (_, right) in itertools.pairwise(items):
        rising = right.level > left.level
        valleys.append(_valley(running, left.last, right.first, rising=rising))
    valleys.append(end)
    shaped = [
        Item(kind, p.first, p.last, p.level, valleys[n], valleys[n + 1])
        for n, (kind, p) in enumerate(items)
    ]
    out: list[Item] = []
    for item in shaped:
        if item.kind in NO_SEGMENT:
            owner = next((k for k in range(len(out) - 1, -1, -1) if out[k].kind not in NO_SEGMENT), None)
            if owner is not None:
                o = out[owner]
                out[owner] = Item(o.kind, o.first, o.last, o.level, o.rise_from, item.fall_to)
        out.append(item)
    return out
