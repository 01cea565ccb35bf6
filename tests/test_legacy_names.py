"""ncu 2019.x names in the chains: the pairs NVIDIA's own sections state, read off a legacy report.

A legacy ``.nsight-cuprof-report`` carries the sections it was collected with; each defines a
figure by its 2019.x name, a label, an arch filter, and the later name as an option
(``0a len NAME 12 len LABEL [32 len FILTER] 3a len 0a len LATER``). The table of
``ncuflow.read.legacy_names`` must be exactly those pairs whose later name a chain reads.
"""

from __future__ import annotations

import re
from pathlib import Path

import ncu_report

from ncuflow.analyze.classify import classify
from ncuflow.read.extract import iter_launches
from ncuflow.read.legacy_names import LEGACY_NAMES
from ncuflow.read.metrics import FIELDS

LEGACY_REPORT = "jhiems__PMKID_Brute-Force__profile.nsight-cuprof-report"  # GTX 1080, ncu 2019.x
_DEFINITION = re.compile(rb"\x0a([\x01-\x7f])([a-z0-9]+__[a-z0-9_]+)\x12([\x01-\x7f])")
_LATER = re.compile(rb"[a-z0-9]+__[a-z0-9_.]+")


def section_pairs(data: bytes) -> dict[str, str]:
    """Later name → 2019.x name, for every metric a section of the file defines by both."""
    pairs: dict[str, str] = {}
    for match in _DEFINITION.finditer(data):
        if len(match.group(2)) != match.group(1)[0]:
            continue
        at = match.end() + match.group(3)[0]
        if not re.fullmatch(rb"[\x20-\x7e]+", data[match.end():at]):  # a label
            continue
        if data[at:at + 1] == b"\x32":  # the arch filter of the 2019.x name
            at += 2 + data[at + 1]
        if data[at:at + 1] != b"\x3a" or data[at + 2:at + 3] != b"\x0a":
            continue
        later = data[at + 4:at + 4 + data[at + 3]]
        if _LATER.fullmatch(later) and later != match.group(2):
            pairs[later.decode()] = match.group(2).decode()
    return pairs


def _single_source_names() -> set[str]:
    return {source.metrics[0] for field in FIELDS for source in field.sources if len(source.metrics) == 1}


def test_the_table_is_nvidias_pairs_for_every_name_a_chain_reads(corpus_dir: Path) -> None:
    pairs = section_pairs((corpus_dir / LEGACY_REPORT).read_bytes())
    assert pairs["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == "sm__sol_pct"  # the parser reads them
    read = _single_source_names()
    assert {later: older for later, older in pairs.items() if later in read} == dict(LEGACY_NAMES)


def test_every_chain_reads_its_legacy_names_after_the_later_ones() -> None:
    for field in FIELDS:
        names = [source.metrics[0] for source in field.sources if len(source.metrics) == 1]
        for later, older in LEGACY_NAMES.items():
            if later in names:
                assert older in names and names.index(older) > names.index(later), field.name


def test_a_legacy_report_reads_its_figures_and_gets_a_verdict(corpus_dir: Path) -> None:
    # Before: every term missing, "unknown", and "NVIDIA's figures are not in the report".
    path = corpus_dir / LEGACY_REPORT
    (launch,) = list(iter_launches(path))
    action = ncu_report.load_report(str(path)).range_by_idx(0).action_by_idx(0)
    held = {older for older in LEGACY_NAMES.values() if action.metric_by_name(older) is not None}
    assert {"fbpa__sol_pct", "sm__sol_pct", "smsp__inst_executed_sum"} <= held
    for field in FIELDS:
        source = launch.provenance.get(field.name)
        if source in held:
            assert launch.values[field.name] == action.metric_by_name(source).as_double(), field.name
    assert {launch.provenance[name] for name in ("dram_throughput_pct", "sm_throughput_pct",
                                                  "memory_throughput_pct", "inst_executed")} <= held
    verdict = classify(launch)
    assert verdict.term("dram").source == "fbpa__sol_pct"
    assert verdict.bound != "unknown" and verdict.figures is not None
