"""A measurement: the launches that measure the same thing, with their statistics and verdict.

The one grouping rule of ncuflow: two launches measure the same thing when they come from
runs of one cell at one parameter setting (and, where asked, one content key: the same
collection setup) and share a launch signature — kernel, NVTX ranges, GPU and launch
configuration. Replay stability, the study's points, explain and compare all group
launches with ``measurements`` (or ``group_by_signature`` inside one report).

Like ``torch.utils.benchmark.Measurement``, a ``Measurement`` carries its own statistics:
``stats(field)`` (median, range, spread as ``ncuflow.spread`` defines it) and ``model()``
(the max model's median utilizations and binding term) are computed when first asked and
kept. Plain data over ``Launch`` records; no polars, no I/O.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ncuflow.analyze.classify import DEFAULT_THRESHOLD, TERM_NAMES, Term, bound_of, classify
from ncuflow.analyze.fields import format_value, spec_of
from ncuflow.read.launch import Launch
from ncuflow.spread import relative_spread
from ncuflow.store.manifest import CellSpec

# ---------------------------------------------------------------------------
# which launches are measurements of the same thing

# Launch-configuration fields: when extraction records them, launches of one kernel
# with different grids or blocks (different work by construction) are kept apart.
CONFIG_FIELDS: tuple[str, ...] = ("grid_size", "block_size", "registers_per_thread", "shared_mem_per_block")


def launch_signature(launch: Launch) -> tuple[object, ...]:
    """What makes two launches repeats of one another: kernel, NVTX ranges, GPU, launch configuration."""
    config = tuple(launch.values.get(name) for name in CONFIG_FIELDS)
    return (launch.kernel.function, launch.kernel.mangled, launch.nvtx, launch.device.name, config)


def signature_label(launch: Launch) -> str:
    """A short human label of a launch signature: kernel name plus its launch configuration."""
    config = [
        f"{name.split('_')[0]}={format_value(launch.values.get(name))}"
        for name in ("grid_size", "block_size")
        if launch.values.get(name) is not None
    ]
    return launch.kernel.function + (f" [{', '.join(config)}]" if config else "")


def signature_labels(groups: Mapping[tuple[object, ...], Sequence[Launch]]) -> dict[tuple[object, ...], str]:
    """A label per signature; kernels that share a function name get a short tag of their mangled name."""
    labels = {sig: signature_label(members[0]) for sig, members in groups.items()}
    counts: dict[str, int] = {}
    for label in labels.values():
        counts[label] = counts.get(label, 0) + 1
    for sig, members in groups.items():
        if counts[labels[sig]] > 1:
            first = members[0]
            tag = hashlib.sha1(f"{first.kernel.mangled}|{first.nvtx}|{first.device.name}".encode()).hexdigest()[:6]
            labels[sig] = f"{labels[sig]}~{tag}"
    return labels


def has_launch_config(launches: Iterable[Launch]) -> bool:
    return any(launch.values.get("grid_size") is not None for launch in launches)


def group_by_signature(launches: Iterable[Launch]) -> dict[tuple[object, ...], list[Launch]]:
    """Launches grouped by ``launch_signature``, in order of first appearance."""
    groups: dict[tuple[object, ...], list[Launch]] = {}
    for launch in launches:
        groups.setdefault(launch_signature(launch), []).append(launch)
    return groups


# ---------------------------------------------------------------------------
# statistics


@dataclass(frozen=True)
class FieldStats:
    """One field over the launches of a measurement that hold a finite value for it."""

    field: str
    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    @property
    def minimum(self) -> float | None:
        return min(self.values) if self.values else None

    @property
    def maximum(self) -> float | None:
        return max(self.values) if self.values else None

    @property
    def range(self) -> float | None:
        """max - min (absolute, in the field's unit); None when not measured."""
        return max(self.values) - min(self.values) if self.values else None

    @property
    def spread(self) -> float | None:
        """(max - min) / |median| (``ncuflow.spread``); None below 2 values."""
        return relative_spread(self.values)


@dataclass(frozen=True)
class PointModel:
    bound: str
    utilization: Mapping[str, float | None]

    def u(self, name: str) -> float | None:
        return self.utilization.get(name)


def point_model(launches: Sequence[Launch], threshold: float = DEFAULT_THRESHOLD) -> PointModel:
    """Median utilization of each term over the launches, and the bound those medians give."""
    verdicts = [classify(launch, threshold) for launch in launches]
    medians: dict[str, float | None] = {}
    terms: list[Term] = []
    for name in TERM_NAMES:
        values = [u for u in (v.utilization(name) for v in verdicts) if u is not None]
        median = statistics.median(values) if values else None
        medians[name] = median
        terms.append(Term(name, median, "median over launches" if values else None, None if values else "not measured"))
    return PointModel(bound_of(tuple(terms), threshold), medians)


# ---------------------------------------------------------------------------
# the measurement


@dataclass(frozen=True)
class Measurement:
    """The launches of one kernel measured at one parameter setting (replicas and repeats pooled)."""

    cell: str
    params: tuple[tuple[str, object], ...]  # sorted by name
    kernel: str  # the signature label: kernel name and launch configuration
    launches: tuple[Launch, ...]
    runs: int = 1
    content_keys: tuple[str, ...] = ()
    _cache: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def param(self, name: str) -> object:
        return dict(self.params).get(name)

    def values(self, field_name: str) -> list[float]:
        return list(self.stats(field_name).values)

    def stats(self, field_name: str) -> FieldStats:
        """The field's statistics over the launches (computed once)."""
        key = ("stats", field_name)
        if key not in self._cache:
            raw = (launch.value(field_name) for launch in self.launches)
            self._cache[key] = FieldStats(field_name, tuple(v for v in raw if v is not None and math.isfinite(v)))
        result: FieldStats = self._cache[key]
        return result

    def noise_scale(self, field_name: str) -> float | None:
        """The median the field's tolerance applies to: its own, or its noise reference's (fields.py)."""
        reference = spec_of(field_name).noise_reference
        if reference is not None:
            median = self.stats(reference).median
            if median is not None and median != 0:
                return abs(median)
        median = self.stats(field_name).median
        return None if median is None else abs(median)

    def model(self, threshold: float = DEFAULT_THRESHOLD) -> PointModel:
        """The max model over the launches: median u of each term and the bound (computed once per threshold)."""
        key = ("model", threshold)
        if key not in self._cache:
            self._cache[key] = point_model(self.launches, threshold)
        result: PointModel = self._cache[key]
        return result

    @property
    def device(self) -> str | None:
        names = sorted({launch.device.name for launch in self.launches if launch.device.name})
        return ", ".join(names) or None

    @property
    def function(self) -> str:
        """The kernel's function name (``kernel`` is the label with its configuration)."""
        return self.launches[0].kernel.function if self.launches else self.kernel

    def config(self) -> tuple[float | None, float | None]:
        """(grid size, block size) of the first launch, None where not extracted."""
        first = self.launches[0] if self.launches else None
        if first is None:
            return (None, None)
        return (first.values.get("grid_size"), first.values.get("block_size"))

    def spec(self) -> str:
        """Cell spec text, e.g. ``paged_decode:batch=32,page=16`` (``CellSpec.text``, the one spelling)."""
        return CellSpec(self.cell, self.params).text()  # type: ignore[arg-type]


class RunLaunches(Protocol):
    """What ``measurements`` needs of a run (``ncuflow.read.runs.LoadedRun`` has it)."""

    @property
    def cell(self) -> str: ...
    @property
    def params(self) -> tuple[tuple[str, object], ...]: ...
    @property
    def content_key(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def launches(self) -> tuple[Launch, ...]: ...


def measurements(runs: Iterable[RunLaunches], *, split_content_keys: bool = False) -> list[Measurement]:
    """One measurement per (cell, parameters, launch signature): replicas and repeats pooled.

    With ``split_content_keys`` runs of one parameter setting but different content keys
    (e.g. another ncu metric set) are different measurements: replicas are runs of one key.
    """
    # Labels are made per (cell, parameters): two kernels of one point that share a name are
    # told apart, while the same kernel name at another parameter value keeps its plain name.
    by_point: dict[tuple[str, tuple[tuple[str, object], ...]], list[RunLaunches]] = {}
    for run in runs:
        by_point.setdefault((run.cell, run.params), []).append(run)
    BucketKey = tuple[str, tuple[tuple[str, object], ...], str, str]
    buckets: dict[BucketKey, list[tuple[RunLaunches, list[Launch]]]] = {}
    for (cell, params), point_runs in by_point.items():
        labels = signature_labels(group_by_signature(launch for run in point_runs for launch in run.launches))
        for run in point_runs:
            key = run.content_key if split_content_keys else ""
            for sig, members in group_by_signature(run.launches).items():
                buckets.setdefault((cell, params, key, labels[sig]), []).append((run, members))
    found: list[Measurement] = []
    for (cell, params, _, kernel), items in buckets.items():
        found.append(
            Measurement(
                cell=cell,
                params=params,
                kernel=kernel,
                launches=tuple(launch for _, members in items for launch in members),
                runs=len({run.run_id for run, _ in items}),
                content_keys=tuple(sorted({run.content_key for run, _ in items})),
            )
        )
    found.sort(key=lambda m: (m.cell, [(name, sort_key(v)) for name, v in m.params], m.kernel, m.content_keys))
    return found


def format_param(value: object) -> str:
    return "—" if value is None else str(value)


def sort_key(value: object) -> tuple[int, float, str]:
    """Numbers numerically (also numeric strings: page 16 before 128), then the rest alphabetically."""
    if isinstance(value, bool):
        return (1, 0.0, str(value))
    if isinstance(value, (int, float)):
        return (0, float(value), "")
    try:
        return (0, float(str(value)), "")
    except ValueError:
        return (1, 0.0, str(value))


def merge(parts: Sequence[Measurement]) -> Measurement:
    """Several measurements of one setting pooled into one (e.g. runs of different content keys)."""
    first = parts[0]
    return Measurement(
        cell=first.cell,
        params=first.params,
        kernel=first.kernel,
        launches=tuple(launch for p in parts for launch in p.launches),
        runs=sum(p.runs for p in parts),
        content_keys=tuple(sorted({k for p in parts for k in p.content_keys})),
    )


def identical_launches(baseline: Measurement, other: Measurement) -> bool:
    """Whether both sides hold the same launches: one kernel, one GPU, the same value of every
    field, launch by launch (``compare X X``, or a copy of X)."""
    if len(baseline.launches) != len(other.launches) or not baseline.launches:
        return False
    return all(
        a.kernel == b.kernel and a.device == b.device and dict(a.values) == dict(b.values)
        for a, b in zip(baseline.launches, other.launches, strict=True)
    )
