"""Is DCGM holding the GPU's profiling counters? Its host engine, ``nv-hostengine``, found among
this machine's processes.

DCGM's profiling module (what dcgm-exporter's ``DCGM_FI_PROF_*`` fields read) takes the same
performance counters ncu needs; while it watches them, ncu fails with "a driver resource was
unavailable". NVIDIA's fix is to pause DCGM's profiling for the duration of the profile
(``dcgmi profile --pause``, then ``--resume``). Only processes this machine's ``/proc`` shows are
seen: a host engine outside a container is not.
"""

from __future__ import annotations

from pathlib import Path

HOST_ENGINE = "nv-hostengine"  # the process name (/proc/PID/comm) of DCGM's host engine
PAUSE = "dcgmi profile --pause"
RESUME = "dcgmi profile --resume"
PROC = Path("/proc")
_COMM_BYTES = 64  # a process name is at most 15 characters; more is not a name


def host_engine_pids(proc: Path = PROC) -> tuple[int, ...]:
    """The ids of the running processes named ``nv-hostengine`` (none where ``proc`` cannot be read)."""
    found: list[int] = []
    try:
        entries = list(proc.iterdir())
    except OSError:
        return ()
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            with open(entry / "comm", "rb") as comm:
                name = comm.read(_COMM_BYTES)
        except OSError:  # the process ended, or may not be looked at
            continue
        if name.strip() == HOST_ENGINE.encode():
            found.append(int(entry.name))
    return tuple(sorted(found))
