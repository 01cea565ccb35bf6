"""Which runs a report shows in detail (``--runs``).

A log of a few runs shows every one (more than ``SUMMARY_RUNS``: after a session summary).
A long session (more than ``DETAIL_RUNS`` runs) shows its summary and a few runs that stand
out (the first and the last, the highest peak, the
slowest steady per-token time, the first with overload, with a traceback or with a
per-token time flagged below the lone-request time); ``--runs all`` shows every run,
``--runs none`` the summary alone and ``--runs 3,7-9`` those runs (run numbers, as the
tables label them; for DP ranks, that number of every rank)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from ncuflow.phases.model import RunAnalysis
from ncuflow.phases.model.results import SegmentKind
from ncuflow.phases.model.session import run_numbers

SUMMARY_RUNS = 8  # a log with more runs than this gets a session summary first
DETAIL_RUNS = 50  # … and with more than this, only the runs that stand out in detail
STANDOUT = 10  # runs a session shows by default
MAX_LIST = 100_000


class Mode(Enum):
    AUTO = "auto"
    ALL = "all"
    NONE = "none"
    LIST = "list"


@dataclass(frozen=True)
class RunSelection:
    mode: Mode = Mode.AUTO
    numbers: frozenset[int] = frozenset()

    @staticmethod
    def parse(text: str | None) -> RunSelection:
        """``all``, ``none`` or run numbers and ranges (``3,7-9``); raises ``ValueError``."""
        if text is None or text.strip().lower() == "auto":
            return RunSelection()
        word = text.strip().lower()
        if word in ("all", "none"):
            return RunSelection(Mode(word))
        numbers: set[int] = set()
        for part in word.split(","):
            low, dash, high = part.strip().partition("-")
            if not low.isdigit() or (dash and not high.isdigit()) or len(low) > 9 or len(high) > 9:
                raise ValueError(f"{part.strip()!r} is not a run number or a range such as 7-9")
            first, last = int(low), int(high) if dash else int(low)
            if last < first or last - first > MAX_LIST or len(numbers) > MAX_LIST:
                raise ValueError(f"{part.strip()!r} is not a range of at most {MAX_LIST:,} runs")
            numbers.update(range(first, last + 1))
        return RunSelection(Mode.LIST, frozenset(numbers))

    def words(self) -> str:
        """How the runs in detail were picked, for the summary."""
        return {
            Mode.AUTO: " (the first, the last and those that stand out)",
            Mode.LIST: " (those --runs names)",
        }.get(self.mode, "")

    def is_session(self, runs: Sequence[RunAnalysis]) -> bool:
        """Whether the runs get a session summary first (counted as the tables number them:
        the DP ranks' runs of one wave are one)."""
        return run_numbers(runs) > SUMMARY_RUNS or self.mode is not Mode.AUTO

    def pick(self, runs: Sequence[RunAnalysis]) -> tuple[RunAnalysis, ...]:
        if self.mode is Mode.ALL or (self.mode is Mode.AUTO and run_numbers(runs) <= DETAIL_RUNS):
            return tuple(runs)
        if self.mode is Mode.NONE:
            return ()
        if self.mode is Mode.LIST:
            return tuple(r for r in runs if r.identity.run_index in self.numbers)
        return _standout(runs)


def _standout(runs: Sequence[RunAnalysis]) -> tuple[RunAnalysis, ...]:
    """The first and last runs and those that stand out, in time order."""
    chosen: list[RunAnalysis] = [runs[0], runs[-1]]
    chosen.append(max(runs, key=lambda r: r.shape.peak_batch or 0))
    steady = [r for r in runs if r.timing.headline_token_s is not None]
    if steady:
        chosen.append(max(steady, key=lambda r: r.timing.headline_token_s or 0.0))
    for flagged in (
        lambda r: any(s.kind is SegmentKind.OVERLOAD for s in r.shape.segments),
        lambda r: r.plot.abort_time_s is not None,
        lambda r: any(s.below_floor for s in r.shape.segments),
    ):
        found = next((r for r in runs if flagged(r)), None)
        if found is not None:
            chosen.append(found)
    kept = {id(r): r for r in chosen}
    order = {id(r): k for k, r in enumerate(runs)}
    return tuple(sorted(kept.values(), key=lambda r: order[id(r)]))[:STANDOUT]
