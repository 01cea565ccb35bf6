"""The cost of a verdict, measured on the corpus of public reports (no GPU needed).

Prints, side by side:
1. the passes table: predicted counter + SASS passes and the passes ncu would record, per
   chip, for the decisive tiers and the first decisive list, next to what full-set
   reports of that chip recorded;
2. ``classify --as-if decisive`` on the labelled launches (NVIDIA's SOLBottleneck rule
   result present) of the corpus's full-set reports: agreement with NVIDIA's rule, and
   the passes spent relative to the passes their full-set reports recorded;
3. predicted vs recorded passes on counter-only reports (the empirical +1 rule).

    python analysis/bench_passes.py [CORPUS] [--band 0.75]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ncuflow.analyze.classify import DEFAULT_THRESHOLD, ESCALATION_BAND, classify
from ncuflow.errors import NcuflowError
from ncuflow.profile import asif, passes, perfworks
from ncuflow.read.extract import iter_launches
from ncuflow.read.metrics import decisive_metric_names
from ncuflow.read.reportfile import find_reports

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.corpus import full_set_reports

TABLE_CHIPS: tuple[str, ...] = ("gh100", "ga100", "ga102", "ad102", "tu104", "gb202")


@dataclass(frozen=True)
class ReportInfo:
    path: Path
    collection: passes.ReportCollection
    predicted: passes.PassPrediction | None
    full_set: bool


def survey(corpus: Path, library: perfworks.Perfworks) -> Iterator[ReportInfo]:
    full_sets = set(full_set_reports(corpus))  # how each report was collected, as SOURCES.tsv records it
    for path in find_reports([corpus]):
        try:
            info = passes.read_report_collection(path)
        except NcuflowError as error:
            print(f"# skipped {path.name}: {error.what}", file=sys.stderr)
            continue
        if info.chip is None or info.chip.upper() not in library.chips():
            yield ReportInfo(path, info, None, False)
            continue
        with library.evaluator(info.chip) as evaluator:
            predicted = passes.predict(evaluator, info.metrics, "report")
        yield ReportInfo(path, info, predicted, path in full_sets and not info.counter_only)


def passes_table(library: perfworks.Perfworks, reports: list[ReportInfo]) -> list[str]:
    recorded: dict[str, list[int]] = defaultdict(list)
    for report in reports:
        if report.full_set and report.collection.recorded_passes and report.collection.chip:
            recorded[report.collection.chip].append(report.collection.recorded_passes)
    lists = {
        "decisive (tier 1)": decisive_metric_names(1),
        "tier 2 run": decisive_metric_names(2),
        "tier 1 + tier 2": (*decisive_metric_names(1), *decisive_metric_names(2)),
        "first decisive list": passes.get_collection("fields").metrics or (),
    }
    lines = ["| chip | " + " | ".join(lists) + " | full set (recorded in corpus) |",
             "| --- |" + " --- |" * (len(lists) + 1)]
    for chip in TABLE_CHIPS:
        cells = []
        with library.evaluator(chip) as evaluator:
            for names in lists.values():
                # offered on the chip as profile runs it: the names it does not know dropped
                offered = passes.for_chip(passes.Collection("x", tuple(names)), evaluator)
                p = passes.predict(evaluator, offered.collection.metrics or ())
                cells.append(f"{p.counter_passes}+{p.sass_passes} → {p.expected_recorded('2025.1')}"
                             + (f" ({len(offered.dropped)} dropped)" if offered.dropped else ""))
        seen = sorted(recorded.get(chip, []))
        full = f"{seen[0]}–{seen[-1]} ({len(seen)} reports)" if seen else "no report"
        lines.append(f"| {chip} | " + " | ".join(cells) + f" | {full} |")
    lines.append("cells: counter + SASS-patching passes predicted by Perfworks → passes ncu records "
                 "(+1 rule, as ncu 2025.1 on that chip); dropped: names the chip does not know, left out")
    return lines


def as_if_study(reports: list[ReportInfo], band: float) -> list[str]:
    collection = passes.get_collection("decisive")
    cost, why = asif.perfworks_cost(collection)
    assert cost is not None, why
    labelled = agree = agree_tier1 = agree_full = escalated = 0
    others = others_agree = lacking = 0
    spent = recorded = 0
    failures: list[str] = []
    for report in reports:
        if not report.full_set or not report.collection.recorded_passes:
            # Reports of a smaller collection lack some tier names: the as-if verdict is a
            # pessimistic estimate there (a missing counter is missing, never filled in).
            if report.predicted is not None:
                for result in asif.as_if(report.path, collection, DEFAULT_THRESHOLD, None, band=band):
                    if not result.holds:  # the report lacks what the collection computes: no as-if
                        lacking += 1
                        continue
                    if result.verdict.nvidia is not None:
                        others += 1
                        others_agree += result.verdict.nvidia.agrees
            continue
        full = list(iter_launches(report.path))
        tier1 = list(iter_launches(report.path, allow=asif.allow_only(collection.metrics)))
        for result, whole, alone in zip(asif.as_if(report.path, collection, DEFAULT_THRESHOLD, cost, band=band),
                                        full, tier1, strict=True):
            comparison = result.verdict.nvidia
            if comparison is None:
                continue
            labelled += 1
            agree += comparison.agrees
            whole_verdict = classify(whole)
            agree_full += bool(whole_verdict.nvidia and whole_verdict.nvidia.agrees)
            alone_verdict = classify(alone)
            agree_tier1 += bool(alone_verdict.nvidia and alone_verdict.nvidia.agrees)
            escalated += result.escalated
            spent += result.passes or 0
            recorded += report.collection.recorded_passes
            if not comparison.agrees:
                failures.append(f"  {report.path.name} action {result.launch.action_index}: NVIDIA "
                                f"{comparison.title!r}, ours {result.verdict.bound}: {comparison.reason}")
    pct = 100.0 * agree / max(labelled, 1)
    ratio = spent / max(recorded, 1)
    lines = [
        f"classify --as-if decisive on {labelled} labelled launches of the full-set reports "
        f"(escalation band {band:g} × threshold {DEFAULT_THRESHOLD:g}):",
        f"  agreement with NVIDIA's SOL rule: {agree}/{labelled} = {pct:.1f} % (goal ≥ 97 %); "
        f"tier 1 alone {100.0 * agree_tier1 / max(labelled, 1):.1f} %, full set "
        f"{100.0 * agree_full / max(labelled, 1):.1f} %",
        f"  escalated to tier 2: {escalated}/{labelled} launches",
        f"  the other {others} labelled launches (reports of smaller collections, which lack some "
        f"tier names): {others_agree}/{others} = {100.0 * others_agree / max(others, 1):.1f} %; all "
        f"labelled: {agree + others_agree}/{labelled + others} = "
        f"{100.0 * (agree + others_agree) / max(labelled + others, 1):.1f} %; {lacking} launches of smaller "
        "collections lack a term the collection computes and have no as-if verdict",
        f"  passes: {spent} as-if / {recorded} recorded by the full sets = {ratio:.3f} "
        f"(1/{1 / ratio if ratio else float('inf'):.1f}; goal ≤ 1/8 = 0.125)",
    ]
    return lines + failures


def rule_study(reports: list[ReportInfo]) -> list[str]:
    rows = [r for r in reports if r.collection.counter_only and r.predicted is not None
            and r.collection.recorded_passes is not None]
    within = exact = 0
    failures: list[str] = []
    for report in rows:
        assert report.predicted is not None and report.collection.recorded_passes is not None
        expected = report.predicted.expected_recorded(report.collection.ncu_version, report.collection.warmup_passes)
        delta = report.collection.recorded_passes - expected
        within += abs(delta) <= 1
        exact += delta == 0
        if delta:
            failures.append(f"  {report.path.name}: {report.collection.chip}, ncu "
                            f"{report.collection.ncu_version}: predicted {report.predicted.counter_passes}+"
                            f"{report.predicted.sass_passes} → expected {expected}, recorded "
                            f"{report.collection.recorded_passes} ({delta:+d})")
    n = max(len(rows), 1)
    return [f"predicted vs recorded passes on {len(rows)} counter-only reports: within 1 on "
            f"{within}/{len(rows)} ({100.0 * within / n:.0f} %, goal ≥ 95 %), exact on {exact}/{len(rows)}",
            *failures]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="?", type=Path, default=Path("../shared/ncu-reports"))
    parser.add_argument("--band", type=float, default=ESCALATION_BAND,
                        help="escalate when the largest tier-1 term is within this factor of the threshold")
    args = parser.parse_args(argv)
    library = perfworks.load()
    print(f"# Perfworks: {library.path}")
    reports = list(survey(args.corpus, library))
    for line in (*passes_table(library, reports), "", *as_if_study(reports, args.band), "",
                 *rule_study(reports)):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
