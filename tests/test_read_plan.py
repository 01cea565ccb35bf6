"""A report's read plan (issue 33): its fields resolved once per metric list, each launch read by
index. What a plan gives must be what each field's alias chain gives by name, whatever was
read before in the process, on every shared report."""

from __future__ import annotations

import contextlib
import random
import struct
import subprocess
import sys
import warnings
from pathlib import Path
from typing import NamedTuple

import pytest

from ncuflow.read.chains import Source, resolve, single_sources
from ncuflow.read.extract import iter_report, read_launches, read_plan
from ncuflow.read.layout import layout_of, value, varint_bytes
from ncuflow.read.metrics import FIELDS
from ncuflow.read.plan import plan_reading, resolve_planned
from ncuflow.read.reportfile import find_reports


def test_every_planned_field_is_what_its_chain_gives_by_name(corpus_dir: Path) -> None:
    """On every launch of the corpus: the value and provenance of each field through the plan
    equal ``chains.resolve`` over the launch's metrics looked up by name."""
    checked = 0
    for report in find_reports([corpus_dir]):
        for _range, _index, action in iter_report(report):
            action.settle()
            plan = read_plan(action)
            values, provenance, _missing = resolve_planned(plan, action.number_at)
            for field in FIELDS:
                assert (values[field.name], provenance.get(field.name)) == resolve(field, action.number), (
                    report.name, field.name)
            checked += 1
    assert checked >= 469


def _fresh_process_launches(reports: list[Path]) -> str:
    code = ("import sys\nfrom ncuflow.read.extract import read_launches\n"
            "print(repr([read_launches(p) for p in sys.argv[1:]]))")
    return subprocess.run([sys.executable, "-W", "ignore", "-c", code, *map(str, reports)], capture_output=True,
                          text=True, check=True, timeout=300).stdout


def test_what_was_read_before_never_changes_a_launch(corpus_dir: Path, tmp_path: Path) -> None:
    """Layouts, plans and string tables are kept across reports: reading the corpus in another
    order, between copies whose string tables are corrupted (the same metric lists under other
    names), gives every report's launches as a fresh process reads them."""
    reports = find_reports([corpus_dir])
    noise = random.Random(33)
    spoiled = []
    for index, report in enumerate(reports):
        data = bytearray(report.read_bytes())
        for _ in range(30):  # bytes early in the file: the header blocks and their string tables
            data[noise.randrange(8, min(len(data), 200_000))] ^= 0x20
        spoiled.append(tmp_path / f"{index:02d}-{report.name}")
        spoiled[-1].write_bytes(bytes(data))
    for order in (list(reversed(reports)), [r for pair in zip(spoiled, reports, strict=True) for r in pair]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for report in order:
                with contextlib.suppress(Exception):  # a spoiled copy may be unreadable: what follows matters
                    read_launches(report)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert repr([read_launches(r) for r in reports]) == _fresh_process_launches(reports).strip()


class _Row(NamedTuple):
    """A field as another table might hold it: the plan asks for a name and an alias chain only."""

    name: str
    sources: tuple[Source, ...]
    unit: str = "byte"
    positive: bool = False


def test_a_plan_takes_any_table_of_named_chains() -> None:
    """The plan's interface to the fields is narrow (``ChainField``): any row with a name and an
    ordered chain of sources is planned to (field, metric indices, unit conversion, provenance)."""
    table = (
        _Row("bytes", (*single_sources("a.sum"), *single_sources("b.sum", scale=32.0))),
        _Row("ratio", (Source(("a.sum", "c.sum"), "ratio"),)),
        _Row("absent", single_sources("z.sum")),
        _Row("peak", (*single_sources("x"), *single_sources("c.sum")), positive=True),
    )
    metrics = layout_of(("c.sum", "b.sum", "x"))
    plan = plan_reading(metrics, table)
    by_name = {field.name: field for field in plan.fields}
    assert [(s.indices, s.source.scale, s.source.text) for s in by_name["bytes"].sources] == [((1,), 32.0, "b.sum × 32")]
    assert by_name["ratio"].sources == () and by_name["absent"].sources == ()  # a.sum is lacking: nothing to read
    assert plan.lacking == {"a.sum", "z.sum"}
    raw = {0: 4.0, 1: 3.0, 2: 0.0}
    values, provenance, missing = resolve_planned(plan, raw.get)
    # a peak of 0 is passed over for the next source, as chains.resolve does
    assert values == {"bytes": 96.0, "ratio": None, "absent": None, "peak": 4.0}
    assert provenance == {"bytes": "b.sum × 32", "peak": "c.sum"}
    assert missing == ["ratio", "absent"]


@pytest.mark.parametrize("instances", [0, 1, 5_000])
def test_a_records_per_instance_values_are_not_looked_at(instances: int) -> None:
    """A metric record as ncu writes it: its name id, one value, then its per-instance values
    (thousands on a full set) and ncu's field 4; the value is read whatever follows it."""
    per_instance = b"".join(b"\x1a\x0b\x0a\x09\x19" + bytes(8) for _ in range(instances))
    for body, expected in ((b"\x19" + struct.pack("<d", 1.5), 1.5), (b"\x28" + varint_bytes(300), 300),
                           (b"\x20" + varint_bytes(7), 7)):
        record = b"\x08" + varint_bytes(1234) + b"\x12" + bytes([len(body)]) + body + per_instance + b" \x00"
        assert value(record, 3) == expected


def test_the_benchmarks_pruned_launches_are_the_same_work(corpus_dir: Path, tmp_path: Path) -> None:
    """The per-launch benchmark compares ~2,000-metric launches with the same launches rewritten
    to carry 300 metrics (``analysis/bench_extraction.py``'s ``pruned_to``): that is what carrying
    the metrics costs only if ncuflow reads the same of them. Every field, its source, the
    breakdown and the verdict's inputs are equal; the rewritten launches carry 300 metrics."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
    import bench_extraction

    reports = find_reports([corpus_dir])
    full_sets = bench_extraction.reports_by_metrics(reports, 1_800, 2_600)
    assert full_sets, "the corpus holds no launch of ~2,000 metrics"
    pruned = bench_extraction.pruned_to(full_sets, bench_extraction.PRUNED_METRICS, tmp_path)
    for original, rewritten in zip(full_sets, pruned, strict=True):
        assert len(bench_extraction._first_action_names(rewritten)) == bench_extraction.PRUNED_METRICS
        before, after = read_launches(original), read_launches(rewritten)
        assert len(before) == len(after) > 0
        for one, other in zip(before, after, strict=True):
            assert (one.kernel, one.values, one.provenance, one.missing, one.breakdown, one.device) == (
                other.kernel, other.values, other.provenance, other.missing, other.breakdown, other.device)
