"""Fault injection, streams and pairs (issue 31): a profiled program's endless output read in
bounded memory, ``stability``'s Markdown and parquet pair carrying one id, and the Python API
refusing what the command line refuses.

- A profiled program writing 1.2 GB without a newline (or 1.3 GB of lines) ended ``profile`` in
  a MemoryError in ``LogFollower.poll``, and ``orchestrate`` read all of ``ncu.log``: now both
  read in chunks, keeping ncu's own lines and the program's last ones (``profile.process``).
- ``stability --markdown`` + ``--parquet`` killed between its renames left a pair describing two
  inputs, and neither file carried an id: now one ``stability_id`` in both, renamed together,
  checked by ``ncuflow.output.stability_pair.read_stability_pair``.
- ``ncuflow.summary(top=-1)`` and ``ncuflow.launches(jobs=-1)`` were accepted: now refused in the
  words of ``--top -1`` and ``--jobs -1`` (``ncuflow.analyze.arguments``).
"""

from __future__ import annotations

import signal
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import ncuflow
from ncuflow.errors import UsageError
from ncuflow.output.export import MismatchedPairError
from ncuflow.output.stability_pair import read_stability_pair
from ncuflow.profile.process import MAX_LINE_BYTES, LogFollower, read_log
from tests.hostile import FAKE_NCU, FIGURES, fake_ncu_env, figures_line, run_limited
from tests.test_faults_outputs import SHIM

SMALL = "yzwang2000__cudaCode__profile.ncu-rep"
CONV = "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep"
SEEN: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    print(figures_line("stream and pair figures", SEEN), figures_line("fault suite so far", FIGURES))


# ----------------------------------------------------------------------------- a program's endless output


@pytest.mark.parametrize(("what", "program"), [
    ("1.2 GB without a newline", "head -c 1200000000 /dev/zero"),
    ("1.3 GB of lines", "yes 'a line the program prints' | head -c 1300000000"),
])
def test_profile_reads_a_programs_huge_output_in_bounded_memory(corpus_dir: Path, tmp_path: Path, what: str,
                                                                program: str) -> None:
    root = tmp_path / "store"
    ran = run_limited(["profile", "--store", str(root), "--ncu", str(FAKE_NCU), "--", "sh", "-c", program],
                      env=fake_ncu_env(corpus_dir / SMALL, tmp_path / "calls.jsonl", FAKE_NCU_RUN_APP="1"),
                      case="profile-huge-output")
    SEEN["huge_output_cases"] += 1
    SEEN["huge_output_peak_mib"] = max(SEEN["huge_output_peak_mib"], int(ran.peak_mib))
    try:
        assert ran.code == 0 and not ran.traceback and "MemoryError" not in ran.output, (what, ran.output[-2000:])
        assert ran.peak_mib < 400, (what, ran.peak_mib)  # was a MemoryError at the 2 GiB limit
    finally:
        for log in root.rglob("ncu.log"):
            log.unlink()  # 1.2 GB of disk


def test_the_log_follower_and_the_log_reader_keep_ncus_lines_of_a_huge_log(tmp_path: Path) -> None:
    log = tmp_path / "ncu.log"
    with open(log, "wb") as handle:
        handle.write(b'==PROF== Profiling "k" - 0: 0%....100%\n')
        handle.write(b"x" * (40 << 20))  # 40 MB without a newline
        handle.write(b"\nthe program's last line\n==ERROR== The application returned an error code (3).\n")
    seen: list[str] = []
    follower = LogFollower(log, seen.append)
    follower.poll()
    assert seen == ['==PROF== Profiling "k" - 0: 0%....100%', "==ERROR== The application returned an error code (3)."]
    assert len(follower.partial) <= MAX_LINE_BYTES
    text = read_log(log)
    assert len(text) < 2 * MAX_LINE_BYTES and "the program's last line" in text and "error code (3)" in text
    SEEN["log_reads"] += 1


# ----------------------------------------------------------------------------- stability's pair


def _stability(corpus_dir: Path, out: Path, report: str) -> list[str]:
    return ["stability", str(corpus_dir / report), "--markdown", str(out / "s.md"), "--parquet", str(out / "s.parquet")]


def test_stability_markdown_and_parquet_carry_one_id(corpus_dir: Path, tmp_path: Path) -> None:
    ran = run_limited(_stability(corpus_dir, tmp_path, CONV), case="stability-pair")
    assert ran.code == 0, ran.output[-2000:]
    text, table = read_stability_pair(tmp_path / "s.md", tmp_path / "s.parquet")
    assert "Stability id: `" in text and table.height > 0
    SEEN["stability_pairs_matched"] += 1


@pytest.mark.parametrize("after", [1, 2])
def test_stability_killed_between_its_renames_leaves_no_pair_a_reader_accepts(corpus_dir: Path, tmp_path: Path,
                                                                              after: int) -> None:
    assert run_limited(_stability(corpus_dir, tmp_path, SMALL), case="stability-pair").code == 0
    env = {**dict(__import__("os").environ), "SHIM_MODE": "kill", "SHIM_AFTER": str(after), "SHIM_SLEEP": "0"}
    killed = run_limited([], command=[sys.executable, "-c", SHIM, *_stability(corpus_dir, tmp_path, CONV)], env=env,
                         case="stability-killed-between-renames")
    SEEN["stability_kills"] += 1
    assert killed.code == -signal.SIGKILL
    try:
        read_stability_pair(tmp_path / "s.md", tmp_path / "s.parquet")
        state = "matched"
    except MismatchedPairError:
        state = "refused"
    SEEN[f"stability_pairs_{state}"] += 1
    # killed after the first rename: one new file and one old, refused; after both: one matched pair
    assert state == ("refused" if after == 1 else "matched")


# ----------------------------------------------------------------------------- the API's arguments


@pytest.mark.parametrize(("call", "option", "argv"), [
    (lambda path: ncuflow.summary(path, top=-1), "top", ["summary", "--top", "-1"]),
    (lambda path: ncuflow.summary(path, top=0), "top", ["summary", "--top", "0"]),
    (lambda path: ncuflow.launches(path, jobs=-1), "jobs", ["classify", "--jobs", "-1"]),
    (lambda path: ncuflow.classify(path, threshold=float("nan")), "threshold", ["classify", "--threshold", "nan"]),
    (lambda path: ncuflow.roofline(path, per="kernels"), "per", ["roofline", "--per", "kernels", "-o", "x.png"]),
])
def test_the_api_refuses_what_the_command_line_refuses(corpus_dir: Path, call: object, option: str,
                                                       argv: list[str]) -> None:
    report = corpus_dir / SMALL
    with pytest.raises(UsageError, match=rf"^{option} .* is out of range"):
        call(report)  # type: ignore[operator]
    ran = run_limited([*argv, str(report)], case="api-arguments")
    SEEN["api_arguments_refused"] += 1
    assert ran.code == 2 and not ran.traceback, ran.output
