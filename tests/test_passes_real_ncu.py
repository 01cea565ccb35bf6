"""The real ncu, on a machine without a GPU: its parser accepts every command line ncuflow builds.

Debian's ``nsight-compute`` (non-free; ``make setup-test`` installs it where apt is
available) parses every option, starts the program with its injection and fails with
"failed to connect to the CUDA driver". ``--query-metrics --chips CHIP`` lists a chip's
metrics with no GPU. The fakes stay for the failures the real ncu cannot produce here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from ncuflow import store
from ncuflow.cells.registry import list_cells, parse_spec
from ncuflow.profile import orchestrate
from ncuflow.profile.ncu import NcuOptions
from ncuflow.profile.ncu_errors import DriverMismatch, error_from_log
from ncuflow.profile.plan import CellTarget, CommandTarget, ProfileJob, plan_job
from ncuflow.profile.settings import ProfileSettings
from ncuflow.profile.sweep import load_sweep
from ncuflow.profile.why import WHY, why_options
from ncuflow.read.metrics import decisive_metric_names

REPO = Path(__file__).resolve().parent.parent
FAKE = REPO / "tests" / "fake_ncu" / "ncu"
NO_DRIVER = not Path("/proc/driver/nvidia").exists()
PARSER_REFUSALS = re.compile(r"unrecognised option|is invalid|Use --help for further details", re.I)


@cache
def _real_ncu() -> str | None:
    found = shutil.which("ncu")
    if not found or Path(found).resolve() == FAKE.resolve():
        return None
    try:
        done = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except OSError:
        return None
    return found if "Nsight Compute" in done.stdout else None


@pytest.fixture(scope="module")
def real_ncu() -> str:
    ncu = _real_ncu()
    if ncu is None:
        pytest.skip("the real ncu is not installed: `make setup-test` installs Debian's nsight-compute "
                    "(component non-free) where apt-get is available and it runs as root")
    return ncu


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def _with_app(command: tuple[str, ...], app: list[str]) -> list[str]:
    """The ncu part of a planned command with a trivial program in place of the cell."""
    cut = command.index("--force-overwrite") + 1
    return [*command[:cut], *app]


def _tier_options() -> dict[str, NcuOptions]:
    return {
        "tier 1": NcuOptions(),
        "tier 2": NcuOptions(metric_set="none", extra_metrics=decisive_metric_names(2)),
        **{f"why {row.wall}": why_options(NcuOptions(), row.wall) for row in WHY},  # tier 3, each wall's row
    }


def _planned_commands(ncu: str, root: Path) -> list[tuple[str, tuple[str, ...]]]:
    commands: list[tuple[str, tuple[str, ...]]] = []
    for tier, options in _tier_options().items():
        for cell in (c.name for c in list_cells() if c.needs_ncu):
            plan = plan_job(ProfileJob(CellTarget(parse_spec(cell)), options), ProfileSettings(store=root, ncu=ncu))
            commands.append((f"{cell} ({tier})", plan.command))
        command_options = replace(options, kernel_regex="gemm", launch_count=2)
        plan = plan_job(ProfileJob(CommandTarget(("/bin/true", "--size", "4096")), command_options),
                        ProfileSettings(store=root, ncu=ncu))
        commands.append((f"profile -- CMD ({tier})", plan.command))
    for sweep_file in sorted((REPO / "analysis" / "sweeps").glob("*.toml")):
        sweep = load_sweep(sweep_file)
        for point in sweep.points:
            plan = plan_job(ProfileJob(CellTarget(point.spec), sweep.options), ProfileSettings(store=root, ncu=ncu))
            commands.append((f"{sweep_file.name} point {point.index}", plan.command))
    return commands


def test_every_command_line_is_accepted_by_the_real_parser(real_ncu: str, tmp_path: Path) -> None:
    commands = _planned_commands(real_ncu, tmp_path / "p")
    assert len(commands) >= 8
    seen: set[tuple[str, ...]] = set()
    for label, command in commands:
        ncu_part = tuple(command[: command.index("--force-overwrite") + 1])
        if ncu_part in seen:  # sweep points differ only in the program's arguments
            continue
        seen.add(ncu_part)
        Path(command[command.index("--export") + 1]).parent.mkdir(parents=True, exist_ok=True)
        done = _run(_with_app(command, ["/bin/true"]))
        text = done.stdout + done.stderr
        assert not PARSER_REFUSALS.search(text), f"{label}: ncu refused the command line: {text.strip()}"
        if NO_DRIVER:
            assert "failed to connect to the CUDA driver" in text, f"{label}: {text.strip()}"
            error = error_from_log(text, done.returncode, filters="test")
            assert isinstance(error, DriverMismatch), f"{label}: {error!r}"


def test_the_parser_check_can_fail(real_ncu: str) -> None:
    done = _run([real_ncu, "--replay-mode", "sometimes", "/bin/true"])
    assert done.returncode != 0 and PARSER_REFUSALS.search(done.stdout + done.stderr)


@pytest.mark.skipif(not NO_DRIVER, reason="a machine with an NVIDIA driver really profiles")
def test_profile_with_the_real_ncu_is_one_paragraph_about_the_driver(real_ncu: str, tmp_path: Path) -> None:
    with pytest.raises(DriverMismatch) as caught:
        orchestrate.profile(ProfileJob(CommandTarget(("/bin/true",))),
                            ProfileSettings(store=tmp_path / "p", ncu=real_ncu, timeout=120))
    message = str(caught.value)
    assert "CUDA driver" in message and "\n" not in message
    assert list(store.iter_runs(tmp_path / "p")) == []  # nothing stored as complete


def _ncu_year(real_ncu: str) -> int:
    found = re.search(r"Version (20\d\d)\.", _run([real_ncu, "--version"]).stdout)
    return int(found.group(1)) if found else 0


def _ncu_chips(real_ncu: str) -> list[str]:
    done = _run([real_ncu, "--list-chips"])
    return [c.strip() for c in done.stdout.replace("\n", ",").split(",") if c.strip()]


def test_the_names_offered_on_each_chip_are_known_to_ncu_for_it(real_ncu: str) -> None:
    """Every decisive name ncuflow offers on a chip it claims (Perfworks' drop per chip) is one
    the real ncu lists for that chip: Perfworks and ncu agree on what a chip refuses."""
    from ncuflow.profile import passes, perfworks

    try:
        modelled = {chip.lower() for chip in perfworks.load().chips()}
    except perfworks.PerfworksUnavailable as error:
        pytest.skip(error.what)
    chips = [c for c in passes.claimed_chips() if c in modelled and c in _ncu_chips(real_ncu)]
    assert len(chips) >= 10, chips
    for chip in chips:
        offered = passes.collection_on_chip(passes.get_collection("decisive"), chip).collection
        names = (*(offered.metrics or ()), *offered.escalation)
        bases = sorted({name.split(".")[0] for name in names})
        done = _run([real_ncu, "--query-metrics", "--chips", chip, "--query-metrics-mode", "suffix",
                     "--metrics", ",".join(bases)])
        assert done.returncode == 0, done.stdout + done.stderr
        listed = {line.split()[0] for line in done.stdout.splitlines() if line and not line.startswith((" ", "-"))}
        # Hopper's TMA counters came to ncu after its first GH100 support: an older ncu (Debian's
        # 2022.3) does not list smsp__inst_executed_op_tma_ld, and a profile drops it and retries
        newer = {n for n in names if "tma" in n} if _ncu_year(real_ncu) < 2023 else set()
        assert [n for n in names if n not in listed and n not in newer] == [], chip
