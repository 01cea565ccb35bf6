"""What a collection costs in replay passes, predicted offline, and what ncu recorded.

ncu replays a kernel once per pass. Perfworks (``ncuflow.profile.perfworks``) schedules
the hardware counters of a metric list into counter passes; the rest of a name's cost
depends on its class:

- ``smsp__sass_*`` / ``sm__sass_*``: known to Perfworks, but ncu collects them by patching
  the kernel's SASS, in one pass of their own (+1 for any number of them);
- ``breakdown:X``: the per-unit metrics of X, covered by X's counters;
- ``launch__*``, ``device__*``, ``profiler__*``, ``numa__*``, ``nvlink__*``, ``c2clink__*``:
  launch and device attributes, free; so are ``derived__*`` (ncu computes them from other
  metrics of the report), the occupancy limits and the ``regex:`` a collection was asked by;
- sampling and source counters (``smsp__pcsamp_*``, ``pmsampling:``, ``sass__*``,
  ``group:``, PM-sampling groups such as ``SM_A.TriageAC.sm__*``, and
  source-level names with no ``unit__`` prefix or no rollup suffix such as
  ``memory_l2_sectors_global`` or ``smsp__branch_targets_threads_divergent``): not
  modelled by Perfworks (they cost passes it cannot count);
- any other name Perfworks does not know on the chip: unknown (ncu would refuse it).

The recorded-vs-predicted rule is empirical (checked on the corpus of public reports by
``tests/test_passes_corpus.py``): ncu records the predicted passes + 1 on most chips and
versions, + 0 on GA10x/AD10x/GB20x chips with ncu 2024.3 or newer, plus any warm-up pass
the report says it made.

This module does not import ncu_report, subprocess, torch or polars: it is used by the
read side (``passes REPORT``, ``classify --as-if``) and the profiling path alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ncuflow.errors import UsageError
from ncuflow.profile.perfworks import ChipEvaluator

NameClass = Literal["counter", "sass", "free", "unmodelled", "unknown"]

SASS_PREFIXES: tuple[str, ...] = ("smsp__sass_", "sm__sass_")
FREE_PREFIXES: tuple[str, ...] = (
    "launch__", "device__", "profiler__", "numa__", "nvlink__", "c2clink__",
    # computed by ncu from other metrics of the report; the regex a collection was asked by
    "derived__", "derived_temp", "regex:",
)
UNMODELLED_PREFIXES: tuple[str, ...] = (
    "smsp__pcsamp_", "pmsampling:", "sass__", "group:",
)
BREAKDOWN_PREFIX = "breakdown:"
# ncu computes the occupancy limits from the launch; no counter is read for them.
OCCUPANCY_PREFIXES: tuple[str, ...] = ("sm__maximum_warps", "smsp__maximum_warps")
UNMODELLED_UNITS = frozenset({"nvlrx", "nvltx"})

# ----------------------------------------------------------------------------- chips

# device__attribute_chip in a report -> Perfworks chip name. Turing's ids are not in order.
_CHIP_FAMILIES: Mapping[int, str] = {0x170: "ga10", 0x180: "gh10", 0x190: "ad10", 0x1A0: "gb10", 0x1B0: "gb20"}
_CHIP_IDS: Mapping[int, str] = {
    0x162: "tu102", 0x164: "tu104", 0x166: "tu106", 0x167: "tu117", 0x168: "tu116",
    0x140: "gv100", 0x15B: "gv11b", 0x132: "gp102", 0x134: "gp104", 0x136: "gp106", 0x130: "gp100",
}

# A GPU's marketing name -> its chip (the first pattern that matches wins).
_NAME_TO_CHIP: tuple[tuple[str, str], ...] = (
    (r"\b(H100|H200|H800|H20|GH200)\b", "gh100"),
    (r"\b(A100|A800|A30)\b", "ga100"),
    (r"\b(B200|B100|GB200)\b", "gb100"),
    (r"RTX (PRO )?\d*\s*50(90)\b|RTX PRO 6000 Blackwell", "gb202"),
    (r"RTX 50(80|70 Ti)\b", "gb203"),
    (r"RTX 5070\b", "gb205"),
    (r"RTX 5060", "gb206"),
    (r"RTX 5050", "gb207"),
    (r"RTX 4090|\bL40S?\b|RTX 6000 Ada|RTX 5000 Ada", "ad102"),
    (r"RTX 4080", "ad103"),
    (r"RTX 4070|\bL4\b", "ad104"),
    (r"RTX 4060 Ti|RTX 4070 Laptop|RTX 4060 Laptop", "ad106"),
    (r"RTX 4060|RTX 4050", "ad107"),
    (r"RTX 30(90|80)|\bA10G?\b|\bA40\b|RTX A6000|RTX A5000", "ga102"),
    (r"RTX 30(70|60 Ti)|RTX A4000", "ga104"),
    (r"RTX 3060|RTX 3050", "ga106"),
    (r"\bA2\b|\bA16\b", "ga107"),
    (r"RTX 2080 Ti|TITAN RTX|Quadro RTX [68]000", "tu102"),
    (r"\bT4\b|RTX 2080|RTX 2070 SUPER", "tu104"),
    (r"RTX 20(70|60)", "tu106"),
    (r"GTX 16(60|50 SUPER)", "tu116"),
    (r"GTX 1650", "tu117"),
    (r"V100", "gv100"),
)

# Chips whose ncu 2024.3+ records no extra pass beyond the predicted ones: GA10x (not
# GA100), AD10x, GB20x.
_NO_OVERHEAD_CHIPS = re.compile(r"^(ga10[1-9b]|ad10\w|gb20\w)$")


def claimed_chips() -> tuple[str, ...]:
    """Every chip ncuflow names a GPU's chip as (by id or marketing name): where its collections
    must hold only names the chip knows, or drop the others with a note (``for_chip``)."""
    return tuple(sorted({*_CHIP_IDS.values(), *(chip for _, chip in _NAME_TO_CHIP)}))


def chip_from_id(chip_id: int | None) -> str | None:
    """The Perfworks chip name of a report's ``device__attribute_chip``."""
    if chip_id is None:
        return None
    if chip_id in _CHIP_IDS:
        return _CHIP_IDS[chip_id]
    family = _CHIP_FAMILIES.get(chip_id & 0xFF0)
    if family is None:
        return None
    return f"{family}{chip_id & 0xF:x}"


def chip_from_gpu_name(name: str) -> str | None:
    """The chip of a GPU named as nvidia-smi or a report names it (None: not in the table)."""
    for pattern, chip in _NAME_TO_CHIP:
        if re.search(pattern, name, re.I):
            return chip
    return None


def local_gpu_names(root: Path = Path("/proc/driver/nvidia/gpus")) -> list[str]:
    """The model names of this machine's NVIDIA GPUs, read from the driver's /proc files."""
    names: list[str] = []
    for info in sorted(root.glob("*/information")) if root.is_dir() else []:
        try:
            text = info.read_text(errors="replace")
        except OSError:
            continue
        match = re.search(r"^Model:\s*(.+)$", text, re.M)
        if match:
            names.append(match.group(1).strip())
    return names


def local_chip() -> str:
    """The chip of this machine's first GPU; an error that says to pass --chip otherwise."""
    names = local_gpu_names()
    for name in names:
        chip = chip_from_gpu_name(name)
        if chip:
            return chip
    seen = f"the driver names {', '.join(names)}, which is not in ncuflow's table" if names else \
        "no NVIDIA GPU is visible here (no /proc/driver/nvidia/gpus)"
    raise UsageError(
        "Which chip? The passes are predicted per chip, and " + seen + ".",
        "Perfworks needs the chip name (gh100 for H100/H200, ga100 for A100, ga102 for RTX 30xx/A10/A40, "
        "ad102 for RTX 4090/L40, gb202 for RTX 5090, tu104 for T4...).",
        "Pass --chip NAME (`ncuflow passes --list-chips` lists what the library knows).",
    )


def ncu_overhead(chip: str, ncu_version: str | None) -> int:
    """Passes ncu records beyond the predicted ones (not counting warm-up): the empirical rule."""
    if _NO_OVERHEAD_CHIPS.match(chip) and ncu_version:
        match = re.match(r"(\d{4})\.(\d+)", ncu_version)
        if match and (int(match.group(1)), int(match.group(2))) >= (2024, 3):
            return 0
    return 1


# ----------------------------------------------------------------------------- classes


def name_class(name: str, evaluator: ChipEvaluator | None = None) -> NameClass:
    """The class of one metric name; ``counter`` vs ``unknown`` needs the chip's evaluator."""
    if name.startswith(FREE_PREFIXES):
        return "free"
    base = name.removeprefix(BREAKDOWN_PREFIX)
    if base.startswith(OCCUPANCY_PREFIXES):
        return "free"
    unit, _, rest = base.partition("__")
    if (base.startswith(UNMODELLED_PREFIXES) or ":" in base or not rest or "." in unit
            or "." not in rest or unit in UNMODELLED_UNITS):
        # Source counters (no unit__ prefix, or no rollup suffix), PM-sampling groups
        # ("SM_A.TriageAC.sm__..."), sampling: ncu collects them outside Perfworks' passes.
        return "unmodelled"
    if evaluator is not None and evaluator.raw_dependencies(base) is None:
        return "unknown"
    if base.startswith(SASS_PREFIXES):
        return "sass"
    return "counter"


@dataclass(frozen=True)
class PassPrediction:
    """What a metric list costs on one chip."""

    chip: str
    collection: str
    metrics: tuple[str, ...]
    counter_passes: int
    sass_passes: int
    counter_metrics: tuple[str, ...]
    sass_metrics: tuple[str, ...]
    free_metrics: tuple[str, ...]
    unmodelled_metrics: tuple[str, ...]
    unknown_metrics: tuple[str, ...]
    library: str = ""

    @property
    def passes(self) -> int:
        """Counter passes + the SASS-patching pass: what Perfworks and the SASS rule predict."""
        return self.counter_passes + self.sass_passes

    def expected_recorded(self, ncu_version: str | None, warmup: int = 0) -> int:
        """What ncu's profiler__replayer_passes should say, by the empirical rule."""
        return self.passes + ncu_overhead(self.chip, ncu_version) + warmup

    def to_json(self) -> dict[str, Any]:
        return {
            "chip": self.chip,
            "collection": self.collection,
            "passes": self.passes,
            "counter_passes": self.counter_passes,
            "sass_passes": self.sass_passes,
            "metrics": len(self.metrics),
            "free_metrics": list(self.free_metrics),
            "unknown_metrics": list(self.unknown_metrics),
            "unmodelled_metrics": list(self.unmodelled_metrics),
            "sass_metrics": list(self.sass_metrics),
            "library": self.library,
        }


def predict(evaluator: ChipEvaluator, names: Iterable[str], collection: str = "metrics") -> PassPrediction:
    """Classify every name and count the passes of the counters and SASS metrics among them."""
    ordered = tuple(dict.fromkeys(n.strip() for n in names if n.strip()))
    classes: dict[NameClass, list[str]] = {"counter": [], "sass": [], "free": [], "unmodelled": [], "unknown": []}
    raw: set[str] = set()
    for name in ordered:
        kind = name_class(name, evaluator)
        classes[kind].append(name)
        if kind == "counter":
            raw.update(evaluator.raw_dependencies(name.removeprefix(BREAKDOWN_PREFIX)) or ())
    return PassPrediction(
        chip=evaluator.chip,
        collection=collection,
        metrics=ordered,
        counter_passes=evaluator.passes(raw),
        sass_passes=1 if classes["sass"] else 0,
        counter_metrics=tuple(classes["counter"]),
        sass_metrics=tuple(classes["sass"]),
        free_metrics=tuple(classes["free"]),
        unmodelled_metrics=tuple(classes["unmodelled"]),
        unknown_metrics=tuple(classes["unknown"]),
        library=str(evaluator.perfworks.path),
    )


def known_names(evaluator: ChipEvaluator, names: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split names into those the chip can collect and those it does not know."""
    known: list[str] = []
    unknown: list[str] = []
    for name in names:
        (unknown if name_class(name, evaluator) == "unknown" else known).append(name)
    return known, unknown


# ----------------------------------------------------------------------------- reports


@dataclass(frozen=True)
class ReportCollection:
    """What one report collected: its chip, its metric names and the passes ncu recorded."""

    report: str
    device: str | None
    chip: str | None
    chip_id: int | None
    ncu_version: str | None
    metrics: tuple[str, ...]
    recorded_passes: int | None
    warmup_passes: int
    launches: int
    counter_only: bool = field(default=False)


def read_report_collection(path: Path | str) -> ReportCollection:
    """The collection of a report's first launch (every launch of a report shares it)."""
    from ncuflow.read import extract

    report_path = Path(path)
    first = None
    launches = 0
    for _range_index, _action_index, action in extract.iter_report(report_path):  # with this process's reader
        launches += 1
        if first is None:
            first = action
    assert first is not None  # iter_report raises on a report with no intact action
    names = tuple(str(n) for n in first.metric_names())
    chip_value = first.number("device__attribute_chip")
    passes = first.number("profiler__replayer_passes")
    warmup = first.number("profiler__replayer_passes_type_warmup")
    chip_id = int(chip_value) if chip_value is not None else None
    device = first.text("device__attribute_display_name")
    chip = chip_from_id(chip_id) or (chip_from_gpu_name(device) if device else None)
    counter_only = not any(name_class(n) == "unmodelled" for n in names)
    return ReportCollection(
        report=str(report_path),
        device=device,
        chip=chip,
        chip_id=chip_id,
        ncu_version=extract.read_ncu_version(report_path),
        metrics=names,
        recorded_passes=int(passes) if passes is not None else None,
        warmup_passes=int(warmup) if warmup else 0,
        launches=launches,
        counter_only=counter_only,
    )


# ----------------------------------------------------------------------------- collections

@dataclass(frozen=True)
class Collection:
    """A named metric list and, for ``decisive``, the list it escalates to."""

    name: str
    metrics: tuple[str, ...] | None  # None: everything the report holds (ncu's full set)
    escalation: tuple[str, ...] = ()
    description: str = ""


def collections() -> dict[str, Collection]:
    from ncuflow.profile.history import FIRST_DECISIVE_METRICS
    from ncuflow.read.deep_metrics import OCCUPANCY_METRICS, ROOFLINE_METRICS, STALL_METRICS
    from ncuflow.read.metrics import decisive_metric_names

    tier1, tier2 = decisive_metric_names(1), decisive_metric_names(2)
    return {
        "decisive": Collection("decisive", tier1, tier2,
                               "tier 1, escalating to tier 2 for launches tier 1 leaves undecided"),
        "tier1": Collection("tier1", tier1, (), "tier 1 alone, never escalating"),
        "tier2": Collection("tier2", tier2, (), "the escalation run's metrics alone"),
        "decisive+tier2": Collection("decisive+tier2", (*tier1, *tier2), (),
                                     "tiers 1 and 2 together (what the model has after escalation)"),
        "fields": Collection("fields", FIRST_DECISIVE_METRICS, (),
                             "the first decisive list, before the tiers: what the H200 reference runs collected"),
        "full": Collection("full", None, (), "everything the report holds (ncu's --set full)"),
        # issue 22: what the roofline and the "why does it wait" evidence read (ncuflow.read.deep_metrics)
        "roofline": Collection("roofline", ROOFLINE_METRICS, (),
                               "FLOP counters per precision, L1/L2/DRAM bytes and the chip's peaks"),
        "occupancy": Collection("occupancy", OCCUPANCY_METRICS, (),
                                "theoretical and achieved occupancy, its limiters, eligible warps"),
        "stalls": Collection("stalls", STALL_METRICS, (), "warp-stall reasons per issued instruction"),
    }


@dataclass(frozen=True)
class ChipCollection:
    """A collection as it is offered on one chip: the names the chip knows, and those dropped."""

    collection: Collection  # its metrics and escalation hold only names the chip knows
    chip: str
    dropped: tuple[str, ...]  # from the metrics and the escalation, in order
    checked: bool = True  # False: no Perfworks model of the chip, nothing could be checked

    def note(self) -> str | None:
        """One line naming what was dropped (None when nothing was)."""
        if not self.checked:
            return f"the metric names were not checked against {self.chip} (no Perfworks model of it)"
        if not self.dropped:
            return None
        return (f"{len(self.dropped)} name{'' if len(self.dropped) == 1 else 's'} {self.chip} does not know, "
                f"dropped before ncu runs: {', '.join(self.dropped)}")


def for_chip(collection: Collection, evaluator: ChipEvaluator) -> ChipCollection:
    """``collection`` with the names ``evaluator``'s chip does not know dropped (``profile`` drops
    the same ones before ncu runs); a section set (metrics None) is kept as it is."""
    if collection.metrics is None:
        return ChipCollection(collection, evaluator.chip, ())
    metrics, dropped = known_names(evaluator, collection.metrics)
    escalation, dropped_too = known_names(evaluator, collection.escalation)
    chosen = Collection(collection.name, tuple(metrics), tuple(escalation), collection.description)
    return ChipCollection(chosen, evaluator.chip, tuple(dict.fromkeys((*dropped, *dropped_too))))


def collection_on_chip(collection: Collection, chip: str | None) -> ChipCollection:
    """``for_chip`` through this machine's Perfworks; unchecked (kept whole) where the library or
    a model of the chip is missing."""
    from ncuflow.profile import perfworks

    name = (chip or "unknown chip").lower()
    if chip is None:
        return ChipCollection(collection, name, (), checked=False)
    try:
        with perfworks.load().evaluator(name) as evaluator:
            return for_chip(collection, evaluator)
    except (perfworks.PerfworksUnavailable, perfworks.UnsupportedChip):
        return ChipCollection(collection, name, (), checked=False)


def get_collection(name: str) -> Collection:
    known = collections()
    if name not in known:
        raise UsageError(
            f"Unknown collection {name!r}.",
            "Collections: " + "; ".join(f"{c.name}: {c.description}" for c in known.values()) + ".",
            "Name one of those (`ncuflow passes` also takes a metric list with --metrics).",
        )
    return known[name]


def parse_metric_list(texts: Iterable[str]) -> tuple[str, ...]:
    """Comma- or space-separated metric names (as ncu's --metrics takes them), in order."""
    names: list[str] = []
    for text in texts:
        for part in re.split(r"[,\s]+", text):
            if part and part not in names:
                names.append(part)
    if not names:
        raise UsageError("The metric list is empty.", "", "Give metric names separated by commas.")
    return tuple(names)
