"""Files written for people: one atomic write, guarded outputs, OS errors as one paragraph;
and the console every command and library function prints on (``make_console``).

Every file ncuflow writes goes through ``atomic_path`` (or ``atomic_paths`` for files
that belong together, such as the launches and metrics parquet of one export): the
content is written to a hidden temporary file beside the target, flushed to disk, and
renamed onto the target only when the whole write succeeded. A failed or interrupted
write leaves the previous file as it was and no partial file behind.

A target that is a link is written where the link leads (``output_target``): the link
stays. A target that leads into ``/proc`` (``/dev/stdout`` is a link to
``/proc/self/fd/1``) or to a FIFO, device, socket or folder is refused. Files that belong
together are renamed under an exclusive lock of their folder, so two commands writing one
pair commit one after the other. Every write first removes the temporary files that dead
processes left in the target's folder. Temporary names are plain text whatever the
target's name (a name with a byte that is not UTF-8 reaches no library as text).

``guard_output`` refuses a target that is one of the command's inputs, is not a
regular file, or already holds something that is not a previous output of the same
kind; the kind is recognised by what ncuflow wrote into the file (``files.recognise``),
never by its name or format. ``os_error`` turns an ``OSError`` into an ``OutputError`` paragraph
that names the path and what to do.

Plain standard library: the profiling path and the read side both use it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ncuflow.errors import NcuflowError
from ncuflow.files.owner import owner_tag, tag_owner_dead
from ncuflow.files.recognise import (
    LEGACY_PLOT_SOFTWARE,
    PLOT_KEY,
    REPORT_SIGNATURE,
    describe,
    parquet_table_recogniser,
    plot_metadata,
    png_recogniser,
    png_text,
    text_recogniser,
)

try:
    import fcntl
except ImportError:  # not POSIX: pairs are committed without the folder lock
    fcntl = None  # type: ignore[assignment]

TMP_MARK = ".ncuflow-tmp-"
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


_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # polars' OSError: no errno, the code in its text


def os_error(error: OSError, path: Path | str | None = None, doing: str = "write") -> OutputError:
    """One paragraph for an OS error: what failed on which path, why, and what to do."""
    where = str(path if path is not None else (error.filename or "a file"))
    reason = error.strerror or str(error)
    code = error.errno
    if code is None and (found := _RUST_OS_ERROR.search(str(error))):
        code = int(found.group(1))
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


def _plain_name(name: str) -> str:
    """``name`` where it is UTF-8 text of a usable length, else a digest of its bytes."""
    try:
        if len(name.encode("utf-8")) <= 160:
            return name
    except UnicodeEncodeError:  # a byte that is not UTF-8 (kept as a surrogate by the OS layer)
        pass
    import hashlib  # here: a long or undecodable name is rare, and the module costs every command ~5 ms
    return hashlib.sha256(os.fsencode(name)).hexdigest()[:24]


def temporary_beside(target: Path, role: str = "") -> Path:
    """``.ncuflow-tmp-<owner tag>-<role><name>``: the tag names this process beyond its id (``files.owner``)."""
    return target.with_name(f"{TMP_MARK}{owner_tag()}-{role}{_plain_name(target.name)}")


MAX_LINK_HOPS = 40


def _in_proc(folder: Path) -> bool:
    """Whether ``folder`` (a real path) lies in /proc, where a name is a process's file descriptor."""
    if folder == Path("/proc") or Path("/proc") in folder.parents:
        return True
    try:
        return os.stat(folder).st_dev == os.stat("/proc").st_dev
    except OSError:
        return False


def output_target(target: Path, *, kind: str = "the output", option: str = "the output") -> Path:
    """The file writing ``target`` replaces: where its links lead, in its real folder.

    A link is followed (and kept); a target that leads into /proc (``/dev/stdout`` leads to
    ``/proc/self/fd/1``), or to a FIFO, device, socket or folder, is refused with one paragraph.
    """
    given = Path(target)
    current = given if given.is_absolute() else Path(os.getcwd()) / given
    for _ in range(MAX_LINK_HOPS):
        folder = Path(os.path.realpath(current.parent))
        here = folder / current.name
        if _in_proc(folder):
            raise OutputError(
                f"Refusing to write {kind} to {given}: it is a special file (it leads to {here}, a file "
                "descriptor of a process, such as standard output), not a regular file.",
                "Replacing it would replace a link of the system, and a pipe or terminal cannot take "
                "a file written whole and renamed into place.",
                f"Give {option} the path of a regular file (then `cat` it where you wanted it).")
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            return here
        except OSError as error:
            raise os_error(error, given, "write") from None
        if not stat.S_ISLNK(mode):
            if not stat.S_ISREG(mode):
                raise OutputError(f"Refusing to write {kind} to {given}: it is {file_kind(mode)}, "
                                  "not a regular file.", "", f"Give {option} the path of a regular file.")
            return here
        current = folder / os.readlink(here)
    raise OutputError(f"Refusing to write {kind} to {given}: its links lead more than {MAX_LINK_HOPS} "
                      "links deep (a loop).", "", f"Give {option} the path of a regular file.")


@contextlib.contextmanager
def folders_locked(folders: Iterable[Path]) -> Iterator[None]:
    """An exclusive ``flock`` of each folder (in name order) while the block runs: the commits of
    two pairs into one folder take turns. Best effort: a folder that cannot be locked is not."""
    with contextlib.ExitStack() as held:
        for folder in sorted(set(folders)) if fcntl is not None else ():
            with contextlib.suppress(OSError):
                descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
                held.callback(os.close, descriptor)
                fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield


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


def _prepared_targets(given: list[Path], make_parents: bool) -> list[Path]:
    """The files ``given`` names (links followed), their folders made, stale temporaries removed."""
    finals: list[Path] = []
    for target in given:
        try:
            if make_parents:
                target.parent.mkdir(parents=True, exist_ok=True)
            finals.append(output_target(target))
        except BaseException as error:
            converted = as_output_error(error, target)
            if converted is error:
                raise
            raise converted from None
    if len(set(finals)) < len(finals):
        raise OutputError(f"Refusing to write {', '.join(map(str, given))}: two of them are one file (a link).",
                          "Files that belong together must be separate files.", "Give them separate paths.")
    for folder in dict.fromkeys(f.parent for f in finals):
        remove_temporaries(folder)
    return finals


def _keep_previous(finals: list[Path], backups: list[tuple[Path, Path]]) -> None:
    """Hard links to the targets' present content, appended to ``backups`` (for a rollback)."""
    for final in finals:
        if final.is_file():
            backup = temporary_beside(final, "previous-")
            backup.unlink(missing_ok=True)
            try:  # best effort: a file system without hard links gets no rollback
                os.link(final, backup)
            except OSError:
                continue
            backups.append((final, backup))


def _replace_onto(temporaries: list[Path], finals: list[Path], replaced: list[Path]) -> None:
    """Each temporary renamed onto its target in order, each target appended to ``replaced``."""
    for temporary, final in zip(temporaries, finals, strict=True):
        try:
            os.replace(temporary, final)
        except OSError as error:
            raise as_output_error(error, final) from None
        replaced.append(final)


def _roll_back(replaced: list[Path], previous: dict[Path, Path]) -> None:
    """The targets already replaced get their previous content back (or are removed)."""
    for final in replaced:
        with contextlib.suppress(OSError):
            if final in previous:
                os.replace(previous[final], final)
            else:
                final.unlink()


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
    given = [Path(t) for t in targets]
    current = given[-1] if given else Path(".")
    finals: list[Path] = []
    temporaries: list[Path] = []
    backups: list[tuple[Path, Path]] = []
    replaced: list[Path] = []
    try:
        finals = _prepared_targets(given, make_parents)
        temporaries = [temporary_beside(final) for final in finals]
        yield temporaries
        for temporary in temporaries:
            fsync_path(temporary)
        with folders_locked(f.parent for f in finals) if len(finals) > 1 else contextlib.nullcontext():
            if len(finals) > 1:
                _keep_previous(finals, backups)
            _replace_onto(temporaries, finals, replaced)
        current = finals[-1] if finals else current
        for folder in dict.fromkeys(f.parent for f in finals):
            fsync_path(folder)
    except BaseException as error:
        _roll_back(replaced, dict(backups))
        if isinstance(error, OSError) and error.filename is not None:  # name the output, not its temporary
            named = {str(t): f for t, f in zip(temporaries, finals, strict=False)}
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
    """Remove temporary files of ``atomic_paths`` left in ``folder`` by dead processes.

    Only those whose owner is provably dead (``owner.tag_owner_dead``): a temporary of a
    process on another host, in another PID namespace (a container sharing the folder) or
    of another boot, or one named by a pid alone, is left where it is.
    """
    with contextlib.suppress(OSError):
        for child in folder.iterdir():
            if not child.name.startswith(TMP_MARK):
                continue
            if not tag_owner_dead(child.name[len(TMP_MARK):].split("-", 1)[0]):
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
    given = Path(target)
    path = output_target(given, kind=kind, option=option)
    shown = f"{given} (a link to {path})" if os.path.islink(given) else str(given)
    for source in inputs:
        source_path = Path(source)
        if _same_file(path, source_path) or (source_path.is_dir() and path == Path(os.path.realpath(source_path))):
            raise OutputError(
                f"Refusing to write {kind} to {shown}: it is also an input of this command.",
                "Writing there would replace the data being read.",
                f"Give {option} another path.",
            )
    if not os.path.lexists(path):
        return
    try:
        empty = path.stat().st_size == 0
        ours = empty or recognise(path)
    except OSError as error:
        raise os_error(error, path, "read") from None
    if not ours:
        raise OutputError(
            f"Refusing to overwrite {shown}: it is {describe(path)}, not {kind} from an earlier run.",
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


# Reading files checked before a byte is read (ncuflow.files.inputs): re-exported, one import for callers.
from ncuflow.files.inputs import InputFileError, file_kind, open_regular_file, read_small_file  # noqa: E402

__all__ = [
    "LEGACY_PLOT_SOFTWARE", "PLOT_KEY", "REPORT_SIGNATURE", "InputFileError", "OutputError", "atomic_path",
    "atomic_paths", "atomic_write_text", "file_kind", "guard_output", "make_console", "open_regular_file", "os_error",
    "parquet_table_recogniser", "plot_metadata", "png_recogniser", "png_text", "read_small_file", "text_recogniser",
]
