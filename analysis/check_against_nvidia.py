"""ncuflow's numbers against NVIDIA's own reading of the same reports, in one run.

    python analysis/check_against_nvidia.py [REPORT_DIR ...]   # default: the shared corpus and the H200 store

Prints, over every launch of the reports (read with ncuflow's reader; NVIDIA's values read
with the ``ncu_report`` module where they are compared):

- agreement with NVIDIA's SOLBottleneck rule result, mapped to memory / compute / latency;
- NVIDIA's verdict present on every launch whose report has a SOL rule result naming one (in its
  title, or, ncu 2020.x, only in its message);
- u_dram against ``gpu__dram_throughput`` wherever a report holds it (worst relative gap);
- the launches that hold ``lts__throughput``, and that ``classify --evidence`` reads it for;
- the launches that hold ``l1tex__throughput``, that ``--evidence`` reads it for, those where it exceeds
  ``u_l1`` by more than 2 points, and whether any of them is at or above the on-wall threshold;
- global loads: launches whose L1 saw global-load requests, and how their loads are counted;
- load kinds against NVIDIA's per-opcode SASS table (``sass__inst_executed_per_opcode``) on every
  launch that holds it: equal, or left to a generic-load launch's own counters;
- the roofline: the highest point as a share of the roof above it, and every precision's point
  against its own precision's roof (none above it);
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

from analysis.nvidia_actions import nvidia_actions  # noqa: E402
from ncuflow.analyze.classify import classify  # noqa: E402
from ncuflow.analyze.compare import compare_loaded  # noqa: E402
from ncuflow.analyze.roofline import (  # noqa: E402
    attainable,
    point_groups,
    precision_points,
    precision_roof,
    rooflines,
)
from ncuflow.read.extract import iter_launches  # noqa: E402
from ncuflow.read.reportfile import find_reports  # noqa: E402
from ncuflow.read.runs import load_paths  # noqa: E402
from ncuflow.read.sol_verdicts import sol_verdict_name  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_findings  # noqa: E402

DRAM = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"


def _nvidia_dram(report: Path) -> dict[tuple[int, int], float]:
    found: dict[tuple[int, int], float] = {}
    for key, action in nvidia_actions(report):
        metric = action.metric_by_name(DRAM)
        if metric is not None and metric.has_value() and math.isfinite(metric.as_double()):
            found[key] = metric.as_double() / 100.0
    return found


def _nvidia_sol_verdicts(report: Path) -> dict[tuple[int, int], str | None]:
    """The verdict each launch's SOLBottleneck result names (title, or message where untitled), as ncu_report reads it."""
    found: dict[tuple[int, int], str | None] = {}
    for key, action in nvidia_actions(report):
        for result in action.rule_results():
            if result.rule_identifier() == "SOLBottleneck":
                message = result.rule_message() or {}
                found[key] = sol_verdict_name(message.get("title") or "", message.get("message") or "")
                break
    return found


def _opcode_agreement(roots: list[Path]) -> Counter[str]:
    """Each hardware load kind against NVIDIA's per-opcode counts, on every launch holding the table."""
    from ncuflow.read.opcodes import GENERIC_LOADS, KIND_OPCODES, OPCODE_TABLE, SPLIT_BY_GENERIC

    counts = Counter[str]()
    for report in find_reports(roots):
        actions = dict(nvidia_actions(report))
        for launch in iter_launches(report):
            metric = actions[(launch.range_index, launch.action_index)].metric_by_name(OPCODE_TABLE)
            ids = metric.correlation_ids() if metric is not None else None
            if ids is None:
                continue
            table = {ids.as_string(i): metric.as_double(i) for i in range(metric.num_instances())}
            counts["launches"] += 1
            for name, opcodes in KIND_OPCODES.items():
                if name == SPLIT_BY_GENERIC and any(table.get(op) for op in GENERIC_LOADS):
                    counts["generic loads: LDG not from the table"] += 1
                    continue
                same = launch.value(name) == sum(table.get(op, 0.0) for op in opcodes)
                counts["kinds equal" if same else "kinds differ"] += 1
                counts["kinds from the table"] += launch.provenance.get(name, "").startswith(OPCODE_TABLE)
    return counts


def main(roots: list[Path]) -> None:
    agreement: Counter[str] = Counter()
    dram_gaps: list[float] = []
    l2 = Counter[str]()
    l1 = Counter[str]()
    loads = Counter[str]()
    sol = Counter[str]()
    for report in find_reports(roots):
        nvidia_dram, nvidia_sol = _nvidia_dram(report), _nvidia_sol_verdicts(report)
        for launch in iter_launches(report):
            verdict = classify(launch)
            if verdict.nvidia is not None:
                agreement["agree" if verdict.nvidia.agrees else "disagree"] += 1
            named = nvidia_sol.get((launch.range_index, launch.action_index))
            if named is not None:
                sol["rule names one"] += 1
                sol["ncuflow shows it"] += verdict.nvidia is not None and verdict.nvidia.title == named
            expected = nvidia_dram.get((launch.range_index, launch.action_index))
            u_dram = verdict.utilization("dram")
            if expected is not None and u_dram is not None:
                dram_gaps.append(abs(u_dram - expected) / expected if expected else abs(u_dram))
            l1_pct = launch.value("l1_throughput_pct")
            if l1_pct is not None:
                l1["hold"] += 1
                l1["read"] += verdict.l1 is not None
                above = l1_pct - 100 * (verdict.utilization("l1") or 0.0) > 2.0
                l1["above u_l1 by > 2 points"] += above
                l1["of them at or above the threshold"] += above and l1_pct / 100 >= verdict.threshold
                l1["set by no wall"] += verdict.l1 is not None and verdict.l1.wall is False
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
    print(f"NVIDIA's verdict: the SOL rule names one on {sol['rule names one']} launches (title or message), "
          f"ncuflow shows it as ncu names it on {sol['ncuflow shows it']}")
    worst = max(dram_gaps, default=0.0)
    print(f"u_dram against gpu__dram_throughput: {len(dram_gaps)} launches, worst gap {worst:.3%}, "
          f"{sum(g > 0.01 for g in dram_gaps)} over 1 %")
    print(f"lts__throughput: held by {l2['hold']} launches, read in the evidence of {l2['read']}, "
          f"set by a unit that is no wall on {l2['not the wall']}")
    print("l1tex__throughput: " + ", ".join(f"{k} {v}" for k, v in l1.items()))
    print("global loads where L1 saw global-load requests: " + ", ".join(f"{k} {v}" for k, v in loads.items()))
    print("per-opcode table (NVIDIA's): " + ", ".join(f"{k} {v}" for k, v in _opcode_agreement(roots).items()))
    highest = 0.0
    for root in roots:
        for line in rooflines(point_groups(load_paths([root]).runs, "launch")):
            for point in line.points:
                roof = attainable(point, line)
                if roof:
                    highest = max(highest, point.flop_rate / roof)
    print(f"roofline: the highest point is at {highest:.0%} of the lowest roof above it")
    own, above = 0, 0
    for root in roots:
        for line in rooflines(point_groups(load_paths([root]).runs, "launch")):
            for point in line.points:
                for one in precision_points(point):
                    roof = precision_roof(one, line)
                    own += roof is not None
                    above += roof is not None and one.flop_rate > roof
    print(f"roofline per precision: {own} points against their own precision's roof, {above} above it")
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
