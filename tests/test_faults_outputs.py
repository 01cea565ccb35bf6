"""Fault injection, outputs (issue 24): links, special files, names, and pairs a kill cuts in two.

Every case runs the real command line under a time and a memory limit
(``tests.hostile.run_limited``). A link given as an output is written through and stays a
link; a name that leads into ``/proc`` (``/dev/stdout``) or to a device or FIFO is refused;
a name with a byte that is not UTF-8 is written. The files that belong together (an
export's launches and metrics tables, a report's Markdown and plots) are killed between
their renames, by SIGKILL at the exact moment and at random moments, and written by two
commands at once, one of them held between its renames: no reader may ever accept a
mismatched pair, and the next command removes what the killed one left. The figures are
printed at the end of the module (``pytest -s``) for docs/reliability.md.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from ncuflow.output.export import MismatchedPairError, read_export
from tests.hostile import FIGURES, REPO, figures_line, run_limited

SMALL = "yzwang2000__cudaCode__profile.ncu-rep"
SEVERAL = ["yzwang2000__cudaCode__profile.ncu-rep", "Syswea__cuda-fused-linear-layer__profile_report.ncu-rep",
           "spymaster2h__spyinfer__report.ncu-rep"]
SEEN: Counter[str] = Counter()

# The command line with the renames of ncuflow.files watched: after the N-th rename of a final
# output it kills itself (SIGKILL, as `kill -9` would) or sleeps (held between its renames).
SHIM = """
import os, signal, sys, time
import ncuflow.files as files
real, seen = os.replace, [0]
class Watched:
    def __getattr__(self, name):
        return getattr(os, name)
    @staticmethod
    def replace(source, target):
        real(source, target)
        if os.path.basename(str(target)).startswith(files.TMP_MARK):
            return  # a plot saved to its own temporary: not a final output
        seen[0] += 1
        if seen[0] == int(os.environ["SHIM_AFTER"]):
            if os.environ["SHIM_MODE"] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(float(os.environ["SHIM_SLEEP"]))
files.os = Watched()
from ncuflow.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    print(figures_line("output and pair figures", SEEN), figures_line("fault suite so far", FIGURES))


def _watched(args: list[str], mode: str, after: int = 1, sleep: float = 0.0) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "SHIM_MODE": mode, "SHIM_AFTER": str(after), "SHIM_SLEEP": str(sleep)}
    return [sys.executable, "-c", SHIM, *args], env


def _export(corpus_dir: Path, out: Path, reports: list[str] = SEVERAL) -> list[str]:
    return ["export", *(str(corpus_dir / r) for r in reports), "-o", str(out), "--metrics-long"]


def _pair_state(out: Path) -> str:
    """What a reader makes of the pair at ``out``: "matched", "refused" (mismatched, said so) or "absent";
    a mismatched pair the reader accepted is counted (it must never happen)."""
    state = _read_pair(out)
    SEEN[f"pairs_read_{state}"] += 1
    return state


def _read_pair(out: Path) -> str:
    if not out.exists():
        return "absent"
    try:
        launches, metrics = read_export(out)
    except MismatchedPairError:
        return "refused"
    ids = {pl.read_parquet_metadata(p).get("ncuflow.export_id") for p in (out, out.with_name("out.metrics.parquet"))
           if p.exists()}
    accepted_mismatch = metrics is not None and len(ids) != 1
    SEEN["mismatched_pairs_accepted"] += accepted_mismatch
    assert not accepted_mismatch, ids
    assert metrics is None or set(metrics["report"]) <= set(launches["report"])
    return "matched"


def _temporaries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.startswith(".ncuflow-tmp-")]


# ----------------------------------------------------------------------------- links and special files


def test_an_output_that_is_a_link_is_written_through_and_stays_a_link(corpus_dir: Path, tmp_path: Path) -> None:
    report = str(corpus_dir / SMALL)
    data = tmp_path / "data"
    data.mkdir()
    cases = [
        (["export", report, "-o", "{link}"], "launches.parquet", "launches.parquet"),
        (["stability", report, "--markdown", "{link}"], "stability.md", "stability.md"),
        (["export", report, "-o", "{link}"], "dangling.parquet", None),  # a link to a file not there yet
    ]
    for argv, name, existing in cases:
        target = data / name
        if existing is not None:
            assert run_limited([a.replace("{link}", str(target)) for a in argv]).code == 0
        before = target.stat().st_mtime_ns if target.exists() else None
        link = tmp_path / f"link-{name}"
        link.symlink_to(target)
        ran = run_limited([a.replace("{link}", str(link)) for a in argv], case="output-link")
        assert ran.code == 0 and not ran.traceback, ran.output
        replaced = not link.is_symlink()
        SEEN["links_replaced"] += replaced
        assert not replaced and target.is_file() and target.stat().st_mtime_ns != before
    report_dir = tmp_path / "rep"
    assert run_limited(["report", report, "-o", str(report_dir)]).code == 0
    shutil.move(report_dir / "report.md", data / "report.md")
    (report_dir / "report.md").symlink_to(data / "report.md")
    ran = run_limited(["report", report, "-o", str(report_dir)], case="output-link")
    assert ran.code == 0 and (report_dir / "report.md").is_symlink(), ran.output
    assert _named_plots_exist(report_dir)


def test_an_output_that_leads_into_proc_or_to_a_device_is_refused(corpus_dir: Path, tmp_path: Path) -> None:
    report = str(corpus_dir / SMALL)
    (tmp_path / "stdout").symlink_to("/proc/self/fd/1")  # what /dev/stdout is
    os.mkfifo(tmp_path / "fifo.parquet")
    cases = [(str(tmp_path / "stdout"), "special file"), ("/dev/null", "character device"),
             (str(tmp_path / "fifo.parquet"), "FIFO"), ("/proc/self/fd/1", "special file")]
    for target, words in cases:
        sink = tmp_path / "f"
        ran = run_limited(["export", report, "-o", target], stdout_file=sink, case="output-special")
        assert ran.paragraph() and words in ran.stderr, ran.output
        assert sink.stat().st_size == 0
    assert (tmp_path / "stdout").is_symlink() and os.readlink(tmp_path / "stdout") == "/proc/self/fd/1"


def test_export_to_dev_stdout_as_root_is_refused_and_dev_stdout_stays(corpus_dir: Path, tmp_path: Path) -> None:
    """The real /dev/stdout, in a mount namespace of its own (so that a regression could not replace the machine's)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (a private /dev); the link into /proc is refused above")
    script = (
        "mount -t tmpfs none /dev && ln -s /proc/self/fd/1 /dev/stdout && ln -s /proc/self/fd/2 /dev/stderr && "
        "mknod -m 666 /dev/null c 1 3 && "
        f"{sys.executable} -m ncuflow export {corpus_dir / SMALL} -o /dev/stdout > {tmp_path / 'f'}; "
        "echo exit=$? >&2; if [ -L /dev/stdout ]; then echo stdout-is-a-link >&2; fi"
    )
    ran = run_limited([], command=["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                      case="output-dev-stdout")
    if "exit=" not in ran.stderr:
        pytest.skip(f"cannot make a private /dev here: {ran.stderr.strip()[:200]}")
    assert "exit=2" in ran.stderr and "special file" in ran.stderr and not ran.traceback, ran.output
    SEEN["links_replaced"] += "stdout-is-a-link" not in ran.stderr
    assert "stdout-is-a-link" in ran.stderr and (tmp_path / "f").stat().st_size == 0


def test_an_output_name_with_a_byte_that_is_not_utf8(corpus_dir: Path, tmp_path: Path) -> None:
    name = os.fsdecode(b"\xff-launches.parquet")
    ran = run_limited(["export", str(corpus_dir / SMALL), "-o", str(tmp_path / name), "--metrics-long"],
                      case="output-undecodable")
    assert ran.code == 0 and not ran.traceback, ran.output
    assert (tmp_path / name).is_file() and (tmp_path / os.fsdecode(b"\xff-launches.metrics.parquet")).is_file()
    folder = tmp_path / os.fsdecode(b"d\xff")
    folder.mkdir()
    refused = run_limited(["export", str(corpus_dir / SMALL), "-o", str(folder / "x.parquet")],
                          case="output-undecodable")
    assert refused.paragraph() and "not UTF-8" in refused.stderr, refused.output
    assert list(folder.iterdir()) == []


# ----------------------------------------------------------------------------- pairs


def test_an_export_killed_after_its_first_rename_leaves_a_pair_no_reader_accepts(corpus_dir: Path,
                                                                                 tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    assert run_limited(_export(corpus_dir, out, [SMALL])).code == 0
    command, env = _watched(_export(corpus_dir, out), "kill")
    killed = run_limited([], command=command, env=env, case="export-killed-between-renames")
    assert killed.code == -signal.SIGKILL
    SEEN["kills"] += 1
    assert _pair_state(out) == "refused"
    with pytest.raises(MismatchedPairError, match=r"^Mismatched pair: .*out.metrics.parquet does not belong"):
        read_export(out)
    assert run_limited(_export(corpus_dir, out, [SMALL])).code == 0  # the next export: a matched pair, no leftovers
    assert _pair_state(out) == "matched" and _temporaries(tmp_path) == []


def test_two_exports_to_one_output_one_held_between_its_renames_leave_one_pair(corpus_dir: Path,
                                                                              tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    command, env = _watched(_export(corpus_dir, out), "sleep", sleep=3.0)
    held = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not out.with_name("out.metrics.parquet").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # the held export has renamed its metrics table and sleeps before its launches
    other = run_limited(_export(corpus_dir, out, [SMALL]), case="export-concurrent")
    first = held.communicate(timeout=120)[0]
    assert held.returncode == 0 and other.code == 0, (first, other.output)
    assert _pair_state(out) == "matched"
    launches, _ = read_export(out)
    assert set(launches["report_name"]) == {SMALL}  # the second export waited for the first to commit, then its own
    assert _temporaries(tmp_path) == []


def test_exports_killed_at_random_moments_never_leave_an_accepted_mismatched_pair(corpus_dir: Path,
                                                                                  tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("NCUFLOW_FAULT_SEED", "9")))
    out = tmp_path / "out.parquet"
    states: Counter[str] = Counter()
    for trial in range(int(os.environ.get("NCUFLOW_PAIR_KILLS", "6"))):
        reports = [SMALL] if trial % 2 else SEVERAL
        process = subprocess.Popen([sys.executable, "-m", "ncuflow", *_export(corpus_dir, out, reports)], cwd=REPO,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(rng.uniform(0.5, 3.0))
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            SEEN["kills"] += 1
        process.wait(timeout=60)
        states[_pair_state(out)] += 1
    SEEN["export_trials"] += sum(states.values())
    assert run_limited(_export(corpus_dir, out, [SMALL])).code == 0
    assert _pair_state(out) == "matched" and _temporaries(tmp_path) == []


def _named_plots_exist(folder: Path) -> bool:
    """report.md's plots are all there, and all carry its report id (a report is one unit)."""
    text = (folder / "report.md").read_text()
    report_id = text.rsplit("Report id: `", 1)[1][:8]
    named = re.findall(r"\]\(([^()/]+\.png)\)", text)
    whole = bool(named) and all((folder / n).is_file() and n.endswith(f"-{report_id}.png") for n in named)
    SEEN["reports_read"] += 1
    SEEN["mismatched_reports_accepted"] += not whole
    return whole


def test_a_report_killed_between_its_renames_keeps_a_whole_report_and_the_next_cleans_up(
        corpus_dir: Path, tmp_path: Path) -> None:
    from tests.test_explain import build_store

    store = build_store(tmp_path / "s", corpus_dir)
    out = tmp_path / "rep"
    assert run_limited(["report", str(store), "-o", str(out)]).code == 0
    earlier = sorted(p.name for p in out.glob("*.png"))
    for after in (1, 3):  # after the first plot's rename; after the tables'
        command, env = _watched(["report", str(store), "-o", str(out)], "kill", after=after)
        killed = run_limited([], command=command, env=env, case="report-killed-between-renames")
        assert killed.code == -signal.SIGKILL
        SEEN["kills"] += 1
        assert _named_plots_exist(out)  # the earlier report.md, with its own plots
    rng = random.Random(5)
    for _ in range(3):
        process = subprocess.Popen([sys.executable, "-m", "ncuflow", "report", str(store), "-o", str(out)], cwd=REPO,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(rng.uniform(1.0, 3.5))
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            SEEN["kills"] += 1
        process.wait(timeout=60)
        SEEN["report_trials"] += 1
        assert _named_plots_exist(out)
    assert run_limited(["report", str(store), "-o", str(out)], case="report-after-kills").code == 0
    assert _named_plots_exist(out) and _temporaries(out) == []
    now = sorted(p.name for p in out.glob("*.png"))
    assert len(now) == len(earlier) and not set(now) & set(earlier)  # earlier plots removed, none left over


def test_every_markdown_output_replaces_only_its_own_kind(corpus_dir: Path, tmp_path: Path) -> None:
    report = str(corpus_dir / SMALL)
    stability = tmp_path / "stability.md"
    compared = tmp_path / "compare.md"
    assert run_limited(["stability", report, "--markdown", str(stability)]).code == 0
    assert run_limited(["compare", report, report, "--markdown", str(compared)]).code == 0
    kept = stability.read_bytes()
    for argv in (["compare", report, report, "--markdown", str(stability)],
                 ["stability", report, "--markdown", str(compared)],
                 ["explain", report, "--vary", "x", "--markdown", str(stability)]):
        ran = run_limited(argv, case="markdown-of-another-kind")
        assert ran.paragraph() and "Refusing" in ran.stderr and "another kind" in ran.stderr, ran.output
    assert stability.read_bytes() == kept
    again = run_limited(["compare", report, report, "--markdown", str(compared)], case="markdown-same-kind")
    assert again.code == 0 and compared.read_text().startswith("# ncuflow compare")
    folder = tmp_path / "rep"
    folder.mkdir()
    shutil.copyfile(stability, folder / "report.md")
    ran = run_limited(["report", report, "-o", str(folder)], case="markdown-of-another-kind")
    assert ran.paragraph() and "Refusing" in ran.stderr and sorted(p.name for p in folder.iterdir()) == ["report.md"]
