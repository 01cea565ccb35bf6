"""The hardware units the max model reads: one row per unit throughput (% of peak).

NVIDIA's speed-of-light figures are maxima over units: ``gpu__compute_memory_throughput``
over DRAM, L2 and L1/TEX units, ``sm__throughput`` over the SM's issue slots and pipes
(the reports' ``breakdown:`` lists name them; Perfworks lists them for any chip,
``NVPW_MetricsEvaluator_GetThroughputMetricProperties``). Each row here is one such unit,
read as ``<unit>.avg.pct_of_peak_sustained_elapsed``: the term it feeds (``ncuflow.terms``),
the decisive tier that collects it, what it is, and two facts the verdict needs:

- ``wall=False`` for the units of ``lts__throughput`` (ncu's "L2 Cache Throughput") that
  NVIDIA's memory figure leaves out. ``lts__ltcfabric2ltc_cycles_active`` (GA100, GH100:
  the fabric between the two L2 partitions) "can reach 100 % SOL when
  lts__ltcfabric2lts_cycles_active is saturated at 50 %" (ncu's metric description): it
  counts the fabric link twice over and is no wall; ``lts__lts2xbar_cycles_active_realtime``
  (AD10x, GH100, GB*) is the L2-to-crossbar port counted on another clock, the port the
  memory figure counts as ``lts__lts2xbar_cycles_active``. On every public report of a chip
  without them, ``lts__throughput`` equals the largest L2 unit of the memory figure; where it
  is above every one, the launch ran on a chip that has them (``tests/test_l2.py``).
- ``unit_id`` where a memory unit and an SM pipe read one piece of hardware: the LSU's
  requests into L1 (``l1tex__lsuin_requests``) are its instructions
  (``sm__inst_executed_pipe_lsu``), likewise for TEX and TMA. Such terms tie; NVIDIA's rule
  then says compute (``sm__throughput >= gpu__compute_memory_throughput``).

Metrics a report lists that no row names are grouped by their prefix (``unit_term``).
"""

from __future__ import annotations

import functools

from ncuflow.read.chains import CanonicalField, Display, Source

PCT = ".avg.pct_of_peak_sustained_elapsed"


def _unit(base: str, term: str, what: str, *, tier: int | None = None, wall: bool = True,
          unit_id: str | None = None) -> CanonicalField:
    return CanonicalField(base, "%", (Source((base + PCT,)),), what, kind="throughput", tier=tier, terms=(term,),
                          display=Display(label=what, digits=1), wall=wall, unit_id=unit_id)


THROUGHPUT_ROWS: tuple[CanonicalField, ...] = (
    # DRAM (gpu__dram_throughput = the larger of these two)
    _unit("dram__cycles_active", "dram", "DRAM cycles active", tier=1),
    _unit("fbpa__dram_sectors", "dram", "FBPA DRAM sectors"),
    _unit("gpu__dram_throughput", "dram", "NVIDIA's DRAM throughput"),
    # L2: the sub-units that move data (NVIDIA's memory figure holds every one of them) ...
    _unit("lts__t_sectors", "l2", "L2 tag stage, sectors", tier=1),
    _unit("lts__t_tag_requests", "l2", "L2 tag stage, requests", tier=1),
    _unit("lts__xbar2lts_cycles_active", "l2", "L2 port from the crossbar", tier=1),
    _unit("lts__lts2xbar_cycles_active", "l2", "L2 port to the crossbar", tier=2),
    _unit("lts__d_sectors", "l2", "L2 data banks, sectors", tier=2),
    _unit("lts__d_sectors_fill_device", "l2", "L2 fills from device memory", tier=2),
    _unit("lts__d_sectors_fill_sysmem", "l2", "L2 fills from system memory", tier=2),
    _unit("lts__d_atomic_input_cycles_active", "l2", "L2 atomic unit", tier=2),
    _unit("lts__d_decomp_input_sectors", "l2", "L2 decompression input"),
    _unit("lts__ltcfabric2lts_cycles_active", "l2", "the link between the two L2 partitions", tier=2),
    *(_unit(f"syslts__{name}", "l2", f"system L2, {what}") for name, what in (
        ("t_sectors", "tag-stage sectors"), ("t_tag_requests", "tag requests"), ("d_sectors", "data-bank sectors"),
        ("d_atomic_input_cycles_active", "atomic unit"), ("d_sectors_fill_sysmem", "fills from system memory"),
        ("xbar2syslts_cycles_active", "port from the crossbar"), ("syslts2xbar_cycles_active", "port to the crossbar"))),
    _unit("gpu__compute_memory_access_throughput_internal_activity", "l2", "memory system, internal activity"),
    _unit("gpu__compute_memory_request_throughput_internal_activity", "l2", "memory interconnect, internal activity"),
    # ... and the two of lts__throughput that NVIDIA's memory figure leaves out
    _unit("lts__ltcfabric2ltc_cycles_active", "l2", "L2 fabric between partitions (counts the link twice)",
          wall=False),
    _unit("lts__lts2xbar_cycles_active_realtime", "l2", "L2 port to the crossbar, real-time count", wall=False),
    # L1/TEX
    _unit("l1tex__data_pipe_lsu_wavefronts", "l1", "L1 data pipe, LSU wavefronts", tier=1),
    _unit("l1tex__data_pipe_tex_wavefronts", "l1", "L1 data pipe, TEX wavefronts"),
    _unit("l1tex__data_bank_reads", "l1", "L1 data-bank reads", tier=2),
    _unit("l1tex__data_bank_writes", "l1", "L1 data-bank writes", tier=2),
    _unit("l1tex__f_wavefronts", "l1", "L1 F-stage wavefronts"),
    _unit("l1tex__lsuin_requests", "l1", "L1 requests from the LSU", tier=2, unit_id="LSU"),
    _unit("l1tex__texin_sm2tex_req_cycles_active", "l1", "L1 requests from TEX", tier=1, unit_id="TEX"),
    _unit("l1tex__lsu_writeback_active", "l1", "L1 writeback to the LSU"),
    _unit("l1tex__tex_writeback_active", "l1", "L1 writeback to TEX"),
    _unit("l1tex__m_l1tex2xbar_req_cycles_active", "l1", "L1 requests to the crossbar", tier=2),
    _unit("l1tex__m_xbar2l1tex_read_sectors", "l1", "L1 sectors read from the crossbar"),
    _unit("l1tex__m_xbar2l1tex_read_sectors_mem_dshared", "l1", "L1 distributed-shared sectors read"),
    _unit("l1tex__tmain_requests", "l1", "L1 requests from TMA", unit_id="TMA"),
    *(_unit(f"tpc__l1tex_{name}", "l1", f"L1 (TPC), {what}") for name, what in (
        ("data_bank_reads", "data-bank reads"), ("data_bank_writes", "data-bank writes"),
        ("data_pipe_lsu_wavefronts", "LSU wavefronts"), ("m_l1tex2xbar_req_cycles_active", "requests to the crossbar"))),
    # issue slots
    _unit("sm__issue_active", "issue", "issue slots used", tier=1),
    _unit("sm__inst_executed", "issue", "instructions executed per cycle", tier=1),
    _unit("sm__instruction_throughput_internal_activity", "issue", "SM instruction, internal activity"),
    # the SM's memory-side pipes (NVIDIA's sm__memory_throughput), and MIO issue and branches
    _unit("sm__inst_executed_pipe_lsu", "pipe", "LSU pipe", tier=1, unit_id="LSU"),
    _unit("sm__inst_executed_pipe_adu", "pipe", "ADU pipe", tier=2),
    _unit("sm__inst_executed_pipe_tex", "pipe", "TEX pipe", unit_id="TEX"),
    _unit("sm__inst_executed_pipe_ipa", "pipe", "IPA pipe"),
    _unit("sm__inst_executed_pipe_cbu_pred_on_any", "pipe", "CBU pipe (branches)"),
    _unit("sm__mio_inst_issued", "pipe", "MIO instructions issued"),
    _unit("sm__mio_pq_read_cycles_active", "pipe", "MIO queue, reads", tier=2),
    _unit("sm__mio_pq_write_cycles_active", "pipe", "MIO queue, writes"),
    _unit("sm__mio2rf_writeback_active", "pipe", "MIO writeback to registers"),
    _unit("idc__request_cycles_active", "pipe", "IDC (indexed constants)"),
    _unit("sm__pipe_tma_cycles_active", "pipe", "TMA pipe", unit_id="TMA"),
    _unit("sm__mem_tensor_cycles_active", "pipe", "tensor memory"),
    _unit("sm__memory_throughput_internal_activity", "pipe", "SM memory pipes, internal activity"),
    # arithmetic pipes
    _unit("sm__pipe_fma_cycles_active", "math", "FMA pipe", tier=2),
    _unit("sm__pipe_fmaheavy_cycles_active", "math", "FMA heavy pipe", tier=2),
    _unit("sm__pipe_fmalite_cycles_active", "math", "FMA lite pipe"),
    _unit("sm__pipe_alu_cycles_active", "math", "ALU pipe", tier=2),
    _unit("sm__pipe_aluheavy_cycles_active", "math", "ALU heavy pipe"),
    _unit("sm__inst_executed_pipe_fp16", "math", "FP16 pipe", tier=1),
    _unit("sm__pipe_fp64_cycles_active", "math", "FP64 pipe", tier=2),
    _unit("sm__pipe_shared_cycles_active", "math", "shared pipe (FP16 and tensor)", tier=2),
    _unit("sm__inst_executed_pipe_xu", "math", "XU pipe (transcendentals, conversions)", tier=2),
    _unit("sm__inst_executed_pipe_uniform", "math", "uniform datapath"),
    _unit("sm__pipe_tensor_cycles_active", "math", "tensor pipe", tier=2),
    _unit("sm__pipe_tensor_cycles_active_v2", "math", "tensor pipe"),
    _unit("sm__pipe_tensor_op_hmma_cycles_active", "math", "tensor pipe, HMMA"),
    _unit("sm__pipe_tensor_op_dmma_cycles_active", "math", "tensor pipe, DMMA"),
    _unit("sm__pipe_tensor_type_hmma_hgmma_qgmma_imma_igmma_bmma_bgmma_cycles_active", "math", "tensor pipe, all MMA"),
    _unit("sm__pipe_tc_cycles_active", "math", "tensor core"),
)

THROUGHPUTS_BY_METRIC = {row.sources[0].metrics[0]: row for row in THROUGHPUT_ROWS}


def _row(metric: str) -> CanonicalField | None:
    """A unit's row by its metric (``lts__t_sectors.avg.pct_of_peak_sustained_elapsed``) or base name."""
    return THROUGHPUTS_BY_METRIC.get(metric) or THROUGHPUTS_BY_METRIC.get(metric + PCT)

_MEMORY_PREFIXES: tuple[tuple[str, str], ...] = (
    ("dram__", "dram"), ("fbpa__", "dram"), ("gpu__dram", "dram"), ("lts__", "l2"), ("ltc", "l2"),
    ("syslts__", "l2"), ("gpu__compute_memory", "l2"), ("l1tex__", "l1"), ("tpc__l1tex", "l1"),
)
_ARITHMETIC = ("fma", "alu", "fp16", "fp64", "tensor", "shared", "dmma", "hmma", "imma", "xu", "uniform", "tc_")


@functools.lru_cache(maxsize=4096)  # asked for every breakdown metric of every launch; names repeat
def unit_term(metric: str) -> str | None:
    """The term a unit throughput feeds: its row's, else by NVIDIA's naming (a unit of a chip
    this table does not know yet); None for a metric of no term."""
    row = _row(metric)
    if row is not None:
        return row.terms[0]
    for prefix, term in _MEMORY_PREFIXES:
        if metric.startswith(prefix):
            return term
    if not metric.startswith(("sm__", "smsp__", "idc__")):
        return None
    base = metric.split(".")[0]
    if base.startswith(("sm__issue_active", "smsp__issue_active", "sm__inst_issued", "sm__inst_executed.")) \
            or base in ("sm__inst_executed", "smsp__inst_executed"):
        return "issue"
    pipe = base.removeprefix("sm__").removeprefix("smsp__")
    if pipe.startswith(("pipe_", "inst_executed_pipe_")) and any(a in pipe for a in _ARITHMETIC):
        return "math"
    return "pipe"


def is_wall(metric: str) -> bool:
    """Whether a unit bounds the launch's time (False for the two lts__throughput units NVIDIA's
    memory figure leaves out)."""
    row = _row(metric)
    return row.wall if row is not None else True


def unit_label(metric: str) -> str:
    """What the unit is, in words: its row's description, else its name."""
    row = _row(metric)
    return row.description if row is not None else metric.split(".")[0]


# Per compute capability, the units of lts__throughput (ncu's "L2 Cache Throughput"), and
# those of them that NVIDIA's memory figure (gpu__compute_memory_throughput) leaves out, as
# Perfworks lists them (TU10x; GA100; GA10x; AD10x; GH100; GB100/GB110; GB20x). The others
# are units of the memory figure too (``tests/test_l2.py`` checks both against Perfworks).
_LTS = ("d_atomic_input_cycles_active", "d_sectors", "d_sectors_fill_device", "t_sectors", "t_tag_requests",
        "xbar2lts_cycles_active")
_FILL_SYSMEM, _DECOMP = ("d_sectors_fill_sysmem",), ("d_decomp_input_sectors",)
_FABRIC, _LINK = ("ltcfabric2ltc_cycles_active",), ("ltcfabric2lts_cycles_active",)
_PORT, _REALTIME = ("lts2xbar_cycles_active",), ("lts2xbar_cycles_active_realtime",)


def _units(*groups: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(f"lts__{name}" for group in groups for name in group))


L2_THROUGHPUT_UNITS: dict[str, tuple[str, ...]] = {
    **{cc: _units(_LTS, _FILL_SYSMEM, _PORT) for cc in ("7.0", "7.2", "7.5", "8.6", "8.7")},
    "8.0": _units(_LTS, _FILL_SYSMEM, _PORT, _FABRIC),
    "8.9": _units(_LTS, _FILL_SYSMEM, _REALTIME),
    "9.0": _units(_LTS, _FILL_SYSMEM, _DECOMP, _FABRIC, _REALTIME),
    "10.0": _units(_LTS, _DECOMP, _LINK, _REALTIME),
    "10.3": _units(_LTS, _DECOMP, _LINK, _REALTIME),
    "12.0": _units(_LTS, _DECOMP, _REALTIME),
}
L2_OUTSIDE_MEMORY_FIGURE: dict[str, tuple[str, ...]] = {
    **{cc: () for cc in ("7.0", "7.2", "7.5", "8.6", "8.7")},
    "8.0": _units(_FABRIC), "8.9": _units(_REALTIME), "9.0": _units(_FABRIC, _REALTIME),
    "10.0": _units(_LINK, _REALTIME), "10.3": _units(_LINK, _REALTIME), "12.0": _units(_REALTIME),
}


# Per compute capability, the units of l1tex__throughput (ncu's "L1/TEX Cache Throughput") that are
# units of NVIDIA's memory figure too, and those it leaves out, as Perfworks lists them (TU10x; GA100;
# GA10x; GA10B; AD10x; GH100; GB100/GB110; GB20x): ``tests/test_l1.py`` checks both against Perfworks.
_L1 = ("data_bank_reads", "data_bank_writes", "data_pipe_lsu_wavefronts", "data_pipe_tex_wavefronts", "f_wavefronts",
       "lsu_writeback_active", "lsuin_requests", "m_xbar2l1tex_read_sectors", "tex_writeback_active",
       "texin_sm2tex_req_cycles_active")
_TO_XBAR, _DSHARED_TMA = ("m_l1tex2xbar_req_cycles_active",), ("m_xbar2l1tex_read_sectors_mem_dshared", "tmain_requests")
_TPC_ALL = ("data_bank_reads", "data_bank_writes", "data_pipe_lsu_wavefronts", "m_l1tex2xbar_req_cycles_active")
_SAMP_SRAM = ("samp_wavefronts", *(f"sram_cycles_array_{a}_cmd_{c}" for a in (0, 1) for c in ("read", "write")))


def _l1(*groups: tuple[str, ...], prefix: str = "l1tex__") -> tuple[str, ...]:
    return tuple(sorted(f"{prefix}{name}" for group in groups for name in group))


L1_IN_MEMORY_FIGURE: dict[str, tuple[str, ...]] = {
    **{cc: _l1(_L1) for cc in ("7.5", "8.6", "8.9")},
    **{cc: _l1(_L1, _TO_XBAR) for cc in ("8.0", "8.7")},
    **{cc: _l1(_L1, _TO_XBAR, _DSHARED_TMA) for cc in ("9.0", "10.0", "10.3")},
    "12.0": _l1(_L1, _DSHARED_TMA),
}
L1_OUTSIDE_MEMORY_FIGURE: dict[str, tuple[str, ...]] = {
    "7.5": _l1(_TPC_ALL, prefix="tpc__l1tex_"),
    **{cc: _l1(_TO_XBAR, prefix="tpc__l1tex_") for cc in ("8.6", "8.9")},
    **{cc: () for cc in ("8.0", "8.7", "9.0")},
    **{cc: ("l1tex__data_pipe_tc_wavefronts",) for cc in ("10.0", "10.3")},
    "12.0": (*_l1(_SAMP_SRAM), *_l1(_TO_XBAR, prefix="tpc__l1tex_")),
}
