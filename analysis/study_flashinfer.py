"""The study's second part: the seed's own kernels (FlashInfer decode and plan(), XQA) on the H200.

Run by `python3 analysis/run_study_on_gpu.py --part flashinfer` (see its docstring), in one
call of at most ~8 minutes, steps in order of what the study needs most:

1. activate the GPU bundle (`make gpu-bundle`, carried as `.gpu-bundle`): FlashInfer's
   modules for sm_90a, loaded with JIT off; `ncuflow doctor --strict`; each FlashInfer path
   once on a tiny shape outside ncu (when one fails, every FlashInfer step is skipped and
   its error kept; the GPU tests still run);
2. `ncuflow sweep` of analysis/sweeps/flashinfer/*.toml under the tier-1 collection, with
   escalation (tier 2 for the runs tier 1 leaves undecided), into the store;
3. plan(): `ncuflow time flashinfer_plan:index_len=N` (host clock) for each index length,
   one JSON record each in STORE/flashinfer_plan/;
4. the cost of `ncuflow profile` against the same ncu command run bare, on one cell, side by side;
5. `pytest -m gpu` on the tree's GPU tests;
6. the headline re-profiles (each sweep's corners: every axis at its first and last value)
   with `ncuflow stability`, as many replicas as the time left allows.

A step that would not fit in what is left of `--budget-s` is skipped and named at the end
with its command. `--dry-run` prints every point, its predicted passes (Perfworks, offline)
and the bundle module it needs, and runs nothing.
"""

from __future__ import annotations

import itertools
import json
import shlex
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SWEEPS = REPO / "analysis" / "sweeps" / "flashinfer"
PLAN_INDEX_LENS = (64, 1024, 16384, 262144, 2097152)
COST_CELL = "xqa_decode:page=16,kv=shared"
GPU_TESTS = ("tests/test_kernels_gpu.py", "tests/test_orchestrate_gpu.py", "tests/test_flashinfer_gpu.py")
WORK = Path("/tmp/ncuflow-gpu-bundle")
SECONDS_PER_PROFILE = 10.0  # first guess, replaced by what the sweeps measured
PYTEST_SECONDS = 150.0


@dataclass
class Budget:
    seconds: float
    started: float = field(default_factory=time.monotonic)
    skipped: list[str] = field(default_factory=list)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def fits(self, name: str, needed: float, command: str) -> bool:
        if needed <= self.left():
            return True
        self.skipped.append(f"{name} (needs ~{needed:.0f} s, {self.left():.0f} s left): {command}")
        print(f"\n-- skipping {name}: needs ~{needed:.0f} s, {self.left():.0f} s left", flush=True)
        return False


def ncuflow(args: list[str], *, dry_run: bool, check: bool = True, timeout: float | None = None) -> tuple[int, float]:
    print(f"\n$ ncuflow {shlex.join(args)}", flush=True)
    if dry_run:
        return 0, 0.0
    started = time.monotonic()
    try:
        code = subprocess.call([sys.executable, "-m", "ncuflow", *args], cwd=REPO, timeout=timeout)
    except subprocess.TimeoutExpired:
        code = 124
    seconds = time.monotonic() - started
    print(f"  ({seconds:.0f} s, exit {code})", flush=True)
    if check and code != 0:
        raise SystemExit(f"run_study_on_gpu: `ncuflow {args[0]}` failed (exit {code}); stopping. Completed runs are kept.")
    return code, seconds


# ----------------------------------------------------------------------------- the plan


def sweep_points(path: Path) -> list[dict[str, Any]]:
    data = tomllib.loads(path.read_text())
    axes = list(data.get("axes", {}).items())
    return [{**data.get("fixed", {}), **dict(zip([n for n, _ in axes], combo, strict=True))}
            for combo in itertools.product(*(v for _, v in axes))]


def corner_points(path: Path) -> list[dict[str, Any]]:
    """The headline points of a sweep: every axis at its first or its last value."""
    data = tomllib.loads(path.read_text())
    axes = list(data.get("axes", {}).items())
    ends = [sorted({values[0], values[-1]}, key=values.index) for _, values in axes]
    return [{**data.get("fixed", {}), **dict(zip([n for n, _ in axes], combo, strict=True))}
            for combo in itertools.product(*ends)]


def spec_text(cell: str, params: dict[str, Any]) -> str:
    from ncuflow.cells.registry import make_spec

    return make_spec(cell, params).text()


def headline_specs() -> list[str]:
    specs: list[str] = []
    for path in sorted(SWEEPS.glob("*.toml")):
        cell = tomllib.loads(path.read_text())["cell"]
        for params in corner_points(path):
            text = spec_text(cell, params)
            if text not in specs:
                specs.append(text)
    return specs


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
    done = subprocess.run([sys.executable, "-m", "ncuflow", "passes", "--chip", "gh100", "--json"],
                          cwd=REPO, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:] or ["ncuflow passes failed"]}
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def print_plan(bundle: Path) -> None:
    from gpu_bundle import BundleError, read_manifest

    try:
        manifest = read_manifest(bundle)
        modules = manifest["modules"]
        sizes = ", ".join(f"{f['name']} {f['bytes'] / 2**20:.1f} MiB" for f in manifest["files"])
        print(f"bundle {bundle} ({manifest['bundle_bytes'] / 2**20:.1f} MiB, built {manifest['created_utc']}): {sizes}")
    except BundleError as error:
        modules = []
        print(f"bundle {bundle}: NOT HERE ({error})")
    passes = predicted_passes()
    if "error" in passes:
        tier = "tier-1 passes: unknown here (" + " ".join(passes["error"]) + ")"
    else:
        tier = (f"tier 1 {passes['passes']} predicted (ncu records ~{passes['recorded_passes_expected']}); "
                f"tier 2, only if undecided, {passes['escalation']['passes']} "
                f"(~{passes['escalation']['recorded_passes_expected']}) per kernel launch, on gh100 (Perfworks, offline)")
    print(f"passes: {tier}")
    seen: set[str] = set()
    cost = "?" if "error" in passes else (f"~{passes['recorded_passes_expected']} "
                                          f"(+~{passes['escalation']['recorded_passes_expected']} if undecided)")
    for path in sorted(SWEEPS.glob("*.toml")):
        cell = tomllib.loads(path.read_text())["cell"]
        print(f"\n{path.relative_to(REPO)} ({cell}):")
        for params in sweep_points(path):
            text = spec_text(cell, params)
            again = " (also in an earlier sweep: profiled once)" if text in seen else ""
            seen.add(text)
            print(f"  {text}  passes {cost}  module {needed_module(cell, params, modules)}{again}")
    print(f"\nflashinfer_plan (host clock, no ncu), module {needed_module('flashinfer_plan', {}, modules)[:60]}:")
    for index_len in PLAN_INDEX_LENS:
        print(f"  {spec_text('flashinfer_plan', {'index_len': index_len})}")
    print(f"\nheadline re-profiles (the sweeps' corners), tier 1 each: {', '.join(headline_specs())}")
    print(f"cost: ncuflow profile {COST_CELL} twice, and the same ncu command bare twice")
    print(f"pytest -m gpu: {' '.join(GPU_TESTS)}")
    heads = len(headline_specs())
    estimate = {"sweeps": len(seen) * SECONDS_PER_PROFILE, "plan()": 6.0 * len(PLAN_INDEX_LENS),
                "cost": 4 * SECONDS_PER_PROFILE, "pytest -m gpu": PYTEST_SECONDS,
                f"headline ({heads} x 2 replicas)": 2 * heads * SECONDS_PER_PROFILE}
    print(f"\n{len(seen)} profiled points + {len(PLAN_INDEX_LENS)} plan() timings; at ~{SECONDS_PER_PROFILE:.0f} s a "
          "profile: " + ", ".join(f"{k} ~{v:.0f} s" for k, v in estimate.items())
          + f" (~{sum(estimate.values()):.0f} s). The budget takes the steps in this order; the headline "
          "replicas shrink (2, 1, none) to what is left, and a skipped step is named with its command.")


# ----------------------------------------------------------------------------- the steps


def activate(bundle: Path) -> None:
    import os

    from gpu_bundle import activate as unpack_bundle

    started = time.monotonic()
    env = unpack_bundle(bundle, WORK)
    os.environ.update(env)
    print(f"bundle unpacked into {WORK} in {time.monotonic() - started:.0f} s; " + ", ".join(f"{k}={v}" for k, v in env.items()), flush=True)


def time_plan(store: Path, budget: Budget, *, dry_run: bool) -> None:
    from ncuflow.cells.registry import parse_spec
    from ncuflow.files import atomic_write_text

    folder = store / "flashinfer_plan"
    for index_len in PLAN_INDEX_LENS:
        spec = parse_spec(spec_text("flashinfer_plan", {"index_len": index_len}))
        args = ["time", spec.text(), "--repeats", "50", "--warmup", "5", "--json"]
        print(f"\n$ ncuflow {shlex.join(args)} > {folder.relative_to(REPO)}/{spec.slug()}.json", flush=True)
        if dry_run or not budget.fits(f"plan() at index_len={index_len}", 8, f"ncuflow {shlex.join(args)}"):
            continue
        done = subprocess.run([sys.executable, "-m", "ncuflow", *args], cwd=REPO, capture_output=True, text=True,
                              check=False, timeout=300)
        if done.returncode != 0:
            print(f"  failed: {done.stderr.strip()}", flush=True)
            continue
        lines = done.stdout.splitlines()  # the JSON object, after anything a library printed first
        record = json.loads("\n".join(lines[lines.index("{"):]) if "{" in lines else done.stdout)
        atomic_write_text(folder / f"{spec.slug()}.json", json.dumps(record, indent=2) + "\n", make_parents=True)
        stats = record["stats"]
        print(f"  plan(): median {stats['median_us']:.1f} µs (p10 {stats['p10_us']:.1f}, p90 {stats['p90_us']:.1f})", flush=True)


def profile_cost(budget: Budget, *, dry_run: bool) -> dict[str, Any]:
    """`ncuflow profile` against the identical ncu command run bare, alternated, twice each."""
    scratch = WORK / "cost-store"
    args = ["profile", COST_CELL, "--store", str(scratch), "--clock-control", "none", "--no-escalate"]
    if dry_run or not budget.fits("profile vs bare ncu", 4 * SECONDS_PER_PROFILE, f"ncuflow {shlex.join(args)}"):
        print(f"\n$ ncuflow {shlex.join(args)}  (and its ncu command bare)", flush=True)
        return {}
    shown = subprocess.run([sys.executable, "-m", "ncuflow", *args, "--dry-run"], cwd=REPO, capture_output=True,
                           text=True, check=False, timeout=120)
    if shown.returncode != 0 or not shown.stdout.strip():
        print(f"  cannot get the ncu command: {shown.stderr.strip()}", flush=True)
        return {}
    bare = _bare_command(shlex.split(shown.stdout.strip().splitlines()[0]), WORK / "bare")
    walls: dict[str, list[float]] = {"ncuflow profile": [], "bare ncu": []}
    for _ in range(2):
        _, seconds = ncuflow(args, dry_run=False)
        walls["ncuflow profile"].append(seconds)
        print(f"\n$ {shlex.join(bare)}", flush=True)
        started = time.monotonic()
        subprocess.run(bare, cwd=REPO, capture_output=True, check=False, timeout=600)
        walls["bare ncu"].append(time.monotonic() - started)
        print(f"  ({walls['bare ncu'][-1]:.1f} s)", flush=True)
    mean = {k: sum(v) / len(v) for k, v in walls.items()}
    result = {"cell": COST_CELL, "wall_s": walls, "mean_s": mean, "ratio": mean["ncuflow profile"] / mean["bare ncu"]}
    print(f"\ncost: ncuflow profile {mean['ncuflow profile']:.1f} s vs bare ncu {mean['bare ncu']:.1f} s "
          f"= {result['ratio']:.2f}x", flush=True)
    return result


def _bare_command(command: list[str], folder: Path) -> list[str]:
    """ncuflow's own ncu command (`profile --dry-run`) with its outputs sent to FOLDER."""
    folder.mkdir(parents=True, exist_ok=True)
    out = list(command)
    for flag, name in (("--export", "report.ncu-rep"), ("--representation-out", "representation.json")):
        if flag in out:
            out[out.index(flag) + 1] = str(folder / name)
    return out


def run_gpu_tests(budget: Budget, *, dry_run: bool) -> int | None:
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", *GPU_TESTS]
    print(f"\n$ {shlex.join(command[2:])}", flush=True)
    if dry_run or not budget.fits("pytest -m gpu", PYTEST_SECONDS, shlex.join(["python3", *command[1:]])):
        return None
    started = time.monotonic()
    try:
        code = subprocess.call(command, cwd=REPO, timeout=max(60.0, budget.left() - 10))
    except subprocess.TimeoutExpired:
        code = 124
    print(f"  ({time.monotonic() - started:.0f} s, exit {code})", flush=True)
    return code


def headline(store: Path, markdown: Path, budget: Budget, per_profile: float, *, dry_run: bool) -> None:
    specs = headline_specs()
    fit = int(budget.left() // max(1.0, per_profile * len(specs)))
    replicas = min(2, fit)
    args = ["stability", *specs, "--replicas", str(max(1, replicas)), "--clock-control", "none",
            "--store", str(store), "--markdown", str(markdown)]
    if dry_run:
        ncuflow(args, dry_run=True)
        return
    if replicas < 1:
        budget.fits("headline re-profiles", per_profile * len(specs), f"ncuflow {shlex.join(args)}")
        return
    ncuflow(args, dry_run=False, check=False, timeout=max(30.0, budget.left()))


SMOKE = ("flashinfer_decode:batch=2,kv_len=256,page=1", "xqa_decode:batch=2,kv_len=256,page=16")


def smoke(*, dry_run: bool) -> list[str]:
    """Each FlashInfer path once on a tiny shape, outside ncu: what fails here fails every point."""
    failed = []
    for spec in SMOKE:
        command = [sys.executable, "-m", "ncuflow.cells.cellrun", spec, "--representation-out", str(WORK / "smoke.json")]
        print(f"\n$ {shlex.join(['python3', *command[1:]])}", flush=True)
        if dry_run:
            continue
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False, timeout=300)
        if done.returncode != 0:
            failed.append(f"{spec}: {done.stderr.strip()[-1500:]}")
            print(f"  failed: {done.stderr.strip()[-1500:]}", flush=True)
    return failed


def run_part(store: Path, bundle: Path, budget_s: float, ncu: list[str], *, dry_run: bool) -> int:
    sys.path.insert(0, str(REPO / "analysis"))
    budget = Budget(budget_s)
    if dry_run:
        print_plan(bundle)
    else:
        activate(bundle)
    ncuflow(["doctor", "--strict", *ncu], dry_run=dry_run)
    broken = smoke(dry_run=dry_run)
    if broken:  # the Triton cells' GPU tests still run: they tell a broken bundle from a broken host
        budget.skipped.append("the FlashInfer sweeps, plan() and the cost (a tiny cell failed): " + " | ".join(broken))
    profiles = seconds = 0.0
    for path in sorted(SWEEPS.glob("*.toml")) if not broken else []:
        points = len(sweep_points(path))
        args = ["sweep", str(path.relative_to(REPO)), "--store", str(store), "--keep-going", *ncu]
        if not dry_run and not budget.fits(f"sweep {path.stem}", points * SECONDS_PER_PROFILE * 0.8, f"ncuflow {shlex.join(args)}"):
            continue
        _, took = ncuflow(args, dry_run=dry_run, check=False)
        profiles, seconds = profiles + points, seconds + took
    per_profile = seconds / profiles if profiles and seconds else SECONDS_PER_PROFILE
    cost: dict[str, Any] = {}
    if not broken:
        time_plan(store, budget, dry_run=dry_run)
        cost = profile_cost(budget, dry_run=dry_run)
    tests = run_gpu_tests(budget, dry_run=dry_run)
    if not broken:
        headline(store, store.parent / f"stability-{store.name}-flashinfer.md", budget, per_profile, dry_run=dry_run)
    summary = {"budget_s": budget_s, "used_s": round(budget_s - budget.left(), 1), "seconds_per_profile": round(per_profile, 1),
               "profile_vs_bare_ncu": cost, "pytest_gpu_exit": tests, "skipped": budget.skipped}
    if not dry_run:
        from ncuflow.files import atomic_write_text

        atomic_write_text(store.parent / f"flashinfer-call-{store.name}.json", json.dumps(summary, indent=2) + "\n")
    print("\n==== summary ====\n" + json.dumps(summary, indent=2), flush=True)
    return 0 if tests in (0, None) else 1
