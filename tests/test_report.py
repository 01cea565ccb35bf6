"""`ncuflow report` on stores built from real corpus reports, and on plain reports."""

from __future__ import annotations

import struct
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from ncuflow.analyze.study import analyse
from ncuflow.cli import cli
from ncuflow.output.markdown import report_markdown
from ncuflow.read.runs import load_paths
from tests.test_explain import build_store

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.fixture(scope="module")
def store(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("store"), corpus_dir)


def test_report_writes_markdown_plots_and_tables(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["report", str(store), "-o", str(out), "--baseline", "stage=init"])
    assert result.exit_code == 0, result.output
    text = (out / "report.md").read_text()
    for heading in ("## Verdict per cell", "## Stability", "## Parameters", "### stage", "### flag", "### impl"):
        assert heading in text
    # the verdict table holds each point's binding term and terms
    assert "| silu:flag=off | silu_kernel [grid=8,192, block=256] | NVIDIA A100-SXM4-40GB | 1 | 3 | 437.18 µs | dram | 0.77 |" in text
    assert "| fill | work changes off the critical path | yes | no |" in text
    assert "| on | the parameter does not reach the kernel | no | no |" in text
    pngs = sorted(p.name for p in out.glob("*.png"))
    report_id = text.rsplit("Report id: `", 1)[1][:8]  # in each plot's name: report.md and its plots are one unit
    assert pngs == [f"{stem}-{report_id}.png" for stem in ("roofline", "sweep-flag-0-silu",
                                                         "sweep-impl-0-transpose", "sweep-stage-0-scan", "terms")]
    for name in pngs:
        assert f"]({name})" in text
        width, height = _png_size(out / name)
        assert width >= 600 and height >= 400
    assert pl.read_parquet_metadata(out / "stability.parquet")["ncuflow.report_id"] == report_id
    stability = pl.read_parquet(out / "stability.parquet")
    assert stability["group"].n_unique() == 9
    explain = pl.read_parquet(out / "explain.parquet")
    assert set(explain["param"].to_list()) == {"flag", "impl", "stage"}
    assert "points, " in result.output and "explained values" in result.output


def test_report_on_plain_reports_has_verdicts_and_nothing_to_explain(corpus_dir: Path) -> None:
    loaded = load_paths([corpus_dir / "spymaster2h__spyinfer__report.ncu-rep"])
    analysis = analyse(loaded)
    assert analysis.sweeps == {}
    text = report_markdown(analysis)
    assert "nothing to explain" in text
    assert "spymaster2h__spyinfer__report.ncu-rep" in text and "105" in text


def test_report_names_an_unreadable_run_and_skips_it(store: Path, tmp_path: Path, corpus_dir: Path) -> None:
    import shutil

    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    victim = next(copy.rglob("report.ncu-rep"))
    victim.write_bytes(b"not a report")
    loaded = load_paths([copy])
    assert len(loaded.runs) == 8
    # the store names it as a damaged run (repairable by `store check --repair`), before any reader opens it
    assert [line for line in loaded.damaged if str(victim.parent) in line and "report signature" in line]
