"""The pass rule and the tiered collection, measured on the corpus of public reports.

Prints where the recorded-vs-predicted rule fails, and the as-if agreement and cost,
so a run with -s shows the numbers docs/passes.md quotes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ncuflow.analyze.classify import DEFAULT_THRESHOLD, classify
from ncuflow.profile import asif, passes
from ncuflow.read.extract import iter_launches
from ncuflow.read.metrics import decisive_metric_names
from ncuflow.read.reportfile import find_reports
from tests.corpus import full_set_reports
from tests.test_passes import perfworks_or_skip


@pytest.fixture(scope="module")
def surveyed(corpus_dir: Path) -> list[tuple[passes.ReportCollection, passes.PassPrediction | None, bool]]:
    """Every corpus report: what it collected, the prediction for it, and whether it is a full set."""
    library = perfworks_or_skip()
    full_sets = set(full_set_reports(corpus_dir))  # as SOURCES.tsv records how each was collected
    rows: list[tuple[passes.ReportCollection, passes.PassPrediction | None, bool]] = []
    for path in find_reports([corpus_dir]):
        info = passes.read_report_collection(path)
        if info.chip is None or info.chip.upper() not in library.chips():
            rows.append((info, None, False))
            continue
        with library.evaluator(info.chip) as evaluator:
            prediction = passes.predict(evaluator, info.metrics, "report")
        rows.append((info, prediction, not info.counter_only and path in full_sets))
    return rows


def test_every_modern_report_maps_to_a_chip(surveyed: list[tuple[passes.ReportCollection, passes.PassPrediction | None, bool]]) -> None:
    unmapped = [info.report for info, prediction, _ in surveyed if prediction is None]
    # Only chips Perfworks no longer models (Pascal, Volta, Xavier) are left out.
    assert len(unmapped) <= 3, unmapped
    for info, prediction, _ in surveyed:
        if prediction is not None and info.device:
            by_name = passes.chip_from_gpu_name(info.device)
            if by_name is not None and info.chip is not None:
                assert by_name[:2] == info.chip[:2], (info.device, info.chip)


def test_predicted_within_one_of_recorded_on_counter_only_reports(
    surveyed: list[tuple[passes.ReportCollection, passes.PassPrediction | None, bool]],
) -> None:
    rows = [(info, p) for info, p, _ in surveyed if info.counter_only and p is not None and info.recorded_passes is not None]
    assert len(rows) >= 10
    within = 0
    for info, prediction in rows:
        expected = prediction.expected_recorded(info.ncu_version, info.warmup_passes)
        delta = info.recorded_passes - expected if info.recorded_passes is not None else 0
        within += abs(delta) <= 1
        if delta:
            print(f"rule off by {delta:+d}: {Path(info.report).name} ({info.chip}, ncu {info.ncu_version}): "
                  f"predicted {prediction.counter_passes}+{prediction.sass_passes}, expected {expected}, "
                  f"recorded {info.recorded_passes}")
    print(f"predicted vs recorded within 1 on {within}/{len(rows)} counter-only reports")
    assert within >= 0.95 * len(rows)


def test_full_sets_record_more_than_perfworks_models(
    surveyed: list[tuple[passes.ReportCollection, passes.PassPrediction | None, bool]],
) -> None:
    full = [(info, p) for info, p, is_full in surveyed if is_full and p is not None and info.recorded_passes]
    assert len(full) >= 10
    for info, prediction in full:
        assert prediction.unmodelled_metrics, info.report
        assert info.recorded_passes is not None and info.recorded_passes >= 25


def test_as_if_decisive_agrees_with_nvidia_at_an_eighth_of_the_passes(
    surveyed: list[tuple[passes.ReportCollection, passes.PassPrediction | None, bool]],
) -> None:
    collection = passes.get_collection("decisive")
    cost, why = asif.perfworks_cost(collection)
    assert cost is not None, why
    labelled = agree = spent = recorded = 0
    for info, _, is_full in surveyed:
        if not is_full or not info.recorded_passes:
            continue
        for result in asif.as_if(info.report, collection, DEFAULT_THRESHOLD, cost):
            if result.verdict.nvidia is None:
                continue
            labelled += 1
            agree += result.verdict.nvidia.agrees
            assert result.passes is not None
            spent += result.passes
            recorded += info.recorded_passes
    print(f"as-if decisive: {agree}/{labelled} agree with NVIDIA; passes {spent}/{recorded} = {spent / recorded:.3f}")
    assert labelled >= 40
    assert agree >= 0.97 * labelled
    assert spent <= recorded / 8


def test_as_if_reads_only_the_collections_metrics(corpus_dir: Path) -> None:
    report = corpus_dir / "jestes15__EE384_FinalProject__profile_output.ncu-rep"
    whole = next(iter(iter_launches(report)))
    tier1 = next(iter(iter_launches(report, allow=asif.allow_only(decisive_metric_names(1)))))
    # The full set has NVIDIA's SOL figures and its breakdown; tier 1 has neither.
    assert whole.value("sm_throughput_pct") is not None and tier1.value("sm_throughput_pct") is None
    assert "sm_throughput_pct" in tier1.missing
    assert len(tier1.breakdown) < len(whole.breakdown)
    assert set(tier1.breakdown) <= set(decisive_metric_names(1))
    # What tier 1 does hold, it reads the same.
    assert tier1.value("duration_ns") == whole.value("duration_ns")
    assert tier1.value("l2_hit_rate_pct") == whole.value("l2_hit_rate_pct")
    assert classify(tier1).bound == classify(whole).bound


def test_undecided_is_the_band_below_the_threshold() -> None:
    from ncuflow.analyze.classify import Term, Verdict

    def verdict(top: float | None) -> Verdict:
        return Verdict("x", (Term("dram", top, "t"), Term("l2", None, None, "missing")), 0.6, None)

    assert asif.undecided(verdict(None))
    assert asif.undecided(verdict(0.5))
    assert not asif.undecided(verdict(0.6))  # a lower bound at the threshold proves a wall
    assert not asif.undecided(verdict(0.1))
