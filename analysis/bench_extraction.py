"""Extraction speed and memory of ncuflow against the floor of the ncu_report API, side by side.

(a) floor: one process loads each report with ncu_report and reads only the raw values
    of the canonical fields' first-choice metrics, action by action;
(b) ncuflow extraction alone (iter_launches) in one process;
(c) ncuflow `export` to parquet (alias chains, breakdown, NVIDIA's rule result, model,
    parquet) with --jobs 1 (one reading worker; where a core is spare, as here, each
    replacement worker makes its heap resident on it first, see ncuflow.read.heap), the same
    with that turned off, and with the default jobs (the usable cores: no core is spare).

Every sample runs in a fresh process (``ncu_report`` never frees a parsed report, so a
process slows and grows as it reads); its whole process tree (the reading workers and the
forkserver included) is sampled from /proc every 20 ms for the peak resident memory.
The corpus is read as is (1x) and with its file list repeated 2x, 5x and 10x.

Goals (ISSUE 11): peak memory at 10x <= 1.3x the peak at 1x (default jobs); default-jobs
export <= 0.8x the floor's time on 2 cores; --jobs 1 <= 1.3x the floor; cost per report
and per launch flat as the store grows.

    python analysis/bench_extraction.py [REPORT_DIR] [--repeats 3] [--scales 1,2,5,10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


# ----------------------------------------------------------------------------- the passes (child side)


def floor_pass(reports: Sequence[Path], jobs: int) -> int:
    import ncu_report

    from ncuflow.read.metrics import FIELDS

    names = tuple(dict.fromkeys(m for f in FIELDS for m in f.sources[0].metrics))
    launches = 0
    for report in reports:
        context = ncu_report.load_report(str(report))
        for range_index in range(context.num_ranges()):
            report_range = context.range_by_idx(range_index)
            for action_index in range(report_range.num_actions()):
                action = report_range.action_by_idx(action_index)
                for name in names:
                    metric = action.metric_by_name(name)
                    if metric is not None and metric.has_value():
                        metric.value()
                launches += 1
    return launches


def floor_split_pass(reports: Sequence[Path], jobs: int) -> int:
    """The floor's work split ahead of time over ``jobs`` forked processes, balanced by bytes:
    what this machine allows any reader of ``jobs`` processes, with no coordination cost."""
    import multiprocessing

    shares: list[list[Path]] = [[] for _ in range(jobs)]
    loads = [0] * jobs
    for report in sorted(reports, key=lambda r: r.stat().st_size, reverse=True):
        lightest = loads.index(min(loads))
        shares[lightest].append(report)
        loads[lightest] += report.stat().st_size
    with multiprocessing.get_context("fork").Pool(jobs) as pool:  # this child holds no threads
        return sum(pool.starmap(floor_pass, [(share, 0) for share in shares]))


def extract_pass(reports: Sequence[Path], jobs: int) -> int:
    from ncuflow.read.extract import iter_launches

    return sum(1 for report in reports for _ in iter_launches(report))


def export_pass(reports: Sequence[Path], jobs: int) -> int:
    from ncuflow.output.export import export_reports

    with tempfile.TemporaryDirectory() as folder:
        return export_reports(reports, Path(folder) / "bench.parquet", jobs=jobs or None).launch_count


def export_no_bulk_heap_pass(reports: Sequence[Path], jobs: int) -> int:
    """export with the workers' heaps left to grow page by page (ncuflow.read.heap turned off)."""
    from ncuflow.read.heap import PREFAULT_ENV

    os.environ[PREFAULT_ENV] = "0"  # before the worker server starts: every worker inherits it
    return export_pass(reports, jobs)


PASSES: dict[str, Callable[[Sequence[Path], int], int]] = {
    "floor": floor_pass,
    "export_no_bulk_heap": export_no_bulk_heap_pass,
    "floor_split": floor_split_pass,
    "extract": extract_pass,
    "export": export_pass,
}


def child(name: str, list_file: str, jobs: int) -> None:
    reports = [Path(line) for line in Path(list_file).read_text().splitlines() if line]
    # Every side starts with its modules imported (ncu_report; ncuflow's reading modules;
    # export's polars): what is timed is the reading and writing, not Python's imports.
    import ncu_report  # noqa: F401

    import ncuflow.read.extract
    if name.startswith("export"):
        import ncuflow.output.export  # noqa: F401

    start = time.perf_counter()
    launches = PASSES[name](reports, jobs)
    print(json.dumps({"seconds": time.perf_counter() - start, "launches": launches}))


# ----------------------------------------------------------------------------- measuring (parent side)


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants."""
    tree = _children()
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/statm") as handle:
                total += int(handle.read().split()[1]) * PAGE
        except OSError:
            pass
        stack.extend(tree.get(current, []))
    return total


def sample(name: str, reports: Sequence[Path], jobs: int) -> tuple[float, int, int]:
    """(seconds, launches, peak tree RSS bytes) of one pass in a fresh process."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write("\n".join(str(r) for r in reports))
    try:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--child", name, handle.name, str(jobs)],
            stdout=subprocess.PIPE, text=True,
        )
        peak = 0
        while proc.poll() is None:
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(0.02)
        out = proc.stdout.read() if proc.stdout else ""
        if proc.returncode != 0:
            raise SystemExit(f"the {name} pass failed (exit {proc.returncode})")
        result = json.loads(out.strip().splitlines()[-1])
        return result["seconds"], result["launches"], peak
    finally:
        os.unlink(handle.name)


def best(name: str, reports: Sequence[Path], jobs: int, repeats: int) -> tuple[float, int, int]:
    """Best time of ``repeats`` fresh-process samples; the peak memory is the largest seen."""
    runs = [sample(name, reports, jobs) for _ in range(repeats)]
    return min(r[0] for r in runs), runs[0][1], max(r[2] for r in runs)


def main(argv: list[str] | None = None) -> None:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--child"]:
        child(args_in[1], args_in[2], int(args_in[3]))
        return
    from ncuflow.read.pool import default_jobs, retire_bytes_default
    from ncuflow.read.reportfile import find_reports

    default_corpus = os.environ.get("NCUFLOW_CORPUS", str(Path(__file__).resolve().parents[2] / "shared" / "ncu-reports"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report_dir", nargs="?", default=default_corpus)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scales", default="1,2,5,10")
    args = parser.parse_args(args_in)
    reports = find_reports([Path(args.report_dir)])
    scales = [int(s) for s in args.scales.split(",")]
    jobs = default_jobs()
    mib = 2**20
    corpus_mib = sum(r.stat().st_size for r in reports) / mib
    print(f"{len(reports)} reports ({corpus_mib:.0f} MiB), {os.cpu_count()} cores here, default jobs {jobs}, "
          f"workers replaced after {retire_bytes_default() / mib:.0f} MiB of reports; "
          f"best of {args.repeats}, each sample a fresh process, peak = whole process tree RSS")

    print("\nspeed at 1x (seconds; ratio to the floor):")
    floor_s, launches, floor_peak = best("floor", reports, 0, args.repeats)
    extract_s, _, _ = best("extract", reports, 0, args.repeats)
    one_s, one_n, _ = best("export", reports, 1, args.repeats)
    plain_s, _, _ = best("export_no_bulk_heap", reports, 1, args.repeats)
    many_s, many_n, many_peak = best("export", reports, jobs, args.repeats)
    split_s, split_n, _ = best("floor_split", reports, jobs, args.repeats)
    assert launches == one_n == many_n == split_n, (launches, one_n, many_n, split_n)
    print(f"  floor (ncu_report, first-choice metrics, 1 process) {floor_s:6.2f} s  {launches / floor_s:6.0f} launches/s")
    print(f"  ncuflow extraction alone, 1 process                {extract_s:6.2f} s  {extract_s / floor_s:5.2f}x")
    print(f"  ncuflow export --jobs 1                            {one_s:6.2f} s  {one_s / floor_s:5.2f}x  (goal <= 1.3x)")
    print(f"    the same, heaps grown page by page               {plain_s:6.2f} s  {plain_s / floor_s:5.2f}x  "
          "(NCUFLOW_WORKER_PREFAULT=0)")
    print(f"  ncuflow export --jobs {jobs} (default)                  {many_s:6.2f} s  {many_s / floor_s:5.2f}x  (goal <= 0.8x)")
    print(f"  the floor split over {jobs} processes, balanced ahead  {split_s:6.2f} s  {split_s / floor_s:5.2f}x  "
          "(what this machine allows)")

    print(f"\nas the store grows (ratios to the floor at the same scale; peak memory of export --jobs {jobs}):")
    print(f"  scale reports launches | floor s | split s ratio | --jobs 1 s  ratio | --jobs {jobs} s  ratio  ms/report "
          "ms/launch  peak MiB | floor peak MiB")
    peaks: dict[int, int] = {}
    per_launch: dict[int, float] = {}
    per_report: dict[int, float] = {}
    ratios: dict[int, tuple[float, float, float]] = {}
    for scale in scales:
        repeated = list(reports) * scale
        if scale == 1:
            f_s, n, f_peak, j1_s, jn_s, sp_s = floor_s, launches, floor_peak, one_s, many_s, split_s
            export_peak = many_peak
        else:
            f_s, n, f_peak = best("floor", repeated, 0, args.repeats)
            sp_s, _, _ = best("floor_split", repeated, jobs, args.repeats)
            j1_s, _, _ = best("export", repeated, 1, args.repeats)
            jn_s, _, export_peak = best("export", repeated, jobs, args.repeats)
        peaks[scale] = export_peak
        per_launch[scale] = jn_s / n
        per_report[scale] = jn_s / len(repeated)
        ratios[scale] = (j1_s / f_s, jn_s / f_s, sp_s / f_s)
        print(f"  {scale:4d}x {len(repeated):7d} {n:8d} | {f_s:7.2f} | {sp_s:7.2f} {sp_s / f_s:4.2f}x | {j1_s:10.2f} {j1_s / f_s:5.2f}x | "
              f"{jn_s:10.2f} {jn_s / f_s:5.2f}x {jn_s / len(repeated) * 1e3:9.2f} {jn_s / n * 1e3:9.3f} "
              f"{export_peak / mib:9.0f} | {f_peak / mib:9.0f}")
    low, high = min(scales), max(scales)
    print(f"\npeak memory {high}x / {low}x (export --jobs {jobs}): {peaks[high] / peaks[low]:.2f}x (goal <= 1.3x)")
    print(f"cost per report and per launch {high}x / {low}x (export --jobs {jobs}): "
          f"{per_report[high] / per_report[low]:.2f}x and {per_launch[high] / per_launch[low]:.2f}x (goal: flat)")
    print(f"time / floor at {high}x: --jobs 1 {ratios[high][0]:.2f}x (goal <= 1.3x), "
          f"--jobs {jobs} {ratios[high][1]:.2f}x (goal <= 0.8x; the floor split ahead over {jobs} processes: "
          f"{ratios[high][2]:.2f}x)")


if __name__ == "__main__":
    main()
