"""One device call, bounded and kept: a budget split into per-step deadlines, every command
stopped at its deadline, and each step's results written under the call's output folder as
the step lands, so that a kill at any moment returns what finished.

Standard library only: it runs on the GPU host's bare Python (no ncuflow install, no polars).

- ``Budget``: one overall budget; a step's deadline is its cap (a share of the budget) or
  what is left after the time kept back for the close, whichever is earlier.
- ``run_until``: a command in its own process group, its output streamed to this process's
  stdout and its last lines kept; at the deadline SIGTERM to the group, SIGKILL after a grace.
- ``CallRecord``: the steps' outcomes as a running summary (JSON) and the store's runs as
  tarballs, both replaced atomically under the output folder after every step.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import enum
import json
import os
import signal
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

KILL_GRACE_S = 5.0
TAIL_LINES = 40
MAX_CAPTURE_BYTES = 4 << 20  # what a command may print to stdout that the caller parses (JSON)
MAX_OUT_FILE_BYTES = 16 << 20  # the device tool brings back files of at most 16 MiB


class Status(enum.Enum):
    OK = "ok"
    FAILED = "failed"
    TIMED_OUT = "timed out"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Finished:
    """How a command ended: its exit code (None when stopped at its deadline)."""

    command: tuple[str, ...]
    code: int | None
    seconds: float
    stdout: str
    tail: str

    @property
    def ok(self) -> bool:
        return self.code == 0

    @property
    def status(self) -> Status:
        if self.code is None:
            return Status.TIMED_OUT
        return Status.OK if self.code == 0 else Status.FAILED

    def cause(self) -> str:
        """The command's own last words, verbatim, or how it was stopped."""
        if self.code is None:
            return f"stopped at its deadline after {self.seconds:.0f} s; its last lines: {self.tail}"
        return self.tail if self.code != 0 else ""


@dataclass(frozen=True)
class Outcome:
    """One step of the call: what ran, how it ended, why, and what it produced."""

    step: str
    status: Status
    seconds: float
    command: str = ""
    cause: str = ""
    result: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        record = asdict(self)
        record["status"] = self.status.value
        record["seconds"] = round(self.seconds, 1)
        return record


@dataclass
class Budget:
    """One overall budget in seconds; ``close_s`` of it is kept for writing the summary."""

    seconds: float
    close_s: float = 10.0
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def used(self) -> float:
        return time.monotonic() - self.started

    def deadline(self, cap_s: float) -> float:
        """A step's deadline (monotonic): its cap, or the budget less the close."""
        allowed = max(0.0, min(cap_s, self.left() - self.close_s))
        return time.monotonic() + allowed


def seconds_until(deadline: float) -> float:
    return deadline - time.monotonic()


def _pump(stream: IO[bytes], echo: bool, tail: collections.deque[str], capture: list[bytes] | None) -> None:
    size = 0
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace")
        if echo:
            print(line, end="" if line.endswith("\n") else "\n", flush=True)
        tail.append(line.rstrip("\n")[:2000])
        if capture is not None and size < MAX_CAPTURE_BYTES:
            capture.append(raw)
            size += len(raw)
    stream.close()


class Stopped(Exception):
    """This process was sent SIGTERM (the device command's ``timeout``): close what is open."""


def stop_on_sigterm() -> None:
    """SIGTERM raises ``Stopped`` in the main thread, so the running command is stopped with its
    group and the summary written, instead of the process vanishing with its commands running on."""
    def handler(signum: int, frame: object) -> None:
        raise Stopped(f"stopped by signal {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, handler)


_PR_SET_PDEATHSIG = 1


def _prctl() -> Any:
    try:  # looked up here, not between fork and exec (no loader work in a child of a threaded parent)
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the deadline and SIGTERM handling still hold
        return None


_PRCTL = _prctl()


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when this process dies, even by SIGKILL (Linux)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the command's process group (ncuflow stops ncu and its children), then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_until(command: Sequence[str], deadline: float, *, cwd: Path, env: dict[str, str] | None = None,
              echo: bool = True, capture_stdout: bool = False) -> Finished:
    """Run COMMAND until it ends or DEADLINE passes; stdout and stderr are echoed as they come."""
    started = time.monotonic()
    shown = " ".join(command)
    if seconds_until(deadline) <= 0:
        return Finished(tuple(command), None, 0.0, "", f"no time left to start `{shown}`")
    try:
        process = subprocess.Popen(list(command), cwd=cwd, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, start_new_session=True, preexec_fn=_die_with_parent)
    except OSError as error:
        return Finished(tuple(command), 127, 0.0, "", f"could not start `{shown}`: {error}")
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    captured: list[bytes] = []
    readers = [threading.Thread(target=_pump, args=(process.stdout, echo, tail, captured if capture_stdout else None),
                                daemon=True),
               threading.Thread(target=_pump, args=(process.stderr, echo, tail, None), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        code: int | None = process.wait(timeout=max(0.0, seconds_until(deadline)))
    except subprocess.TimeoutExpired:
        _stop_group(process)
        code = None
    except BaseException:  # SIGTERM (Stopped) or Ctrl-C: the command goes with this process
        _stop_group(process)
        raise
    for reader in readers:
        reader.join(timeout=KILL_GRACE_S)
    stdout = b"".join(captured).decode("utf-8", "replace")
    return Finished(tuple(command), code, time.monotonic() - started, stdout, "\n".join(tail)[-3000:])


# ----------------------------------------------------------------------------- what comes back


def atomic_write(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    with temporary.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


@dataclass(frozen=True)
class Bundle:
    """A tarball of OUT: the folders (relative to the repository) it holds."""

    name: str
    folders: tuple[str, ...]


def write_tarball(repo: Path, target: Path, folders: Iterable[str]) -> int:
    """FOLDERS (relative to REPO) as a .tgz at TARGET, replaced atomically; returns its size."""
    temporary = target.with_name(f".{target.name}.tmp")
    with tarfile.open(temporary, "w:gz", compresslevel=6) as tar:
        for folder in folders:
            path = repo / folder
            if path.exists():
                tar.add(path, arcname=folder)
    os.replace(temporary, target)
    return target.stat().st_size


class CallRecord:
    """The call's running summary and its runs under OUT, written again after every step."""

    def __init__(self, repo: Path, out: Path | None, summary_path: Path, facts: dict[str, Any],
                 bundles: Sequence[Bundle]) -> None:
        self.repo, self.out, self.summary_path = repo, out, summary_path
        self.facts = dict(facts)
        self.bundles = tuple(bundles)
        self.outcomes: list[Outcome] = []
        self.problems: list[str] = []
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)

    def add(self, outcome: Outcome, budget: Budget) -> Outcome:
        self.outcomes.append(outcome)
        cause = f": {outcome.cause.splitlines()[-1][:300]}" if outcome.cause.strip() else ""
        print(f"\n== {outcome.step}: {outcome.status.value} ({outcome.seconds:.0f} s; "
              f"{budget.used():.0f} s used, {budget.left():.0f} s left){cause}", flush=True)
        self.write(budget)
        return outcome

    def summary(self, budget: Budget) -> dict[str, Any]:
        counts = collections.Counter(o.status.value for o in self.outcomes)
        return {"schema": 1, **self.facts, "budget_s": budget.seconds, "used_s": round(budget.used(), 1),
                "status_counts": dict(counts), "steps": [o.as_json() for o in self.outcomes],
                "problems": list(self.problems)}

    def write(self, budget: Budget) -> None:
        """The summary into the repository (and so into a tarball), the tarballs, the summary under OUT."""
        try:
            self.summary_path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.summary_path, self._summary_bytes(budget))
            if self.out is not None:
                self._write_bundles()
                # made again: the bundles just written may have added a problem (a tarball over the limit)
                atomic_write(self.out / self.summary_path.name, self._summary_bytes(budget))
        except OSError as error:  # a full disk must not end the call: the log still says it
            print(f"gpu-call: could not write the summary or the runs under {self.out}: {error}", flush=True)

    def _summary_bytes(self, budget: Budget) -> bytes:
        return (json.dumps(self.summary(budget), indent=2) + "\n").encode()

    def _write_bundles(self) -> None:
        assert self.out is not None
        for bundle in self.bundles:
            size = write_tarball(self.repo, self.out / bundle.name, bundle.folders)
            if size > MAX_OUT_FILE_BYTES:
                note = (f"{bundle.name} is {size / 2**20:.1f} MiB, over the {MAX_OUT_FILE_BYTES >> 20} MiB a file "
                        "the device tool brings back: split its folders across more bundles")
                if note not in self.problems:
                    self.problems.append(note)
