"""The analysis scripts: rebuild_study (reference store or corpus demo) and the GPU script's plan."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.cli import cli
from tests.scripts import ANALYSIS, analysis_script
from tests.test_explain import build_store


def test_rebuild_study_says_plainly_when_the_store_is_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "h200").mkdir()
    assert analysis_script("rebuild_study").main(["--store", str(tmp_path), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "holds no profile run yet" in err and "run_study_on_gpu.py" in err
    assert not (tmp_path / "out").exists()


def test_rebuild_study_corpus_demo_writes_the_report(corpus_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert analysis_script("rebuild_study").main(["--corpus-demo", "-o", str(out), "--baseline", "stage=init"]) == 0
    text = capsys.readouterr().out
    assert "stage=fill: work changes off the critical path" in text
    assert "flag=on: the parameter does not reach the kernel" in text
    assert "verdicts: no_effect 1, off_critical_path 1, critical_path" in text
    assert (out / "report.md").is_file() and len(list(out.glob("*.png"))) == 5  # 3 sweeps, terms, roofline


def test_rebuild_study_finds_the_store_below_reference(corpus_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """profiles/reference/ holds one store per GPU (e.g. h200/): found one level down."""
    build_store(tmp_path / "reference" / "h200", corpus_dir)
    assert analysis_script("rebuild_study").main(["--store", str(tmp_path / "reference"), "-o", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "paged_decode, varying page" in text and "not measured in this store" in text


def test_gpu_script_dry_run_plans_every_step(capsys: pytest.CaptureFixture[str]) -> None:
    assert analysis_script("run_study_on_gpu").main(["--dry-run", "--store", "/tmp/x/h200"]) == 0
    text = capsys.readouterr().out
    assert "$ ncuflow doctor --strict" in text
    assert text.count("$ ncuflow sweep analysis/sweeps/") == len(list((ANALYSIS / "sweeps").glob("*.toml")))
    assert "$ ncuflow stability --headline /tmp/x/h200 --replicas 3 --store /tmp/x/h200" in text
    assert "$ ncuflow explain /tmp/x/h200 --vary page" in text


def test_gpu_side_commands_do_not_need_polars(corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """stability and explain (without --parquet) run where polars is not installed."""
    store = build_store(tmp_path / "store", corpus_dir)
    for name in [m for m in sys.modules if m == "polars" or m.startswith("polars.")]:
        monkeypatch.delitem(sys.modules, name)
    for name in ["ncuflow.output.report", "ncuflow.analyze.explain", "ncuflow.analyze.stability", "ncuflow.cli.analysis_cmds"]:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setitem(sys.modules, "polars", None)  # `import polars` now raises ImportError
    runner = CliRunner()
    result = runner.invoke(cli, ["stability", str(store)])
    assert result.exit_code == 0, repr(result.exception)
    result = runner.invoke(cli, ["explain", str(store), "--vary", "stage"])
    assert result.exit_code == 0, repr(result.exception)
    assert "work reaches the critical path" in result.output


def test_the_demo_is_short_and_never_cuts_a_path(corpus_dir: Path, tmp_path: Path) -> None:
    """`make demo` printed ~560 lines (a table per stored run) and wrapped run paths mid-word."""
    import subprocess

    repo = ANALYSIS.parent
    out = tmp_path / "demo"
    done = subprocess.run([sys.executable, str(ANALYSIS / "demo.py"), "--corpus", str(corpus_dir), "--out", str(out)],
                          capture_output=True, text=True, cwd=repo, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) <= 150, len(lines)
    assert sum(line.startswith("$ ncuflow ") for line in lines) >= 7
    for token in done.stdout.split():
        if "ncu-reports/" in token or "profiles/reference/" in token:
            path = token.lstrip("│([").rstrip("│)],.:")
            assert (repo / path).exists() or Path(path).exists(), f"cut path: {token}"
    assert (out / "report" / "report.md").is_file() and (out / "launches.parquet").is_file()
