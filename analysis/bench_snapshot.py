"""Reading the user's report into memory against mapping it: the cost of the copy-safe path, side by side.

ncuflow's reader reads a report whole into memory (``reportformat._snapshot``) instead of mapping
it, since a mapped file that another process truncates or rewrites kills the reader with SIGBUS
(issue 38). This script reads the corpus in one process both ways, alternating, best of N, and
prints the ratio: ``python analysis/bench_snapshot.py [REPORTS_DIR] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import glob
import mmap
import os
import time
import warnings
from pathlib import Path
from typing import IO, Any

from ncuflow.read import reportformat
from ncuflow.read.extract import read_launches
from ncuflow.read.readers import reading_with


def _mapped(path: Path, handle: IO[bytes]) -> tuple[Any, IO[bytes] | None]:
    """The former way: the file mapped (no copy, and SIGBUS where it changes)."""
    if os.fstat(handle.fileno()).st_size == 0:
        return b"", None
    return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ), None


def _read_all(paths: list[Path]) -> float:
    started = time.perf_counter()
    for path in paths:
        read_launches(path)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="?", default=str(Path(__file__).resolve().parents[1] / "../shared/ncu-reports"))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    paths = sorted(Path(p) for p in glob.glob(os.path.join(args.reports, "*.ncu-rep")))
    warnings.simplefilter("ignore")
    read_into_memory = reportformat._snapshot
    best = {"read": float("inf"), "mapped": float("inf")}
    with reading_with("ncuflow"):
        _read_all(paths)  # warm: page cache, string tables, plans
        for _ in range(args.rounds):
            for way, function in (("read", read_into_memory), ("mapped", _mapped)):
                reportformat._snapshot = function  # type: ignore[assignment]
                try:
                    best[way] = min(best[way], _read_all(paths))
                finally:
                    reportformat._snapshot = read_into_memory
    size = sum(p.stat().st_size for p in paths) / 2**20
    print(f"{len(paths)} reports ({size:.0f} MiB), one process, best of {args.rounds}:")
    print(f"  read into memory  {best['read']:.3f} s")
    print(f"  mapped            {best['mapped']:.3f} s")
    print(f"  read / mapped     {best['read'] / best['mapped']:.3f}x")


if __name__ == "__main__":
    main()
