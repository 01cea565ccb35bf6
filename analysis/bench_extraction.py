"""Extraction speed of ncuflow against the floor of the ncu_report API, side by side.

(a) floor: load each report with ncu_report and read only the raw values of the
    canonical fields' first-choice metrics, action by action;
(b) ncuflow: `export` of the same reports to parquet (alias chains, breakdown,
    NVIDIA's rule result, classification, polars frame, parquet write).

Prints launches/second for both, their ratio (goal: ncuflow within 1.3x of the floor),
and the cost per launch of small (1-launch) against large (>= 100-launch) reports
(goal: flat). Each side runs --repeats times; the best run counts.

    python analysis/bench_extraction.py [REPORT_DIR] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import ncu_report

from ncuflow.export import export_reports
from ncuflow.extract import count_actions, find_reports
from ncuflow.metrics import FIELDS

FIRST_CHOICE_METRICS = tuple(dict.fromkeys(m for f in FIELDS for m in f.sources[0].metrics))


def floor_pass(reports: Sequence[Path]) -> int:
    launches = 0
    for report in reports:
        context = ncu_report.load_report(str(report))
        for range_index in range(context.num_ranges()):
            report_range = context.range_by_idx(range_index)
            for action_index in range(report_range.num_actions()):
                action = report_range.action_by_idx(action_index)
                for name in FIRST_CHOICE_METRICS:
                    metric = action.metric_by_name(name)
                    if metric is not None and metric.has_value():
                        metric.value()
                launches += 1
    return launches


def ncuflow_pass(reports: Sequence[Path]) -> int:
    with tempfile.TemporaryDirectory() as folder:
        return export_reports(reports, Path(folder) / "bench.parquet").launch_count


def best_time(function: Callable[[Sequence[Path]], int], reports: Sequence[Path], repeats: int) -> tuple[float, int]:
    best = float("inf")
    launches = 0
    for _ in range(repeats):
        start = time.perf_counter()
        launches = function(reports)
        best = min(best, time.perf_counter() - start)
    return best, launches


def main(argv: list[str] | None = None) -> None:
    default_corpus = os.environ.get("NCUFLOW_CORPUS", str(Path(__file__).resolve().parents[2] / "shared" / "ncu-reports"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report_dir", nargs="?", default=default_corpus)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    reports = find_reports([Path(args.report_dir)])
    sizes = {report: count_actions(report) for report in reports}

    # Interleave the two sides so that machine noise hits both alike.
    floor_s, floor_n = best_time(floor_pass, reports, args.repeats)
    ours_s, ours_n = best_time(ncuflow_pass, reports, args.repeats)
    floor_s2, _ = best_time(floor_pass, reports, args.repeats)
    floor_s = min(floor_s, floor_s2)
    assert floor_n == ours_n, (floor_n, ours_n)
    print(f"{len(reports)} reports, {ours_n} launches, best of {args.repeats}")
    print(f"  floor   (ncu_report, first-choice metrics only): {floor_n / floor_s:9.0f} launches/s")
    print(f"  ncuflow (export to parquet)                    : {ours_n / ours_s:9.0f} launches/s")
    print(f"  ratio ncuflow/floor time: {ours_s / floor_s:.2f}x  (goal <= 1.3x)")

    small = [r for r in reports if sizes[r] == 1]
    large = [r for r in reports if sizes[r] >= 100]
    if small and large:
        rows = []
        for label, group in (("1-launch reports", small), (">=100-launch reports", large)):
            n = sum(sizes[r] for r in group)
            floor_g, _ = best_time(floor_pass, group, args.repeats)
            ours_g, _ = best_time(ncuflow_pass, group, args.repeats)
            rows.append((label, len(group), n, floor_g / n * 1e3, ours_g / n * 1e3))
        print("  cost per launch (ms):       reports  launches   floor  ncuflow")
        for label, count, n, floor_ms, ours_ms in rows:
            print(f"    {label:24s} {count:7d} {n:9d} {floor_ms:7.3f} {ours_ms:8.3f}")
        print(f"  ncuflow per-launch cost, large/small: {rows[1][4] / rows[0][4]:.2f}x (flat = about 1 or below)")


if __name__ == "__main__":
    sys.exit(main())
