"""A reading worker's heap made resident in bulk: the pages are there, and reading reuses them."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ncuflow.read.heap import PREFAULT_ENV, available_memory, bounded_request
from ncuflow.read.pool import map_reports, usable_cores
from ncuflow.read.reportfile import find_reports

REPO = Path(__file__).resolve().parent.parent

# Each measurement runs in a fresh process: making the heap resident cannot be undone.
_PROBE = r"""
import json, os, resource, sys
from pathlib import Path
from ncuflow.read.extract import read_launches
from ncuflow.read.heap import make_heap_resident

reports = [Path(p) for p in sys.argv[2:]]
read_launches(reports[0])  # ncu_report's one-time set-up, outside the measurement
def resident() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
before = resident()
made = make_heap_resident(int(sys.argv[1]))
after = resident()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
launches = [sorted(launch.values.items()) for report in reports[1:] for launch in read_launches(report)]
print(json.dumps({"made": made, "grew": after - before, "launches": launches,
                  "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults}))
"""


def _probe(prefault_bytes: int, reports: list[Path], **env: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(prefault_bytes), *map(str, reports)],
        capture_output=True, text=True, check=True, cwd=REPO,
        env={**os.environ, **env},
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def _kernel_has_populate_write() -> bool:
    major, minor = (int(part) for part in platform.release().split(".")[:2])
    return (major, minor) >= (5, 14)


@pytest.fixture(scope="module")
def sixteen_mib_of_reports(corpus_dir: Path) -> list[Path]:
    chosen: list[Path] = []
    for report in sorted(find_reports([corpus_dir]), key=lambda r: r.stat().st_size):
        if sum(r.stat().st_size for r in chosen) > 16 * 2**20:
            break
        chosen.append(report)
    return chosen


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="the bulk heap needs Linux and glibc")
def test_reading_after_the_heap_is_made_resident_faults_far_less_and_reads_the_same(
    sixteen_mib_of_reports: list[Path],
) -> None:
    report_bytes = sum(r.stat().st_size for r in sixteen_mib_of_reports[1:])
    plain = _probe(0, sixteen_mib_of_reports)
    bulk = _probe(8 * report_bytes, sixteen_mib_of_reports)
    assert plain["made"] == 0 and plain["faults"] > report_bytes // 4096  # ncu_report grows by several x
    assert bulk["launches"] == plain["launches"] and len(plain["launches"]) > 100
    if not _kernel_has_populate_write():
        assert bulk["made"] == 0  # Linux before 5.14: nothing is done, reading is unchanged
        return
    assert bulk["made"] >= 7 * report_bytes  # whole 8 MiB chunks
    assert bulk["grew"] >= 0.9 * bulk["made"]  # the pages are resident before any report is read
    assert bulk["faults"] < plain["faults"] / 3  # ...and the reading lands in them


def test_it_can_be_turned_off(sixteen_mib_of_reports: list[Path]) -> None:
    off = _probe(64 * 2**20, sixteen_mib_of_reports[:2], **{PREFAULT_ENV: "0"})
    assert off["made"] == 0 and off["grew"] < 8 * 2**20


def test_less_than_one_chunk_is_not_worth_a_call(sixteen_mib_of_reports: list[Path]) -> None:
    assert _probe(4 * 2**20, sixteen_mib_of_reports[:2])["made"] == 0


def resident_mib(report: Path) -> tuple[int, int]:
    with open("/proc/self/statm") as handle:
        return os.getpid(), int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20


@pytest.mark.skipif(usable_cores() < 2 or not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc"
                    or not _kernel_has_populate_write(), reason="needs a spare core, Linux 5.14+ and glibc")
def test_the_pool_makes_heaps_resident_only_on_a_spare_core(corpus_dir: Path) -> None:
    reports = find_reports([corpus_dir])  # 48 MiB: the first worker expects its whole 16 MiB budget

    def first_worker_resident(jobs: int) -> int:
        results = list(map_reports(resident_mib, reports, jobs=jobs))
        return next(mib for pid, mib in results if pid != os.getpid())

    spare = first_worker_resident(1)
    busy = first_worker_resident(usable_cores())
    assert spare - busy >= 100  # ~8 x 16 MiB, resident before the worker's first report


def test_a_request_never_takes_more_than_a_quarter_of_the_available_memory() -> None:
    available = available_memory()
    assert available is not None and available > 2**30  # read from this machine's /proc/meminfo
    assert bounded_request(2**50, available) == available // 4  # NCUFLOW_WORKER_BYTES set huge
    assert bounded_request(128 * 2**20, available) == 128 * 2**20
    assert bounded_request(128 * 2**20, None) == 0  # unknown: nothing
