"""Stores written before schema 3 read as they did: the committed H200 store (schema 1) and the
same store rewritten as schema 3 give identical classify, stability, explain and report output."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow import store
from ncuflow.cli import cli
from ncuflow.store.manifest import read_manifest
from tests.conftest import REFERENCE_DIR

H200 = REFERENCE_DIR / "h200"


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The schema-1 store copied as it is, and copied with every manifest written as schema 3."""
    base = tmp_path_factory.mktemp("compat")
    old, new = base / "old" / "h200", base / "new" / "h200"
    shutil.copytree(H200, old)
    shutil.copytree(H200, new)
    for path in new.rglob("manifest.json"):
        path.write_text(json.dumps(read_manifest(path).to_json(), indent=1))
    return old, new


def _run(args: list[str]) -> str:
    result = CliRunner().invoke(cli, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def _same(old: str, new: str, old_root: Path, new_root: Path) -> None:
    def clean(text: str, root: Path) -> str:
        text = text.replace(str(root.parent), "STORE")
        text = re.sub(r"-[0-9a-f]{8}\.png", "-ID.png", text)  # each report's own id (issue 24)
        text = re.sub(r"Report id: `[0-9a-f]{8}`", "Report id: ID", text)
        return re.sub(r"generated \S+Z", "generated T", text)

    assert clean(old, old_root) == clean(new, new_root)


def test_the_rewritten_store_is_schema_3_and_the_committed_one_schema_1(rewritten: tuple[Path, Path]) -> None:
    old, new = rewritten
    assert {r.manifest.schema_version for r in store.iter_runs(old)} == {1}
    assert {r.manifest.schema_version for r in store.iter_runs(new)} == {3}
    assert [r.manifest.ref() for r in store.iter_runs(old)] == [r.manifest.ref() for r in store.iter_runs(new)]


@pytest.mark.parametrize("command", [
    ["classify", "--json", "--jobs", "0"],
    ["classify", "--evidence", "--jobs", "0"],
    ["stability", "--jobs", "0"],
    ["explain", "--vary", "page", "--jobs", "0"],
    ["explain", "--vary", "layout", "--jobs", "0"],
])
def test_old_and_new_schemas_read_identically(rewritten: tuple[Path, Path], command: list[str]) -> None:
    old, new = rewritten
    _same(_run([*command, str(old)]), _run([*command, str(new)]), old, new)


def test_the_report_of_either_schema_is_the_same(rewritten: tuple[Path, Path], tmp_path: Path) -> None:
    old, new = rewritten
    _run(["report", str(old), "-o", str(tmp_path / "old"), "--jobs", "0"])
    _run(["report", str(new), "-o", str(tmp_path / "new"), "--jobs", "0"])
    _same((tmp_path / "old" / "report.md").read_text(), (tmp_path / "new" / "report.md").read_text(), old, new)
