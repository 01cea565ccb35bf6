"""Paths and names in the console's lines are printed as they are: rich reads ``[bold]`` or ``[x]``
in a markup string as a tag (the text eaten, what follows restyled), so every path or name a
line interpolates goes through ``ncuflow.files.safe_text.markup_text``. With the fake ncu
(``tests/fake_ncu``) storing a real corpus report, in a store whose folders hold such tags."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from ncuflow import store
from ncuflow.cli import cli
from ncuflow.store import MANIFEST_NAME

FAKE_NCU = Path(__file__).parent / "fake_ncu" / "ncu"
REPORT_NAME = "yzwang2000__cudaCode__profile.ncu-rep"
# What rich would read as markup: a style tag ([bold]), a tag it does not know ([x], eaten), and
# brackets that are no tag ([1]).
TAGGED = "run[bold] a[1] [x]"


@pytest.fixture()
def fake_ncu(corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / REPORT_NAME))
    monkeypatch.setenv("FAKE_NCU_CALLS", str(tmp_path / "calls.jsonl"))
    monkeypatch.delenv("FAKE_NCU_MODE", raising=False)
    return FAKE_NCU


def test_profile_prints_the_stored_runs_path_as_it_is(fake_ncu: Path, tmp_path: Path) -> None:
    root = tmp_path / TAGGED / "profiles"
    result = CliRunner().invoke(cli, ["profile", "copy_bandwidth:mib=16", "--store", str(root), "--ncu", str(fake_ncu),
                                      "--no-escalate"])
    assert result.exit_code == 0, result.output
    runs = list(store.iter_runs(root))
    assert len(runs) == 1 and TAGGED in str(runs[0].path)
    assert f"stored {runs[0].path} (ncu wall time" in result.output, result.output


def test_sweep_prints_its_name_and_a_damaged_runs_path_as_they_are(fake_ncu: Path, tmp_path: Path) -> None:
    root = tmp_path / TAGGED / "profiles"
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'name = "{TAGGED}"\ncell = "copy_bandwidth"\nreplicas = 1\n[axes]\nmib = [16]\n')
    command = ["sweep", str(sweep), "--store", str(root), "--ncu", str(fake_ncu), "--no-escalate"]
    first = CliRunner().invoke(cli, command)
    assert first.exit_code == 0, first.output
    assert f"sweep {TAGGED}: 1 points" in first.output, first.output
    (run,) = store.iter_runs(root)
    (run.path / MANIFEST_NAME).write_text('{"schema_version": 3, "cell": "co')  # cut short: a damaged run
    again = CliRunner().invoke(cli, command)
    assert again.exit_code == 0, again.output
    moved = [line for line in again.output.splitlines() if line.startswith("moved a damaged run aside")]
    assert len(moved) == 1 and f": {run.path} -> " in moved[0], again.output


def test_the_reading_bar_shows_a_files_name_as_it_is(tmp_path: Path) -> None:
    from ncuflow.cli.progress import Bar, reading_progress

    progress = reading_progress(Console(file=io.StringIO(), width=200))
    step = Bar(progress).stage(f"reading {TAGGED}", 1)
    report = tmp_path / TAGGED / f"{TAGGED}.ncu-rep"
    step(0, report)
    (task,) = progress.tasks
    assert progress.columns[0].render(task).plain == f"reading {TAGGED}: {report.name}"
