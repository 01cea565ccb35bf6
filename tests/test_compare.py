"""`ncuflow compare` on real data: corpus reports of the same and of different kernels, and
run folders of the H200 store (replicas, so the noise is known)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.analyze.compare import compare_loaded, match_key
from ncuflow.analyze.fields import spec_of
from ncuflow.cli import cli
from ncuflow.errors import UsageError
from ncuflow.read.runs import load_paths
from tests.nvidia import actions_of

ESMM = "AveryClapp__ESMM-Research__profile.ncu-rep"  # A10G, 12 GEMM kernels, durations only
ESMM_OUT = "AveryClapp__ESMM-Research__profile_output.ncu-rep"  # A10G, 4 of them again, full counters
NAIVE = "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep"  # A100, kernel_conv2d_baseline × 4
VARIANT3 = "Swagatam1812__hpca-gpu-memory-profiling__variant3.ncu-rep"  # RTX A6000, conv2d_variant3_kernel × 4

H200 = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "h200"
PAGED = H200 / "paged_decode"


def _point(kv: str, page: int) -> Path:
    (folder,) = [p for p in PAGED.iterdir() if f"-kv{kv}-" in p.name and f"-page{page}-" in p.name]
    return folder


def test_same_kernels_are_matched_by_name_and_launch_configuration(corpus_dir: Path) -> None:
    comparison = compare_loaded(load_paths([corpus_dir / ESMM]), load_paths([corpus_dir / ESMM_OUT]))
    exact = [k for k in comparison.matched if k.how == "matched"]
    assert sorted(k.key[0] for k in exact) == ["one_blocktiling", "two_blocktiling", "vectorized_blocktiling"]
    # warptiling runs with 128 threads per block in the new report, 256 in the base: not the same
    # launch, but the one warptiling on each side: paired as reconfigured
    (reconfigured,) = [k for k in comparison.matched if k.how == "reconfigured"]
    assert (match_key(reconfigured.base), match_key(reconfigured.new)) == (
        ("warptiling", 64.0, 256.0), ("warptiling", 64.0, 128.0))
    assert comparison.only_new == () and len(comparison.only_base) == 7
    # its time moved by 14 % (195.30 → 222.46 µs): beyond what one launch a side can hide
    duration = next(f for f in reconfigured.judged.fields if f.field == "duration_ns")
    assert duration.state == "changed" and duration.delta == pytest.approx(222.46 / 195.30 - 1, abs=0.001)
    for pair in exact:
        # the base report holds durations only: work is not measured on both sides, and one
        # launch a side cannot decide a 0.3–0.8 % difference in time
        assert pair.judged.verdict == "ambiguous" and pair.judged.work == "unknown"
        duration = next(f for f in pair.judged.fields if f.field == "duration_ns")
        assert duration.state == "ambiguous" and abs(duration.delta or 1) < 0.01
        assert next(f for f in pair.judged.fields if f.field == "inst_executed").state == "missing"
        assert pair.judged.baseline_model.bound == "unknown" and pair.judged.value_model.bound != "unknown"


def test_different_kernels_match_nothing_and_are_listed(corpus_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["compare", str(corpus_dir / NAIVE), str(corpus_dir / VARIANT3), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["matched"] == []
    assert [k["kernel"] for k in document["only_base"]] == ["kernel_conv2d_baseline"]
    assert [k["kernel"] for k in document["only_new"]] == ["conv2d_variant3_kernel"]
    text = CliRunner().invoke(cli, ["compare", str(corpus_dir / NAIVE), str(corpus_dir / VARIANT3)]).output
    assert "0 matched, 1 only in base, 1 only in new" in text


def test_h200_page_size_on_a_shared_prefix(tmp_path: Path) -> None:
    """Point folders of 3 replicas each: page 16 vs 64 halves the split kernel's instructions and
    time (work on the critical path) and leaves the merge kernel alone."""
    md = tmp_path / "compare.md"
    result = CliRunner().invoke(cli, ["compare", str(_point("shared", 16)), str(_point("shared", 64)), "--json",
                                      "--markdown", str(md)])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    by_kernel = {k["kernel"]: k for k in document["matched"]}
    assert set(by_kernel) == {"merge_splits_kernel", "paged_decode_split_kernel"}
    assert document["only_base"] == [] and document["only_new"] == []
    split = by_kernel["paged_decode_split_kernel"]
    assert (split["verdict"], split["work"], split["time"]) == ("critical_path", "yes", "yes")
    assert split["base"]["runs"] == 3 and split["base"]["bound"] == split["new"]["bound"] == "l1"
    assert split["fields"]["inst_executed"]["state"] == "changed"
    assert split["fields"]["inst_executed"]["delta"] == pytest.approx(55_988_224 / 119_631_872 - 1)
    assert split["fields"]["duration_ns"]["state"] == "changed"
    merge = by_kernel["merge_splits_kernel"]
    assert merge["verdict"] == "no_effect"
    assert merge["fields"]["inst_issued"]["state"] == "unchanged"  # re-issues differ, inside the near-exact band
    text = md.read_text()
    assert "| paged_decode_split_kernel [grid=2,048, block=128] | work changed and time moved with it |" in text


def test_a_difference_judged_against_a_noise_reference_names_it() -> None:
    """dram_bytes_read's band is a share of the launch's dram_bytes: its reason said "0.0049 % is inside
    the noise band" beside a Δ of −4.1 % (relative to the field itself), as if the two contradicted."""
    result = CliRunner().invoke(cli, ["compare", str(_point("shared", 16)), str(_point("shared", 64)), "--json"])
    assert result.exit_code == 0, result.output
    judged = [(name, field) for kernel in json.loads(result.stdout)["matched"]
              for name, field in kernel["fields"].items() if field["reason"] not in ("identical values",)]
    referenced = {name for name, _ in judged if spec_of(name).noise_reference}
    assert {"dram_bytes_read", "dram_bytes_write"} <= referenced
    for name, field in judged:
        reference = spec_of(name).noise_reference
        named = f" of {reference}" in field["reason"] if reference else " of " not in field["reason"]
        assert named, (name, field["reason"])


def test_a_run_folder_against_a_point_folder_and_a_store_against_itself() -> None:
    base_run = sorted(p for p in _point("distinct", 16).iterdir() if p.is_dir())[0]
    comparison = compare_loaded(load_paths([base_run]), load_paths([_point("distinct", 16)]))
    assert {k.base.runs for k in comparison.matched} == {1} and {k.new.runs for k in comparison.matched} == {3}
    for pair in comparison.matched:  # one replica against the three it is one of
        states = {f.field: f.state for f in pair.judged.fields}
        assert states["inst_executed"] == states["ldg_inst"] == "unchanged"  # identical counts
        assert "changed" not in states.values()
        # one side measured once: a near-exact or byte counter a little apart cannot be called unchanged
        assert pair.judged.verdict == "ambiguous" and "re-profile with replicas" in " ".join(pair.judged.reasons)
    store = load_paths([H200])
    itself = compare_loaded(store, store)
    assert not itself.only_base and not itself.only_new and len(itself.matched) == 31
    assert all(k.judged.verdict == "no_effect" for k in itself.matched)
    assert all(f.state in ("unchanged", "missing") for k in itself.matched for f in k.judged.fields)


def test_compare_x_x_is_unchanged_for_every_kernel_of_every_report(corpus_dir: Path) -> None:
    """Each shared report against itself: identical durations and counters are unchanged, and a
    kernel whose report holds no work counter is the same work by being the same launches."""
    from ncuflow.read.reportfile import find_reports

    kernels = 0
    for report in find_reports([corpus_dir]):
        loaded = load_paths([report])
        comparison = compare_loaded(loaded, loaded)
        assert not comparison.only_base and not comparison.only_new, report.name
        for pair in comparison.matched:
            kernels += 1
            assert pair.judged.verdict == "no_effect", (report.name, pair.label, pair.judged.reasons)
            assert all(f.state in ("unchanged", "missing") for f in pair.judged.fields), (report.name, pair.label)
    assert kernels >= 120


def test_compare_refuses_a_bad_threshold(corpus_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["compare", str(corpus_dir / NAIVE), str(corpus_dir / NAIVE), "--threshold", "0"])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_a_reconfigured_h200_copy_is_paired_and_its_work_compared_in_total() -> None:
    """copy_bandwidth 16 MiB (grid 1,024, 3 replicas) against 256 MiB (grid 16,384): one kernel,
    another grid: paired as reconfigured, 16× the work per launch and per run."""
    base, new = [next((H200 / "copy_bandwidth").glob(f"impltriton-mib{mib}-*")) for mib in (16, 256)]
    result = CliRunner().invoke(cli, ["compare", str(base), str(new), "--json"])
    assert result.exit_code == 0, result.output
    (pair,) = json.loads(result.stdout)["matched"]
    assert pair["how"] == "reconfigured" and (pair["grid"], pair["new_grid"]) == (1024.0, 16384.0)
    assert pair["verdict"] == "critical_path"
    totals = pair["totals_per_run"]
    assert totals["inst_executed"]["ratio"] == pytest.approx(16.0)
    assert totals["ldg_inst"]["ratio"] == pytest.approx(16.0)
    assert pair["launches_per_run"] == {"base": 1.0, "new": 1.0}
    text = CliRunner().invoke(cli, ["compare", str(base), str(new)]).output
    assert "reconfigured: copy_kernel [grid=1,024, block=128] → copy_kernel [grid=16,384, block=128]" in text
    assert "per run in total: 1 → 1 launches; duration_ns 8.91 µs → 131.46 µs (×14.8)" in text
    assert "1 matched (1 reconfigured), 0 only in base, 0 only in new" in text


def test_pair_names_a_renamed_kernel(corpus_dir: Path) -> None:
    args = ["compare", str(corpus_dir / NAIVE), str(corpus_dir / VARIANT3)]
    result = CliRunner().invoke(cli, [*args, "--pair", "kernel_conv2d_baseline=conv2d_variant3", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (pair,) = document["matched"]
    assert pair["how"] == "paired" and (pair["kernel"], pair["new_kernel"]) == ("kernel_conv2d_baseline", "conv2d_variant3_kernel")
    assert document["only_base"] == [] and document["only_new"] == []
    assert pair["fields"]["duration_ns"]["state"] == "changed"
    text = CliRunner().invoke(cli, [*args, "--pair", "kernel_conv2d_baseline=conv2d_variant3"]).output
    assert "paired by --pair: kernel_conv2d_baseline" in text and "(1 by --pair)" in text
    for bad in ("nothing", "x=", "no_such_kernel=conv2d_variant3"):
        refused = CliRunner().invoke(cli, [*args, "--pair", bad])
        assert isinstance(refused.exception, UsageError) and "--pair" in str(refused.exception)


def test_unmatched_kernels_are_listed_with_readable_durations(corpus_dir: Path) -> None:
    text = CliRunner().invoke(cli, ["compare", str(corpus_dir / NAIVE), str(corpus_dir / VARIANT3)]).output
    assert "kernel_conv2d_baseline [grid=262,144, block=256]" in text
    assert "4 launches, median 37.552 ms" in text


def test_compare_shows_u_terms_stall_shares_and_occupancy_side_by_side(corpus_dir: Path) -> None:
    """The naive convolution against its variant (--pair): what moved beyond the work fields is
    each side's own reading (the max model, waiting.stall_shares, the occupancy fields)."""
    import statistics

    from ncuflow.analyze.waiting import stall_shares

    result = CliRunner().invoke(cli, ["compare", str(corpus_dir / NAIVE), str(corpus_dir / VARIANT3), "--json",
                                      "--pair", "kernel_conv2d_baseline=conv2d_variant3_kernel"])
    assert result.exit_code == 0, result.output
    (kernel,) = json.loads(result.output)["matched"]
    beyond = kernel["beyond_work"]
    for side in ("base", "new"):
        assert all(beyond["u"][t][side] == kernel[side][f"u_{t}"] for t in beyond["u"])
    naive = load_paths([corpus_dir / NAIVE]).runs[0].launches
    shares = [{s.reason: s.share for s in stall_shares(launch)} for launch in naive]
    leading = max(beyond["stall_shares"], key=lambda r: beyond["stall_shares"][r]["base"] or 0)
    assert leading == max(shares[0], key=lambda r: shares[0][r])
    assert beyond["stall_shares"][leading]["base"] == statistics.median(s.get(leading, 0.0) for s in shares)
    achieved = [launch.value("occupancy_achieved_pct") for launch in naive]
    assert beyond["occupancy_pct"]["achieved"]["base"] == statistics.median(v for v in achieved if v is not None)
    text = CliRunner().invoke(cli, ["compare", str(corpus_dir / NAIVE), str(corpus_dir / VARIANT3),
                                    "--pair", "kernel_conv2d_baseline=conv2d_variant3_kernel"]).output
    assert "warp stalls: lg_throttle" in text and "occupancy: achieved" in text and "u: dram" in text


def _nvidia_headings(report: Path) -> dict[str, float | None]:
    """Each finding that says something in NVIDIA's own reading of ``report`` (``ncu_report``), by
    'rule: heading', with its largest estimated speedup over the report's launches."""
    found: dict[str, float | None] = {}
    for rule in (rule for action in actions_of(report) for rule in action.rule_results_as_dicts()):
        message = rule["rule_message"]
        speedup = rule.get("speedup_estimation", {}).get("speedup")
        if not (message["title"] or message["message"] or speedup is not None):
            continue
        key = f"{rule['rule_identifier']}: {message['title'] or rule['name'] or rule['rule_identifier']}"
        estimates = [v for v in (found.get(key), speedup) if v is not None]
        found[key] = max(estimates) if estimates else None
    return found


def test_compare_names_the_findings_that_appeared_or_vanished(corpus_dir: Path) -> None:
    """The naive convolution against its variant: the findings only one side gives are NVIDIA's own
    (ncu_report's rule results of each report), with their estimates; compare X X names none."""
    pair = ["--pair", "kernel_conv2d_baseline=conv2d_variant3_kernel"]
    result = CliRunner().invoke(cli, ["compare", str(corpus_dir / NAIVE), str(corpus_dir / VARIANT3), "--json", *pair])
    assert result.exit_code == 0, result.output
    (kernel,) = json.loads(result.output)["matched"]
    moved = kernel["beyond_work"]["findings"]
    base, new = _nvidia_headings(corpus_dir / NAIVE), _nvidia_headings(corpus_dir / VARIANT3)
    assert {f["finding"]: f["speedup"] for f in moved["appeared"]} == {h: new[h] for h in new if h not in base}
    assert {f["finding"]: f["speedup"] for f in moved["vanished"]} == {h: base[h] for h in base if h not in new}
    assert moved["appeared"] and moved["vanished"]
    text = CliRunner().invoke(cli, ["compare", str(corpus_dir / NAIVE), str(corpus_dir / VARIANT3), *pair]).output
    assert "NVIDIA's findings: appeared: " in text
    same = CliRunner().invoke(cli, ["compare", str(corpus_dir / NAIVE), str(corpus_dir / NAIVE), "--json"])
    (kernel,) = json.loads(same.output)["matched"]
    assert kernel["beyond_work"]["findings"] == {"appeared": [], "vanished": []}
