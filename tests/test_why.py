"""The why tier (tier 3): one row per wall, its sections and rules checked against NVIDIA's own
ncu and reports, its passes predicted with the real Perfworks over what the real ncu lists,
and `profile --why --dry-run` printing what the row says."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.analyze.classify import classify
from ncuflow.cli import cli
from ncuflow.errors import UsageError
from ncuflow.profile import passes
from ncuflow.profile.ncu import NcuOptions, build_command
from ncuflow.profile.section_metrics import list_section_metrics, parse_listing
from ncuflow.profile.why import (
    FROM_VERDICT,
    WHY,
    WHY_BY_WALL,
    WhyRow,
    binding_wall,
    why_check,
    why_options,
    why_row,
)
from ncuflow.read.extract import read_launches
from ncuflow.terms import BOUND_NAMES
from tests.conftest import corpus_reports
from tests.nvidia import NVIDIA_ACTIONS_IMPORT
from tests.test_passes import perfworks_or_skip
from tests.test_passes_real_ncu import _real_ncu

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
MIXED = "yzwang2000__cudaCode__profile.ncu-rep"  # a 1.17 s launch and a 1 ms launch of other verdicts


@pytest.fixture(scope="module")
def real_ncu() -> str:
    ncu = _real_ncu()
    if ncu is None:
        pytest.skip("the real ncu is not installed (`make setup-test` installs Debian's nsight-compute)")
    return ncu


@pytest.fixture(scope="module")
def gh100() -> Iterator[passes.ChipEvaluator]:
    with perfworks_or_skip().evaluator("gh100") as evaluator:
        yield evaluator


def _sections_of(command: list[str]) -> tuple[str, ...]:
    return tuple(command[i + 1] for i, arg in enumerate(command) if arg == "--section")


# ----------------------------------------------------------------------------- the rows


@pytest.mark.parametrize("row", WHY, ids=lambda row: row.wall)
def test_the_tier_three_command_is_derived_from_the_row(row: WhyRow) -> None:
    wall = row.wall
    chosen = why_options(NcuOptions(nvtx_include=("r/",), clock_control="none", extra_metrics=("x__y.sum",)), wall)
    command = build_command("ncu", chosen, "out.ncu-rep", ["app"])
    assert _sections_of(command) == WHY_BY_WALL[wall].sections
    assert "--set" not in command  # the sections and the row's metrics alone, none of tier 1's names
    metrics = tuple(command[command.index("--metrics") + 1].split(",")) if "--metrics" in command else ()
    assert metrics == WHY_BY_WALL[wall].metrics
    assert ("--import-source" in command) == WHY_BY_WALL[wall].source
    assert command[command.index("--nvtx-include") + 1] == "r/" and command[command.index("--clock-control") + 1] == "none"


def test_every_verdict_but_unknown_has_one_row() -> None:
    assert sorted(row.wall for row in WHY) == sorted(b for b in BOUND_NAMES if b != "unknown")
    with pytest.raises(UsageError, match="no why tier for the verdict 'unknown'"):
        why_row("unknown")


@cache
def _rules_in_ncu_install() -> dict[str, str]:
    """rule identifier -> section identifier, from the rule files of the installed ncu."""
    found: dict[str, str] = {}
    folders = [*Path.home().glob("Documents/NVIDIA Nsight Compute/*/Sections"),
               Path("/usr/lib/x86_64-linux-gnu/nsight-compute/sections")]
    for folder in folders:
        for rule in sorted(folder.glob("*.py")) if folder.is_dir() else []:
            text = rule.read_text(errors="replace")
            identifier = re.search(r"def get_identifier\(\):\s*return ['\"](\w+)['\"]", text)
            section = re.search(r"def get_section_identifier\(\):\s*return ['\"](\w+)['\"]", text)
            if identifier and section:
                found[identifier.group(1)] = section.group(1)
    return found


_CORPUS_RULES = f"""
import json, sys
from pathlib import Path
{NVIDIA_ACTIONS_IMPORT}
seen = {{}}
for path in sys.argv[1:]:
    for _, action in nvidia_actions(Path(path)):
        for result in action.rule_results_as_dicts():
            seen.setdefault(result["rule_identifier"], set()).add(result["section_identifier"])
print(json.dumps({{rule: sorted(sections) for rule, sections in seen.items()}}))
"""


@cache
def _rules_in_corpus() -> dict[str, list[str]]:
    """rule identifier -> the sections NVIDIA's reader names for it, on every launch of the corpus."""
    reports = [str(p) for p in corpus_reports()]
    if not reports:
        return {}
    done = subprocess.run([sys.executable, "-c", _CORPUS_RULES, *reports], capture_output=True, text=True,
                          timeout=900, check=True, cwd=REPO)
    found: dict[str, list[str]] = json.loads(done.stdout)
    return found


def test_each_rule_of_a_row_is_fed_by_one_of_its_sections_by_ncus_own_word(real_ncu: str) -> None:
    installed, corpus = _rules_in_ncu_install(), _rules_in_corpus()
    if not corpus:
        pytest.skip("the shared corpus is not here")
    assert installed, "no rule file found in the installed ncu"
    for row in WHY:
        for rule in row.rules:
            sections = {*corpus.get(rule, ()), *([installed[rule]] if rule in installed else [])}
            assert sections, f"{row.wall}: {rule} is neither a rule of this ncu nor seen in the corpus"
            assert sections <= set(row.sections), f"{row.wall}: {rule} belongs to {sections}, not {row.sections}"


def test_each_metric_of_a_row_is_read_by_one_of_its_rules_and_dropped_where_a_chip_lacks_it(real_ncu: str) -> None:
    perfworks = perfworks_or_skip()
    folders = [*Path.home().glob("Documents/NVIDIA Nsight Compute/*/Sections"),
               Path("/usr/lib/x86_64-linux-gnu/nsight-compute/sections")]
    rule_files = {rule: path for folder in folders if folder.is_dir() for path in folder.glob("*.py")
                  if (rule := _rule_identifier(path)) is not None}
    rows = [row for row in WHY if row.metrics]
    assert rows
    for row in rows:
        read = set().union(*(_metrics_read(rule_files[rule]) for rule in row.rules if rule in rule_files))
        assert set(row.metrics) <= read, f"{row.wall}: {set(row.metrics) - read} is read by none of {row.rules}"
    for chip in passes.claimed_chips():  # offered on every chip with only the names it knows
        if chip.upper() not in perfworks.chips():
            continue
        with perfworks.evaluator(chip) as evaluator:
            for row in rows:
                check = why_check(NcuOptions(), row.wall, chip, None)
                command = build_command("ncu", check.options, "r.ncu-rep", ["app"])
                asked = command[command.index("--metrics") + 1].split(",") if "--metrics" in command else []
                known, unknown = passes.known_names(evaluator, row.metrics)
                assert asked == known and list(check.dropped) == unknown, f"{row.wall} on {chip}"


def _rule_identifier(path: Path) -> str | None:
    found = re.search(r"def get_identifier\(\):\s*return ['\"](\w+)['\"]", path.read_text(errors="replace"))
    return found.group(1) if found else None


def _metrics_read(path: Path) -> set[str]:
    return set(re.findall(r'metric_by_name\("([^"]+)"\)', path.read_text(errors="replace")))


def test_every_section_of_the_rows_is_one_this_ncu_knows(real_ncu: str) -> None:
    listed = subprocess.run([real_ncu, "--list-sections"], capture_output=True, text=True, timeout=120).stdout
    known = {line.split()[0] for line in listed.splitlines() if line.strip() and not line.startswith(("-", "Identifier"))}
    assert {section for row in WHY for section in row.sections} <= known


# ----------------------------------------------------------------------------- the sections' metrics


def test_ncu_lists_the_metrics_its_section_files_name(real_ncu: str) -> None:
    files = [*Path.home().glob("Documents/NVIDIA Nsight Compute/*/Sections/WarpStateStatistics.section"),
             Path("/usr/lib/x86_64-linux-gnu/nsight-compute/sections/WarpStateStatistics.section")]
    section_file = next((f for f in files if f.is_file()), None)
    if section_file is None:
        pytest.skip("no WarpStateStatistics.section in this ncu install")
    named = set(re.findall(r'Name: "(\w+__[\w.]+)"', section_file.read_text()))  # metric names, not titles
    listed = list_section_metrics(real_ncu, ("WarpStateStats",))
    assert listed.problem is None and named and named <= set(listed.names)


def test_a_section_ncu_does_not_know_is_said_in_its_words(real_ncu: str) -> None:
    listed = list_section_metrics(real_ncu, ("NoSuchSection",))
    assert listed.names == () and listed.problem is not None and "did not match any section" in listed.problem


def test_the_listing_keeps_names_and_skips_filters_and_ncus_own_lines() -> None:
    text = "a__b.sum\n -a__b.sum\ngroup:memory__dram_table\n -arch:80:90:group:memory__dram_table\n==WARNING== x\na__b.sum\n"
    assert parse_listing(text) == ("a__b.sum", "group:memory__dram_table")


@pytest.mark.parametrize("row", WHY, ids=lambda row: row.wall)
def test_the_predicted_passes_are_perfworks_over_what_ncu_lists(real_ncu: str, gh100: passes.ChipEvaluator,
                                                                 row: WhyRow) -> None:
    wall = row.wall
    check = why_check(NcuOptions(), wall, "gh100", real_ncu)
    names = list_section_metrics(real_ncu, WHY_BY_WALL[wall].sections).names
    expected = passes.predict(gh100, (*WHY_BY_WALL[wall].metrics, *names))
    assert check.passes == expected.passes and check.passes is not None and check.passes > 0
    assert check.counter_passes == expected.counter_passes and check.sass_passes == expected.sass_passes
    assert (check.note is not None) == bool(expected.unmodelled_metrics or expected.unknown_metrics)


# ----------------------------------------------------------------------------- which row


def test_the_verdict_that_binds_the_most_launch_time_picks_the_row(corpus_dir: Path) -> None:
    launches = read_launches(corpus_dir / MIXED)
    verdicts = {classify(launch).bound for launch in launches}
    assert len(verdicts) == 2  # the report is a real mix
    longest = max(launches, key=lambda launch: launch.value("duration_ns") or 0)
    total = sum(launch.value("duration_ns") or 0 for launch in launches)
    assert (longest.value("duration_ns") or 0) > total / 2  # so its verdict binds the most time
    assert binding_wall(launches, 0.6) == classify(longest).bound


def test_no_row_where_every_launch_is_unknown(corpus_dir: Path) -> None:
    launches = read_launches(corpus_dir / "2388612861__GPU-DEMO__ncu_report.ncu-rep")  # durations only
    assert {classify(launch).bound for launch in launches} == {"unknown"}
    assert binding_wall(launches, 0.6) is None


# ----------------------------------------------------------------------------- profile --why --dry-run


def test_profile_why_dry_run_prints_every_rows_sections_and_predicted_passes(real_ncu: str, tmp_path: Path) -> None:
    perfworks_or_skip()
    result = CliRunner().invoke(cli, ["profile", "flat_decode", "--why", "--dry-run", "--chip", "gh100",
                                      "--ncu", real_ncu, "--store", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    assert len([line for line in result.output.splitlines() if line.startswith(real_ncu)]) == 1  # tier 1 only
    assert f"stored under {tmp_path / 'p' / '.tier3'}" in result.output
    for row in WHY:
        line = next(line for line in result.output.splitlines() if line.startswith(f"#   {row.wall}: sections"))
        assert line.startswith(f"#   {row.wall}: sections {', '.join(row.sections)}")
        assert all(rule in line for rule in row.rules)
        check = why_check(NcuOptions(), row.wall, "gh100", real_ncu)
        assert f"{check.passes} passes predicted on gh100 ({check.counter_passes} counter + {check.sass_passes} " \
               f"SASS-patching" in result.output
    assert not (tmp_path / "p").exists()


def test_profile_why_wall_dry_run_prints_the_tier_three_command(real_ncu: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["profile", "flat_decode", "--why", "latency", "--dry-run", "--chip", "gh100",
                                      "--ncu", real_ncu, "--store", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    commands = [shlex.split(line) for line in result.output.splitlines() if line.startswith(real_ncu)]
    assert len(commands) == 2
    first, third = commands
    assert "--section" not in first and _sections_of(third) == WHY_BY_WALL["latency"].sections
    assert third[third.index("--import-source") + 1] == "yes"
    assert Path(third[third.index("--export") + 1]).is_relative_to(tmp_path / "p" / ".tier3")
    assert first[first.index("--nvtx-include") + 1] == third[third.index("--nvtx-include") + 1]
    assert next(line for line in result.output.splitlines() if line.startswith("#   ")).startswith("#   latency:")


def test_why_names_only_walls(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["profile", "flat_decode", "--why", "unknown", "--dry-run"])
    assert result.exit_code == 2 and "'unknown' is not one of" in result.output
    assert FROM_VERDICT not in BOUND_NAMES  # the flag's own value is no verdict


def test_the_docs_table_is_the_rows(real_ncu: str) -> None:
    perfworks_or_skip()
    text = (DOCS / "profiling.md").read_text()
    version = subprocess.run([real_ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    for row in WHY:
        line = next((line for line in text.splitlines() if line.startswith(f"| {row.wall} |")), None)
        assert line is not None, f"docs/profiling.md has no row for {row.wall}"
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert cells[1] == (", ".join(f"`{s}`" for s in row.sections) + (f" + {len(row.metrics)} metrics" if row.metrics else "")
                            + (" + `--import-source yes`" if row.source else ""))
        assert cells[2] == ", ".join(row.rules)
        if "Version 2022.3.0" in version:  # the docs' passes are this ncu's section lists on GH100
            check = why_check(NcuOptions(), row.wall, "gh100", real_ncu)
            assert cells[3] == f"{check.counter_passes} + {check.sass_passes} → {check.recorded_expected}"
