"""Fault injection, user regular expressions (issue 31): every pattern is searched in linear time
(RE2, ``ncuflow.files.patterns``), and one RE2 cannot search so is refused where it enters.

Before: ``--kernel '^(.+)+@$'`` ran Python's backtracking ``re`` over 30-character kernel names
and did not end, and the same pattern in a sweep's ``[ncu] kernel`` (or a manifest) hung
every reader of the store while ``store check`` called it healthy. Each case runs the real
command line under the fault suite's limits (``tests.hostile.run_limited``) on a report of
the corpus whose kernel names were rewritten (``analysis.report_edit``).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from analysis.report_edit import rename_kernels
from ncuflow import store
from ncuflow.profile.sweep import parse_sweep
from ncuflow.store import MANIFEST_NAME
from ncuflow.store.collection import NcuOptions
from ncuflow.store.record import Collection
from tests.hostile import FAKE_NCU, FIGURES, fake_ncu_env, figures_line, run_limited

SMALL = "yzwang2000__cudaCode__profile.ncu-rep"
CATASTROPHIC = "^(.+)+@$"  # Python's re: ~0.4 s on a 22-character name, doubling with each character
SEEN: Counter[str] = Counter()
# Names a backtracking search of CATASTROPHIC never ends on: 30 characters, and 50,000.
NAME_LENGTHS = (30, 50_000)
SECONDS = 20.0  # each case: a result or a paragraph well within this (the fault suite's limit is 60 s)


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    print(figures_line("kernel pattern figures", SEEN), figures_line("fault suite so far", FIGURES))


@pytest.fixture(scope="module")
def long_names(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small report with its two launches named by 30 and 50,000 characters (no '@')."""
    report = tmp_path_factory.mktemp("patterns") / "long-names.ncu-rep"
    rename_kernels(corpus_dir / SMALL, report, lambda index, old: "k" * NAME_LENGTHS[index % 2])
    return report


def _bounded(ran: object, codes: tuple[int, ...]) -> None:
    from tests.hostile import Ran

    assert isinstance(ran, Ran)
    SEEN["pattern_cases"] += 1
    SEEN["pattern_hangs"] += ran.timed_out
    assert not ran.traceback and not ran.timed_out and ran.seconds < SECONDS, (ran.seconds, ran.output[-2000:])
    assert ran.code in codes, (ran.code, ran.output[-2000:])
    SEEN["max_pattern_seconds_x100"] = max(SEEN["max_pattern_seconds_x100"], int(ran.seconds * 100))


@pytest.mark.parametrize("command", [
    ["classify"], ["summary"], ["stability"], ["export", "-o", "OUT/x.parquet"], ["roofline", "-o", "OUT/r.png"],
])
def test_a_catastrophic_kernel_pattern_is_searched_in_linear_time(long_names: Path, tmp_path: Path,
                                                                  command: list[str]) -> None:
    argv = [a.replace("OUT", str(tmp_path)) for a in command] + ["--kernel", CATASTROPHIC, str(long_names)]
    ran = run_limited(argv, case="pattern-catastrophic")
    _bounded(ran, codes=(0, 2))
    assert ran.code == 0 or "ncuflow: " in ran.stderr  # nothing matches: one paragraph saying so
    matches = run_limited([*argv[:-3], "--kernel", "^k{1000}k*$", str(long_names)], case="pattern-matching")
    _bounded(matches, codes=(0,))  # and a pattern that matches the 50,000-character name selects it


@pytest.mark.parametrize("pattern", [r"(a)\1", "(?<=a)b", "(?P<n>a)(?P=n)", "x" * 5000])
def test_a_pattern_ncuflow_cannot_search_in_linear_time_is_refused_where_it_enters(
        corpus_dir: Path, tmp_path: Path, pattern: str) -> None:
    calls = tmp_path / "calls.jsonl"
    env = fake_ncu_env(corpus_dir / SMALL, calls)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'cell = "copy_bandwidth"\n[axes]\nmib = [16]\n[ncu]\nkernel = {json.dumps(pattern)}\n')
    for argv in (["classify", "--kernel", pattern, str(corpus_dir / SMALL)],
                 ["profile", "copy_bandwidth", "--kernel", pattern, "--store", str(tmp_path / "s"), "--ncu", str(FAKE_NCU)],
                 ["sweep", str(sweep), "--store", str(tmp_path / "s"), "--ncu", str(FAKE_NCU)]):
        ran = run_limited(argv, env=env, case="pattern-refused")
        SEEN["pattern_cases"] += 1
        assert ran.paragraph() and "kernel" in ran.stderr, ran.output[-2000:]
        assert "linear" in ran.stderr or "characters long" in ran.stderr, ran.stderr
    assert not calls.exists() and not (tmp_path / "s").exists()  # refused before any ncu, nothing stored


def _store_with_pattern(root: Path, report: Path, pattern: str) -> store.RunRecord:
    plan = parse_sweep({"cell": "copy_bandwidth", "replicas": 1, "axes": {"mib": [16]}})
    return store.write_run(root, plan.points[0].spec, report,
                           collection=Collection(options=NcuOptions(kernel_regex=pattern)))


def test_a_catastrophic_pattern_in_a_sweep_and_its_manifests_reads_in_linear_time(
        corpus_dir: Path, long_names: Path, tmp_path: Path) -> None:
    """Swept with the pattern (the fake ncu writes the report of long names), then every reader."""
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'cell = "copy_bandwidth"\nreplicas = 1\n[axes]\nmib = [16, 32]\n[ncu]\nkernel = "{CATASTROPHIC}"\n')
    root = tmp_path / "store"
    swept = run_limited(["sweep", str(sweep), "--store", str(root), "--ncu", str(FAKE_NCU)],
                        env=fake_ncu_env(long_names, tmp_path / "calls.jsonl"), case="pattern-sweep")
    _bounded(swept, codes=(0,))
    runs = list(store.iter_runs(root))
    assert len(runs) == 2 and all(r.manifest.collection.options.kernel_regex == CATASTROPHIC for r in runs)
    for argv, codes in ((["classify", str(root)], (0, 2)), (["stability", str(root)], (0, 2)),
                        (["store", "check", str(root)], (0,)), (["export", str(root), "-o", str(tmp_path / "x.parquet")], (0, 2)),
                        (["compare", str(root), str(root)], (0, 2)), (["report", str(root), "-o", str(tmp_path / "rep")], (0, 2))):
        ran = run_limited(argv, case="pattern-stored")
        _bounded(ran, codes=codes)
        assert "2 complete runs, 0 damaged" in ran.output if argv[0] == "store" else True


def test_a_stored_pattern_ncuflow_cannot_search_is_flagged_by_store_check(corpus_dir: Path, tmp_path: Path) -> None:
    """A manifest edited to hold a backreference: a damaged run, named by store check and every reader."""
    root = tmp_path / "store"
    record = _store_with_pattern(root, corpus_dir / SMALL, "gemm")
    data = json.loads((record.path / MANIFEST_NAME).read_text())
    data["collection"]["options"]["kernel_regex"] = r"(a)\1"
    (record.path / MANIFEST_NAME).write_text(json.dumps(data))
    checked = run_limited(["store", "check", str(root)], case="pattern-stored-refused")
    _bounded(checked, codes=(1,))
    assert str(record.path) in checked.stdout and "kernel regex" in checked.stdout and "linear" in checked.stdout
    read = run_limited(["classify", str(root)], case="pattern-stored-refused")
    _bounded(read, codes=(2,))
    assert "damaged run" in read.stderr and "kernel regex" in read.stderr


def test_without_google_re2_the_profiling_path_still_works(corpus_dir: Path, tmp_path: Path) -> None:
    """The GPU host has no network (and no polars): where google-re2 is not installed, a pattern is
    checked and searched by Python's re, and doctor says so."""
    code = ("import sys; sys.modules['re2'] = None; sys.modules['polars'] = None\n"
            "from ncuflow.cli import main\nmain(sys.argv[1:])")
    for argv, words in ((["profile", "copy_bandwidth:mib=16", "--kernel", "copy.*", "--dry-run", "--store",
                          str(tmp_path / "s"), "--ncu", str(FAKE_NCU)], "regex:copy.*"),
                        (["classify", "--kernel", "kernel_A", str(corpus_dir / SMALL)], "kernel_A"),
                        (["doctor"], "no time bound")):
        ran = run_limited(argv, command=[sys.executable, "-c", code, *argv], case="pattern-without-re2")
        SEEN["pattern_cases"] += 1
        assert not ran.traceback and words in ran.output, ran.output[-2000:]
