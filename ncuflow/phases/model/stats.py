"""Distributions of per-token times; quantiles and spread come from ``ncuflow.spread``."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ncuflow.spread import quantile, relative_width


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
        return relative_width(self.p10, self.p90, self.median) if self.median else math.nan


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
