"""Unprofiled timing of a cell: CUDA events for GPU cells, a host clock for host cells.

Nsight Compute locks clocks to base and (by default) flushes caches before every
replayed kernel, so a duration under ncu and an unprofiled duration are different
measurements; both belong in a manifest, labelled. This module makes the unprofiled
one:

- build the cell, warm it up (every copy at least once), then time ``repeats`` launches,
  each between its own pair of CUDA events, and report median / min / max / spread;
- when the cell's footprint fits in L2, build several copies and rotate through them,
  so each launch finds cold caches for its data (as under ncu's cache flush) instead of
  the previous launch's lines;
- keep the GPU queue ahead of the host (a short ``torch.cuda._sleep`` before each start
  event), so host launch latency does not land between the events;
- host cells (``timing="host"``, e.g. plan_host) are timed with ``time.perf_counter_ns``.

torch is imported only inside the functions that need it.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ncuflow.cells.contract import CellDefinition, CellInstance, CellSpec
from ncuflow.cells.registry import get_cell, module_version, unavailable_reason
from ncuflow.errors import NcuflowError, UsageError
from ncuflow.host import driver_version
from ncuflow.spread import quantile, relative_width

ROTATE_FOOTPRINT_FACTOR = 4  # rotate enough copies to cover this many times the L2 size
MAX_ROTATING_COPIES = 64
QUEUE_PRIMING_CYCLES = 200_000  # about 0.1 ms of GPU sleep before each start event
CUDA_LABEL = (
    "unprofiled: CUDA events, GPU clocks not locked; caches {cache} between launches"
)
HOST_LABEL = "unprofiled: host clock (time.perf_counter_ns) around the host operation"


@dataclass(frozen=True)
class TimingStats:
    """Summary of per-launch durations, in microseconds."""

    median_us: float
    mean_us: float
    min_us: float
    max_us: float
    stdev_us: float
    p10_us: float
    p90_us: float
    spread_pct: float  # ncuflow.spread: (p90 - p10) / median, in percent

    @staticmethod
    def of(samples_us: Sequence[float]) -> TimingStats:
        if not samples_us:
            raise ValueError("no samples")
        ordered = sorted(samples_us)
        median = statistics.median(ordered)
        p10, p90 = quantile(ordered, 0.10), quantile(ordered, 0.90)
        return TimingStats(
            median_us=median,
            mean_us=statistics.fmean(ordered),
            min_us=ordered[0],
            max_us=ordered[-1],
            stdev_us=statistics.stdev(ordered) if len(ordered) > 1 else 0.0,
            p10_us=p10,
            p90_us=p90,
            spread_pct=100.0 * relative_width(p10, p90, median) if median > 0 else math.nan,
        )


@dataclass(frozen=True)
class TimingResult:
    """One unprofiled timing of a cell (what ``ncuflow time`` prints and manifests store)."""

    cell: str
    spec: str
    content_key: str
    params: dict[str, Any]
    clock: str  # "cuda_events" or "host_perf_counter"
    label: str
    repeats: int
    warmup: int
    stats: TimingStats
    samples_us: tuple[float, ...]
    rotating_copies: int  # 1: every launch reuses the same buffers
    footprint_bytes: int | None
    l2_bytes: int | None
    expected_bytes: int
    achieved_gbps: float | None  # expected_bytes / median duration
    representation: dict[str, Any] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["samples_us"] = list(self.samples_us)
        return data


def build_device(definition: CellDefinition) -> str:
    return "cuda" if "cuda" in definition.requires else "cpu"


def require_runnable(definition: CellDefinition, action: str) -> None:
    """Raise a one-paragraph NcuflowError when the cell cannot run on this machine."""
    reason = unavailable_reason(definition, thorough=True)
    if reason is None:
        return
    needs_gpu = "cuda" in definition.requires
    raise NcuflowError(
        f"Cannot {action} the cell {definition.name!r} on this machine: {reason}.",
        "It launches GPU kernels, so it needs an NVIDIA GPU, a CUDA build of torch and "
        "triton." if needs_gpu else "",
        "Run it on a GPU host (the Dockerfile builds one), or try `ncuflow time plan_host`, "
        "which runs on the CPU. `ncuflow cells` lists what can run here."
        if needs_gpu
        else "Install what it needs; `ncuflow cells` says what is missing.",
    )


def device_facts() -> dict[str, Any]:
    """GPU name, UUID, compute capability, L2 size and versions (empty-ish without CUDA)."""
    facts: dict[str, Any] = {
        "torch_version": module_version("torch"),
        "triton_version": module_version("triton"),
    }
    try:
        import torch
    except ImportError:
        return facts
    facts["torch_version"] = torch.__version__
    facts["cuda_runtime_version"] = torch.version.cuda
    if not torch.cuda.is_available():
        return facts
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    facts.update(
        {
            "gpu_index": index,
            "gpu_name": props.name,
            "gpu_uuid": f"GPU-{uuid}" if uuid is not None else None,
            "compute_capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count,
            "l2_bytes": getattr(props, "L2_cache_size", None),
            "total_memory_bytes": props.total_memory,
        }
    )
    facts["driver_version"] = driver_version(index)
    return facts


def rotating_copy_count(footprint: int | None, l2_bytes: int | None, free_bytes: int | None) -> int:
    """How many copies of a cell to rotate through so launches do not share warm L2."""
    if not footprint or not l2_bytes or footprint >= l2_bytes:
        return 1
    wanted = math.ceil(ROTATE_FOOTPRINT_FACTOR * l2_bytes / footprint)
    if free_bytes is not None:
        wanted = min(wanted, max(1, free_bytes // (2 * footprint)))
    return max(1, min(wanted, MAX_ROTATING_COPIES))


def time_cell(
    spec: CellSpec,
    *,
    repeats: int = 100,
    warmup: int = 10,
    rotate: bool = True,
    cells_dir: Path | None = None,
) -> TimingResult:
    """Time ``spec`` without ncu: CUDA events for GPU cells, the host clock for host cells."""
    if repeats < 1 or warmup < 0:
        raise UsageError(
            f"repeats must be >= 1 and warmup >= 0 (got repeats={repeats}, warmup={warmup}).",
            "",
            "Use e.g. --repeats 100 --warmup 10.",
        )
    definition = get_cell(spec.cell, cells_dir)
    require_runnable(definition, "time")
    if definition.timing == "host":
        return _time_host(definition, spec, repeats, warmup)
    return _time_cuda(definition, spec, repeats, warmup, rotate)


def _time_host(definition: CellDefinition, spec: CellSpec, repeats: int, warmup: int) -> TimingResult:
    instance = definition.instantiate(spec, build_device(definition))
    for _ in range(warmup):
        instance.run()
    samples: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        instance.run()
        samples.append((time.perf_counter_ns() - start) / 1000.0)
    timed = _Timed("host_perf_counter", HOST_LABEL, tuple(samples), 1, None,
                   device_facts() if "cuda" in definition.requires else {})
    return _result(definition, spec, timed, repeats, warmup, instance)


def _time_cuda(
    definition: CellDefinition,
    spec: CellSpec,
    repeats: int,
    warmup: int,
    rotate: bool,
) -> TimingResult:
    import torch

    instances: list[CellInstance] = [definition.instantiate(spec, "cuda")]
    footprint = instances[0].representation().get("footprint_bytes")
    facts = device_facts()
    l2_bytes = facts.get("l2_bytes")
    free_bytes, _total = torch.cuda.mem_get_info()
    copies = rotating_copy_count(footprint, l2_bytes, free_bytes) if rotate else 1
    while len(instances) < copies:
        instances.append(definition.instantiate(spec, "cuda"))
    for instance in instances:
        for _ in range(max(1, warmup // len(instances))):
            instance.run()
    torch.cuda.synchronize()

    sleep = getattr(torch.cuda, "_sleep", None)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for i in range(repeats):
        instance = instances[i % len(instances)]
        if sleep is not None:
            sleep(QUEUE_PRIMING_CYCLES)
        starts[i].record()
        instance.run()
        ends[i].record()
    torch.cuda.synchronize()
    samples = [start.elapsed_time(end) * 1000.0 for start, end in zip(starts, ends, strict=True)]
    cache = (
        f"cold (rotating {copies} copies of a {footprint}-byte footprint, L2 {l2_bytes} bytes)"
        if copies > 1
        else "not flushed (footprint larger than L2, or rotation off)"
    )
    timed = _Timed("cuda_events", CUDA_LABEL.format(cache=cache), tuple(samples), copies, l2_bytes, facts)
    return _result(definition, spec, timed, repeats, warmup, instances[0])


@dataclass(frozen=True)
class _Timed:
    """What a timing loop measured, and how: its clock, the samples, the copies rotated."""

    clock: str
    label: str
    samples: tuple[float, ...]
    copies: int
    l2_bytes: int | None
    facts: dict[str, Any]


def _result(definition: CellDefinition, spec: CellSpec, timed: _Timed, repeats: int, warmup: int,
            instance: CellInstance) -> TimingResult:
    samples = list(timed.samples)
    stats = TimingStats.of(samples)
    representation = instance.representation()
    expected = int(instance.expected_bytes)
    achieved = expected / (stats.median_us * 1e-6) / 1e9 if stats.median_us > 0 and expected else None
    return TimingResult(
        cell=definition.name,
        spec=spec.text(),
        content_key=spec.content_key(),
        params=spec.as_dict(),
        clock=timed.clock,
        label=timed.label,
        repeats=repeats,
        warmup=warmup,
        stats=stats,
        samples_us=timed.samples,
        rotating_copies=timed.copies,
        footprint_bytes=representation.get("footprint_bytes"),
        l2_bytes=timed.l2_bytes,
        expected_bytes=expected,
        achieved_gbps=achieved,
        representation=representation,
        device=timed.facts,
    )
