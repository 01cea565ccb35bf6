"""ncuflow's numbers against NVIDIA's own reading of the same reports, in one run.

    python analysis/check_against_nvidia.py [REPORT_DIR ...]   # default: the shared corpus and the H200 store

Prints, over every launch of the reports (read with ncuflow's reader; NVIDIA's values read
with the ``ncu_report`` module where they are compared):

- agreement with NVIDIA's SOLBottleneck rule result, mapped to memory / compute / latency;
- u_dram against ``gpu__dram_throughput`` wherever a report holds it (worst relative gap);
- the launches that hold ``lts__throughput``, and that ``classify --evidence`` reads it for;
- global loads: launches whose L1 saw global-load requests, and how their loads are counted;
- the roofline: the highest point as a share of the roof above it;
- ``compare X X``: kernels whose verdict is not "same work, same time";
- NVIDIA's findings and source markers, read by ncuflow, against ``ncu_report``'s on every
  launch (``analysis/check_findings.py``).

The figures of docs/h200.md come from one run of this script.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import ncu_report  # noqa: E402

from ncuflow.analyze.classify import classify  # noqa: E402
from ncuflow.analyze.compare import compare_loaded  # noqa: E402
from ncuflow.analyze.roofline import attainable, point_groups, rooflines  # noqa: E402
from ncuflow.read.extract import iter_launches  # noqa: E402
from ncuflow.read.reportfile import find_reports  # noqa: E402
from ncuflow.read.runs import load_paths  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_findings  # noqa: E402

DRAM = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"


def _nvidia_dram(report: Path) -> dict[tuple[int, int], float]:
    context = ncu_report.load_report(str(report))
    found: dict[tuple[int, int], float] = {}
    for r in range(context.num_ranges()):
        rng = context.range_by_idx(r)
        for a in range(rng.num_actions()):
            metric = rng.action_by_idx(a).metric_by_name(DRAM)
            if metric is not None and metric.has_value() and math.isfinite(metric.as_double()):
                found[(r, a)] = metric.as_double() / 100.0
    return found


def main(roots: list[Path]) -> None:
    agreement: Counter[str] = Counter()
    dram_gaps: list[float] = []
    l2 = Counter[str]()
    loads = Counter[str]()
    for report in find_reports(roots):
        nvidia_dram = _nvidia_dram(report)
        for launch in iter_launches(report):
            verdict = classify(launch)
            if verdict.nvidia is not None:
                agreement["agree" if verdict.nvidia.agrees else "disagree"] += 1
            expected = nvidia_dram.get((launch.range_index, launch.action_index))
            u_dram = verdict.utilization("dram")
            if expected is not None and u_dram is not None:
                dram_gaps.append(abs(u_dram - expected) / expected if expected else abs(u_dram))
            if launch.value("l2_throughput_pct") is not None:
                l2["hold"] += 1
                l2["read"] += verdict.l2 is not None
                l2["not the wall"] += verdict.l2 is not None and verdict.l2.wall is False
            requests = launch.value("global_ld_requests")
            if requests:
                totals = [launch.value(n) for n in ("global_ld_inst", "global_ld_sass_inst")]
                kinds = [launch.value(n) for n in ("ldg_inst", "ldgsts_inst", "tma_ld_inst", "ldg_sass_inst",
                                                   "ldgsts_sass_inst", "tma_ld_sass_inst")]
                loads["with requests"] += 1
                loads["total > 0"] += any(t for t in totals)
                loads["total 0"] += any(t == 0 for t in totals)
                loads["total missing, a kind > 0"] += not any(t is not None for t in totals) and any(k for k in kinds)
                loads["nothing counted"] += all(v is None for v in (*totals, *kinds))
    agreed, labelled = agreement["agree"], agreement["agree"] + agreement["disagree"]
    print(f"SOLBottleneck agreement: {agreed}/{labelled} launches ({agreed / max(labelled, 1):.1%})")
    worst = max(dram_gaps, default=0.0)
    print(f"u_dram against gpu__dram_throughput: {len(dram_gaps)} launches, worst gap {worst:.3%}, "
          f"{sum(g > 0.01 for g in dram_gaps)} over 1 %")
    print(f"lts__throughput: held by {l2['hold']} launches, read in the evidence of {l2['read']}, "
          f"set by a unit that is no wall on {l2['not the wall']}")
    print("global loads where L1 saw global-load requests: " + ", ".join(f"{k} {v}" for k, v in loads.items()))
    highest = 0.0
    for root in roots:
        for line in rooflines(point_groups(load_paths([root]).runs, "launch")):
            for point in line.points:
                roof = attainable(point, line)
                if roof:
                    highest = max(highest, point.flop_rate / roof)
    print(f"roofline: the highest point is at {highest:.0%} of the lowest roof above it")
    kernels, other = 0, []
    for report in find_reports(roots):
        loaded = load_paths([report])
        for pair in compare_loaded(loaded, loaded).matched:
            kernels += 1
            if pair.judged.verdict != "no_effect":
                other.append(f"{report.name}: {pair.label} {pair.judged.verdict}")
    print(f"compare X X: {kernels} kernels, {kernels - len(other)} same work, same time" +
          (f"; others: {other}" if other else ""))
    check_findings.main(roots)


if __name__ == "__main__":
    arguments = [Path(a) for a in sys.argv[1:]]
    main(arguments or [REPO.parent / "shared" / "ncu-reports", REPO / "profiles" / "reference" / "h200"])
