"""Spread: the one definition of how much repeated measurements disagree.

``relative_spread(values, low, high)`` is ``(q_high - q_low) / |median|`` over the values'
quantiles. Replay stability and explain take the full range (``low=0, high=1``: with 2 or 3
replicas, min and max are all there is); cell timing and serving phases, with hundreds of
samples, take the 10th to 90th percentile so one outlier does not set the figure.

Plain functions over floats, usable by every stage (no imports beyond the standard library).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def quantile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of already sorted values (q in [0, 1])."""
    if not ordered:
        raise ValueError("quantile of nothing")
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def relative_width(low: float, high: float, center: float) -> float:
    """(high - low) / |center|: 0 when low == high, inf when the center is 0 but they differ."""
    if high == low:
        return 0.0
    if center == 0:
        return math.inf
    return (high - low) / abs(center)


def relative_spread(values: Sequence[float], low: float = 0.0, high: float = 1.0) -> float | None:
    """(q_high - q_low) / |median|; None for fewer than 2 values.

    The default is the full range, (max - min) / |median|; pass ``low=0.1, high=0.9`` for
    the interdecile spread of many samples.
    """
    if len(values) < 2:
        return None
    ordered = sorted(values)
    return relative_width(quantile(ordered, low), quantile(ordered, high), statistics.median(ordered))
