"""Runs this user cannot read: "cannot be read" is its own state, never "damaged".

A run folder of mode 000, a manifest or a report without read permission (root without
CAP_DAC_OVERRIDE, another user's store) is whole as far as anyone can tell: its files must
not be reported as missing or empty, and ``store check --repair`` and ``sweep`` must never
move it aside. ``unreadable(folder)`` tries what a reader does (list the folder, open its
files) and names the first refusal; a folder that cannot be listed at a store's upper levels
(a cell or point folder) is named by ``listing``. Plain ``os`` calls only.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

# The errors that mean "not allowed", not "not there" or "broken".
DENIED = (errno.EACCES, errno.EPERM)


def _denied(error: OSError) -> bool:
    return error.errno in DENIED


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def unreadable(folder: Path, names: tuple[str, ...]) -> str | None:
    """Why ``folder`` or one of its files ``names`` cannot be read by this user (None: all can)."""
    try:
        present = set(os.listdir(folder))
    except OSError as error:
        return f"the run folder cannot be read ({_reason(error)})" if _denied(error) else None
    for name in names:
        if name not in present:
            continue
        try:
            descriptor = os.open(folder / name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError as error:
            if _denied(error):
                return f"{name} cannot be read ({_reason(error)})"
            continue
        os.close(descriptor)
    return None


def listing(folder: Path) -> tuple[list[Path], str | None]:
    """The entries of ``folder`` and None, or no entries and why it cannot be read (no permission).
    Any other error (gone meanwhile, not a folder) is an empty listing, as before."""
    try:
        return [folder / name for name in os.listdir(folder)], None
    except OSError as error:
        return [], (f"the folder cannot be read ({_reason(error)})" if _denied(error) else None)
