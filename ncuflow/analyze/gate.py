"""The gate: compare's pairs and judgements turned into one label per kernel and an exit status.

``ncuflow gate BASELINE NEW`` pairs the kernels as ``compare`` does (``compare_measurements``:
name and launch configuration, reconfigured, ``--pair``) and judges every field as compare
does (``change.compare_field``: against the field's noise band, by its tolerance class). The
gate adds what a CI job needs on top:

* one **label** per kernel (``GATE_LABELS``, one row each, in the nvbench spirit), the first row
  whose condition holds, in the table's order;
* which labels **fail** the job (the row's ``fails``): more work and slower always; a moved verdict
  where the rules say so; ambiguous and missing under ``--strict`` (exit 3); improvements never;
* **rules** (``GateRules``): the growth each work field may show before it fails (0 by default:
  any change compare calls ``changed``), per field and per kernel (RE2 patterns), kernels ignored
  by pattern, and when time is gated: only where both sides carry noise (two or more launches:
  replicas or repeated launches), or beyond an explicit ``time_tolerance``.

Work counters are judged by their tolerance class (exact / near-exact / bytes, the field table):
a difference compare leaves ambiguous for want of replicas but inside the class's band (the noise
measured on replays of the H200 store) counts as no change; launches per run are an exact count;
a reconfigured or ``--pair`` kernel is judged on its work per run in total;
time where compare's range rule cannot decide (the replica ranges overlap) is decided by the
standard error of the two means at ``Z_DECIDE`` σ, and where that cannot decide either the label
is *ambiguous* with the replicas a side that would (``replicas_to_decide``).

Pure functions over frozen dataclasses; no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from ncuflow.analyze.change import DEFAULT_RULES, FieldChange
from ncuflow.analyze.compare import Comparison, KernelComparison, key_label
from ncuflow.analyze.fields import FIELD_CLASSES, WORK_FIELDS, format_pct, noise_band
from ncuflow.analyze.measurement import Measurement
from ncuflow.files.patterns import KernelPattern

FailWhen = Literal["never", "always", "verdict", "strict"]
LabelCode = Literal["more_work", "slower", "verdict_moved", "ambiguous", "missing", "less_work", "faster", "same", "new"]


@dataclass(frozen=True)
class GateLabel:
    """One label a kernel can get: its code (JSON, JUnit), its words, when it fails the job."""

    code: LabelCode
    text: str
    fails: FailWhen  # never; always (exit 1); verdict (exit 1 with fail_on_verdict); strict (exit 3 with --strict)
    meaning: str


# In order: a kernel gets the first label whose condition holds (``_applies``); the report lists
# the kernels that fail the job first, then in this order.
GATE_LABELS: tuple[GateLabel, ...] = (
    GateLabel("more_work", "more work", "always",
              "a work counter grew beyond its noise band (its tolerance class) and the rule's allowance"),
    GateLabel("slower", "slower", "always",
              "the duration grew beyond its noise, with noise known on both sides or beyond --time-tolerance"),
    GateLabel("ambiguous", "ambiguous", "strict",
              "a gated field moved by less than its noise can tell apart; the label says how many replicas would decide"),
    GateLabel("less_work", "less work", "never", "a work counter shrank and none grew"),
    GateLabel("faster", "faster", "never", "the duration shrank beyond its noise and no work counter grew"),
    GateLabel("verdict_moved", "verdict moved", "verdict",
              "the binding wall of the max model changed while work and time stayed inside their noise"),
    GateLabel("same", "same", "never", "every gated field inside its noise band"),
    GateLabel("missing", "missing", "strict", "a kernel of the baseline that the new side does not hold"),
    GateLabel("new", "new", "never", "a kernel of the new side that the baseline does not hold"),
)
LABELS: Mapping[str, GateLabel] = {label.code: label for label in GATE_LABELS}


@dataclass(frozen=True)
class ExitCode:
    code: int
    meaning: str


EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode(0, "pass: no kernel regressed"),
    ExitCode(1, "regression: a kernel got more work, got slower, or (with fail_on_verdict) moved its verdict"),
    ExitCode(2, "bad input or usage: an unreadable report, a refused baseline, a bad rules file"),
    ExitCode(3, "undecidable under --strict: a kernel ambiguous or missing, none regressed"),
)
PASS, REGRESSION, UNDECIDABLE = 0, 1, 3

# The standard errors apart two means of durations must lie to call time changed where the
# replica ranges overlap (3σ: about 1 false alarm in 700 kernels gated for "slower").
Z_DECIDE = 3.0
# What the launch count per run is called where it moved (not a field of the table: a count of launches).
LAUNCHES_PER_RUN = "launches_per_run"
# The fewest launches a side needs for its time noise to count as known.
TIME_NOISE_LAUNCHES = 2


# ---------------------------------------------------------------------------
# rules


@dataclass(frozen=True)
class KernelRule:
    """Rules for the kernels a pattern selects: field allowances, or ignored altogether."""

    pattern: KernelPattern
    allow: tuple[tuple[str, float], ...] = ()  # field -> relative growth that does not fail
    ignore: bool = False


@dataclass(frozen=True)
class GateRules:
    """What counts as a regression (the TOML ``--rules`` file and the options, ``gate_rules``)."""

    allow: tuple[tuple[str, float], ...] = ()  # field -> relative growth that does not fail (default 0)
    kernels: tuple[KernelRule, ...] = ()
    ignore: tuple[KernelPattern, ...] = ()
    time_tolerance: float | None = None  # relative: time gated even without noise on both sides
    fail_on_verdict: bool = False
    strict: bool = False
    work_only: bool = False  # time and verdict not gated (a baseline from another GPU, downgraded)

    def ignored(self, name: str) -> bool:
        return any(p.search(name) for p in self.ignore) or any(r.ignore and r.pattern.search(name) for r in self.kernels)

    def allowance(self, name: str, field_name: str) -> float:
        """The growth of ``field_name`` the kernel ``name`` may show: the last kernel rule that
        names the field, else the file's ``[allow]``, else 0."""
        for rule in reversed(self.kernels):
            if rule.pattern.search(name) and field_name in dict(rule.allow):
                return dict(rule.allow)[field_name]
        return dict(self.allow).get(field_name, 0.0)


DEFAULT_GATE_RULES = GateRules()


# ---------------------------------------------------------------------------
# one kernel


Direction = Literal["up", "down", "undecided", "allowed"]


@dataclass(frozen=True)
class Moved:
    """A gated field that moved: which way, by how much, and why it was judged so."""

    field: str
    direction: Direction
    base: float | None
    new: float | None
    change: str  # '+2.0 %', '×16'
    reason: str

    @property
    def grew(self) -> bool:
        return self.base is not None and self.new is not None and self.new > self.base

    def text(self) -> str:
        """``inst_executed +2.0 %``, ``duration_ns ambiguous +1.1 %``: what a table cell shows."""
        return f"{self.field} {'ambiguous ' if self.direction == 'undecided' else ''}{self.change}"

    def detail(self) -> str:
        """The text with why it was judged so (JUnit, JSON)."""
        return f"{self.text()} ({self.reason})"


@dataclass(frozen=True)
class KernelGate:
    """The label of one kernel, the fields that decided it, and what the gate could not judge."""

    kernel: str  # compare's label: function [grid, block] (→ the new side's where reconfigured), (cell spec)
    label: GateLabel
    moved: tuple[Moved, ...] = ()
    notes: tuple[str, ...] = ()
    replicas: int | None = None  # for ambiguous: launches a side that would decide it
    function: str = ""  # the kernel's function name on the baseline side (or the side that holds it)
    compared: KernelComparison | None = field(default=None, compare=False, repr=False)

    @property
    def regressed(self) -> tuple[Moved, ...]:
        return tuple(m for m in self.moved if m.direction == "up")


def replicas_to_decide(delta: float, spreads: Sequence[float]) -> int | None:
    """Launches a side that make a relative difference ``delta`` lie ``Z_DECIDE`` standard errors
    apart, given each side's relative standard deviation (``spreads``): n ≥ Z² (σ_b² + σ_n²) / δ².
    None where ``delta`` is 0 (no number of replicas tells a zero difference from noise)."""
    if delta == 0 or not math.isfinite(delta):
        return None
    variance = math.fsum(s * s for s in spreads)
    return max(TIME_NOISE_LAUNCHES, math.ceil(Z_DECIDE * Z_DECIDE * variance / (delta * delta)))


def _relative_sd(values: Sequence[float]) -> float:
    mean = statistics.fmean(values)
    return statistics.stdev(values) / abs(mean) if len(values) >= 2 and mean else 0.0


def within_class_band(k: KernelComparison, change: FieldChange) -> bool:
    """A difference compare leaves ambiguous for want of replicas, inside the band of the field's
    tolerance class (measured on replays: ``fields.py``): the class is the noise known beforehand."""
    if change.baseline is None or change.value is None:
        return False
    scale = k.base.noise_scale(change.field) or abs(change.baseline)
    return abs(change.value - change.baseline) <= noise_band(change.field, change.tolerance, scale)


def _direction(k: KernelComparison, field_name: str, ratio: float | None, up: bool, rules: GateRules) -> Direction:
    """A decided move: up beyond the allowance, allowed, or down."""
    if up and (ratio is None or ratio - 1.0 > rules.allowance(k.base.function, field_name)):
        return "up"
    return "allowed" if up else "down"


def _moved(k: KernelComparison, field_name: str, direction: Direction, values: tuple[float | None, float | None],
           change: str, reason: str, rules: GateRules) -> Moved:
    why = f"{FIELD_CLASSES[field_name].replace('_', '-')}: {reason}"
    if direction == "allowed":
        why += f"; within the allowance {format_pct(rules.allowance(k.base.function, field_name))}"
    return Moved(field_name, direction, values[0], values[1], change, why)


def _per_launch(k: KernelComparison, rules: GateRules) -> list[Moved]:
    """The work fields that moved per launch (changed, or ambiguous beyond the class band)."""
    found: list[Moved] = []
    for change in k.judged.fields:
        if change.field not in WORK_FIELDS or change.state in ("unchanged", "missing"):
            continue
        if change.state == "ambiguous" and within_class_band(k, change):
            continue
        up = (change.value or 0.0) > (change.baseline or 0.0)
        direction = "undecided" if change.state == "ambiguous" else _direction(k, change.field, change.ratio, up, rules)
        found.append(_moved(k, change.field, direction, (change.baseline, change.value), change.delta_text(),
                            change.reason, rules))
    return found


def _per_run(k: KernelComparison, rules: GateRules) -> list[Moved]:
    """A reconfigured or --pair kernel: its work per run in total (another grid may split the same
    work into more launches), a total beyond compare's no-replica limit of its class counting."""
    found: list[Moved] = []
    launches = "{:g} → {:g} launches a run".format(*k.launches_per_run)
    for total in k.totals:
        ratio = total.ratio
        if total.field not in WORK_FIELDS or ratio is None or total.base is None or total.new is None:
            continue
        limit = DEFAULT_RULES.far(k.judged.field(total.field).tolerance)
        if abs(ratio - 1.0) <= limit:
            continue
        change = f"×{ratio:.3g}" if ratio >= 1.5 or ratio <= 1 / 1.5 else f"{(ratio - 1) * 100:+.1f} %"
        found.append(_moved(k, total.field, _direction(k, total.field, ratio, ratio > 1, rules), (total.base, total.new),
                            change, f"per run in total ({launches}) beyond {format_pct(limit)}", rules))
    return found


def _work(k: KernelComparison, rules: GateRules) -> list[Moved]:
    """The work that moved: per launch for a kernel matched as it was (and its launches per run),
    per run in total for a reconfigured or --pair one."""
    if k.how != "matched" and k.totals:
        return _per_run(k, rules)
    launches = _launches(k)
    return ([launches] if launches is not None else []) + _per_launch(k, rules)


def _launches(k: KernelComparison) -> Moved | None:
    """The kernel launched more (or fewer) times per run: more (or less) work whatever each launch does."""
    base, new = k.launches_per_run
    if base == new or base == 0:
        return None
    return Moved(LAUNCHES_PER_RUN, "up" if new > base else "down", base, new, f"{base:g} → {new:g}",
                 "launches per run, an exact count")


def _time_by_tolerance(change: FieldChange, tolerance: float) -> Moved | None:
    ratio = change.ratio
    if ratio is None or abs(ratio - 1.0) <= tolerance:
        return None
    direction: Direction = "up" if ratio > 1.0 else "down"
    return Moved("duration_ns", direction, change.baseline, change.value, change.delta_text(),
                 f"beyond --time-tolerance {format_pct(tolerance)}")


def _time_by_standard_error(base: Sequence[float], new: Sequence[float], change: FieldChange) -> tuple[Moved, int | None]:
    """Time where compare's ranges overlap: the two means ``Z_DECIDE`` standard errors apart decide."""
    mean_b, mean_n = statistics.fmean(base), statistics.fmean(new)
    error = math.sqrt(statistics.variance(base) / len(base) + statistics.variance(new) / len(new))
    delta = (mean_n - mean_b) / mean_b if mean_b else 0.0
    band = change.tolerance * abs(mean_b)
    if error > 0 and abs(mean_n - mean_b) > max(Z_DECIDE * error, band):
        direction: Direction = "up" if mean_n > mean_b else "down"
        return Moved("duration_ns", direction, change.baseline, change.value, change.delta_text(),
                     f"means {abs(mean_n - mean_b) / error:.1f} standard errors apart"), None
    needed = replicas_to_decide(delta, [_relative_sd(base), _relative_sd(new)])
    return Moved("duration_ns", "undecided", change.baseline, change.value, change.delta_text(), change.reason), needed


def _time_by_noise(k: KernelComparison, change: FieldChange) -> tuple[Moved | None, int | None]:
    """Time with noise known on both sides: compare's state, else the standard error of the means."""
    if change.state == "unchanged":
        return None, None
    if change.state == "changed":
        up = (change.value or 0.0) > (change.baseline or 0.0)
        return Moved("duration_ns", "up" if up else "down", change.baseline, change.value, change.delta_text(),
                     change.reason), None
    return _time_by_standard_error(k.base.values("duration_ns"), k.new.values("duration_ns"), change)


def _time(k: KernelComparison, rules: GateRules) -> tuple[Moved | None, int | None, str | None]:
    """The duration's move (None: inside its noise or the time tolerance), the replicas that would
    decide it, or why time is not gated.

    With noise on both sides the noise decides, and ``time_tolerance`` is an allowance on top;
    without, ``time_tolerance`` alone decides, and with neither time is not gated.
    """
    if rules.work_only:
        return None, None, "time not gated: the baseline comes from another GPU (work counters only)"
    change = k.judged.field("duration_ns")
    if change.state == "missing":
        return None, None, "time not gated: no duration on both sides"
    if min(len(k.base.values("duration_ns")), len(k.new.values("duration_ns"))) < TIME_NOISE_LAUNCHES:
        if rules.time_tolerance is not None:
            return _time_by_tolerance(change, rules.time_tolerance), None, None
        return None, None, ("time not gated: one side measured once (profile with --replicas, or pass --time-tolerance)"
                            if change.state != "unchanged" else None)
    moved, needed = _time_by_noise(k, change)
    if moved is not None and moved.direction in ("up", "down") and rules.time_tolerance is not None \
            and _time_by_tolerance(change, rules.time_tolerance) is None:
        moved = replace(moved, direction="allowed", reason=f"{moved.reason}; within --time-tolerance "
                                                           f"{format_pct(rules.time_tolerance)}")
    return moved, needed, None


def _applies(moved: Sequence[Moved], bound_moved: bool, rules: GateRules) -> set[LabelCode]:
    """Every label whose condition holds for a pair of kernels (the first in the table is given)."""
    found: set[LabelCode] = {"same"}
    for m in moved:
        time = m.field == "duration_ns"
        if m.direction == "up":
            found.add("slower" if time else "more_work")
        elif m.direction == "down":
            found.add("faster" if time else "less_work")
    # an undecided field that grew could hide a regression; one that shrank beside a decided
    # improvement (DRAM writes inside a total that shrank) does not make the kernel ambiguous
    undecided = [m for m in moved if m.direction == "undecided"]
    if any(m.grew for m in undecided) or (undecided and not found & {"less_work", "faster"}):
        found.add("ambiguous")
    if bound_moved and not rules.work_only:
        found.add("verdict_moved")
    return found


def _label(moved: Sequence[Moved], bound_moved: bool, rules: GateRules) -> LabelCode:
    applies = _applies(moved, bound_moved, rules)
    return next(label.code for label in GATE_LABELS if label.code in applies)


def gate_kernel(k: KernelComparison, rules: GateRules) -> KernelGate:
    """The label of one pair of kernels under ``rules``."""
    moved = _work(k, rules)
    time, needed, time_note = _time(k, rules)
    if time is not None:
        moved.append(time)
    undecided_work = [m for m in moved if m.direction == "undecided" and m.field != "duration_ns"]
    if undecided_work and needed is None:
        needed = TIME_NOISE_LAUNCHES  # two launches a side make a work counter's noise known
    base_bound, new_bound = k.judged.baseline_model.bound, k.judged.value_model.bound
    notes = [time_note] if time_note else []
    if base_bound != new_bound:
        notes.append(f"bound {base_bound} → {new_bound}")
    notes += [r for r in k.judged.reasons if r.startswith("different GPUs")]
    code = _label(moved, base_bound != new_bound, rules)
    return KernelGate(k.label, LABELS[code], tuple(moved), tuple(notes), needed if code == "ambiguous" else None,
                      k.base.function, k)


# ---------------------------------------------------------------------------
# the whole gate


@dataclass(frozen=True)
class GateResult:
    """Every kernel's label, the kernels ignored by the rules, the notes, and the exit status."""

    base: str
    new: str
    kernels: tuple[KernelGate, ...]
    ignored: tuple[str, ...]
    notes: tuple[str, ...]
    rules: GateRules

    def fails(self, gate: KernelGate) -> bool:
        return gate.label.fails == "always" or (gate.label.fails == "verdict" and self.rules.fail_on_verdict)

    @property
    def failing(self) -> tuple[KernelGate, ...]:
        return tuple(g for g in self.kernels if self.fails(g))

    @property
    def exit_code(self) -> int:
        if self.failing:
            return REGRESSION
        if self.rules.strict and any(g.label.fails == "strict" for g in self.kernels):
            return UNDECIDABLE
        return PASS

    def counts(self) -> dict[str, int]:
        """How many kernels got each label (labels in the table's order, those given only)."""
        return {label.text: n for label in GATE_LABELS if (n := sum(g.label is label for g in self.kernels))}


def _unpaired(m: Measurement, code: LabelCode) -> KernelGate:
    spec = f" ({m.spec()})" if m.params else ""
    return KernelGate(key_label((m.function, *m.config())) + spec, LABELS[code], notes=() if spec else (m.spec(),),
                      function=m.function)


def gate(comparison: Comparison, rules: GateRules = DEFAULT_GATE_RULES, notes: Sequence[str] = ()) -> GateResult:
    """Label every kernel of a comparison under ``rules``; those that fail the job first, then in
    the label table's order."""
    ignored: list[str] = []
    kernels: list[KernelGate] = []
    for k in comparison.matched:
        if rules.ignored(k.base.function) or rules.ignored(k.new.function):
            ignored.append(k.label)
        else:
            kernels.append(gate_kernel(k, rules))
    for side, code in ((comparison.only_base, "missing"), (comparison.only_new, "new")):
        for m in side:
            if rules.ignored(m.function):
                ignored.append(key_label((m.function, *m.config())))
            else:
                kernels.append(_unpaired(m, code))  # type: ignore[arg-type]
    result = GateResult(comparison.base, comparison.new, tuple(kernels), tuple(ignored), tuple(notes), rules)
    order = {label.code: index for index, label in enumerate(GATE_LABELS)}
    ranked = sorted(kernels, key=lambda g: (not result.fails(g), order[g.label.code], g.kernel))
    return GateResult(comparison.base, comparison.new, tuple(ranked), tuple(ignored), tuple(notes), rules)
