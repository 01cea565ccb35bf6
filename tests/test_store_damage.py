"""Damaged runs are named (one warning line each), never skipped silently, never a crash.

A store of real corpus reports (tests.test_explain.build_store) plus one copy of a run
per kind of damage; every command that reads a store is run on it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from ncuflow.cli import cli
from ncuflow.store import MANIFEST_NAME, REPORT_NAME, iter_runs
from tests.test_explain import build_store

# kind -> what is done to the copied run's folder, and the words its warning must hold
DAMAGE = {
    "truncated": ("manifest.json: it is not valid JSON", lambda run: _write(run, '{"schema_version": 2, "cell": "sc')),
    "params_string": ("params is a string", lambda run: _edit(run, params="stage=init")),
    "params_list": ("params is an array", lambda run: _edit(run, params=["init", 1])),
    "cell_int": ("cell is an integer (5)", lambda run: _edit(run, cell=5)),
    "no_report": ("report.ncu-rep is missing", lambda run: (run / REPORT_NAME).unlink()),
    "other_point": ("has the content key 00000000…, not its point folder's",
                    lambda run: _edit(run, content_key="0" * 64)),
    "escaping_cell": ("is of the cell '../../../../etc/passwd', not of the cell folder scan",
                      lambda run: _edit(run, cell="../../../../etc/passwd")),
}


def _write(run: Path, text: str) -> None:
    (run / MANIFEST_NAME).write_text(text)


def _edit(run: Path, **changes: object) -> None:
    """Change fields of the run's identity (``run_id`` follows the folder's name)."""
    data = json.loads((run / MANIFEST_NAME).read_text())
    data["identity"].update({"run_id": run.name, **changes})
    _write(run, json.dumps(data))


@pytest.fixture(scope="module")
def damaged_store(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = build_store(tmp_path_factory.mktemp("damaged"), corpus_dir)
    good = sorted((root / "scan").glob("*stageinit*/*"))[0]
    made: dict[str, Path] = {}
    for kind, (_, damage) in DAMAGE.items():
        copy = good.with_name(f"20991231T000000Z-{kind}")
        shutil.copytree(good, copy)
        damage(copy)
        made[kind] = copy
    return root, made


def _warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("ncuflow: warning: damaged run")]


def _assert_named(output: str, made: dict[str, Path], kinds: list[str]) -> None:
    lines = _warnings(output)
    assert len(lines) == len(kinds), lines  # one line per damaged run, each once
    for kind in kinds:
        words = DAMAGE[kind][0]
        assert any(str(made[kind]) in line and words in line for line in lines), (kind, lines)


@pytest.mark.parametrize("command", [
    ["stability"], ["explain", "--vary", "stage"], ["report"],
])
def test_readers_name_every_damaged_run(damaged_store: tuple[Path, dict[str, Path]], tmp_path: Path,
                                        command: list[str]) -> None:
    root, made = damaged_store
    args = [*command, str(root)] + (["-o", str(tmp_path / "report")] if command == ["report"] else [])
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.exception is None
    _assert_named(result.output, made, list(DAMAGE))


def test_export_writes_no_row_from_a_damaged_manifest(damaged_store: tuple[Path, dict[str, Path]],
                                                      tmp_path: Path) -> None:
    root, made = damaged_store
    out = tmp_path / "launches.parquet"
    result = CliRunner().invoke(cli, ["export", str(root), "-o", str(out)])
    assert result.exit_code == 0, result.output
    _assert_named(result.output, made, list(DAMAGE))
    frame = pl.read_parquet(out)
    assert frame["cell"].null_count() == 0 and frame["run_id"].null_count() == 0
    assert not any(run_id.startswith("20991231T000000Z") for run_id in frame["run_id"])
    good_runs = {r.run_id for r in iter_runs(root)}
    assert set(frame["run_id"]) == good_runs and len(good_runs) == 9


def test_store_check_lists_and_repair_moves_aside(damaged_store: tuple[Path, dict[str, Path]],
                                                  tmp_path: Path) -> None:
    root = tmp_path / "store"
    shutil.copytree(damaged_store[0], root)
    runner = CliRunner()
    listed = runner.invoke(cli, ["store", "check", str(root)])
    assert listed.exit_code == 1, listed.output
    rows = [line.split("\t") for line in listed.output.splitlines() if line.startswith("damaged\t")]
    assert sorted(Path(path).name.rsplit("-", 1)[-1] for _, path, _ in rows) == sorted(DAMAGE)
    assert f"9 complete runs, {len(DAMAGE)} damaged" in listed.output
    repaired = runner.invoke(cli, ["store", "check", str(root), "--repair"])
    assert repaired.exit_code == 0, repaired.output
    assert repaired.output.count("moved\t") == len(DAMAGE)
    aside = sorted(p.name for p in root.rglob(".damaged-*"))
    assert aside == sorted(f".damaged-20991231T000000Z-{k}" for k in DAMAGE)
    assert all(any(p.iterdir()) for p in root.rglob(".damaged-*"))  # nothing deleted
    again = runner.invoke(cli, ["store", "check", str(root)])
    assert again.exit_code == 0 and "9 complete runs, 0 damaged" in again.output
    clean = runner.invoke(cli, ["stability", str(root)])
    assert clean.exit_code == 0 and _warnings(clean.output) == []


def test_store_check_of_a_missing_folder_is_one_paragraph(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["store", "check", str(tmp_path / "nope")])
    assert result.exit_code != 0
    assert "does not exist" in str(result.exception) or "does not exist" in result.output


def test_a_sweep_does_not_count_a_damaged_run_as_done(corpus_dir: Path, tmp_path: Path) -> None:
    """The point of a damaged run is still to profile, and the damage is named."""
    from ncuflow.profile.settings import ProfileSettings, SweepSettings
    from ncuflow.profile.sweep import parse_sweep
    from ncuflow.profile.sweep_run import SweepContext
    from ncuflow.store import write_run

    plan = parse_sweep({"cell": "copy_bandwidth", "replicas": 1, "axes": {"mib": [64, 128]}})
    for point in plan.points:
        record = write_run(tmp_path, point.spec, corpus_dir / "AlpriElse__cs599k__silu_CUDA_ncu-reports_2025-04-21-77_06-MT.ncu-rep")
    _edit(record.path, params="mib=128")
    with pytest.warns(Warning, match=r"damaged run .* identity.params is a string"):
        statuses = SweepContext(plan, ProfileSettings(store=tmp_path), SweepSettings(), None).statuses()
    assert [s.needed for s in statuses] == [0, 1]


def test_a_sweep_moves_a_damaged_run_aside_and_profiles_its_point_again(corpus_dir: Path, tmp_path: Path) -> None:
    """`sweep` renames the damaged run to .damaged-<run-id> (nothing deleted) and profiles it again."""
    from functools import partial

    from ncuflow.profile.orchestrate import StoredRun
    from ncuflow.profile.plan import ProfileJob
    from ncuflow.profile.settings import EscalationPolicy, ProfileSettings, SweepSettings
    from ncuflow.profile.sweep import parse_sweep
    from ncuflow.profile.sweep_run import LocalExecutor, run_sweep
    from ncuflow.store import write_run

    plan = parse_sweep({"cell": "copy_bandwidth", "replicas": 1, "axes": {"mib": [64, 128]}})
    report = corpus_dir / "AlpriElse__cs599k__silu_CUDA_ncu-reports_2025-04-21-77_06-MT.ncu-rep"
    records = [write_run(tmp_path, point.spec, report) for point in plan.points]
    damaged = records[1].path
    _edit(damaged, params="mib=128")
    profiled: list[str] = []

    def fake_profile(job: ProfileJob, settings: ProfileSettings) -> StoredRun:
        profiled.append(job.label)
        return StoredRun(write_run(tmp_path, plan.points[1].spec, report))

    settings = ProfileSettings(store=tmp_path, escalation=EscalationPolicy(enabled=False))
    outcome = run_sweep(plan, settings, SweepSettings(show_progress=False),
                        executor=partial(LocalExecutor, tier1_profile=fake_profile))
    assert len(profiled) == 1 and "mib=128" in profiled[0]
    assert not damaged.exists()
    moved = damaged.with_name(f".damaged-{damaged.name}")
    assert (moved / REPORT_NAME).is_file()  # moved aside, nothing deleted
    assert len(outcome.profiled) == 1
    assert len(list(iter_runs(tmp_path))) == 2
