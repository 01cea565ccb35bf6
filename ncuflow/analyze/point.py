"""A point: the launches of one kernel measured at one parameter setting, and its model verdict."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ncuflow.analyze.classify import DEFAULT_THRESHOLD, TERM_NAMES, Term, bound_of, classify
from ncuflow.read.launch import Launch


@dataclass(frozen=True)
class Point:
    """The launches of one kernel measured at one parameter setting (all replicas pooled)."""

    cell: str
    params: tuple[tuple[str, object], ...]  # sorted by name
    kernel: str
    launches: tuple[Launch, ...]
    runs: int = 1
    content_keys: tuple[str, ...] = ()

    def param(self, name: str) -> object:
        return dict(self.params).get(name)

    def values(self, field_name: str) -> list[float]:
        return [v for v in (launch.value(field_name) for launch in self.launches) if v is not None and math.isfinite(v)]

    @property
    def device(self) -> str | None:
        names = sorted({launch.device.name for launch in self.launches if launch.device.name})
        return ", ".join(names) or None

    def spec(self) -> str:
        """Cell spec text, e.g. ``paged_decode:batch=32,page=16``."""
        if not self.params:
            return self.cell
        return self.cell + ":" + ",".join(f"{k}={v}" for k, v in self.params)


def format_param(value: object) -> str:
    return "—" if value is None else str(value)


def sort_key(value: object) -> tuple[int, float, str]:
    if isinstance(value, bool):
        return (1, 0.0, str(value))
    if isinstance(value, (int, float)):
        return (0, float(value), "")
    try:
        return (0, float(str(value)), "")
    except ValueError:
        return (1, 0.0, str(value))


def sort_values(values: Iterable[object]) -> list[object]:
    """Numbers numerically (also numeric strings), then the rest alphabetically."""
    return sorted(values, key=sort_key)


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
