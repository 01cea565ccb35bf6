#!/usr/bin/env python3
"""Rebuild the study's tables and plots from committed reference runs (no GPU needed).

    python analysis/rebuild_study.py                      # profiles/reference/ -> out/study/
    python analysis/rebuild_study.py --store DIR -o OUT   # any profile store
    python analysis/rebuild_study.py --corpus-demo        # a store built from the shared corpus

It writes what `ncuflow report` writes (report.md, PNG plots, stability and explain
parquet) and prints the study's questions with their verdicts: does the index layout of
token-flat decode reach the critical path, and does page-count work of page-aware
decode (shared prefix vs distinct KV)? When profiles/reference/ holds no run yet it says
so plainly and exits 1: run analysis/run_study_on_gpu.py on a GPU host first.

``--corpus-demo`` builds a small store from real reports made by others (the corpus in
../shared/ncu-reports or $NCUFLOW_CORPUS), one kernel per run chosen by the run's kernel
filter, so the explain verdicts can be seen on real counters without a GPU.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ncuflow.analyze.explain import VERDICT_TEXT  # noqa: E402
from ncuflow.analyze.study import analyse  # noqa: E402
from ncuflow.errors import NcuflowError  # noqa: E402
from ncuflow.output.report import write_report  # noqa: E402
from ncuflow.read.runs import load_paths, store_roots  # noqa: E402

REFERENCE = REPO / "profiles" / "reference"

# The study's questions: (cell, swept parameter, what the study measured on an RTX 5060 Ti).
QUESTIONS: tuple[tuple[str, str, str], ...] = (
    ("flat_decode", "layout", "scatter vs contiguous: −1.0 % … +1.3 %, ~96 % of peak DRAM → layout off the critical path"),
    ("paged_decode", "page", "shared prefix: page 16 ran 2.38× the global loads of page 64 and 9.6 % longer → on the critical "
                             "path; distinct KV: ~327 µs at every page → work changes, time flat"),
    ("copy_bandwidth", "mib", "the measured DRAM ceiling"),
)

# Demo store from the shared corpus: (cell, params, report file, kernel filter of the run).
CORPUS_DEMO: tuple[tuple[str, dict[str, object], str, str | None], ...] = (
    ("scan", {"stage": "init"}, "jestes15__EE384_FinalProject__profile_output.ncu-rep", "DeviceScanInitKernel"),
    ("scan", {"stage": "fill"}, "jestes15__EE384_FinalProject__profile_output.ncu-rep", "regex:uninitialized_fill"),  # regex:EXPR, else an exact name
    ("scan", {"stage": "scan"}, "jestes15__EE384_FinalProject__profile_output.ncu-rep", "DeviceScanKernel"),
    ("silu", {"flag": "off"}, "AlpriElse__cs599k__silu_CUDA_ncu-reports_2025-04-21-77_06-MT.ncu-rep", None),
    ("silu", {"flag": "on"}, "AlpriElse__cs599k__silu_CUDA_ncu-reports_2025-04-21-77_06-MT.ncu-rep", None),
    ("transpose", {"impl": "copy"}, "Lashi0812__CudaProgramming__profiling_profiles_smemTranspose.ncu-rep", "copyGmem"),
    ("transpose", {"impl": "naive"}, "Lashi0812__CudaProgramming__profiling_profiles_smemTranspose.ncu-rep", "naiveGmem"),
    ("transpose", {"impl": "smem"}, "Lashi0812__CudaProgramming__profiling_profiles_smemTranspose.ncu-rep", "transposeSmem"),
    ("transpose", {"impl": "smem_pad"}, "Lashi0812__CudaProgramming__profiling_profiles_smemTranspose.ncu-rep", "transposeSmemPad"),
    ("transpose", {"impl": "unroll_pad"}, "Lashi0812__CudaProgramming__profiling_profiles_smemTranspose.ncu-rep", "transposeSmemUnrollPad"),
)


def corpus_dir() -> Path:
    env = os.environ.get("NCUFLOW_CORPUS")
    for candidate in (Path(env) if env else None, REPO.parent / "shared" / "ncu-reports", REPO / "shared" / "ncu-reports"):
        if candidate is not None and candidate.is_dir():
            return candidate
    raise SystemExit("rebuild_study: the corpus of real reports is not at ../shared/ncu-reports; set NCUFLOW_CORPUS.")


def _collection(kernel: str | None) -> Any:
    """What a run imported from a larger report collected: its kernel, as a regex or an exact name."""
    from ncuflow.store.collection import NcuOptions
    from ncuflow.store.manifest import Collection

    if kernel is not None and kernel.startswith("regex:"):
        return Collection(NcuOptions(kernel_regex=kernel[len("regex:"):]))
    return Collection(kernel_name=kernel)


def build_corpus_demo(root: Path, corpus: Path) -> Path:
    from ncuflow.cells.contract import CellSpec
    from ncuflow.store import write_run
    from ncuflow.store.manifest import CellFacts

    for cell, params, report, kernel in CORPUS_DEMO:
        key = hashlib.sha256(json.dumps({"cell": cell, "params": params}, sort_keys=True).encode()).hexdigest()
        spec = CellSpec.of(cell, params)  # type: ignore[arg-type]
        write_run(root, spec, corpus / report, content_key=key, collection=_collection(kernel),
                  cell_facts=CellFacts(representation="imported from the shared corpus"))
    return root


def print_questions(analysis_sweeps: dict[str, tuple], cells: set[str]) -> None:
    print("\nThe study's questions:")
    for cell, param, known in QUESTIONS:
        groups = [ge for ge in analysis_sweeps.get(param, ()) if ge.group.cell == cell]
        print(f"\n  {cell}, varying {param} (study: {known})")
        if cell not in cells:
            print("    not measured in this store")
            continue
        if not groups:
            print(f"    no two runs of {cell} differ only in {param}")
        for ge in groups:
            fixed = ",".join(f"{k}={v}" for k, v in ge.group.fixed)
            print(f"    [{fixed or 'no other parameters'}] baseline {param}={ge.baseline.param(param)}")
            for row in ge.rows:
                print(f"      {param}={row.value}: {row.verdict_text} — {row.deltas}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, default=REFERENCE, help="profile store (default: profiles/reference/)")
    parser.add_argument("-o", "--output", type=Path, default=REPO / "out" / "study", help="output folder (default out/study/, git-ignored)")
    parser.add_argument("--corpus-demo", action="store_true", help="build and report a store from the shared corpus")
    parser.add_argument("--baseline", action="append", default=[], metavar="PARAM=VALUE",
                        help="baseline of a swept parameter (default: the smallest value)")
    args = parser.parse_args(argv)
    baselines = dict(item.split("=", 1) for item in args.baseline if "=" in item)
    temporary: tempfile.TemporaryDirectory[str] | None = None
    store = args.store
    if args.corpus_demo:
        temporary = tempfile.TemporaryDirectory(prefix="ncuflow-corpus-demo-")
        store = build_corpus_demo(Path(temporary.name) / "store", corpus_dir())
        print(f"built a demo store from the shared corpus in {store}")
    try:
        if not store_roots(store):
            print(
                f"rebuild_study: {store} holds no profile run yet, so there is no study to rebuild.\n"
                "Run `python analysis/run_study_on_gpu.py` on a GPU host with Nsight Compute, commit what it "
                "writes under profiles/reference/, then run this again. Without a GPU, "
                "`python analysis/rebuild_study.py --corpus-demo` shows the same tables on real reports made by others.",
                file=sys.stderr,
            )
            return 1
        loaded = load_paths([store])
        for note in loaded.notes:
            print(f"note: {note}", file=sys.stderr)
        analysis = analyse(loaded, paths=[store], baselines=baselines)
        written = write_report(analysis, args.output)
        print(f"wrote {written.markdown}")
        for path in (*written.plots, *written.parquet):
            print(f"wrote {path}")
        if not args.corpus_demo:
            print_questions(dict(analysis.sweeps), {s.point.cell for s in analysis.points})
        else:
            for param, groups in analysis.sweeps.items():
                for ge in groups:
                    print(f"\n{ge.group.label()} — baseline {param}={ge.baseline.param(param)}")
                    for row in ge.rows:
                        print(f"  {param}={row.value}: {row.verdict_text} — {row.deltas}")
        counts = {code: 0 for code in VERDICT_TEXT}
        for groups in analysis.sweeps.values():
            for ge in groups:
                for row in ge.rows:
                    counts[row.verdict] += 1
        print("\nverdicts: " + ", ".join(f"{code} {n}" for code, n in counts.items()))
        return 0
    except NcuflowError as error:
        print(f"rebuild_study: {error}", file=sys.stderr)
        return 2
    finally:
        if temporary is not None:
            temporary.cleanup()


if __name__ == "__main__":
    sys.exit(main())
