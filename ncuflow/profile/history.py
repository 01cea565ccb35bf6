"""Collections of the past, kept as they were run: what a pass table compares the tiers with.

``FIRST_DECISIVE_METRICS`` is the decisive list before the tiers (every decisive field's
first choice, NVIDIA's SOL top-levels and the units the model read then): the collection
the committed H200 reference runs were made with (``profiles/reference/h200``; 10 counter
passes + 1 SASS-patching pass on GH100, about 12 recorded). It is a record of what was run,
so it is written out, not derived from today's counter table.
"""

from __future__ import annotations

FIRST_DECISIVE_METRICS: tuple[str, ...] = (
    "gpu__time_duration.sum", "dram__bytes_read.sum", "fbpa__dram_read_bytes.sum", "dram__sectors_read.sum",
    "dram__bytes_write.sum", "fbpa__dram_write_bytes.sum", "dram__sectors_write.sum",
    "dram__bytes.sum.peak_sustained", "dram__cycles_elapsed.avg.per_second",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum.pct_of_peak_sustained_elapsed", "lts__t_sector_hit_rate.pct",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "smsp__inst_executed_op_global_ld.sum", "smsp__sass_inst_executed_op_global_ld.sum", "smsp__inst_executed.sum",
    "sm__inst_executed.sum", "smsp__inst_issued.sum", "sm__inst_issued.sum",
    "sm__inst_issued.avg.pct_of_peak_sustained_elapsed", "smsp__issue_active.avg.pct_of_peak_sustained_elapsed",
    "sm__issue_active.avg.pct_of_peak_sustained_elapsed", "sm__cycles_elapsed.avg.per_second",
    "gpc__cycles_elapsed.avg.per_second", "sm__cycles_elapsed.max", "gpc__cycles_elapsed.max",
    "sm__cycles_elapsed.avg", "lts__t_sectors.avg.pct_of_peak_sustained_elapsed",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed", "l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum.per_cycle_elapsed",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed", "smsp__cycles_elapsed.avg",
    "smsp__cycles_elapsed.avg.per_second", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "lts__t_tag_requests.avg.pct_of_peak_sustained_elapsed",
    "l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed",
    "l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed",
    "l1tex__lsuin_requests.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed",
)
