"""A reading worker's heap, made resident in one call before it reads.

``ncu_report`` keeps everything it parses, about 9 times the bytes of the report, so
a reading process grows by that much, and every new 4 KiB page costs a page fault
(zero-filled by the kernel). On the public corpus that faulting is ~40 % of the time
a process spends reading a report. A reading worker knows roughly how much it will
grow (it is retired after a bounded amount of input), so it can ask Linux to make that
much of its heap resident in one ``madvise(MADV_POPULATE_WRITE)`` call per chunk, which
costs ~75 % of the faults it replaces: a gain where it runs on a core that would
otherwise idle (the pool asks for it only when there are fewer jobs than cores), before
the worker's first report arrives. glibc then hands those pages to ``ncu_report``'s
allocations: the chunks are allocated from the heap (``M_MMAP_THRESHOLD`` raised above
their size) and freed back into it (``M_TRIM_THRESHOLD`` raised, so that glibc keeps them).

Only for a process that exits after its bounded work (a reading worker): the heap
never shrinks afterwards. Elsewhere (not Linux, not glibc, a kernel before 5.14, or
``NCUFLOW_WORKER_PREFAULT=0``) it does nothing and says so; reading is unchanged.
"""

from __future__ import annotations

import ctypes
import os
import sys

# Heap bytes ncu_report keeps per byte of report read, measured on the corpus (~9x);
# a little below it, so that a worker never holds more than it would have grown to.
HEAP_PER_REPORT_BYTE = 8
PREFAULT_ENV = "NCUFLOW_WORKER_PREFAULT"

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MADV_POPULATE_WRITE = 23  # Linux 5.14
_CHUNK = 8 * 2**20  # below glibc's largest mmap threshold (32 MiB on 64-bit)
_KEEP_FREED = 2**31 - 1  # mallopt takes an int


def prefault_enabled() -> bool:
    return os.environ.get(PREFAULT_ENV, "1").strip().lower() not in ("0", "no", "false", "off")


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux") or not prefault_enabled():
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mallopt  # noqa: B018 - glibc's; musl has none
        libc.gnu_get_libc_version  # noqa: B018
    except (OSError, AttributeError):
        return None
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc


def available_memory() -> int | None:
    """The machine's available memory (``MemAvailable``), None where it cannot be read."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def bounded_request(nbytes: int, available: int | None) -> int:
    """What a worker may make resident: at most a quarter of the available memory (several
    workers may ask at once, and a large ``NCUFLOW_WORKER_BYTES`` must not push the machine
    into swapping for pages a worker may never use); nothing when it cannot be read."""
    return 0 if available is None else max(0, min(nbytes, available // 4))


def make_heap_resident(nbytes: int) -> int:
    """Make about ``nbytes`` of this process's heap resident, free for later allocations.

    Returns the bytes made resident: 0 where the platform cannot (see the module's
    docstring) or ``nbytes`` is under one chunk (8 MiB); never more than a quarter of the
    memory available. Irreversible for the process.
    """
    chunks = bounded_request(nbytes, available_memory() if nbytes >= _CHUNK else None) // _CHUNK
    libc = _libc() if chunks > 0 else None
    if libc is None:
        return 0
    if not libc.mallopt(_M_MMAP_THRESHOLD, _CHUNK * 2) or not libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_FREED):
        return 0
    page = os.sysconf("SC_PAGE_SIZE")
    blocks: list[int] = []
    resident = 0
    try:
        for _ in range(chunks):
            block = libc.malloc(_CHUNK)
            if not block:
                break
            blocks.append(block)
            start = -(-block // page) * page  # the whole pages inside the block
            length = (block + _CHUNK - start) // page * page
            if libc.madvise(start, length, _MADV_POPULATE_WRITE) != 0:
                break  # a kernel before 5.14 (EINVAL), or no memory to spare (ENOMEM): stop here
            resident += length
    finally:
        for block in blocks:
            libc.free(block)
    return resident
