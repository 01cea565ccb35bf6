"""What ncu's log says went wrong, as typed errors that each explain what happened, why and the fix."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ncuflow.errors import NcuflowError

# NVIDIA's code for "this user may not read the GPU performance counters", as ncu prints it.
COUNTER_PERMISSION_CODE = "ERR_NVGPUCTRPERM"
# How MetricNotFound's paragraph begins its complaint (callers that read it from a log match this).
UNKNOWN_METRIC_WORDS = "does not know the metric(s)"


class NcuNotFound(NcuflowError):
    """No ncu executable could be found."""


class NcuFailed(NcuflowError):
    """ncu ran but the run is not usable (the base of the specific failures below)."""

    exit_code = 3


class CounterPermissionDenied(NcuFailed):
    def __init__(self, log_path: Path | None = None) -> None:
        super().__init__(
            f"ncu could not read the GPU performance counters ({COUNTER_PERMISSION_CODE}).",
            "The NVIDIA driver restricts counter access to administrators "
            "(RmProfilingAdminOnly=1), which is the default on most Linux installs and in "
            "containers started without the needed capability." + _see_log(log_path),
            "Run as root (or in a container with --cap-add=SYS_ADMIN), or let every user read "
            "the counters: put `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in "
            "/etc/modprobe.d/ncu-perm.conf and reload the driver (or reboot); "
            "`ncuflow doctor` shows the current setting; see https://developer.nvidia.com/ERR_NVGPUCTRPERM.",
        )


# How ncu says another tool holds the GPU's counters (DCGM's profiling module, typically).
COUNTERS_BUSY_WORDS = "a driver resource was unavailable"


class CountersHeldElsewhere(NcuFailed):
    def __init__(self, log_path: Path | None = None) -> None:
        super().__init__(
            "ncu could not take the GPU performance counters: another tool holds them "
            f"(ncu: \"{COUNTERS_BUSY_WORDS}\").",
            "One profiler at a time may use the counters; DCGM's profiling module (what dcgm-exporter's "
            "DCGM_FI_PROF_* fields read, common on Kubernetes GPU nodes) keeps them while it watches the "
            "GPU, as does another ncu or Nsight Systems' GPU metrics." + _see_log(log_path),
            "Pause DCGM's profiling while you profile: `dcgmi profile --pause`, then `dcgmi profile --resume` "
            "after (where dcgm-exporter runs in a pod, in that pod); `ncuflow doctor` names a running "
            "nv-hostengine.",
        )


class OptionUnknown(NcuFailed):
    def __init__(self, option: str, ncu_version: str | None, log_path: Path | None = None) -> None:
        which = f"ncu {ncu_version}" if ncu_version else "This ncu"
        super().__init__(
            f"{which} does not know the option {option}.",
            "Options come with Nsight Compute versions: --graph-profiling is newer than 2022.3, and "
            "--mode attach --process-id came with 2026.2.1." + _see_log(log_path),
            f"Install a newer Nsight Compute and point to it with --ncu PATH, or profile without {option}.",
        )
        self.option = option


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
            f"ncu {ncu_version or ''} {UNKNOWN_METRIC_WORDS} {names}.".replace("  ", " "),
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


_DRIVER_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"failed to connect to the CUDA driver[^\n]*", re.I),
    re.compile(r"Failed to initialize the profiler[^\n]*", re.I),
    re.compile(r"CUDA driver version is insufficient[^\n]*", re.I),
    re.compile(r"API call is not supported in the installed CUDA driver[^\n]*", re.I),
    re.compile(r"driver[^\n]*(?:not supported|incompatible|mismatch|too old)[^\n]*", re.I),
    re.compile(r"(?:not supported|incompatible)[^\n]*driver[^\n]*", re.I),
)


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
    counters_busy: bool = False  # another tool holds the counters (COUNTERS_BUSY_WORDS)
    unknown_option: str | None = None  # an option this ncu does not know ("unrecognised option '--x'")


_PROFILING = re.compile(r"^==PROF== Profiling \"")


_APP_CODE = re.compile(r"The application returned an error code \((-?\d+)\)")


_FAILED_METRIC = re.compile(r"Failed to find metric\s+(\S+)")
_UNKNOWN_OPTION = re.compile(r"unrecogni[sz]ed option '(-[A-Za-z0-9-]{1,60})'")


# the name inside ncu's regex for it; a `breakdown:` request keeps its prefix (ncu's own syntax)
_REGEX_NAME = re.compile(r"^regex:\^?((?:breakdown:)?[A-Za-z0-9_]+(?:__[A-Za-z0-9_]+)?(?:\\?\.[A-Za-z0-9_]+)*)")


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
        permission_denied=COUNTER_PERMISSION_CODE in text,
        no_kernels="No kernels were profiled" in text,
        failed_metrics=tuple(failed),
        driver_problem=driver if (driver and (joined or app_code is not None)) else None,
        app_exit_code=app_code,
        report_line=report_line,
        counters_busy=COUNTERS_BUSY_WORDS in text,
        unknown_option=option.group(1) if (option := _UNKNOWN_OPTION.search(text)) else None,
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
    if found.counters_busy:
        return CountersHeldElsewhere(log_path)
    if found.unknown_option is not None:
        return OptionUnknown(found.unknown_option, ncu_version, log_path)
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
