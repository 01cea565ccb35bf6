"""The names ncu 2019.x gave the metrics a chain reads (legacy ``.nsight-cuprof-report`` files).

Such a report carries the sections it was collected with, and each section defines a figure
by its 2019.x name and, for newer chips, by the later one, label between them
(``Name: "sm__sol_pct" Label: "SOL SM" Options { Name: "sm__throughput.avg.pct_of_peak_sustained_elapsed" }``).
The table is those pairs, for every later name a chain reads as a source of its own:
``tests/test_legacy_names.py`` reads the pairs off the sections of the corpus's legacy report
and checks the table against them both ways. ``single_sources`` puts a chain's 2019.x names
after its later ones, so a legacy report reads NVIDIA's speed-of-light figures, its
instruction counts, occupancy and stall reasons where it holds them (public reports of
BrennenTaylor/Twisty, GTX 1070 Ti, read as ``unknown`` before: "NVIDIA's figures are not in
the report"). NVIDIA's other pairs name figures no chain reads (``tex__sol_pct`` is
``l1tex__throughput``'s % of the *active* peak, not the elapsed one ``l1_throughput_pct`` reads).
"""

from __future__ import annotations

from collections.abc import Mapping

_STALLS = ("barrier", "dispatch_stall", "drain", "imc_miss", "long_scoreboard", "math_pipe_throttle",
           "membar", "mio_throttle", "misc", "not_selected", "selected", "short_scoreboard", "tex_throttle",
           "wait")

LEGACY_NAMES: Mapping[str, str] = {
    "gpu__time_duration.sum": "gpu__time_duration",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": "fbpa__sol_pct",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "ltc__sol_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm__sol_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "gpu__compute_memory_sol_pct",
    "lts__t_sector_hit_rate.pct": "lts__request_total_sectors_hitrate_pct",
    "smsp__inst_executed.sum": "smsp__inst_executed_sum",
    "smsp__inst_issued.sum": "smsp__inst_issued_sum",
    "gpc__cycles_elapsed.avg.per_second": "gpc__frequency",
    "dram__cycles_elapsed.avg.per_second": "dram__frequency",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "sm__active_warps_avg_per_active_cycle_pct",
    "smsp__warps_eligible.avg.per_cycle_active": "smsp__eligible_warps_avg_per_active_cycle",
    **{f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio": f"smsp__warp_cycles_per_issue_stall_{reason}"
       for reason in _STALLS},
    "smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio":
        "smsp__warp_cycles_per_issue_stall_no_instructions",
}


def with_legacy_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """The names, then the 2019.x names of those that had one and are not among them already."""
    older = (LEGACY_NAMES[n] for n in names if n in LEGACY_NAMES)
    return tuple(dict.fromkeys((*names, *older)))
