"""Export speed, start-up and memory of ncuflow against the ncu_report floor, side by side in one run.

Every sample is a whole process, timed from its start to its exit, as a user meets it: the
interpreter's start, the imports, the reading, the writing.

- floor: a plain Python process that imports ncu_report, loads each report and reads only the
  raw values of the canonical fields' first-choice metrics, action by action: the least any
  reader built on ncu_report does;
- ``ncuflow export`` to parquet (alias chains, breakdown, NVIDIA's rule result, model,
  parquet), the command itself, with ncuflow's own reader (``--reader ncuflow``, the default)
  and with ``--reader ncu_report``, each in one process (``--jobs 0``) and in two (ncuflow:
  ``--jobs 1``, the command's process and one worker, both reading; ncu_report: its default on
  two cores, two workers each reading one report at a time), and ncuflow with the default
  options (what ``ncuflow export`` does when not told: it reads in its own process, and adds
  workers where the reports' bytes and launches are worth their start-up,
  ``ncuflow.read.jobs``).

Four tables:

1. the corpus as is (1x) and repeated, each repetition under its own name (``scaled_corpus``;
   default 1x, 4x, 5x, 10x), with the peak memory of each whole process tree (sampled from
   /proc every 20 ms; the one-process pass's true peak, the kernel's high-water mark of the
   process, is printed beside the goals);
2. full-set reports: the corpus's reports collected with ncu's full section set (their first
   launch holds the counters only the full set collects together: ``FULL_SET_MARKERS``),
   repeated under distinct names to about ``--full-set-mb`` MB;
3. one small report (start-up): the floor, ``ncuflow classify`` and ``ncuflow export`` of the
   corpus's smallest report (``--small`` names another);
4. per launch: one process with its modules imported (``export`` in the process, no workers),
   on the corpus's launches that carry about 300 metrics, on those that carry about 2,000, and
   on the latter rewritten to carry 300 (every metric ncuflow reads of them kept: the same
   launches, the same fields filled; ``analysis/report_edit.py``), each repeated to about
   ``--per-launch-launches`` launches: seconds per launch of each, and the metrics read a launch.

Times are the best of ``--repeats`` samples, taken in turn (every pass once, then again), so
that a load that comes and goes on a shared machine falls on every pass alike; the peak memory
is the largest seen.

Goals (issues 19 and 33), on two cores: export of the corpus x4 <= 0.3x the floor with the
default options, <= 0.45x in one process; the same on full-set reports of ~150 MB; the peak
memory at 10x <= 1.2x that at 1x and <= 400 MiB; ``classify`` of one small report <= 2x the
floor's whole process; the per-launch cost of 2,000-metric launches within 1.5x that of
300-metric ones (the same launches: what carrying the metrics costs; launches of other reports
differ in what ncuflow reads of them too, and are shown beside).

    python analysis/bench_extraction.py [REPORT_DIR] [--repeats 3] [--scales 1,4,5,10]
                                        [--full-set-mb 150] [--small REPORT] [--per-launch-launches 300]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MIB = 2**20
MB = 10**6


@dataclass(frozen=True)
class Row:
    """One pass at one scale: its seconds, the launches it read, the peak RSS of its whole process
    tree (sampled) and the process's own true peak (its high-water mark, from the kernel)."""

    seconds: float
    launches: int
    peak: int
    own_peak: int


# (label, reader, jobs): jobs "default" is what the command does when not told
EXPORTS = (
    ("ncuflow, default", "ncuflow", "default"),
    ("ncuflow, 1 process", "ncuflow", "0"),  # --jobs 0
    ("ncuflow, 2 processes", "ncuflow", "1"),  # --jobs 1: this process and one worker
    ("ncu_report, 1 process", "ncu_report", "0"),
    ("ncu_report, 2 processes", "ncu_report", "default"),  # the default: 2 workers, one report each
)
FULL_SET_EXPORTS = EXPORTS[:3]

# Counters only ncu's full section set collects together, one per section: Warp State
# Statistics (stall reasons), the Roofline Chart (FP32 rates), Memory Workload Analysis Tables
# (shared-memory bank conflicts). A report whose first launch holds all three is a full set.
FULL_SET_MARKERS = (
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
)
# Metrics a launch carries, for the per-launch table: (label, at least, at most)
METRIC_BANDS = (("~300 metrics a launch", 200, 400), ("~2,000 metrics a launch", 1_800, 2_600))
# The ~2,000-metric launches again, each rewritten to carry this many metrics (those ncuflow reads
# of it among them): what carrying more metrics costs, the fields filled alike.
PRUNED_METRICS = 300
PRUNED_BAND = f"the same, {PRUNED_METRICS} kept"

# The floor: a user's plain script over ncu_report (argv: the report list file, the metric names file).
# Its walk over ranges and actions is written out, not nvidia_actions': the floor imports nothing of
# ncuflow or of this repository, so its time is ncu_report's alone.
FLOOR = """
import sys
import ncu_report
names = open(sys.argv[2]).read().split()
launches = 0
for path in open(sys.argv[1]).read().splitlines():
    context = ncu_report.load_report(path)
    for range_index in range(context.num_ranges()):
        report_range = context.range_by_idx(range_index)
        for action_index in range(report_range.num_actions()):
            action = report_range.action_by_idx(action_index)
            for name in names:
                metric = action.metric_by_name(name)
                if metric is not None and metric.has_value():
                    metric.value()
            launches += 1
print(launches)
"""
_WROTE = re.compile(r"wrote (\d+) launch")


# ----------------------------------------------------------------------------- the per-launch pass (child side)


def per_launch_child(list_file: str) -> None:
    """Export the listed reports in this process, its modules imported before the clock starts;
    then each distinct report alone as an export reads it (``export_one_report``: read, model,
    rows; the best of 5), for the split of the cost into a report's and a launch's."""
    from ncuflow.cli import bound_polars_memory

    bound_polars_memory()  # the process as the `ncuflow` command sets it up (before polars is imported)
    from ncuflow.output.export import export_reports
    from ncuflow.output.launch_rows import export_one_report

    reports = [Path(line) for line in Path(list_file).read_text().splitlines() if line]
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        launches = export_reports(reports, Path(folder) / "bench.parquet", jobs=None).launch_count
        seconds = time.perf_counter() - start
        alone = []
        for report in {os.stat(r).st_ino: r for r in reports}.values():  # each content once
            taken = []
            for _ in range(5):
                begun = time.perf_counter()
                rows = export_one_report(report, None, Path(folder), 0).rows
                taken.append(time.perf_counter() - begun)
            alone.append((len(rows.get("report", ())), min(taken)))
    print(json.dumps({"seconds": seconds, "launches": launches, "alone": alone}))


def split_cost(alone: Sequence[Sequence[float]]) -> tuple[float, float] | None:
    """(seconds a report, seconds a launch): the least-squares line through each report's
    (launches, seconds); None with fewer than three launch counts (two reports are no line)."""
    points = [(float(n), float(t)) for n, t in alone]
    count = len(points)
    if len({n for n, _ in points}) < 3:
        return None
    mean_n = sum(n for n, _ in points) / count
    mean_t = sum(t for _, t in points) / count
    spread = sum((n - mean_n) ** 2 for n, _ in points)
    slope = sum((n - mean_n) * (t - mean_t) for n, t in points) / spread
    return mean_t - slope * mean_n, slope


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


def _own_peak(pid: int) -> int:
    """A live process's high-water mark of resident memory (VmHWM), 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            return next((int(line.split()[1]) * 1024 for line in handle if line.startswith("VmHWM:")), 0)
    except OSError:
        return 0


def run_whole(argv: Sequence[str], launches_of: str) -> Row:
    """One whole process: wall seconds from its start to its exit, its launches (from what it
    printed: ``launches_of`` is "number" or "wrote"), its tree's peak RSS and its own peak."""
    start = time.perf_counter()
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = own = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        own = max(own, _own_peak(proc.pid))
        time.sleep(0.02)
    seconds = time.perf_counter() - start
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} ... failed (exit {proc.returncode}):\n{err[-2000:]}")
    if launches_of == "number":
        launches = int(out.split()[-1])
    elif launches_of == "wrote":
        found = _WROTE.search(out)
        launches = int(found.group(1)) if found else -1
    else:
        launches = -1
    return Row(seconds, launches, peak, own)


def ncuflow_command() -> list[str]:
    """The `ncuflow` console script beside this interpreter (what a user runs), else ``-m ncuflow``."""
    script = Path(sys.executable).with_name("ncuflow")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "ncuflow"]


@dataclass(frozen=True)
class Pass:
    label: str
    argv: tuple[str, ...]
    launches_of: str = "wrote"

    def sample(self) -> Row:
        return run_whole(self.argv, self.launches_of)


def _list_file(folder: Path, name: str, reports: Sequence[Path]) -> Path:
    path = folder / f"{name}.txt"
    path.write_text("\n".join(str(r) for r in reports) + "\n")
    return path


def floor_pass(reports: Sequence[Path], work: Path, name: str) -> Pass:
    from ncuflow.read.metrics import FIELDS

    names = work / "floor-metrics.txt"
    if not names.exists():
        names.write_text("\n".join(dict.fromkeys(m for f in FIELDS if f.sources for m in f.sources[0].metrics)) + "\n")
    return Pass("floor", (sys.executable, "-c", FLOOR, str(_list_file(work, name, reports)), str(names)), "number")


def export_pass(label: str, reports: Sequence[Path], reader: str, jobs: str, output: Path) -> Pass:
    argv = [*ncuflow_command(), "export", *map(str, reports), "-o", str(output), "--reader", reader]
    return Pass(label, tuple(argv + ([] if jobs == "default" else ["--jobs", jobs])))


def per_launch_pass(label: str, reports: Sequence[Path], work: Path, name: str) -> Pass:
    return Pass(label, (sys.executable, __file__, "--per-launch", str(_list_file(work, name, reports))), "json")


def measure(passes: Sequence[Pass], repeats: int) -> dict[str, Row]:
    """Each pass's best time over ``repeats`` samples taken in turn, and its largest peaks."""
    samples: dict[str, list[Row]] = {p.label: [] for p in passes}
    for _ in range(repeats):
        for one in passes:
            samples[one.label].append(one.sample())
    return {label: Row(min(r.seconds for r in taken), taken[0].launches, max(r.peak for r in taken),
                       max(r.own_peak for r in taken)) for label, taken in samples.items()}


def measure_per_launch(passes: Sequence[Pass], repeats: int) -> dict[str, dict[str, Any]]:
    """The best run (by its seconds) of each in-process pass (it prints its own timing as JSON)."""
    best: dict[str, dict[str, Any]] = {}
    for _ in range(repeats):
        for one in passes:
            out = subprocess.run(one.argv, capture_output=True, text=True, check=True).stdout
            result = json.loads(out.strip().splitlines()[-1])
            if one.label not in best or result["seconds"] < best[one.label]["seconds"]:
                best[one.label] = result
    return best


# ----------------------------------------------------------------------------- corpora


def _link(report: Path, target: Path) -> None:
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(report, target)
        except OSError:
            shutil.copyfile(report, target)


def scaled_corpus(reports: Sequence[Path], scale: int, folder: Path) -> list[Path]:
    """The corpus ``scale`` times, each repetition under its own name (hard links, or copies
    across file systems): commands read a file named twice once, so a repeated list is no load."""
    paths = list(reports)
    for copy in range(1, scale):
        for index, report in enumerate(reports):
            target = folder / f"x{copy}" / f"{index:03d}-{report.name}"
            _link(report, target)
            paths.append(target)
    return paths


def repeated_to(reports: Sequence[Path], total: int, folder: Path, unit: str = "bytes") -> list[Path]:
    """``reports`` in turn, each repetition under its own name, until their bytes (or their
    launches, ``unit="launches"``) reach ``total``."""
    from ncuflow.read.extract import count_actions

    sizes = {r: r.stat().st_size if unit == "bytes" else count_actions(r) for r in reports}
    paths: list[Path] = []
    reached, turn = 0, 0
    while reports and reached < total:
        report = reports[turn % len(reports)]
        target = folder / f"{turn:04d}-{report.name}"
        _link(report, target)
        paths.append(target)
        reached += sizes[report]
        turn += 1
    return paths


# Each report's metric list and the metrics ncuflow reads of it are asked for by several tables
# (the full-set choice, the bands, the pruned copies, the metrics read a band): worked out once.
@functools.cache
def _first_action_names(report: Path) -> tuple[str, ...]:
    from ncuflow.read.extract import iter_report

    for _range, _action, action in iter_report(report):
        return tuple(action.metric_names())
    return ()


@functools.cache
def metrics_read(report: Path) -> frozenset[str]:
    """The metrics ncuflow reads of the report's launches (its fields' chains, the breakdown, the
    device): the names its read plans resolved, and NVIDIA's per-opcode table (the load kinds no
    counter gives, ``ncuflow.read.opcodes``)."""
    from ncuflow.read.extract import build_launch, iter_report, read_plan
    from ncuflow.read.opcodes import OPCODE_TABLE

    read: set[str] = {OPCODE_TABLE}
    for range_index, action_index, action in iter_report(report):
        build_launch(action, report=str(report), range_index=range_index, action_index=action_index,
                     ncu_version=None)
        read |= set(read_plan(action).names.values())
    return frozenset(read)


def pruned_to(reports: Sequence[Path], kept: int, folder: Path) -> list[Path]:
    """Each report rewritten with ``kept`` metrics a launch: every metric ncuflow reads of it
    (``metrics_read``), then others in name order: the same launches, the same fields filled,
    fewer metrics carried (``analysis/report_edit.drop_metrics``)."""
    from report_edit import drop_metrics

    folder.mkdir(parents=True, exist_ok=True)
    pruned = []
    for index, report in enumerate(reports):
        keep = set(metrics_read(report))
        for name in _first_action_names(report):
            if len(keep) >= kept:
                break
            keep.add(name)
        target = folder / f"{index:03d}-pruned-{report.name}"
        drop_metrics(report, target, lambda name, keep=keep: name not in keep)  # type: ignore[misc]
        pruned.append(target)
    return pruned


def full_set_reports(reports: Sequence[Path]) -> list[Path]:
    """The reports whose first launch holds every ``FULL_SET_MARKERS`` counter."""
    return [r for r in reports if set(FULL_SET_MARKERS) <= set(_first_action_names(r))]


def reports_by_metrics(reports: Sequence[Path], low: int, high: int) -> list[Path]:
    """The reports whose first launch carries between ``low`` and ``high`` metrics."""
    return [r for r in reports if low <= len(_first_action_names(r)) <= high]


def smallest(reports: Sequence[Path]) -> Path:
    return min(reports, key=lambda r: (r.stat().st_size, r.name))


# ----------------------------------------------------------------------------- printing


def _load() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


def _mib(paths: Sequence[Path]) -> float:
    return sum(p.stat().st_size for p in paths) / MIB


def _cell(row: Row, floor: Row, memory: bool = True) -> str:
    text = f"{row.seconds:6.2f} s {row.seconds / floor.seconds:4.2f}x"
    return text + (f" {row.peak / MIB:5.0f}" if memory else "")


def print_table(title: str, columns: Sequence[str], rows: dict[str, dict[str, Row]], memory: bool = True) -> None:
    width = 21 if memory else 15
    print(f"\n{title}\n  {'':24s}" + "".join(f" | {c:>{width}s}" for c in columns))
    for label, by_column in rows.items():
        cells = [_cell(by_column[c], rows["floor"][c], memory) for c in columns]
        print(f"  {label:24s}" + "".join(f" | {cell:>{width}s}" for cell in cells))
    if all(c in DEFAULT_PROCESSES for c in columns) and "ncuflow, default" in rows:
        print("  the default options read with: " + ", ".join(
            f"{c} {DEFAULT_PROCESSES[c]} process{'es' if DEFAULT_PROCESSES[c] > 1 else ''}" for c in columns))


# ----------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class Options:
    reports: tuple[Path, ...]
    repeats: int
    scales: tuple[int, ...]
    full_set_mb: float
    small: Path
    per_launch_launches: int


def default_processes(corpus: Sequence[Path]) -> int:
    """The processes ``ncuflow export`` reads these reports with when not told (this one and its
    workers, as ``ncuflow.read.jobs`` decides it from their bytes and launches)."""
    from ncuflow.read.jobs import resolve_jobs

    return 1 + (resolve_jobs(None, corpus) or 0)


# processes the default options read each table's column with (filled as the tables are measured)
DEFAULT_PROCESSES: dict[str, int] = {}


def scaling_table(options: Options, work: Path) -> dict[str, dict[str, Row]]:
    rows: dict[str, dict[str, Row]] = {"floor": {}, **{label: {} for label, _, _ in EXPORTS}}
    for scale in options.scales:
        corpus = scaled_corpus(options.reports, scale, work / "scaled")
        DEFAULT_PROCESSES[f"{scale}x"] = default_processes(corpus)
        output = work / f"scaled-{scale}.parquet"
        passes = [floor_pass(corpus, work, f"scaled-{scale}"),
                  *(export_pass(label, corpus, reader, jobs, output) for label, reader, jobs in EXPORTS)]
        for label, row in measure(passes, options.repeats).items():
            rows[label][f"{scale}x"] = row
            assert row.launches == rows["floor"][f"{scale}x"].launches, (label, scale, row.launches)
    return rows


def full_set_table(options: Options, work: Path) -> tuple[dict[str, dict[str, Row]], list[Path], list[Path]]:
    chosen = full_set_reports(options.reports)
    corpus = repeated_to(chosen, int(options.full_set_mb * MB), work / "full-set")
    DEFAULT_PROCESSES["full set"] = default_processes(corpus)
    output = work / "full-set.parquet"
    passes = [floor_pass(corpus, work, "full-set"),
              *(export_pass(label, corpus, reader, jobs, output) for label, reader, jobs in FULL_SET_EXPORTS)]
    measured = measure(passes, options.repeats) if corpus else {}
    for label, row in measured.items():
        assert row.launches == measured["floor"].launches, (label, row.launches)
    return {label: {"full set": row} for label, row in measured.items()}, chosen, corpus


def start_up_table(options: Options, work: Path) -> dict[str, dict[str, Row]]:
    small = [options.small]
    command = ncuflow_command()
    passes = [floor_pass(small, work, "small"),
              Pass("ncuflow classify", (*command, "classify", str(options.small)), "none"),
              Pass("ncuflow export", (*command, "export", str(options.small), "-o", str(work / "small.parquet")))]
    return {label: {"one report": row} for label, row in measure(passes, options.repeats).items()}


@dataclass(frozen=True)
class Band:
    """One metric band's per-launch cost: its reports, the export's seconds a launch over them
    repeated, and the split of a report's own export into a report's and a launch's share."""

    label: str
    reports: int
    launches: int
    per_launch: float
    split: tuple[float, float] | None
    read: float  # metrics ncuflow reads of a launch (its fields' sources, breakdown, device), the mean


def per_launch_table(options: Options, work: Path) -> list[Band]:
    passes, chosen = [], {}
    for label, low, high in METRIC_BANDS:
        chosen[label] = reports_by_metrics(options.reports, low, high)
        if chosen[label]:
            corpus = repeated_to(chosen[label], options.per_launch_launches, work / f"band-{low}", unit="launches")
            passes.append(per_launch_pass(label, corpus, work, f"band-{low}"))
    full = chosen.get(METRIC_BANDS[-1][0])
    if full:
        chosen[PRUNED_BAND] = pruned_to(full, PRUNED_METRICS, work / "pruned")
        corpus = repeated_to(chosen[PRUNED_BAND], options.per_launch_launches, work / "band-pruned", unit="launches")
        passes.append(per_launch_pass(PRUNED_BAND, corpus, work, "band-pruned"))
    best = measure_per_launch(passes, options.repeats)
    labels = [label for label, _, _ in METRIC_BANDS] + [PRUNED_BAND]
    return [Band(label, len(chosen[label]), best[label]["launches"], best[label]["seconds"] / best[label]["launches"],
                 split_cost(best[label]["alone"]), _mean_read(chosen[label])) for label in labels if label in best]


def _mean_read(reports: Sequence[Path]) -> float:
    """Metrics ncuflow reads of a launch, the mean over the reports (their launches alike)."""
    return sum(len(metrics_read(r)) for r in reports) / len(reports)


BENCH_MARK = "ncuflow-bench-"


def compile_bytecode() -> None:
    """ncuflow's modules compiled to bytecode first, as an install leaves them (and the floor's
    ncu_report wheel has them): an editable install under PYTHONDONTWRITEBYTECODE would compile
    ~45 modules (~50 ms) in every sample of ncuflow and none of the floor's."""
    import compileall

    import ncuflow

    compileall.compile_dir(Path(ncuflow.__file__).parent, quiet=1)


def remove_dead_benches(folder: Path) -> list[Path]:
    """Remove the work folders that benches killed before their clean-up (kill -9) left in
    ``folder``: each is named after its process, removed once that process is gone."""
    from ncuflow.files import pid_alive

    removed = []
    for child in folder.glob(f"{BENCH_MARK}*"):
        pid = child.name[len(BENCH_MARK):].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)) and child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    return removed


def main(argv: list[str] | None = None) -> None:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--per-launch"]:
        per_launch_child(args_in[1])
        return
    from ncuflow.read.jobs import usable_cores
    from ncuflow.read.reportfile import find_reports

    default_corpus = os.environ.get("NCUFLOW_CORPUS", str(Path(__file__).resolve().parents[2] / "shared" / "ncu-reports"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report_dir", nargs="?", default=default_corpus)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scales", default="1,4,5,10")
    parser.add_argument("--full-set-mb", type=float, default=150.0)
    parser.add_argument("--small", type=Path, default=None, help="the one report of the start-up table")
    parser.add_argument("--per-launch-launches", type=int, default=300)
    args = parser.parse_args(args_in)
    reports = tuple(find_reports([Path(args.report_dir)]))
    options = Options(reports, args.repeats, tuple(int(s) for s in args.scales.split(",") if s),
                      args.full_set_mb, args.small or smallest(reports), args.per_launch_launches)
    print(f"{len(reports)} reports ({_mib(reports):.0f} MiB), {usable_cores()} usable cores; best of {args.repeats}, "
          f"each sample a whole process from its start to its exit (ncuflow's bytecode compiled first, as an install "
          f"leaves it), peak = whole process tree RSS; "
          f"{_load()} at the start")
    compile_bytecode()
    work = Path(tempfile.mkdtemp(prefix=f"{BENCH_MARK}{os.getpid()}-"))
    remove_dead_benches(work.parent)
    try:
        run(options, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{_load()} at the end")


def run(options: Options, work: Path) -> None:
    scaled = scaling_table(options, work) if options.scales else {}
    if scaled:
        print_table("export of the corpus, seconds, ratio to the floor at the same scale, peak MiB",
                    [f"{s}x" for s in options.scales], scaled)
    full, chosen, corpus = full_set_table(options, work) if options.full_set_mb > 0 else ({}, [], [])
    if full:
        print_table(f"export of full-set reports: the corpus's {len(chosen)} full-set reports ({_mib(chosen):.0f} MiB) "
                    f"repeated to {len(corpus)} reports, {sum(p.stat().st_size for p in corpus) / MB:.0f} MB, "
                    f"{full['floor']['full set'].launches} launches", ["full set"], full)
    start_up = start_up_table(options, work)
    print_table(f"one small report (start-up): {options.small.name} ({options.small.stat().st_size / 1024:.0f} KiB, "
                f"{start_up['floor']['one report'].launches} launches)", ["one report"], start_up, memory=False)
    bands = per_launch_table(options, work)
    print("\nper launch, one process, its modules imported (export in the process, no workers); split: each "
          "report alone\n(read, model, rows), the least-squares line through its launches and seconds")
    for band in bands:
        split = (f"; split: {band.split[0] * 1e3:.2f} ms a report + {band.split[1] * 1e3:.2f} ms a launch"
                 if band.split else "")
        print(f"  {band.label:24s} | {band.per_launch * 1e3:6.2f} ms a launch ({band.launches} launches, "
              f"{band.reports} reports repeated; {band.read:.0f} metrics read a launch){split}")
    goals(options, scaled, full, start_up, bands)


def goals(options: Options, scaled: dict[str, dict[str, Row]], full: dict[str, dict[str, Row]],
          start_up: dict[str, dict[str, Row]], bands: list[Band]) -> None:
    print("\ngoals (issues 19 and 33):")
    for name, table, column in (("the corpus x4", scaled, "4x"), ("full-set reports", full, "full set")):
        if table and column in table["floor"]:
            floor = table["floor"][column].seconds
            print(f"  export of {name}, default options: {table['ncuflow, default'][column].seconds / floor:.2f}x the "
                  f"floor (goal <= 0.3x); one process (--jobs 0): "
                  f"{table['ncuflow, 1 process'][column].seconds / floor:.2f}x (goal <= 0.45x)")
    if scaled:
        low, high = f"{min(options.scales)}x", f"{max(options.scales)}x"
        for label in ("ncuflow, 1 process", "ncuflow, 2 processes", "ncuflow, default"):
            peaks = scaled[label]
            # The default reads with as many processes as the reports are worth: its peak at the high
            # scale is compared with the low scale's peak of that many processes.
            same = {1: "ncuflow, 1 process", 2: "ncuflow, 2 processes"}.get(DEFAULT_PROCESSES.get(high, 0), label)
            base = scaled[same if label == "ncuflow, default" else label][low]
            print(f"  {label}: peak memory {high} / {low} {peaks[high].peak / base.peak:.2f}x (goal <= 1.2x"
                  + (f"; against {same} at {low}" if label == "ncuflow, default" else "")
                  + f"), {peaks[high].peak / MIB:.0f} MiB at {high} (goal <= 400 MiB)")
        own = scaled["ncuflow, 1 process"]
        print(f"  ncuflow, 1 process, its own true peak (VmHWM): {high} / {low} "
              f"{own[high].own_peak / own[low].own_peak:.2f}x ({own[low].own_peak / MIB:.0f} -> "
              f"{own[high].own_peak / MIB:.0f} MiB)")
    floor = start_up["floor"]["one report"].seconds
    print(f"  classify of one small report: {start_up['ncuflow classify']['one report'].seconds / floor:.2f}x the "
          f"floor's whole process (goal <= 2x); export: {start_up['ncuflow export']['one report'].seconds / floor:.2f}x")
    by_label = {band.label: band for band in bands}
    full, pruned = by_label.get(METRIC_BANDS[-1][0]), by_label.get(PRUNED_BAND)
    if full and pruned:
        print(f"  per launch, the same launches carrying ~2,000 / {PRUNED_METRICS} metrics (the same "
              f"{full.read:.0f} read): {full.per_launch / pruned.per_launch:.2f}x (goal <= 1.5x)")
    low = by_label.get(METRIC_BANDS[0][0])
    if full and low:
        print(f"  per launch, ~2,000-metric launches / ~300-metric launches of other reports: "
              f"{full.per_launch / low.per_launch:.2f}x (not the same work: {full.read:.0f} metrics read a "
              f"launch against {low.read:.0f})")


if __name__ == "__main__":
    main()
