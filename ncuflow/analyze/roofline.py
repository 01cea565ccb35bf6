"""The hierarchical roofline: achieved FLOP/s against arithmetic intensity to DRAM, L2 and L1.

Per point (a kernel's launches pooled, or one launch): FLOP/s = its FLOPs over its
duration, and one arithmetic intensity per memory level = FLOPs / bytes moved at that
level (``ncuflow.read.deep_metrics``: DRAM bytes, L2→L1 read bytes, L1 writeback bytes).
FLOPs are the sum of the precisions the report counts (fp32, fp64, fp16, tensor); a
launch without an fp32 count has no FLOP count at all and is left out, named, with
why (and the section that collects them), as is a point with no floating-point work (0
FLOP: no place on log axes). As ncu draws it, each precision the kernel executed is also
a point of its own (``precision_points``), held against that precision's roof
(``precision_roof``). GPUs are keyed by their normalised name (``gpu_key``: "TITAN V" and
"NVIDIA TITAN V" are one GPU).

The ceilings are the chip's own, per GPU: the median over its launches of each peak
field (DRAM, L2 and L1 bandwidth, the peak FLOP/s of each precision) at the clocks the
launches ran at. A point is held against the roofs of the work it executed: the compute
roof above it is its FLOPs over the time each executed precision needs at its own peak
(a kernel of FP32 work only meets the FP32 peak, whatever FP64 roof the report holds; a
mix meets their time-weighted harmonic mean). Pure functions over ``Launch`` records;
no I/O, no plotting.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ncuflow.analyze.classify import DEFAULT_THRESHOLD, check_threshold, classify
from ncuflow.analyze.measurement import Measurement, RunLaunches
from ncuflow.read.launch import Launch

LEVELS: tuple[str, ...] = ("dram", "l2", "l1")
LEVEL_TITLES: Mapping[str, str] = {"dram": "DRAM", "l2": "L2", "l1": "L1"}
LEVEL_FIELDS: Mapping[str, tuple[str, str]] = {
    "dram": ("dram_bytes", "dram_peak_bw"), "l2": ("l2_bytes", "l2_peak_bw"), "l1": ("l1_bytes", "l1_peak_bw"),
}
PRECISIONS: tuple[str, ...] = ("fp64", "fp32", "fp16", "tensor")
PRECISION_TITLES: Mapping[str, str] = {"fp64": "FP64", "fp32": "FP32", "fp16": "FP16", "tensor": "tensor"}
TENSOR_ACTIVE_PCT = 1.0  # tensor pipe busier than this while its FLOPs are not counted: the point understates


@dataclass(frozen=True)
class Ceiling:
    """One roof: a level's bandwidth (byte/s) or a precision's peak (FLOP/s), from the report."""

    name: str  # a level (dram, l2, l1) or a precision (fp32, ...)
    value: float
    source: str  # the alias-chain source most launches gave it from
    launches: int  # how many launches held it


class _WorkPoint:
    """A point's FLOP rate and arithmetic intensities, from its FLOPs, its seconds and the bytes
    it moved at each level (a kernel's point, or one precision's share of it)."""

    flops: float
    seconds: float
    level_bytes: Mapping[str, float | None]

    @property
    def flop_rate(self) -> float:
        return self.flops / self.seconds

    def intensity(self, level: str) -> float | None:
        moved = self.level_bytes.get(level)
        return self.flops / moved if moved else None


@dataclass(frozen=True)
class RooflinePoint(_WorkPoint):
    label: str
    kernel: str  # full name
    group: str  # the report, or cell spec, the launches came from
    launches: int
    flops: float
    seconds: float
    counted: tuple[str, ...]  # the precisions whose FLOPs are in ``flops``
    level_bytes: Mapping[str, float | None]
    bound: str
    share: float  # of the GPU time of the points drawn on this GPU
    tensor_uncounted: bool = False
    per_precision: Mapping[str, float] = field(default_factory=dict)  # FLOPs of each precision counted

    @property
    def executed(self) -> tuple[str, ...]:
        """The precisions whose work the point executed (counted, more than 0 FLOP)."""
        return tuple(p for p in PRECISIONS if self.per_precision.get(p, 0.0) > 0)


@dataclass(frozen=True)
class BandwidthPoint:
    """A kernel without a FLOP count: the bandwidth it achieved at each level (what can still be shown)."""

    label: str
    group: str
    launches: int
    seconds: float
    rates: Mapping[str, float | None]  # level -> bytes/s over the launches' duration
    bound: str


@dataclass(frozen=True)
class Roofline:
    device: str
    sm_clock_hz: float | None
    bandwidth: tuple[Ceiling, ...]  # in LEVELS order, those the reports hold
    compute: tuple[Ceiling, ...]  # in PRECISIONS order, those the reports hold
    points: tuple[RooflinePoint, ...]
    left_out: tuple[tuple[str, str], ...]  # (label, why)
    without_flops: tuple[BandwidthPoint, ...] = ()  # left out for want of FLOP counts, with their bandwidth

    @property
    def counted(self) -> tuple[str, ...]:
        """The precisions counted in at least one point."""
        return tuple(p for p in PRECISIONS if any(p in point.counted for point in self.points))

    @property
    def executed(self) -> tuple[str, ...]:
        """The precisions some point executed: the compute roofs worth drawing."""
        return tuple(p for p in PRECISIONS if any(p in point.executed for point in self.points))

    @property
    def holds(self) -> tuple[int, int]:
        """What a panel of this GPU would show: (points with FLOPs, kernels with bandwidth only)."""
        bandwidth = sum(1 for b in self.without_flops if any(rate for rate in b.rates.values()))
        return len(self.points), bandwidth

    def ceiling(self, name: str) -> Ceiling | None:
        return next((c for c in (*self.bandwidth, *self.compute) if c.name == name), None)


def launch_flops(launch: Launch) -> tuple[float | None, tuple[str, ...]]:
    """The launch's FLOPs over the precisions it counts, and which; None without an fp32 count."""
    if launch.value("flops_fp32") is None:
        return None, ()
    counted = tuple(p for p in PRECISIONS if launch.value(f"flops_{p}") is not None)
    return math.fsum(launch.value(f"flops_{p}") or 0.0 for p in counted), counted


def _ceiling(name: str, field: str, launches: Sequence[Launch]) -> Ceiling | None:
    held = [x for x in launches if x.value(field) is not None and (x.value(field) or 0) > 0]
    if not held:
        return None
    source = Counter(x.provenance.get(field, "") for x in held).most_common(1)[0][0]
    return Ceiling(name, statistics.median(x.value(field) or 0.0 for x in held), source, len(held))


def ceilings(launches: Sequence[Launch]) -> tuple[tuple[Ceiling, ...], tuple[Ceiling, ...]]:
    """(bandwidth ceilings by level, compute ceilings by precision) of one GPU's launches."""
    bandwidth = tuple(c for level in LEVELS if (c := _ceiling(level, LEVEL_FIELDS[level][1], launches)))
    compute = tuple(c for p in PRECISIONS if (c := _ceiling(p, f"peak_flops_{p}", launches)))
    return bandwidth, compute


@dataclass(frozen=True)
class PointGroup:
    """Launches drawn as one point: a kernel at one setting, or one launch."""

    label: str
    kernel: str
    group: str
    launches: tuple[Launch, ...]


NO_FLOPS = ("no FLOP count: flops_fp32 needs the fadd, fmul and ffma thread-instruction counters "
            "(smsp__sass_thread_inst_executed_op_{fadd,fmul,ffma}_pred_on, collected by ncu's "
            "SpeedOfLight_RooflineChart section), and the report lacks at least one")


def _bandwidth_point(group: PointGroup, launches: Sequence[Launch], seconds: float, threshold: float) -> BandwidthPoint:
    rates: dict[str, float | None] = {}
    for level in LEVELS:
        values = [x.value(LEVEL_FIELDS[level][0]) for x in launches]
        rates[level] = None if any(v is None for v in values) else math.fsum(v or 0.0 for v in values) / seconds
    bound = Counter(classify(x, threshold).bound for x in launches).most_common(1)[0][0]
    return BandwidthPoint(group.label, group.group, len(launches), seconds, rates, bound)


def _point(group: PointGroup, threshold: float) -> tuple[RooflinePoint | BandwidthPoint | None, str | None, float]:
    """The group's point (a bandwidth point without FLOP counts), or why it has none; its GPU time (s)."""
    timed = [x for x in group.launches if x.value("duration_ns")]
    seconds = math.fsum((x.value("duration_ns") or 0.0) for x in timed) * 1e-9
    counted_launches = [(x, *launch_flops(x)) for x in timed]
    with_flops = [(x, f, c) for x, f, c in counted_launches if f is not None]
    if not timed:
        return None, "no duration", 0.0
    if not with_flops:
        return _bandwidth_point(group, timed, seconds, threshold), NO_FLOPS, seconds
    flops = math.fsum(f for _, f, _ in with_flops if f is not None)
    if flops <= 0:
        return None, "0 FLOP counted (no floating-point work: no place on log axes)", seconds
    used = [x for x, _, _ in with_flops]
    level_bytes: dict[str, float | None] = {}
    for level in LEVELS:
        values = [x.value(LEVEL_FIELDS[level][0]) for x in used]
        level_bytes[level] = None if any(v is None for v in values) else math.fsum(v or 0.0 for v in values)
    bound = Counter(classify(x, threshold).bound for x in used).most_common(1)[0][0]
    counted = tuple(p for p in PRECISIONS if all(p in c for _, _, c in with_flops))
    per_precision = {p: math.fsum(x.value(f"flops_{p}") or 0.0 for x in used) for p in counted}
    tensor_uncounted = "tensor" not in counted and any(
        (x.value("tensor_pipe_pct") or 0.0) >= TENSOR_ACTIVE_PCT for x in used)
    used_seconds = math.fsum((x.value("duration_ns") or 0.0) for x in used) * 1e-9
    point = RooflinePoint(group.label, group.kernel, group.group, len(used), flops, used_seconds, counted,
                          level_bytes, bound, 0.0, tensor_uncounted, per_precision)
    return point, None, seconds


def roofline(device: str, groups: Sequence[PointGroup], threshold: float = DEFAULT_THRESHOLD) -> Roofline:
    """The roofline of one GPU's point groups: ceilings from all their launches, one point each."""
    threshold = check_threshold(threshold)
    launches = [x for g in groups for x in g.launches]
    bandwidth, compute = ceilings(launches)
    clocks = [c for c in (x.value("sm_clock_hz") for x in launches) if c]
    drawn: list[tuple[RooflinePoint, float]] = []
    left_out: list[tuple[str, str]] = []
    without: list[BandwidthPoint] = []
    for group in groups:
        point, why, seconds = _point(group, threshold)
        if isinstance(point, RooflinePoint):
            drawn.append((point, seconds))
            continue
        left_out.append((group.label, why or "not drawn"))
        if isinstance(point, BandwidthPoint):
            without.append(point)
    total = math.fsum(seconds for _, seconds in drawn) or 1.0
    points = tuple(
        RooflinePoint(p.label, p.kernel, p.group, p.launches, p.flops, p.seconds, p.counted, p.level_bytes,
                      p.bound, seconds / total, p.tensor_uncounted, p.per_precision)
        for p, seconds in sorted(drawn, key=lambda item: -item[1])
    )
    return Roofline(device, statistics.median(clocks) if clocks else None, bandwidth, compute, points,
                    tuple(left_out), tuple(without))


def panels(lines: Sequence[Roofline], most: int = 6) -> tuple[tuple[Roofline, ...], tuple[Roofline, ...]]:
    """(the rooflines a picture of at most ``most`` panels shows, those it leaves out): panels
    chosen by what they hold (GPUs with FLOP points first, by their number, then GPUs with
    bandwidth only), never an empty panel while a GPU with something to draw is left out; the
    shown ones keep their order."""
    ranked = sorted(range(len(lines)), key=lambda i: (-lines[i].holds[0], -lines[i].holds[1], i))
    chosen = sorted(ranked[:most])
    if len(lines) > most:
        chosen = sorted(i for i in ranked[:most] if any(lines[i].holds)) or chosen
    return tuple(lines[i] for i in chosen), tuple(lines[i] for i in range(len(lines)) if i not in chosen)


def gpu_key(name: str) -> str:
    """One key per GPU however ncu named it: "TITAN V" and "NVIDIA TITAN V" (a driver's prefix), any case
    or run of blanks, are one GPU."""
    words = name.split()
    if words and words[0].lower() == "nvidia" and len(words) > 1:
        words = words[1:]
    return " ".join(words).lower()


def pages(lines: Sequence[Roofline], most: int = 6) -> tuple[tuple[Roofline, ...], ...]:
    """Every GPU's roofline on a page of at most ``most`` panels: the first page the ``panels`` pick
    (the GPUs with the most to draw), the others the rest in their order, ``most`` a page."""
    first, rest = panels(lines, most)
    return (first, *(tuple(rest[i:i + most]) for i in range(0, len(rest), most))) if lines else ()


def rooflines(groups: Sequence[PointGroup], threshold: float = DEFAULT_THRESHOLD) -> tuple[Roofline, ...]:
    """One roofline per GPU (ceilings differ between chips), keyed by its normalised name (``gpu_key``)
    and shown by the name most of its launches give, in order of first appearance."""
    by_device: dict[str, list[PointGroup]] = {}
    names: dict[str, Counter[str]] = {}
    for group in groups:
        device = next((x.device.name for x in group.launches if x.device.name), None) or "unknown GPU"
        key = gpu_key(device)
        by_device.setdefault(key, []).append(group)
        names.setdefault(key, Counter())[device] += len(group.launches)
    return tuple(roofline(names[key].most_common(1)[0][0], members, threshold) for key, members in by_device.items())


@dataclass(frozen=True)
class PrecisionPoint(_WorkPoint):
    """One precision's share of a point, as ncu's roofline draws it: its FLOPs over the point's time,
    against its own roof (that precision's peak, and each level's bandwidth at its own intensity)."""

    precision: str
    flops: float
    seconds: float
    level_bytes: Mapping[str, float | None]


def precision_points(point: RooflinePoint) -> tuple[PrecisionPoint, ...]:
    """One point per precision the kernel executed (a V100 kernel of FP64 and FP32 work is two: 3.45
    TFLOP/s FP64 where the sum read 3.68), in ``PRECISIONS`` order."""
    return tuple(PrecisionPoint(p, point.per_precision[p], point.seconds, point.level_bytes) for p in point.executed)


def precision_roof(point: PrecisionPoint, line: Roofline) -> float | None:
    """The lowest roof above a precision's point: its own peak, and each level's bandwidth × its intensity."""
    peak = line.ceiling(point.precision)
    roofs = [peak.value] if peak is not None and peak.value > 0 else []
    for level in LEVELS:
        bandwidth, intensity = line.ceiling(level), point.intensity(level)
        if bandwidth is not None and intensity is not None:
            roofs.append(intensity * bandwidth.value)
    return min(roofs) if roofs else None


def ridge_intensity(bandwidth: Ceiling, compute: Ceiling) -> float:
    """Where a bandwidth roof meets a compute roof (FLOP/byte)."""
    return compute.value / bandwidth.value


def compute_roof(point: RooflinePoint, line: Roofline) -> float | None:
    """The compute roof of the work the point executed: its FLOPs over the time each executed
    precision needs at its own peak (None where a precision it executed has no peak in the reports)."""
    seconds_at_peak = 0.0
    for precision in point.executed:
        peak = line.ceiling(precision)
        if peak is None or peak.value <= 0:
            return None
        seconds_at_peak += point.per_precision[precision] / peak.value
    return point.flops / seconds_at_peak if seconds_at_peak > 0 else None


def attainable(point: RooflinePoint, line: Roofline) -> float | None:
    """The lowest roof above the point: each level's bandwidth × its intensity, and the compute
    roof of the precisions it executed."""
    roofs = []
    for level in LEVELS:
        bandwidth = line.ceiling(level)
        intensity = point.intensity(level)
        if bandwidth is not None and intensity is not None:
            roofs.append(intensity * bandwidth.value)
    roof = compute_roof(point, line)
    if roof is not None:
        roofs.append(roof)
    return min(roofs) if roofs else None


def describe_point(point: RooflinePoint, line: Roofline) -> str:
    """One line: FLOP/s, each level's intensity, and how close the point is to the lowest roof above it."""
    parts = [f"{point.flop_rate / 1e9:,.3g} GFLOP/s"]
    for level in LEVELS:
        intensity = point.intensity(level)
        parts.append(f"I_{level} {intensity:.3g}" if intensity is not None else f"I_{level} —")
    roof = attainable(point, line)
    if roof:
        parts.append(f"{point.flop_rate / roof:.0%} of the lowest roof above it")
    split = precision_points(point)
    if len(split) > 1:  # each precision against its own roof, as ncu's roofline shows them
        for one in split:
            own = precision_roof(one, line)
            parts.append(f"{PRECISION_TITLES[one.precision]} {one.flop_rate / 1e9:,.3g} GFLOP/s"
                         + (f" ({one.flop_rate / own:.0%} of its roof)" if own else ""))
    return ", ".join(parts)


def point_groups(runs: Sequence[RunLaunches], per: str = "kernel") -> list[PointGroup]:
    """The launches of loaded runs as points: one per kernel and setting (replicas and repeats
    pooled, ``measurements``' rule), or one per launch (``per="launch"``)."""
    from ncuflow.analyze.measurement import measurements

    return measurement_groups(measurements(runs), per)


def measurement_groups(found: Sequence[Measurement], per: str = "kernel") -> list[PointGroup]:
    """Measurements as point groups, labelled by short kernel name and the parameters that vary."""
    from ncuflow.analyze.names import distinct_short_names

    if per not in ("kernel", "launch"):
        raise ValueError(f"per is 'kernel' or 'launch', not {per!r}")
    shorts = distinct_short_names(m.launches[0].kernel.demangled or m.function for m in found if m.launches)
    varying: dict[str, set[str]] = {}  # per cell, the parameters that take several values
    for m in found:
        for name, _ in m.params:
            if len({str(x.param(name)) for x in found if x.cell == m.cell}) > 1:
                varying.setdefault(m.cell, set()).add(name)
    groups: list[PointGroup] = []
    for m in found:
        if not m.launches:
            continue
        full = m.launches[0].kernel.demangled or m.function
        shown = [f"{k}={v}" for k, v in m.params if k in varying.get(m.cell, set())]
        where = m.cell + (":" + ",".join(shown) if shown else "")
        if per == "kernel":
            groups.append(PointGroup(shorts[full], full, where, m.launches))
            continue
        for launch in m.launches:
            groups.append(PointGroup(f"{shorts[full]} @{launch.action_index}", full, where, (launch,)))
    return groups
