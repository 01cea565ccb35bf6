"""Distributions and quantiles: the one definition of spread used by ``phases``."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Distribution:
    count: int
    median: float
    p10: float
    p90: float
    minimum: float
    maximum: float

    @property
    def relative_spread(self) -> float:
        """(p90 − p10) / median."""
        return (self.p90 - self.p10) / self.median if self.median else math.nan


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of already sorted values (q in [0, 1])."""
    if not sorted_values:
        raise ValueError("quantile of nothing")
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = math.ceil(position)
    fraction = position - low
    return sorted_values[low] * (1 - fraction) + sorted_values[high] * fraction


def distribution(values: Sequence[float]) -> Distribution | None:
    if not values:
        return None
    ordered = sorted(values)
    return Distribution(
        count=len(ordered),
        median=statistics.median(ordered),
        p10=quantile(ordered, 0.10),
        p90=quantile(ordered, 0.90),
        minimum=ordered[0],
        maximum=ordered[-1],
    )
