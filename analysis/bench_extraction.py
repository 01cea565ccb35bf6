"""Export speed and memory of ncuflow with each reader against the ncu_report floor, side by side.

- floor: one process loads each report with ncu_report and reads only the raw values of
  the canonical fields' first-choice metrics, action by action: the least any reader
  built on ncu_report does;
- ncuflow `export` to parquet (alias chains, breakdown, NVIDIA's rule result, model,
  parquet), with ncuflow's own reader (``--reader ncuflow``, the default) and with
  ``--reader ncu_report``, each in one process (``--jobs 0``) and in two (ncuflow:
  ``--jobs 1``, the command's process and one worker, both reading; ncu_report: its default
  on two cores, two workers each reading one report at a time), and ncuflow with the default
  options (what ``ncuflow export`` does when not told: this process and one worker per
  other usable core, here the same as ``--jobs 1``).

Every sample runs in a fresh process whose modules are imported before the clock starts;
its whole process tree (workers and the forkserver included) is sampled from /proc every
20 ms for the peak resident memory (a peak shorter than that can be missed: the one-process
pass's own true peak, the kernel's VmHWM, is printed beside the goals). The corpus is read as
is (1x) and repeated, each repetition under its own name (``scaled_corpus``; default 1x, 4x,
5x, 10x). Times are the best of ``--repeats`` samples, taken in
turn (every pass once, then again), so that a load that comes and goes on a shared machine
falls on every pass alike; the peak memory is the largest seen.

Goals (issue 19), on two cores: export of the corpus x4 <= 0.3x the floor with the default
options, <= 0.45x in one process; the peak memory at 10x <= 1.2x that at 1x and <= 400 MiB.

    python analysis/bench_extraction.py [REPORT_DIR] [--repeats 3] [--scales 1,4,5,10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MIB = 2**20
# one pass at one scale: (seconds, launches, peak tree RSS bytes, the command process's true peak bytes)
Row = tuple[float, int, int, int]
# (label, reader, jobs): jobs "default" is what the command does when not told
EXPORTS = (
    ("ncuflow, default", "ncuflow", "default"),
    ("ncuflow, 1 process", "ncuflow", "0"),  # --jobs 0
    ("ncuflow, 2 processes", "ncuflow", "1"),  # --jobs 1: this process and one worker
    ("ncu_report, 1 process", "ncu_report", "0"),
    ("ncu_report, 2 processes", "ncu_report", "default"),  # the default: 2 workers, one report each
)


# ----------------------------------------------------------------------------- the passes (child side)


def floor_pass(reports: Sequence[Path]) -> int:
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


def export_pass(reports: Sequence[Path], reader: str, jobs: str) -> int:
    from ncuflow.output.export import export_reports
    from ncuflow.read.pool import resolve_jobs
    from ncuflow.read.readers import use_reader

    use_reader(reader)
    resolved = resolve_jobs(None if jobs == "default" else int(jobs), reports)  # as the CLI resolves --jobs
    with tempfile.TemporaryDirectory() as folder:
        return export_reports(reports, Path(folder) / "bench.parquet", jobs=resolved).launch_count


def child(name: str, list_file: str, reader: str, jobs: str) -> None:
    reports = [Path(line) for line in Path(list_file).read_text().splitlines() if line]
    from ncuflow.cli import bound_polars_memory

    bound_polars_memory()  # the process as the `ncuflow` command sets it up (before polars is imported)
    # Every side starts with its modules imported: what is timed is the reading and writing.
    import ncu_report  # noqa: F401

    import ncuflow.output.export
    import ncuflow.read.fileaction
    import ncuflow.read.schema  # noqa: F401

    start = time.perf_counter()
    launches = floor_pass(reports) if name == "floor" else export_pass(reports, reader, jobs)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "launches": launches, "hwm": _own_high_water_mark()}))


def _own_high_water_mark() -> int:
    """This process's true peak resident bytes (VmHWM: the kernel's count, no sampling)."""
    with open("/proc/self/status") as handle:
        kib = next(line.split()[1] for line in handle if line.startswith("VmHWM:"))
    return int(kib) * 1024


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


def sample(name: str, reports: Sequence[Path], reader: str = "", jobs: str = "") -> Row:
    """(seconds, launches, peak tree RSS bytes, the command process's own true peak bytes) of
    one pass in a fresh process."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write("\n".join(str(r) for r in reports))
    try:
        proc = subprocess.Popen([sys.executable, __file__, "--child", name, handle.name, reader or "-", jobs or "-"],
                                stdout=subprocess.PIPE, text=True)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(0.02)
        out = proc.stdout.read() if proc.stdout else ""
        if proc.returncode != 0:
            raise SystemExit(f"the {name} {reader} {jobs} pass failed (exit {proc.returncode})")
        result = json.loads(out.strip().splitlines()[-1])
        return result["seconds"], result["launches"], peak, result["hwm"]
    finally:
        os.unlink(handle.name)


def _load() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


def scaled_corpus(reports: Sequence[Path], scale: int, folder: Path) -> list[Path]:
    """The corpus ``scale`` times, each repetition under its own name (hard links, or copies
    across file systems): commands read a file named twice once, so a repeated list is no load."""
    paths = list(reports)
    for copy in range(1, scale):
        for index, report in enumerate(reports):
            target = folder / f"x{copy}" / f"{index:03d}-{report.name}"
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(report, target)
                except OSError:
                    shutil.copyfile(report, target)
            paths.append(target)
    return paths


def main(argv: list[str] | None = None) -> None:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--child"]:
        child(*args_in[1:5])
        return
    from ncuflow.read.pool import usable_cores
    from ncuflow.read.reportfile import find_reports

    default_corpus = os.environ.get("NCUFLOW_CORPUS", str(Path(__file__).resolve().parents[2] / "shared" / "ncu-reports"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report_dir", nargs="?", default=default_corpus)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scales", default="1,4,5,10")
    args = parser.parse_args(args_in)
    reports = find_reports([Path(args.report_dir)])
    scales = [int(s) for s in args.scales.split(",")]
    corpus_mib = sum(r.stat().st_size for r in reports) / MIB
    print(f"{len(reports)} reports ({corpus_mib:.0f} MiB), {usable_cores()} usable cores; best of {args.repeats}, "
          f"each sample a fresh process, peak = whole process tree RSS; {_load()} at the start")
    header = f"  {'':24s}" + "".join(f" | {f'{scale}x':>21s}" for scale in scales)
    print(f"\nseconds, ratio to the floor at the same scale, peak MiB\n{header}")
    # Taken in turn (every pass once, then again): a load that comes and goes on a shared
    # machine then falls on every pass alike; each pass's best sample is kept.
    passes = [("floor", "floor", "", ""), *(("export", label, reader, jobs) for label, reader, jobs in EXPORTS)]
    rows: dict[str, dict[int, Row]] = {label: {} for _, label, _, _ in passes}
    copies = Path(tempfile.mkdtemp(prefix="ncuflow-bench-"))
    try:
        _measure(passes, rows, scales, reports, copies, args.repeats)
    finally:
        shutil.rmtree(copies, ignore_errors=True)
    _print_rows(rows, scales)


def _measure(passes: list[tuple[str, str, str, str]], rows: dict[str, dict[int, Row]],
             scales: list[int], reports: Sequence[Path], copies: Path, repeats: int) -> None:
    for scale in scales:
        corpus = scaled_corpus(reports, scale, copies)
        samples: dict[str, list[Row]] = {label: [] for _, label, _, _ in passes}
        for _ in range(repeats):
            for name, label, reader, jobs in passes:
                samples[label].append(sample(name, corpus, reader, jobs))
        for label, taken in samples.items():
            rows[label][scale] = (min(t[0] for t in taken), taken[0][1], max(t[2] for t in taken),
                                  max(t[3] for t in taken))
            assert rows[label][scale][1] == rows["floor"][scale][1], (label, scale)


def _print_rows(rows: dict[str, dict[int, Row]], scales: list[int]) -> None:
    for label, by_scale in rows.items():
        cells = []
        for scale in scales:
            seconds, _, peak, _ = by_scale[scale]
            ratio = seconds / rows["floor"][scale][0]
            cells.append(f"{seconds:6.2f} s {ratio:4.2f}x {peak / MIB:5.0f}")
        print(f"  {label:24s}" + "".join(f" | {cell:>21s}" for cell in cells))
    _goals(rows, scales)
    print(f"\n{_load()} at the end")


def _goals(rows: dict[str, dict[int, Row]], scales: list[int]) -> None:
    low, high = min(scales), max(scales)
    print("\ngoals (issue 19):")
    if 4 in scales:
        floor = rows["floor"][4][0]
        print(f"  export x4, default options: {rows['ncuflow, default'][4][0] / floor:.2f}x the floor (goal <= 0.3x); "
              f"one process (--jobs 0): {rows['ncuflow, 1 process'][4][0] / floor:.2f}x (goal <= 0.45x)")
    for label in ("ncuflow, default", "ncuflow, 1 process", "ncuflow, 2 processes"):
        peaks = rows[label]
        print(f"  {label}: peak memory {high}x / {low}x {peaks[high][2] / peaks[low][2]:.2f}x (goal <= 1.2x), "
              f"{peaks[high][2] / MIB:.0f} MiB at {high}x (goal <= 400 MiB)")
    own = rows["ncuflow, 1 process"]
    print(f"  ncuflow, 1 process, the true peak (VmHWM, no sampling): {high}x / {low}x "
          f"{own[high][3] / own[low][3]:.2f}x ({own[low][3] / MIB:.0f} -> {own[high][3] / MIB:.0f} MiB)")


if __name__ == "__main__":
    main()
