"""A ``.ncu-repz``'s content, decompressed frame by frame within a stated bound, and checked whole.

A ``.ncu-repz`` is a report inside zstd frames. Its content is yielded in pieces of at most
``PIECE`` input bytes' worth (a zstd block of 4 bytes can expand to 128 KiB, so a piece is
never more than 32 MiB), each checked against the bound before the caller writes it:
at most ``MAX_EXPANSION`` times the file's size (real reports compress 4-42× at zstd's
level 19): the piece that would pass it is refused before it is written. Skippable frames
(no content: padding) are passed over, and their bytes do not count as the file's size once
passed (a 412 KB file of 400 KB padding held 100 MB of crafted entries). A file that ends inside a frame is
cut off, and said so (zstd's own readers end quietly there: the content was empty, and
"does not start with the report signature (b'')" was all a user learned).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ncuflow.errors import ReportError

MAX_EXPANSION = 100  # a .ncu-repz expands a few times; more than this is no report
PIECE = 1 << 10  # compressed bytes fed at a time: at most 256 zstd blocks (4 bytes each at least) of 128 KiB


def expansion_limit(size: int) -> int:
    """The most a compressed report of ``size`` bytes (padding left out) may expand to:
    ``MAX_EXPANSION`` times its size."""
    return MAX_EXPANSION * max(size, 0)


def _too_large(path: Path, limit: int) -> ReportError:
    return ReportError(
        f"{path} is not a compressed report ncuflow reads: it expands to more than {MAX_EXPANSION} times its "
        f"size ({limit:,} bytes).",
        "A .ncu-repz is an Nsight Compute report inside a zstd container; reports compress a few times "
        "(4-42× at zstd's level 19), and this file would fill the temporary folder.",
        "Pass a report that ncu wrote (check the file's origin), or its uncompressed .ncu-rep.",
    )


def _cut(path: Path, frames: int, written: int) -> ReportError:
    return ReportError(
        f"{path} is cut off: the file ends inside zstd frame {frames + 1}, after {written:,} bytes of its "
        "report were decompressed.",
        "A .ncu-repz is an Nsight Compute report inside a zstd container; a copy or a download that "
        "stopped early leaves its last frame incomplete.",
        "Copy the complete file again, or export the report again from Nsight Compute.",
    )


def zstd_content(path: Path, handle: IO[bytes]) -> Iterator[bytes]:
    """The content of every zstd frame of ``handle`` from its start, in pieces; raises
    ``ReportError`` past ``expansion_limit`` of the file's size (the bytes of frames that hold
    no content, padding, left out of it once passed) or for a file that ends inside a frame,
    and lets ``zstandard.ZstdError`` through for bytes that are no zstd."""
    import zstandard

    size = os.fstat(handle.fileno()).st_size
    handle.seek(0)
    written = frames = padding = 0
    frame, pending, fed, frame_written = None, b"", 0, 0
    while True:
        if not pending:
            pending = handle.read(PIECE)
            if not pending:
                break
        if frame is None:
            frame, fed, frame_written = zstandard.ZstdDecompressor().decompressobj(), 0, 0
        fed += len(pending)
        piece = frame.decompress(pending)
        pending = b""
        written, frame_written = written + len(piece), frame_written + len(piece)
        if written > expansion_limit(size - padding):  # before the piece is written anywhere
            raise _too_large(path, expansion_limit(size - padding))
        if piece:
            yield piece
        if frame.eof:
            pending, frame, frames = frame.unused_data, None, frames + 1
            padding += 0 if frame_written else fed - len(pending)  # a skippable frame: no content
    if frame is not None:
        raise _cut(path, frames, written)
    if written > expansion_limit(size - padding):  # padding after the content, found at the end
        raise _too_large(path, expansion_limit(size - padding))
