"""The hierarchical roofline on real reports: points, ceilings from the reports, PNGs, the report page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.analyze.roofline import (
    NO_FLOPS,
    attainable,
    compute_roof,
    describe_point,
    panels,
    point_groups,
    rooflines,
)
from ncuflow.analyze.selection import ALL
from ncuflow.cli import cli
from ncuflow.errors import NcuflowError

REFERENCE = Path(__file__).resolve().parent.parent / "profiles" / "reference"
NAIVE = "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep"  # A100, conv2d × 4, full set
H100 = "jestes15__EE384_FinalProject__profile_output.ncu-rep"  # H100 PCIe, 18 launches, full set


def test_an_a100_conv2d_is_one_point_under_its_chips_roofs(corpus_dir: Path) -> None:
    (line,) = rooflines(point_groups(ALL.load([corpus_dir / NAIVE]).runs))
    assert line.device == "NVIDIA A100-SXM4-40GB"
    (point,) = line.points
    assert point.launches == 4 and point.bound == "l1" and point.counted == ("fp64", "fp32")
    launches = ALL.load([corpus_dir / NAIVE]).runs[0].launches
    flops = sum((x.value("flops_fp32") or 0) + (x.value("flops_fp64") or 0) for x in launches)
    assert point.flops == pytest.approx(flops)
    assert point.intensity("dram") == pytest.approx(flops / sum(x.value("dram_bytes") or 0 for x in launches))
    assert point.flop_rate == pytest.approx(flops / (sum(x.value("duration_ns") or 0 for x in launches) * 1e-9))
    dram, l2, l1 = (line.ceiling(level) for level in ("dram", "l2", "l1"))
    assert dram and l2 and l1 and dram.value < l2.value < l1.value
    assert dram.value == pytest.approx(1.555e12, rel=0.01)  # A100 40 GB HBM2
    fp32 = line.ceiling("fp32")
    assert fp32 is not None and fp32.value == pytest.approx(108 * 64 * 2 * (line.sm_clock_hz or 0), rel=0.001)
    roof = attainable(point, line)
    assert roof is not None and point.flop_rate < roof  # below every roof


def test_kernels_without_floating_point_work_are_named_not_drawn(corpus_dir: Path) -> None:
    (line,) = rooflines(point_groups(ALL.load([corpus_dir / H100]).runs))
    assert len(line.points) == 4 and len(line.left_out) == 3
    assert all("0 FLOP" in why for _, why in line.left_out)
    assert sum(p.share for p in line.points) == pytest.approx(1.0)


def test_the_h200_runs_have_no_flop_counts_and_show_bandwidth_instead() -> None:
    (line,) = rooflines(point_groups(ALL.load([REFERENCE / "h200"]).runs))
    assert line.points == () and len(line.left_out) == 31 and all(why == NO_FLOPS for _, why in line.left_out)
    assert len(line.without_flops) == 31 and [c.name for c in line.bandwidth] == ["dram"]
    copy = [b for b in line.without_flops if b.group == "copy_bandwidth:mib=4096"]
    assert copy and (copy[0].rates["dram"] or 0) / line.bandwidth[0].value == pytest.approx(0.85, abs=0.02)


@pytest.mark.parametrize("report", [NAIVE, H100])
def test_the_command_writes_a_png_and_json(corpus_dir: Path, tmp_path: Path, report: str) -> None:
    out = tmp_path / "roofline.png"
    result = CliRunner().invoke(cli, ["roofline", str(corpus_dir / report), "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    document = json.loads(result.stdout[: result.stdout.rindex("}") + 1])
    (gpu,) = document["gpus"]
    assert gpu["points"] and gpu["compute"]["fp32"]["source"].startswith("(sm__sass_thread_inst_executed_op_ffma")


def test_the_command_refuses_to_overwrite_what_is_not_a_plot(corpus_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "notes.png"
    target.write_text("my notes")
    result = CliRunner().invoke(cli, ["roofline", str(corpus_dir / NAIVE), "-o", str(target)])
    assert isinstance(result.exception, NcuflowError) and target.read_text() == "my notes"


def test_the_report_has_a_roofline_page_and_a_latency_section(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", str(REFERENCE / "h200" / "copy_bandwidth"), "-o", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "r" / "report.md").read_text()
    plot = f"roofline-{text.rsplit('Report id: `', 1)[1][:8]}.png"  # named by the report's id
    assert "## Roofline" in text and f"![hierarchical roofline]({plot})" in text
    assert "Ceilings at an SM clock of" in text and "DRAM 4.81 TB/s" in text
    assert "## Why latency-bound kernels wait" in text and "limited by registers" in text
    assert (tmp_path / "r" / plot).read_bytes()[:4] == b"\x89PNG"


def test_a_report_of_many_gpus_draws_every_gpu_on_pages_of_six(corpus_dir: Path, tmp_path: Path) -> None:
    """As `ncuflow roofline` does: one picture a page of at most 6 GPUs, each named by report.md,
    every GPU of the reports on one of them (none left out)."""
    from ncuflow.analyze.roofline import pages

    out = tmp_path / "r"
    result = CliRunner().invoke(cli, ["report", str(corpus_dir), "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = (out / "report.md").read_text()
    report_id = text.rsplit("Report id: `", 1)[1][:8]
    lines = rooflines(point_groups(ALL.load([corpus_dir]).runs))
    expected = ["roofline-" + (f"{n}-" if n > 1 else "") + f"{report_id}.png" for n in range(1, len(pages(lines)) + 1)]
    assert len(expected) > 1 and sorted(p.name for p in out.glob("roofline*.png")) == sorted(expected)
    assert all(f"![hierarchical roofline]({name})" in text for name in expected)
    assert text.count("\n### ") >= len(lines)  # every GPU's ceilings and points in the page


def test_the_notes_say_how_to_collect_flops_under_that_reason(corpus_dir: Path) -> None:
    """A panel left out for two reasons (no FLOP count; no duration) puts the way to collect
    FLOP counts right under the FLOP reason, not under the other one."""
    from ncuflow.output.roofline_plot import _table_lines

    lines = [line for line in rooflines(point_groups(ALL.load([corpus_dir]).runs))
             if {why for _, why in line.left_out} >= {NO_FLOPS} and len({why for _, why in line.left_out}) > 1]
    assert lines, "the corpus has a GPU left out for more than one reason"
    for line in lines:
        notes = _table_lines(line)
        hint = next(i for i, text in enumerate(notes) if "to collect them" in text)
        reason = max(i for i, text in enumerate(notes[:hint]) if text.startswith("not drawn:"))
        assert "no FLOP count" in notes[reason]


# ----------------------------------------------------------------------------- roofs of the work executed


def test_a_point_is_held_against_the_roofs_of_the_precisions_it_executed(corpus_dir: Path) -> None:
    """Swagatam's variant 3 on an RTX A6000 executes FP32 only, while the full set counts FP64 too
    (0 FLOP): it is held against the FP32 peak (32 % of it), not the FP64 one (it read 1486 %)."""
    (line,) = rooflines(point_groups(ALL.load([corpus_dir / "Swagatam1812__hpca-gpu-memory-profiling__variant3.ncu-rep"]).runs))
    (point,) = line.points
    assert point.counted == ("fp64", "fp32") and point.executed == ("fp32",)
    assert compute_roof(point, line) == pytest.approx(line.ceiling("fp32").value)  # type: ignore[union-attr]
    roof = attainable(point, line)
    assert roof is not None and point.flop_rate / roof == pytest.approx(0.32, abs=0.01)


def test_no_point_of_the_corpus_or_the_h200_store_is_above_the_roof_above_it(corpus_dir: Path) -> None:
    shares = []
    for root in (corpus_dir, REFERENCE / "h200"):
        for line in rooflines(point_groups(ALL.load([root]).runs, "launch")):
            for point in line.points:
                roof = attainable(point, line)
                if roof:
                    shares.append(point.flop_rate / roof)
    assert len(shares) >= 30 and max(shares) <= 1.10


def test_panels_are_chosen_by_what_they_hold(corpus_dir: Path) -> None:
    """29 GPUs in the corpus: the six panels drawn are GPUs with points, never an empty panel
    while a GPU with something to draw is left out (they were the first six in file order)."""
    lines = rooflines(point_groups(ALL.load([corpus_dir]).runs))
    shown, left_out = panels(lines)
    assert len(lines) > 6 and len(shown) == 6 and len(left_out) == len(lines) - 6
    assert all(line.points for line in shown)
    fewest = min(len(line.points) for line in shown)
    assert all(len(line.points) <= fewest for line in left_out)
    order = [line.device for line in lines]
    assert [line.device for line in shown] == sorted((line.device for line in shown), key=order.index)


def test_a_kernel_of_two_precisions_is_a_point_per_precision_under_its_own_roof(corpus_dir: Path) -> None:
    """fill_vector (H100 PCIe) executes FP64 and FP32 work: one point each, as ncu's roofline draws them
    (the sum, 899 GFLOP/s, is no precision's rate), each below that precision's roof."""
    from ncuflow.analyze.roofline import precision_points, precision_roof

    (line,) = rooflines(point_groups(ALL.load([corpus_dir / H100]).runs))
    (point,) = [p for p in line.points if p.label == "fill_vector"]
    split = precision_points(point)
    assert [one.precision for one in split] == ["fp64", "fp32"]
    assert sum(one.flops for one in split) == pytest.approx(point.flops)
    for one in split:
        peak = line.ceiling(one.precision)
        roof = precision_roof(one, line)
        assert peak is not None and roof is not None and roof <= peak.value and one.flop_rate < roof
    assert "FP64 414 GFLOP/s" in describe_point(point, line)


def test_no_point_of_the_corpus_is_above_its_own_precisions_roof(corpus_dir: Path) -> None:
    from ncuflow.analyze.roofline import precision_points, precision_roof

    checked = 0
    for line in rooflines(point_groups(ALL.load([corpus_dir]).runs)):
        for point in line.points:
            for one in precision_points(point):
                roof = precision_roof(one, line)
                if roof is not None:
                    checked += 1
                    assert one.flop_rate <= roof, (line.device, point.label, one.precision)
    assert checked >= 20  # every precision point of the corpus that has a roof


def test_one_gpu_named_two_ways_is_one_panel(corpus_dir: Path) -> None:
    """"TITAN V" and "NVIDIA TITAN V" were two panels; the GPU's name is normalised for the key."""
    from dataclasses import replace

    from ncuflow.analyze.roofline import PointGroup, gpu_key

    launches = ALL.load([corpus_dir / NAIVE]).runs[0].launches
    renamed = [replace(x, device=replace(x.device, name="A100-SXM4-40GB")) if i % 2 else x
               for i, x in enumerate(launches)]
    groups = [PointGroup("conv", "conv", "naive", (x,)) for x in renamed]
    (line,) = rooflines(groups)
    assert line.device == "NVIDIA A100-SXM4-40GB" and len(line.points) == len(launches)
    assert gpu_key("NVIDIA TITAN V") == gpu_key("TITAN  V") == "titan v" and gpu_key("NVIDIA") == "nvidia"


def test_a_kernel_without_flop_counters_names_the_section_that_collects_them() -> None:
    assert "SpeedOfLight_RooflineChart" in NO_FLOPS


def test_tensor_core_use_is_its_own_figure_in_the_evidence(corpus_dir: Path) -> None:
    """The cutlass GEMM's IMMA work: the tensor pipes' % of peak is shown apart, not only inside u_math."""
    from ncuflow.analyze.classify import classify
    from ncuflow.read.extract import iter_launches

    report = corpus_dir / "panjd123__cutlass__report.ncu-rep"
    launch = next(iter_launches(report))
    verdict = classify(launch)
    pct = launch.value("tensor_pipe_pct")
    assert pct is not None and pct > 0 and verdict.tensor_pct == pct
    result = CliRunner().invoke(cli, ["classify", str(report), "--evidence"], terminal_width=250)
    assert f"tensor cores: tensor pipes {pct:.1f} % of peak" in result.output
    summary = json.loads(CliRunner().invoke(cli, ["summary", str(report), "--json"]).output)
    kernels = summary["reports"][0]["kernels"]
    assert all(k["tensor_pct"] and k["tensor_pct"] > 0 for k in kernels)  # the tensor figure, per kernel
    table = CliRunner().invoke(cli, ["summary", str(report)], terminal_width=250).output
    assert "; tensor " in table


def test_many_gpus_are_pages_of_six_panels_none_left_out(corpus_dir: Path, tmp_path: Path) -> None:
    """The corpus's 28 GPUs made one 1375 × 6850 PNG (then one of the 6 with most to draw, the rest
    only named): now pages of at most 6 panels, roofline.png the 6 with most to draw, every GPU on one."""
    from ncuflow.analyze.roofline import pages

    lines = rooflines(point_groups(ALL.load([corpus_dir]).runs))
    shown = pages(lines)
    assert len(lines) > 12 and all(0 < len(page) <= 6 for page in shown)
    assert sorted(line.device for page in shown for line in page) == sorted(line.device for line in lines)
    assert shown[0] == panels(lines)[0]
    out = tmp_path / "roofline.png"
    result = CliRunner().invoke(cli, ["roofline", str(corpus_dir), "-o", str(out)])
    assert result.exit_code == 0, result.output
    files = [out, *(tmp_path / f"roofline-{n}.png" for n in range(2, len(shown) + 1))]
    assert all(path.read_bytes()[:4] == b"\x89PNG" for path in files)
    assert not (tmp_path / f"roofline-{len(shown) + 1}.png").exists()
    assert f"at most 6 panels a page: {out} shows the 6 with the most to draw" in result.output


def test_a_page_file_that_is_not_ours_is_refused_before_anything_is_written(corpus_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "roofline-2.png").write_text("my notes")
    result = CliRunner().invoke(cli, ["roofline", str(corpus_dir), "-o", str(tmp_path / "roofline.png")])
    assert isinstance(result.exception, NcuflowError)
    assert (tmp_path / "roofline-2.png").read_text() == "my notes" and not (tmp_path / "roofline.png").exists()
