"""Fault injection, issue 38: outputs that are someone's files, and other processes in the same folders.

Outputs: a user's own Matplotlib PNGs in a report folder (``roofline.png``, ``terms.png``,
``sweep-*.png``) were deleted by ``report -o``, any Matplotlib PNG was overwritten by
``roofline -o``, a bench_serving result by ``phases-record --out``, and ``phases a/server.log
b/server.log --plot tl.png`` wrote both plots to ``tl-server.png``. Now ncuflow recognises its
own outputs by what it wrote into them (``files.png_recogniser``: a PNG text chunk), refuses
the others with one paragraph, and names the plots of several inputs apart.

Other processes: a sweep on a ``cp -a`` copy of a store killed the original sweep's live ncu
(it trusted the copied ``.lock``); an export in another PID namespace deleted a live export's
temporaries as "dead"; two ``store check --repair`` at once failed; ``profile`` of a program
that writes without end kept a 7 GB log; ``phases-record`` into a path replaced by a FIFO
blocked forever. Each runs the real command line under the fault suite's limits
(``tests.hostile.run_limited``) or, for a lock, the library with real processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import matplotlib
import pytest

from ncuflow import store
from ncuflow.files import TMP_MARK
from ncuflow.files.owner import owner_tag, place_token, process_start
from ncuflow.profile.sweep import parse_sweep
from ncuflow.store import lock as point_lock
from tests import sse_server as sse
from tests.hostile import FAKE_NCU, FIGURES, REPO, figures_line, run_limited

matplotlib.use("Agg")
import matplotlib.pyplot as plt

SMALL = "yzwang2000__cudaCode__profile.ncu-rep"
SEEN: Counter[str] = Counter()  # user files lost or overwritten, live processes killed, temporaries deleted


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    print(figures_line("owner figures", SEEN), figures_line("fault suite so far", FIGURES))


def _user_png(path: Path) -> bytes:
    """A PNG the user made with Matplotlib (its own Software chunk, no ncuflow chunk)."""
    figure = plt.figure(figsize=(2, 2))
    plt.plot([1, 2, 3])
    figure.savefig(path)
    plt.close(figure)
    return path.read_bytes()


def _kept(files: dict[Path, bytes]) -> None:
    """Each file still holds what it held; a lost or changed one is counted (it must never happen)."""
    for path, content in files.items():
        intact = path.is_file() and path.read_bytes() == content
        SEEN["user_files_lost_or_overwritten"] += not intact
        assert intact, path


def _paragraph(ran: object) -> bool:
    return ran.code in (1, 2) and not ran.traceback and not ran.timed_out and "ncuflow: " in ran.stderr  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- outputs that are someone's files


def test_report_leaves_the_users_own_plots_in_its_folder(corpus_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    names = ["roofline.png", "terms.png", "terms-2.png", "sweep-mib-0-copy.png", "roofline-0badcafe.png"]
    mine = {out / name: _user_png(out / name) for name in names}
    for attempt in range(2):  # the second report replaces the first's plots, and only them
        ran = run_limited(["report", str(corpus_dir / SMALL), "-o", str(out)], case="report-folder-with-user-plots")
        assert ran.code == 0 and not ran.traceback, ran.output[-2000:]
        _kept(mine)
        ours = sorted(p.name for p in out.glob("*.png") if p not in mine)
        assert ours and all(name in (out / "report.md").read_text() for name in ours), (attempt, ours)


def test_report_leaves_another_commands_plot(corpus_dir: Path, tmp_path: Path) -> None:
    """A roofline plot of `ncuflow roofline` named as a report's plot is ncuflow's, but not a report's: it stays."""
    out = tmp_path / "out"
    out.mkdir()
    ran = run_limited(["roofline", str(corpus_dir / SMALL), "-o", str(out / "roofline.png")], case="roofline-in-report-folder")
    assert ran.code == 0, ran.output[-2000:]
    plot = {out / "roofline.png": (out / "roofline.png").read_bytes()}
    ran = run_limited(["report", str(corpus_dir / SMALL), "-o", str(out)], case="report-beside-roofline")
    assert ran.code == 0 and not ran.traceback, ran.output[-2000:]
    _kept(plot)


def test_roofline_never_overwrites_a_png_it_did_not_write(corpus_dir: Path, tmp_path: Path) -> None:
    figure = tmp_path / "thesis_fig.png"
    mine = {figure: _user_png(figure)}
    ran = run_limited(["roofline", str(corpus_dir / SMALL), "-o", str(figure)], case="roofline-over-user-png")
    assert _paragraph(ran), ran.output[-2000:]
    assert f"Refusing to overwrite {figure}: it is a PNG image ncuflow did not write" in ran.stderr, ran.stderr
    _kept(mine)
    ours = tmp_path / "ours.png"
    for _ in range(2):  # its own plot, by its text chunk: replaced
        ran = run_limited(["roofline", str(corpus_dir / SMALL), "-o", str(ours)], case="roofline-over-own-png")
        assert ran.code == 0, ran.output[-2000:]


def test_a_png_that_only_mentions_ncuflow_is_not_ncuflows(corpus_dir: Path, tmp_path: Path) -> None:
    """The word in the image's bytes, or another key's value, is not ncuflow's chunk."""
    figure = tmp_path / "fig.png"
    made = plt.figure(figsize=(2, 2))
    made.savefig(figure, metadata={"Title": "ncuflow ncuflow.plot", "Software": "ncuflow-like tool"})
    plt.close(made)
    mine = {figure: figure.read_bytes()}
    ran = run_limited(["roofline", str(corpus_dir / SMALL), "-o", str(figure)], case="roofline-over-lookalike-png")
    assert _paragraph(ran), ran.output[-2000:]
    _kept(mine)


def test_plots_of_several_inputs_never_share_a_name(serving_logs_dir: Path, tmp_path: Path) -> None:
    log = next(p for p in sorted(serving_logs_dir.glob("sgldocs_*.log")))
    inputs = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        inputs.append(tmp_path / folder / "server.log")
        shutil.copyfile(log, inputs[-1])
    ran = run_limited(["phases", *map(str, inputs), "--plot", str(tmp_path / "tl.png")], case="phases-plots-same-stem")
    assert ran.code == 0 and not ran.traceback, ran.output[-2000:]
    written = sorted(tmp_path.glob("tl-*.png"))
    SEEN["plots_lost_to_a_shared_name"] += 2 - len(written)
    assert [p.name for p in written] == ["tl-a-server.png", "tl-b-server.png"], written
    for source, plot in zip(inputs, written, strict=True):
        assert f"timeline of {source} written to {plot}" in ran.stdout, ran.stdout


def test_the_recorder_never_overwrites_a_json_file_it_did_not_write(tmp_path: Path) -> None:
    result = tmp_path / "bench_results.jsonl"
    result.write_text('{"date": "20260101", "backend": "vllm", "completed": 20}\n')
    mine = {result: result.read_bytes()}
    with sse.SseServer(lambda i: sse.good_reply()) as server:
        ran = run_limited(["phases-record", server.url, "--model", "m", "--out", str(result), "--requests", "2"],
                          case="recorder-over-bench-result")
        assert _paragraph(ran), ran.output[-2000:]
        _kept(mine)
        trace = tmp_path / "trace.jsonl"
        for _ in range(2):  # its own earlier trace is replaced
            ran = run_limited(["phases-record", server.url, "--model", "m", "--out", str(trace), "--requests", "2"],
                              case="recorder-over-own-trace")
            assert ran.code == 0, ran.output[-2000:]


# A recording whose --out is replaced by a FIFO once the checks are done (as another process could).
FIFO_SHIM = """
import os, sys
from ncuflow.phases import recorder
entered = recorder.Recording.__enter__
def replaced(self):
    out = sys.argv[sys.argv.index("--out") + 1]
    os.unlink(out)
    os.mkfifo(out)
    return entered(self)
recorder.Recording.__enter__ = replaced
from ncuflow.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_the_recorder_never_blocks_on_an_output_replaced_by_a_fifo(tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    out.write_text("")
    with sse.SseServer(lambda i: sse.good_reply()) as server:
        argv = ["phases-record", server.url, "--model", "m", "--out", str(out), "--requests", "2"]
        ran = run_limited(argv, command=[sys.executable, "-c", FIFO_SHIM, *argv], timeout=30, case="recorder-fifo")
    assert _paragraph(ran) and ran.seconds < 20, ran.output[-2000:]
    assert "(a FIFO or device)" in ran.stderr and "Nothing was written" in ran.stderr, ran.stderr


# ----------------------------------------------------------------------------- other processes


def _fake_supervisor() -> subprocess.Popen[bytes]:
    """A process that looks like ncu's supervisor (its mark in the command line), leading its group."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", point_lock.SUPERVISOR_MARK],
                            start_new_session=True)


HOLDER = """
import sys, time
from pathlib import Path
from ncuflow.store import lock
held = lock.try_lock(Path(sys.argv[1]))
held.record(ncu_pgid=int(sys.argv[2]))
print("held", flush=True)
time.sleep(120)
"""


def _holder(point: Path, pgid: int) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(point), str(pgid)], stdout=subprocess.PIPE,
                              text=True, cwd=REPO)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def _alive(process: subprocess.Popen[bytes]) -> bool:
    return process.poll() is None


def test_a_copied_lock_never_kills_the_original_holders_ncu(tmp_path: Path) -> None:
    point = tmp_path / "store" / "cell" / "point"
    supervisor = _fake_supervisor()
    holder = _holder(point, supervisor.pid)
    try:
        copy = tmp_path / "copy"
        subprocess.run(["cp", "-a", str(tmp_path / "store"), str(copy)], check=True)
        taken = point_lock.try_lock(copy / "cell" / "point")  # a sweep on the copy takes the copied lock
        assert taken is not None
        time.sleep(0.2)
        SEEN["live_ncu_killed_through_a_copied_lock"] += not _alive(supervisor)
        assert _alive(supervisor)
        taken.release()
        holder.kill()  # the holder dies: in its own folder its lock is still acted on
        holder.wait()
        again = point_lock.try_lock(point)
        assert again is not None
        supervisor.wait(timeout=10)
        assert supervisor.returncode == -signal.SIGKILL
        again.release()
    finally:
        for process in (holder, supervisor):
            process.kill()
            process.wait()


@pytest.mark.parametrize("field", ["host", "boot_id", "pid_ns", "folder", "ncu_start"])
def test_a_lock_of_another_host_namespace_boot_or_process_is_never_acted_on(tmp_path: Path, field: str) -> None:
    """A dead holder's record that differs in one fact: the group it names is left alone."""
    point = tmp_path / "point"
    supervisor = _fake_supervisor()
    holder = _holder(point, supervisor.pid)
    holder.kill()
    holder.wait()
    try:
        record = json.loads((point / point_lock.LOCK_NAME).read_text())
        record[field] = 1 if field == "ncu_start" else f"other-{record[field]}"
        (point / point_lock.LOCK_NAME).write_text(json.dumps(record))
        taken = point_lock.try_lock(point)
        assert taken is not None
        time.sleep(0.2)
        SEEN["live_ncu_killed_through_a_foreign_lock"] += not _alive(supervisor)
        assert _alive(supervisor), field
        taken.release()
    finally:
        supervisor.kill()
        supervisor.wait()


def _dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def test_only_temporaries_of_provably_dead_processes_here_are_removed(corpus_dir: Path, tmp_path: Path) -> None:
    dead = _dead_pid()
    here_dead = tmp_path / f"{TMP_MARK}{dead}.{place_token()}.{12345}-out.parquet"
    here_reused = tmp_path / f"{TMP_MARK}{os.getppid()}.{place_token()}.{(process_start(os.getppid()) or 0) + 1}-x"
    kept = [tmp_path / f"{TMP_MARK}{dead}.0123456789.12345-out.parquet",  # another namespace, host or boot
            tmp_path / f"{TMP_MARK}{dead}-out.parquet",  # a pid alone proves nothing
            tmp_path / f"{TMP_MARK}{owner_tag(os.getppid())}-x"]  # a live process here
    for path in [here_dead, here_reused, *kept]:
        path.write_bytes(b"partial")
    ran = run_limited(["export", str(corpus_dir / SMALL), "-o", str(tmp_path / "out.parquet")], case="export-temporaries")
    assert ran.code == 0, ran.output[-2000:]
    assert not here_dead.exists() and not here_reused.exists()
    SEEN["foreign_temporaries_deleted"] += sum(not p.exists() for p in kept)
    assert all(p.exists() for p in kept)


# An export held between its renames (its second temporary still waiting), in its own PID namespace.
HELD_EXPORT = """
import os, sys, time
import ncuflow.files as files
real, seen = os.replace, [0]
class Watched:
    def __getattr__(self, name):
        return getattr(os, name)
    @staticmethod
    def replace(source, target):
        real(source, target)
        if not os.path.basename(str(target)).startswith(files.TMP_MARK):
            seen[0] += 1
            if seen[0] == 1:
                open(os.environ["HELD_MARK"], "w").close()
                time.sleep(float(os.environ["HELD_S"]))
files.os = Watched()
from ncuflow.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _unshare() -> list[str]:
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False) \
        if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("no PID namespace here (unshare --pid needs CAP_SYS_ADMIN)")
    return ["unshare", "--pid", "--fork", "--mount-proc"]


def test_an_export_in_another_pid_namespace_keeps_its_temporaries(corpus_dir: Path, tmp_path: Path) -> None:
    """A container sharing the folder: the export outside must not take the one inside for dead."""
    prefix = _unshare()
    out, mark = tmp_path / "inside.parquet", tmp_path / "held"
    args = ["export", str(corpus_dir / SMALL), "-o", str(out), "--metrics-long"]
    env = {**os.environ, "HELD_MARK": str(mark), "HELD_S": "12"}
    # inside, pids are counted from 1: 400 processes first, so that its export's pid is one no process
    # outside has (an id alive outside would hide the fault this test is for)
    burn = ["sh", "-c", 'i=0; while [ $i -lt 400 ]; do /bin/true; i=$((i+1)); done; "$@"', "sh"]
    inside = subprocess.Popen([*prefix, *burn, sys.executable, "-c", HELD_EXPORT, *args], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 60
        while not mark.exists() and inside.poll() is None and time.monotonic() < end:
            time.sleep(0.1)
        assert mark.exists(), inside.communicate()
        waiting = [p for p in tmp_path.iterdir() if p.name.startswith(TMP_MARK)]
        assert waiting
        ran = run_limited(["export", str(corpus_dir / SMALL), "-o", str(tmp_path / "outside.parquet")],
                          case="export-beside-another-namespace")
        assert ran.code == 0, ran.output[-2000:]
        SEEN["live_temporaries_deleted"] += sum(not p.exists() for p in waiting)
        assert all(p.exists() for p in waiting)
        _stdout, stderr = inside.communicate(timeout=60)
    finally:
        inside.kill()
    assert inside.returncode == 0 and "Traceback" not in stderr, stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(TMP_MARK)]


def test_two_repairs_at_once_both_succeed_and_lose_nothing(corpus_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "store"
    plan = parse_sweep({"cell": "copy_bandwidth", "replicas": 1, "axes": {"mib": list(range(1, 31))}})
    for point in plan.points:
        run = store.write_run(root, point.spec, corpus_dir / SMALL)
        for copy in range(6):
            damaged = run.path.with_name(f"{run.path.name}-d{copy}")
            shutil.copytree(run.path, damaged)
            (damaged / store.MANIFEST_NAME).write_text('{"sch')
    reports = len(list(root.rglob(store.REPORT_NAME)))
    argv = [sys.executable, "-m", "ncuflow", "store", "check", str(root), "--repair"]
    both = [subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    results = [(p.communicate(timeout=120), p.returncode) for p in both]
    FIGURES["cases"] += 2
    FIGURES["case:store-check-repair-twice"] += 2
    FIGURES["tracebacks"] += sum("Traceback" in out + err for (out, err), _ in results)
    for (_out, err), code in results:
        assert code == 0 and "Traceback" not in err, err
    assert len(list(root.rglob(store.REPORT_NAME))) == reports  # nothing lost
    assert len(list(root.rglob(f"{store.DAMAGED_PREFIX}*"))) == 180
    assert len(list(store.iter_runs(root))) == 30


def test_a_program_that_writes_without_end_keeps_a_bounded_log_and_its_timeout(corpus_dir: Path,
                                                                                tmp_path: Path) -> None:
    from ncuflow.profile.log_pump import CUT_NOTE, LOG_HEAD_BYTES

    root = tmp_path / "store"
    env = {**os.environ, "FAKE_NCU_RUN_APP": "1", "FAKE_NCU_REPORT": str(corpus_dir / SMALL)}
    ran = run_limited(["profile", "--store", str(root), "--ncu", str(FAKE_NCU), "--timeout", "4", "--",
                       "sh", "-c", "yes spam"], env=env, case="profile-endless-output")
    assert ran.code == 3 and not ran.traceback and "did not finish within 4 s" in ran.stderr, ran.output[-2000:]
    assert ran.seconds < 20, ran.seconds
    (log,) = root.rglob(store.LOG_NAME)
    SEEN["max_log_mib"] = max(SEEN["max_log_mib"], log.stat().st_size >> 20)
    assert log.stat().st_size < LOG_HEAD_BYTES + (64 << 10)
    assert CUT_NOTE in log.read_text(errors="replace")[-5000:]


def test_a_log_pump_keeps_ncu_lines_and_the_last_lines_past_its_head(tmp_path: Path) -> None:
    from ncuflow.profile.log_pump import CUT_NOTE, LogPump

    path = tmp_path / "ncu.log"
    with open(path, "wb") as log, LogPump(log, head_bytes=1000) as pump:
        writer = os.fdopen(pump.writer, "wb", closefd=False)
        lines = [b"==PROF== Connected\n", *(f"line {i}\n".encode() for i in range(5000)), b"==ERROR== late\n",
                 b"last words"]
        writer.write(b"".join(lines))
        writer.flush()
    text = path.read_text()
    assert text.startswith("==PROF== Connected\nline 0\n") and "==ERROR== late\n" in text
    assert CUT_NOTE in text and text.endswith("line 4999\nlast words\n")
    assert len(text) < 1000 + 200 * 12 + 300


def test_a_store_run_folder_of_another_place_is_never_removed(tmp_path: Path) -> None:
    """A run being written (``.tmp-<run-id>-<owner tag>``) by a process elsewhere stays; a dead one's here goes."""
    from ncuflow.cells.contract import CellSpec

    spec = CellSpec.of("copy_bandwidth", {"mib": 1})
    point = store.point_dir(tmp_path, spec, "c" * 64)
    point.mkdir(parents=True)
    dead = _dead_pid()
    here = point / f".tmp-20260101T000000Z-abcdef-{dead}.{place_token()}.7"
    elsewhere = point / f".tmp-20260101T000000Z-abcdef-{dead}.0123456789.7"
    for folder in (here, elsewhere):
        folder.mkdir()
    pending = store.begin_run(tmp_path, spec, "c" * 64)
    assert pending.tmp_path.name.endswith(owner_tag()) and pending.tmp_path.is_dir()
    SEEN["foreign_temporaries_deleted"] += not elsewhere.exists()
    assert not here.exists() and elsewhere.exists()
