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
from dataclasses import dataclass, field
from glob import glob
from pathlib import Path
from typing import Literal

from ncuflow.errors import UsageError
from ncuflow.host import run_bounded
from ncuflow.profile.ncu_errors import NcuNotFound
from ncuflow.read.metrics import decisive_metric_names

ReplayMode = Literal["kernel", "application", "range", "app-range"]
CacheControl = Literal["all", "none"]
ClockControl = Literal["base", "none"]

REPLAY_MODES: tuple[str, ...] = ("kernel", "application", "range", "app-range")
CACHE_CONTROLS: tuple[str, ...] = ("all", "none")
CLOCK_CONTROLS: tuple[str, ...] = ("base", "none")
# ncu's own section sets (``ncu --list-sets``); "decisive" is ncuflow's metric list.
NAMED_SETS: tuple[str, ...] = ("basic", "detailed", "full", "nvlink", "pmsampling", "roofline")
DECISIVE = "decisive"
DECISIVE_TIER2 = "decisive-tier2"  # the escalation run for launches tier 1 leaves undecided

FIXED_NCU_LOCATIONS: tuple[str, ...] = ("/usr/local/cuda/bin/ncu",)
OPT_NCU_GLOB = "/opt/nvidia/nsight-compute/*/ncu"


# ----------------------------------------------------------------------------- errors


# ----------------------------------------------------------------------------- locating ncu


@dataclass(frozen=True)
class NcuInstall:
    path: Path
    version: str | None  # "2025.3.1.0"
    found_by: str  # "--ncu", "NCU", "PATH", "/opt/nvidia/nsight-compute", "/usr/local/cuda"


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


def _named_ncu_problem(path: str, how: str, given: str) -> NcuNotFound:
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
                       "folder), or leave it out to search; `ncuflow doctor` shows what is found.")


def find_ncu(explicit: str | os.PathLike[str] | None = None,
             env: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """The ncu to use and how it was found. An explicit choice that is not executable is an error."""
    environ = os.environ if env is None else env
    for path, how in ncu_candidates(explicit, env):
        if _is_executable(path):
            return Path(path), how
        if how in ("--ncu", "NCU"):
            given = os.fspath(explicit) if how == "--ncu" and explicit else str(environ.get("NCU", path))
            raise _named_ncu_problem(path, how, given)
    raise NcuNotFound(
        "Nsight Compute's ncu was not found.",
        "ncuflow looked at --ncu, the NCU environment variable, PATH, "
        f"{OPT_NCU_GLOB} and {', '.join(FIXED_NCU_LOCATIONS)}.",
        "Install Nsight Compute (it comes with the CUDA toolkit, or as the nsight-compute "
        "package), or point to it with --ncu PATH or NCU=PATH; `ncuflow doctor` checks the setup.",
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


def locate_ncu(explicit: str | os.PathLike[str] | None = None,
               env: Mapping[str, str] | None = None, timeout: float = 30.0) -> NcuInstall:
    path, how = find_ncu(explicit, env)
    return NcuInstall(path=path, version=ncu_version(path, timeout), found_by=how)


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


@dataclass(frozen=True)
class NcuOptions:
    """What to collect and how. Validated on construction; hashable; no paths in it."""

    replay_mode: str = "kernel"
    cache_control: str = "all"
    clock_control: str = "base"
    metric_set: str = DECISIVE  # "decisive" or one of NAMED_SETS
    sections: tuple[str, ...] = ()  # --section NAME each (with or instead of a set)
    extra_metrics: tuple[str, ...] = ()
    exclude_metrics: tuple[str, ...] = ()  # names this ncu/GPU rejected (dropped, recorded)
    launch_count: int | None = None
    launch_skip: int | None = None
    kernel_regex: str | None = None
    nvtx_include: tuple[str, ...] = ()  # full ncu expressions, e.g. "ncuflow:flat_decode/"
    target_processes: str = "all"
    extra_args: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        _check_types(self)
        _choice("--replay-mode", self.replay_mode, REPLAY_MODES)
        _choice("--cache-control", self.cache_control, CACHE_CONTROLS)
        _choice("--clock-control", self.clock_control, CLOCK_CONTROLS)
        _choice("--target-processes", self.target_processes, ("all", "application-only"))
        if self.metric_set not in (DECISIVE, DECISIVE_TIER2, "none", *NAMED_SETS):
            raise UsageError(
                f"Unknown metric set {self.metric_set!r}.",
                f"ncuflow collects its decisive metric list ({DECISIVE}) or one of ncu's sets: "
                f"{', '.join(NAMED_SETS)}; use 'none' with --section for sections only.",
                "Choose one of those (`ncu --list-sets` shows what each holds).",
            )
        if self.metric_set == "none" and not self.sections and not self.extra_metrics:
            raise UsageError(
                "The metric set 'none' with no --section or --metrics collects nothing.",
                "", "Add --section NAME or choose a set.",
            )
        for name, value in (("--launch-count", self.launch_count), ("--launch-skip", self.launch_skip)):
            if value is not None and value < (1 if name == "--launch-count" else 0):
                raise UsageError(f"{name} {value} is out of range.", "",
                                 f"Give {name} a {'positive' if name == '--launch-count' else 'non-negative'} integer.")
        for text in (*self.sections, *self.extra_metrics, *self.nvtx_include):
            if not text.strip() or "\n" in text:
                raise UsageError(f"The option value {text!r} is empty or spans lines.", "",
                                 "Give one name per option.")

    def metric_set_label(self) -> str:
        """How the collection is described in the manifest."""
        parts = [self.metric_set]
        if self.sections:
            parts.append("sections:" + ",".join(self.sections))
        if self.extra_metrics:
            parts.append("+metrics:" + ",".join(self.extra_metrics))
        if self.exclude_metrics:
            parts.append("-metrics:" + ",".join(self.exclude_metrics))
        return ";".join(parts)


def _check_types(options: NcuOptions) -> None:
    """Every field of its declared type, the kernel regex compiled: nothing odd reaches ncu."""
    for name in ("replay_mode", "cache_control", "clock_control", "metric_set", "target_processes"):
        value = getattr(options, name)
        if not isinstance(value, str):
            raise UsageError(f"The ncu option {name} = {value!r} is not a string.", "",
                             f"Give {name} one word, e.g. {getattr(NcuOptions, name)!r}.")
    for name in ("sections", "extra_metrics", "exclude_metrics", "nvtx_include", "extra_args"):
        value = getattr(options, name)
        if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
            raise UsageError(f"The ncu option {name} = {value!r} is not a list of names.", "",
                             f"Give {name} as strings.")
    for name in ("launch_count", "launch_skip"):
        value = getattr(options, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise UsageError(f"The ncu option {name} = {value!r} is not an integer.", "",
                             f"Give {name} a whole number.")
    regex = options.kernel_regex
    if regex is not None:
        if not isinstance(regex, str) or not regex.strip() or "\n" in regex:
            raise UsageError(f"The kernel regex {regex!r} is not one regular expression.", "",
                             "Give --kernel one pattern, e.g. --kernel 'gemm|matmul'.")
        try:
            re.compile(regex)
        except re.error as error:
            raise UsageError(
                f"The kernel regex {regex!r} does not compile: {error}.",
                "ncu would reject it (or match nothing) after starting the program.",
                "Fix the pattern (escape ( [ { with a backslash to match them literally).",
            ) from None


def _choice(option: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise UsageError(f"{option} {value!r} is not valid.", f"ncu accepts {', '.join(allowed)}.",
                         f"Use one of: {', '.join(allowed)}.")


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
) -> list[str]:
    """The full ncu command line as a list of arguments (never a shell string)."""
    if not app_argv:
        raise UsageError("There is no program to profile.", "ncu needs a command to run.",
                         "Give a cell spec, or a command after `--`.")
    command: list[str] = [str(ncu)]
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
    command += collection_args(options)
    command += list(options.extra_args)
    command += ["--export", str(report_path), "--force-overwrite"]
    command += [str(a) for a in app_argv]
    return command


# ----------------------------------------------------------------------------- the log




def describe_filters(options: NcuOptions) -> str:
    parts = []
    if options.nvtx_include:
        parts.append("NVTX " + " or ".join(repr(e) for e in options.nvtx_include))
    if options.kernel_regex:
        parts.append(f"kernel regex {options.kernel_regex!r}")
    if options.launch_skip:
        parts.append(f"skipping {options.launch_skip} launches")
    return ", ".join(parts) if parts else "no filter"
