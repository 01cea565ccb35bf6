"""The Nsight Compute CLI: find it, ask its version, build command lines, read its log.

Nothing here runs a profile (that is ``orchestrate``), and nothing here imports
``ncu_report`` or polars. Command lines are lists of arguments, never shell strings.
Every way ncu is known to fail becomes a typed ``NcuflowError`` with one paragraph:
what happened, why, and the fix.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from glob import glob
from pathlib import Path

from ncuflow.errors import UsageError
from ncuflow.host import run_bounded
from ncuflow.profile.ncu_errors import NcuNotFound
from ncuflow.read.metrics import decisive_metric_names
from ncuflow.store.collection import (
    CACHE_CONTROLS,
    CLOCK_CONTROLS,
    DECISIVE,
    DECISIVE_TIER2,
    NAMED_SETS,
    REPLAY_MODES,
    NcuOptions,
)

__all__ = [
    "ATTACH_VERSION", "CACHE_CONTROLS", "CLOCK_CONTROLS", "DECISIVE", "DECISIVE_TIER2", "NAMED_SETS", "REPLAY_MODES",
    "NcuOptions", "attach_mode", "build_command", "collection_args", "describe_filters", "find_ncu", "ncu_candidates",
    "ncu_version", "nvtx_include_for_range", "require_attach", "resolve_executable",
]

FIXED_NCU_LOCATIONS: tuple[str, ...] = ("/usr/local/cuda/bin/ncu",)
OPT_NCU_GLOB = "/opt/nvidia/nsight-compute/*/ncu"


# ----------------------------------------------------------------------------- locating ncu


def _version_key(path: str) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", Path(path).parent.name)
    return tuple(int(n) for n in numbers)


def resolve_executable(value: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> str | None:
    """What a named program means: a value with a ``/`` is a path (relative to the current
    folder, made absolute); a bare name is looked up on PATH (None when it is not there)."""
    text = os.fspath(value)
    if "/" in text or (os.sep != "/" and os.sep in text):
        return str(Path(text).expanduser().absolute())
    env = os.environ if environ is None else environ
    return shutil.which(text, path=env.get("PATH"))


def ncu_candidates(explicit: str | os.PathLike[str] | None = None,
                   env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(path, how found) in search order: option, $NCU, PATH, /opt/nvidia/nsight-compute, CUDA.

    ``--ncu`` and ``NCU`` mean what they say: ``./ncu`` is the file ``ncu`` in the current
    folder (never an ``ncu`` found on PATH), a bare name is looked up on PATH. A named
    one that cannot be resolved stays in the list as given, so that ``find_ncu`` can say so.
    """
    environ = os.environ if env is None else env
    found: list[tuple[str, str]] = []
    if explicit:
        found.append((resolve_executable(explicit, environ) or os.fspath(explicit), "--ncu"))
    if environ.get("NCU"):
        found.append((resolve_executable(environ["NCU"], environ) or environ["NCU"], "NCU"))
    on_path = shutil.which("ncu", path=environ.get("PATH"))
    if on_path:
        found.append((on_path, "PATH"))
    for opt in sorted(glob(OPT_NCU_GLOB), key=_version_key, reverse=True):
        found.append((opt, "/opt/nvidia/nsight-compute"))
    for fixed in FIXED_NCU_LOCATIONS:
        found.append((fixed, "/usr/local/cuda"))
    return found


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


DOCTOR_HINT = "; `ncuflow doctor` checks the setup"  # left out where doctor itself says it


def _named_ncu_problem(path: str, how: str, given: str, hint: str) -> NcuNotFound:
    label = f"--ncu {given}" if how == "--ncu" else f"NCU={given}"
    if "/" not in given and not os.path.isabs(path):
        detail, why = ("no program of that name is on PATH",
                       "A bare name is looked up on PATH; a value with a '/' is a path relative to the current folder.")
    elif not os.path.exists(path):
        detail, why = f"{path} does not exist", "A value with a '/' is a path, relative to the current folder."
    elif os.path.isdir(path):
        detail, why = f"{path} is a folder", "ncuflow needs the ncu executable itself."
    else:
        detail, why = f"{path} lacks execute permission", "ncuflow runs exactly the ncu you name when you name one."
    what = f"The ncu named by {label} is not an executable file: {detail}."
    return NcuNotFound(what, why,
                       "Fix the path (e.g. /opt/nvidia/nsight-compute/2025.3.1/ncu, or ./ncu for one in this "
                       f"folder), or leave it out to search{hint}.")


def find_ncu(explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
             hint: str = DOCTOR_HINT) -> tuple[Path, str]:
    """The ncu to use and how it was found. An explicit choice that is not executable is an error,
    whose fix ends with ``hint`` (doctor, which is what it names, gives "")."""
    environ = os.environ if env is None else env
    for path, how in ncu_candidates(explicit, env):
        if _is_executable(path):
            return Path(path), how
        if how in ("--ncu", "NCU"):
            given = os.fspath(explicit) if how == "--ncu" and explicit else str(environ.get("NCU", path))
            raise _named_ncu_problem(path, how, given, hint)
    raise NcuNotFound(
        "Nsight Compute's ncu was not found.",
        "ncuflow looked at --ncu, the NCU environment variable, PATH, "
        f"{OPT_NCU_GLOB} and {', '.join(FIXED_NCU_LOCATIONS)}.",
        "Install Nsight Compute (it comes with the CUDA toolkit, or as the nsight-compute "
        f"package), or point to it with --ncu PATH or NCU=PATH{hint}.",
    )


_VERSION_LINE = re.compile(r"Version\s+(\d+\.\d+\.\d+(?:\.\d+)?)")


def parse_version_output(text: str) -> str | None:
    """``ncu --version`` output -> "2025.3.1.0" (None when it holds no version line)."""
    match = _VERSION_LINE.search(text)
    return match.group(1) if match else None


def ncu_version(ncu: Path, timeout: float = 30.0) -> str | None:
    """The version ncu reports, or None when it cannot say within ``timeout`` seconds."""
    try:
        done = run_bounded([str(ncu), "--version"], timeout)
    except OSError:
        return None
    return None if done is None else parse_version_output(done.stdout + "\n" + done.stderr)


# ----------------------------------------------------------------------------- options


def nvtx_include_for_range(range_name: str) -> str:
    """The ``--nvtx-include`` expression for a push/pop range of the default domain.

    ncu's syntax: ``A/`` is the push/pop range A; ``A/B/`` is B pushed inside A;
    ``D@A`` names domain D. So a name holding ``/`` is read as a nesting path: the
    expression for ``ncuflow/flat_decode`` matches kernels in a range ``flat_decode``
    pushed inside a range ``ncuflow``. A cell must therefore either push those two
    nested ranges, or use a name without ``/`` (e.g. ``ncuflow:flat_decode``).
    """
    name = range_name.strip()
    if not name:
        raise UsageError("The NVTX range name is empty.", "", "Name the range the program pushes.")
    if "@" in name:
        raise UsageError(
            f"The NVTX range name {name!r} contains '@'.",
            "ncu reads '@' as the separator between an NVTX domain and a range.",
            "Pass the full expression with --nvtx (e.g. 'domain@range/') or rename the range.",
        )
    return name if name.endswith("/") else name + "/"


def collection_args(options: NcuOptions) -> list[str]:
    """The arguments that say what ncu collects."""
    args: list[str] = []
    metrics: list[str] = []
    if options.metric_set == DECISIVE:
        metrics += list(decisive_metric_names())
    elif options.metric_set == DECISIVE_TIER2:
        metrics += list(decisive_metric_names(2))
    elif options.metric_set != "none":
        args += ["--set", options.metric_set]
    for section in options.sections:
        args += ["--section", section]
    for metric in options.extra_metrics:
        if metric not in metrics:
            metrics.append(metric)
    metrics = [m for m in metrics if m not in options.exclude_metrics]
    if metrics:
        args += ["--metrics", ",".join(metrics)]
    return args


def build_command(
    ncu: Path | str,
    options: NcuOptions,
    report_path: Path | str,
    app_argv: Sequence[str],
    mode: Sequence[str] = (),
) -> list[str]:
    """The full ncu command line as a list of arguments (never a shell string). ``mode``: ncu's
    ``--mode`` arguments where it attaches to a running process instead (``attach_mode``), with
    no program to run."""
    if not app_argv and not mode:
        raise UsageError("There is no program to profile.", "ncu needs a command to run.",
                         "Give a cell spec, or a command after `--`.")
    command: list[str] = [str(ncu), *mode]
    command += ["--target-processes", options.target_processes]
    command += ["--replay-mode", options.replay_mode]
    command += ["--cache-control", options.cache_control]
    command += ["--clock-control", options.clock_control]
    if options.nvtx_include:
        command.append("--nvtx")
        for expression in options.nvtx_include:
            command += ["--nvtx-include", expression]
    if options.kernel_regex:
        command += ["--kernel-name", f"regex:{options.kernel_regex}"]
    if options.launch_skip is not None:
        command += ["--launch-skip", str(options.launch_skip)]
    if options.launch_count is not None:
        command += ["--launch-count", str(options.launch_count)]
    if options.graph_profiling is not None:
        command += ["--graph-profiling", options.graph_profiling]
    command += collection_args(options)
    if options.import_source:
        command += ["--import-source", "yes"]
    command += list(options.extra_args)
    command += ["--export", str(report_path), "--force-overwrite"]
    command += [str(a) for a in app_argv]
    return command


# ncu attaches to a process by its id (--mode attach --process-id) from this version on.
ATTACH_VERSION: tuple[int, ...] = (2026, 2, 1)


def attach_mode(pid: int) -> list[str]:
    """ncu's arguments that attach to the running process ``pid`` (instead of launching a program)."""
    return ["--mode", "attach", "--process-id", str(pid)]


def version_tuple(version: str) -> tuple[int, ...]:
    """``"2026.2.1.0"`` -> (2026, 2, 1, 0)."""
    return tuple(int(part) for part in re.findall(r"\d+", version))


def require_attach(ncu: Path, version: str | None) -> None:
    """Refuse an ncu that cannot attach to a process id (older than ``ATTACH_VERSION``, or of no version)."""
    needed = ".".join(map(str, ATTACH_VERSION))
    if version is not None and version_tuple(version) >= ATTACH_VERSION:
        return
    said = f"is version {version}" if version else "gave no version (`ncu --version`)"
    raise UsageError(
        f"The ncu at {ncu} {said}, and --attach needs Nsight Compute {needed} or newer.",
        f"ncu attaches to a running process by its id (--mode attach --process-id) from {needed} on; "
        "older versions attach only to a program that ncu itself started with --mode launch.",
        f"Install Nsight Compute {needed} or newer and point to it with --ncu PATH, or start the program "
        "under ncu: `ncuflow profile -- PROGRAM ARGS`.",
    )


def describe_filters(options: NcuOptions) -> str:
    parts = []
    if options.nvtx_include:
        parts.append("NVTX " + " or ".join(repr(e) for e in options.nvtx_include))
    if options.kernel_regex:
        parts.append(f"kernel regex {options.kernel_regex!r}")
    if options.launch_skip:
        parts.append(f"skipping {options.launch_skip} launches")
    return ", ".join(parts) if parts else "no filter"
