"""The profile store: layout, atomic completion, what iter_runs sees and ignores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ncuflow import store
from ncuflow.cells.contract import CellSpec
from ncuflow.store import (
    SCHEMA_VERSION,
    StoreError,
    abandon_run,
    begin_run,
    complete_runs_for_key,
    finish_run,
    iter_runs,
    keep_failed_run,
    write_run,
)
from ncuflow.store.manifest import Machine, Manifest, Outcome, Provenance, RunIdentity

KEY_A = "a" * 8 + "1" * 56
KEY_B = "b" * 8 + "2" * 56


@pytest.fixture()
def report(corpus_dir: Path) -> Path:
    return corpus_dir / "yzwang2000__cudaCode__profile.ncu-rep"


def test_write_run_layout_and_manifest(tmp_path: Path, report: Path) -> None:
    spec = CellSpec.of("flat_decode", {"layout": "scatter", "batch": 32})
    record = write_run(tmp_path, spec, report, content_key=KEY_A, machine=Machine(gpu_name="NVIDIA H200"),
                       provenance=Provenance(replica=2))
    assert record.path.parent == tmp_path / "flat_decode" / "batch32-layoutscatter-aaaaaaaa"  # the spec's own slug
    assert spec.slug() == "batch32-layoutscatter"
    assert record.report_path.read_bytes() == report.read_bytes()
    assert record.log_path.is_file()
    on_disk = json.loads((record.path / "manifest.json").read_text())
    assert on_disk == record.manifest.to_json()
    assert on_disk["schema_version"] == SCHEMA_VERSION
    assert on_disk["identity"]["params"] == {"batch": 32, "layout": "scatter"}
    assert on_disk["machine"]["gpu_name"] == "NVIDIA H200" and on_disk["provenance"]["replica"] == 2
    assert on_disk["identity"]["run_id"] == record.path.name
    assert on_disk["cell_facts"]["duration_unprofiled"] is None
    assert record.cell == "flat_decode" and record.content_key == KEY_A


def test_iter_runs_sees_complete_runs_only(tmp_path: Path, report: Path) -> None:
    a1 = write_run(tmp_path, CellSpec.of("c", {"x": 1}), report, content_key=KEY_A)
    a2 = write_run(tmp_path, CellSpec.of("c", {"x": 1}), report, content_key=KEY_A)
    b = write_run(tmp_path, CellSpec.of("d", {"x": 2}), report, content_key=KEY_B)
    # a run being written, a failed one, a folder holding no run's files and one holding a report alone
    spec = CellSpec.of("c", {"x": 1})
    pending = begin_run(tmp_path, spec, KEY_A)
    (pending.report_path).write_bytes(report.read_bytes())
    failed = begin_run(tmp_path, spec, KEY_A)
    identity = RunIdentity("c", {"x": 1}, KEY_A, failed.run_id)
    kept = keep_failed_run(failed, Manifest(identity, outcome=Outcome(exit_status=1)))
    assert kept is not None and kept.name.startswith(".failed-")
    (a1.path.parent / "junk").mkdir()  # no manifest, no report: not a run, neither complete nor damaged
    (a1.path.parent / "half").mkdir()
    (a1.path.parent / "half" / "report.ncu-rep").write_bytes(report.read_bytes())  # a run's report: damaged
    with pytest.warns(store.DamagedRunWarning, match=r"damaged run .*half skipped: manifest.json: the file is missing"):
        found = {r.path for r in iter_runs(tmp_path)}
    assert found == {a1.path, a2.path, b.path}
    assert {r.path for r in iter_runs(tmp_path, cell="d")} == {b.path}
    __import__("shutil").rmtree(a1.path.parent / "half")
    assert {r.path for r in complete_runs_for_key(tmp_path, "c", KEY_A)} == {a1.path, a2.path}
    assert complete_runs_for_key(tmp_path, "c", KEY_B) == []
    # completing the pending one makes it visible, atomically
    record = finish_run(pending, Manifest(RunIdentity("c", {"x": 1}, KEY_A, pending.run_id)))
    assert record.path in {r.path for r in iter_runs(tmp_path)}
    assert not pending.tmp_path.exists()


def test_same_key_prefix_different_key_is_not_the_same_point(tmp_path: Path, report: Path) -> None:
    other = KEY_A[:8] + "9" * 56
    write_run(tmp_path, CellSpec.of("c", {"x": 1}), report, content_key=other)
    assert complete_runs_for_key(tmp_path, "c", KEY_A) == []
    assert len(complete_runs_for_key(tmp_path, "c", other)) == 1


def test_finish_without_report_refuses(tmp_path: Path) -> None:
    pending = begin_run(tmp_path, CellSpec.of("c"), KEY_A)
    with pytest.raises(StoreError, match="no report"):
        finish_run(pending, Manifest(RunIdentity("c", {}, KEY_A, pending.run_id)))
    abandon_run(pending)
    assert not pending.tmp_path.exists()
    assert list(iter_runs(tmp_path)) == []


def test_unknown_schema_and_garbage_manifest_are_skipped_with_a_warning(tmp_path: Path, report: Path) -> None:
    rec = write_run(tmp_path, CellSpec.of("c", {}), report, content_key=KEY_A)
    manifest = json.loads((rec.path / "manifest.json").read_text())
    manifest["schema_version"] = SCHEMA_VERSION + 1
    (rec.path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.warns(store.DamagedRunWarning, match="newer ncuflow"):
        assert list(iter_runs(tmp_path)) == []
    (rec.path / "manifest.json").write_text("{not json")
    with pytest.warns(store.DamagedRunWarning, match=r"damaged run .*manifest.json: it is not valid JSON"):
        assert list(iter_runs(tmp_path)) == []


def test_stale_temporary_of_dead_process_is_removed(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, timeout=30, check=True)
    dead_pid = int(proc.stdout.strip())
    point = store.point_dir(tmp_path, CellSpec.of("c"), KEY_A)
    point.mkdir(parents=True)
    stale = point / f".tmp-20260101T000000Z-abcdef-{dead_pid}"
    stale.mkdir()
    alive = point / f".tmp-20260101T000000Z-abcdef-{os.getppid()}"
    alive.mkdir()
    pending = begin_run(tmp_path, CellSpec.of("c"), KEY_A)
    assert not stale.exists()
    assert alive.exists()  # a live process may still be writing it
    assert pending.tmp_path.exists()


def test_a_point_folder_is_named_by_the_specs_slug_safely_and_briefly(tmp_path: Path) -> None:
    assert store.point_dir(tmp_path, CellSpec.of("c"), KEY_A).name == "default-aaaaaaaa"
    hostile = store.point_dir(tmp_path, CellSpec.of("../../etc", {"a/b": "../x" * 100}), KEY_A)
    assert hostile.parent.parent == tmp_path and hostile.parent.name == "etc"
    assert "/" not in hostile.name and len(hostile.name) <= store.POINT_SLUG_CHARS + 9


def test_short_key_is_refused(tmp_path: Path, report: Path) -> None:
    with pytest.raises(StoreError):
        write_run(tmp_path, CellSpec.of("c", {}), report, content_key="abc")
