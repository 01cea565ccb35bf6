#!/usr/bin/env python3
"""Kernel patterns: the time of one search, Python's re beside the engine ncuflow uses (RE2).

    python analysis/bench_patterns.py

For each pattern, names of growing length (a 22-character name, the lengths of real kernel
names, the 50,000-character and 2 MB names of the fault suite). Python's re is run only where
it ends in reasonable time (its time doubles with each character for ``^(.+)+@$``); the
``regex`` module (with its ``timeout``) is shown where it is installed, as the alternative
weighed. Prints one line per pattern and length.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ncuflow.files.patterns import kernel_pattern, linear_engine

# The first two backtrack catastrophically in Python's re on a name they do not match.
PATTERNS = (r"^(.+)+@$", r"^(\w+\s?)*$", r"decode.*", r"gemm|conv")
CATASTROPHIC = PATTERNS[:2]
LENGTHS = (18, 22, 30, 200, 50_000, 2_000_000)
# Python's re on the catastrophic patterns: tried up to this many characters (22: about 0.4 s).
RE_CATASTROPHIC_MAX = 22


def _ms(search: Callable[..., object], *args: object, **kwargs: object) -> float:
    started = time.perf_counter()
    search(*args, **kwargs)
    return (time.perf_counter() - started) * 1e3


def _regex_module() -> object | None:
    try:
        import regex
    except ImportError:
        return None
    return regex


def main() -> None:
    regex = _regex_module()
    print(f"engine: {linear_engine() or 'none (Python re)'}; regex module: {'yes' if regex else 'not installed'}")
    for text in PATTERNS:
        pattern = kernel_pattern(text)
        catastrophic = text in CATASTROPHIC
        for length in LENGTHS:
            name = "a" * (length - 1) + "!"  # matched by none of the patterns
            ours = _ms(pattern.search, name)
            python_re = (f"{_ms(re.search, text, name):10.3f} ms"
                         if not catastrophic or length <= RE_CATASTROPHIC_MAX else "  (not run: exponential)")
            other = ""
            if regex is not None:
                try:
                    other = f" | regex {_ms(regex.search, text, name, timeout=5.0):9.3f} ms"  # type: ignore[attr-defined]
                except TimeoutError:
                    other = " | regex timed out (5 s)"
            print(f"{text!r:16} {length:>9,} chars: RE2 {ours:9.3f} ms | re {python_re}{other}")


if __name__ == "__main__":
    main()
