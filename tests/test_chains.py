"""An alias chain links only metrics that count the same events: every pair, every shared report.

Two sources of one field that both resolve in a report must give the same number (counts
exactly, rates to rounding): otherwise two collections of one kernel, resolved through
different sources, would show a change of work that is a change of counter. The pairs
that once broke this (hardware against SASS-patched load counts, lts__t_sectors against
lts__throughput, the GPC clock against the SM clock, the driver's shared memory) are
separate fields now.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from pathlib import Path

from ncuflow.read.extract import iter_report
from ncuflow.read.metrics import FIELDS
from ncuflow.read.reportfile import find_reports

H200 = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "h200"
RELATIVE = 1e-6  # the rounding of a stored float; counts agree exactly


def _source_values(action, field):  # type: ignore[no-untyped-def]
    for source in field.sources:
        raw = [action.number(metric) for metric in source.metrics]
        if any(value is None or not math.isfinite(value) for value in raw):
            continue
        value = raw[0] * source.scale if source.op == "value" else source.combine(tuple(raw))
        if value is not None and (field.sanity != "positive" or value > 0):  # as ``resolve`` passes them over
            yield source.label(), value


def test_every_pair_of_sources_of_a_field_agrees_on_every_report_holding_both(corpus_dir: Path) -> None:
    compared: Counter[str] = Counter()
    disagreements: list[str] = []
    for report in find_reports([corpus_dir, H200]):
        for _, action_index, action in iter_report(report):
            for field in FIELDS:
                values = list(_source_values(action, field))
                for (first, a), (second, b) in itertools.combinations(values, 2):
                    compared[field.name] += 1
                    exact = field.is_count and not any(mark in first + second for mark in ("/", "per_second"))
                    if (a != b) if exact else abs(a - b) > RELATIVE * max(abs(a), abs(b)):
                        disagreements.append(f"{report.name} #{action_index} {field.name}: {first} = {a:,.9g}, "
                                             f"{second} = {b:,.9g}")
    assert not disagreements, "\n".join(disagreements[:20])
    # the check has teeth: the chains that have several sources are compared on real data
    assert compared["dram_bytes_read"] >= 150 and compared["dram_bytes"] >= 150
    assert compared["inst_executed"] >= 90 and compared["issue_active_pct"] >= 90
    assert compared["ldg_sass_inst"] >= 100 and compared["dram_rated_bw"] >= 100


def test_hardware_and_sass_load_counts_are_separate_fields(corpus_dir: Path) -> None:
    """The H200 paged decode counts 16,384 LDG in hardware and 12,288 SASS-patched; the A100
    cutlass GEMM 21,504 LDGSTS against 16,128: different events, so different fields."""
    from ncuflow.read.extract import iter_launches

    paged = next(H200.glob("paged_decode/*page16*/*/report.ncu-rep"))
    launch = next(iter(iter_launches(paged)))
    assert launch.values["ldg_inst"] == 16384 and launch.values["ldg_sass_inst"] == 12288
    assert launch.provenance["ldg_inst"] == "smsp__inst_executed_op_global_ld.sum"
    cutlass = next(iter(iter_launches(corpus_dir / "panjd123__cutlass__report.ncu-rep")))
    assert cutlass.values["ldgsts_sass_inst"] == 16128 and cutlass.values["ldg_sass_inst"] == 0
