"""The study's second part: the seed's own kernels (FlashInfer decode and plan(), XQA) on the H200.

Run by `python3 analysis/run_study_on_gpu.py --part flashinfer` (see its docstring) in one
device call. Steps in order of value per second, each under a deadline derived from one
budget (`--budget-s`), none stopping the others (`study_steps.py`):

1. bundle probe: activate the GPU bundle (`make gpu-bundle`, carried as `.gpu-bundle`),
   `ncuflow doctor`, load each prebuilt module (FlashInfer's own load error kept verbatim),
   each path once on a tiny shape outside ncu;
2. plan(): `ncuflow time flashinfer_plan:index_len=N` (host clock, no ncu) per index length;
3. one point of each cell under ncu (its first sweep's first point, the sweep's own settings,
   so the sweep later finds it done): a cell whose point fails is left out of what follows,
   and a counter refusal (ERR_NVGPUCTRPERM) ends every later ncu step, named;
4. the cost of `ncuflow profile` against the same ncu command run bare (both exit codes checked);
5. `ncuflow sweep` of analysis/sweeps/flashinfer/*.toml (tier 1, escalating), per-point timeouts;
6. the headline re-profiles (each sweep's corners) with `ncuflow stability`;
7. the why tier: `ncuflow profile SPEC --why` of the headline specs, one per cell first, as
   time allows (the sections whose rules explain each verdict, under STORE/.tier3);
8. `pytest -m gpu tests/test_flashinfer_gpu.py`.

With `--out DIR` (the device call's $OUT) the running summary and the runs (tarballs of the
store's FlashInfer folders, tiers 2 and 3 included) are rewritten there after every step. `--dry-run`
prints every step with its deadline, every point, its predicted passes (Perfworks, offline)
and the bundle module it needs, and runs nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from flashinfer_points import (
    PLAN_CELL,
    PLAN_INDEX_LENS,
    REPO,
    headline_specs,
    read_sweep,
    spec_text,
    sweep_files,
    sweep_points,
    why_specs,
)
from study_steps import COST_CELL, GPU_TESTS, STEPS, cap_seconds, run_steps


def needed_module(cell: str, params: dict[str, Any], modules: list[dict[str, Any]]) -> str:
    """The bundle module a point loads (by FlashInfer's URI), or why none is listed."""
    if cell == "xqa_decode":
        wanted = [m for m in modules if m["uri"].startswith("xqa_") and f"_page_size_{params['page']}_" in m["uri"]]
    elif params.get("tensor_cores", True):
        wanted = [m for m in modules if m["uri"].startswith("batch_prefill_")]
    else:
        wanted = [m for m in modules if m["uri"].startswith("batch_decode_")]
    return wanted[0]["uri"] if wanted else "(not in this bundle)"


def predicted_passes() -> dict[str, Any]:
    try:
        done = subprocess.run([sys.executable, "-m", "ncuflow", "passes", "--chip", "gh100", "--json"],
                              cwd=REPO, capture_output=True, text=True, check=False, timeout=120)
    except subprocess.TimeoutExpired:
        return {"error": ["ncuflow passes took over 120 s"]}
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:] or ["ncuflow passes failed"]}
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def why_passes() -> list[str]:
    """The why tier's rows and passes on gh100 (`ncuflow profile COST_CELL --why --dry-run`), or why
    they are unknown here."""
    try:
        done = subprocess.run([sys.executable, "-m", "ncuflow", "profile", COST_CELL, "--why", "--dry-run", "--chip",
                               "gh100"], cwd=REPO, capture_output=True, text=True, check=False, timeout=120)
    except subprocess.TimeoutExpired:
        return ["why-tier passes: unknown here (profile --why --dry-run took over 120 s)"]
    rows = [line[4:] for line in done.stderr.splitlines() if line.startswith("#   ")]
    if done.returncode != 0 or not rows:
        return ["why-tier passes: unknown here (" + " ".join(done.stderr.strip().splitlines()[-1:]) + ")"]
    return [row for row in rows if not row.startswith("  not counted")]


def bundle_modules(bundle: Path) -> list[dict[str, Any]]:
    from gpu_bundle import BundleError, read_manifest

    try:
        manifest = read_manifest(bundle)
    except BundleError as error:
        print(f"bundle {bundle}: NOT HERE ({error})")
        return []
    sizes = ", ".join(f"{f['name']} {f['bytes'] / 2**20:.1f} MiB" for f in manifest["files"])
    print(f"bundle {bundle} ({manifest['bundle_bytes'] / 2**20:.1f} MiB, built {manifest['created_utc']}): {sizes}")
    modules: list[dict[str, Any]] = manifest["modules"]
    return modules


def print_plan(bundle: Path, budget_s: float) -> None:
    modules = bundle_modules(bundle)
    passes = predicted_passes()
    if "error" in passes:
        tier = "tier-1 passes: unknown here (" + " ".join(passes["error"]) + ")"
        cost = "?"
    else:
        tier = (f"tier 1 {passes['passes']} predicted (ncu records ~{passes['recorded_passes_expected']}); "
                f"tier 2, only if undecided, {passes['escalation']['passes']} "
                f"(~{passes['escalation']['recorded_passes_expected']}) per kernel launch, on gh100 (Perfworks, offline)")
        cost = f"~{passes['recorded_passes_expected']} (+~{passes['escalation']['recorded_passes_expected']} if undecided)"
    print(f"passes: {tier}")
    print(f"\nsteps, in order, within a budget of {budget_s:.0f} s (each stops at its deadline; none stops the others):")
    for number, step in enumerate(STEPS, 1):
        cap = f"at most {cap_seconds(step, budget_s):.0f} s" if step.share < 1 else "what is left"
        print(f"  {number}. {step.name}: {cap}; {step.what}")
    seen: set[str] = set()
    for path in sweep_files():
        cell = read_sweep(path)["cell"]
        print(f"\n{path.relative_to(REPO)} ({cell}):")
        for params in sweep_points(path):
            text = spec_text(cell, params)
            again = " (also in an earlier sweep: profiled once)" if text in seen else ""
            seen.add(text)
            print(f"  {text}  passes {cost}  module {needed_module(cell, params, modules)}{again}")
    print(f"\n{PLAN_CELL} (host clock, no ncu), module {needed_module(PLAN_CELL, {}, modules)[:60]}:")
    for index_len in PLAN_INDEX_LENS:
        print(f"  {spec_text(PLAN_CELL, {'index_len': index_len})}")
    print(f"\nheadline re-profiles (the sweeps' corners), tier 1 each: {', '.join(headline_specs())}")
    print(f"why tier, as time allows, in this order: ncuflow profile SPEC --why for {', '.join(why_specs())}")
    for line in why_passes():
        print(f"  {line}")
    print(f"cost: ncuflow profile {COST_CELL} twice, and the same ncu command bare twice")
    print(f"pytest -m gpu: {' '.join(GPU_TESTS)}")
    print(f"\n{len(seen)} profiled points + {len(PLAN_INDEX_LENS)} plan() timings.")


def run_part(store: Path, bundle: Path, budget_s: float, ncu: list[str], *, dry_run: bool,
             out: Path | None = None) -> int:
    if dry_run:
        print_plan(bundle, budget_s)
        return 0
    return run_steps(store, bundle, budget_s, ncu, out)
