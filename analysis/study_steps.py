"""The steps of the FlashInfer/XQA device call (`study_flashinfer.py` prints the plan; the points
are `flashinfer_points.py`'s).

One row per step (``STEPS``): its name, its cap as a share of the budget, and the function
that runs it given its deadline. Each step returns an ``Outcome``; a failure is recorded
with its cause (the tool's own last lines) and the next step runs. What one step learns
that changes the rest lives in ``Call``: a cell whose first point failed is left out of
the sweeps and the headline, a counter refusal ends every later ncu step.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashinfer_points import (
    CELLS,
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
from gpu_call import (
    Budget,
    Bundle,
    CallRecord,
    Finished,
    Outcome,
    Status,
    Stopped,
    run_until,
    seconds_until,
    stop_on_sigterm,
)

from ncuflow.profile.ncu_errors import COUNTER_PERMISSION_CODE as COUNTER_REFUSAL
from ncuflow.profile.ncu_errors import UNKNOWN_METRIC_WORDS as UNKNOWN_METRIC
from ncuflow.store.tiers import TIER3_FOLDER

WORK = Path(tempfile.gettempdir()) / "ncuflow-gpu-bundle"  # $TMPDIR: each rehearsal mode its own
PROFILE_TIMEOUT_S = 90.0  # one profile on the H200: ~10 s; a hung one is stopped here
SECONDS_PER_PROFILE = 12.0  # first guess, replaced by what the first points measured
COST_CELL = "xqa_decode:page=16,kv=shared"
GPU_TESTS = ("tests/test_flashinfer_gpu.py",)
SMOKE = ("flashinfer_decode:batch=2,kv_len=256,page=1", "xqa_decode:batch=2,kv_len=256,page=16")


@dataclass
class Call:
    """What the steps share: where things go, the clock, and what earlier steps found."""

    store: Path
    bundle: Path
    ncu: list[str]
    budget: Budget
    record: CallRecord
    env: dict[str, str]
    left_out: dict[str, str] = field(default_factory=dict)  # cell -> why (its first point failed)
    ncu_refused: str = ""
    extras_refused: str = ""  # this ncu refused the sweeps' extra metrics: which, in its words
    seconds_per_profile: float = SECONDS_PER_PROFILE

    def ncuflow(self, args: list[str], deadline: float, *, capture: bool = False) -> Finished:
        print(f"\n$ ncuflow {shlex.join(args)}", flush=True)
        return run_until([sys.executable, "-m", "ncuflow", *args], deadline, cwd=REPO, env=self.env,
                         capture_stdout=capture)

    def python(self, args: list[str], deadline: float, *, capture: bool = False) -> Finished:
        print(f"\n$ python3 {shlex.join(args)}", flush=True)
        return run_until([sys.executable, *args], deadline, cwd=REPO, env=self.env, capture_stdout=capture)

    def profile_timeout(self, deadline: float) -> str:
        return f"{max(5.0, min(PROFILE_TIMEOUT_S, seconds_until(deadline) - 5)):.0f}"

    def note_refusal(self, finished: Finished) -> None:
        """Remember ncu's counter refusal (ncuflow's paragraph naming it), the first time it is seen."""
        if self.ncu_refused or COUNTER_REFUSAL not in finished.tail:
            return
        lines = finished.tail.splitlines()
        first = next(i for i, line in enumerate(lines) if COUNTER_REFUSAL in line)
        self.ncu_refused = " ".join(line.strip() for line in lines[first:first + 6])[:800]

    def ncu_blocked(self, step: str) -> Outcome | None:
        """A skip when ncu was refused earlier: every profile would be refused alike."""
        if not self.ncu_refused:
            return None
        return Outcome(step, Status.SKIPPED, 0.0, cause=f"ncu was refused the GPU counters earlier: {self.ncu_refused}")


def _outcome(step: str, finished: Finished, result: dict[str, Any] | None = None) -> Outcome:
    return Outcome(step, finished.status, finished.seconds, shlex.join(finished.command[1:]), finished.cause(),
                   result or {})


# ----------------------------------------------------------------------------- 1. bundle probe


def probe_bundle(call: Call, deadline: float) -> Outcome:
    from gpu_bundle import BundleError, activate

    started = time.monotonic()
    result: dict[str, Any] = {}
    try:
        call.env.update(activate(call.bundle, WORK))
    except (BundleError, OSError) as error:
        for cell in (*CELLS, PLAN_CELL):
            call.left_out[cell] = f"the GPU bundle could not be activated: {error}"
        return Outcome("bundle probe", Status.FAILED, time.monotonic() - started,
                       f"python3 analysis/gpu_bundle.py activate {WORK}", str(error))
    print(f"bundle unpacked into {WORK} in {time.monotonic() - started:.0f} s", flush=True)
    doctor = call.ncuflow(["doctor", *call.ncu], min(deadline, time.monotonic() + 60))
    result["doctor_exit"] = doctor.code
    record = WORK / "load.json"
    record.unlink(missing_ok=True)
    loaded = call.python(["analysis/gpu_bundle_flashinfer.py", "load", str(record)], deadline)
    result["modules"] = _read_json(record) if record.is_file() else {"error": loaded.cause()}
    smoke: dict[str, str] = {}
    for spec in SMOKE:
        done = call.python(["-m", "ncuflow.cells.cellrun", spec, "--representation-out", str(WORK / "smoke.json")],
                           deadline)
        smoke[spec] = "ok" if done.ok else done.cause()
    result["smoke"] = smoke
    failed = [f"{spec}: {cause}" for spec, cause in smoke.items() if cause != "ok"]
    if not loaded.ok:
        failed.insert(0, "module load: " + (_load_failures(result["modules"]) or loaded.cause()))
    status = Status.OK if not failed else Status.FAILED
    return Outcome("bundle probe", status, time.monotonic() - started, "gpu_bundle activate; doctor; load; smoke",
                   " | ".join(failed), result)


def _load_failures(record: dict[str, Any]) -> str:
    """Each module that did not load, in FlashInfer's own words (its load warning, else its error)."""
    lines = []
    for uri, module in record.get("modules", {}).items():
        if isinstance(module, dict) and not module.get("loaded", True):
            words = (module.get("flashinfer_log") or [module.get("error", "")])[-1]
            lines.append(f"{uri[:40]}...: {words.split('.so ', 1)[-1][:300]}")
    return "; ".join(lines)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text()[:4_000_000])
    except (OSError, ValueError) as error:
        return {"error": f"{path}: {error}"}
    return data


# ----------------------------------------------------------------------------- 2. plan()


def time_plan(call: Call, deadline: float) -> Outcome:
    from ncuflow.cells.registry import parse_spec
    from ncuflow.files import atomic_write_text

    if PLAN_CELL in call.left_out:
        return Outcome("plan() timings", Status.SKIPPED, 0.0, cause=call.left_out[PLAN_CELL])
    started, folder = time.monotonic(), call.store / PLAN_CELL
    medians: dict[str, Any] = {}
    causes: list[str] = []
    for index_len in PLAN_INDEX_LENS:
        spec = parse_spec(spec_text(PLAN_CELL, {"index_len": index_len}))
        done = call.ncuflow(["time", spec.text(), "--repeats", "50", "--warmup", "5", "--json"],
                            min(deadline, time.monotonic() + 60), capture=True)
        record = _json_object(done.stdout) if done.ok else None
        if record is None:
            causes.append(f"index_len={index_len}: {done.cause() or 'no JSON on stdout'}")
            medians[str(index_len)] = None
            if index_len == PLAN_INDEX_LENS[0]:
                break  # the smallest failed: the others would fail alike, and time is better spent on ncu
            continue
        atomic_write_text(folder / f"{spec.slug()}.json", json.dumps(record, indent=2) + "\n", make_parents=True)
        medians[str(index_len)] = record["stats"]["median_us"]
        print(f"  plan(): median {record['stats']['median_us']:.1f} µs", flush=True)
    timed = sum(v is not None for v in medians.values())
    status = Status.OK if timed == len(PLAN_INDEX_LENS) else Status.FAILED
    if timed == 0 and seconds_until(deadline) <= 0:
        status = Status.TIMED_OUT
    return Outcome("plan() timings", status, time.monotonic() - started, f"ncuflow time {PLAN_CELL}:index_len=N --json",
                   " | ".join(causes), {"median_us_by_index_len": medians})


def _json_object(stdout: str) -> dict[str, Any] | None:
    """The JSON object a command printed, after anything a library printed first."""
    start = stdout.find("{")
    if start < 0:
        return None
    try:
        value = json.loads(stdout[start:])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# ----------------------------------------------------------------------------- 3. one point of each cell


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def rewritten_sweep(path: Path, folder: Path, *, first_point: bool, extra_metrics: bool = True) -> Path:
    """SWEEP with its own name and [ncu]: reduced to its first point (the sweep later finds it
    done), or without its extra metrics (when this ncu refused them)."""
    data = read_sweep(path)
    top = {k: v for k, v in data.items() if not isinstance(v, dict)} | {"name": data.get("name", path.stem)}
    if first_point:
        top["replicas"] = 1
    lines = [f"{k} = {_toml_value(v)}" for k, v in top.items()]
    for table in ("fixed", "axes", "ncu"):
        values = dict(data.get(table, {}))
        if table == "axes" and first_point:
            values = {name: [axis[0]] for name, axis in values.items()}
        if table == "ncu" and not extra_metrics:
            values.pop("metrics", None)
        lines += ["", f"[{table}]", *(f"{k} = {_toml_value(v)}" for k, v in values.items())]
    target = folder / f"{'first-' if first_point else ''}{path.stem}.toml"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(lines) + "\n")
    return target


def one_point_sweep(path: Path, folder: Path, *, extra_metrics: bool = True) -> Path:
    return rewritten_sweep(path, folder, first_point=True, extra_metrics=extra_metrics)


def first_points(call: Call, deadline: float) -> Outcome:
    if (blocked := call.ncu_blocked("one point of each cell")) is not None:
        return blocked
    started, causes = time.monotonic(), []
    result: dict[str, Any] = {}
    took: list[float] = []
    firsts: dict[str, Path] = {}
    for path in sweep_files():
        firsts.setdefault(read_sweep(path)["cell"], path)
    for cell, path in firsts.items():
        if cell in call.left_out:
            result[cell] = f"left out: {call.left_out[cell]}"
            continue
        point = spec_text(cell, sweep_points(path)[0])
        done = _first_point(call, path, deadline)
        if UNKNOWN_METRIC in done.tail and not call.extras_refused and "metrics" in read_sweep(path).get("ncu", {}):
            # this ncu refused the study's extra metrics: the decisive collection alone, from here on
            call.extras_refused = " ".join(done.tail.split(UNKNOWN_METRIC, 1)[1].split()[:12])[:400]
            done = _first_point(call, path, deadline)
        call.note_refusal(done)
        result[cell] = {"point": point, "exit": done.code, "seconds": round(done.seconds, 1)}
        if done.ok and _has_run(call.store, cell, point):
            took.append(done.seconds)
            continue
        cause = done.cause() or "the sweep ended without a run of the point"
        call.left_out[cell] = f"its first point {point} failed: {cause.strip().splitlines()[-1][:400]}"
        causes.append(f"{cell}: {cause}")
    if took:  # what later steps plan with (a profile, escalation included, plus process start-up)
        call.seconds_per_profile = max(took)
    status = Status.OK if not causes else Status.FAILED
    return Outcome("one point of each cell", status, time.monotonic() - started, "ncuflow sweep <first point>",
                   " | ".join(causes), result)


def _first_point(call: Call, path: Path, deadline: float) -> Finished:
    sweep = one_point_sweep(path, WORK / "first-points", extra_metrics=not call.extras_refused)
    return call.ncuflow(["sweep", str(sweep), "--store", str(call.store), "--timeout",
                         call.profile_timeout(deadline), *call.ncu], deadline)


def _has_run(store: Path, cell: str, spec: str) -> bool:
    from ncuflow.store import iter_runs

    return any(run.manifest.spec.text() == spec for run in iter_runs(store, cell))


def runs_in_store(store: Path) -> dict[str, int]:
    from ncuflow.store import iter_runs

    return {cell: sum(1 for _ in iter_runs(store, cell)) for cell in CELLS}


# ----------------------------------------------------------------------------- 4. the cost pair


def profile_cost(call: Call, deadline: float) -> Outcome:
    """`ncuflow profile` against the identical ncu command run bare, alternated, twice each."""
    step = "profile vs bare ncu"
    if (blocked := call.ncu_blocked(step)) is not None:
        return blocked
    if COST_CELL.split(":")[0] in call.left_out:
        return Outcome(step, Status.SKIPPED, 0.0, cause=call.left_out[COST_CELL.split(":")[0]])
    started, scratch = time.monotonic(), WORK / "cost-store"
    args = ["profile", COST_CELL, "--store", str(scratch), "--clock-control", "none", "--no-escalate",
            "--timeout", call.profile_timeout(deadline), *call.ncu]
    shown = call.ncuflow([*args, "--dry-run"], min(deadline, time.monotonic() + 60), capture=True)
    if not shown.ok or not shown.stdout.strip():
        return _outcome(step, shown)
    bare = _bare_command(shlex.split(shown.stdout.strip().splitlines()[0]), WORK / "bare")
    walls: dict[str, list[float]] = {"ncuflow profile": [], "bare ncu": []}
    for _ in range(2):
        for side, command in (("ncuflow profile", None), ("bare ncu", bare)):
            if command is None:
                done = call.ncuflow(args, deadline)
            else:
                print(f"\n$ {shlex.join(command)}", flush=True)
                done = run_until(command, deadline, cwd=REPO, env=call.env)
            call.note_refusal(done)
            if not done.ok:
                return Outcome(step, done.status, time.monotonic() - started, shlex.join(done.command),
                               f"{side} failed (exit {done.code}): {done.cause()}", {"wall_s": walls})
            walls[side].append(round(done.seconds, 2))
    mean = {k: sum(v) / len(v) for k, v in walls.items()}
    ratio = mean["ncuflow profile"] / mean["bare ncu"]
    print(f"\ncost: ncuflow profile {mean['ncuflow profile']:.1f} s vs bare ncu {mean['bare ncu']:.1f} s = {ratio:.2f}x",
          flush=True)
    return Outcome(step, Status.OK, time.monotonic() - started, shlex.join(args),
                   result={"cell": COST_CELL, "wall_s": walls, "mean_s": mean, "ratio": round(ratio, 3)})


def _bare_command(command: list[str], folder: Path) -> list[str]:
    """ncuflow's own ncu command (`profile --dry-run`) with its outputs sent to FOLDER."""
    folder.mkdir(parents=True, exist_ok=True)
    out = list(command)
    for flag, name in (("--export", "report.ncu-rep"), ("--representation-out", "representation.json")):
        if flag in out:
            out[out.index(flag) + 1] = str(folder / name)
    if "-f" not in out and "--force-overwrite" not in out:
        out.insert(1, "--force-overwrite")  # the second bare run writes over the first's report
    return out


# ----------------------------------------------------------------------------- 5. the sweeps


def sweeps(call: Call, deadline: float) -> Outcome:
    if (blocked := call.ncu_blocked("sweeps")) is not None:
        return blocked
    started, before = time.monotonic(), runs_in_store(call.store)
    result: dict[str, Any] = {}
    worst = Status.OK
    for path in sweep_files():
        cell = read_sweep(path)["cell"]
        if cell in call.left_out:
            result[path.stem] = f"left out: {call.left_out[cell]}"
            continue
        run = rewritten_sweep(path, WORK / "sweeps", first_point=False, extra_metrics=False) if call.extras_refused else path
        done = call.ncuflow(["sweep", str(run), "--store", str(call.store), "--keep-going",
                             "--timeout", call.profile_timeout(deadline), *call.ncu], deadline)
        call.note_refusal(done)
        result[path.stem] = {"exit": done.code, "seconds": round(done.seconds, 1), "points": len(sweep_points(path))}
        if not done.ok:
            result[path.stem]["cause"] = done.cause()
            worst = done.status if worst is Status.OK else worst
        if call.ncu_refused or seconds_until(deadline) <= 0:
            break
    after = runs_in_store(call.store)
    result["runs_added"] = {cell: after[cell] - before[cell] for cell in CELLS}
    if seconds_until(deadline) <= 1:
        worst = Status.TIMED_OUT  # the step's deadline cut it: what is stored is kept, the rest named
    causes = [f"{name}: {r['cause'].splitlines()[-1][:300]}" for name, r in result.items()
              if isinstance(r, dict) and r.get("cause")]
    return Outcome("sweeps", worst, time.monotonic() - started, "ncuflow sweep analysis/sweeps/flashinfer/*.toml",
                   " | ".join(causes), result)


# ----------------------------------------------------------------------------- 6. headline


def headline(call: Call, deadline: float) -> Outcome:
    step = "headline re-profiles"
    if (blocked := call.ncu_blocked(step)) is not None:
        return blocked
    specs = headline_specs(frozenset(call.left_out))
    fit = int(seconds_until(deadline) // max(1.0, call.seconds_per_profile * max(1, len(specs))))
    replicas = min(2, fit)
    markdown = call.store.parent / f"stability-{call.store.name}-flashinfer.md"
    args = ["stability", *specs, "--replicas", str(max(1, replicas)), "--clock-control", "none",
            "--store", str(call.store), "--markdown", str(markdown), "--timeout", call.profile_timeout(deadline),
            *call.ncu]
    if not specs:
        return Outcome(step, Status.SKIPPED, 0.0, cause="no cell left to re-profile")
    if replicas < 1:
        return Outcome(step, Status.SKIPPED, 0.0, shlex.join(args),
                       f"needs ~{call.seconds_per_profile * len(specs):.0f} s for one replica of {len(specs)} "
                       f"specs, {seconds_until(deadline):.0f} s left")
    done = call.ncuflow(args, deadline)
    call.note_refusal(done)
    return _outcome(step, done, {"specs": len(specs), "replicas": replicas})


# ----------------------------------------------------------------------------- 7. the why tier


WHY_PROFILES = 2.5  # a profile --why: tier 1 (tier 2 where undecided) and the why tier, in profiles


def why_tier(call: Call, deadline: float) -> Outcome:
    """`ncuflow profile SPEC --why` of the headline specs, one per cell first, as time allows: the
    sections whose rules explain each verdict (tier 3, under STORE/.tier3)."""
    step = "why tier"
    if (blocked := call.ncu_blocked(step)) is not None:
        return blocked
    specs = why_specs(frozenset(call.left_out))
    if not specs:
        return Outcome(step, Status.SKIPPED, 0.0, cause="no cell left to explain")
    started, need = time.monotonic(), call.seconds_per_profile * WHY_PROFILES
    done_specs: dict[str, Any] = {}
    causes: list[str] = []
    for spec in specs:
        if seconds_until(deadline) < need:
            break
        done = call.ncuflow(["profile", spec, "--why", "--store", str(call.store), "--clock-control", "none",
                             "--timeout", call.profile_timeout(deadline), *call.ncu], deadline)
        call.note_refusal(done)
        done_specs[spec] = {"exit": done.code, "seconds": round(done.seconds, 1)}
        if not done.ok:
            causes.append(f"{spec}: {done.cause().strip().splitlines()[-1][:300] if done.cause().strip() else done.code}")
        if call.ncu_refused:
            break
    result = {"specs": done_specs, "left": [s for s in specs if s not in done_specs], "tier3_runs": runs_in_store(
        call.store / TIER3_FOLDER)}
    if not done_specs:
        return Outcome(step, Status.SKIPPED, 0.0, "ncuflow profile SPEC --why",
                       f"needs ~{need:.0f} s for one spec, {seconds_until(deadline):.0f} s left", result)
    status = Status.OK if not causes else Status.FAILED
    return Outcome(step, status, time.monotonic() - started, "ncuflow profile SPEC --why", " | ".join(causes), result)


# ----------------------------------------------------------------------------- 8. the GPU tests


def gpu_tests(call: Call, deadline: float) -> Outcome:
    done = call.python(["-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", *GPU_TESTS], deadline)
    return _outcome("pytest -m gpu", done)


# ----------------------------------------------------------------------------- the call


@dataclass(frozen=True)
class Step:
    """One step of the call: at most SHARE of the budget; WHAT it answers."""

    name: str
    share: float
    run: Callable[[Call, float], Outcome]
    what: str


STEPS: tuple[Step, ...] = (
    Step("bundle probe", 0.15, probe_bundle, "activate the bundle, doctor, load each module, each path once on a tiny shape"),
    Step("plan() timings", 0.12, time_plan, f"plan() at index_len {', '.join(map(str, PLAN_INDEX_LENS))} (host clock, no ncu)"),
    Step("one point of each cell", 0.25, first_points, "each cell's first sweep point under ncu (its sweep's settings)"),
    Step("profile vs bare ncu", 0.2, profile_cost, f"{COST_CELL} through ncuflow profile and bare ncu, twice each"),
    Step("sweeps", 1.0, sweeps, "every sweep file, per-point timeouts; a cell whose first point failed is left out"),
    Step("headline re-profiles", 1.0, headline, "each sweep's corners re-profiled (stability), replicas as time allows"),
    Step("why tier", 0.15, why_tier, "profile --why of the headline specs, one per cell first, as time allows (tier 3)"),
    Step("pytest -m gpu", 1.0, gpu_tests, " ".join(GPU_TESTS)),
)


def cap_seconds(step: Step, budget_s: float) -> float:
    return step.share * budget_s


def bundles_of(store: Path) -> list[Bundle]:
    """The tarballs under OUT: one per cell (each under the 16 MiB a file may be), the rest together."""
    base = store.relative_to(REPO) if store.is_relative_to(REPO) else store
    rest = (f"{base}/{PLAN_CELL}", f"{base}/.tier2", f"{base}/{TIER3_FOLDER}",
            f"{base.parent}/stability-{store.name}-flashinfer.md",
            f"{base.parent}/flashinfer-call-{store.name}.json")
    return [*(Bundle(f"{store.name}-{cell}.tgz", (f"{base}/{cell}",)) for cell in CELLS),
            Bundle(f"{store.name}-flashinfer-rest.tgz", rest)]


def run_steps(store: Path, bundle: Path, budget_s: float, ncu: list[str], out: Path | None) -> int:
    budget = Budget(budget_s)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    facts = {"store": str(store), "python": sys.version.split()[0], "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    record = CallRecord(REPO, out, store.parent / f"flashinfer-call-{store.name}.json", facts, bundles_of(store))
    call = Call(store, bundle, ncu, budget, record, env)
    stop_on_sigterm()
    for step in STEPS:
        deadline = budget.deadline(cap_seconds(step, budget_s))
        if seconds_until(deadline) < 3:
            record.add(Outcome(step.name, Status.SKIPPED, 0.0, cause=f"no time left ({budget.left():.0f} s of the "
                                                                      f"budget, {budget.close_s:.0f} s kept to close)"), budget)
            continue
        print(f"\n==== {step.name} (until {seconds_until(deadline):.0f} s from now) ====", flush=True)
        try:
            outcome = step.run(call, deadline)
        except Stopped as stop:  # the device command's timeout: keep what finished, say where it stopped
            record.add(Outcome(step.name, Status.TIMED_OUT, 0.0, cause=str(stop)), budget)
            return 143
        except Exception as error:  # a bug in one step must not lose the others
            outcome = Outcome(step.name, Status.FAILED, 0.0, cause=f"{type(error).__name__}: {error}")
        record.add(outcome, budget)
    record.facts.update({"runs_in_store": runs_in_store(store), "left_out": call.left_out,
                         "ncu_refused": call.ncu_refused, "extra_metrics_refused": call.extras_refused, "seconds_per_profile": round(call.seconds_per_profile, 1)})
    record.write(budget)
    print("\n==== summary ====\n" + json.dumps(record.summary(budget), indent=2), flush=True)
    return 0 if all(o.status in (Status.OK, Status.SKIPPED) for o in record.outcomes) else 1
