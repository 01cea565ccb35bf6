"""Hot spots of a launch: its top instructions by warp-stall samples and by excess global sectors.

From a launch's source counters (``ncuflow.read.source_counters``), streamed one list at a time:

- the top N instructions by warp samples (``smsp__pcsamp_sample_count``; where a report lacks
  it, ncu 2020-2021, the sum of its stall-reason counters, which equals it wherever both are
  held), each with every counter at its address (the stall reasons among them);
- the top N by excess global sectors: the L2 sectors its global accesses requested minus
  those ideally coalesced accesses would have (``SECTOR_PAIRS``), where the launch counts them;
- with line info (``Locator``), every counter summed per source ``file:line`` and the top N
  lines by samples (by executed instructions where the launch was not sampled).

Ties rank by address. Only the top N instructions are kept, whatever the lists' length
(``heapq.nsmallest``), plus one sum per source line and counter; the lines come from the
cubin's line table, which bounds them.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ncuflow.read.launch import KernelName
from ncuflow.read.metric_lists import DamagedList, Number
from ncuflow.read.source_counters import (
    EXECUTED,
    SAMPLES,
    SECTOR_PAIRS,
    LaunchSource,
    NcuReportSource,
    PerPcSource,
    SectorPair,
    iter_launch_sources,
    stall_reason,
)
from ncuflow.read.source_text import (
    UNDISASSEMBLED,
    LaunchText,
    Location,
    Place,
    ReportText,
    open_text,
    refuse_damaged_for_ncu_report,
)

Locator = Callable[[int], Location | None]
_LOCATIONS_CACHED = 1 << 16


def samples_in(counters: Mapping[str, Number]) -> Number | None:
    """Warp samples in these counters: the sample count, else the sum of the stall reasons; None
    where none is held."""
    if SAMPLES in counters:
        return counters[SAMPLES]
    reasons = [value for name, value in counters.items() if stall_reason(name)]
    return sum(reasons) if reasons else None


def reasons_in(counters: Mapping[str, Number]) -> list[tuple[str, Number]]:
    """(stall reason, samples) held in these counters, the most first (ties by name), zeros left out."""
    found = [(reason, value) for name, value in counters.items() if (reason := stall_reason(name)) and value]
    return sorted(found, key=lambda item: (-item[1], item[0]))


def excess_in(counters: Mapping[str, Number], pair: SectorPair | None) -> Number | None:
    if pair is None or pair.theoretical not in counters or pair.ideal not in counters:
        return None
    return counters[pair.theoretical] - counters[pair.ideal]


@dataclass(frozen=True)
class Instruction:
    """One instruction (its address, PC) and every source counter the launch holds there."""

    address: int
    counters: Mapping[str, Number]


@dataclass(frozen=True)
class SourceLine:
    """One source line and each counter summed over the instructions line info maps to it."""

    file: str
    line: int
    counters: Mapping[str, Number]
    instructions: int  # addresses of its executed-instructions list that map to it


@dataclass(frozen=True)
class LaunchHotspots:
    """What the source view shows of one launch."""

    report: str
    range_index: int
    action_index: int
    kernel: KernelName
    counters: tuple[str, ...]  # the source counters it holds
    pair: SectorPair | None  # the sector counters its excess is read from
    total_samples: Number | None  # None: not sampled
    total_excess: Number | None  # None: sectors not counted
    by_samples: tuple[Instruction, ...]
    by_excess: tuple[Instruction, ...]
    lines: tuple[SourceLine, ...] = ()
    places: Mapping[int, Place] = field(default_factory=dict)
    note: str | None = None  # why lines or text are missing

    @property
    def sampled(self) -> bool:
        """Whether it holds warp samples (its lines rank by them; else by executed instructions)."""
        return bool(self.total_samples)

    @property
    def instructions(self) -> tuple[Instruction, ...]:
        """The instructions shown, each once: by samples, then the rest by excess."""
        seen = {i.address for i in self.by_samples}
        return self.by_samples + tuple(i for i in self.by_excess if i.address not in seen)


# --- the lists as (address, value) streams


def _summed(source: PerPcSource, names: Iterable[str]) -> Iterator[tuple[int, Number]]:
    """The per-address sum of several lists (a dict of the addresses they hold)."""
    total: dict[int, Number] = {}
    for name in names:
        for address, value in source.elements(name):
            total[address] = total.get(address, 0) + value
    return iter(sorted(total.items()))


def sample_stream(source: PerPcSource, counters: tuple[str, ...]) -> Iterator[tuple[int, Number]] | None:
    """(address, warp samples); None where the launch holds no sampling."""
    if SAMPLES in counters:
        return source.elements(SAMPLES)
    reasons = [name for name in counters if stall_reason(name)]
    return _summed(source, reasons) if reasons else None


def sector_pair(counters: tuple[str, ...]) -> SectorPair | None:
    return next((p for p in SECTOR_PAIRS if p.theoretical in counters and p.ideal in counters), None)


def excess_stream(source: PerPcSource, pair: SectorPair) -> Iterator[tuple[int, Number]]:
    """(address, requested minus ideal sectors): the two lists in step where they hold the same
    addresses in the same order (ncu writes them so), else matched through the ideal one's dict."""
    theoretical = source.elements(pair.theoretical)
    ideal_iter = source.elements(pair.ideal)
    pending: dict[int, Number] = {}
    for address, requested in theoretical:
        if address not in pending:
            for other, value in ideal_iter:
                pending[other] = value
                if other == address:
                    break
        yield address, requested - pending.pop(address, 0)


class _Total:
    """A stream passed through, its positive values summed on the way."""

    def __init__(self, stream: Iterator[tuple[int, Number]]) -> None:
        self.stream = stream
        self.sum: Number = 0

    def __iter__(self) -> Iterator[tuple[int, Number]]:
        for address, value in self.stream:
            self.sum += value
            if value > 0:
                yield address, value


def top_addresses(stream: Iterator[tuple[int, Number]], top: int) -> tuple[list[int], Number]:
    """The ``top`` addresses of positive value, the largest first (ties by address), and the total."""
    total = _Total(stream)
    best = heapq.nsmallest(top, total, key=lambda item: (-item[1], item[0]))
    return [address for address, _ in best], total.sum


def counters_at(source: PerPcSource, counters: tuple[str, ...], addresses: set[int]) -> dict[int, dict[str, Number]]:
    """Every counter held at each of ``addresses`` (every list is read through: a damaged one raises)."""
    found: dict[int, dict[str, Number]] = {address: {} for address in addresses}
    for name in counters:
        for address, value in source.elements(name):
            if address in found:
                found[address][name] = value
    return found


def rank(launch: LaunchSource, top: int) -> LaunchHotspots | None:
    """The launch's top instructions; None where it holds no source counters.
    Raises ``DamagedList`` for a list whose bytes are damaged."""
    source, counters = launch.source, launch.source.counters()
    if not counters:
        return None
    samples = sample_stream(source, counters)
    by_samples, total_samples = top_addresses(samples, top) if samples is not None else ([], None)
    pair = sector_pair(counters)
    by_excess, total_excess = top_addresses(excess_stream(source, pair), top) if pair else ([], None)
    held = counters_at(source, counters, {*by_samples, *by_excess})
    return LaunchHotspots(
        launch.report, launch.range_index, launch.action_index, launch.kernel, counters, pair,
        total_samples, total_excess,
        tuple(Instruction(a, held[a]) for a in by_samples), tuple(Instruction(a, held[a]) for a in by_excess))


# --- source lines


def line_totals(source: PerPcSource, counters: tuple[str, ...], locate: Locator) -> list[SourceLine]:
    """Every counter summed per source line (addresses with no line info left out); a line's
    instructions are the addresses of its executed-instructions list (each held once there)."""
    cached = functools.lru_cache(maxsize=_LOCATIONS_CACHED)(locate)
    sums: dict[Location, dict[str, Number]] = {}
    instructions: dict[Location, int] = {}
    counted = EXECUTED if EXECUTED in counters else counters[0]
    for name in counters:
        for address, value in source.elements(name):
            location = cached(address)
            if location is None:
                continue
            line = sums.setdefault(location, {})
            line[name] = line.get(name, 0) + value
            if name == counted:
                instructions[location] = instructions.get(location, 0) + 1
    return [SourceLine(file, line, sums[(file, line)], instructions.get((file, line), 0)) for file, line in sums]


def line_weight(line: SourceLine, sampled: bool) -> Number:
    """What lines rank by: warp samples where the launch was sampled, else executed instructions."""
    if sampled:
        return samples_in(line.counters) or 0
    return line.counters.get(EXECUTED, 0)


def top_lines(lines: list[SourceLine], top: int, sampled: bool) -> tuple[SourceLine, ...]:
    """The top lines (``line_weight``), the heaviest first, ties by file and line."""
    weighed = ((line_weight(x, sampled), x) for x in lines)
    ranked = heapq.nsmallest(top, ((w, x) for w, x in weighed if w > 0), key=lambda p: (-p[0], p[1].file, p[1].line))
    return tuple(x for _, x in ranked)


# --- a report's launches


@dataclass(frozen=True)
class ReportHotspots:
    """The source view of one report: its selected launches with source counters, and what was not shown."""

    report: str
    launches: tuple[LaunchHotspots, ...]
    selected: int  # launches the selection kept
    without: int  # of them, those holding no source counters
    notes: tuple[str, ...] = ()  # damaged lists, text not read


def _with_text(found: LaunchHotspots, launch: LaunchSource, text: LaunchText | None, top: int,
               why: str | None) -> LaunchHotspots:
    if text is None:
        return replace(found, note=why)
    places = {i.address: text.place(i.address) for i in found.instructions}
    located = line_totals(launch.source, found.counters, text.location)
    lines = top_lines(located, top, sampled=found.sampled)
    notes = [] if located else ["no line info (compile with -lineinfo for file:line)"]
    if places and not any(place.sass for place in places.values()):
        notes.append("no SASS text: ncu_report disassembles none of these instructions (it answers "
                     f"{UNDISASSEMBLED} or nothing for them)")
    return replace(found, lines=lines, places=places, note="; ".join(notes) or None)


class _Text:
    """The report's text through ncu_report, opened at the first launch that needs it (a launch
    ncu_report cannot read, a damaged one, it gives no text)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.report: ReportText | None = None
        self.why: str | None = None

    def of(self, launch: LaunchSource) -> LaunchText | None:
        if isinstance(launch.source, NcuReportSource):  # read through ncu_report: its own action
            return LaunchText(launch.source.action)
        if self.report is None and self.why is None:
            self.report, self.why = open_text(self.path)
        return self.report.launch(launch.range_index, launch.action_index) if self.report else None


def read_hotspots(path: Path, keep: Callable[[LaunchSource], bool], top: int) -> ReportHotspots:
    """The hot spots of every launch of the report that ``keep`` selects."""
    refuse_damaged_for_ncu_report(path)
    found: list[LaunchHotspots] = []
    notes: list[str] = []
    selected = without = 0
    text = _Text(path)
    for launch in iter_launch_sources(path):
        if not keep(launch):
            continue
        selected += 1
        try:
            ranked = rank(launch, top)
        except DamagedList as damage:
            notes.append(f"{path}: launch {launch.action_index} ({launch.kernel.function}) is left out: its "
                         f"per-instruction lists are damaged ({damage})")
            continue
        if ranked is None:
            without += 1
            continue
        found.append(_with_text(ranked, launch, text.of(launch), top, text.why))
    return ReportHotspots(str(path), tuple(found), selected, without, tuple(notes))
