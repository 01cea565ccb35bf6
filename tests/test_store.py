"""The profile store: layout, atomic completion, what iter_runs sees and ignores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ncuflow import store
from ncuflow.store import (
    MANIFEST_FIELDS,
    SCHEMA_VERSION,
    StoreError,
    abandon_run,
    begin_run,
    complete_runs_for_key,
    finish_run,
    iter_runs,
    keep_failed_run,
    params_slug,
    write_run,
)

KEY_A = "a" * 8 + "1" * 56
KEY_B = "b" * 8 + "2" * 56


@pytest.fixture()
def report(corpus_dir: Path) -> Path:
    return corpus_dir / "yzwang2000__cudaCode__profile.ncu-rep"


def test_write_run_layout_and_manifest(tmp_path: Path, report: Path) -> None:
    record = write_run(
        tmp_path,
        cell="flat_decode",
        params={"layout": "scatter", "batch": 32},
        content_key=KEY_A,
        report_src=report,
        manifest_extra={"gpu_name": "NVIDIA H200", "replica": 2},
    )
    assert record.path.parent == tmp_path / "flat_decode" / "layout-scatter_batch-32-aaaaaaaa"
    assert record.report_path.read_bytes() == report.read_bytes()
    assert record.log_path.is_file()
    on_disk = json.loads((record.path / "manifest.json").read_text())
    assert on_disk == record.manifest.to_json()
    assert set(MANIFEST_FIELDS) <= set(on_disk)
    assert on_disk["schema_version"] == SCHEMA_VERSION
    assert on_disk["params"] == {"layout": "scatter", "batch": 32}
    assert on_disk["gpu_name"] == "NVIDIA H200" and on_disk["replica"] == 2
    assert on_disk["run_id"] == record.path.name
    assert on_disk["duration_unprofiled"] is None
    assert record.cell == "flat_decode" and record.content_key == KEY_A


def test_iter_runs_sees_complete_runs_only(tmp_path: Path, report: Path) -> None:
    a1 = write_run(tmp_path, cell="c", params={"x": 1}, content_key=KEY_A, report_src=report)
    a2 = write_run(tmp_path, cell="c", params={"x": 1}, content_key=KEY_A, report_src=report)
    b = write_run(tmp_path, cell="d", params={"x": 2}, content_key=KEY_B, report_src=report)
    # a run being written, a failed one and a folder without a manifest
    pending = begin_run(tmp_path, "c", "x-1", KEY_A)
    (pending.report_path).write_bytes(report.read_bytes())
    failed = begin_run(tmp_path, "c", "x-1", KEY_A)
    kept = keep_failed_run(failed, {"cell": "c", "exit_status": 1})
    assert kept is not None and kept.name.startswith(".failed-")
    (a1.path.parent / "junk").mkdir()  # a visible folder in a point claims to be a run: damaged, named
    with pytest.warns(store.DamagedRunWarning, match=r"damaged run .*junk skipped: manifest.json: the file is missing"):
        found = {r.path for r in iter_runs(tmp_path)}
    assert found == {a1.path, a2.path, b.path}
    assert {r.path for r in iter_runs(tmp_path, cell="d")} == {b.path}
    (a1.path.parent / "junk").rmdir()
    assert {r.path for r in complete_runs_for_key(tmp_path, "c", KEY_A)} == {a1.path, a2.path}
    assert complete_runs_for_key(tmp_path, "c", KEY_B) == []
    # completing the pending one makes it visible, atomically
    record = finish_run(pending, {"cell": "c", "params": {"x": 1}, "content_key": KEY_A})
    assert record.path in {r.path for r in iter_runs(tmp_path)}
    assert not pending.tmp_path.exists()


def test_same_key_prefix_different_key_is_not_the_same_point(tmp_path: Path, report: Path) -> None:
    other = KEY_A[:8] + "9" * 56
    write_run(tmp_path, cell="c", params={"x": 1}, content_key=other, report_src=report)
    assert complete_runs_for_key(tmp_path, "c", KEY_A) == []
    assert len(complete_runs_for_key(tmp_path, "c", other)) == 1


def test_finish_without_report_refuses(tmp_path: Path) -> None:
    pending = begin_run(tmp_path, "c", "s", KEY_A)
    with pytest.raises(StoreError, match="no report"):
        finish_run(pending, {"cell": "c"})
    abandon_run(pending)
    assert not pending.tmp_path.exists()
    assert list(iter_runs(tmp_path)) == []


def test_unknown_schema_and_garbage_manifest_are_skipped_with_a_warning(tmp_path: Path, report: Path) -> None:
    rec = write_run(tmp_path, cell="c", params={}, content_key=KEY_A, report_src=report)
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
    point = store.point_dir(tmp_path, "c", "s", KEY_A)
    point.mkdir(parents=True)
    stale = point / f".tmp-20260101T000000Z-abcdef-{dead_pid}"
    stale.mkdir()
    alive = point / f".tmp-20260101T000000Z-abcdef-{os.getppid()}"
    alive.mkdir()
    pending = begin_run(tmp_path, "c", "s", KEY_A)
    assert not stale.exists()
    assert alive.exists()  # a live process may still be writing it
    assert pending.tmp_path.exists()


def test_params_slug_is_safe() -> None:
    assert params_slug({}) == "default"
    assert params_slug({"kv": "shared", "page": 16}) == "kv-shared_page-16"
    assert "/" not in params_slug({"a/b": "../x"})


def test_short_key_is_refused(tmp_path: Path, report: Path) -> None:
    with pytest.raises(StoreError):
        write_run(tmp_path, cell="c", params={}, content_key="abc", report_src=report)
