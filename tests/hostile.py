"""Running a hostile case: the real command line, under a time and a memory limit, its figures kept.

``run_limited`` starts ``python -m ncuflow ...`` (or any command) in its own session with
an address-space limit (``RLIMIT_AS``, 2 GiB by default: a command that reads
``/dev/zero`` into memory stops with a MemoryError instead of taking the machine) and a
wall-clock limit (60 s: a FIFO read that blocks is a hang, and the whole session is
killed). It returns the exit status, what the command printed, its time and its peak
resident memory (``VmHWM``, sampled every 20 ms). ``FIGURES`` counts, over the session, every case tried and
what went wrong; the fault suites add their own counts (runs hidden, links replaced,
mismatched pairs accepted) and ``figures_line`` prints them for docs/reliability.md's
section (``pytest -s``).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FAKE_NCU = Path(__file__).parent / "fake_ncu" / "ncu"
MEMORY_LIMIT = int(os.environ.get("NCUFLOW_HOSTILE_MEMORY", str(2 * 2**30)))
TIME_LIMIT = float(os.environ.get("NCUFLOW_HOSTILE_SECONDS", "60"))

FIGURES: Counter[str] = Counter()


@dataclass(frozen=True)
class Ran:
    argv: tuple[str, ...]
    code: int
    stdout: str
    stderr: str
    seconds: float
    peak_mib: float
    timed_out: bool

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.output

    def paragraph(self) -> bool:
        """Refused with one paragraph: a non-zero exit, ``ncuflow: ...`` on stderr, no traceback."""
        return self.code != 0 and not self.traceback and not self.timed_out and "ncuflow: " in self.stderr


def _high_water_kib(pid: int) -> int:
    """The process's peak resident memory so far (``VmHWM``: of its own program, from its exec on;
    ``wait4``'s ``ru_maxrss`` would count the pytest process it was forked from)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _limits(memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


def run_limited(args: list[str], *, cwd: Path = REPO, env: dict[str, str] | None = None,
                command: list[str] | None = None, stdout_file: Path | None = None,
                timeout: float = TIME_LIMIT, memory: int = MEMORY_LIMIT, case: str = "") -> Ran:
    """``python -m ncuflow *args`` (or ``command``) under the limits; counted in ``FIGURES``."""
    argv = command if command is not None else [sys.executable, "-m", "ncuflow", *args]
    out_path = stdout_file or Path(os.environ.get("TMPDIR", "/tmp")) / f"ncuflow-hostile-{os.getpid()}.out"
    err_path = out_path.with_name(out_path.name + ".err")
    started = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                   start_new_session=True, preexec_fn=lambda: _limits(memory))
    timed_out, status, peak_kib = False, 0, 0
    while True:
        peak_kib = max(peak_kib, _high_water_kib(process.pid))
        pid, status, _ = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - started > timeout:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            _, status, _ = os.wait4(process.pid, 0)
            break
        time.sleep(0.02)
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    seconds = time.monotonic() - started
    with contextlib.suppress(ProcessLookupError):  # workers it left: none may outlive the case
        os.killpg(process.pid, signal.SIGKILL)
    stdout = "" if stdout_file else out_path.read_text(errors="replace")
    stderr = err_path.read_text(errors="replace")
    for path in ([] if stdout_file else [out_path]) + [err_path]:
        path.unlink(missing_ok=True)
    ran = Ran(tuple(argv), process.returncode, stdout, stderr, seconds, peak_kib / 1024, timed_out)
    FIGURES["cases"] += 1
    FIGURES["tracebacks"] += ran.traceback
    FIGURES["hangs"] += timed_out
    FIGURES["memory_errors"] += "MemoryError" in ran.output
    FIGURES["max_seconds_x100"] = max(FIGURES["max_seconds_x100"], int(seconds * 100))
    FIGURES["max_peak_mib"] = max(FIGURES["max_peak_mib"], int(ran.peak_mib))
    if case:
        FIGURES[f"case:{case}"] += 1
    return ran


def make_special_file(path: Path, kind: str) -> bool:
    """Make ``path`` what ``kind`` names of the inputs that are no regular file: a FIFO
    ("fifo"), a link to /dev/zero ("dev_zero") or a folder ("folder"). False, and nothing
    made, for any other kind: the caller's own cases."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        return False
    return True


def fake_ncu_env(report: Path, calls: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NCU_")}
    env.update({"FAKE_NCU_REPORT": str(report), "FAKE_NCU_CALLS": str(calls), **extra})
    return env


def figures_line(title: str, *parts: Counter[str]) -> str:
    """One line of figures (zeros kept: a Counter's ``+`` would drop them, and 0 is the point)."""
    plain: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            if not key.startswith("case:"):
                plain[key] = plain.get(key, 0) + value
    if "max_seconds_x100" in plain:
        plain["max_seconds"] = plain.pop("max_seconds_x100") / 100
    kinds = sum(1 for part in parts for k in part if k.startswith("case:"))
    if kinds:
        plain["kinds_of_case"] = kinds
    return f"\n{title}: {json.dumps(plain, sort_keys=True)}"
