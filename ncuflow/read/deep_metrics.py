"""The fields read after the verdict: FLOPs and ceilings for the roofline, occupancy, warp stalls.

Alias chains (``ncuflow.read.chains``) over what full-set and roofline-section reports
actually store; ``ncuflow.read.metrics`` appends them to its ``FIELDS``.

FLOPs. ncu's roofline sections store the predicated-on thread instructions of each
floating-point operation as a rate (``smsp__sass_thread_inst_executed_op_ffma_pred_on
.sum.per_cycle_elapsed``), not as a count; the count is the rate times the SMSP's elapsed
cycles (``smsp__cycles_elapsed.avg``, or its per-second rate times the duration: the
same number, since ncu divides by the duration). An FMA counts 2 FLOP, a packed-half FMA
(HFMA2) 4 and a packed-half add or multiply 2, as ncu's own derived metrics do since
2023.3 (``derived__smsp__…_hfma_pred_on_x4``). Tensor-core work is ncu's roofline
approximation, 512 FLOP per tensor-pipe instruction. Ceilings are the report's own
peak metrics (``….peak_sustained`` per cycle times the clock during the launch).

Traffic of the hierarchical roofline, as ncu's charts define it: L1 = bytes the L1/TEX
cache wrote back to the SM for global and local loads (128 B per writeback cycle), L2 =
bytes L1/TEX read from L2 over the crossbar. Where a report holds no peak metric for a
level, its ceiling is derived from the level's bytes and their % of peak over the
launch's duration (bytes / (pct / 100) / duration): the same peak, at the launch's clock.

A field whose counters the report lacks is missing, never 0.
"""

from __future__ import annotations

from ncuflow.read.chains import CanonicalField, Display, Source, single_sources

_SASS = "smsp__sass_thread_inst_executed_op_{}_pred_on"
_PEAK = "sm__sass_thread_inst_executed_op_{}_pred_on.sum.peak_sustained"
_DURATION = "gpu__time_duration.sum"
_SM_CLOCK = "sm__cycles_elapsed.avg.per_second"

# precision -> (the ops counted, each op's FLOP per thread instruction, the FMA op whose peak is the ceiling)
FLOP_OPS: dict[str, tuple[tuple[tuple[str, float], ...], str]] = {
    "fp32": ((("fadd", 1.0), ("fmul", 1.0), ("ffma", 2.0)), "ffma"),
    "fp64": ((("dadd", 1.0), ("dmul", 1.0), ("dfma", 2.0)), "dfma"),
    "fp16": ((("hadd", 2.0), ("hmul", 2.0), ("hfma", 4.0)), "hfma"),
}
TENSOR_FLOP_PER_INST = 512.0  # ncu's hierarchical tensor roofline


def _flop_sources(ops: tuple[tuple[str, float], ...]) -> tuple[Source, ...]:
    names = [_SASS.format(op) for op, _ in ops]
    weights = tuple(weight for _, weight in ops)
    rates = tuple(f"{name}.sum.per_cycle_elapsed" for name in names)
    return (
        Source(tuple(f"{name}.sum" for name in names), "formula", weights=weights),  # a --metrics collection
        Source((*rates, "smsp__cycles_elapsed.avg"), "formula", weights=weights, powers=(1.0,)),
        Source((*rates, "smsp__cycles_elapsed.avg.per_second", _DURATION), "formula", 1e-9,
               weights=weights, powers=(1.0, 1.0)),
    )


def _flop_fields() -> tuple[CanonicalField, ...]:
    found: list[CanonicalField] = []
    for precision, (ops, fma) in FLOP_OPS.items():
        fma_flop = dict(ops)[fma]
        found.append(CanonicalField(
            f"flops_{precision}", "flop", _flop_sources(ops),
            f"{precision} floating-point operations ({' + '.join(f'{w:g}×{op}' for op, w in ops)}, predicated-on threads)",
            kind="count", terms=("math",),
        ))
        found.append(CanonicalField(
            f"peak_flops_{precision}", "flop/s",
            (Source((_PEAK.format(fma), _SM_CLOCK), "product", fma_flop),),
            f"{precision} peak of the chip at the launch's SM clock ({fma} peak per cycle × {fma_flop:g} × clock)",
            terms=("math",),
        ))
    tensor = "smsp__inst_executed_pipe_tensor.sum"
    found.append(CanonicalField(
        "flops_tensor", "flop",
        (
            Source((tensor,), "value", TENSOR_FLOP_PER_INST),
            Source((f"{tensor}.per_cycle_elapsed", "smsp__cycles_elapsed.avg"), "product", TENSOR_FLOP_PER_INST),
            Source((f"{tensor}.per_cycle_elapsed", "smsp__cycles_elapsed.avg.per_second", _DURATION), "product",
                   TENSOR_FLOP_PER_INST * 1e-9),
        ),
        "tensor-core operations, 512 per tensor-pipe instruction (ncu's tensor roofline approximation)",
        kind="count", terms=("math",),
    ))
    found.append(CanonicalField(
        "peak_flops_tensor", "flop/s",
        (Source(("sm__inst_executed_pipe_tensor.sum.peak_sustained", _SM_CLOCK), "product", TENSOR_FLOP_PER_INST),),
        "tensor-core peak at the launch's SM clock (tensor-pipe instructions per cycle × 512 × clock)",
        terms=("math",),
    ))
    return tuple(found)


def _peak_from_pct(count: str, pct: str, scale: float = 1.0) -> Source:
    """A level's peak bandwidth from its bytes and their % of peak over the duration (ns)."""
    return Source((count, pct, _DURATION), "formula", scale * 100.0 * 1e9, weights=(1.0,), powers=(-1.0, -1.0))


_WRITEBACK = "l1tex__lsu_writeback_active_mem_lg.sum"
_WRITEBACK_HOPPER = "l1tex__lsu_writeback_active_mem_lgds.sum"  # sm_90: local, global and distributed shared
_WRITEBACK_OLD = "l1tex__lsu_writeback_active.sum"  # sm_72 and older: no _mem_lg split
_XBAR_READ = "l1tex__m_xbar2l1tex_read_bytes.sum"

TRAFFIC_FIELDS: tuple[CanonicalField, ...] = (
    CanonicalField(
        "l1_bytes", "byte",
        (
            *single_sources(_WRITEBACK, scale=128.0),
            Source(("derived__l1tex__lsu_writeback_bytes_mem_lg.sum.per_second", _DURATION), "product", 1e-9),
            Source((f"{_WRITEBACK}.per_second", _DURATION), "product", 128e-9),
            *single_sources(_WRITEBACK_HOPPER, scale=128.0),
            *single_sources(_WRITEBACK_OLD, scale=128.0),
            Source(("derived__l1tex__lsu_writeback_bytes.sum.per_second", _DURATION), "product", 1e-9),
        ),
        "bytes the L1/TEX cache returned to the SM for global and local loads (ncu's L1 roofline traffic)",
        kind="count", terms=("l1",),
    ),
    CanonicalField(
        "l1_peak_bw", "byte/s",
        (
            Source((f"{_WRITEBACK}.peak_sustained", "l1tex__cycles_elapsed.avg.per_second"), "product", 128.0),
            Source(("derived__l1tex__lsu_writeback_bytes_mem_lg.sum.peak_sustained",
                    "l1tex__cycles_elapsed.avg.per_second"), "product"),
            _peak_from_pct(_WRITEBACK, f"{_WRITEBACK}.pct_of_peak_sustained_elapsed", 128.0),
            Source((f"{_WRITEBACK_HOPPER}.peak_sustained", "l1tex__cycles_elapsed.avg.per_second"), "product", 128.0),
            _peak_from_pct(_WRITEBACK_HOPPER, f"{_WRITEBACK_HOPPER}.pct_of_peak_sustained_elapsed", 128.0),
            Source((f"{_WRITEBACK_OLD}.peak_sustained", "l1tex__cycles_elapsed.avg.per_second"), "product", 128.0),
            _peak_from_pct(_WRITEBACK_OLD, f"{_WRITEBACK_OLD}.pct_of_peak_sustained_elapsed", 128.0),
        ),
        "peak L1/TEX writeback bandwidth to the SM at the launch's clock", terms=("l1",),
    ),
    CanonicalField(
        "l2_bytes", "byte",
        (
            *single_sources(_XBAR_READ),
            Source((f"{_XBAR_READ}.per_second", _DURATION), "product", 1e-9),
        ),
        "bytes the L1/TEX caches read from L2 over the crossbar (ncu's L2 roofline traffic)",
        kind="count", terms=("l2",),
    ),
    CanonicalField(
        "l2_peak_bw", "byte/s",
        (
            Source((f"{_XBAR_READ}.peak_sustained", "lts__cycles_elapsed.avg.per_second"), "product"),
            _peak_from_pct(_XBAR_READ, f"{_XBAR_READ}.pct_of_peak_sustained_elapsed"),
        ),
        "peak L2-to-L1 read bandwidth at the launch's clock", terms=("l2",),
    ),
)

# ---------------------------------------------------------------------------
# occupancy: ncu's Occupancy and Launch Statistics sections (free: computed from the launch)

OCCUPANCY_LIMITS: tuple[str, ...] = ("registers", "shared_mem", "blocks", "warps", "barriers")

OCCUPANCY_FIELDS: tuple[CanonicalField, ...] = (
    CanonicalField(
        "occupancy_theoretical_pct", "%", single_sources("sm__maximum_warps_per_active_cycle_pct"),
        "theoretical occupancy: warps the launch configuration allows per SM, % of the SM's maximum",
        kind="percent", display=Display(label="theor. occ. %", digits=1),
    ),
    CanonicalField(
        "occupancy_achieved_pct", "%", single_sources("sm__warps_active.avg.pct_of_peak_sustained_active"),
        "achieved occupancy: warps active per active cycle, % of the SM's maximum",
        kind="percent", display=Display(label="achieved occ. %", digits=1),
    ),
    CanonicalField(
        "warps_per_sm_theoretical", "warp", single_sources("sm__maximum_warps_avg_per_active_cycle"),
        "warps the launch configuration allows per SM", display=Display(digits=1),
    ),
    CanonicalField(
        "max_warps_per_sm", "warp", single_sources("device__attribute_max_warps_per_multiprocessor"),
        "the SM's maximum resident warps", kind="attribute",
    ),
    *(
        CanonicalField(
            f"occupancy_limit_{limit}", "block/SM", single_sources(f"launch__occupancy_limit_{limit}"),
            f"blocks per SM the {limit.replace('_', ' ')} of the launch allow", kind="attribute",
        )
        for limit in OCCUPANCY_LIMITS
    ),
    CanonicalField(
        "waves_per_sm", "wave", single_sources("launch__waves_per_multiprocessor"),
        "waves of blocks per SM at the theoretical occupancy", kind="ratio", display=Display(digits=2),
    ),
    CanonicalField(
        "eligible_warps_per_cycle", "warp", single_sources("smsp__warps_eligible.avg.per_cycle_active"),
        "warps ready to issue per scheduler per active cycle", kind="ratio", display=Display(digits=2),
    ),
    CanonicalField(
        "warp_cycles_per_issue", "cycle", single_sources("smsp__average_warp_latency_per_inst_issued.ratio"),
        "cycles a warp spends between two issued instructions (the sum of its stall reasons)", kind="ratio",
        display=Display(digits=1),
    ),
)

# ---------------------------------------------------------------------------
# warp-stall reasons: ncu's Warp State Statistics section

STALL_REASONS: tuple[str, ...] = (
    "long_scoreboard", "short_scoreboard", "barrier", "membar", "wait", "mio_throttle", "lg_throttle",
    "tex_throttle", "math_pipe_throttle", "dispatch_stall", "drain", "imc_miss", "branch_resolving",
    "no_instruction", "sleeping", "gmma", "misc", "not_selected", "selected",
)

STALL_FIELDS: tuple[CanonicalField, ...] = tuple(
    CanonicalField(
        f"stall_{reason}", "warp/issue",
        single_sources(f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"),
        f"warps stalled on {reason.replace('_', ' ')} per issued instruction", kind="ratio",
        display=Display(digits=2),
    )
    for reason in STALL_REASONS
)

DEEP_FIELDS: tuple[CanonicalField, ...] = (*_flop_fields(), *TRAFFIC_FIELDS, *OCCUPANCY_FIELDS, *STALL_FIELDS)

# ---------------------------------------------------------------------------
# collections: what to ask ncu for (``ncuflow passes --collection roofline|latency`` prices them)


def _first_choices(fields: tuple[CanonicalField, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(m for f in fields for m in f.sources[0].metrics))


ROOFLINE_FIELD_NAMES: tuple[str, ...] = (
    *(f"{kind}_{p}" for p in (*FLOP_OPS, "tensor") for kind in ("flops", "peak_flops")),
    "l1_bytes", "l1_peak_bw", "l2_bytes", "l2_peak_bw",
)
# The roofline's counters: each FLOP, traffic and peak field's first choice, with DRAM's.
ROOFLINE_METRICS: tuple[str, ...] = (
    *_first_choices(tuple(f for f in DEEP_FIELDS if f.name in ROOFLINE_FIELD_NAMES)),
    "dram__bytes.sum", "dram__bytes.sum.peak_sustained", "dram__cycles_elapsed.avg.per_second", _DURATION,
)
# Why a latency-bound launch waits: occupancy (the limits are free: computed from the launch)
# and warp-stall reasons.
OCCUPANCY_METRICS: tuple[str, ...] = _first_choices(OCCUPANCY_FIELDS)
STALL_METRICS: tuple[str, ...] = _first_choices(STALL_FIELDS)

DEEP_FIELD_NAMES: frozenset[str] = frozenset(f.name for f in DEEP_FIELDS)
