"""Report files: finding them, checking their bytes, importing ``ncu_report`` and opening a report with it.

``check_bytes`` is what both readers check first (a regular file, not empty, not a Git LFS
pointer, the report signature or a zstd frame). The only module that imports
``ncu_report``: the installed wheel, else the copy that an Nsight Compute install ships in
its ``extras/python`` folder. Bad input never yields a silent empty result: ``ncu_report``
opens garbage, empty and most truncated files as a context with zero ranges; each of these
becomes a ``ReportError``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ncuflow.errors import NcuflowWarning, NoReportsFound, ReportError
from ncuflow.files import REPORT_SIGNATURE

REPORT_SUFFIXES: tuple[str, ...] = (".ncu-rep", ".ncu-repz", ".nsight-cuprof-report")


REPORT_MAGIC = REPORT_SIGNATURE
# A .ncu-repz: the report inside a zstd container (a zstd frame's magic number).
COMPRESSED_MAGIC = b"\x28\xb5\x2f\xfd"


_LFS_POINTER = b"version https://git-lfs"
RECENT_SECONDS = 10.0  # an empty report changed this recently may be being written


_VERSION_PATTERN = re.compile(rb"(20\d\d\.\d+\.\d+(?:\.\d+)?) \(build (\d+)\)")


_BUILD_MARK = b" (build "


class DamagedActionWarning(NcuflowWarning):
    """A report whose last action was cut off: the complete actions before it are used."""


def ncu_install_python_dirs(ncu_path: Path | str | None = None) -> list[Path]:
    """The ``extras/python`` folders of Nsight Compute installs on this machine.

    Where the ``ncu-report`` wheel is not installed (a GPU host with no network), the
    module that ships with ncu is used: next to ``ncu_path``, the ``ncu`` that ``NCU`` or
    PATH names, then under the usual install prefixes (``/usr/local/cuda/bin/ncu`` is a
    shell script, so the prefixes matter). Looks at files only: runs nothing.
    """
    candidates: list[Path] = []
    for named in (ncu_path, os.environ.get("NCU"), "ncu"):
        # a value with a '/' is a path (relative to the current folder), a bare name is looked up on PATH
        ncu = named if named is None or "/" in str(named) else shutil.which(str(named))
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


def import_ncu_report() -> Any:
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


def find_reports(paths: Iterable[Path | str]) -> list[Path]:
    """Expand files and folders (searched recursively) into report paths.

    A named file is taken as given, whatever its suffix; a folder contributes every
    file with a report suffix below it, except in hidden folders below it (a store's
    ``.tier2`` escalation runs are read with the runs they escalate; its ``.tmp-*`` runs and
    ``.ncuflow-tmp-*`` temporaries are unfinished). A missing path or a folder with no report is an error that
    names it.
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
            below = sorted(p for p in _files_below(path) if p.name.endswith(REPORT_SUFFIXES) and p.is_file())
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


def _files_below(folder: Path) -> Iterator[Path]:
    """Every entry below ``folder`` that is not a folder, outside hidden folders, without
    following links to folders (a link may loop). Walked with a stack, not by recursion
    (``Path.rglob`` and Python 3.11's ``os.walk`` recurse: a folder 1500 levels deep raised
    RecursionError, issue 24); a folder that cannot be listed is passed over, as rglob did."""
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        if not entry.name.startswith("."):
                            stack.append(Path(entry.path))
                    else:
                        yield Path(entry.path)
        except OSError:
            continue


def _file_type(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISDIR, "folder")):
        if test(mode):
            return name
    return "special file"


def check_bytes(path: Path) -> None:
    """Reject what is plainly not a report (before ncu_report silently opens it empty)."""
    try:
        status = path.stat()
        if not stat.S_ISREG(status.st_mode):
            raise ReportError(
                f"{path} is not a regular file (it is a {_file_type(status.st_mode)}), so it is not read as a report.",
                "A report is a file that ncu wrote; reading a FIFO could wait forever and a device "
                "never ends.",
                "Pass the .ncu-rep file itself.",
            )
        size = status.st_size
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as handle:
            head = handle.read(64)
    except OSError as error:
        raise ReportError(
            f"{path} cannot be read: {error.strerror or error}.",
            "ncuflow needs read access to the report file.",
            "Check the file's permissions and that it is a regular file.",
        ) from error
    if size == 0:
        age = time.time() - status.st_mtime
        raise ReportError(
            f"{path} is empty (0 bytes)" + (f", and was changed {age:.1f} s ago: something may be writing it "
                                            "now." if 0 <= age < RECENT_SECONDS else "."),
            "An Nsight Compute report that ncu finished writing is never empty; this one was "
            "created but never written, or its copy failed (or it is being overwritten, as "
            "ncu --force-overwrite and cp do: the file is emptied first).",
            "Profile again, or copy the report again from where it was made; if something is writing it, "
            "read it once written.",
        )
    if head.startswith(_LFS_POINTER):
        raise ReportError(
            f"{path} is a Git LFS pointer, not a report ({size} bytes of text).",
            "The repository it came from stores reports with Git LFS and the real file was not "
            "downloaded.",
            "Run `git lfs pull` in that repository (or download the file itself) and try again.",
        )
    if not head.startswith((REPORT_MAGIC, COMPRESSED_MAGIC)):
        raise ReportError(
            f"{path} is not an Nsight Compute report: it does not start with the report "
            f"signature (it starts with {head[:8]!r}).",
            "Reports written by ncu (.ncu-rep, .nsight-cuprof-report) begin with the bytes 'NVR\\0' "
            "(a .ncu-repz with a zstd frame); this may be a CSV export, another tool's file, or random bytes.",
            "Pass the .ncu-rep file that `ncu -o` wrote.",
        )


def file_identity(status: os.stat_result) -> tuple[int, ...]:
    """What changes when a file is written: compared before and after a report is read."""
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns


def changed_while_read(path: Path) -> ReportError:
    return ReportError(
        f"{path} changed while it was read: its size or modification time differs after reading from before.",
        "Something wrote the file meanwhile (an ncu --force-overwrite, a copy or a sync into the same path); "
        "what was read may mix its old and new bytes, so none of it is used.",
        "Read the report again once it is written (or read a copy of it).",
    )


def read_ncu_version(path: Path) -> str | None:
    """The ncu version that wrote the report, read from the file's bytes.

    ``ncu_report``'s ``get_version()`` is the module's version, not the report's;
    reports from ncu 2020.2 on hold the writer's version string (e.g.
    "2025.3.1.0 (build 36398880)"); legacy files do not, and give None.
    """
    try:
        with path.open("rb") as handle:
            if handle.read(4) == COMPRESSED_MAGIC:
                return _compressed_version(path, handle)
            return _version_from_the_end(handle)
    except OSError:
        return None


def _version_from_the_end(handle: Any) -> str | None:
    """The last version string of a plain report, read from its end in chunks that overlap by a
    version string's length (in most reports it lies within a few hundred bytes of the end, after
    each result). Read, not mapped: a mapped file that another process truncates kills this one
    with SIGBUS."""
    end = handle.seek(0, os.SEEK_END)
    head = b""
    while end > 0:
        start = max(0, end - (1 << 20))
        handle.seek(start)
        window = handle.read(end - start) + head
        found = version_in(window, 0, len(window))
        if found:
            return found
        head, end = window[:64], start
    return None


def _compressed_version(path: Path, handle: Any) -> str | None:
    """The last version string of a ``.ncu-repz``'s report, searched as it is decompressed (in
    chunks that overlap by a version string's length; within the bound the reader keeps,
    ``ncuflow.read.zstdframes``)."""
    try:
        import zstandard

        from ncuflow.read.zstdframes import zstd_content
    except ImportError:
        return None
    found: str | None = None
    tail = b""
    try:
        for chunk in zstd_content(path, handle):
            window = tail + chunk
            found = version_in(window, 0, len(window)) or found
            tail = window[-64:]
    except (zstandard.ZstdError, ReportError):
        return found
    return found


def version_in(data: Any, start: int, end: int) -> str | None:
    """The last ncu version string ("2025.3.1.0 (build 36398880)") in ``data[start:end]``.

    rfind is many times faster than a regex scan over megabytes; the regex then checks each
    candidate in a small window. ncuflow's reader searches each block header (where ncu writes
    it, in the session's details) as it walks them, and the whole file only where none holds it."""
    at = data.rfind(_BUILD_MARK, start, end)
    while at != -1:
        match = _VERSION_PATTERN.search(data, max(start, at - 24), min(end, at + 24))
        if match is not None:
            return f"{match.group(1).decode()} (build {match.group(2).decode()})"
        at = data.rfind(_BUILD_MARK, start, at)
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


def _identity_of(path: Path) -> tuple[int, ...] | None:
    try:
        return file_identity(path.stat())
    except OSError:
        return None


def refuse_what_ncu_report_aborts_on(path: Path) -> None:
    """A report whose blocks are whole but one of whose entries has a length running past its block
    (``framing.check_framing(entries=True)``: no result parsed, no protobuf) is a ``ReportError``
    before ``ncu_report`` sees it: ncu_report aborts its whole process on such a file (SIGABRT), this
    one where it reads in this process (``classify --as-if``, the library). A file cut short is left to
    ncu_report, which reads its whole blocks; so is a layout the framing walk does not know."""
    from ncuflow.read.framing import check_framing

    overrun = check_framing(path, entries=True).overrun
    if overrun:
        raise ReportError(
            f"{path} is not handed to ncu_report: its blocks are whole, but {overrun}.",
            "ncu_report aborts its whole process on an entry whose length points past its block or the file, "
            "with no word said.",
            "Read it with ncuflow's own reader (leave out --reader ncu_report), which reads the launches before "
            "the damage, or copy the complete file.",
        )


def load_context(path: Path) -> Any:
    """The report opened by ``ncu_report`` (its ``IContext``), or a ``ReportError`` that says why not."""
    check_bytes(path)
    refuse_what_ncu_report_aborts_on(path)
    ncu_report = import_ncu_report()
    before = _identity_of(path)
    try:
        with _native_stderr_captured() as native_log:
            context = ncu_report.load_report(str(path))  # the whole file, read at once
            empty = context.num_ranges() == 0
    except Exception as error:
        if _identity_of(path) != before:
            raise changed_while_read(path) from error
        raise ReportError(
            f"{path} could not be opened as an Nsight Compute report: {error}.",
            "The ncu_report module rejected the file.",
            "Check that the file is a complete report written by ncu; a newer ncu_report wheel "
            "(`pip install -U ncu-report`) reads reports of every older ncu version.",
        ) from error
    if _identity_of(path) != before:
        raise changed_while_read(path)
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


def iter_actions(path: Path, context: Any) -> Iterator[tuple[int, int, Any]]:
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
