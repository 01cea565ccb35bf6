"""Did a field change between two points? Judged against the noise band, never against zero.

Per-field rule (``compare_field``). ``t`` is the field's stability tolerance (the field
table, ``ncuflow.analyze.fields``: exact counters 0, near-exact 0.5 %, bytes 0.2 % of
the launch's DRAM bytes, rates 2 %, duration 2 %); ``s`` the scale it applies to (the
baseline median of the field, or of its noise reference); ``floor`` the field's absolute
floor (320 ns, 1 percentage point, 4 KiB of bytes); ``band`` = max(t·s, floor) the
field's noise band; ``far`` = max(max(5·t, 1 %)·s, floor) the difference that counts as
a change even without replicas; ``w`` the larger absolute range (max - min) of the two
sides; ``d`` = |median_value - median_baseline|; ``Δ`` = d relative to the baseline
median (shown), or, for a percentage, d in percentage points (judged and shown so). The
reasons say d relative to ``s``: where ``s`` is a noise reference's median they name it
("0.0049 % of dram_bytes is inside the noise band 0.2 % of dram_bytes", while the Δ of
dram_bytes_read, relative to its own median, reads −4.1 %).

* **identical** values (every value of both sides the same), or the same values on both
  sides: ``unchanged``, for every field (``compare X X``).
* **known noise** (both sides measured at least twice):
  ``changed`` when the two ranges do not overlap and d > w and d > band;
  else ``ambiguous`` when w exceeds ``far`` (the replicas disagree);
  else ``unchanged`` when d ≤ max(band, w) (inside the noise band);
  else ``ambiguous`` (the ranges overlap but the medians differ by more than the band).
* **unknown noise** (one side measured once, the values not identical):
  ``changed`` when d > max(far, w of the side that has replicas);
  else ``ambiguous`` ("re-profile with replicas").
* ``missing`` when either side lacks the field: named, never read as 0.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ncuflow.analyze.fields import format_pct, spec_of
from ncuflow.analyze.stability import DEFAULT_TOLERANCES, Tolerances

FieldState = Literal["changed", "unchanged", "ambiguous", "missing"]


@dataclass(frozen=True)
class NoiseRules:
    """How far outside the tolerance a difference must be to count without replicas."""

    far_factor: float = 5.0
    far_floor: float = 0.01

    def far(self, tolerance: float) -> float:
        """The relative difference that counts without replicas (before the field's absolute floor)."""
        return max(self.far_factor * tolerance, self.far_floor)


DEFAULT_RULES = NoiseRules()


@dataclass(frozen=True)
class FieldChange:
    field: str
    state: FieldState
    baseline: float | None  # median
    value: float | None  # median
    delta: float | None  # relative to the baseline median (inf from a zero baseline)
    noise: float | None  # larger relative spread of the two sides; None when unknown
    tolerance: float
    reason: str

    @property
    def in_points(self) -> bool:
        """A percentage (0–100 scale): its change is said in percentage points."""
        return spec_of(self.field).in_points

    @property
    def points(self) -> float | None:
        """value - baseline of a percentage, in percentage points (None for other fields)."""
        if not self.in_points or self.baseline is None or self.value is None:
            return None
        return self.value - self.baseline

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or self.value is None or self.baseline == 0:
            return None
        return self.value / self.baseline

    def delta_text(self) -> str:
        """'×2.38' for large ratios, '+9.6 %' otherwise; '+8.5 points' for a percentage."""
        if self.baseline is None or self.value is None:
            return "not measured"
        if self.points is not None:
            return points_text(self.points, signed=True)
        ratio = self.ratio
        if ratio is None:
            return "0 → " + _short(self.value) if self.value != 0 else "0 → 0"
        if ratio >= 100:
            return f"×{ratio:,.0f}"
        if ratio >= 1.5 or (0 < ratio <= 1 / 1.5):
            return f"×{ratio:.3g}"
        if ratio == 0:
            return f"{_short(self.baseline)} → 0"
        if ratio == 1:
            return "±0 %"
        change = ratio - 1.0
        return f"{change * 100:+.1f} %" if abs(change) >= 0.001 else format_pct(change, signed=True)


def points_text(value: float, signed: bool = False) -> str:
    """A difference of percentages: '+8.45 points', '1 point'."""
    text = f"{value:{'+' if signed else ''}.2f}" if value else "0"
    return f"{text} point{'' if text.lstrip('+-') in ('1', '1.00') else 's'}"


def _short(value: float) -> str:
    for limit, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def _basis(reference: str | None, scale: float | None, baseline_median: float) -> str:
    """What a relative difference is of, where not the field's own baseline median: its noise
    reference's (" of dram_bytes": 0.0049 % of a launch's DRAM bytes, while Δ, relative to the
    field itself, reads −4.1 %)."""
    if reference is None or not scale or math.isclose(scale, abs(baseline_median)):
        return ""
    return f" of {reference}"


def compare_field(
    field_name: str,
    baseline: Sequence[float],
    value: Sequence[float],
    tolerances: Tolerances = DEFAULT_TOLERANCES,
    rules: NoiseRules = DEFAULT_RULES,
    *,
    scale: float | None = None,
) -> FieldChange:
    """Judge one field of value against baseline with the rule in the module docstring.

    ``scale`` is what the tolerance is relative to: the baseline median of the field's noise
    reference (``Measurement.noise_scale``); by default the field's own baseline median.
    """
    tolerance = tolerances.of(field_name)
    spec = spec_of(field_name)
    floor = spec.noise_floor
    if not baseline or not value:
        side = "both sides" if not baseline and not value else "the baseline side" if not baseline else "the value side"
        return FieldChange(field_name, "missing", None, None, None, None, tolerance, f"{field_name} not measured on {side}")
    mb, mv = statistics.median(baseline), statistics.median(value)
    d = abs(mv - mb)
    basis = _basis(spec.noise_reference, scale, mb)
    if scale is None or scale == 0:
        scale = abs(mb) if mb != 0 else abs(mv)
    delta = 0.0 if d == 0 else (d / abs(mb) if mb != 0 else math.inf)
    signed_delta = delta if mv >= mb else -delta
    band = max(tolerance * scale, floor)
    far = max(rules.far(tolerance) * scale, floor)
    ranges = [max(side) - min(side) for side in (baseline, value) if len(side) >= 2]
    width = max(ranges) if ranges else 0.0
    disjoint = min(value) > max(baseline) or max(value) < min(baseline)

    def relative(amount: float) -> float:
        return amount / scale if scale else (0.0 if amount == 0 else math.inf)

    def said(amount: float) -> str:
        """An absolute difference as the field is judged: points for a percentage, else relative."""
        return points_text(amount) if spec.in_points else format_pct(relative(amount)) + basis

    def result(state: FieldState, noise: float | None, reason: str) -> FieldChange:
        return FieldChange(field_name, state, mb, mv, signed_delta, noise, tolerance, reason)

    if min(baseline) == max(baseline) == min(value) == max(value):
        return result("unchanged", relative(width) if ranges else None, "identical values")
    if sorted(baseline) == sorted(value):
        return result("unchanged", relative(width), "the same values on both sides")
    if len(baseline) >= 2 and len(value) >= 2:
        noise = relative(width)
        if disjoint and d > width and d > band:
            return result("changed", noise, f"{said(d)} apart, outside both replica ranges (noise {said(width)})")
        if width > far:
            return result("ambiguous", noise, f"replicas disagree: spread {said(width)} exceeds {said(far)}")
        if d <= max(band, width):
            return result("unchanged", noise, f"{said(d)} is inside the noise band {said(max(band, width))}")
        return result("ambiguous", noise, f"{said(d)} exceeds the noise band but the replica ranges overlap")
    known = relative(width) if ranges else None
    threshold = max(far, width)
    if d > threshold:
        return result("changed", known, f"{said(d)} exceeds {said(threshold)} (no replicas on one side)")
    return result("ambiguous", known, f"{said(d)} with unknown noise (one side measured once): re-profile with replicas")
