#!/usr/bin/env python3
"""The one script a GPU host runs to produce the study's reference runs.

    python analysis/run_study_on_gpu.py                 # everything, into profiles/reference/h200
    python analysis/run_study_on_gpu.py --dry-run       # print the commands only
    python analysis/run_study_on_gpu.py --only paged_decode_pages --skip-headline

Steps, each an ordinary `ncuflow` command printed before it runs:

1. `ncuflow doctor --strict`: ncu, ncu_report, the GPU, counter permission; stops here if
   this machine cannot profile.
2. `ncuflow sweep analysis/sweeps/NAME.toml --store STORE` for each sweep file (resumable:
   points whose replicas are already stored are skipped).
3. `ncuflow stability --headline STORE --replicas 3 --store STORE`: re-profiles, in fresh
   ncu processes, the cells whose numbers carry an explain verdict (each swept
   parameter's baseline and extremes), and writes STORE/../stability-<gpu>.md.
4. A short table: `ncuflow explain STORE --vary PARAM` for the study's parameters.

It needs no install: it puts the checkout first on the path of itself and of every command
it runs (the GPU host has no network to install from), and imports nothing beyond the
standard library and ncuflow's profiling path (no polars, no Ray). Afterwards commit STORE
and run `python analysis/rebuild_study.py` anywhere (no GPU) for the report and plots.

The second part, `--part flashinfer` (analysis/study_flashinfer.py), profiles the seed's
own kernels (FlashInfer's decode and plan(), XQA) from the GPU bundle that `make gpu-bundle`
builds on a CPU machine (`--bundle`, default .gpu-bundle), step by step within `--budget-s`,
each step's results written under `--out` (the device call's $OUT) as it lands:

    python3 analysis/run_study_on_gpu.py --part flashinfer --dry-run   # steps, points, passes, modules
    python3 analysis/run_study_on_gpu.py --part flashinfer --budget-s 420 --out "$OUT"

`make gpu-rehearsal` runs the device command of docs/gpu-host.md on a host-like CPU environment first.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The checkout's ncuflow, whatever is installed (the GPU host has none installed): first on
# this process's path and on every command's (PYTHONPATH), and the scripts beside this one.
sys.path[:0] = [str(REPO), str(REPO / "analysis")]
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))
SWEEPS = REPO / "analysis" / "sweeps"
DEFAULT_STORE = REPO / "profiles" / "reference" / "h200"
# The study's swept parameters, for the closing table.
STUDY_PARAMS: tuple[str, ...] = ("layout", "page", "mib")


def run(args: list[str], *, dry_run: bool, check: bool = True) -> int:
    command = [sys.executable, "-m", "ncuflow", *args]
    print(f"\n$ ncuflow {shlex.join(args)}", flush=True)
    if dry_run:
        return 0
    started = time.monotonic()
    returncode = subprocess.call(command, cwd=REPO)
    print(f"  ({time.monotonic() - started:.0f} s, exit {returncode})", flush=True)
    if check and returncode != 0:
        print(f"\nrun_study_on_gpu: `ncuflow {args[0]}` failed (exit {returncode}); stopping here. "
              "Fix what its message says and run this script again: completed runs are kept and skipped.",
              file=sys.stderr)
        raise SystemExit(returncode)
    return returncode


def _seconds(text: str) -> float:
    value = float(text)
    if not 30 <= value <= 3600:  # nan fails both comparisons
        raise argparse.ArgumentTypeError(f"{text!r}: give between 30 and 3600 seconds")
    return value


def _out_folder(text: str) -> Path:
    """A folder to write the call's results into: made if missing; a file or a dangling link is refused."""
    path = Path(text)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise argparse.ArgumentTypeError(f"{text!r} cannot be a folder of results ({error.strerror or error})") from None
    if not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder this process can write into")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Profile the study's sweeps and headline replicas on this GPU.")
    parser.add_argument("--store", type=Path, default=DEFAULT_STORE, help=f"profile store (default {DEFAULT_STORE.relative_to(REPO)})")
    parser.add_argument("--ncu", default=None, help="the ncu executable (default: found by ncuflow)")
    parser.add_argument("--only", action="append", default=[], metavar="SWEEP", help="run only this sweep (file stem); repeatable")
    parser.add_argument("--replicas", type=int, default=3, help="headline re-profiles per cell (default 3)")
    parser.add_argument("--skip-headline", action="store_true", help="skip the headline re-profiles")
    parser.add_argument("--keep-going", action="store_true", help="continue past a point's own failure")
    parser.add_argument("--dry-run", action="store_true", help="print the commands without running them")
    parser.add_argument("--part", choices=("triton", "flashinfer"), default="triton",
                        help="triton: the stand-in cells (default); flashinfer: FlashInfer and XQA from the GPU bundle")
    parser.add_argument("--bundle", type=Path, default=REPO / ".gpu-bundle", help="the GPU bundle (--part flashinfer)")
    parser.add_argument("--budget-s", type=_seconds, default=420.0,
                        help="seconds the flashinfer part may take, its close included (default 420)")
    parser.add_argument("--out", type=_out_folder, default=None,
                        help="--part flashinfer: write the running summary and the runs here after every step ($OUT)")
    args = parser.parse_args(argv)
    if args.part == "flashinfer":
        from study_flashinfer import run_part

        return run_part(args.store.resolve(), args.bundle, args.budget_s, ["--ncu", args.ncu] if args.ncu else [],
                        dry_run=args.dry_run, out=args.out)

    ncu = ["--ncu", args.ncu] if args.ncu else []
    sweeps = sorted(SWEEPS.glob("*.toml"))
    if args.only:
        sweeps = [s for s in sweeps if s.stem in args.only]
    if not sweeps:
        print(f"run_study_on_gpu: no sweep file in {SWEEPS}" + (f" named {', '.join(args.only)}" if args.only else ""), file=sys.stderr)
        return 2
    store = str(args.store)

    run(["doctor", "--strict", *ncu], dry_run=args.dry_run)
    for sweep in sweeps:
        run(["sweep", str(sweep.relative_to(REPO)), "--store", store, "--no-escalate", *ncu,
             *(["--keep-going"] if args.keep_going else [])], dry_run=args.dry_run)
    if not args.skip_headline:
        markdown = args.store.parent / f"stability-{args.store.name}.md"
        run(["stability", "--headline", store, "--replicas", str(args.replicas), "--store", store, *ncu,
             "--markdown", str(markdown)], dry_run=args.dry_run)
    print("\n==== the study's parameters ====", flush=True)
    for param in STUDY_PARAMS:
        run(["explain", store, "--vary", param], dry_run=args.dry_run, check=False)
    print(f"\nDone. Commit {args.store} and run `python analysis/rebuild_study.py` for the report and plots.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
