"""NVIDIA's findings and source markers (issue 37): read by ncuflow's reader as ncu_report gives them,
shown under the verdict, exported, and read only when asked for.

Every expected value is NVIDIA's own: read from ``ncu_report``'s ``IAction`` for the same launch.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from ncuflow.analyze.findings import (
    OTHER,
    RULE_TERMS,
    RULES,
    MessageTerms,
    message_kind,
    ranked,
    terms_of,
)
from ncuflow.cli import cli
from ncuflow.read.extract import read_launches
from ncuflow.read.findings import NO_RULE_RESULTS, Finding, RuleResults, plain_words
from ncuflow.read.options import WITH_FINDINGS
from ncuflow.read.readers import reading_with
from ncuflow.read.rule_results import ncu_report_rule_results
from tests.conftest import corpus_reports
from tests.nvidia import actions_of, nvidia_actions
from tests.scripts import analysis_script

ncu_report = pytest.importorskip("ncu_report")

APLAINJANE = "aplainjane__CUDA_Learning__012_sharedMemory_shared_report.ncu-rep"
SWAGATAM = "Swagatam1812__hpca-gpu-memory-profiling__variant3.ncu-rep"
SGLANG = "flyinglandlord__sglang__profile.ncu-rep"  # H800, an issue-bound kernel with Not Selected Stalls
RMS_NORM = "AlpriElse__cs599k__rms_norm_matrix_ncu-reports_2025-04-21_v1.ncu-rep"  # H100, 3 launches, dram-bound


def _nvidia_best(report: Path, kernel: str, rule: str) -> dict[str, Any]:
    """NVIDIA's finding of ``rule`` with the largest speedup on the first launch of ``kernel``."""
    action = next(a for a in actions_of(report) if a.name() == kernel)
    found = [d for d in action.rule_results_as_dicts() if d["rule_identifier"] == rule and "speedup_estimation" in d]
    return max(found, key=lambda d: d["speedup_estimation"]["speedup"])


def _words(text: str) -> str:
    return " ".join(text.split())


# --------------------------------------------------------------------------- reading


def test_ncuflows_reader_gives_ncu_reports_findings_and_markers_on_every_shared_report(corpus_dir: Path) -> None:
    """Rule identifiers, names, sections, titles, messages, types, focus metrics, speedups (1e-9) and
    marker locations, launch by launch, against ncu_report's own dicts (the whole corpus, ~1 s)."""
    check = analysis_script("check_findings")
    tally = check.Tally()
    for report in corpus_reports():
        check.check_report(report, tally)
    assert tally.differing == []
    assert tally.launches == sum(len(actions_of(r)) for r in corpus_reports())
    assert 0 < tally.with_results < tally.launches  # some reports were collected without rules
    assert tally.speedups > 0 and tally.markers > 0


def test_the_check_sees_a_difference(corpus_dir: Path) -> None:
    """The comparison can fail: a speedup off by 1e-6 relative, a title, a marker's line."""
    check = analysis_script("check_findings")
    report = corpus_dir / APLAINJANE
    launch = read_launches(report, WITH_FINDINGS)[2]
    action = actions_of(report)[2]
    assert launch.rule_results is not None and check.launch_gaps(launch.rule_results, action) == []
    found = launch.rule_results.findings
    estimated = next(i for i, f in enumerate(found) if f.speedup is not None)
    for spoiled in (dataclasses.replace(found[estimated], speedup=found[estimated].speedup * (1 + 1e-6)),
                    dataclasses.replace(found[estimated], title="x")):
        changed = RuleResults((*found[:estimated], spoiled, *found[estimated + 1:]), launch.rule_results.markers)
        assert check.launch_gaps(changed, action)
    markers = launch.rule_results.markers
    source = next(i for i, m in enumerate(markers) if m.kind == "source")
    moved = (*markers[:source], dataclasses.replace(markers[source], line=(markers[source].line or 0) + 1),
             *markers[source + 1:])
    assert check.launch_gaps(RuleResults(found, moved), action)


def test_the_ncu_report_reader_gives_the_same_records(corpus_dir: Path) -> None:
    """ncuflow's mapping of ncu_report (``--reader ncu_report``) equals its own reader's records: on
    every launch of the corpus, and through the whole reading path on two reports."""
    for report in corpus_reports():
        mine = [launch.rule_results for launch in read_launches(report, WITH_FINDINGS)]
        assert mine == [ncu_report_rule_results(action) for action in actions_of(report)], report.name
    for name in (APLAINJANE, SWAGATAM):
        with reading_with("ncu_report"):
            theirs = [x.rule_results for x in read_launches(corpus_dir / name, WITH_FINDINGS)]
        assert theirs == [x.rule_results for x in read_launches(corpus_dir / name, WITH_FINDINGS)]


def test_findings_are_read_only_when_asked_for(corpus_dir: Path) -> None:
    report = corpus_dir / SWAGATAM
    assert all(x.rule_results is None for x in read_launches(report))
    assert all(x.rule_results is not None and x.rule_results.held for x in read_launches(report, WITH_FINDINGS))


def test_a_report_without_rule_results_says_so(corpus_dir: Path) -> None:
    """Launches whose report holds no rule result are read as such and said so, never as 'no findings'."""
    without = [r for r in corpus_reports()
               if not any(x.rule_results and x.rule_results.held for x in read_launches(r, WITH_FINDINGS))]
    assert without, "the corpus holds reports collected without rules"
    report = without[0]
    assert all(not a.rule_results_as_dicts() and not a.source_markers() for a in actions_of(report))
    result = CliRunner().invoke(cli, ["classify", "--evidence", str(report)])
    assert result.exit_code == 0, result.output
    assert _words(NO_RULE_RESULTS) in _words(result.output)
    rows = json.loads(CliRunner().invoke(cli, ["classify", "--json", str(report)]).output)
    assert all(row["rule_results"] is False and row["findings"] == [] and row["findings_note"] == NO_RULE_RESULTS
               for row in rows)


# --------------------------------------------------------------------------- link markup


def test_links_are_rendered_as_their_words(corpus_dir: Path) -> None:
    messages = [f.message for r in corpus_reports() for x in read_launches(r, WITH_FINDINGS)
                for f in (x.rule_results.findings if x.rule_results else ())]
    linked = [m for m in messages if "@section:" in m or "@url:" in m]
    assert linked
    for message in linked:
        words = plain_words(message)
        assert "@section:" not in words and "@url:" not in words, message
    assert plain_words("Look at @section:LaunchStats:Launch Statistics@ for more.") == "Look at Launch Statistics for more."
    assert plain_words("The @url:CUDA Guide:https://docs.nvidia.com/x#y@ has it") == "The CUDA Guide has it"
    assert plain_words("at @source:C:\\a.cu:22:line 22@ and @sass:0x7f:here@") == "at line 22 and here"
    assert plain_words("a@b.c mail @ 3 @section:x") == "a@b.c mail @ 3 @section:x"  # no link: kept as written


def test_link_rendering_is_linear_on_hostile_messages() -> None:
    """100,000 characters of unclosed or nested links: a quadratic scan would take minutes."""
    for hostile in ("@" * 100_000, "@url:" * 20_000, "@section:a:" * 10_000 + "x", "@source:a:" * 10_000):
        begun = time.perf_counter()
        plain_words(hostile)
        assert time.perf_counter() - begun < 2.0


# --------------------------------------------------------------------------- walls and ranking


def test_each_rule_is_tied_to_walls_by_one_row_and_the_rest_is_other(corpus_dir: Path) -> None:
    seen = {f.rule for r in corpus_reports() for x in read_launches(r, WITH_FINDINGS)
            for f in (x.rule_results.findings if x.rule_results else ())}
    assert {"SharedMemoryConflicts", "UncoalescedGlobalAccess"} <= seen
    assert "l1" in terms_of("SharedMemoryConflicts") and "l1" in terms_of("UncoalescedGlobalAccess")
    untied = seen - set(RULE_TERMS)
    for rule in untied:  # shown as 'other', never guessed at
        assert terms_of(rule) == ()
    with pytest.raises(ValueError):
        type(RULE_TERMS["Memory"])("X", ("l3",), "no such wall")
    with pytest.raises(ValueError):
        MessageTerms("X", ("l3",), "no such wall")
    assert OTHER == "other"


def test_a_rule_whose_messages_concern_other_walls_ties_each_message_by_its_kind(corpus_dir: Path) -> None:
    """CPIStall's "Not Selected Stalls" are about issue, its "Wait Stalls" about latency: where a row of
    ``RULES`` names kinds of messages, classify --json's ``concerns`` and --evidence's [wall] follow the
    message's title (ncu_report's), the rule's walls elsewhere; some finding of the corpus differs."""
    by_kind = {(row.rule, message_kind(m.title)): m.terms for row in RULES for m in row.messages}
    differ = 0
    for report in corpus_reports():
        titles = {(d["rule_identifier"], d["rule_message"]["title"]) for a in actions_of(report)
                  for d in a.rule_results_as_dicts() if (d["rule_identifier"], message_kind(d["rule_message"]["title"]))
                  in by_kind}
        if not titles:
            continue
        rows = json.loads(CliRunner().invoke(cli, ["classify", "--json", str(report)]).output)
        evidence = _words(CliRunner().invoke(cli, ["classify", "--evidence", str(report)]).output)
        for rule, title in titles:
            walls = by_kind[(rule, message_kind(title))]
            shown = [f["concerns"] for row in rows for f in row["findings"] if (f["rule"], f["title"]) == (rule, title)]
            assert shown and all(c == list(walls) for c in shown), (report.name, title, shown)
            assert f"[{'/'.join(walls)}] {title}" in evidence, (report.name, title)
            if walls != RULE_TERMS[rule].terms:
                assert f"[{'/'.join(RULE_TERMS[rule].terms)}] {title}" not in evidence, (report.name, title)
                differ += 1
    assert differ, "no message of the corpus whose kind's walls are not its rule's"


def test_ranking_puts_estimates_first_the_binding_walls_before_the_others(corpus_dir: Path) -> None:
    from ncuflow.analyze.classify import classify

    for report in corpus_reports():
        for launch in read_launches(report, WITH_FINDINGS):
            if launch.rule_results is None:
                continue
            order = ranked(launch.rule_results, classify(launch).bound)
            keys = [(f.finding.speedup is None, not f.on_binding, -(f.finding.speedup or 0.0)) for f in order]
            assert keys == sorted(keys), (report.name, launch.action_index)


# --------------------------------------------------------------------------- what a user sees


@pytest.mark.parametrize(("name", "kernel", "rule"), [
    (APLAINJANE, "setColReadCol", "SharedMemoryConflicts"),
    (SWAGATAM, "conv2d_variant3_kernel", "UncoalescedGlobalAccess"),
])
def test_classify_evidence_shows_nvidias_finding_with_its_speedup(corpus_dir: Path, name: str, kernel: str,
                                                                  rule: str) -> None:
    report = corpus_dir / name
    nvidia = _nvidia_best(report, kernel, rule)
    heading = nvidia["rule_message"]["title"] or nvidia["name"]
    speedup = nvidia["speedup_estimation"]["speedup"]
    result = CliRunner().invoke(cli, ["classify", "--evidence", "--kernel", f"^{kernel}$", str(report)])
    assert result.exit_code == 0, result.output
    shown = _words(result.output)
    assert f"{heading}, est. {speedup:.1f} %" in shown
    assert shown.index("u_dram=") < shown.index("NVIDIA's findings") < shown.index(heading)  # under the verdict
    rows = json.loads(CliRunner().invoke(cli, ["classify", "--json", "--kernel", f"^{kernel}$", str(report)]).output)
    found = [f for f in rows[0]["findings"] if f["rule"] == rule and f["speedup"] == speedup]
    assert found and found[0]["speedup_type"] == "global" and "@" not in found[0]["message"]
    assert [m["name"] for m in found[0]["focus_metrics"]] == [m["name"] for m in nvidia["focus_metrics"]]


def _ranked_best(actions: list[Any], bound: str) -> tuple[float, str]:
    """NVIDIA's (speedup, title) that ``findings.top_ranked`` should pick for these launches of one
    kernel with verdict ``bound``: the largest estimate among ``ncu_report``'s findings tied to
    ``bound`` by ``RULES``, else the largest of all."""
    estimated = [(d["speedup_estimation"]["speedup"], d["rule_message"]["title"] or d["name"], d["rule_identifier"])
                 for a in actions for d in a.rule_results_as_dicts() if "speedup_estimation" in d]
    on_wall = [e for e in estimated if bound in terms_of(e[2], e[1])]
    speedup, title, _ = max(on_wall or estimated)
    return speedup, title


def _config(action: Any) -> tuple[float | None, ...]:
    metrics = (action.metric_by_name(name) for name in ("launch__grid_size", "launch__block_size"))
    return tuple(m.as_double() if m is not None else None for m in metrics)


def _summarized(report: Path, kernel: dict[str, Any]) -> tuple[list[Any], str]:
    """The launches ``ncu_report`` holds of a summary's kernel (name, grid, block), and their most common
    verdict as ``classify --json`` gives it launch by launch."""
    at = dict(nvidia_actions(report))
    mine = {key for key, action in at.items()
            if action.name() == kernel["function"] and _config(action) == (kernel["grid_size"], kernel["block_size"])}
    rows = json.loads(CliRunner().invoke(cli, ["classify", "--json", str(report)]).output)
    counts = Counter(row["bound"] for row in rows if (row["range"], row["action"]) in mine)
    return [at[key] for key in sorted(mine)], min(counts, key=lambda name: (-counts[name], name))


@pytest.mark.parametrize("name", [SWAGATAM, RMS_NORM, SGLANG])
def test_summary_names_the_binding_walls_best_estimate(corpus_dir: Path, name: str) -> None:
    """RMS_NORM's kernel is dram-bound and its largest estimate (Low Utilization) is not about dram:
    the ranking, not the plain maximum, picks its top finding. SGLANG's first kernel is issue-bound:
    its CPIStall "Not Selected Stalls" is about issue (``RULES``' row names that kind of message)."""
    report = corpus_dir / name
    kernel = json.loads(CliRunner().invoke(cli, ["summary", "--json", str(report)]).output)["reports"][0]["kernels"][0]
    best = _ranked_best(*_summarized(report, kernel))
    assert (kernel["top_finding"]["speedup"], kernel["top_finding"]["title"]) == best
    assert f"{best[1]} {best[0]:.1f} %" in _words(CliRunner().invoke(cli, ["summary", str(report)]).output)


def test_compare_markdown_names_each_sides_top_finding_by_the_ranking(corpus_dir: Path, tmp_path: Path) -> None:
    """compare --markdown's top finding on each side is ``summary``'s (``top_ranked`` with that side's
    verdict), not the largest estimate whatever its wall (RMS_NORM: dram-bound, its largest estimate
    about issue)."""
    report = corpus_dir / RMS_NORM
    md = tmp_path / "compare.md"
    result = CliRunner().invoke(cli, ["compare", str(report), str(report), "--json", "--markdown", str(md)])
    assert result.exit_code == 0, result.output
    (pair,) = json.loads(result.stdout)["matched"]
    actions = actions_of(report)
    assert {a.name() for a in actions} == {pair["kernel"]}  # every launch of the report is of this kernel
    sides = [_ranked_best(actions, pair[side]["bound"]) for side in ("base", "new")]
    largest = max(d["speedup_estimation"]["speedup"] for a in actions_of(report)
                  for d in a.rule_results_as_dicts() if "speedup_estimation" in d)
    assert all(speedup < largest for speedup, _ in sides)  # the ranking's choice is not the plain maximum
    (line,) = [x for x in md.read_text().splitlines() if x.startswith("NVIDIA's top finding:")]
    base, new = line.removeprefix("NVIDIA's top finding: ").split("; new ")
    for shown, (speedup, title) in zip((base, new), sides, strict=True):
        assert f"{title} est. {speedup:.1f} %" in shown.removeprefix("base ")


def test_export_findings_table_holds_every_finding_marker_and_launch_without(corpus_dir: Path, tmp_path: Path) -> None:
    reports = [corpus_dir / SWAGATAM, *[r for r in corpus_reports() if r.name.startswith("evozone96")]]
    result = CliRunner().invoke(cli, ["export", *map(str, reports), "-o", str(tmp_path / "l.parquet"),
                                      "--findings", str(tmp_path / "f.parquet")])
    assert result.exit_code == 0, result.output
    table = pl.read_parquet(tmp_path / "f.parquet")
    actions = [a for r in reports for a in actions_of(r)]
    kinds = table["kind"].value_counts().to_dict(as_series=False)
    counted = dict(zip(kinds["kind"], kinds["count"], strict=True))
    assert counted.get("finding", 0) == sum(len(a.rule_results_as_dicts()) for a in actions)
    assert counted.get("marker", 0) == sum(len(a.source_markers()) for a in actions)
    assert counted.get("none", 0) == sum(not a.rule_results_as_dicts() and not a.source_markers() for a in actions)
    nvidia = sorted(d["speedup_estimation"]["speedup"] for a in actions for d in a.rule_results_as_dicts()
                    if "speedup_estimation" in d)
    assert sorted(table["speedup"].drop_nulls().to_list()) == nvidia
    assert pl.read_parquet_metadata(tmp_path / "f.parquet")["ncuflow.table"] == "findings"
    assert ncuflow_findings_frame(reports).height == table.height


def ncuflow_findings_frame(reports: list[Path]) -> pl.DataFrame:
    import ncuflow

    return ncuflow.findings(reports)  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize("findings", ["f.csv", "l.parquet"])
def test_export_refuses_a_findings_table_it_cannot_write(corpus_dir: Path, tmp_path: Path, findings: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from ncuflow.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["export", str(corpus_dir / SWAGATAM), "-o", str(tmp_path / "l.parquet"),
              "--findings", str(tmp_path / findings)])
    said = capsys.readouterr().err
    assert exited.value.code == 2 and "--findings" in said and "Traceback" not in said
    assert not (tmp_path / "l.parquet").exists()


def test_markdown_shows_findings_through_the_names_safe_text(corpus_dir: Path, tmp_path: Path) -> None:
    """A finding's hostile title and message reach report.md escaped, as names do."""
    from ncuflow.analyze.study import analyse
    from ncuflow.output.findings_markdown import findings_markdown
    from ncuflow.read.runs import load_paths

    loaded = load_paths([corpus_dir / SWAGATAM], options=WITH_FINDINGS)
    hostile = Finding("UncoalescedGlobalAccess", "x", "s", "a | b <script>\x1b[31m", "`rm` *x*\nnext", "optimization",
                      speedup=99.0, speedup_type="global")
    runs = tuple(dataclasses.replace(run, launches=tuple(dataclasses.replace(
        x, rule_results=RuleResults((hostile,))) for x in run.launches)) for run in loaded.runs)
    text = "\n".join(findings_markdown(analyse(dataclasses.replace(loaded, runs=runs))))
    assert "<script>" not in text and "\x1b" not in text and "a | b" not in text
    assert "est. 99.0 % global" in text
