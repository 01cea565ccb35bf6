#!/usr/bin/env python3
"""`make gpu-rehearsal`: the device command of docs/gpu-host.md, run here as the GPU host would run it.

    python3 analysis/gpu_rehearsal.py              # all four modes (about 10 minutes)
    python3 analysis/gpu_rehearsal.py --mode slow  # one mode
    python3 analysis/gpu_rehearsal.py --dry-run-only   # the cheap part: the dry run on Python 3.12

The host: Python 3.12, torch 2.11 and triton 3.6, the host's other packages, **no ncuflow
installed, no polars, no Ray**, no network. Here: a virtual environment of Python 3.12 with
those versions (``.gpu-rehearsal/venv``, made once; torch 2.11 is PyPI's build, the host's
own, which imports without a GPU), a copy of the tracked tree plus ``.gpu-bundle`` (what the
device tool sends), ``tests/fake_ncu`` as ``ncu`` on PATH, an empty ``$OUT``, and the exact
command between the ``device-command`` markers of docs/gpu-host.md under the tool's own limit. Modes:

- ``normal``: ncu answers at once;
- ``slow``: each profile takes ~15 s and one point never ends: the budget runs out, the call
  must end by itself before 480 s with plan(), one run of each cell, the cost pair and a summary;
- ``refused``: ncu is refused the counters (ERR_NVGPUCTRPERM): the ncu-free parts still come
  back, the refusal named;
- ``old-ncu``: ncu does not know one of the sweeps' extra metrics: the study goes on with the
  decisive collection alone, the refused metric named.

Each mode then checks what came back under ``$OUT`` against the device tool's limits (at most
8 files, 16 MiB each, two folders deep, plain names) and against what the call must return.
Without a GPU the bundle's modules and plan() fail here with their own messages (no driver):
the rehearsal checks that those messages come back, verbatim, not that they succeed.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
HOME = REPO / ".gpu-rehearsal"
VENV = HOME / "venv"
SCRATCH = HOME / "runs"
# The GPU host's versions (docs: the device tool's KINDS.md) of what ncuflow and FlashInfer import.
HOST_PACKAGES = ("torch==2.11.0", "triton==3.6.0", "click", "rich", "numpy", "pandas", "pyarrow", "pytest",
                 "protobuf", "packaging", "requests", "tqdm", "nvidia-ml-py", "ninja", "einops", "tabulate",
                 "matplotlib", "regex")
ABSENT_ON_HOST = ("polars", "ray", "ncuflow", "zstandard", "re2")
TOOL_LIMIT_S = 600  # the device tool's longest command
CALL_TIMEOUT_S = 540  # the timeout_s docs/gpu-host.md gives the call
DEVICE_PAGE = "docs/gpu-host.md"  # the page that holds the device command, between its markers
MUST_END_S = 480
FAKE_REPORT = "profiles/reference/h200/paged_decode"
OUT_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


class RehearsalError(Exception):
    """One paragraph: what failed, why, what to do."""


def say(text: str) -> None:
    print(f"gpu-rehearsal: {text}", flush=True)


# ----------------------------------------------------------------------------- the host-like environment


def find_python312() -> Path:
    """A working Python 3.12: $NCUFLOW_PYTHON312, python3.12 on PATH, or pyenv's."""
    candidates = [os.environ.get("NCUFLOW_PYTHON312", ""), shutil.which("python3.12") or ""]
    candidates += sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.12*/bin/python3.12"))
    candidates += ["/usr/bin/python3.12", "/usr/local/bin/python3.12"]
    for candidate in filter(None, candidates):
        try:
            done = subprocess.run([candidate, "-c", "import sys, venv; print(sys.version_info[:2])"],
                                  capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.strip() == "(3, 12)":
            return Path(candidate)
    raise RehearsalError("No Python 3.12 here: the GPU host runs 3.12, and the rehearsal must too. Install it "
                         "(`pyenv install 3.12`, `apt-get install python3.12-venv` or `uv python install 3.12`) "
                         "or point NCUFLOW_PYTHON312 at one.")


def ensure_host_env() -> Path:
    """.gpu-rehearsal/venv: Python 3.12 with the host's packages and versions; made once."""
    stamp = VENV / "ncuflow-host-packages.json"
    python = VENV / "bin" / "python3"
    if stamp.is_file() and python.exists() and json.loads(stamp.read_text()) == list(HOST_PACKAGES):
        return python
    say(f"making the host-like environment {VENV.relative_to(REPO)} (Python 3.12, {', '.join(HOST_PACKAGES[:2])}; "
        "about 3 GB, once)")
    shutil.rmtree(VENV, ignore_errors=True)
    _run([str(find_python312()), "-m", "venv", str(VENV)], "python3.12 -m venv")
    _run([str(python), "-m", "pip", "install", "-q", *HOST_PACKAGES], "pip install the host's packages")
    stamp.write_text(json.dumps(list(HOST_PACKAGES)))
    return python


def check_host_env(python: Path) -> None:
    code = ("import importlib.util, json; print(json.dumps({n: importlib.util.find_spec(n) is not None "
            f"for n in {ABSENT_ON_HOST!r}}}))")
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd="/", timeout=60, check=False)
    present = [name for name, found in json.loads(done.stdout).items() if found]
    if present:
        raise RehearsalError(f"{VENV} holds {', '.join(present)}, which the GPU host lacks: the rehearsal would "
                             f"pass where the host fails. Remove {VENV} and run again.")


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise RehearsalError(f"{what} failed (exit {done.returncode}): {tail}")


# ----------------------------------------------------------------------------- what travels


def copy_tree(target: Path, *, bundle: bool = True) -> None:
    """The tracked and untracked-not-ignored files, plus .gpu-bundle: what the device tool sends."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    shutil.rmtree(target, ignore_errors=True)
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    if not bundle:
        return
    if not (REPO / ".gpu-bundle" / "manifest.json").is_file():
        raise RehearsalError("No GPU bundle (.gpu-bundle/manifest.json): the device call carries it. "
                             "Run `make gpu-bundle` first.")
    shutil.copytree(REPO / ".gpu-bundle", target / ".gpu-bundle")


def device_command() -> str:
    """The one command between the device-command markers of docs/gpu-host.md (``DEVICE_PAGE``)."""
    text = (REPO / DEVICE_PAGE).read_text()
    found = re.search(r"<!-- device-command -->\n(.*?)<!-- /device-command -->", text, re.S)
    if not found:
        raise RehearsalError(f"{DEVICE_PAGE} has no <!-- device-command --> block: the rehearsal runs exactly that command.")
    lines = [line.strip() for line in found.group(1).splitlines() if line.strip() and not line.strip().startswith("```")]
    if len(lines) != 1 or len(lines[0]) > 2000:
        raise RehearsalError(f"The device-command block of {DEVICE_PAGE} must hold one command of at most 2000 characters.")
    return lines[0]


# ----------------------------------------------------------------------------- one mode


@dataclass(frozen=True)
class Mode:
    name: str
    fake_ncu: dict[str, str]
    expect: Callable[[dict[str, Any], dict[str, list[str]]], list[str]]
    what: str


@dataclass(frozen=True)
class Returned:
    code: int
    seconds: float
    out: Path


def run_mode(mode: Mode, python: Path, command: str) -> Returned:
    root = SCRATCH / mode.name
    tree, out = root / "repo", root / "out"
    shutil.rmtree(root, ignore_errors=True)
    copy_tree(tree)
    out.mkdir(parents=True)
    report = sorted((tree / FAKE_REPORT).rglob("report.ncu-rep"))[0]
    env = {"PATH": f"{python.parent}:{tree / 'tests' / 'fake_ncu'}:/usr/local/bin:/usr/bin:/bin",
           "HOME": str(root), "LANG": "C.UTF-8", "OUT": str(out), "TMPDIR": str(root),
           "FAKE_NCU_REPORT": str(report), **mode.fake_ncu}
    console = root / "console.log"
    say(f"{mode.name}: {mode.what}; running the device command of {DEVICE_PAGE} in {tree}")
    started = time.monotonic()
    with console.open("wb") as sink:
        process = subprocess.Popen(["bash", "-c", command], cwd=tree, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            code = process.wait(timeout=TOOL_LIMIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            code = 137
    return Returned(code, time.monotonic() - started, out)


def out_problems(out: Path) -> list[str]:
    """What the device tool would refuse to bring back."""
    # the device tool's limit: one fact, the call's (main puts analysis/ on the path)
    from gpu_call import MAX_OUT_FILE_BYTES

    files = [p for p in out.rglob("*") if p.is_file() or p.is_symlink()]
    problems = [f"{len(files)} files under $OUT (at most 8 come back)"] if len(files) > 8 else []
    for path in files:
        relative = path.relative_to(out)
        if len(relative.parts) > 3:
            problems.append(f"{relative}: more than two folders down")
        if not all(OUT_NAME.match(part) for part in relative.parts):
            problems.append(f"{relative}: a name with characters other than letters, digits, '.', '_', '-'")
        if path.stat().st_size > MAX_OUT_FILE_BYTES:
            problems.append(f"{relative}: {path.stat().st_size >> 20} MiB (at most {MAX_OUT_FILE_BYTES >> 20} MiB a file)")
    return problems


def runs_by_cell(out: Path) -> dict[str, list[str]]:
    """Report files in the tarballs, by cell folder."""
    found: dict[str, list[str]] = {}
    for archive in out.glob("*.tgz"):
        with tarfile.open(archive) as tar:
            for name in tar.getnames():
                parts = name.split("/")
                if parts[-1] == "report.ncu-rep":
                    cell = parts[-4]
                    found.setdefault(cell, []).append(name)
    return found


def judge(mode: Mode, returned: Returned) -> list[str]:
    problems = out_problems(returned.out)
    if returned.code in (124, 137):
        problems.append(f"the command was killed (exit {returned.code}) instead of ending by itself")
    if returned.seconds >= MUST_END_S:
        problems.append(f"took {returned.seconds:.0f} s (must end before {MUST_END_S} s)")
    summaries = sorted(returned.out.glob("flashinfer-call-*.json"))
    logs = [p for p in returned.out.glob("*.log") if p.stat().st_size > 0]
    if not logs:
        problems.append("no log under $OUT")
    if not summaries:
        return [*problems, "no summary (flashinfer-call-*.json) under $OUT"]
    summary = json.loads(summaries[0].read_text())
    return problems + mode.expect(summary, runs_by_cell(returned.out))


# ----------------------------------------------------------------------------- what each mode must return


def _steps(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {step["step"]: step for step in summary["steps"]}


def _common(summary: dict[str, Any]) -> list[str]:
    from study_steps import STEPS

    steps, problems = _steps(summary), []
    if [s["step"] for s in summary["steps"]] != [s.name for s in STEPS]:
        problems.append(f"steps {[s['step'] for s in summary['steps']]} are not the {len(STEPS)} planned, in order")
    probe = steps.get("bundle probe", {})
    if probe.get("status") == "skipped" or "modules" not in probe.get("result", {}):
        problems.append("the bundle probe did not run or recorded no module load")
    elif probe.get("status") == "failed" and "libcuda.so.1" not in probe.get("cause", "") + json.dumps(probe["result"]):
        problems.append("the bundle probe failed without FlashInfer's own reason (libcuda.so.1 here)")
    plan = steps.get("plan() timings", {})
    if plan.get("status") == "skipped" or not (plan.get("cause") or any(plan.get("result", {}).get(
            "median_us_by_index_len", {}).values())):
        problems.append("plan() did not run, or came back with neither timings nor a cause")
    return problems


def _each_cell_has_a_run(runs: dict[str, list[str]]) -> list[str]:
    from flashinfer_points import CELLS

    return [f"no run of {cell} came back" for cell in CELLS if not runs.get(cell)]


def expect_normal(summary: dict[str, Any], runs: dict[str, list[str]]) -> list[str]:
    from ncuflow.store.tiers import TIER3_FOLDER

    steps = _steps(summary)
    problems = _common(summary) + _each_cell_has_a_run(runs)
    for name in ("one point of each cell", "profile vs bare ncu", "sweeps", "why tier"):
        if steps.get(name, {}).get("status") != "ok":
            problems.append(f"{name}: {steps.get(name, {}).get('status')} ({steps.get(name, {}).get('cause', '')[:200]})")
    if not steps.get("profile vs bare ncu", {}).get("result", {}).get("ratio"):
        problems.append("no cost ratio")
    if not any(f"/{TIER3_FOLDER}/" in name for names in runs.values() for name in names):
        problems.append("no why-tier run (tier 3) came back")
    return problems


def expect_slow(summary: dict[str, Any], runs: dict[str, list[str]]) -> list[str]:
    steps = _steps(summary)
    problems = _common(summary) + _each_cell_has_a_run(runs)
    if steps.get("profile vs bare ncu", {}).get("status") != "ok":
        problems.append(f"the cost pair did not come back: {steps.get('profile vs bare ncu')}")
    cut = [s for s in summary["steps"] if s["status"] in ("timed out", "skipped")]
    if not cut:
        problems.append("nothing was cut: the slow mode did not reach the budget")
    return problems


def expect_refused(summary: dict[str, Any], runs: dict[str, list[str]]) -> list[str]:
    steps = _steps(summary)
    problems = _common(summary)
    if "ERR_NVGPUCTRPERM" not in summary.get("ncu_refused", ""):
        problems.append("the counter refusal is not named in the summary (ncu_refused)")
    for name in ("sweeps", "headline re-profiles", "why tier", "profile vs bare ncu"):
        step = steps.get(name, {})
        if step.get("status") != "skipped" or "ERR_NVGPUCTRPERM" not in step.get("cause", ""):
            problems.append(f"{name} was not skipped naming the refusal: {step.get('status')}")
    return problems


def expect_unknown_metric(summary: dict[str, Any], runs: dict[str, list[str]]) -> list[str]:
    problems = expect_normal(summary, runs)
    if "breakdown:lts__throughput" not in summary.get("extra_metrics_refused", ""):
        problems.append("the refused extra metric is not named in the summary (extra_metrics_refused)")
    return problems


MODES = (
    Mode("normal", {"FAKE_NCU_MODE": "ok"}, expect_normal, "ncu answers at once"),
    Mode("old-ncu", {"FAKE_NCU_MODE": "ok",
                     "FAKE_NCU_BAD_METRICS": "breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed"},
         expect_unknown_metric, "this ncu does not know the sweeps' breakdown metric: the decisive collection alone"),
    Mode("slow", {"FAKE_NCU_MODE": "ok", "FAKE_NCU_SLEEP": "12", "FAKE_NCU_HANG_ON": "page=32"}, expect_slow,
         "each profile ~15 s, every page=32 point hangs"),
    Mode("refused", {"FAKE_NCU_MODE": "perm"}, expect_refused, "ncu is refused the counters (ERR_NVGPUCTRPERM)"),
)


def dry_run(python: Path) -> subprocess.CompletedProcess[str]:
    """The cheap part: the dry run in a copy of the tree on PYTHON, nothing installed, no bundle."""
    tree = SCRATCH / "dry-run" / "repo"
    copy_tree(tree, bundle=False)
    return subprocess.run([str(python), "analysis/run_study_on_gpu.py", "--part", "flashinfer", "--dry-run"], cwd=tree,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tree.parent), "LANG": "C.UTF-8"},
                          capture_output=True, text=True, timeout=300, check=False)


def dry_run_problems(done: subprocess.CompletedProcess[str]) -> list[str]:
    from study_steps import STEPS

    text = done.stdout + done.stderr
    if done.returncode != 0 or "Traceback" in text:
        return [f"the dry run failed (exit {done.returncode}): {text[-2000:]}"]
    return [f"the dry run does not list step {s.name!r}" for s in STEPS if f". {s.name}: " not in done.stdout]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", action="append", choices=[m.name for m in MODES], help="run only this mode (repeatable)")
    parser.add_argument("--dry-run-only", action="store_true", help="only the dry run on a bare Python 3.12")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "analysis"))
    sys.path.insert(0, str(REPO))
    try:
        if args.dry_run_only:
            problems = dry_run_problems(dry_run(find_python312()))
            say("dry run on Python 3.12: " + ("passed" if not problems else "FAILED: " + " | ".join(problems)))
            return 1 if problems else 0
        python = ensure_host_env()
        check_host_env(python)
        command = device_command()
        failed = 0
        for mode in (m for m in MODES if not args.mode or m.name in args.mode):
            returned = run_mode(mode, python, command)
            problems = judge(mode, returned)
            listing = ", ".join(f"{p.name} ({p.stat().st_size >> 10} KiB)" for p in sorted(returned.out.iterdir()))
            say(f"{mode.name}: exit {returned.code} after {returned.seconds:.0f} s; $OUT: {listing}")
            say(f"{mode.name}: " + ("PASSED" if not problems else "FAILED:\n  - " + "\n  - ".join(problems)))
            failed += bool(problems)
        return 1 if failed else 0
    except RehearsalError as error:
        print(f"gpu-rehearsal: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
