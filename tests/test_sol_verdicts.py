"""NVIDIA's speed-of-light verdict on every launch whose report holds the rule's result: from the
title, or from the message where ncu 2020.x left the title empty; shown as ncu names it."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.analyze.classify import classify, nvidia_category
from ncuflow.cli import cli
from ncuflow.read.extract import iter_launches
from ncuflow.read.readers import READERS, reading_with
from ncuflow.read.reportfile import find_reports
from ncuflow.read.sol_verdicts import SOL_VERDICTS, sol_verdict_of_message
from tests.nvidia import nvidia_actions

UNTITLED = ("anuragdogra2192__MultipleNodesScalingCUDACPPApplications__report.ncu-rep",
            "iamcoleman__monte-carlo-pi__profile.ncu-rep", "thedavidchu__speedy_scan__profile.ncu-rep",
            "wtzhang23__gpu-ray-tracer__report.ncu-rep", "bwd29__self-join-MiSTIC__profileSUSYBIN2.out.ncu-rep")


def _nvidia_sol_messages(report: Path) -> dict[tuple[int, int], tuple[str, str]]:
    """(title, message) of each launch's SOLBottleneck result, as ``ncu_report`` reads it."""
    found: dict[tuple[int, int], tuple[str, str]] = {}
    for key, action in nvidia_actions(report):
        for result in action.rule_results():
            if result.rule_identifier() == "SOLBottleneck":
                message = result.rule_message() or {}
                found[key] = (message.get("title") or "", message.get("message") or "")
                break
    return found


@pytest.mark.parametrize("reader", READERS)
def test_every_launch_with_a_sol_result_has_nvidias_verdict(corpus_dir: Path, reader: str) -> None:
    untitled = titled = errors = 0
    for report in find_reports([corpus_dir]):
        expected = _nvidia_sol_messages(report)
        with reading_with(reader):
            launches = list(iter_launches(report))
        for launch in launches:
            title, message = expected.get((launch.range_index, launch.action_index), ("", ""))
            worded = sol_verdict_of_message(message)
            if title:
                titled += 1
                assert launch.nvidia_sol == title, (report.name, launch.key)
            elif worded is not None:
                untitled += 1
                assert launch.nvidia_sol == worded.name, (report.name, launch.key)
                assert classify(launch).nvidia is not None
            else:  # no result, or the rule's own error ("Rule Bottleneck returned an error ...")
                errors += bool(message)
                assert launch.nvidia_sol is None, (report.name, launch.key, message[:80])
    assert untitled >= len(UNTITLED) and titled >= 300  # each ncu 2020.x report has one at least
    assert errors >= 2  # the rule's errors give no verdict


def test_untitled_results_name_the_verdict_their_message_words(corpus_dir: Path) -> None:
    """ncu 2020.x: the message "This kernel exhibits low compute throughput ..." is a Latency Issue,
    "This kernel grid is too small ..." a Small Grid; ncuflow agreed with each before it could read them."""
    names = set()
    for name in UNTITLED:
        for launch in iter_launches(corpus_dir / name):
            if launch.nvidia_sol is not None:
                names.add(launch.nvidia_sol)
                assert classify(launch).nvidia.agrees, (name, launch.key)
    assert names == {"Latency Issue", "Small Grid"}


def test_ncus_verdict_names_are_shown_as_ncu_names_them(corpus_dir: Path) -> None:
    """ "High Throughput" is its own verdict (either class over 80 %), not "Balanced Throughput"."""
    launch = next(iter_launches(corpus_dir / "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep"))
    nvidia = classify(launch).nvidia
    assert nvidia is not None and nvidia.title == "High Throughput" and nvidia.category == "high" and nvidia.agrees
    assert {verdict.name for verdict in SOL_VERDICTS} >= {"High Throughput", "Balanced Throughput", "Small Grid"}
    for verdict in SOL_VERDICTS:
        assert nvidia_category(verdict.name) == verdict.category
        assert all(sol_verdict_of_message(phrase.upper()) == verdict for phrase in verdict.phrases)


def test_classify_shows_the_name_ncu_gives(corpus_dir: Path) -> None:
    report = corpus_dir / "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep"
    result = CliRunner().invoke(cli, ["classify", str(report)], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert "✓ High Throughput" in result.output and "balanced" not in result.output
    untitled = CliRunner().invoke(cli, ["classify", str(corpus_dir / UNTITLED[2])], terminal_width=250)
    assert "✓ Latency Issue" in untitled.output
