"""The main job of ncuflow on a machine with no GPU (`make demo`).

When H200 reference runs are committed under profiles/reference/, the demo builds the
study report from them (`ncuflow report`). Until then it says so plainly and runs the
read side on the shared corpus of real reports made by others, and `phases` on real
serving logs:

    classify  a few reports from Hopper, Ampere and Blackwell GPUs (verdict + NVIDIA's)
    export    the whole corpus to parquet (launches + long metrics table)
    stability repeated launches of one kernel inside one report
    phases    the timing boundary of a real SGLang serving log, with its timeline plot

Every step is the same `ncuflow` command a user would type; each is printed first, with
paths relative to where the demo runs, and kept short: the study report is written to
files (report.md and its plots), one stored run is classified as an example of its tables.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "profiles" / "reference"


def _shown(path: Path) -> str:
    """A path as a user would type it here: relative to the working folder where it lies below it."""
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def _run(args: list[str]) -> None:
    print(f"\n$ ncuflow {shlex.join(args)}", flush=True)
    env = {**os.environ, "COLUMNS": os.environ.get("COLUMNS", "170")}
    completed = subprocess.run([sys.executable, "-m", "ncuflow", *args], env=env, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"demo step failed (exit {completed.returncode}): ncuflow {shlex.join(args)}")


def _reference_runs() -> list[Path]:
    return sorted(REFERENCE.rglob("manifest.json")) if REFERENCE.is_dir() else []


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path(os.environ.get("NCUFLOW_CORPUS", REPO.parent / "shared" / "ncu-reports")))
    parser.add_argument("--logs", type=Path, default=Path(os.environ.get("NCUFLOW_SERVING_LOGS", REPO.parent / "shared" / "serving-logs")))
    parser.add_argument("--out", type=Path, default=REPO / "out" / "demo")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    runs = _reference_runs()
    out = Path(_shown(args.out))
    if runs:
        print(f"{len(runs)} reference runs under {_shown(REFERENCE)}: the study report is built from them "
              f"({out / 'report' / 'report.md'} and its plots); one run of paged decode is classified.")
        _run(["report", _shown(REFERENCE), "-o", str(out / "report")])
        example = [run.parent for run in runs if "paged_decode" in str(run) and "page16" in str(run)] or [runs[0].parent]
        _run(["classify", _shown(example[0])])
    else:
        print(
            f"No H200 reference profiles are committed yet ({REFERENCE} holds no run): they need a "
            "session with a GPU to run analysis/run_study_on_gpu.py. This demo runs the read side on "
            f"the shared corpus of real reports made by others ({args.corpus}) instead."
        )
    if not args.corpus.is_dir():
        raise SystemExit(f"The report corpus is not at {args.corpus}; pass --corpus DIR or set NCUFLOW_CORPUS.")

    for name in (
        "AlpriElse__cs599k__rms_norm_matrix_ncu-reports_2025-04-21_v1.ncu-rep",
        "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep",
        "flyinglandlord__sglang__profile.ncu-rep",
    ):
        _run(["classify", _shown(args.corpus / name)])
    _run(["export", _shown(args.corpus), "-o", str(out / "launches.parquet"), "--metrics-long"])
    _run(["stability", _shown(args.corpus / "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep")])
    log = args.logs / "shun8686_qwen3-next-80b_mamba_c80.log"
    if log.is_file():
        _run(["phases", _shown(log), "--plot", str(out / "phases.png")])
    print(f"\nOutputs are in {out}.")


if __name__ == "__main__":
    main()
