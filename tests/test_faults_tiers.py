"""Fault injection, what a report's reader trusts (issue 31): a tier-2 escalation of other
launches, and NVIDIA's reader crashing on a file.

- A ``.tier2`` run holding another GPU's report (or other kernels) filled tier 1's launches with
  its L2 hit rate, sectors per request and loads, silently; only the launch count was
  compared and ``store check`` said nothing. Now the tiers merge only where each pair is one
  launch seen twice (kernel, device, launch configuration); otherwise a warning, tier 1 alone,
  and ``store check`` names the run.
- A report whose length field makes ``ncu_report`` abort (SIGABRT) made ``export
  --metrics-long`` print "interrupted." and exit 130 without naming the file (the pool's
  warm-up read it in the worker server), and ``classify --reader ncu_report --jobs 0`` abort
  with 134. Now it is one paragraph naming the file.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from analysis.report_edit import drop_metrics, entry_length_set, rename_kernels
from ncuflow import store
from ncuflow.profile.sweep import parse_sweep
from ncuflow.store.manifest import Escalation, Provenance
from ncuflow.store.tiers import tier2_root
from tests.hostile import FIGURES, figures_line, run_limited

H100 = "AlpriElse__cs599k__rms_norm_matrix_ncu-reports_2025-04-21_v1.ncu-rep"  # 3 launches, DRAM bytes
T4 = "Syswea__cuda-fused-linear-layer__profile_report.ncu-rep"  # 3 launches on a T4, other kernels
SMALL = "yzwang2000__cudaCode__profile.ncu-rep"
SEEN: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    print(figures_line("tier and reader figures", SEEN), figures_line("fault suite so far", FIGURES))


def _escalated(root: Path, tier1_report: Path, tier2_report: Path) -> store.RunRecord:
    spec = parse_sweep({"cell": "copy_bandwidth", "replicas": 1, "axes": {"mib": [16]}}).points[0].spec
    first = store.write_run(root, spec, tier1_report,
                            provenance=Provenance(escalation=Escalation(tier=1, undecided=3, launches=3)))
    store.write_run(tier2_root(root), spec, tier2_report,
                    provenance=Provenance(escalation=Escalation(tier=2, of_run=first.run_id)))
    return first


def _dram_bytes(root: Path) -> list[object]:
    """Per launch of the store, whether its DRAM bytes are measured (tier 1 holds none)."""
    ran = run_limited(["classify", str(root), "--json"], case="tier2-read")
    assert ran.code == 0 and not ran.traceback, ran.output[-2000:]
    return [True if "dram_bytes" not in row["missing"] else None for row in json.loads(ran.stdout)]


@pytest.mark.parametrize("tier2", ["another GPU", "other kernels", "same launches"])
def test_a_tier_two_run_merges_only_the_same_launches_on_the_same_device(corpus_dir: Path, tmp_path: Path,
                                                                         tier2: str) -> None:
    tier1 = tmp_path / "tier1.ncu-rep"
    drop_metrics(corpus_dir / H100, tier1, lambda name: name.startswith("dram__"))  # tier 1: no DRAM bytes
    second = tmp_path / "tier2.ncu-rep"
    if tier2 == "another GPU":  # the T4's launches named as the H100's: only the device differs
        rename_kernels(corpus_dir / T4, second, lambda index, old: "rms_norm_matrix_kernel",
                       mangled="_Z22rms_norm_matrix_kernelPfS_S_iif")
    elif tier2 == "other kernels":
        shutil.copyfile(corpus_dir / T4, second)
    else:
        shutil.copyfile(corpus_dir / H100, second)
    root = tmp_path / "store"
    run = _escalated(root, tier1, second)
    rows = _dram_bytes(root)
    checked = run_limited(["store", "check", str(root)], case="tier2-store-check")
    SEEN["tier2_cases"] += 1
    assert not checked.traceback, checked.output
    if tier2 == "same launches":
        assert all(value is not None for value in rows)  # merged: tier 2's DRAM bytes
        assert checked.code == 0 and "tier2\t" not in checked.stdout
        return
    SEEN["mismatched_tiers_merged"] += sum(value is not None for value in rows)
    assert rows == [None, None, None]  # tier 1 alone
    assert checked.code == 1 and f"tier2\t{run.path}\t" in checked.stdout, checked.output
    assert ("Tesla T4" in checked.stdout) == (tier2 == "another GPU")
    assert "1 whose tier-2 escalation is not of the same launches or device" in checked.stderr
    warned = run_limited(["classify", str(root)], case="tier2-warning")
    assert "tier 1 is used alone" in warned.stderr, warned.stderr


@pytest.mark.parametrize("argv", [
    ["export", "--metrics-long", "-o", "OUT/x.parquet"], ["classify", "--reader", "ncu_report"],
    ["classify", "--reader", "ncu_report", "--jobs", "0"], ["classify", "--reader", "ncu_report", "--jobs", "2"],
])
def test_a_report_that_crashes_ncu_report_is_a_report_error_naming_it(corpus_dir: Path, tmp_path: Path,
                                                                      argv: list[str]) -> None:
    crashing = tmp_path / "crashing.ncu-rep"
    entry_length_set(corpus_dir / SMALL, crashing, block=2, entry=0, length=0x10000000)
    other = corpus_dir / "AveryClapp__ESMM-Research__profile.ncu-rep"
    for reports in ([crashing], [crashing, other]):
        command = [a.replace("OUT", str(tmp_path)) for a in argv] + [str(r) for r in reports]
        ran = run_limited(command, case="ncu-report-crash")
        SEEN["reader_crash_cases"] += 1
        SEEN["interrupted_or_aborted"] += ran.code in (130, 134, -6) or "interrupted" in ran.stderr
        assert not ran.traceback and ran.code not in (130, 134, -6), (ran.code, ran.output[-2000:])
        assert "interrupted" not in ran.stderr
        assert ran.code == 0 or (ran.paragraph() and str(crashing) in ran.stderr), (ran.code, ran.output[-2000:])


# Every path where ncu_report reads in ncuflow's own process, each a script that reads ``sys.argv[1]``:
# the CLI's (``classify --as-if`` reads its reports here, not in workers) and the library's.
_IN_PROCESS = {
    "classify --as-if": None,
    "load_context": "from ncuflow.read.reportfile import load_context; load_context(path)",
    "read_launches": "from ncuflow.read.extract import read_launches\n"
                     "from ncuflow.read.readers import reading_with\n"
                     "with reading_with('ncu_report'):\n    read_launches(path)",
    "read_report_collection": "from ncuflow.profile.passes import read_report_collection\n"
                              "from ncuflow.read.readers import reading_with\n"
                              "with reading_with('ncu_report'):\n    read_report_collection(path)",
}


def _in_process(path_name: str, report: Path) -> list[str]:
    import sys

    script = _IN_PROCESS[path_name]
    if script is None:
        return [sys.executable, "-m", "ncuflow", "classify", "--reader", "ncu_report", "--as-if", "decisive",
                str(report)]
    return [sys.executable, "-c", "import sys\nfrom pathlib import Path\npath = Path(sys.argv[1])\n"
            "from ncuflow.errors import ReportError\ntry:\n" + "".join(f"    {line}\n" for line in script.splitlines())
            + "except ReportError as error:\n    print(f'ncuflow: {error}', file=sys.stderr)\n    sys.exit(2)\n",
            str(report)]


@pytest.mark.parametrize("path_name", list(_IN_PROCESS))
def test_ncu_report_in_this_process_is_not_handed_a_length_past_the_file(corpus_dir: Path, tmp_path: Path,
                                                                          path_name: str) -> None:
    """An entry's length pointing past the file (the blocks' framing whole) makes ncu_report abort its
    process (SIGABRT, 134): where it reads in ncuflow's own process that was ncuflow's end with no word
    said; now the framing walk refuses the file first, one ``ncuflow:`` paragraph naming it."""
    from ncuflow.read.framing import check_framing

    crafted = tmp_path / "past.ncu-rep"
    size, block = (corpus_dir / SMALL).stat().st_size, 2  # an entry past byte 0 that long runs past the end
    at = entry_length_set(corpus_dir / SMALL, crafted, block=block, entry=0, length=size)
    assert check_framing(crafted).verdict == "whole"  # only the entry's length is wrong
    ran = run_limited([], command=_in_process(path_name, crafted), case=f"ncu-report-in-process-{path_name}")
    SEEN["in_process_crash_cases"] += 1
    assert ran.code == 2 and ran.paragraph() and str(crafted) in ran.stderr, (ran.code, ran.output[-2000:])
    assert f"the entry at byte {at} of block {block + 1} is {size:,} bytes long" in ran.stderr  # framing counts from 1
    assert len(ran.stderr.strip().splitlines()) == 1


def test_ncu_report_still_reads_a_report_cut_short_in_this_process(corpus_dir: Path, tmp_path: Path) -> None:
    """A file cut short (its last block unfinished) is left to ncu_report, which reads the whole blocks
    before the cut: only a length inside whole blocks is refused before it."""
    from ncuflow.read.framing import check_framing
    from ncuflow.read.reportfile import import_ncu_report, load_context

    whole = corpus_dir / SMALL
    cut = tmp_path / "cut.ncu-rep"
    cut.write_bytes(whole.read_bytes()[:-10])
    assert check_framing(cut).verdict == "cut"
    nvidia = import_ncu_report().load_report(str(cut))
    assert load_context(cut).num_ranges() == nvidia.num_ranges() > 0
