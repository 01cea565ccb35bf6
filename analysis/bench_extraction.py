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
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import ncu_report

from ncuflow.output.export import export_reports
from ncuflow.read.extract import count_actions, iter_launches
from ncuflow.read.metrics import FIELDS
from ncuflow.read.reportfile import find_reports

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


def extract_pass(reports: Sequence[Path]) -> int:
    """ncuflow's extraction alone: alias chains, breakdown, rule result; no model, no parquet."""
    return sum(1 for report in reports for _ in iter_launches(report))


def ncuflow_pass(reports: Sequence[Path]) -> int:
    with tempfile.TemporaryDirectory() as folder:
        return export_reports(reports, Path(folder) / "bench.parquet").launch_count


PASSES: dict[str, Callable[[Sequence[Path]], int]] = {
    "floor": floor_pass,
    "extract": extract_pass,
    "ncuflow": ncuflow_pass,
}


def _timed_pass(name: str, reports: Sequence[Path]) -> tuple[float, int]:
    start = time.perf_counter()
    launches = PASSES[name](reports)
    return time.perf_counter() - start, launches


def measure(names: Sequence[str], reports: Sequence[Path], repeats: int) -> dict[str, tuple[float, int]]:
    """Best time of each pass, every sample in a fresh process, the passes interleaved.

    ncu_report never frees a report's parsed actions (its memory grows by several times
    the report's size with every load, and a process slows down as it grows), so samples
    taken one after another in one process are not comparable.
    """
    best: dict[str, tuple[float, int]] = {name: (float("inf"), 0) for name in names}
    context = multiprocessing.get_context("spawn")
    for _ in range(repeats):
        for name in names:
            with context.Pool(1) as pool:
                seconds, launches = pool.apply(_timed_pass, (name, list(reports)))
            if seconds < best[name][0]:
                best[name] = (seconds, launches)
    return best


def main(argv: list[str] | None = None) -> None:
    default_corpus = os.environ.get("NCUFLOW_CORPUS", str(Path(__file__).resolve().parents[2] / "shared" / "ncu-reports"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report_dir", nargs="?", default=default_corpus)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    reports = find_reports([Path(args.report_dir)])
    sizes = {report: count_actions(report) for report in reports}

    best = measure(("floor", "extract", "ncuflow"), reports, args.repeats)
    floor_s, floor_n = best["floor"]
    extract_s, _ = best["extract"]
    ours_s, ours_n = best["ncuflow"]
    assert floor_n == ours_n, (floor_n, ours_n)
    print(f"{len(reports)} reports, {ours_n} launches, best of {args.repeats}, each sample in a fresh process")
    print(f"  floor   (ncu_report, first-choice metrics only): {floor_n / floor_s:9.0f} launches/s")
    print(f"  ncuflow extraction only (iter_launches)        : {ours_n / extract_s:9.0f} launches/s")
    print(f"  ncuflow export to parquet (+ model, frames)    : {ours_n / ours_s:9.0f} launches/s")
    print(
        f"  ratio ncuflow export / floor time: {ours_s / floor_s:.2f}x (goal <= 1.3x); "
        f"extraction alone {extract_s / floor_s:.2f}x"
    )

    small = [r for r in reports if sizes[r] == 1]
    large = [r for r in reports if sizes[r] >= 100]
    if small and large:
        rows = []
        for label, group in (("1-launch reports", small), (">=100-launch reports", large)):
            n = sum(sizes[r] for r in group)
            group_best = measure(("floor", "ncuflow"), group, args.repeats)
            rows.append((label, len(group), n, group_best["floor"][0] / n * 1e3, group_best["ncuflow"][0] / n * 1e3))
        print("  cost per launch (ms):       reports  launches   floor  ncuflow  overhead")
        for label, count, n, floor_ms, ours_ms in rows:
            print(f"    {label:24s} {count:7d} {n:9d} {floor_ms:7.3f} {ours_ms:8.3f} {ours_ms - floor_ms:9.3f}")
        print(
            f"  ncuflow per-launch cost, large/small reports: {rows[1][4] / rows[0][4]:.2f}x "
            "(flat or falling: nothing grows with report size)"
        )


if __name__ == "__main__":
    sys.exit(main())
