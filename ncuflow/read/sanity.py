"""Values that cannot be: checked once, when a launch's canonical fields are resolved.

Whatever reader built them, a ``Launch``'s fields pass through ``checked`` (its
``__post_init__``), so that no command ever shows an impossible value as data:

- a peak DRAM bandwidth above the device's rated one (the DRAM clock measured over a
  few-µs launch overshoots) is the rated one, with a note;
- a hit rate above 100 % or below 0 % (ncu computes it from sampled sector counts and
  can land at 100.43 %) is clamped into [0, 100], with a note giving the stored value;
  one outside the % rule's range below (−1e6 %) is no sampling noise: missing, with a note;
- sectors per request over 0 requests is undefined (ncu's own average stores 0.0): the
  field is missing, with a note;
- a count (bytes, sectors, requests, instructions, ...) that is negative, or, where it was
  read as a counter, not a whole number, is missing, with a note (a count an alias chain
  derives by arithmetic, such as a FLOP rate times cycles, may be fractional);
- a field whose source metrics ncu stored as NaN (a launch whose counters were not
  collected) is missing with a note saying so, instead of "no source metric";
- a peak that is 0 is no peak: missing, with a note;
- a % of peak below 0 or above ``RANGES``' ceiling (NVIDIA's figures overshoot 100 % a little,
  never twice), a duration of 0 or less, a rate or a ratio below 0, and any of them above its
  kind's ceiling (a 1e308 ns, whose sum overflows) is missing, with a note giving the stored
  value: a crafted or corrupted report never reaches a verdict or a total through it;
- a total of kinds (``global_ld_inst``: LDG + LDGSTS + TMA loads) is the sum of the kinds
  the launch's chip has; where the report lacks one of them the total is missing, with a
  note naming it (a partial sum would read as a change of work between two collections).

Which rule applies to a field is its row's ``sanity`` (``ncuflow.read.metrics``).

NVIDIA's breakdown (``Launch.breakdown``: a unit's % of peak) is checked by the % rule too
(``checked_breakdown``): a unit outside it is left out of the model, with one note keyed
``breakdown``.

Each note is keyed by the field's name (``Launch.notes``); the tables, ``classify
--evidence`` / ``--json`` and the export carry them.
"""

from __future__ import annotations

from collections.abc import Mapping

from ncuflow.read.chains import CanonicalField, Part, exact_sum
from ncuflow.read.metrics import FIELDS, FIELDS_BY_NAME

# The rows each rule applies to (their ``sanity``).
SHARE_PERCENTAGES: tuple[str, ...] = tuple(f.name for f in FIELDS if f.sanity == "share")
_WHOLE = tuple(f for f in FIELDS if f.sanity == "whole")
_POSITIVE = tuple(f.name for f in FIELDS if f.sanity == "positive")
_PER_REQUEST = tuple(f.name for f in FIELDS if f.sanity == "per_request")
_RATED_PEAK = tuple(f.name for f in FIELDS if f.sanity == "rated_peak")
_TOTALS = tuple(f for f in FIELDS if f.parts)

# sanity -> (lowest, highest, whether the lowest itself is allowed, what the field is): outside it a
# value is missing with a note. The ceilings are far above any measurement (the corpus: at most
# 99.6 %, 1.2 s, 1e14 /s, a ratio of 1,312) and far below float overflow, so that sums stay finite.
RANGES: dict[str, tuple[float, float, bool, str]] = {
    "percent": (0.0, 200.0, True, "a % of peak"),
    "duration": (0.0, 1e15, False, "a duration (ns)"),
    "rate": (0.0, 1e20, True, "a rate"),
    "positive": (0.0, 1e20, False, "a peak"),
    "rated_peak": (0.0, 1e20, False, "a peak"),
    "ratio": (0.0, 1e12, True, "a ratio"),
    "per_request": (0.0, 1e12, True, "a ratio"),
}
# (field, lowest, highest, whether the lowest is allowed, what it is) of each ranged row, looked up once.
_RANGED = tuple((f.name, *RANGES[f.sanity]) for f in FIELDS if f.sanity in RANGES)
_PERCENT_LOW, _PERCENT_HIGH = RANGES["percent"][:2]

# A measured peak this far above the rated one is a clock measured over too short a launch.
RATED_SLACK = 0.001
HBM_BUS_BITS = 1024

Checked = tuple[dict[str, float | None], dict[str, str], tuple[str, ...], dict[str, str]]


def _number(value: float) -> str:
    return f"{value:,.6g}"


def _rated_peak(values: Mapping[str, float | None], provenance: Mapping[str, str]) -> tuple[float, str | None] | None:
    """The rated peak DRAM bandwidth where the one from the measured clock cannot be right.

    HBM (a bus of 1024 bits or more) has one memory clock, so the clock measured over a
    launch only adds noise; a GDDR clock can run below its rating (power states, ncu's
    clock control) but never above it. Returns the peak and a note (None for HBM, whose
    peak is the rated one by definition: its provenance says so).
    """
    if not _RATED_PEAK:
        return None
    (name,) = _RATED_PEAK
    peak, rated = values.get(name), values.get("dram_rated_bw")
    if peak is None or rated is None or peak == rated or provenance.get(name) == provenance.get("dram_rated_bw"):
        return None
    if (values.get("dram_bus_bits") or 0) >= HBM_BUS_BITS:
        return rated, None
    if peak > rated * (1 + RATED_SLACK):
        return rated, (f"the DRAM clock measured over this launch gives {_number(peak / 1e9)} GB/s, above the "
                       f"rated {_number(rated / 1e9)} GB/s: the rated peak is used")
    return None


def _derived(source: str | None) -> bool:
    """Whether a field's provenance is arithmetic over raw metrics (not one counter read as it is)."""
    return source is not None and any(mark in source for mark in (" × ", " / ", " + ", "("))


def _impossible(values: Mapping[str, float | None],
                provenance: Mapping[str, str]) -> dict[str, tuple[float | None, str]]:
    """field -> (the value to keep, its note) for every value that cannot be."""
    found: dict[str, tuple[float | None, str]] = {}
    for name in SHARE_PERCENTAGES:
        value = values.get(name)
        if value is not None and not _in_range(value, "percent"):  # no sampling noise: no measurement
            found[name] = (None, f"a share, stored as {_number(value)} %: outside 0 … 200, no measurement")
        elif value is not None and not 0.0 <= value <= 100.0:
            bound = 100.0 if value > 100.0 else 0.0
            found[name] = (bound, f"ncu stored {_number(value)} %, outside 0–100 %: clamped to {bound:g} %")
    for name in _PER_REQUEST:
        spr = values.get(name)
        if values.get("global_ld_requests") == 0 or (spr is not None and spr <= 0.0):
            stored = "" if spr is None else f" (stored as {_number(spr)})"
            found[name] = (None, f"undefined: no global-load request, 0 sectors over 0 requests{stored}")
    for name in _POSITIVE:
        value = values.get(name)
        if value is not None and value <= 0.0:
            found[name] = (None, f"a peak, stored as {_number(value)}: no peak is 0 or less")
    for name, low, high, low_allowed, what in _RANGED:
        value = values.get(name)
        if value is None or (low < value <= high) or (low_allowed and value == low) or name in found:
            continue
        found[name] = (None, f"{what}, stored as {_number(value)}: outside {_number(low)} … {_number(high)}, "
                             "no measurement")
    for field in _WHOLE:
        value = values.get(field.name)
        whole = float(value).is_integer() or _derived(provenance.get(field.name)) if value is not None else True
        if value is not None and not (0 <= value < 2**63 and whole):
            found[field.name] = (None, f"a count, stored as {_number(value)}: not a whole number in 0 … 2⁶³")
    return found


def _in_range(value: float, sanity: str) -> bool:
    low, high, low_allowed, _ = RANGES[sanity]
    return (low <= value if low_allowed else low < value) and value <= high


def checked_breakdown(breakdown: Mapping[str, float]) -> tuple[dict[str, float], str] | None:
    """NVIDIA's breakdown without the units whose % of peak is out of range, and a note naming
    them; None when every unit is in range (the common case: two builtins over the values)."""
    if min(breakdown.values()) >= _PERCENT_LOW and max(breakdown.values()) <= _PERCENT_HIGH:
        return None
    out = {metric: pct for metric, pct in breakdown.items() if not _in_range(pct, "percent")}
    first, value = next(iter(out.items()))
    note = (f"{len(out)} unit{'s' if len(out) > 1 else ''} stored outside {_number(_PERCENT_LOW)} … "
            f"{_number(_PERCENT_HIGH)} % of peak ({first}: {_number(value)}{', ...' if len(out) > 1 else ''}): "
            "left out of the model")
    return {metric: pct for metric, pct in breakdown.items() if metric not in out}, note


def _capability(compute_capability: str | None) -> float | None:
    try:
        return float(compute_capability) if compute_capability else None
    except ValueError:
        return None


def parts_on(total: CanonicalField, compute_capability: str | None) -> tuple[Part, ...]:
    """The kinds of a total a chip has (every kind where the chip is not known)."""
    capability = _capability(compute_capability)
    return tuple(p for p in total.parts if capability is None or capability >= p.since)


def totals(values: Mapping[str, float | None], compute_capability: str | None
           ) -> dict[str, tuple[float | None, str, bool]]:
    """field -> (value, provenance or note, whether it is a value) for each total of kinds."""
    found: dict[str, tuple[float | None, str, bool]] = {}
    for total in _TOTALS:
        parts = parts_on(total, compute_capability)
        absent = [p for p in parts if values.get(p.field) is None]
        if not any(values.get(p.field) is not None for p in total.parts):
            continue  # none of its kinds in the report: missing like any field without a source
        if absent:
            chip = f"sm_{compute_capability.replace('.', '')}" if compute_capability else "a chip of unknown generation"
            found[total.name] = (None, (
                f"{' and '.join(p.kind for p in absent)} not counted in the report ({', '.join(p.field for p in absent)}), "
                f"which {chip} has: no total"), False)
            continue
        value = exact_sum(tuple(values.get(p.field) or 0.0 for p in parts))
        kinds = ", ".join(p.kind for p in parts)
        found[total.name] = (value, " + ".join(p.field for p in parts) + f" ({kinds})", True)
    return found


def _stored_as_nan(missing: tuple[str, ...], not_numbers: tuple[str, ...]) -> dict[str, tuple[float | None, str]]:
    """field -> (None, note) for each missing field whose source metrics ncu stored as NaN."""
    found: dict[str, tuple[float | None, str]] = {}
    if not not_numbers:  # the common case: nothing stored as NaN
        return found
    unread = set(not_numbers)
    for name in missing:
        nan_metrics = [m for source in FIELDS_BY_NAME[name].sources for m in source.metrics if m in unread]
        if nan_metrics:
            found[name] = (None, f"ncu stored {', '.join(dict.fromkeys(nan_metrics))} as NaN: not measured")
    return found


_ORDER: dict[str, int] = {f.name: i for i, f in enumerate(FIELDS)}  # missing fields listed in the table's order


def checked(
    values: Mapping[str, float | None], provenance: Mapping[str, str], missing: tuple[str, ...],
    notes: Mapping[str, str], not_numbers: tuple[str, ...] = (), compute_capability: str | None = None,
) -> Checked | None:
    """The fields with impossible values clamped or made missing, totals of kinds summed, and a
    note for each; None when nothing changes."""
    summed = totals(values, compute_capability)
    sources = {name: text for name, (_, text, ok) in summed.items() if ok and provenance.get(name) != text}
    if sources:
        values = {**values, **{name: summed[name][0] for name in sources}}
        missing = tuple(name for name in missing if name not in sources)
    rated_peak = _rated_peak(values, provenance)
    if rated_peak is not None and rated_peak[1] is None:  # HBM: the rated peak, said by its provenance
        sources["dram_peak_bw"] = f"{provenance.get('dram_rated_bw')} (HBM: one memory clock, the rated one)"
        values = {**values, "dram_peak_bw": rated_peak[0]}
    found = _impossible(values, provenance)
    if rated_peak is not None and rated_peak[1] is not None:
        found["dram_peak_bw"] = (rated_peak[0], rated_peak[1])
    found.update((name, (None, text)) for name, (_, text, ok) in summed.items() if not ok)
    for name, item in _stored_as_nan(missing, not_numbers).items():
        found.setdefault(name, item)
    fresh = {name: item for name, item in found.items() if notes.get(name) != item[1]}
    if not fresh and not sources:
        return None
    new_values, new_provenance, new_notes = dict(values), {**provenance, **sources}, dict(notes)
    new_missing = list(missing)
    for name, (value, note) in fresh.items():
        new_values[name] = value
        new_notes[name] = note
        if value is None:
            new_provenance.pop(name, None)
            if name not in new_missing:
                new_missing.append(name)
    return new_values, new_provenance, tuple(sorted(new_missing, key=lambda n: _ORDER.get(n, len(_ORDER)))), new_notes
