"""Bad input gets one paragraph naming the file, a non-zero exit, no traceback, no parquet."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

SOURCE_REPORT = "spymaster2h__spyinfer__report.ncu-rep"  # 105 launches


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ncuflow", *args], capture_output=True, text=True, timeout=120, check=False
    )


def _bad_files(corpus_dir: Path, folder: Path, seed: int = 0) -> dict[str, Path]:
    original = (corpus_dir / SOURCE_REPORT).read_bytes()
    noise = random.Random(seed)
    files = {
        "empty": b"",
        "random": noise.randbytes(4096),
        "lfs": b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a2146\nsize 2149700\n",
        "cut_early": original[: len(original) // 200],
        "corrupt_head": original[:4] + noise.randbytes(400) + original[404:],
        "csv": b"\"ID\",\"Process ID\",\"Process Name\"\n",
    }
    paths = {}
    for name, data in files.items():
        path = folder / f"{name}.ncu-rep"
        path.write_bytes(data)
        paths[name] = path
    return paths


EXPECTED_WORDS = {
    "empty": "empty",
    "random": "not an Nsight Compute report",
    "lfs": "Git LFS pointer",
    "cut_early": "no profiled launch",
    "corrupt_head": "no profiled launch",
    "csv": "not an Nsight Compute report",
}


# The random cases with a few seeds: some corrupt headers make ncu_report's native code
# log to stderr, which must not reach the user beside ncuflow's paragraph.
CASES = [(case, 0) for case in sorted(EXPECTED_WORDS)] + [
    (case, seed) for case in ("corrupt_head", "random") for seed in range(1, 6)
]


@pytest.mark.parametrize(("case", "seed"), CASES)
def test_bad_report_gives_clean_error_and_no_parquet(corpus_dir: Path, tmp_path: Path, case: str, seed: int) -> None:
    bad = _bad_files(corpus_dir, tmp_path, seed)[case]
    output = tmp_path / "out.parquet"
    for args in (["export", str(bad), "-o", str(output)], ["classify", str(bad)]):
        result = _run(*args)
        assert result.returncode != 0
        assert "Traceback" not in result.stderr
        assert str(bad) in result.stderr
        assert EXPECTED_WORDS[case] in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1  # one paragraph
    assert not output.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ncuflow-tmp")]


def test_one_bad_report_among_good_ones_writes_nothing(corpus_dir: Path, tmp_path: Path) -> None:
    bad = _bad_files(corpus_dir, tmp_path)["random"]
    output = tmp_path / "out.parquet"
    result = _run("export", str(corpus_dir / SOURCE_REPORT), str(bad), "-o", str(output), "--metrics-long")
    assert result.returncode != 0
    assert not output.exists()
    assert list(tmp_path.glob("*.parquet")) == []


def test_missing_path_and_empty_folder(tmp_path: Path) -> None:
    result = _run("classify", str(tmp_path / "nope.ncu-rep"))
    assert result.returncode != 0 and "does not exist" in result.stderr and "Traceback" not in result.stderr
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a report")
    result = _run("export", str(empty), "-o", str(tmp_path / "x.parquet"))
    assert result.returncode != 0 and "holds no Nsight Compute report" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "x.parquet").exists()


def test_truncated_report_exports_complete_actions_with_a_warning(corpus_dir: Path, tmp_path: Path) -> None:
    import polars as pl

    original = (corpus_dir / SOURCE_REPORT).read_bytes()
    cut = tmp_path / "cut.ncu-rep"
    cut.write_bytes(original[: int(len(original) * 0.6)])
    output = tmp_path / "cut.parquet"
    result = _run("export", str(cut), "-o", str(output))
    assert result.returncode == 0, result.stderr
    assert "damaged" in result.stderr and str(cut) in result.stderr
    frame = pl.read_parquet(output)
    assert 0 < frame.height < 105
    assert frame["kernel_function"].null_count() == 0
    assert frame["duration_ns"].null_count() == 0
