"""``classify --as-if``: the verdict a launch would have had under a smaller collection.

A report made with a larger collection (ncu's full set) holds every metric a smaller
one would have gathered, so reading it with only that collection's names allowed gives
the launch exactly as the smaller collection would have recorded it. For ``decisive``,
a launch tier 1 leaves undecided (``undecided``) is read again with tier 2 added, as the
escalation run would have added it. The cost is the passes ncu would have recorded on
the launch's chip: tier 1's, plus the escalation run's where it ran.

A report that did not collect what the collection collects cannot answer: a term the
collection computes on the launch's chip (``feedable_terms``) is then missing for want of
data, not for want of a wall. Such a launch is not judged, not escalated and not priced
(``AsIfResult.holds`` False, ``lacking`` naming the terms): a report that recorded 3 passes
was said to cost 8 as if, every launch "escalated" for the counters it lacked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ncuflow.analyze.classify import ESCALATION_BAND, TERM_NAMES, Verdict, classify, undecided
from ncuflow.profile.passes import Collection, collection_on_chip, name_class
from ncuflow.read.extract import iter_launches
from ncuflow.read.launch import DeviceInfo, KernelName, Launch
from ncuflow.read.metrics import FIELDS, UNIT_THROUGHPUT_METRICS, resolve


def allow_only(names: tuple[str, ...] | None) -> Callable[[str], bool] | None:
    """The filter of what a collection holds: its names and the free attributes of every report."""
    if names is None:
        return None
    allowed = frozenset(names)
    return lambda name: name in allowed or name_class(name) == "free"


@dataclass(frozen=True)
class AsIfResult:
    launch: Launch  # as the collection (with its escalation, where it ran) recorded it
    verdict: Verdict
    escalated: bool
    passes: int | None  # ncu's recorded passes by the empirical rule; None: no Perfworks or chip
    chip: str | None
    lacking: tuple[str, ...] = ()  # terms the collection computes that the report cannot give

    @property
    def holds(self) -> bool:
        """Whether the report holds what the collection collects for this launch."""
        return not self.lacking


PassCost = Callable[[str, str | None, bool], int | None]


def feedable_terms(names: tuple[str, ...] | None) -> frozenset[str]:
    """The model terms a collection of these metric names computes (None: every term), found by
    classifying a launch that holds exactly those metrics (and every free attribute)."""
    if names is None:
        return frozenset(TERM_NAMES)
    allow = allow_only(names)
    assert allow is not None

    def lookup(name: str) -> float | None:
        return 50.0 if allow(name) else None

    values: dict[str, float | None] = {}
    provenance: dict[str, str] = {}
    for field in FIELDS:
        value, source = resolve(field, lookup)
        values[field.name] = value
        if source is not None:
            provenance[field.name] = source
    launch = Launch("", 0, 0, KernelName("", "", ""), (), DeviceInfo(None, None, None), None, values, provenance,
                    tuple(name for name, value in values.items() if value is None),
                    breakdown={m: 50.0 for m in UNIT_THROUGHPUT_METRICS if allow(m)})
    return frozenset(classify(launch).compared)


def as_if(path: Path | str, collection: Collection, threshold: float,
          cost: PassCost | None = None, band: float = ESCALATION_BAND) -> Iterator[AsIfResult]:
    """Every launch of a report under ``collection``; ``cost(chip, ncu_version, escalated)`` prices it."""
    from ncuflow.profile.passes import read_report_collection

    info = read_report_collection(path)
    first = list(iter_launches(path, allow=allow_only(collection.metrics)))
    # what the collection computes on this chip: a name the chip does not know is never collected
    expected = feedable_terms(collection_on_chip(collection, info.chip).collection.metrics)
    second: list[Launch] | None = None
    for index, launch in enumerate(first):
        verdict = classify(launch, threshold)
        lacking = tuple(f"u_{name}" for name in TERM_NAMES if name in expected and name not in verdict.compared)
        if lacking:  # the report lacks the collection's data: nothing to judge, escalate or price
            yield AsIfResult(launch, verdict, False, None, info.chip, lacking)
            continue
        escalated = False
        if collection.escalation and undecided(verdict, band):
            if second is None:
                wider = (*(collection.metrics or ()), *collection.escalation)
                second = list(iter_launches(path, allow=allow_only(wider)))
            launch = second[index]
            verdict = classify(launch, threshold)
            escalated = True
        passes = cost(info.chip, info.ncu_version, escalated) if cost and info.chip else None
        yield AsIfResult(launch, verdict, escalated, passes, info.chip)


def perfworks_cost(collection: Collection) -> tuple[PassCost | None, str | None]:
    """A pricing function backed by Perfworks, or None and why (Perfworks missing)."""
    from ncuflow.profile import perfworks
    from ncuflow.profile.passes import predict

    if collection.metrics is None:
        return None, "the full set's passes are what its reports recorded"
    try:
        library = perfworks.load()
    except perfworks.PerfworksUnavailable as error:
        return None, error.paragraph()
    cache: dict[tuple[str, str | None, bool], int | None] = {}

    def cost(chip: str, ncu_version: str | None, escalated: bool) -> int | None:
        key = (chip, ncu_version, escalated)
        if key not in cache:
            try:
                with library.evaluator(chip) as evaluator:
                    total = predict(evaluator, collection.metrics or ()).expected_recorded(ncu_version)
                    if escalated:
                        total += predict(evaluator, collection.escalation).expected_recorded(ncu_version)
                cache[key] = total
            except perfworks.UnsupportedChip:
                cache[key] = None
        return cache[key]

    return cost, None
