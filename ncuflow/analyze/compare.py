"""Compare: the kernels of two sets of reports, field by field, against the noise band.

BASE and NEW are reports, run folders or stores, grouped into measurements
(``ncuflow.analyze.measurement``). Kernels are matched by function name and launch
configuration (grid, block); where one side holds several measurements with that key (a
store of many cells), the same cell spec on both sides decides. Each matched pair is
judged with explain's rules (``explain.judge``: every field changed / unchanged /
ambiguous against its noise band, then work × time) and carries the binding term of each
side. What matches nothing is listed, never dropped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ncuflow.analyze.change import DEFAULT_RULES, NoiseRules
from ncuflow.analyze.classify import DEFAULT_THRESHOLD, TERM_NAMES, check_threshold
from ncuflow.analyze.explain import Judgement, judge
from ncuflow.analyze.fields import STABILITY_FIELDS, Tolerances
from ncuflow.analyze.measurement import Measurement, measurements
from ncuflow.analyze.stability import DEFAULT_TOLERANCES
from ncuflow.read.runs import Loaded

# What each verdict means when two builds, inputs or GPUs are compared (explain's codes).
COMPARE_TEXT: dict[str, str] = {
    "no_effect": "same work, same time",
    "off_critical_path": "work changed, time did not",
    "critical_path": "work changed and time moved with it",
    "time_without_work": "time moved without counted work",
    "ambiguous": "ambiguous",
}

MatchKey = tuple[str, float | None, float | None]


def match_key(measurement: Measurement) -> MatchKey:
    grid, block = measurement.config()
    return (measurement.function, grid, block)


def key_label(key: MatchKey) -> str:
    function, grid, block = key
    config = [f"{name}={int(v) if float(v).is_integer() else v:,}" for name, v in (("grid", grid), ("block", block)) if v is not None]
    return function + (f" [{', '.join(config)}]" if config else "")


@dataclass(frozen=True)
class KernelComparison:
    key: MatchKey
    base: Measurement
    new: Measurement
    judged: Judgement

    @property
    def label(self) -> str:
        same_cell = self.base.params and self.base.spec() == self.new.spec()
        return key_label(self.key) + (f" ({self.base.spec()})" if same_cell else "")

    @property
    def verdict_text(self) -> str:
        text = COMPARE_TEXT[self.judged.verdict]
        lean = self.judged.lean
        if self.judged.verdict == "ambiguous" and lean is not None and lean != "ambiguous":
            text += f" (leans: {COMPARE_TEXT[lean]})"
        return text


@dataclass(frozen=True)
class Comparison:
    base: str
    new: str
    matched: tuple[KernelComparison, ...]
    only_base: tuple[Measurement, ...]
    only_new: tuple[Measurement, ...]
    tolerances: Tolerances
    threshold: float


def _pair(base: list[Measurement], new: list[Measurement]) -> tuple[list[tuple[Measurement, Measurement]], list[Measurement], list[Measurement]]:
    """Pairs of one match key: alone on each side, or the same cell spec on both."""
    if len(base) == 1 and len(new) == 1:
        return [(base[0], new[0])], [], []
    pairs: list[tuple[Measurement, Measurement]] = []
    rest_new = list(new)
    rest_base: list[Measurement] = []
    for b in base:
        same = next((n for n in rest_new if n.spec() == b.spec()), None)
        if same is None:
            rest_base.append(b)
        else:
            pairs.append((b, same))
            rest_new.remove(same)
    if len(rest_base) == 1 and len(rest_new) == 1:
        pairs.append((rest_base[0], rest_new[0]))
        return pairs, [], []
    return pairs, rest_base, rest_new


def compare_measurements(
    base: Sequence[Measurement],
    new: Sequence[Measurement],
    *,
    base_label: str = "base",
    new_label: str = "new",
    tolerances: Tolerances = DEFAULT_TOLERANCES,
    rules: NoiseRules = DEFAULT_RULES,
    threshold: float = DEFAULT_THRESHOLD,
    fields: Sequence[str] = STABILITY_FIELDS,
) -> Comparison:
    threshold = check_threshold(threshold)
    by_key_base: dict[MatchKey, list[Measurement]] = {}
    by_key_new: dict[MatchKey, list[Measurement]] = {}
    for m in base:
        by_key_base.setdefault(match_key(m), []).append(m)
    for m in new:
        by_key_new.setdefault(match_key(m), []).append(m)
    matched: list[KernelComparison] = []
    only_base: list[Measurement] = []
    only_new: list[Measurement] = []
    for key, members in by_key_base.items():
        pairs, left_base, left_new = _pair(members, by_key_new.get(key, []))
        only_base += left_base
        only_new += left_new
        for b, n in pairs:
            judged = judge(b, n, tolerances=tolerances, rules=rules, threshold=threshold, fields=fields, one_difference=None)
            matched.append(KernelComparison(key, b, n, judged))
    only_new += [m for key, members in by_key_new.items() if key not in by_key_base for m in members]
    return Comparison(base_label, new_label, tuple(matched), tuple(only_base), tuple(only_new), tolerances, threshold)


def compare_loaded(
    base: Loaded,
    new: Loaded,
    *,
    base_label: str = "base",
    new_label: str = "new",
    tolerances: Tolerances = DEFAULT_TOLERANCES,
    rules: NoiseRules = DEFAULT_RULES,
    threshold: float = DEFAULT_THRESHOLD,
) -> Comparison:
    """Compare every kernel of two loaded sets of runs (replicas and repeats pooled per kernel)."""
    return compare_measurements(
        measurements(base.runs), measurements(new.runs), base_label=base_label, new_label=new_label,
        tolerances=tolerances, rules=rules, threshold=threshold,
    )


# ---------------------------------------------------------------------------
# plain data for --json


def comparison_document(comparison: Comparison) -> dict[str, Any]:
    """The comparison as JSON-ready data (null where a side lacks a field)."""

    def side(m: Measurement) -> dict[str, Any]:
        model = m.model(comparison.threshold)
        return {
            "spec": m.spec(), "device": m.device, "launches": len(m.launches), "runs": m.runs,
            "bound": model.bound, **{f"u_{t}": model.u(t) for t in TERM_NAMES},
        }

    return {
        "base": comparison.base,
        "new": comparison.new,
        "threshold": comparison.threshold,
        "tolerances": comparison.tolerances.describe(),
        "matched": [
            {
                "kernel": k.key[0], "grid": k.key[1], "block": k.key[2],
                "verdict": k.judged.verdict, "verdict_text": k.verdict_text, "work": k.judged.work, "time": k.judged.time,
                "evidence": k.judged.deltas, "reasons": list(k.judged.reasons),
                "base": side(k.base), "new": side(k.new),
                "fields": {
                    f.field: {"state": f.state, "base": f.baseline, "new": f.value, "delta": _finite(f.delta),
                              "noise": _finite(f.noise), "reason": f.reason}
                    for f in k.judged.fields
                },
            }
            for k in comparison.matched
        ],
        "only_base": [{"kernel": m.function, "label": m.kernel, "spec": m.spec()} for m in comparison.only_base],
        "only_new": [{"kernel": m.function, "label": m.kernel, "spec": m.spec()} for m in comparison.only_new],
    }


def _finite(value: float | None) -> float | None:
    """JSON has no infinity: a relative change from 0 is null (the state still says changed)."""
    return value if value is not None and math.isfinite(value) else None
