"""Nsight Compute reports -> ``Launch`` records, one per action of every range.

The only module that touches ``ncu_report``. It streams: one action is read at a
time, only the raw metrics the canonical fields name are looked up (through the
alias chains of ``ncuflow.metrics``), and nothing of the report is kept once its
``Launch`` has been built. Bad input never yields a silent empty result:
``ncu_report`` opens garbage, empty and most truncated files as a context with zero
ranges, and a report cut mid-way as its complete actions plus one last action with
no name and no metrics; each of these becomes a ``ReportError`` (or, for a cut
report whose complete actions are intact, a ``DamagedAction`` warning).
"""

from __future__ import annotations

import contextlib
import glob
import math
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncuflow.errors import NoReportsFound, ReportError
from ncuflow.launch import DeviceInfo, KernelName, Launch
from ncuflow.metrics import BREAKDOWN_METRICS, FIELDS, UNIT_THROUGHPUT_METRICS, resolve

REPORT_SUFFIXES: tuple[str, ...] = (".ncu-rep", ".ncu-repz", ".nsight-cuprof-report")
REPORT_MAGIC = b"NVR\x00"
_LFS_POINTER = b"version https://git-lfs"
_VERSION_PATTERN = re.compile(rb"(20\d\d\.\d+\.\d+(?:\.\d+)?) \(build (\d+)\)")
_BUILD_MARK = b" (build "
_SOL_RULE = "SOLBottleneck"


def _value_kinds() -> tuple[frozenset[int], frozenset[int]]:
    try:
        import ncu_report
    except ImportError:  # pragma: no cover
        return frozenset(), frozenset()
    metric = ncu_report.IMetric
    return (
        frozenset({metric.ValueKind_DOUBLE, metric.ValueKind_FLOAT}),
        frozenset({metric.ValueKind_UINT32, metric.ValueKind_UINT64}),
    )


_DOUBLE_KINDS, _INTEGER_KINDS = _value_kinds()


class DamagedActionWarning(UserWarning):
    """A report whose last action was cut off: the complete actions before it are used."""


@dataclass(frozen=True)
class RawMetric:
    """One raw metric of one launch, for the long table."""

    name: str
    value: float | None
    string_value: str | None
    unit: str


def ncu_install_python_dirs() -> list[Path]:
    """The ``extras/python`` folders of Nsight Compute installs on this machine.

    Where the ``ncu-report`` wheel is not installed (a GPU host with no network), the
    module that ships with ncu is used: next to the ``ncu`` that ``NCU`` or PATH names,
    then under the usual install prefixes. Looks at files only: runs nothing.
    """
    candidates: list[Path] = []
    for ncu in (os.environ.get("NCU"), shutil.which("ncu")):
        if ncu:
            real = Path(ncu).resolve()
            candidates += [real.parent / "extras" / "python", real.parent.parent / "extras" / "python"]
    for pattern in (
        "/opt/nvidia/nsight-compute/*/extras/python",
        "/usr/local/cuda/nsight-compute*/extras/python",
        "/usr/local/cuda*/nsight-compute*/extras/python",
    ):
        candidates += sorted((Path(p) for p in glob.glob(pattern)), reverse=True)
    unique = dict.fromkeys(c for c in candidates if (c / "ncu_report.py").is_file() or (c / "ncu_report").is_dir())
    return list(unique)


def _import_ncu_report() -> Any:
    """The ncu_report module: the installed wheel, else the copy an ncu install ships."""
    try:
        import ncu_report
    except ImportError as error:
        for folder in ncu_install_python_dirs():
            sys.path.insert(0, str(folder))
            try:
                import ncu_report
            except ImportError:
                sys.path.remove(str(folder))
                continue
            return ncu_report
        raise ReportError(
            "Cannot read Nsight Compute reports: the Python module ncu_report is not importable.",
            f"Importing it failed with: {error}, and no Nsight Compute install with an "
            "extras/python folder was found (NCU, PATH, /opt/nvidia/nsight-compute, /usr/local/cuda).",
            "Install the wheel with `pip install ncu-report`, or add the `extras/python` folder "
            "of your Nsight Compute install to PYTHONPATH.",
        ) from error
    return ncu_report


# ---------------------------------------------------------------------------
# finding reports


def find_reports(paths: Iterable[Path | str]) -> list[Path]:
    """Expand files and folders (searched recursively) into report paths.

    A named file is taken as given, whatever its suffix; a folder contributes every
    file with a report suffix below it. A missing path or a folder with no report is
    an error that names it.
    """
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise ReportError(
                f"{path} does not exist.",
                "ncuflow reads Nsight Compute reports (.ncu-rep, .ncu-repz, .nsight-cuprof-report) "
                "from the files and folders you name.",
                "Check the path, or point at the folder that holds your reports.",
            )
        if path.is_dir():
            below = sorted(
                p for p in path.rglob("*") if p.is_file() and p.name.endswith(REPORT_SUFFIXES)
            )
            if not below:
                raise NoReportsFound(
                    f"The folder {path} holds no Nsight Compute report.",
                    f"No file below it ends in {', '.join(REPORT_SUFFIXES)}.",
                    "Name the report files directly, or profile something first with "
                    "`ncuflow profile` (or `ncu -o NAME ...`).",
                )
            found.extend(below)
        else:
            found.append(path)
    if not found:
        raise NoReportsFound(
            "No report was named.",
            "Every command that reads reports needs at least one report file or folder.",
            "Pass one or more .ncu-rep files or folders that hold them.",
        )
    return found


# ---------------------------------------------------------------------------
# opening one report


def _check_bytes(path: Path) -> None:
    """Reject what is plainly not a report before ncu_report silently opens it empty."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(64)
    except OSError as error:
        raise ReportError(
            f"{path} cannot be read: {error.strerror or error}.",
            "ncuflow needs read access to the report file.",
            "Check the file's permissions and that it is a regular file.",
        ) from error
    if size == 0:
        raise ReportError(
            f"{path} is empty (0 bytes).",
            "An Nsight Compute report that ncu finished writing is never empty; this one was "
            "created but never written, or its copy failed.",
            "Profile again, or copy the report again from where it was made.",
        )
    if head.startswith(_LFS_POINTER):
        raise ReportError(
            f"{path} is a Git LFS pointer, not a report ({size} bytes of text).",
            "The repository it came from stores reports with Git LFS and the real file was not "
            "downloaded.",
            "Run `git lfs pull` in that repository (or download the file itself) and try again.",
        )
    if not head.startswith(REPORT_MAGIC):
        raise ReportError(
            f"{path} is not an Nsight Compute report: it does not start with the report "
            f"signature (it starts with {head[:8]!r}).",
            "Reports written by ncu (.ncu-rep, .nsight-cuprof-report) begin with the bytes 'NVR\\0'; "
            "this may be a CSV export, another tool's file, or random bytes.",
            "Pass the .ncu-rep file that `ncu -o` wrote.",
        )


def read_ncu_version(path: Path) -> str | None:
    """The ncu version that wrote the report, read from the file's bytes.

    ``ncu_report``'s ``get_version()`` is the module's version, not the report's;
    reports from ncu 2020.2 on hold the writer's version string (e.g.
    "2025.3.1.0 (build 36398880)"); legacy files do not, and give None.
    """
    try:
        data = path.read_bytes()
    except OSError:
        return None
    # bytes.find is many times faster than a regex scan over megabytes; the regex then
    # checks each candidate in a small window.
    start = data.find(_BUILD_MARK)
    while start != -1:
        match = _VERSION_PATTERN.search(data, max(0, start - 24), start + 24)
        if match is not None:
            return f"{match.group(1).decode()} (build {match.group(2).decode()})"
        start = data.find(_BUILD_MARK, start + 1)
    return None


@contextlib.contextmanager
def _native_stderr_captured() -> Iterator[list[str]]:
    """Capture what native code writes to file descriptor 2 while the block runs.

    ncu_report's C++ layers log parse failures of damaged files straight to stderr
    (absl/protobuf lines); ncuflow says what went wrong in one paragraph instead and
    keeps their text to quote in it.
    """
    captured: list[str] = []
    try:
        saved = os.dup(2)
    except OSError:  # no usable stderr: nothing to capture
        yield captured
        return
    with tempfile.TemporaryFile() as sink:
        sys.stderr.flush()
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode(errors="replace").strip()
            if text:
                captured.append(text)


def _native_note(captured: list[str]) -> str:
    if not captured:
        return ""
    last = captured[-1].splitlines()[-1].strip()
    last = last.split("] ", 1)[-1]  # drop the native logger's "E0000 time pid file:line]" prefix
    return f"ncu_report's own log said: {last[:300]}"


def _load_context(path: Path) -> Any:
    _check_bytes(path)
    ncu_report = _import_ncu_report()
    try:
        with _native_stderr_captured() as native_log:
            context = ncu_report.load_report(str(path))
            empty = context.num_ranges() == 0
    except Exception as error:
        raise ReportError(
            f"{path} could not be opened as an Nsight Compute report: {error}.",
            "The ncu_report module rejected the file.",
            "Check that the file is a complete report written by ncu; a newer ncu_report wheel "
            "(`pip install -U ncu-report`) reads reports of every older ncu version.",
        ) from error
    if empty:
        raise ReportError(
            f"{path} holds no profiled launch: ncu_report opened it as zero ranges.",
            "The file carries the report signature but ncu_report found no readable result in it: "
            "it is cut off (an interrupted ncu or an incomplete copy), corrupted, or ncu profiled "
            f"no kernel. {_native_note(native_log)}",
            "Profile again and let ncu finish; check its log for 'No kernels were profiled'.",
        )
    return context


def _is_damaged(action: Any) -> bool:
    return not action.name() and not action.metric_names()


def _iter_actions(path: Path, context: Any) -> Iterator[tuple[int, int, Any]]:
    """(range index, action index, action) for every intact action; damage is reported."""
    total = 0
    damaged: list[tuple[int, int]] = []
    for range_index in range(context.num_ranges()):
        report_range = context.range_by_idx(range_index)
        for action_index in range(report_range.num_actions()):
            action = report_range.action_by_idx(action_index)
            if _is_damaged(action):
                damaged.append((range_index, action_index))
                continue
            total += 1
            yield range_index, action_index, action
    if damaged and total == 0:
        raise ReportError(
            f"{path} is damaged: its only action has no kernel name and no metrics.",
            "The report was cut off while ncu (or a copy) was writing it.",
            "Profile again and let ncu finish, or copy the complete file.",
        )
    for range_index, action_index in damaged:
        warnings.warn(
            f"{path}: action {action_index} of range {range_index} is damaged (no kernel name, no "
            f"metrics; the file was cut off) and was skipped; the {total} complete actions "
            "before it are used.",
            DamagedActionWarning,
            stacklevel=2,
        )


# ---------------------------------------------------------------------------
# one action -> one Launch


def _numeric(action: Any, name: str) -> float | None:
    """A numeric metric's value; None where it is absent, valueless, a string, or not finite.

    Dispatches on the value kind itself: ``IMetric.value()`` rebuilds a table of
    lambdas on every call, which dominated extraction time.
    """
    metric = action.metric_by_name(name)
    if metric is None or not metric.has_value():
        return None
    kind = metric.kind()
    if kind in _DOUBLE_KINDS:
        number = metric.as_double()
    elif kind in _INTEGER_KINDS:
        number = float(metric.as_uint64())
    else:
        return None
    return number if math.isfinite(number) else None


def _string(action: Any, name: str) -> str | None:
    metric = action.metric_by_name(name)
    if metric is None or not metric.has_value():
        return None
    value = metric.value()
    return value if isinstance(value, str) else str(value)


def _kernel_name(action: Any, ncu_report: Any) -> KernelName:
    action_type = ncu_report.IAction

    def name(base: Any) -> str:
        try:
            text = action.name(base)
        except Exception:  # older reports may not hold every form
            text = None
        return text or ""

    function = name(action_type.NameBase_FUNCTION) or (action.name() or "")
    return KernelName(
        function=function,
        demangled=name(action_type.NameBase_DEMANGLED) or function,
        mangled=name(action_type.NameBase_MANGLED) or function,
    )


def _nvtx_ranges(action: Any) -> tuple[str, ...]:
    state = action.nvtx_state()
    if state is None:
        return ()
    ranges: list[str] = []
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        domain_name = domain.name() or ""
        prefix = "" if domain_name in ("", "<default domain>") else f"{domain_name}@"
        for range_name in domain.push_pop_ranges():
            ranges.append(f"{prefix}{range_name}")
        for range_name in domain.start_end_ranges():
            ranges.append(f"{prefix}{range_name}")
    return tuple(ranges)


def _breakdown(action: Any, allow: Callable[[str], bool] | None = None) -> dict[str, float]:
    """NVIDIA's per-unit throughput metrics (% of peak) that the model groups into terms.

    The SpeedOfLight section's breakdown lists name them; a report without those lists
    (a `--metrics` collection) contributes whichever known per-unit metrics it holds.
    ``allow`` (``classify --as-if``) keeps only what a smaller collection would have held:
    a breakdown list it allows brings every metric the list names.
    """
    names: list[str] = []
    for list_metric in BREAKDOWN_METRICS:
        listing = _string(action, list_metric) if allow is None or allow(list_metric) else None
        if listing:
            names.extend(name.strip() for name in listing.split(","))
    listed = set(names)
    candidates = names or list(UNIT_THROUGHPUT_METRICS)
    if allow is not None:
        extra = [m for m in UNIT_THROUGHPUT_METRICS if m not in listed]
        candidates = [n for n in (*names, *extra) if n in listed or allow(n)]
    values: dict[str, float] = {}
    for name in candidates:
        if name and name not in values:
            value = _numeric(action, name)
            if value is not None:
                values[name] = value
    return values


def _nvidia_sol(action: Any) -> str | None:
    try:
        results = action.rule_results_as_dicts()
    except Exception:
        return None
    for result in results:
        if result.get("rule_identifier") == _SOL_RULE:
            message = result.get("rule_message") or {}
            title = message.get("title") if isinstance(message, dict) else None
            return str(title) if title else None
    return None


def _device(action: Any) -> DeviceInfo:
    major = _numeric(action, "device__attribute_compute_capability_major")
    minor = _numeric(action, "device__attribute_compute_capability_minor")
    sm_count = _numeric(action, "device__attribute_multiprocessor_count")
    return DeviceInfo(
        name=_string(action, "device__attribute_display_name"),
        compute_capability=f"{int(major)}.{int(minor)}" if major is not None and minor is not None else None,
        sm_count=int(sm_count) if sm_count is not None else None,
    )


def launch_from_action(
    action: Any,
    *,
    report: str,
    range_index: int,
    action_index: int,
    ncu_version: str | None,
    ncu_report: Any,
    with_rules: bool = True,
    allow: Callable[[str], bool] | None = None,
) -> Launch:
    cache: dict[str, float | None] = {}

    def lookup(name: str) -> float | None:
        if name not in cache:
            cache[name] = _numeric(action, name) if allow is None or allow(name) else None
        return cache[name]

    values: dict[str, float | None] = {}
    provenance: dict[str, str] = {}
    missing: list[str] = []
    for field in FIELDS:
        value, source = resolve(field, lookup)
        values[field.name] = value
        if source is None:
            missing.append(field.name)
        else:
            provenance[field.name] = source
    return Launch(
        report=report,
        range_index=range_index,
        action_index=action_index,
        kernel=_kernel_name(action, ncu_report),
        nvtx=_nvtx_ranges(action),
        device=_device(action),
        ncu_version=ncu_version,
        values=values,
        provenance=provenance,
        missing=tuple(missing),
        breakdown=_breakdown(action, allow),
        nvidia_sol=_nvidia_sol(action) if with_rules else None,
    )


def iter_launches(
    path: Path | str, *, with_rules: bool = True, allow: Callable[[str], bool] | None = None
) -> Iterator[Launch]:
    """Every intact launch of one report, in report order, one at a time.

    ``allow`` restricts the raw metrics read to those it accepts: the launch as a smaller
    collection would have recorded it (``classify --as-if``).

    Raises ``ReportError`` for a file that is not a usable report; warns with
    ``DamagedActionWarning`` for a cut-off last action when the ones before it are whole.
    """
    report_path = Path(path)
    context = _load_context(report_path)
    ncu_report = _import_ncu_report()
    version = read_ncu_version(report_path)
    for range_index, action_index, action in _iter_actions(report_path, context):
        yield launch_from_action(
            action,
            report=str(report_path),
            range_index=range_index,
            action_index=action_index,
            ncu_version=version,
            ncu_report=ncu_report,
            with_rules=with_rules,
            allow=allow,
        )


def iter_raw_metrics(path: Path | str) -> Iterator[tuple[int, int, RawMetric]]:
    """Every raw metric of every intact launch: (range index, action index, metric)."""
    report_path = Path(path)
    context = _load_context(report_path)
    for range_index, action_index, action in _iter_actions(report_path, context):
        for name in action.metric_names():
            metric = action.metric_by_name(name)
            if metric is None:
                continue
            has_value = metric.has_value()
            value = metric.value() if has_value else None
            numeric = (
                float(value)
                if isinstance(value, (int, float)) and not isinstance(value, bool)
                else None
            )
            text = value if isinstance(value, str) else None
            yield range_index, action_index, RawMetric(name, numeric, text, metric.unit() or "")


def count_actions(path: Path | str) -> int:
    """Intact actions of a report (what export writes as rows)."""
    report_path = Path(path)
    context = _load_context(report_path)
    return sum(1 for _ in _iter_actions(report_path, context))
