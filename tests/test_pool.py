"""Reading in worker processes: same results as one process, in input order, bounded per worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from ncuflow.cli import cli
from ncuflow.errors import ReportError
from ncuflow.output.export import export_reports
from ncuflow.read import pool
from ncuflow.read.extract import read_launches
from ncuflow.read.pool import RETIRE_BYTES_ENV, map_reports, usable_cores
from ncuflow.read.reportfile import find_reports
from ncuflow.read.runs import Sources, load_paths, read_sources

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "profiles" / "reference" / "h200"


def pid_and_size(report: Path) -> tuple[int, int]:
    return os.getpid(), report.stat().st_size


def die(report: Path) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_usable_cores_follow_the_affinity() -> None:
    assert usable_cores() == len(os.sched_getaffinity(0))


def test_classify_json_is_identical_with_and_without_workers(corpus_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RETIRE_BYTES_ENV, str(4 * 2**20))  # several workers retire on the way
    runner = CliRunner()
    alone = runner.invoke(cli, ["classify", str(corpus_dir), "--json", "--jobs", "0"])
    pooled = runner.invoke(cli, ["classify", str(corpus_dir), "--json", "--jobs", "2"])
    assert alone.exit_code == 0 and pooled.exit_code == 0, pooled.output
    rows = json.loads(pooled.output)
    assert rows == json.loads(alone.output)
    reports = [str(r) for r in find_reports([corpus_dir])]
    assert list(dict.fromkeys(r["report"] for r in rows)) == reports  # input order


def test_export_is_identical_for_every_jobs(corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reports = find_reports([corpus_dir])
    reference = export_reports(reports, tmp_path / "alone.parquet", jobs=None)
    assert reference.launch_count == 469
    monkeypatch.setenv(RETIRE_BYTES_ENV, str(4 * 2**20))  # workers retire on the way
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


def test_workers_retire_after_their_budget_and_results_keep_input_order(corpus_dir: Path) -> None:
    reports = find_reports([corpus_dir])
    budget = 8 * 2**20
    results = list(map_reports(pid_and_size, reports, jobs=2, retire_bytes=budget))
    assert [size for _, size in results] == [r.stat().st_size for r in reports]
    read_by: dict[int, list[int]] = {}
    for pid, size in results:
        read_by.setdefault(pid, []).append(size)
    assert len(read_by) >= sum(r.stat().st_size for r in reports) // budget
    # a worker stops taking reports once it has read its budget: only the last may cross it
    assert all(sum(sizes[:-1]) < budget for sizes in read_by.values())
    assert os.getpid() not in read_by


def timed_read(report: Path) -> tuple[int, float, float]:
    start = time.monotonic()
    read_launches(report)
    return os.getpid(), start, time.monotonic()


@pytest.mark.parametrize("jobs", [1, 2])
def test_no_more_than_jobs_workers_read_at_once_but_for_a_predecessors_last_report(
    corpus_dir: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    """On a spare core a replacement starts early (to make its heap resident); it still
    takes no report while more than ``jobs - 1`` others read ones that are not their last."""
    monkeypatch.setattr(pool._DriverBudget, "left", 0)  # every report in a worker
    reports = find_reports([corpus_dir])
    results = list(map_reports(timed_read, reports, jobs=jobs, retire_bytes=6 * 2**20))
    last_of = {pid: max(start for p, start, _ in results if p == pid) for pid, *_ in results}
    assert len(last_of) >= 4  # several generations of workers
    for _, start, _ in results:
        # the reports read when this one started (at the moment ``start``), except last ones
        others = [(p, s) for p, s, end in results if s < start < end]
        assert sum(s != last_of[p] for p, s in others) <= jobs - 1


def read_launches_of(reports: list[Path], *, jobs: int | None) -> list[object]:
    """What classify reads: every report's launches, an unreadable one raising its ReportError."""
    from ncuflow.read.runs import Source

    return list(read_sources(Sources(tuple(Source(r) for r in reports)), jobs=jobs, strict=True))


def test_an_unreadable_report_is_named_as_in_one_process(corpus_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "garbage.ncu-rep"
    bad.write_bytes(b"this is not a report" * 10)
    reports = [*find_reports([corpus_dir])[:3], bad]
    with pytest.raises(ReportError) as alone:
        list(read_launches_of(reports, jobs=None))
    with pytest.raises(ReportError) as pooled:
        list(read_launches_of(reports, jobs=2))
    assert str(pooled.value) == str(alone.value) and str(bad) in str(pooled.value)


def test_the_driver_reads_only_while_the_first_worker_starts_and_only_its_budget(
    corpus_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker server takes a few hundred milliseconds to start: the driver reads the
    first reports meanwhile, never more than one worker's budget in the life of the process."""
    monkeypatch.setattr(pool._DriverBudget, "left", None)  # a fresh process's budget
    budget = 4 * 2**20
    monkeypatch.setenv(RETIRE_BYTES_ENV, str(budget))
    reports = find_reports([corpus_dir])
    results = list(map_reports(pid_and_size, reports, jobs=2))
    assert [size for _, size in results] == [r.stat().st_size for r in reports]  # input order, every report
    by_driver = [size for pid, size in results if pid == os.getpid()]
    assert by_driver, "the driver read nothing while the workers started"
    assert sum(by_driver[:-1]) < budget  # only the report that crosses the budget may pass it
    assert len({pid for pid, _ in results}) >= 3  # the driver and two workers at least
    # the budget is for the life of the process: a second pool adds to the same count
    again = list(map_reports(pid_and_size, reports, jobs=2))
    in_driver = by_driver + [size for pid, size in again if pid == os.getpid()]
    assert sum(in_driver[:-1]) < budget


def test_an_unreadable_first_report_read_by_the_driver_is_named_as_in_one_process(
    corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool._DriverBudget, "left", None)  # the driver reads the first reports
    bad = tmp_path / "garbage.ncu-rep"
    bad.write_bytes(b"this is not a report" * 10)
    reports = [bad, *find_reports([corpus_dir])]
    with pytest.raises(ReportError) as alone:
        list(read_launches_of(reports, jobs=None))
    with pytest.raises(ReportError) as pooled:
        list(read_launches_of(reports, jobs=2))
    assert str(pooled.value) == str(alone.value) and str(bad) in str(pooled.value)
    assert pool._DriverBudget.left is not None  # it was the driver that read it


def test_a_worker_that_dies_is_an_error_naming_its_report(corpus_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool._DriverBudget, "left", 0)  # `die` must run in a worker, not in this process
    reports = find_reports([corpus_dir])[:2]
    with pytest.raises(ReportError, match="killed by signal 9") as caught:
        list(map_reports(die, reports, jobs=1))
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
    reports = [str(r) for r in find_reports([corpus_dir])] * 10
    proc = subprocess.Popen([sys.executable, "-m", "ncuflow", "export", *reports, "-o", str(output), "--jobs", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while time.monotonic() < deadline and len(workers) < 3:  # the forkserver and two workers
        workers = _tree(proc.pid) - {proc.pid}
        time.sleep(0.05)
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

if len(sys.argv) < 2:  # run with the command's own arguments, as every worker would run it
    raise SystemExit("usage: main_script.py REPORT...")
with open(os.environ["MAIN_RUNS_LOG"], "a") as log:  # one line per run of this script
    log.write(f"{os.getpid()}\\n")


def pid(report):
    return os.getpid()


if __name__ == "__main__":
    from ncuflow.read.pool import map_reports

    print(" ".join(str(p) for p in map_reports(pid, sys.argv[1:], jobs=2, retire_bytes=1)))
'''


def test_workers_do_not_run_the_main_script_again(corpus_dir: Path, tmp_path: Path) -> None:
    """A command started from a script (the `ncuflow` console script) has the script run
    once in the worker server, not again in every worker (CPython's forkserver means to
    and does not: python/cpython#126631); a function defined in it still reaches them."""
    script = tmp_path / "main_script.py"
    script.write_text(MAIN_SCRIPT)
    runs = tmp_path / "runs.log"
    reports = [str(r) for r in find_reports([corpus_dir])[:6]]
    done = subprocess.run([sys.executable, str(script), *reports], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MAIN_RUNS_LOG": str(runs)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    workers = set(done.stdout.split())
    assert len(workers) == len(reports)  # one worker per report (a budget of one byte)
    ran_in = runs.read_text().split()
    assert len(ran_in) == 2 and not workers & set(ran_in)  # the command itself and the server, only


def test_workers_are_stopped_after_the_last_result_without_holding_up_the_caller(corpus_dir: Path) -> None:
    """At the end of a pool, the idle workers are told to stop and waited for on a thread
    (giving back a grown heap takes a while): they are all gone soon after, and nothing is
    left waiting for them."""
    reports = find_reports([corpus_dir])
    pids = {pid for pid, _ in map_reports(pid_and_size, reports, jobs=2, retire_bytes=20 * 2**20)}
    assert pids and os.getpid() not in pids
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
        time.sleep(0.05)
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    stopping = [t for t in threading.enumerate() if t.name == "ncuflow-pool-stop"]
    for thread in stopping:
        thread.join(10)
    assert not any(t.is_alive() for t in stopping)
