"""Files written for people: one atomic write, guarded outputs, OS errors as one paragraph;
and the console every command and library function prints on (``make_console``).

Every file ncuflow writes goes through ``atomic_path`` (or ``atomic_paths`` for files
that belong together, such as the launches and metrics parquet of one export): the
content is written to a hidden temporary file beside the target, flushed to disk, and
renamed onto the target only when the whole write succeeded. A failed or interrupted
write leaves the previous file as it was and no partial file behind.

``guard_output`` refuses a target that is one of the command's inputs, is not a
regular file, or already holds something that is not a previous output of the same
kind; the kind is recognised by the file's content (a report by its signature), never
by its suffix. ``os_error`` turns an ``OSError`` into an ``OutputError`` paragraph
that names the path and what to do.

Plain standard library: the profiling path and the read side both use it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ncuflow.errors import NcuflowError

TMP_MARK = ".ncuflow-tmp-"
REPORT_SIGNATURE = b"NVR\x00"  # how every report ncu writes begins (read.reportfile.REPORT_MAGIC)
PARQUET_MAGIC = b"PAR1"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LOW_SPACE_BYTES = 1 << 20


class OutputError(NcuflowError):
    """An output cannot be written (refused, or the operating system said no)."""


# ---------------------------------------------------------------------------- OS errors


def free_bytes(path: Path) -> int | None:
    """Bytes available to this user on the file system holding ``path`` (or its nearest parent)."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        stats = os.statvfs(probe)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def is_disk_full(path: Path) -> bool:
    free = free_bytes(path)
    return free is not None and free < LOW_SPACE_BYTES


def os_error(error: OSError, path: Path | str | None = None, doing: str = "write") -> OutputError:
    """One paragraph for an OS error: what failed on which path, why, and what to do."""
    where = str(path if path is not None else (error.filename or "a file"))
    reason = error.strerror or str(error)
    code = error.errno
    if code == errno.ENOSPC or code == errno.EDQUOT:
        why = "The file system holding it is full (or your quota is used up)."
        fix = "Free some space there, or write somewhere else; nothing partial was left and earlier results are intact."
    elif code == errno.EROFS:
        why = "That file system is mounted read-only."
        fix = "Choose a folder on a writable file system."
    elif code in (errno.EACCES, errno.EPERM):
        why = "You do not have permission to do that there."
        fix = "Choose a folder you can write to, or fix its permissions (ls -ld shows them)."
    elif code == errno.ENOENT:
        why = "A folder on that path does not exist (or was removed meanwhile)."
        fix = "Check the path."
    elif code == errno.EISDIR:
        why = "It is a folder, where a file was expected."
        fix = "Give a file name."
    elif code == errno.ENOTDIR:
        why = "Part of that path is a file, where a folder was expected."
        fix = "Check the path."
    else:
        why = "The operating system refused it."
        fix = "Check the path, its permissions and the free space of its file system."
    return OutputError(f"Cannot {doing} {where}: {reason}.", why, fix)


@contextlib.contextmanager
def os_errors_as_messages(path: Path | str | None = None, doing: str = "write") -> Iterator[None]:
    """Re-raise any ``OSError`` of the block as an ``OutputError`` naming ``path``."""
    try:
        yield
    except OSError as error:
        raise os_error(error, error.filename if error.filename is not None else path, doing) from None


# ---------------------------------------------------------------------------- atomic writes


def temporary_beside(target: Path) -> Path:
    return target.with_name(f"{TMP_MARK}{os.getpid()}-{target.name}")


def fsync_path(path: Path) -> None:
    """Flush a file's or a folder's entries to disk (best effort: errors are ignored)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def as_output_error(error: BaseException, target: Path) -> BaseException:
    """The paragraph an error writing ``target`` deserves: OS errors and a full disk named as such."""
    if isinstance(error, NcuflowError | KeyboardInterrupt | SystemExit | GeneratorExit):
        return error
    if isinstance(error, OSError):
        return os_error(error, target)
    if isinstance(error, Exception) and is_disk_full(target.parent):
        # writers such as polars report a full disk as their own error ("transport error")
        return os_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), target)
    return error


@contextlib.contextmanager
def atomic_paths(targets: Sequence[Path], *, make_parents: bool = True) -> Iterator[list[Path]]:
    """Temporary paths beside ``targets``; all renamed onto them only if the block succeeds.

    The block writes each temporary file completely. Then each is flushed to disk and
    renamed onto its target, the last target last. Should a rename fail, the targets
    already replaced get their previous content back (kept as hard links until the
    end), so files that belong together stay a matching pair. On any failure the
    temporary files are removed and the error names the path (``OutputError``).
    ``make_parents=False`` never creates a folder: a file for a run folder that was
    removed meanwhile (an interrupted run) fails instead of re-creating the folder.
    """
    finals = [Path(t) for t in targets]
    temporaries = [temporary_beside(t) for t in finals]
    backups: list[tuple[Path, Path]] = []
    replaced: list[Path] = []
    current = finals[0] if finals else Path(".")
    try:
        for final in finals:
            current = final
            if make_parents:
                final.parent.mkdir(parents=True, exist_ok=True)
        yield temporaries
        for temporary in temporaries:
            fsync_path(temporary)
        if len(finals) > 1:
            for final in finals:
                if final.is_file():
                    backup = final.with_name(f"{TMP_MARK}{os.getpid()}-previous-{final.name}")
                    backup.unlink(missing_ok=True)
                    try:  # best effort: a file system without hard links gets no rollback
                        os.link(final, backup)
                    except OSError:
                        continue
                    backups.append((final, backup))
        for temporary, final in zip(temporaries, finals, strict=True):
            current = final
            os.replace(temporary, final)
            replaced.append(final)
        for folder in dict.fromkeys(f.parent for f in finals):
            fsync_path(folder)
    except BaseException as error:
        previous = dict(backups)
        for final in replaced:
            if final in previous:
                with contextlib.suppress(OSError):
                    os.replace(previous[final], final)
            else:
                with contextlib.suppress(OSError):
                    final.unlink()
        if isinstance(error, OSError) and error.filename is not None:  # name the output, not its temporary
            named = {str(t): f for t, f in zip(temporaries, finals, strict=True)}
            current = named.get(str(error.filename), current)
        converted = as_output_error(error, current)
        if converted is error:
            raise
        raise converted from None
    finally:
        for path in (*temporaries, *(backup for _, backup in backups)):
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_path(target: Path, *, make_parents: bool = True) -> Iterator[Path]:
    """A temporary path beside ``target``; renamed onto it only if the block succeeds."""
    with atomic_paths([Path(target)], make_parents=make_parents) as (temporary,):
        yield temporary


def atomic_write_text(target: Path, text: str, *, make_parents: bool = True) -> None:
    with atomic_path(target, make_parents=make_parents) as temporary, \
            open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def remove_temporaries(folder: Path) -> None:
    """Remove temporary files of ``atomic_paths`` left in ``folder`` by dead processes."""
    with contextlib.suppress(OSError):
        for child in folder.iterdir():
            if not child.name.startswith(TMP_MARK):
                continue
            pid = child.name[len(TMP_MARK):].split("-", 1)[0]
            if not pid.isdigit() or pid_alive(int(pid)):
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    if pid <= 0:  # 0 and negatives name process groups, never one process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_group_alive(pgid: int) -> bool:
    """Whether any process of the group ``pgid`` still runs (one we may not signal counts)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------------------- output guard


def _head(path: Path, size: int = 64) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(size)


def _tail(path: Path, size: int = 65536) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        end = handle.tell()
        handle.seek(max(0, end - size))
        return handle.read()


def parquet_table_recogniser(*tables: str) -> Callable[[Path], bool]:
    """True for a parquet file ncuflow wrote as one of ``tables`` (from its footer metadata)."""

    def recognise(path: Path) -> bool:
        if _head(path, 4) != PARQUET_MAGIC:
            return False
        footer = _tail(path)
        if not footer.endswith(PARQUET_MAGIC) or b"ncuflow.table" not in footer:
            return False
        return any(table.encode() in footer for table in tables)

    return recognise


def text_recogniser(*first_lines: str) -> Callable[[Path], bool]:
    """True for a text file whose first line starts with one of ``first_lines``."""

    def recognise(path: Path) -> bool:
        head = _head(path, 256)
        return any(head.startswith(line.encode()) for line in first_lines)

    return recognise


def png_recogniser(path: Path) -> bool:
    """True for a PNG written by matplotlib (ncuflow's plots)."""
    head = _head(path, 4096)
    return head.startswith(PNG_MAGIC) and (b"ncuflow" in head or b"Matplotlib" in head)


def _describe(path: Path) -> str:
    try:
        head = _head(path, 8)
    except OSError:
        return "a file ncuflow cannot read"
    if head.startswith(REPORT_SIGNATURE):
        return "an Nsight Compute report"
    if head.startswith(PARQUET_MAGIC):
        return "a parquet file of another kind"
    if head.startswith(PNG_MAGIC):
        return "a PNG image ncuflow did not write"
    return "a file ncuflow did not write"


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def guard_output(target: Path, *, kind: str, recognise: Callable[[Path], bool],
                 inputs: Iterable[Path] = (), option: str = "the output") -> None:
    """Refuse to write ``target`` where that would destroy something that is not ours.

    Allowed: a path that does not exist, an empty regular file, or a regular file that
    ``recognise`` says is a previous ncuflow output of the same ``kind``. Refused, with
    one paragraph: an input of this command, a folder, a FIFO or device, anything else.
    """
    path = Path(target)
    for source in inputs:
        source_path = Path(source)
        if _same_file(path, source_path) or (source_path.is_dir() and path.absolute() == source_path.absolute()):
            raise OutputError(
                f"Refusing to write {kind} to {path}: it is also an input of this command.",
                "Writing there would replace the data being read.",
                f"Give {option} another path.",
            )
    if not os.path.lexists(path):
        return
    if path.is_dir():
        raise OutputError(f"Refusing to write {kind} to {path}: it is a folder.", "",
                          f"Give {option} a file name.")
    if not path.is_file():
        raise OutputError(
            f"Refusing to write {kind} to {path}: it is not a regular file (a FIFO, device or socket).",
            "", f"Give {option} the path of a regular file.")
    try:
        empty = path.stat().st_size == 0
        ours = empty or recognise(path)
    except OSError as error:
        raise os_error(error, path, "read") from None
    if not ours:
        raise OutputError(
            f"Refusing to overwrite {path}: it is {_describe(path)}, not {kind} from an earlier run.",
            "ncuflow replaces only its own earlier outputs of the same kind (recognised by content).",
            f"Give {option} a new path, or remove that file yourself if you no longer need it.",
        )


# A piped command's tables are this wide at least.
PIPED_WIDTH = 200


def make_console() -> Any:
    """The terminal's width; when piped, at least 200 columns (a wider ``COLUMNS`` is
    honoured; rich's 80, or a ``COLUMNS=80`` left in the environment, would squeeze a
    table's values into fragments)."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console(soft_wrap=False)
    columns = os.environ.get("COLUMNS", "")
    return Console(soft_wrap=False, width=max(PIPED_WIDTH, int(columns) if columns.isdigit() else 0))


# ---------------------------------------------------------------------------- bounded input


class InputFileError(NcuflowError):
    """A file ncuflow was asked to read is missing, not a regular file, or too large."""


def file_kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, for messages: "a FIFO", "a character device", ..."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "a special file"


class _NotRegular(Exception):
    """Raised by ``_open_regular``: the opened path is no regular file (its ``st_mode``)."""

    def __init__(self, mode: int) -> None:
        super().__init__(file_kind(mode))
        self.mode = mode


def _open_regular(path: Path) -> tuple[int, os.stat_result]:
    """A read-only descriptor of ``path`` and its status, checked to be a regular file.

    Opened without blocking and checked on the descriptor, so a FIFO (which would wait for a
    writer forever), a device such as /dev/zero (which never ends), a socket or a folder is
    refused (``_NotRegular``) before a byte is read, and a file swapped for one of those
    between a check and the open cannot slip through. OSError as ``os.open`` raises it.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise _NotRegular(status.st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd, status


def read_small_file(path: Path, limit: int, *, what: str, error: Callable[[str], NcuflowError]) -> str:
    """The UTF-8 text of a small regular file, checked before it is read.

    A FIFO, a device (a link to ``/dev/zero``), a socket or a folder is refused without
    blocking or reading; so is a file over ``limit`` bytes, and one that grows past it while
    read. ``error(problem)`` makes the exception raised, e.g. a ``ManifestError``.
    """
    try:
        descriptor, _ = _open_regular(path)
    except FileNotFoundError:
        raise error("the file is missing") from None
    except _NotRegular as special:
        raise error(f"it is {special}, not a regular {what} file") from None
    except OSError as failure:
        raise error(f"it cannot be read ({failure.strerror or failure})") from None
    try:
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    except OSError as failure:
        raise error(f"it cannot be read ({failure.strerror or failure})") from None
    finally:
        os.close(descriptor)
    if len(data) > limit:
        raise error(f"it is larger than {limit >> 20} MiB, far more than a {what} holds")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as failure:
        line = data[: failure.start].count(b"\n") + 1
        raise error(f"it is not UTF-8 text (byte {data[failure.start]:#04x} on line {line})") from None


def open_regular_file(path: Path, *, kind: str, max_bytes: int | None = None) -> Any:
    """Open ``path`` for reading (binary) after checking that it is a regular file (a link is
    followed) and, with ``max_bytes``, no larger than that; returns the open file.

    Checked as ``read_small_file`` checks (on the descriptor, before a byte is read); for a
    file that is streamed rather than read whole. ``kind`` names what the file should be
    ("a serving log"), for the messages.
    """
    try:
        fd, status = _open_regular(path)
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such file.", "", "Check the path.") from None
    except _NotRegular as special:
        if stat.S_ISDIR(special.mode):
            raise InputFileError(f"{path} is a folder, not a regular file, so it is not read as {kind}.",
                                 "", f"Pass the files inside it ({path}/*).") from None
        why = {
            "a FIFO": "Reading a FIFO waits for a writer, possibly forever.",
            "a socket": "A socket is a connection, not a file.",
        }.get(str(special), "A device can send bytes without end (/dev/zero never ends).")
        raise InputFileError(f"{path} is {special}, not a regular file, so it is not read as {kind}.", why,
                             "Copy what it holds into a regular file first and pass that file.") from None
    except OSError as error:
        raise InputFileError(f"{path} cannot be opened as {kind}: {error.strerror or error}.", "",
                             "Check the path and its permissions.") from None
    try:
        if max_bytes is not None and status.st_size > max_bytes:
            raise InputFileError(
                f"{path} holds {status.st_size:,} bytes, more than the {max_bytes:,} bytes ncuflow "
                f"reads as {kind}.",
                "The whole file would be held in memory.",
                "Split the file, or pass only the part that is needed.")
        if hasattr(os, "O_NONBLOCK"):
            import fcntl

            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
