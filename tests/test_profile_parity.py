"""`profile` at par with ncu's own CLI, with the fake ncu: CUDA-graph profiling (`--graph-profiling`),
attaching to a running process (`--attach PID`, Nsight Compute 2026.2.1+), and reports whose blocks
hold CUDA-graph results (rewritten from a real report: ncu 2026 counts them in the block header's
field 9, NumGraphResults)."""

from __future__ import annotations

import json
import os
import shlex
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ncuflow import store
from ncuflow.read.layout import varint_bytes
from ncuflow.read.reportformat import GRAPH_RESULTS_FIELD, GRAPH_RESULTS_WORDS, UnknownLayout
from ncuflow.read.schema import messages

FAKE_NCU = Path(__file__).parent / "fake_ncu" / "ncu"
REPO = Path(__file__).resolve().parent.parent
REPORT = "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep"  # A100, kernel_conv2d_baseline × 4
ATTACHING = "2026.2.1.0"  # the first ncu that attaches to a process id


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NCU_")}
    return subprocess.run([sys.executable, "-m", "ncuflow", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env={**clean, "COLUMNS": "200", **(env or {})})


def with_graph_results(report: Path, target: Path, moved: int = 1) -> Path:
    """``report`` rewritten as ncu 2026 writes CUDA-graph results: the last ``moved`` results of its
    last block counted in the block header's field 9 (NumGraphResults) instead of NumResults."""
    data, schema = report.read_bytes(), messages()
    (length,) = struct.unpack_from("<I", data, 4)
    position, blocks = 8 + length, []
    while position < len(data):
        (length,) = struct.unpack_from("<I", data, position)
        block = schema.block_header.FromString(data[position + 4:position + 4 + length])
        blocks.append((position, length, block))
        position += 4 + length + block.payload_size
    position, length, block = [found for found in blocks if found[2].num_results >= moved][-1]
    block.num_results -= moved
    header = block.SerializeToString() + bytes([GRAPH_RESULTS_FIELD << 3]) + varint_bytes(moved)
    target.write_bytes(data[:position] + struct.pack("<I", len(header)) + header + data[position + 4 + length:])
    return target


# ----------------------------------------------------------------------------- --graph-profiling


@pytest.mark.parametrize("mode", ["node", "graph"])
def test_dry_run_passes_graph_profiling_to_ncu(mode: str, tmp_path: Path) -> None:
    ran = _run("profile", "--graph-profiling", mode, "--dry-run", "--ncu", str(FAKE_NCU), "--store",
               str(tmp_path / "p"), "--", "python", "serve.py")
    assert ran.returncode == 0, ran.stderr
    argv = shlex.split(ran.stdout.strip().splitlines()[0])
    assert argv[argv.index("--graph-profiling") + 1] == mode and argv[-2:] == ["python", "serve.py"]
    assert "--graph-profiling" not in _run("profile", "--dry-run", "--", "./app").stdout  # ncu's default: not passed


def test_graph_profiling_takes_ncu_words_only() -> None:
    ran = _run("profile", "--graph-profiling", "kernels", "--dry-run", "--", "./app")
    assert ran.returncode == 2 and "'node', 'graph'" in ran.stderr and "Traceback" not in ran.stderr


def test_a_report_with_graph_results_is_named_by_ncuflows_reader(corpus_dir: Path, tmp_path: Path) -> None:
    from ncuflow.read.fileaction import iter_file_actions

    rewritten = with_graph_results(corpus_dir / REPORT, tmp_path / "graphs.ncu-rep")
    with pytest.raises(UnknownLayout, match="CUDA-graph results"):
        next(iter_file_actions(rewritten))
    assert sum(1 for _ in iter_file_actions(corpus_dir / REPORT)) == 4  # the same file unrewritten reads


def test_a_graph_profile_is_stored_and_read_through_ncu_report(corpus_dir: Path, tmp_path: Path) -> None:
    """ncu_report reads what ncuflow's reader does not: the kernel results are classified, the
    warning says why the slower reader was used, the run is in the store."""
    rewritten = with_graph_results(corpus_dir / REPORT, tmp_path / "graphs.ncu-rep")
    calls = tmp_path / "calls.jsonl"
    ran = _run("profile", "--graph-profiling", "graph", "--store", str(tmp_path / "p"), "--", "python", "serve.py",
               env={"NCU": str(FAKE_NCU), "FAKE_NCU_REPORT": str(rewritten), "FAKE_NCU_CALLS": str(calls)})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (argv,) = [json.loads(line) for line in calls.read_text().splitlines() if "--export" in line]
    assert argv[argv.index("--graph-profiling") + 1] == "graph"
    (run,) = store.iter_runs(tmp_path / "p")
    assert run.manifest.collection.options.graph_profiling == "graph"
    assert GRAPH_RESULTS_WORDS in " ".join(ran.stderr.split())
    assert ran.stdout.count("kernel_conv2d_baseline") == 3  # the results the rewrite left as kernels


def test_a_graph_workload_read_through_ncu_report_is_marked() -> None:
    """ncu_report says which actions are CUDA graphs (IAction.workload_type); ncuflow names them so."""
    import ncu_report

    from ncuflow.read.ncureport import GRAPH_MARK, NcuReportAction

    class Workload:
        def __init__(self, kind: int) -> None:
            self.kind = kind

        def workload_type(self) -> int:
            return self.kind

        def name(self, base: object = None) -> str:
            return "decode_step"

    kinds = ncu_report.IAction
    graph = NcuReportAction(Workload(kinds.WorkloadType_GRAPH), ncu_report).kernel()
    kernel = NcuReportAction(Workload(kinds.WorkloadType_KERNEL), ncu_report).kernel()
    assert graph.function == GRAPH_MARK + "decode_step" and graph.demangled.startswith(GRAPH_MARK)
    assert kernel.function == "decode_step"


# ----------------------------------------------------------------------------- --attach


def test_dry_run_attach_prints_the_ncu_attach_command(tmp_path: Path) -> None:
    ran = _run("profile", "--attach", "1234", "--kernel", "attention", "--launch-count", "20", "--dry-run",
               "--ncu", str(FAKE_NCU), "--store", str(tmp_path / "p"), env={"FAKE_NCU_VERSION": ATTACHING})
    assert ran.returncode == 0, ran.stderr
    argv = shlex.split(ran.stdout.strip().splitlines()[0])
    assert argv[1:5] == ["--mode", "attach", "--process-id", "1234"]
    assert argv[-1] == "--force-overwrite"  # no program: ncu attaches to the running one
    assert argv[argv.index("--kernel-name") + 1] == "regex:attention" and "warning" not in ran.stderr
    assert not (tmp_path / "p").exists()


def test_attach_with_an_older_ncu_is_refused_before_it_runs(corpus_dir: Path, tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    env = {"NCU": str(FAKE_NCU), "FAKE_NCU_VERSION": "2026.1.0.0", "FAKE_NCU_REPORT": str(corpus_dir / REPORT),
           "FAKE_NCU_CALLS": str(calls)}
    dry = _run("profile", "--attach", "1234", "--dry-run", env=env)
    assert dry.returncode == 0 and "--process-id 1234" in dry.stdout
    assert "is version 2026.1.0.0, and --attach needs Nsight Compute 2026.2.1 or newer" in dry.stderr
    ran = _run("profile", "--attach", "1234", "--store", str(tmp_path / "p"), env=env)
    assert ran.returncode == 2 and "2026.2.1 or newer" in ran.stderr and "Traceback" not in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1
    assert all("--export" not in line for line in calls.read_text().splitlines())  # ncu was only asked its version
    assert not (tmp_path / "p").exists() or not list(store.iter_runs(tmp_path / "p"))


def test_attach_profiles_the_running_process_and_stores_the_run(corpus_dir: Path, tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    env = {"NCU": str(FAKE_NCU), "FAKE_NCU_VERSION": ATTACHING, "FAKE_NCU_REPORT": str(corpus_dir / REPORT),
           "FAKE_NCU_CALLS": str(calls)}
    ran = _run("profile", "--attach", "4321", "--store", str(tmp_path / "p"), env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (argv,) = [json.loads(line) for line in calls.read_text().splitlines() if "--export" in line]
    assert argv[:4] == ["--mode", "attach", "--process-id", "4321"] and argv[-1] == "--force-overwrite"
    (run,) = store.iter_runs(tmp_path / "p")
    assert dict(run.ref.spec.params)["attach"] == "4321"
    assert ran.stdout.count("kernel_conv2d_baseline") == 4


def test_attach_takes_no_program_and_no_cell() -> None:
    for extra in (["copy_bandwidth"], ["--", "./app"]):
        ran = _run("profile", "--attach", "1234", "--dry-run", *extra)
        assert ran.returncode == 2 and "--attach profiles a process that runs already" in ran.stderr
    assert _run("profile", "--attach", "0", "--dry-run").returncode == 2


def test_an_ncu_that_does_not_know_graph_profiling_is_named_with_the_option(tmp_path: Path) -> None:
    """Debian's ncu 2022.3 prints "unrecognised option '--graph-profiling'" (no ==ERROR== line) and
    exits 255: that was 'ncu exited with code 255 ... no specific code'."""
    from tests.test_passes_real_ncu import _real_ncu

    ncu = _real_ncu()
    if ncu is None:
        pytest.skip("the real ncu is not installed (`make setup-test` installs Debian's nsight-compute)")
    if "--graph-profiling" in subprocess.run([ncu, "--help"], capture_output=True, text=True, timeout=60).stdout:
        pytest.skip("this ncu knows --graph-profiling")
    ran = _run("profile", "--graph-profiling", "node", "--ncu", ncu, "--store", str(tmp_path / "p"), "--", "true")
    assert ran.returncode == 3 and "Traceback" not in ran.stderr, ran.stderr
    last = ran.stderr.strip().splitlines()[-1]
    assert last.startswith("ncuflow: ncu ") and "does not know the option --graph-profiling" in last


def test_a_sweep_file_sets_graph_profiling_for_its_points() -> None:
    from ncuflow.errors import UsageError
    from ncuflow.profile.sweep import parse_sweep

    plan = parse_sweep({"cell": "copy_bandwidth", "axes": {"mib": [16, 32]}, "ncu": {"graph_profiling": "graph"}})
    assert plan.options.graph_profiling == "graph"
    with pytest.raises(UsageError, match="graph_profiling"):
        parse_sweep({"cell": "copy_bandwidth", "axes": {"mib": [16]}, "ncu": {"graph_profiling": "kernels"}})
