"""--kernel REGEX and --nvtx RANGE: the same selection in every reading command, on real reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.analyze.selection import Selection, nvtx_matches
from ncuflow.cli import cli
from ncuflow.errors import UsageError

CUTLASS = "panjd123__cutlass__report.ncu-rep"  # NVTX ranges Non-fused-GEMM (2 launches) and Fused-GEMM (1)
H200 = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "h200"


def test_nvtx_ranges_match_by_name_path_and_domain() -> None:
    assert nvtx_matches(("ncuflow", "paged_decode"), "paged_decode")
    assert nvtx_matches(("ncuflow", "paged_decode"), "ncuflow/paged_decode/")  # ncu's push/pop spelling
    assert not nvtx_matches(("ncuflow", "paged_decode"), "paged_decode/ncuflow")
    assert nvtx_matches(("app@step", "decode"), "step") and nvtx_matches(("app@step",), "app@step")
    assert not nvtx_matches(("Non-fused-GEMM",), "Fused-GEMM")
    assert not nvtx_matches((), "x")


def test_a_bad_selection_is_refused_where_it_enters() -> None:
    with pytest.raises(UsageError):
        Selection(kernel="(")
    with pytest.raises(UsageError):
        Selection(nvtx="/")


@pytest.mark.parametrize("command", [["classify", "--json"], ["summary", "--json"]])
def test_every_reading_command_selects_by_nvtx(corpus_dir: Path, command: list[str]) -> None:
    report = str(corpus_dir / CUTLASS)
    every = CliRunner().invoke(cli, [*command, report])
    fused = CliRunner().invoke(cli, [*command, report, "--nvtx", "Fused-GEMM"])
    assert every.exit_code == 0 and fused.exit_code == 0, fused.output
    if command[0] == "classify":
        assert len(json.loads(every.stdout)) == 3 and len(json.loads(fused.stdout)) == 1
    else:
        (found,) = json.loads(fused.stdout)["reports"]
        assert found["launches"] == 1 and found["kernels"][0]["share"] == pytest.approx(1.0)
    nothing = CliRunner().invoke(cli, [*command, report, "--nvtx", "no-such-range"])
    assert isinstance(nothing.exception, UsageError)


def test_export_keeps_only_the_selected_launches(corpus_dir: Path, tmp_path: Path) -> None:
    import polars as pl

    out = tmp_path / "launches.parquet"
    result = CliRunner().invoke(cli, ["export", str(corpus_dir / CUTLASS), "--nvtx", "Non-fused-GEMM", "-o", str(out),
                                      "--jobs", "0"])
    assert result.exit_code == 0, result.output
    frame = pl.read_parquet(out)
    assert frame.height == 2 and frame["nvtx"].to_list() == [["Non-fused-GEMM"]] * 2


def test_stability_explain_report_and_compare_take_both(tmp_path: Path) -> None:
    store = str(H200 / "paged_decode")
    only_merge = ["--kernel", "merge", "--nvtx", "ncuflow/paged_decode"]
    result = CliRunner().invoke(cli, ["explain", str(H200), "--vary", "page", *only_merge])
    assert result.exit_code == 0, result.output
    assert "merge_splits_kernel" in result.output and "paged_decode_split_kernel" not in result.output
    stability = CliRunner().invoke(cli, ["stability", store, *only_merge])
    assert stability.exit_code == 0 and "paged_decode_split_kernel" not in stability.output
    none = CliRunner().invoke(cli, ["explain", str(H200), "--vary", "page", "--nvtx", "nowhere"])
    assert isinstance(none.exception, UsageError)
    report = CliRunner().invoke(cli, ["report", str(H200 / "copy_bandwidth"), "--nvtx", "copy_bandwidth",
                                      "-o", str(tmp_path / "r")])
    assert report.exit_code == 0, report.output
    base, new = [next((H200 / "copy_bandwidth").glob(f"impltriton-mib{mib}-*")) for mib in (16, 256)]
    compare = CliRunner().invoke(cli, ["compare", str(base), str(new), "--nvtx", "copy_bandwidth", "--json"])
    assert compare.exit_code == 0 and len(json.loads(compare.stdout)["matched"]) == 1
