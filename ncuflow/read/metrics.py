"""Canonical per-launch fields and the ordered alias chains that resolve them.

Metric names change across architectures and Nsight Compute versions (the legacy
``.nsight-cuprof-report`` files use another naming scheme altogether), so every
canonical field is resolved through an ordered chain of *sources*. The first source
whose raw metrics all hold a value wins, and the record keeps which one it was
(provenance). A field with no usable source is missing: it is never turned into 0.

This module is pure data (the machinery of chains is ``ncuflow.read.chains``, the fields
read after the verdict are ``ncuflow.read.deep_metrics``); it imports nothing from
``ncu_report``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ncuflow.read.chains import CanonicalField, Combine, Source, resolve, single_sources
from ncuflow.read.deep_metrics import DEEP_FIELDS

__all__ = ["FIELDS", "FIELDS_BY_NAME", "CanonicalField", "Combine", "Source", "first_choice", "resolve"]

_v = single_sources  # each name as a single-metric source, in order


# The rated peak: bytes per DRAM cycle at the device's rated memory clock (kHz), or two
# transfers per clock over the bus width (bits), as CUDA's deviceQuery computes it.
DRAM_RATED_SOURCES: tuple[Source, ...] = (
    Source(("dram__bytes.sum.peak_sustained", "device__attribute_memory_clock_rate"), "product", 1000.0),
    Source(("device__attribute_memory_clock_rate", "device__attribute_global_memory_bus_width"), "product", 250.0),
)

FIELDS: tuple[CanonicalField, ...] = (
    CanonicalField(
        "duration_ns", "ns",
        _v("gpu__time_duration.sum", "gpu__time_duration"),
        "kernel duration measured by the profiler",
    ),
    CanonicalField(
        "dram_bytes_read", "byte",
        _v("dram__bytes_read.sum", "dram__read_bytes", "fbpa__dram_read_bytes.sum")
        + _v("dram__sectors_read.sum", "dram__read_sectors", scale=32.0),
        "bytes read from device memory",
    ),
    CanonicalField(
        "dram_bytes_write", "byte",
        _v("dram__bytes_write.sum", "dram__write_bytes", "fbpa__dram_write_bytes.sum")
        + _v("dram__sectors_write.sum", "dram__write_sectors", scale=32.0),
        "bytes written to device memory",
    ),
    CanonicalField(
        "dram_bytes", "byte",
        (*_v("dram__bytes.sum"), Source(("dram__bytes_read.sum", "dram__bytes_write.sum"), "sum"), Source(("dram__sectors_read.sum", "dram__sectors_write.sum"), "sum", 32.0), Source(("dram__read_bytes", "dram__write_bytes"), "sum")),
        "bytes moved to and from device memory",
    ),
    CanonicalField(
        "dram_peak_bw", "byte/s",
        # Bytes per DRAM cycle at the DRAM clock measured over the launch, what NVIDIA's
        # "% of peak" divides by. ``read.sanity`` then takes the rated peak for HBM (one
        # memory clock: the measured one is noise, on ~4 µs kernels 2.04–2.27 TB/s for an
        # H100 PCIe rated 2.04) and caps a GDDR measurement at it.
        (Source(("dram__bytes.sum.peak_sustained", "dram__cycles_elapsed.avg.per_second"), "product"),),
        "sustained peak device-memory bandwidth during the launch (at most the rated peak)",
    ),
    CanonicalField(
        "dram_rated_bw", "byte/s",
        DRAM_RATED_SOURCES,
        "device-memory bandwidth at the device's rated memory clock",
    ),
    CanonicalField(
        "dram_bus_bits", "bit",
        _v("device__attribute_global_memory_bus_width"),
        "width of the device-memory bus (HBM: 1024 bits per stack)",
    ),
    CanonicalField(
        "dram_throughput_pct", "%",
        _v(
            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
            "dram__throughput.avg.pct_of_peak_sustained_elapsed",
            "dram__bytes.sum.pct_of_peak_sustained_elapsed",
        ),
        "device-memory throughput as % of peak (NVIDIA's figure)",
    ),
    CanonicalField(
        "l2_hit_rate_pct", "%",
        _v("lts__t_sector_hit_rate.pct", "lts__request_total_sectors_hitrate_pct"),
        "L2 sector hit rate",
    ),
    CanonicalField(
        "global_ld_sectors", "sector",
        _v("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
        "L1 sectors requested by global loads",
    ),
    CanonicalField(
        "global_ld_requests", "request",
        _v("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
        "L1 requests made by global loads",
    ),
    CanonicalField(
        "sectors_per_request", "sector/request",
        (
            Source(
                (
                    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
                ),
                "ratio",
            ),
            *_v("l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio"),
        ),
        "sectors per global-load request (4 is perfectly coalesced fp32)",
    ),
    CanonicalField(
        "global_ld_inst", "inst",
        _v(
            "smsp__inst_executed_op_global_ld.sum",
            "smsp__sass_inst_executed_op_global_ld.sum",
            "sass__inst_executed_global_loads",
        ),
        "warp-level global-load instructions executed",
    ),
    CanonicalField(
        "inst_executed", "inst",
        _v("smsp__inst_executed.sum", "sm__inst_executed.sum", "inst_executed"),
        "warp instructions executed",
    ),
    CanonicalField(
        "inst_issued", "inst",
        _v("smsp__inst_issued.sum", "sm__inst_issued.sum"),
        "warp instructions issued",
    ),
    CanonicalField(
        "issue_active_pct", "%",
        _v(
            "sm__inst_issued.avg.pct_of_peak_sustained_elapsed",
            "smsp__issue_active.avg.pct_of_peak_sustained_elapsed",
            "sm__issue_active.avg.pct_of_peak_sustained_elapsed",
        ),
        "issue slots used, % of peak over the elapsed time",
    ),
    CanonicalField(
        "sm_clock_hz", "Hz",
        _v("sm__cycles_elapsed.avg.per_second", "gpc__cycles_elapsed.avg.per_second"),
        "SM clock during the launch",
    ),
    CanonicalField(
        "dram_clock_hz", "Hz",
        _v("dram__cycles_elapsed.avg.per_second"),
        "device-memory clock during the launch",
    ),
    CanonicalField(
        "sm_cycles_elapsed", "cycle",
        _v("sm__cycles_elapsed.max", "gpc__cycles_elapsed.max", "sm__cycles_elapsed.avg", "sm__elapsed_cycles_avg"),
        "SM cycles elapsed over the launch",
    ),
    CanonicalField(
        "passes", "pass",
        _v("profiler__replayer_passes"),
        "replay passes ncu needed for this launch",
    ),
    CanonicalField(
        "grid_size", "block",
        _v("launch__grid_size"),
        "thread blocks in the launch's grid",
    ),
    CanonicalField(
        "block_size", "thread",
        _v("launch__block_size"),
        "threads per block",
    ),
    CanonicalField(
        "registers_per_thread", "register",
        _v("launch__registers_per_thread"),
        "registers per thread",
    ),
    CanonicalField(
        "shared_mem_per_block", "byte",
        (
            Source(("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic"), "sum"),
            *_v("launch__shared_mem_per_block"),
        ),
        "shared memory per block, static + dynamic",
    ),
    CanonicalField(
        "sm_count", "SM",
        _v("device__attribute_multiprocessor_count"),
        "streaming multiprocessors on the device",
    ),
    CanonicalField(
        "schedulers_per_sm", "SMSP/SM",
        _v("device__attribute_num_schedulers_per_multiprocessor"),
        "warp schedulers (SMSPs) per SM",
    ),
    CanonicalField(
        "l2_throughput_pct", "%",
        _v("lts__t_sectors.avg.pct_of_peak_sustained_elapsed", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
        "L2 throughput, % of peak",
    ),
    CanonicalField(
        "l1_throughput_pct", "%",
        _v("l1tex__throughput.avg.pct_of_peak_sustained_elapsed", "l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed"),
        "L1/TEX throughput, % of peak",
    ),
    CanonicalField(
        "sm_throughput_pct", "%",
        _v("sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm__sol_pct"),
        "NVIDIA's compute (SM) speed-of-light figure, % of peak",
    ),
    CanonicalField(
        "memory_throughput_pct", "%",
        _v(
            "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
            "gpu__compute_memory_sol_pct",
        ),
        "NVIDIA's memory speed-of-light figure, % of peak",
    ),
    CanonicalField(
        "tensor_pipe_pct", "%",
        _v(
            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
        ),
        "tensor pipe active cycles, % of peak",
    ),
    # What comes after the verdict (issue 22): FLOPs and ceilings for the roofline,
    # occupancy and warp-stall reasons; their chains are in ncuflow.read.deep_metrics.
    *DEEP_FIELDS,
)

FIELDS_BY_NAME: Mapping[str, CanonicalField] = {f.name: f for f in FIELDS}

# Units of things counted: a field in one of them is a whole number (Int64 in the export).
COUNT_UNITS: frozenset[str] = frozenset({
    "byte", "sector", "request", "inst", "pass", "block", "thread", "register", "SM", "SMSP/SM", "flop",
})


def is_count(field: CanonicalField) -> bool:
    """Whether the field counts things (bytes, sectors, instructions, ...): a whole number."""
    return field.unit in COUNT_UNITS

# The fields the study's questions are decided on: ``ncuflow profile`` collects these
# (their first-choice raw metrics) and nothing else unless asked for a section set.
DECISIVE_FIELDS: tuple[str, ...] = (
    "duration_ns",
    "dram_bytes_read",
    "dram_bytes_write",
    "dram_peak_bw",
    "dram_throughput_pct",
    "l2_hit_rate_pct",
    "global_ld_sectors",
    "global_ld_requests",
    "global_ld_inst",
    "inst_executed",
    "inst_issued",
    "issue_active_pct",
    "sm_clock_hz",
    "dram_clock_hz",
    "sm_cycles_elapsed",
    "l2_throughput_pct",
    "l1_throughput_pct",
    "sm_throughput_pct",
    "memory_throughput_pct",
    "flops_fp32",
    "tensor_pipe_pct",
)

# Raw metrics the model reads besides the canonical fields (NVIDIA's breakdown lists).
BREAKDOWN_METRICS: tuple[str, ...] = (
    "breakdown:gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "breakdown:sm__throughput.avg.pct_of_peak_sustained_elapsed",
)


# The decisive collection in two tiers, designed from the corpus of public reports
# (analysis/bench_passes.py measures them; docs/passes.md has the pass table).
# Tier 1 (``decisive``, what ``ncuflow profile`` collects by default): the mission's counters
# (duration, DRAM bytes and throughput, L2 hit rate, sectors per request, global-load and
# all instructions executed/issued, clocks) and the per-unit throughputs that fit in the
# same passes: 2 counter passes on GH100 (ncu records 3), no SASS patching. NVIDIA's SOL
# top-levels are left out: sm__throughput alone costs 8 passes, the memory one 5.
DECISIVE_TIER1_METRICS: tuple[str, ...] = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__sectors_read.sum",
    "dram__sectors_write.sum",
    "fbpa__dram_read_bytes.sum",
    "fbpa__dram_write_bytes.sum",
    "dram__bytes.sum.peak_sustained",
    "dram__cycles_elapsed.avg.per_second",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_sector_hit_rate.pct",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "smsp__inst_executed_op_global_ld.sum",
    "smsp__inst_executed.sum",
    "smsp__inst_issued.sum",
    "sm__inst_issued.avg.pct_of_peak_sustained_elapsed",
    "sm__cycles_elapsed.avg.per_second",
    "sm__cycles_elapsed.max",
    "lts__t_sectors.avg.pct_of_peak_sustained_elapsed",
    "sm__issue_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_elapsed",
    "l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed",
    "lts__t_tag_requests.avg.pct_of_peak_sustained_elapsed",
    "lts__xbar2lts_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "dram__cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed.avg.pct_of_peak_sustained_elapsed",
    "l1tex__texin_sm2tex_req_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_fp16.avg.pct_of_peak_sustained_elapsed",
)

# Tier 2: the per-unit throughputs of NVIDIA's speed-of-light breakdowns that, on the
# corpus's full-set reports, hold their group's maximum and do not fit in tier 1's passes
# (math pipes, the L1 and L2 ports, the MIO queue). Collected only for launches tier 1
# leaves undecided (``ncuflow.profile.passes.undecided``).
DECISIVE_TIER2_METRICS: tuple[str, ...] = (
    "l1tex__lsuin_requests.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "l1tex__m_l1tex2xbar_req_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_adu.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "lts__d_sectors.avg.pct_of_peak_sustained_elapsed",
    "lts__lts2xbar_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed",
    "l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed",
    "sm__mio_pq_read_cycles_active.avg.pct_of_peak_sustained_elapsed",
)

# Per-unit throughput metrics (% of peak over the elapsed time) that stand in for NVIDIA's
# speed-of-light breakdown lists where a report has none (a `--metrics` collection such as
# ncuflow's own decisive tiers): the model groups them into its L2, L1, issue and math terms.
UNIT_THROUGHPUT_METRICS: tuple[str, ...] = tuple(dict.fromkeys((
    "lts__t_sectors.avg.pct_of_peak_sustained_elapsed",
    "lts__t_tag_requests.avg.pct_of_peak_sustained_elapsed",
    "l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed",
    "l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed",
    "l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed",
    "l1tex__lsuin_requests.avg.pct_of_peak_sustained_elapsed",
    "sm__issue_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed",
    *(m for m in (*DECISIVE_TIER1_METRICS, *DECISIVE_TIER2_METRICS)
      if m.endswith(".avg.pct_of_peak_sustained_elapsed")
      and m not in ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                    "sm__inst_issued.avg.pct_of_peak_sustained_elapsed")),
)))


def decisive_metric_names(tier: int = 1) -> tuple[str, ...]:
    """The ``--metrics`` list of a decisive tier: 1 (the default ``decisive``) or 2 (its escalation).

    Tier 2 is what a second run collects for launches tier 1 leaves undecided; the model
    then reads both runs' metrics. Passes and device attributes are always in a report.
    """
    if tier == 1:
        return DECISIVE_TIER1_METRICS
    if tier == 2:
        return DECISIVE_TIER2_METRICS
    raise ValueError(f"the decisive collection has tiers 1 and 2, not {tier}")


def field_metric_names() -> tuple[str, ...]:
    """Every raw metric the decisive fields' sources name (current naming scheme only).

    The first ``decisive`` list, before the tiers (10 counter passes + 1 SASS-patching
    pass on GH100): kept as the ``fields`` collection for comparison.
    """
    names: list[str] = []
    for field_name in DECISIVE_FIELDS:
        for source in FIELDS_BY_NAME[field_name].sources:
            for metric in source.metrics:
                if "__" in metric and "." in metric and metric not in names:
                    names.append(metric)
    names.extend(m for m in UNIT_THROUGHPUT_METRICS[:13] if m not in names)
    return tuple(names)


def first_choice(field_name: str) -> str:
    """The first-choice raw metric of a field, to name it when it is missing."""
    return FIELDS_BY_NAME[field_name].sources[0].label()
