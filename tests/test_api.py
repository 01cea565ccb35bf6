"""The Python API (docs/api.md): public names only, its worked example run as written, cheap import."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import ncuflow

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "api.md"


def test_the_public_names_return_frames_and_frozen_records(corpus_dir: Path) -> None:
    import dataclasses

    import polars as pl

    report = corpus_dir / "panjd123__cutlass__report.ncu-rep"
    launches = ncuflow.launches(report)
    assert isinstance(launches, pl.DataFrame) and launches.height == 3
    assert {"kernel_demangled", "flops_fp32", "src_flops_fp32", "u_l2", "bound", "missing"} <= set(launches.columns)
    verdicts = ncuflow.classify([report])
    assert verdicts["bound"].to_list() == ["latency"] * 3 and verdicts["grid_size"].to_list() == [96.0] * 3
    summary = ncuflow.summary(str(report))
    assert summary["share"].sum() == pytest.approx(1.0) and summary.height == 2
    (record,) = ncuflow.summaries(report)
    assert dataclasses.is_dataclass(record)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.launches = 0  # type: ignore[misc]
    comparison = ncuflow.compare(report, report)
    assert [k.how for k in comparison.matched] == ["matched", "matched"]
    (line,) = ncuflow.roofline(report, kernel="Kernel")
    assert line.device == "NVIDIA A100 80GB PCIe"
    assert set(ncuflow.API) <= set(dir(ncuflow))
    with pytest.raises(AttributeError):
        ncuflow.no_such_function  # noqa: B018


def test_the_worked_example_of_the_docs_runs(corpus_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from ncuflow.output.export import launches_schema

    (code,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("NCUFLOW_CORPUS", str(corpus_dir))
    exec(compile(code, str(DOC), "exec"), {"__name__": "docs_api_example"})
    printed = capsys.readouterr().out
    shown = DOC.read_text().split("What it printed")[1]
    for line in ("generate_encoded_signal          94.3 GFLOP/s  I_dram 251  pipe",
                 "reconfigured warptiling [grid=64, block=256] → warptiling [grid=64, block=128] - ambiguous",
                 "7 only in base, 0 only in new", f"(18, {len(launches_schema())})"):
        assert line in printed and line in shown


def test_import_ncuflow_stays_cheap_and_the_api_imports_no_cli() -> None:
    code = (
        "import sys; sys.modules['polars'] = None\n"
        "import ncuflow\n"
        "assert not any(m.startswith(('ncuflow.read', 'ncuflow.analyze', 'ncuflow.output')) for m in sys.modules)\n"
        "del sys.modules['polars']\n"
        "ncuflow.summary\n"
        "assert 'ncuflow.output.api' in sys.modules\n"
        "assert not any(m == 'click' or m.startswith('ncuflow.cli') for m in sys.modules), sorted(sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("guarded", [False, True])
def test_a_script_that_reads_in_workers_is_told_of_the_main_guard(corpus_dir: Path, tmp_path: Path,
                                                                   guarded: bool) -> None:
    """A script run as `python SCRIPT.py` is imported again in every worker (Python's forkserver);
    one that calls ncuflow at its top level made each worker die with status 1, reported as an
    out-of-memory or a crash. Through ``ncu_report`` (always in workers) it is told what to do in
    one paragraph; with the guard it reads."""
    reports = sorted(corpus_dir.glob("*.ncu-rep"), key=lambda p: p.stat().st_size)[:2]
    call = f"use_reader('ncu_report'); print(len(ncuflow.launches({[str(r) for r in reports]!r})))"
    body = f'if __name__ == "__main__":\n    {call}\n' if guarded else f"{call}\n"
    script = tmp_path / "notebook_cell.py"
    script.write_text("import ncuflow\nfrom ncuflow.read.readers import use_reader\n" + body)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path)
    if guarded:
        assert result.returncode == 0 and int(result.stdout.split()[-1]) > 0, result.stderr
    else:
        assert result.returncode != 0
        said = result.stderr.splitlines()[-1]
        assert 'if __name__ == "__main__":' in said and "out of memory" not in said, said
