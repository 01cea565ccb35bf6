"""Compare: the kernels of two sets of reports, field by field, against the noise band.

BASE and NEW are reports, run folders or stores, grouped into measurements
(``ncuflow.analyze.measurement``). Kernels are paired in three steps:

1. ``pairs`` the user names (``--pair BASE=NEW``: a renamed kernel), each side's name an
   exact function or demangled name, else a regular expression, selecting one kernel;
2. the same function name and launch configuration (grid, block); where one side holds
   several measurements with that key (a store of many cells), the same cell spec decides,
   else the same signature label (``kernel #2``: two reports of one program);
3. what is left with the same function name and another launch configuration, where that
   pairing is unique (one left on each side, or the same cell spec): *reconfigured*, the
   usual result of a tuning change; its work is compared per launch and per run in total.

Each pair is judged with explain's rules (``explain.judge``: every field changed /
unchanged / ambiguous against its noise band, then work × time) and carries the binding
term of each side. What matches nothing is listed, never dropped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ncuflow.analyze.change import DEFAULT_RULES, NoiseRules
from ncuflow.analyze.classify import DEFAULT_THRESHOLD, TERM_NAMES, check_threshold
from ncuflow.analyze.explain import Judgement, judge
from ncuflow.analyze.fields import STABILITY_FIELDS, WORK_FIELDS, Tolerances
from ncuflow.analyze.measurement import Measurement, measurements
from ncuflow.analyze.stability import DEFAULT_TOLERANCES
from ncuflow.errors import UsageError
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


How = Literal["matched", "reconfigured", "paired"]
TOTAL_FIELDS: tuple[str, ...] = ("duration_ns", *WORK_FIELDS)


def run_total(m: Measurement, field_name: str) -> float | None:
    """The field summed over a run's launches (the mean over the measurement's runs); None
    where a launch lacks it."""
    values = [launch.value(field_name) for launch in m.launches]
    if not values or any(v is None or not math.isfinite(v) for v in values):
        return None
    return math.fsum(v for v in values if v is not None) / max(m.runs, 1)


@dataclass(frozen=True)
class TotalChange:
    """One field summed over a run's launches, on each side: the work of a reconfigured kernel."""

    field: str
    base: float | None
    new: float | None

    @property
    def ratio(self) -> float | None:
        if self.base is None or self.new is None or self.base == 0:
            return None
        return self.new / self.base


@dataclass(frozen=True)
class KernelComparison:
    key: MatchKey
    base: Measurement
    new: Measurement
    judged: Judgement
    how: How = "matched"
    totals: tuple[TotalChange, ...] = field(default=())

    @property
    def new_key(self) -> MatchKey:
        return match_key(self.new)

    @property
    def launches_per_run(self) -> tuple[float, float]:
        return (len(self.base.launches) / max(self.base.runs, 1), len(self.new.launches) / max(self.new.runs, 1))

    @property
    def label(self) -> str:
        same_cell = self.base.params and self.base.spec() == self.new.spec()
        if self.how == "matched":
            text = key_label(self.key)
        else:
            text = f"{key_label(self.key)} → {key_label(self.new_key)}"
        return text + (f" ({self.base.spec()})" if same_cell else "")

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
    for b in list(rest_base):  # two reports of one program: the same signature label (``name #2``)
        same = next((n for n in rest_new if n.kernel == b.kernel), None)
        if same is not None:
            pairs.append((b, same))
            rest_base.remove(b)
            rest_new.remove(same)
    if len(rest_base) == 1 and len(rest_new) == 1:
        pairs.append((rest_base[0], rest_new[0]))
        return pairs, [], []
    return pairs, rest_base, rest_new


def _named(pool: Sequence[Measurement], name: str, side: str) -> list[Measurement]:
    """The measurements of a side a --pair name selects: exact names first, else a regular expression."""
    def names(m: Measurement) -> tuple[str, ...]:
        first = m.launches[0].kernel if m.launches else None
        return (m.function, first.demangled) if first is not None else (m.function,)

    exact = [m for m in pool if name in names(m)]
    if exact:
        return exact
    try:
        pattern = re.compile(name)
    except re.error as error:
        raise UsageError(f"--pair: {name!r} is not a kernel name of {side} nor a regular expression: {error}.",
                         "", "Quote the name, or escape its special characters.") from error
    found = [m for m in pool if any(pattern.search(n) for n in names(m))]
    if not found:
        known = ", ".join(sorted({m.function for m in pool})) or "none"
        raise UsageError(f"--pair: no kernel of {side} is called {name!r}.",
                         f"The kernels of {side} not matched otherwise are: {known}.", "Name one of them.")
    return found


@dataclass(frozen=True)
class Judging:
    """How each pair of kernels is judged: the noise bands, their rules, the on-wall threshold, the fields."""

    tolerances: Tolerances = DEFAULT_TOLERANCES
    rules: NoiseRules = DEFAULT_RULES
    threshold: float = DEFAULT_THRESHOLD
    fields: Sequence[str] = STABILITY_FIELDS

    def __post_init__(self) -> None:
        object.__setattr__(self, "threshold", check_threshold(self.threshold))


def _judged(b: Measurement, n: Measurement, how: How, judging: Judging) -> KernelComparison:
    judged = judge(b, n, tolerances=judging.tolerances, rules=judging.rules, threshold=judging.threshold,
                   fields=judging.fields, one_difference=None)
    totals = tuple(TotalChange(f, run_total(b, f), run_total(n, f)) for f in TOTAL_FIELDS) if how != "matched" else ()
    return KernelComparison(match_key(b), b, n, judged, how, totals)


def _group(members: Sequence[Measurement], key: Any) -> dict[Any, list[Measurement]]:
    grouped: dict[Any, list[Measurement]] = {}
    for m in members:
        grouped.setdefault(key(m), []).append(m)
    return grouped


def compare_measurements(
    base: Sequence[Measurement],
    new: Sequence[Measurement],
    *,
    labels: tuple[str, str] = ("base", "new"),
    judging: Judging | None = None,
    pairs: Sequence[tuple[str, str]] = (),
) -> Comparison:
    """Pair the kernels of two sides (--pair first, then name and configuration, then a unique
    reconfiguration) and judge each pair; what pairs with nothing is listed."""
    options = judging or Judging()
    rest_base, rest_new = list(base), list(new)
    matched: list[KernelComparison] = []

    def take(found: list[tuple[Measurement, Measurement]], how: How) -> None:
        for b, n in found:
            matched.append(_judged(b, n, how, options))
            rest_base.remove(b)
            rest_new.remove(n)

    for base_name, new_name in pairs:
        found, left_b, left_n = _pair(_named(rest_base, base_name, "BASE"), _named(rest_new, new_name, "NEW"))
        if left_b or left_n:
            raise UsageError(
                f"--pair {base_name}={new_name} selects {len(left_b) + len(found)} kernels of BASE and "
                f"{len(left_n) + len(found)} of NEW, which do not pair one to one.",
                "Each side of --pair must select one kernel (or the same cell specs on both sides).",
                "Use the exact function names (`ncuflow summary` lists them).",
            )
        take(found, "paired")
    new_by_key = _group(rest_new, match_key)
    for key, members in list(_group(rest_base, match_key).items()):
        found, _, _ = _pair(members, new_by_key.get(key, []))
        take(found, "matched")
    new_by_name = _group(rest_new, lambda m: m.function)
    for name, members in list(_group(rest_base, lambda m: m.function).items()):
        found, left_b, left_n = _pair(members, new_by_name.get(name, []))
        if not left_b and not left_n:  # a unique pairing only
            take(found, "reconfigured")
    return Comparison(labels[0], labels[1], tuple(matched), tuple(rest_base), tuple(rest_new), options.tolerances,
                      options.threshold)


def compare_loaded(
    base: Loaded,
    new: Loaded,
    *,
    base_label: str = "base",
    new_label: str = "new",
    tolerances: Tolerances = DEFAULT_TOLERANCES,
    rules: NoiseRules = DEFAULT_RULES,
    threshold: float = DEFAULT_THRESHOLD,
    pairs: Sequence[tuple[str, str]] = (),
) -> Comparison:
    """Compare every kernel of two loaded sets of runs (replicas and repeats pooled per kernel)."""
    return compare_measurements(
        measurements(base.runs), measurements(new.runs), labels=(base_label, new_label),
        judging=Judging(tolerances, rules, threshold), pairs=pairs,
    )


# ---------------------------------------------------------------------------
# plain data for --json


def comparison_document(comparison: Comparison) -> dict[str, Any]:
    """The comparison as JSON-ready data (null where a side lacks a field)."""
    from ncuflow.analyze.beyond_work import beyond_work

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
                "kernel": k.key[0], "grid": k.key[1], "block": k.key[2], "how": k.how,
                "new_kernel": k.new_key[0], "new_grid": k.new_key[1], "new_block": k.new_key[2],
                "launches_per_run": {"base": k.launches_per_run[0], "new": k.launches_per_run[1]},
                "totals_per_run": {t.field: {"base": t.base, "new": t.new, "ratio": _finite(t.ratio)} for t in k.totals},
                "verdict": k.judged.verdict, "verdict_text": k.verdict_text, "work": k.judged.work, "time": k.judged.time,
                "evidence": k.judged.deltas, "reasons": list(k.judged.reasons),
                "base": side(k.base), "new": side(k.new),
                "beyond_work": beyond_work(k.base, k.new, comparison.threshold).document(),
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
