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
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from glob import glob
from pathlib import Path
from typing import Literal

from ncuflow.errors import NcuflowError, UsageError
from ncuflow.metrics import decisive_metric_names

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


class NcuNotFound(NcuflowError):
    """No ncu executable could be found."""


class NcuFailed(NcuflowError):
    """ncu ran but the run is not usable (the base of the specific failures below)."""

    exit_code = 3


class CounterPermissionDenied(NcuFailed):
    def __init__(self, log_path: Path | None = None) -> None:
        super().__init__(
            "ncu could not read the GPU performance counters (ERR_NVGPUCTRPERM).",
            "The NVIDIA driver restricts counter access to administrators "
            "(RmProfilingAdminOnly=1), which is the default on most Linux installs and in "
            "containers started without the needed capability." + _see_log(log_path),
            "Run as root (or in a container with --cap-add=SYS_ADMIN), or let every user read "
            "the counters: put `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in "
            "/etc/modprobe.d/ncu-perm.conf and reload the driver (or reboot); "
            "`ncuflow doctor` shows the current setting; see https://developer.nvidia.com/ERR_NVGPUCTRPERM.",
        )


class NoKernelsProfiled(NcuFailed):
    def __init__(self, filters: str, log_path: Path | None = None) -> None:
        nesting = re.search(r"'[^'@]*[^/']/[^']*/'", filters)
        hint = (" The NVTX expression holds a '/' inside the range name, which ncu reads as "
                "one range nested in another: a single range whose name contains '/' does not "
                "match it." if nesting else "")
        super().__init__(
            f"ncu ran the program but profiled no kernel ({filters}).",
            "The filters matched nothing: the NVTX range was not pushed or is spelled "
            "differently (ncu reads '/' as the push/pop nesting delimiter and '@' as the "
            "domain separator), the kernel regex matches no kernel name, the kernels ran in "
            "a child process without --target-processes all, or the program launched no "
            "kernel at all (e.g. it ran on the CPU)." + hint + _see_log(log_path),
            "Check the range name with `nsys profile` or drop --nvtx/--kernel to profile "
            "every kernel once, and make sure the program runs on the GPU.",
        )


class MetricNotFound(NcuFailed):
    def __init__(self, metrics: Sequence[str], ncu_version: str | None, log_path: Path | None = None) -> None:
        names = ", ".join(metrics)
        super().__init__(
            f"ncu {ncu_version or ''} does not know the metric(s) {names}.".replace("  ", " "),
            "Metric names differ across GPU architectures and Nsight Compute versions, and "
            "ncu refuses the whole collection when one name is unknown." + _see_log(log_path),
            "Run `ncu --query-metrics` on this GPU to see the names it accepts, then profile "
            "with --set full (collects NVIDIA's sections instead of a metric list), or update "
            "Nsight Compute.",
        )
        self.metrics = tuple(metrics)


class DriverMismatch(NcuFailed):
    def __init__(self, detail: str, log_path: Path | None = None) -> None:
        super().__init__(
            f"ncu or the program could not use the CUDA driver: {detail.strip().rstrip('.')}.",
            "Nsight Compute and the CUDA runtime each need a driver at least as new as "
            "themselves; a stub libcuda.so on the library path, or a container whose driver "
            "libraries are not mounted, gives the same failure." + _see_log(log_path),
            "Compare `nvidia-smi` (driver) with `ncu --version` and the CUDA version of torch, "
            "then install a newer driver or an Nsight Compute that supports this driver; in "
            "Docker run with --gpus all.",
        )


class ApplicationFailed(NcuFailed):
    def __init__(self, code: int, tail: str, log_path: Path | None = None) -> None:
        tail_text = f" Its last output: {tail.strip()}" if tail.strip() else ""
        super().__init__(
            f"The profiled program exited with code {code}.",
            "The program itself failed under ncu, so no complete report was written."
            + tail_text
            + _see_log(log_path),
            "Run the same program without ncu (for a cell: `ncuflow time SPEC`) to see and fix "
            "its error first.",
        )
        self.code = code


class ProfileTimeout(NcuFailed):
    def __init__(self, seconds: float, log_path: Path | None = None) -> None:
        super().__init__(
            f"ncu did not finish within {seconds:g} s and was stopped, with every process it started.",
            "Replay multiplies run time by the number of passes (30-50 for --set full), the "
            "program may wait on something, or a kernel may hang; nothing was stored."
            + _see_log(log_path),
            "Raise --timeout, collect fewer kernels (--launch-count, --nvtx, --kernel) or "
            "fewer metrics (the default decisive set instead of --set full).",
        )


class ProfileInterrupted(NcuFailed):
    exit_code = 130

    def __init__(self, signal_name: str = "SIGINT") -> None:
        super().__init__(
            f"Profiling was interrupted ({signal_name}).",
            "ncu and every process it started were stopped and the unfinished run folder "
            "was removed, so the store holds only complete runs.",
            "Run the same command again; a sweep resumes where it stopped.",
        )


def _see_log(log_path: Path | None) -> str:
    return f" The ncu log is {log_path}." if log_path else ""


# ----------------------------------------------------------------------------- locating ncu


@dataclass(frozen=True)
class NcuInstall:
    path: Path
    version: str | None  # "2025.3.1.0"
    found_by: str  # "--ncu", "NCU", "PATH", "/opt/nvidia/nsight-compute", "/usr/local/cuda"


def _version_key(path: str) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", Path(path).parent.name)
    return tuple(int(n) for n in numbers)


def ncu_candidates(explicit: str | os.PathLike[str] | None = None,
                   env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(path, how found) in search order: option, $NCU, PATH, /opt/nvidia/nsight-compute, CUDA."""
    environ = os.environ if env is None else env
    found: list[tuple[str, str]] = []
    if explicit:
        found.append((str(explicit), "--ncu"))
    if environ.get("NCU"):
        found.append((environ["NCU"], "NCU"))
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


def find_ncu(explicit: str | os.PathLike[str] | None = None,
             env: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """The ncu to use and how it was found. An explicit choice that is not executable is an error."""
    for path, how in ncu_candidates(explicit, env):
        if _is_executable(path):
            return Path(path), how
        if how in ("--ncu", "NCU"):
            raise NcuNotFound(
                f"The ncu given by {how} ({path}) is not an executable file.",
                "ncuflow runs exactly the ncu you name when you name one.",
                "Fix the path (e.g. /opt/nvidia/nsight-compute/2025.3.1/ncu) or unset it to search.",
            )
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
        done = subprocess.run([str(ncu), "--version"], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_version_output(done.stdout + "\n" + done.stderr)


def locate_ncu(explicit: str | os.PathLike[str] | None = None,
               env: Mapping[str, str] | None = None, timeout: float = 30.0) -> NcuInstall:
    path, how = find_ncu(explicit, env)
    return NcuInstall(path=path, version=ncu_version(path, timeout), found_by=how)


def ncu_report_locations(ncu: Path | None) -> list[Path]:
    """Folders that may hold the ``ncu_report`` module of an ncu install (extras/python)."""
    if ncu is None:
        return []
    real = Path(os.path.realpath(ncu))
    return [parent / "extras" / "python" for parent in (real.parent, real.parent.parent)
            if (parent / "extras" / "python" / "ncu_report.py").is_file()]


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


@dataclass(frozen=True)
class LogFindings:
    """What ncu's output says, line by line."""

    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    profiled_kernels: int
    permission_denied: bool
    no_kernels: bool
    failed_metrics: tuple[str, ...]
    driver_problem: str | None
    app_exit_code: int | None
    report_line: str | None


_PROFILING = re.compile(r"^==PROF== Profiling \"")
_APP_CODE = re.compile(r"The application returned an error code \((-?\d+)\)")
_FAILED_METRIC = re.compile(r"Failed to find metric\s+(\S+)")
_REGEX_NAME = re.compile(r"^regex:\^?([A-Za-z0-9_]+(?:__[A-Za-z0-9_]+)?(?:\\?\.[A-Za-z0-9_]+)*)")
_DRIVER_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"failed to connect to the CUDA driver[^\n]*", re.I),
    re.compile(r"Failed to initialize the profiler[^\n]*", re.I),
    re.compile(r"CUDA driver version is insufficient[^\n]*", re.I),
    re.compile(r"API call is not supported in the installed CUDA driver[^\n]*", re.I),
    re.compile(r"driver[^\n]*(?:not supported|incompatible|mismatch|too old)[^\n]*", re.I),
    re.compile(r"(?:not supported|incompatible)[^\n]*driver[^\n]*", re.I),
)


def _metric_from_token(token: str) -> str:
    token = token.rstrip(".,;")
    match = _REGEX_NAME.match(token)
    if match:
        return match.group(1).replace("\\.", ".")
    return token


def parse_log(text: str) -> LogFindings:
    errors: list[str] = []
    warnings: list[str] = []
    failed: list[str] = []
    profiled = 0
    driver: str | None = None
    app_code: int | None = None
    report_line: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith("==ERROR=="):
            errors.append(line)
        elif line.startswith("==WARNING=="):
            warnings.append(line)
        elif _PROFILING.match(line):
            profiled += 1
        elif line.startswith("==PROF== Report:"):
            report_line = line
        metric = _FAILED_METRIC.search(line)
        if metric and line.startswith("==ERROR=="):
            name = _metric_from_token(metric.group(1))
            if name not in failed:
                failed.append(name)
        code = _APP_CODE.search(line)
        if code:
            app_code = int(code.group(1))
        if driver is None:
            for pattern in _DRIVER_PATTERNS:
                found = pattern.search(line)
                if found:
                    driver = found.group(0).strip()
                    break
    joined = "\n".join(errors)
    return LogFindings(
        errors=tuple(errors),
        warnings=tuple(warnings),
        profiled_kernels=profiled,
        permission_denied="ERR_NVGPUCTRPERM" in text,
        no_kernels="No kernels were profiled" in text,
        failed_metrics=tuple(failed),
        driver_problem=driver if (driver and (joined or app_code is not None)) else None,
        app_exit_code=app_code,
        report_line=report_line,
    )


def app_output_tail(text: str, lines: int = 3, chars: int = 300) -> str:
    """The program's own last lines (ncu's ``==X==`` lines removed), for error messages."""
    own = [ln.strip() for ln in text.splitlines()
           if ln.strip() and not ln.startswith(("==", "Traceback", " ", "\t"))]
    tail = " | ".join(own[-lines:])
    return tail[-chars:]


def error_from_log(
    text: str,
    returncode: int,
    *,
    filters: str,
    ncu_version: str | None = None,
    log_path: Path | None = None,
) -> NcuflowError | None:
    """The typed error ncu's output and exit status describe, or None when they say success.

    Success here is exit 0, no ``==ERROR==`` line and no "No kernels were profiled";
    the caller still checks that the report loads with at least one action.
    """
    found = parse_log(text)
    if found.permission_denied:
        return CounterPermissionDenied(log_path)
    if found.driver_problem:
        return DriverMismatch(found.driver_problem, log_path)
    if found.failed_metrics:
        return MetricNotFound(found.failed_metrics, ncu_version, log_path)
    if found.app_exit_code is not None and found.app_exit_code != 0:
        return ApplicationFailed(found.app_exit_code, app_output_tail(text), log_path)
    if found.no_kernels:
        return NoKernelsProfiled(filters, log_path)
    if returncode != 0 or found.errors:
        how = (f"was stopped by signal {-returncode}" if returncode < 0
               else f"exited with code {returncode}")
        first = found.errors[0].removeprefix("==ERROR==").strip() if found.errors else ""
        return NcuFailed(
            f"ncu {how}" + (f": {first}" if first else "") + ".",
            "Nsight Compute reported an error it gives no specific code for, or crashed; "
            "the run was not stored as complete." + _see_log(log_path),
            "Read the log; re-run with fewer metrics or --replay-mode application if a "
            "kernel cannot be replayed, and check `ncuflow doctor`.",
        )
    return None


def describe_filters(options: NcuOptions) -> str:
    parts = []
    if options.nvtx_include:
        parts.append("NVTX " + " or ".join(repr(e) for e in options.nvtx_include))
    if options.kernel_regex:
        parts.append(f"kernel regex {options.kernel_regex!r}")
    if options.launch_skip:
        parts.append(f"skipping {options.launch_skip} launches")
    return ", ".join(parts) if parts else "no filter"
