"""Values that cannot be: checked once, when a launch's canonical fields are resolved.

Whatever reader built them, a ``Launch``'s fields pass through ``checked`` (its
``__post_init__``), so that no command ever shows an impossible value as data:

- a peak DRAM bandwidth above the device's rated one (the DRAM clock measured over a
  few-µs launch overshoots) is the rated one, with a note;
- a hit rate above 100 % or below 0 % (ncu computes it from sampled sector counts and
  can land at 100.43 %) is clamped into [0, 100], with a note giving the stored value;
- sectors per request over 0 requests is undefined (ncu's own average stores 0.0): the
  field is missing, with a note;
- a count (bytes, sectors, requests, instructions, ...) that is negative, or, where it was
  read as a counter, not a whole number, is missing, with a note (a count an alias chain
  derives by arithmetic, such as a FLOP rate times cycles, may be fractional);
- a field whose source metrics ncu stored as NaN (a launch whose counters were not
  collected) is missing with a note saying so, instead of "no source metric".

Each note is keyed by the field's name (``Launch.notes``); the tables, ``classify
--evidence`` / ``--json`` and the export carry them.
"""

from __future__ import annotations

from collections.abc import Mapping

from ncuflow.read.metrics import FIELDS, FIELDS_BY_NAME, is_count

# Percentages that are shares of a whole (hits of all sectors): nothing outside [0, 100] is one.
SHARE_PERCENTAGES: tuple[str, ...] = ("l2_hit_rate_pct",)

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
    peak, rated = values.get("dram_peak_bw"), values.get("dram_rated_bw")
    if peak is None or rated is None or peak == rated or provenance.get("dram_peak_bw") == provenance.get("dram_rated_bw"):
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
        if value is not None and not 0.0 <= value <= 100.0:
            bound = 100.0 if value > 100.0 else 0.0
            found[name] = (bound, f"ncu stored {_number(value)} %, outside 0–100 %: clamped to {bound:g} %")
    spr = values.get("sectors_per_request")
    if values.get("global_ld_requests") == 0 or (spr is not None and spr <= 0.0):
        stored = "" if spr is None else f" (stored as {_number(spr)})"
        found["sectors_per_request"] = (None, f"undefined: no global-load request, 0 sectors over 0 requests{stored}")
    for name in _COUNTS:
        value = values.get(name)
        if value is not None and not (0 <= value < 2**63 and (float(value).is_integer()
                                                               or _derived(provenance.get(name)))):
            found[name] = (None, f"a count, stored as {_number(value)}: not a whole number in 0 … 2⁶³")
    return found


_COUNTS = tuple(field.name for field in FIELDS if is_count(field))  # checked on every launch


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


def checked(
    values: Mapping[str, float | None], provenance: Mapping[str, str], missing: tuple[str, ...],
    notes: Mapping[str, str], not_numbers: tuple[str, ...] = (),
) -> Checked | None:
    """The fields with impossible values clamped or made missing, and a note for each; None
    when nothing changes (the common case: no copy is made)."""
    sources: dict[str, str] = {}
    rated_peak = _rated_peak(values, provenance)
    if rated_peak is not None and rated_peak[1] is None:  # HBM: the rated peak, said by its provenance
        sources["dram_peak_bw"] = f"{provenance.get('dram_rated_bw')} (HBM: one memory clock, the rated one)"
        values = {**values, "dram_peak_bw": rated_peak[0]}
    found = _impossible(values, provenance)
    if rated_peak is not None and rated_peak[1] is not None:
        found["dram_peak_bw"] = (rated_peak[0], rated_peak[1])
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
    order = {f.name: i for i, f in enumerate(FIELDS)}
    return new_values, new_provenance, tuple(sorted(new_missing, key=lambda n: order.get(n, len(order)))), new_notes
