"""A report's read plan: the canonical fields resolved against its metric list once, then each
launch read by index into only the metrics the fields need.

Every launch of a report carries the same metric names as a rule (in all but three reports of
the shared corpus, where one launch each gets a plan of its own). So the alias chains
(``ncuflow.read.chains``) are resolved once per distinct metric list, not per launch: for each
field, the sources the list can feed, each with the indices of its metrics in the list, the
scale and arithmetic that turn their raw values into the field's unit, and the provenance
text; the sources whose metrics the list lacks are gone. Reading a launch is then a walk over
the planned sources, reading each needed metric once by its index. The breakdown's metric
names, which a launch gives as text (NVIDIA's speed-of-light lists), are planned once per
distinct list text.

The plan reads the fields through a narrow interface (``ChainField``: a name and an ordered
chain of ``Source``), and a metric list through ``MetricList`` (where a name lies, or that it
is lacking), so that it holds whatever table the fields come from and whichever reader gives
the list (``ncuflow.read.fileaction``: indices into a result's metric records, verified as
they are read; ``ncuflow.read.ncureport``: positions in ``ncu_report``'s name list).

Resolving through a plan gives what resolving each chain by name gives (``chains.resolve``),
value for value, provenance and the metrics ncu stored as NaN included: a source is tried in
order; its metrics are read in order up to the first that holds no finite number (or that the
list lacks); the first source whose metrics all hold one, and whose arithmetic is defined
(and, for a field that must be positive, a peak, gives more than 0), wins.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ncuflow.read.chains import Source


class ChainField(Protocol):
    """What a plan needs of a field: its name, its ordered alias chain, and whether a source
    giving 0 or less is passed over (``positive``: a peak, as ``chains.resolve`` does)."""

    @property
    def name(self) -> str: ...

    @property
    def sources(self) -> Sequence[Source]: ...

    @property
    def positive(self) -> bool: ...


class MetricList(Protocol):
    """Where the metrics of one metric list lie: a name's index, None where the list lacks it."""

    def index_of(self, name: str) -> int | None: ...


class Unsettled(Exception):
    """The metric list a plan was made for is not this launch's (a record at a planned index
    names another metric, or a metric the list lacks may be in the launch, ``ReadPlan.lacking``):
    the reader settles the launch's own list and reads it again."""


@dataclass(frozen=True)
class PlannedSource:
    """One source of a field's chain, on one metric list: the indices of its metrics up to the
    first the list lacks (all of them where ``complete``), and the source itself (its arithmetic
    and scale: the unit conversion; its label: the provenance)."""

    source: Source
    indices: tuple[int, ...]
    complete: bool


# One planned source as ``resolve_planned`` walks it: its indices, whether it is complete, whether it
# takes one metric as it is (times its scale), and the source.
_Step = tuple[tuple[int, ...], bool, bool, Source]


@dataclass(frozen=True)
class PlannedField:
    name: str
    sources: tuple[PlannedSource, ...]  # the chain in order, less the sources with nothing to read
    positive: bool = False  # a source giving 0 or less is passed over


@dataclass(frozen=True)
class ReadPlan:
    """The canonical fields planned on one metric list, and the other metrics a launch row reads."""

    fields: tuple[PlannedField, ...]
    names: dict[int, str]  # index -> metric name, of every index the plan reads (for NaN notes)
    extra: Mapping[str, int | None]  # other metrics read by name (device, breakdown lists): index or lacking
    metrics: MetricList = field(repr=False, compare=False)
    listed: dict[tuple[str, ...], tuple[tuple[str, int], ...]] = field(default_factory=dict, repr=False,
                                                                       compare=False)
    steps: tuple[tuple[str, bool, tuple[_Step, ...]], ...] = field(init=False, repr=False, compare=False)
    # every metric looked up that the list lacks (the breakdown lists' names added as they are planned):
    # a launch read through this plan before its own list is known must lack them too
    lacking: set[str] = field(default_factory=set, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The fields as plain tuples, what ``resolve_planned`` walks for every launch.
        object.__setattr__(self, "steps", tuple(
            (one.name, one.positive,
             tuple((s.indices, s.complete, s.source.op == "value", s.source) for s in one.sources))
            for one in self.fields))

    def index(self, name: str) -> int | None:
        """A metric's index in the list, for the metrics the plan was made with (``extra``)."""
        return self.extra[name]

    def indices_of(self, names: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
        """(name, index) of each named metric the list holds, in order, each once (planned once per
        tuple of names: a breakdown list's text is the same on every launch of a report)."""
        found = self.listed.get(names)
        if found is None:
            seen: dict[str, int] = {}
            for name in names:
                if name and name not in seen:
                    index = self.metrics.index_of(name)
                    if index is None:
                        self.lacking.add(name)
                    else:
                        seen[name] = index
                        self.names[index] = name
            found = self.listed[names] = tuple(seen.items())
        return found


def plan_reading(metrics: MetricList, fields: Iterable[ChainField], extra: Iterable[str] = ()) -> ReadPlan:
    """The plan of ``fields`` (and of the ``extra`` metrics read by name) on one metric list."""
    planned: list[PlannedField] = []
    names: dict[int, str] = {}
    lacking: set[str] = set()
    for one in fields:
        sources: list[PlannedSource] = []
        for source in one.sources:
            indices: list[int] = []
            for metric in source.metrics:
                index = metrics.index_of(metric)
                if index is None:
                    lacking.add(metric)
                    break
                indices.append(index)
                names[index] = metric
            if indices:
                sources.append(PlannedSource(source, tuple(indices), len(indices) == len(source.metrics)))
        planned.append(PlannedField(one.name, tuple(sources), one.positive))
    wanted = {name: metrics.index_of(name) for name in extra}
    names.update((index, name) for name, index in wanted.items() if index is not None)
    lacking.update(name for name, index in wanted.items() if index is None)
    return ReadPlan(tuple(planned), names, wanted, metrics, lacking=lacking)


Resolved = tuple[dict[str, float | None], dict[str, str], list[str]]


def resolve_planned(plan: ReadPlan, read: Callable[[int], float | None]) -> Resolved:
    """(values, provenance, missing) of every planned field.

    ``read(index)`` is the metric's finite number, None where it holds none (absent, a
    string, NaN: the reader notes NaN itself)."""
    values: dict[str, float | None] = {}
    provenance: dict[str, str] = {}
    missing: list[str] = []
    isfinite = math.isfinite
    for name, positive, steps in plan.steps:
        for indices, complete, as_is, source in steps:
            if as_is:  # one metric, times the source's scale (the chains' common case)
                value = read(indices[0])
                if value is None:
                    continue
                combined: float | None = value * source.scale
            else:
                raw: list[float] = []
                for index in indices:
                    value = read(index)
                    if value is None:
                        break
                    raw.append(value)
                else:
                    if not complete:
                        continue
                    combined = source.combine(tuple(raw))
                if len(raw) < len(indices):
                    continue
            if combined is not None and isfinite(combined) and (combined > 0 or not positive):
                values[name] = combined
                provenance[name] = source.text
                break
        else:
            values[name] = None
            missing.append(name)
    return values, provenance, missing


@functools.lru_cache(maxsize=256)
def listed_names(listing: str) -> tuple[str, ...]:
    """The metric names of a breakdown list (the same text on every launch of a report)."""
    return tuple(name.strip() for name in listing.split(","))
