"""Reading in worker processes: same results as one process, in input order; ncu_report one report per worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from ncuflow.cli import cli
from ncuflow.errors import ReportError
from ncuflow.output.export import export_reports
from ncuflow.read.jobs import resolve_jobs, workers_pay
from ncuflow.read.pool import default_jobs, map_reports, usable_cores
from ncuflow.read.readers import reading_with
from ncuflow.read.reportfile import find_reports
from ncuflow.read.runs import Source, Sources, load_paths, read_sources
from tests.scripts import analysis_script

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "profiles" / "reference" / "h200"


def read_launches_of(reports: list[Path], *, jobs: int | None) -> list[tuple[Path, tuple[object, ...]]]:
    """What classify reads: every report's launches, an unreadable one raising its ReportError."""
    found = Sources(tuple(Source(r) for r in reports))
    return [(source.report, launches or ()) for source, launches, _ in read_sources(found, jobs=jobs, strict=True)]



def pid_and_size(report: Path) -> tuple[int, int]:
    return os.getpid(), report.stat().st_size


def die(report: Path) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_usable_cores_follow_the_affinity() -> None:
    assert usable_cores() == len(os.sched_getaffinity(0))


def test_classify_json_is_identical_with_and_without_workers(corpus_dir: Path) -> None:
    runner = CliRunner()
    alone = runner.invoke(cli, ["classify", str(corpus_dir), "--json", "--jobs", "0"])
    pooled = runner.invoke(cli, ["classify", str(corpus_dir), "--json", "--jobs", "2"])
    assert alone.exit_code == 0 and pooled.exit_code == 0, pooled.output
    rows = json.loads(pooled.output)
    assert rows == json.loads(alone.output)
    reports = [str(r) for r in find_reports([corpus_dir])]
    assert list(dict.fromkeys(r["report"] for r in rows)) == reports  # input order


def test_export_is_identical_for_every_jobs(corpus_dir: Path, tmp_path: Path) -> None:
    reports = find_reports([corpus_dir])
    reference = export_reports(reports, tmp_path / "alone.parquet", jobs=None)
    assert reference.launch_count == 469
    results = {jobs: export_reports(reports, tmp_path / f"jobs{jobs}.parquet", metrics_long=True, jobs=jobs)
               for jobs in (1, 2)}
    for jobs, result in results.items():
        assert result.launch_count == reference.launch_count
        assert pl.read_parquet(tmp_path / f"jobs{jobs}.parquet").equals(pl.read_parquet(tmp_path / "alone.parquet"))
    assert results[1].metric_rows == results[2].metric_rows and (results[1].metric_rows or 0) > 100_000
    assert pl.read_parquet(tmp_path / "jobs1.metrics.parquet").equals(pl.read_parquet(tmp_path / "jobs2.metrics.parquet"))


def test_the_long_table_carries_each_reports_own_units(corpus_dir: Path, tmp_path: Path) -> None:
    """ncu_report returns, per process, the unit it first saw for a metric name: read after
    other reports, Alconno's breakdown metrics come out in "byte" instead of its own "%"."""
    target = corpus_dir / "Alconno__cuda_ai_cpp__profile_report.ncu-rep"
    before = find_reports([corpus_dir])[:2]
    for reports in ([target], [*before, target]):
        export_reports(reports, tmp_path / "x.parquet", metrics_long=True, jobs=1)
        frame = pl.read_parquet(tmp_path / "x.metrics.parquet").filter(
            (pl.col("report") == str(target))
            & (pl.col("name") == "breakdown:gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"))
        assert frame.height > 0 and set(frame["unit"]) == {"%"}


def test_a_store_loads_the_same_in_workers() -> None:
    alone = load_paths([REFERENCE], jobs=None)
    pooled = load_paths([REFERENCE], jobs=2)
    assert len(alone.runs) == 49
    assert pooled == alone


def test_workers_read_report_after_report_and_results_keep_input_order(corpus_dir: Path) -> None:
    """ncuflow's reader frees what it parses: a pool's workers each read many reports, and
    this process reads too (from the start: the workers take a while to start)."""
    reports = find_reports([corpus_dir]) * 3
    results = list(map_reports(timed_pid, reports, jobs=2))
    assert [size for _, size, _ in results] == [r.stat().st_size for r in reports]
    by_pid: dict[int, int] = {}
    for pid, _, _ in results:
        by_pid[pid] = by_pid.get(pid, 0) + 1
    assert results[0][0] == os.getpid()  # the first report: before any worker is up
    assert len(by_pid) == 3 and all(count > 1 for count in by_pid.values()), by_pid


def timed_pid(report: Path) -> tuple[int, int, float]:
    time.sleep(0.01)  # every reader gets its share, even on a busy machine
    return os.getpid(), report.stat().st_size, time.monotonic()


def test_fresh_workers_read_one_report_each(corpus_dir: Path) -> None:
    reports = find_reports([corpus_dir])[:5]
    results = list(map_reports(pid_and_size, reports, jobs=2, fresh_workers=True))
    assert [size for _, size in results] == [r.stat().st_size for r in reports]
    assert len({pid for pid, _ in results}) == len(reports)


def test_reading_through_ncu_report_gives_each_report_a_worker_of_its_own(corpus_dir: Path) -> None:
    """ncu_report never frees a parsed report and keeps units per process: one report per worker,
    in every pool, and by default in workers (the usable cores), whatever the reports' size."""
    reports = find_reports([corpus_dir])[:4]
    with reading_with("ncu_report"):
        assert default_jobs(reports[:2]) == usable_cores()
        pids = [pid for pid, _ in map_reports(pid_and_size, reports, jobs=2)]
        launches = [x for _, batch in read_launches_of(reports, jobs=2) for x in batch]
    assert len(set(pids)) == len(reports)
    assert launches == [x for _, batch in read_launches_of(reports, jobs=None) for x in batch]


def test_the_default_starts_workers_only_where_the_reports_are_worth_them(corpus_dir: Path, tmp_path: Path) -> None:
    """Workers are decided by the reports' bytes and launches (ncuflow.read.jobs): none for one
    report or the corpus once (48 MB, 469 launches: this process alone is sooner), one per other
    core for the corpus x4 under new names; reading through ncu_report always uses them."""
    reports = find_reports([corpus_dir])
    copies = analysis_script("bench_extraction").scaled_corpus(reports, 4, tmp_path / "copies")
    assert default_jobs(reports[:1]) is None
    assert default_jobs(reports) is None
    assert default_jobs(copies) == (usable_cores() - 1 or None)
    assert default_jobs(reports[:1], through_ncu_report=True) == usable_cores()  # the long table's units
    assert resolve_jobs(0, copies) is None and resolve_jobs(3, reports[:1]) == 3  # --jobs is the user's


def test_the_decision_looks_at_reports_only_until_it_is_made(corpus_dir: Path) -> None:
    """A large store costs a few reports' headers, not all of them: the reports are looked at one
    by one until workers pay (here the corpus x4 decides before the list runs out)."""
    reports = find_reports([corpus_dir])
    looked: list[Path] = []

    def reports_x100() -> Iterator[Path]:
        for _ in range(100):
            for report in reports:
                looked.append(report)
                yield report

    assert workers_pay(reports_x100(), 1)
    assert len(looked) < 4 * len(reports)
    assert not workers_pay(reports, 0) and not workers_pay(reports[:1], 1)


def test_an_unreadable_report_is_named_as_in_one_process(corpus_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "garbage.ncu-rep"
    bad.write_bytes(b"this is not a report" * 10)
    for reports in ([*find_reports([corpus_dir])[:3], bad], [bad, *find_reports([corpus_dir])[:3]]):
        with pytest.raises(ReportError) as alone:
            list(read_launches_of(reports, jobs=None))
        with pytest.raises(ReportError) as pooled:
            list(read_launches_of(reports, jobs=2))
        assert str(pooled.value) == str(alone.value) and str(bad) in str(pooled.value)


def test_a_worker_that_dies_is_an_error_naming_its_report(corpus_dir: Path) -> None:
    reports = find_reports([corpus_dir])[:2]
    with pytest.raises(ReportError, match="killed by signal 9") as caught:  # fresh: this process reads none
        list(map_reports(die, reports, jobs=1, fresh_workers=True))
    assert str(reports[0]) in str(caught.value)


def _tree(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, stack = set(), [pid]
    while stack:
        current = stack.pop()
        found.add(current)
        stack.extend(children.get(current, []))
    return found


def test_ctrl_c_stops_the_pool_and_its_workers(corpus_dir: Path, tmp_path: Path) -> None:
    output = tmp_path / "out.parquet"
    reports = [str(r) for r in find_reports([corpus_dir])] * 20
    proc = subprocess.Popen([sys.executable, "-m", "ncuflow", "export", *reports, "-o", str(output), "--jobs", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while time.monotonic() < deadline and len(workers) < 3:  # the forkserver and two workers
        workers = _tree(proc.pid) - {proc.pid}
        time.sleep(0.02)
    assert len(workers) >= 3, "the pool never started"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, out
    assert "Traceback" not in out
    time.sleep(0.5)
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()
                and "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]]
    assert not output.exists() and not list(tmp_path.glob(".ncuflow-tmp-*"))


MAIN_SCRIPT = '''
import os
import sys
import time


def pid(report):
    time.sleep(0.02)  # slow enough that the workers start before this process has read everything
    return os.getpid()


if __name__ == "__main__":
    from ncuflow.read.pool import map_reports

    print(os.getpid(), " ".join(str(p) for p in map_reports(pid, sys.argv[1:] * 20, jobs=2)))
'''


def test_a_function_defined_in_the_main_script_reaches_the_workers(corpus_dir: Path, tmp_path: Path) -> None:
    script = tmp_path / "main_script.py"
    script.write_text(MAIN_SCRIPT)
    reports = [str(r) for r in find_reports([corpus_dir])[:6]]
    done = subprocess.run([sys.executable, str(script), *reports], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    script_pid, *pids = done.stdout.split()
    assert len(pids) == 20 * len(reports) and set(pids) - {script_pid}  # workers ran the script's function


def test_workers_are_gone_after_the_last_result(corpus_dir: Path) -> None:
    reports = find_reports([corpus_dir]) * 3
    pids = {pid for pid, _, _ in map_reports(timed_pid, reports, jobs=2)} - {os.getpid()}
    assert pids
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()
                and "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]]
