"""`ncuflow summary`: where the GPU time of each report goes, on the corpus and the H200 store."""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.analyze.classify import classify
from ncuflow.analyze.findings import terms_of
from ncuflow.analyze.names import distinct_short_names, short_name
from ncuflow.analyze.selection import ALL
from ncuflow.analyze.summary import KernelKey, KernelSummary, kernel_key, roll_up, summarize
from ncuflow.cli import cli
from ncuflow.errors import UsageError
from ncuflow.output.summary_table import TOP_FINDING_LEGEND
from ncuflow.read.findings import Finding
from ncuflow.read.launch import Launch
from ncuflow.read.options import WITH_FINDINGS

REFERENCE = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "h200"


@pytest.fixture(scope="module")
def corpus_summaries(corpus_dir: Path):  # type: ignore[no-untyped-def]
    return summarize(ALL.load([corpus_dir]).runs)


def test_shares_sum_to_one_in_every_report_of_the_corpus(corpus_summaries) -> None:  # type: ignore[no-untyped-def]
    timed = [s for s in corpus_summaries if s.total_ns]
    assert len(timed) >= 35
    for summary in timed:
        assert summary.shares_total() == pytest.approx(1.0, abs=1e-9), summary.label
        totals = [k.total_ns or 0.0 for k in summary.kernels]
        assert totals == sorted(totals, reverse=True)  # by total time
        assert sum(k.launches for k in summary.kernels) == summary.launches
        assert math.fsum(totals) == pytest.approx(summary.total_ns)


def test_a_report_of_105_launches_is_one_kernel(corpus_summaries) -> None:  # type: ignore[no-untyped-def]
    (spy,) = [s for s in corpus_summaries if s.label == "spymaster2h__spyinfer__report.ncu-rep"]
    (kernel,) = spy.kernels
    assert kernel.launches == 105 and kernel.share == pytest.approx(1.0)
    assert kernel.short_name == "__cuda_linear_fp32_fp16_kernel<…>" and "<" in kernel.kernel and "(" in kernel.kernel
    assert kernel.verdicts == (("latency", 105),)
    assert kernel.binding_term == "l1" and kernel.binding_text().endswith("(largest)")


def test_the_h200_store_is_summarised_per_run(corpus_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["summary", str(REFERENCE), "--json", "--per-report"])
    assert result.exit_code == 0, result.output
    reports = json.loads(result.stdout)["reports"]
    assert len(reports) == 49
    for report in reports:
        assert math.fsum(k["share"] for k in report["kernels"]) == pytest.approx(1.0)
        assert "(run " in report["label"]
    copy = [r for r in reports if r["label"].startswith("copy_bandwidth:impl=triton,mib=4096")]
    assert copy and copy[0]["kernels"][0]["bound"] == "dram" and copy[0]["kernels"][0]["binding_u"] > 0.8


def test_many_reports_roll_up_per_gpu_by_kernel_and_configuration(corpus_dir: Path, corpus_summaries) -> None:  # type: ignore[no-untyped-def]
    """summary of the whole corpus printed one table per report and no roll-up: now one per GPU,
    each kernel and configuration summed over the per-report summaries that hold it."""
    runs = ALL.load([corpus_dir]).runs
    rolled = roll_up(runs)
    expected: dict[tuple[str | None, KernelKey], list[float]] = {}
    for per_report in corpus_summaries:
        for k in per_report.kernels:
            sums = expected.setdefault((per_report.device, (k.kernel, k.grid_size, k.block_size)), [0, 0, 0.0])
            sums[0] += k.launches
            sums[1] += 1
            sums[2] += k.total_ns or 0.0
    got = {(gpu.device, (k.kernel, k.grid_size, k.block_size)): [k.launches, k.reports, k.total_ns or 0.0]
           for gpu in rolled for k in gpu.kernels}
    assert got.keys() == expected.keys()
    for key, (launches, reports, total) in expected.items():
        assert got[key][:2] == [launches, reports] and got[key][2] == pytest.approx(total), key
    assert len({gpu.device for gpu in rolled}) == len(rolled) >= 5  # one summary per GPU
    assert sum(gpu.reports for gpu in rolled) == len([run for run in runs if run.launches])
    for gpu in rolled:
        assert gpu.shares_total() == pytest.approx(1.0) if gpu.total_ns else gpu.shares_total() in (None, 0.0)
    text = CliRunner().invoke(cli, ["summary", str(corpus_dir)], terminal_width=200).output
    assert "reports rolled up by kernel and launch configuration" in text and "--per-report" in text
    per_report = CliRunner().invoke(cli, ["summary", str(corpus_dir), "--per-report"], terminal_width=200).output
    assert f"{len(corpus_summaries)} reports, GPU time" in per_report


def test_top_keeps_the_biggest_kernels_and_the_rest_in_one_row(corpus_dir: Path) -> None:
    report = corpus_dir / "jestes15__EE384_FinalProject__profile_output.ncu-rep"
    (full,) = summarize(ALL.load([report]).runs)
    (cut,) = summarize(ALL.load([report]).runs, top=2)
    assert [k.kernel for k in cut.kernels] == [k.kernel for k in full.kernels[:2]]
    assert cut.rest is not None and cut.rest.kernels == len(full.kernels) - 2
    assert cut.shares_total() == pytest.approx(1.0)
    text = CliRunner().invoke(cli, ["summary", str(report), "--top", "2"]).output
    assert f"{cut.rest.kernels} other kernels" in text and "grid × block" in text


def test_csv_has_a_row_per_kernel_with_full_names(corpus_dir: Path) -> None:
    report = corpus_dir / "panjd123__cutlass__report.ncu-rep"
    result = CliRunner().invoke(cli, ["summary", str(report), "--csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [r["short_name"] for r in rows] == ["cutlass::Kernel<cutlass::gemm::kernel::B2bGemm<…>>",
                                               "cutlass::Kernel<cutlass::gemm::kernel::Gemm<…>>"]
    assert all(r["kernel"].startswith("void cutlass::Kernel<") for r in rows)
    assert math.fsum(float(r["share"]) for r in rows) == pytest.approx(1.0)
    both = CliRunner().invoke(cli, ["summary", str(report), "--csv", "--json"])
    assert isinstance(both.exception, UsageError)


def test_kernel_names_are_shortened_readably() -> None:
    name = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, "
            "at::detail::Array<char *, (int)1>>(int, T2, T3)")
    assert short_name(name) == "at::native::vectorized_elementwise_kernel<…>"
    assert short_name("kernelUniqueKeys(unsigned int *, unsigned long long *)") == "kernelUniqueKeys"
    assert short_name("void (anonymous namespace)::k<(bool)1>(int)", show_arguments=True) == "k<true>"
    a = "void warptiling<(int)128, (int)32, (int)256>(int, float *)"
    b = "void warptiling<(int)128, (int)32, (int)128>(int, float *)"
    shorts = distinct_short_names([a, b])
    assert shorts[a] == "warptiling<128, 32, 256>" and shorts[b] == "warptiling<128, 32, 128>"
    assert short_name("", 10) == "(unnamed kernel)"


def test_the_top_finding_is_the_binding_walls_largest_estimate_else_the_largest(corpus_dir: Path) -> None:
    """The top finding was the largest estimate over all of a kernel's findings, whatever wall it
    concerned; it now follows ``classify --evidence``'s ranking. Expected on every kernel of the
    corpus from the walls ``findings.RULES`` ties each rule (or kind of message) to and the kernel's most common
    ``classify`` verdict; on some kernels the two choices differ (checked here, and through the CLI)."""
    differ: list[tuple[Path, KernelSummary, Finding]] = []
    for run in ALL.load([corpus_dir], options=WITH_FINDINGS).runs:
        by_kernel: dict[KernelKey, list[Launch]] = {}
        for launch in run.launches:
            by_kernel.setdefault(kernel_key(launch), []).append(launch)
        for kernel in (k for summary in summarize([run]) for k in summary.kernels):
            launches = by_kernel[(kernel.kernel, kernel.grid_size, kernel.block_size)]
            counts = Counter(classify(x).bound for x in launches)
            bound = min(counts, key=lambda name: (-counts[name], name))
            estimated = [f for x in launches for f in (x.rule_results.findings if x.rule_results else ())
                         if f.speedup is not None]
            candidates = [f for f in estimated if bound in terms_of(f.rule, f.title)] or estimated
            if not candidates:
                assert kernel.top_finding is None, (run.report, kernel.short_name)
                continue
            best = max(f.speedup or 0.0 for f in candidates)
            assert kernel.top_finding in [f for f in candidates if f.speedup == best], (run.report, kernel.short_name)
            if best < max(f.speedup or 0.0 for f in estimated):
                differ.append((run.report, kernel, kernel.top_finding))
    assert differ, "no kernel of the corpus whose binding wall's largest estimate is not the largest"
    for report in sorted({report for report, _, _ in differ}):
        result = CliRunner().invoke(cli, ["summary", "--json", "--per-report", str(report)])
        shown = {(k["kernel"], k["grid_size"], k["block_size"]): k["top_finding"]
                 for k in json.loads(result.output)["reports"][0]["kernels"]}
        for _, kernel, top in (item for item in differ if item[0] == report):
            got = shown[(kernel.kernel, kernel.grid_size, kernel.block_size)]
            assert (got["rule"], got["title"], got["speedup"]) == (top.rule, top.heading, top.speedup)
        text = " ".join(CliRunner().invoke(cli, ["summary", str(report)], terminal_width=200).output.split())
        assert TOP_FINDING_LEGEND in text
