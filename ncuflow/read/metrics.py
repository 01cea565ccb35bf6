"""The counter table: one frozen row per counter, from which every list is derived.

A row (``ncuflow.read.chains.CanonicalField``) holds a counter's name, its alias chain
(the raw metrics that count the same events, in order; the first complete one wins and is
kept as provenance), unit, kind, tolerance class, decisive tier, sanity rule, the model
terms it feeds and how it is shown. The decisive tiers' ``--metrics`` lists, the count
columns of the export, the sanity rules, the stability and explain fields, the classify
columns and the evidence order are all read off the rows (``tests/test_fields.py``
checks the derivations). Metric names change across architectures and Nsight Compute
versions; a chain never links two metrics that count different events: every pair of
sources is checked on every shared report holding both (``tests/test_chains.py``).

A field with no usable source is missing: it is never turned into 0.

This module is pure data (the machinery of chains is ``ncuflow.read.chains``, the unit
throughputs of the max model ``ncuflow.read.throughputs``, the fields read after the
verdict ``ncuflow.read.deep_metrics``); it imports nothing from ``ncu_report``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ncuflow.read.chains import (
    CanonicalField,
    Combine,
    Counter,
    Display,
    Part,
    Source,
    Tolerance,
    resolve,
    single_sources,
)
from ncuflow.read.deep_metrics import DEEP_FIELDS
from ncuflow.read.throughputs import THROUGHPUT_ROWS
from ncuflow.terms import TERM_NAMES

__all__ = ["COUNTERS", "FIELDS", "FIELDS_BY_NAME", "CanonicalField", "Combine", "Counter", "Source", "first_choice",
           "resolve"]

_v = single_sources  # each name as a single-metric source, in order

# gpu__time_duration ticks in 32 ns steps on the H200 (every stored duration is a multiple of 32).
DURATION_FLOOR_NS = 320.0  # ten ticks
PERCENT_POINT_FLOOR = 1.0  # on the 0–100 scale of hit rates and % of peak
# A byte count moves by a few sectors between replays of a tiny kernel: 128 sectors are noise.
BYTES_FLOOR = 4096.0

_BYTES_WHY = (
    "DRAM bytes are judged against the launch's total DRAM traffic (dram_bytes), the quantity "
    "T_DRAM is computed from: a small kernel writes back a few hundred KB of L2 more or less "
    "from one replay to the next (H200 copy_bandwidth 16 MiB: 577,536 vs 601,600 B written, "
    "4.1 % of the write bytes but 0.14 % of the 17.4 MB total; the paged/flat decode split "
    "kernels: 0.3–7 % of their write bytes, ≤ 0.02 % of their total where the L2 behaves); "
    f"at least {BYTES_FLOOR:,.0f} B (128 sectors): a 32-thread kernel reads 256 B in one "
    "replay and 512 B in the next"
)
_PCT_WHY = (
    "a percentage on the 0–100 scale, judged in percentage points: at low values a relative "
    "spread exaggerates (H200 merge_splits_kernel, 14 cells: L2 hit ~13 % moves 0.04–0.68 points "
    "between replays, up to 5.2 % relative; DRAM % of peak ~15 % moves up to 0.48 points, 3.3 % "
    "relative, with the duration of a 6 µs kernel), so the band is 2 % of the median with a floor "
    f"of {PERCENT_POINT_FLOOR:g} percentage point"
)
_EXACT_WHY = "executed instructions are fixed by the program and its inputs: identical in every H200 replica"
_LOAD_TERMS = ("l1", "pipe", "issue")  # each load is an LSU instruction, an issue slot and L1 requests
_LOAD_KINDS = (
    "a hardware count (smsp__inst_executed_op_*): the SASS-patched count of the same kind counts other "
    "events (H200 LDG 16,384 against 12,288 SASS; A100 LDGSTS 21,504 against 16,128) and is a field of its own"
)


def _kind_fields(family: str, chain: Mapping[str, tuple[Source, ...]], tier: int | None) -> tuple[CanonicalField, ...]:
    """LDG, LDGSTS and TMA-load instruction counts of one family (hardware or SASS-patched)."""
    suffix = "" if family == "hardware" else "_sass"
    what = {"ldg": "LDG", "ldgsts": "LDGSTS (cp.async)", "tma_ld": "TMA (bulk) load"}
    return tuple(
        CanonicalField(
            f"{kind}{suffix}_inst", "inst", sources,
            f"warp-level {what[kind]} instructions executed ({family} count)", kind="count", tier=tier,
            tolerance=Tolerance("exact", work=True, why=f"{_EXACT_WHY}; {_LOAD_KINDS}"), terms=_LOAD_TERMS,
            display=Display(label=f"{what[kind].split()[0]}{'ˢ' if suffix else ''}", digits=0, evidence=5,
                            plot=kind == "ldg" and not suffix),
        )
        for kind, sources in chain.items()
    )


def _total(family: str) -> CanonicalField:
    suffix = "" if family == "hardware" else "_sass"
    return CanonicalField(
        f"global_ld{suffix}_inst", "inst", (),
        f"warp-level global-load instructions executed: LDG + LDGSTS (sm_80 on) + TMA loads (sm_90 on), "
        f"{family} counts, the kinds the chip has", kind="count",
        tolerance=Tolerance("exact", work=True, identity=True, why=f"{_EXACT_WHY}; {_LOAD_KINDS}"), terms=_LOAD_TERMS,
        display=Display(label="gld inst" + ("ˢ" if suffix else ""), digits=0, evidence=1, plot=not suffix,
                        classify=5 if not suffix else None, stand_in=None if suffix else "global_ld_sass_inst"),
        parts=(Part(f"ldg{suffix}_inst", 0.0, "LDG"), Part(f"ldgsts{suffix}_inst", 8.0, "LDGSTS (cp.async)"),
               Part(f"tma_ld{suffix}_inst", 9.0, "TMA loads")),
    )


_SASS = "smsp__sass_inst_executed_op_{}.sum"
LOAD_FIELDS: tuple[CanonicalField, ...] = (
    *_kind_fields("hardware", {
        "ldg": _v("smsp__inst_executed_op_global_ld.sum"),
        "ldgsts": _v("smsp__inst_executed_op_ldgsts.sum"),
        "tma_ld": _v("smsp__inst_executed_op_tma_ld.sum"),
    }, tier=1),
    _total("hardware"),
    *_kind_fields("SASS-patched", {
        "ldg": _v(_SASS.format("global_ld"), "sass__inst_executed_global_loads"),
        "ldgsts": (*_v(_SASS.format("ldgsts"), "sm__sass_inst_executed_op_ldgsts.sum"),
                   Source(("sm__sass_inst_executed_op_ldgsts_cache_access.sum",
                           "sm__sass_inst_executed_op_ldgsts_cache_bypass.sum"), "sum")),
        "tma_ld": _v(_SASS.format("tma_ld"), "sm__sass_inst_executed_op_tma_ld.sum"),
    }, tier=None),
    _total("SASS"),
)

FIELDS: tuple[CanonicalField, ...] = (
    CanonicalField(
        "duration_ns", "ns", _v("gpu__time_duration.sum", "gpu__time_duration"),
        "kernel duration measured by the profiler", kind="time", tier=1,
        tolerance=Tolerance("time", floor=DURATION_FLOOR_NS, why=(
            "2 % relative, with a floor of ten 32-ns timer ticks: a 6 µs kernel's duration "
            "moves by 32–224 ns between replays (H200 merge_splits_kernel, 14 cells: up to "
            "3.8 % relative), while every kernel over 25 µs stayed within 1.9 %")),
        display=Display(label="duration", classify=1),
    ),
    *LOAD_FIELDS,
    CanonicalField(
        "inst_executed", "inst", _v("smsp__inst_executed.sum", "sm__inst_executed.sum"),
        "warp instructions executed", kind="count", tier=1, terms=("issue", "pipe", "math"),
        tolerance=Tolerance("exact", work=True, identity=True,
                            why="identical in every H200 replica (and in repeated launches of corpus reports)"),
        display=Display(evidence=2, plot=True),
    ),
    CanonicalField(
        "dram_bytes", "byte",
        (*_v("dram__bytes.sum"), Source(("dram__bytes_read.sum", "dram__bytes_write.sum"), "sum"),
         Source(("dram__sectors_read.sum", "dram__sectors_write.sum"), "sum", 32.0),
         Source(("dram__read_bytes", "dram__write_bytes"), "sum")),
        "bytes moved to and from device memory", kind="count", tier=1, terms=("dram", "l2"),
        tolerance=Tolerance("bytes", floor=BYTES_FLOOR, work=True, why=(
            "total DRAM traffic stays within 0.2 % across H200 replicas where the L2 behaves the "
            "same (≤ 0.02 % for the decode kernels, 0.003–0.14 % for the copies); paged decode "
            "over a shared prefix (L2 hit 84–98 %, depending on which CTA misses first) moves "
            "0.03–0.56 %: a real difference between replays, and flagged")),
        display=Display(evidence=3, plot=True),
    ),
    CanonicalField(
        "dram_bytes_read", "byte",
        _v("dram__bytes_read.sum", "dram__read_bytes", "fbpa__dram_read_bytes.sum")
        + _v("dram__sectors_read.sum", "dram__read_sectors", scale=32.0),
        "bytes read from device memory", kind="count", tier=1, terms=("dram", "l2"),
        tolerance=Tolerance("bytes", floor=BYTES_FLOOR, reference="dram_bytes", work=True, why=_BYTES_WHY),
        display=Display(evidence=4, plot=True),
    ),
    CanonicalField(
        "dram_bytes_write", "byte",
        _v("dram__bytes_write.sum", "dram__write_bytes", "fbpa__dram_write_bytes.sum")
        + _v("dram__sectors_write.sum", "dram__write_sectors", scale=32.0),
        "bytes written to device memory", kind="count", tier=1, terms=("dram", "l2"),
        tolerance=Tolerance("bytes", floor=BYTES_FLOOR, reference="dram_bytes", work=True, why=_BYTES_WHY),
        display=Display(evidence=4),
    ),
    CanonicalField(
        "global_ld_sectors", "sector", _v("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
        "L1 sectors requested by global loads", kind="count", tier=1, terms=("l2", "l1"),
        tolerance=Tolerance("near_exact", work=True, why=(
            "L1 sectors of global loads: identical in every H200 replica, but in the corpus, repeats with "
            "identical instructions and requests differ in sectors by up to 207 of 4.85e9 (A100 conv2d), "
            "4,207 of 18.9e6 (A6000) and 0.08 % (H100): near-exact, like sectors per request, and not part "
            "of a launch's work identity (what the program asks for is its instructions and requests)")),
        display=Display(evidence=6, plot=True),
    ),
    CanonicalField(
        "global_ld_requests", "request", _v("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
        "L1 requests made by global loads (LDG and LDGSTS)", kind="count", tier=1, terms=("l1", "pipe"),
        tolerance=Tolerance("exact", work=True, identity=True,
                            why="L1 requests of global loads: identical in every H200 replica"),
        display=Display(evidence=7),
    ),
    CanonicalField(
        "inst_issued", "inst", _v("smsp__inst_issued.sum", "sm__inst_issued.sum"),
        "warp instructions issued", kind="count", tier=1, terms=("issue",),
        tolerance=Tolerance("near_exact", work=True, why=(
            "issued instructions include re-issues of stalled instructions, which depend on "
            "timing: they differ between replays by 0.00001–0.18 % on the H200 (merge_splits_kernel "
            "~807,000 issued for 790,528 executed, ±1,460) and 0.0009 % on an A100, while "
            "inst_executed is identical; 0.5 % keeps a real change in the instruction count visible")),
        display=Display(evidence=8),
    ),
    CanonicalField(
        "dram_peak_bw", "byte/s",
        # Bytes per DRAM cycle at the DRAM clock measured over the launch, what NVIDIA's
        # "% of peak" divides by. ``read.sanity`` then takes the rated peak for HBM (one
        # memory clock: the measured one is noise, on ~4 µs kernels 2.04–2.27 TB/s for an
        # H100 PCIe rated 2.04) and caps a GDDR measurement at it.
        (Source(("dram__bytes.sum.peak_sustained", "dram__cycles_elapsed.avg.per_second"), "product"),),
        "sustained peak device-memory bandwidth during the launch (at most the rated peak)",
        tier=1, sanity="rated_peak", terms=("dram",),
    ),
    CanonicalField(
        "dram_rated_bw", "byte/s",
        # bytes per DRAM cycle at the device's rated memory clock (kHz), or two transfers per
        # clock over the bus width (bits), as CUDA's deviceQuery computes it
        (Source(("dram__bytes.sum.peak_sustained", "device__attribute_memory_clock_rate"), "product", 1000.0),
         Source(("device__attribute_memory_clock_rate", "device__attribute_global_memory_bus_width"), "product", 250.0)),
        "device-memory bandwidth at the device's rated memory clock", sanity="positive", terms=("dram",),
    ),
    CanonicalField(
        "dram_bus_bits", "bit", _v("device__attribute_global_memory_bus_width"),
        "width of the device-memory bus (HBM: 1024 bits per stack)", kind="attribute",
    ),
    CanonicalField(
        "dram_throughput_pct", "%", _v("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
        "device-memory throughput as % of peak (NVIDIA's figure: the larger of DRAM cycles active and FBPA sectors)",
        kind="percent", tier=1, terms=("dram",),
        tolerance=Tolerance("rate", floor=PERCENT_POINT_FLOOR, why=_PCT_WHY),
        display=Display(label="DRAM %", digits=1, classify=2),
    ),
    CanonicalField(
        "l2_hit_rate_pct", "%", _v("lts__t_sector_hit_rate.pct", "lts__request_total_sectors_hitrate_pct"),
        "L2 sector hit rate", kind="share", tier=1, terms=("l2", "dram"),
        tolerance=Tolerance("rate", floor=PERCENT_POINT_FLOOR, why=_PCT_WHY),
        display=Display(label="L2 hit %", digits=1, classify=3),
    ),
    CanonicalField(
        "sectors_per_request", "sector/request",
        (Source(("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
                "ratio"),
         *_v("l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio")),
        "sectors per global-load request (4 is perfectly coalesced fp32)", kind="ratio", tier=1,
        sanity="per_request", terms=("l1", "l2"),
        tolerance=Tolerance("rate", why="a ratio of two counters (sectors near-exact, requests exact); 2 % relative"),
        display=Display(label="sect/req", digits=2, classify=4),
    ),
    CanonicalField(
        "issue_active_pct", "%",
        _v("sm__inst_issued.avg.pct_of_peak_sustained_elapsed", "smsp__issue_active.avg.pct_of_peak_sustained_elapsed",
           "sm__issue_active.avg.pct_of_peak_sustained_elapsed"),
        "issue slots used, % of peak over the elapsed time", kind="percent", tier=1, terms=("issue",),
        display=Display(digits=1),
    ),
    CanonicalField(
        "sm_clock_hz", "Hz", _v("sm__cycles_elapsed.avg.per_second"), "SM clock during the launch", tier=1,
        terms=("issue",),
    ),
    CanonicalField(
        "gpc_clock_hz", "Hz", _v("gpc__cycles_elapsed.avg.per_second"),
        "GPC clock during the launch (ncu's SOL header \"SM Frequency\"; up to 7 % off sm__cycles_elapsed's)",
    ),
    CanonicalField(
        "dram_clock_hz", "Hz", _v("dram__cycles_elapsed.avg.per_second"), "device-memory clock during the launch",
        tier=1,
    ),
    CanonicalField(
        "sm_cycles_elapsed", "cycle", _v("sm__cycles_elapsed.max"), "SM cycles elapsed over the launch (the slowest SM)",
        kind="count", tier=1,
    ),
    CanonicalField("passes", "pass", _v("profiler__replayer_passes"), "replay passes ncu needed for this launch",
                   kind="count"),
    CanonicalField("grid_size", "block", _v("launch__grid_size"), "thread blocks in the launch's grid", kind="count"),
    CanonicalField("block_size", "thread", _v("launch__block_size"), "threads per block", kind="count"),
    CanonicalField("registers_per_thread", "register", _v("launch__registers_per_thread"), "registers per thread",
                   kind="count"),
    CanonicalField(
        "shared_mem_per_block", "byte",
        (Source(("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic"), "sum"),),
        "shared memory per block, static + dynamic (launch__shared_mem_per_block adds the driver's 1 KiB)",
        kind="count",
    ),
    CanonicalField("sm_count", "SM", _v("device__attribute_multiprocessor_count"),
                   "streaming multiprocessors on the device", kind="count"),
    CanonicalField("schedulers_per_sm", "SMSP/SM", _v("device__attribute_num_schedulers_per_multiprocessor"),
                   "warp schedulers (SMSPs) per SM", kind="count"),
    CanonicalField(
        "l2_throughput_pct", "%", _v("lts__throughput.avg.pct_of_peak_sustained_elapsed"),
        "ncu's \"L2 Cache Throughput\": the largest unit of lts__throughput, the L2 fabric included", kind="percent",
        terms=("l2",), display=Display(digits=1),
    ),
    CanonicalField(
        "l1_throughput_pct", "%", _v("l1tex__throughput.avg.pct_of_peak_sustained_elapsed"),
        "L1/TEX throughput, % of peak (the largest of the L1 units of NVIDIA's memory figure)", kind="percent",
        terms=("l1",), display=Display(digits=1),
    ),
    CanonicalField(
        "sm_throughput_pct", "%", _v("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        "NVIDIA's compute (SM) speed-of-light figure: the largest of its issue and pipe units", kind="percent",
        terms=("issue", "pipe", "math"), display=Display(digits=1),
    ),
    CanonicalField(
        "memory_throughput_pct", "%", _v("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
        "NVIDIA's memory speed-of-light figure: the largest of its DRAM, L2 and L1 units", kind="percent",
        terms=("dram", "l2", "l1"), display=Display(digits=1),
    ),
    CanonicalField(
        "tensor_pipe_pct", "%", _v("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"),
        "tensor pipe active cycles, % of peak", kind="percent", terms=("math",), display=Display(digits=1),
    ),
    # What comes after the verdict (issue 22): FLOPs and ceilings for the roofline,
    # occupancy and warp-stall reasons; their chains are in ncuflow.read.deep_metrics.
    *DEEP_FIELDS,
)

# The one table: the launch fields, then the unit throughputs the max model reads (kept in
# ``Launch.breakdown``, keyed by their raw metric, like NVIDIA's speed-of-light lists).
COUNTERS: tuple[CanonicalField, ...] = (*FIELDS, *THROUGHPUT_ROWS)

FIELDS_BY_NAME: Mapping[str, CanonicalField] = {f.name: f for f in FIELDS}

# Per term, the launch fields whose row says they feed it.
TERM_FIELDS: Mapping[str, tuple[str, ...]] = {
    term: tuple(f.name for f in FIELDS if term in f.terms) for term in TERM_NAMES
}


# The fields the study's questions are decided on: every row a decisive tier collects.
DECISIVE_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.tier is not None)

# NVIDIA's speed-of-light breakdown lists: the unit throughputs its two figures are the max of.
BREAKDOWN_METRICS: tuple[str, ...] = (
    "breakdown:gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "breakdown:sm__throughput.avg.pct_of_peak_sustained_elapsed",
)


def _current_scheme(metric: str) -> bool:
    """A metric of today's naming (unit__counter.rollup...), as opposed to a legacy or device name."""
    return "__" in metric and "." in metric and not metric.startswith(("device__", "launch__"))


def _tier_metrics(tier: int) -> tuple[str, ...]:
    """Every current-scheme metric of every source of the rows a tier collects, in table order
    (ncu drops, before it runs, a name the chip does not have: the chain's next source)."""
    names: dict[str, None] = {}
    for row in COUNTERS:
        if row.tier != tier:
            continue
        for source in row.sources:
            names.update((m, None) for m in source.metrics if _current_scheme(m))
    return tuple(names)


# The decisive collection in two tiers (analysis/bench_passes.py measures them; docs/passes.md
# has the pass table). Tier 1 (``decisive``, what ``ncuflow profile`` collects by default):
# the mission's counters (duration, DRAM bytes and throughput, L2 hit rate, sectors per
# request, global loads of every kind, instructions executed/issued, clocks) and the unit
# throughputs that fit in the same passes; no SASS patching. NVIDIA's SOL top-levels are
# left out: sm__throughput alone costs 8 passes on GH100, the memory one 5. Tier 2: the
# units that hold their term's maximum on the corpus's full-set reports and do not fit in
# tier 1 (math pipes, L1 ports, the MIO queue), and every L2 unit that moves data (ports,
# data banks, fills, atomics, the link between the partitions), the L2 term's own parts;
# collected only for launches tier 1 leaves undecided (``ncuflow.analyze.classify.undecided``).
# lts__throughput itself (3 passes more on GH100) is the GPU study's (``STUDY_METRICS``).
DECISIVE_TIER1_METRICS: tuple[str, ...] = _tier_metrics(1)
DECISIVE_TIER2_METRICS: tuple[str, ...] = _tier_metrics(2)

# What the GPU study's sweeps collect besides the decisive tiers (their ``[ncu] metrics``,
# ``tests/test_sweep.py`` holds them to this): ncu's "L2 Cache Throughput" with every unit of
# it (ncu expands ``breakdown:``), and the link between the two L2 partitions, which
# lts__ltcfabric2ltc_cycles_active counts twice over: lts__throughput settled on evidence.
_L2 = FIELDS_BY_NAME["l2_throughput_pct"].first_choice[0]
STUDY_METRICS: tuple[str, ...] = (_L2, f"breakdown:{_L2}", "lts__ltcfabric2lts_cycles_active" + ".avg.pct_of_peak_sustained_elapsed")

# Unit throughputs that stand in for NVIDIA's speed-of-light lists where a report has none
# (a `--metrics` collection such as ncuflow's own decisive tiers).
UNIT_THROUGHPUT_METRICS: tuple[str, ...] = tuple(row.sources[0].metrics[0] for row in THROUGHPUT_ROWS)


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


def first_choice(field_name: str) -> str:
    """The first-choice raw metric of a field, to name it when it is missing."""
    row = FIELDS_BY_NAME[field_name]
    if row.parts:
        return " + ".join(part.field for part in row.parts)
    return row.sources[0].label()
