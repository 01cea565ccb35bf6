"""User regular expressions (``--kernel``, a sweep's ``[ncu] kernel``, a manifest's
``kernel_regex``), checked where they enter and searched in linear time.

A pattern is compiled by RE2 (Google's engine, the ``google-re2`` wheel): its search takes
time linear in the name whatever the pattern, so ``^(.+)+@$``, which Python's ``re`` takes
about 400 ms to try on a 22-character name and days on a 40-character one, takes 0.04 ms on
30 characters and 7 ms on a 2 MB name (``analysis/bench_patterns.py``). What RE2 cannot search
in linear time (backreferences such as ``(a)\\1``, lookaround such as ``(?<=a)``) it refuses to
compile, and so does ncuflow, with one paragraph, where the pattern enters: a command's
option, a sweep file (before any ncu), a manifest (the run is damaged; ``store check``
names it). Patterns are bounded in size as RE2 bounds them (``pattern too large``).

The profiling path may run where ``google-re2`` is not installed (the GPU host has no
network): there a pattern is checked and searched by Python's ``re``, which has no time
bound; ``ncuflow doctor`` says so. ncu gets the same text as ``regex:<pattern>`` and
searches it with its own engine (Boost's, which stops a runaway match with an error).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from ncuflow.errors import UsageError

# The longest pattern accepted (a kernel filter is a few dozen characters).
MAX_PATTERN_CHARS = 4096


@functools.cache
def _engine() -> Any:
    """RE2's module with errors not logged to stderr, or None where it is not installed."""
    try:
        import re2
    except ImportError:
        return None
    return re2


@functools.cache
def _options() -> Any:
    options = _engine().Options()
    options.log_errors = False  # RE2 would print its own line on stderr for each refused pattern
    return options


def linear_engine() -> str | None:
    """The name of the linear-time engine in use, or None (Python's ``re``: no time bound)."""
    return "RE2 (google-re2)" if _engine() is not None else None


class PatternError(UsageError):
    """A user's regular expression that ncuflow cannot search in linear time, or not one at all."""


@functools.lru_cache(maxsize=64)
def _compiled(text: str) -> Any:
    """``text`` compiled (RE2 where installed); raises ``ValueError`` with why it is refused."""
    if len(text) > MAX_PATTERN_CHARS:
        raise ValueError(f"it is {len(text):,} characters long, more than the {MAX_PATTERN_CHARS:,} a kernel "
                         "pattern may hold")
    engine = _engine()
    if engine is None:
        try:
            return re.compile(text)
        except (re.error, RecursionError, OverflowError) as error:
            raise ValueError(str(error)) from None
    try:
        return engine.compile(text, _options())
    except engine.error as error:
        reason = error.args[0] if error.args else error
        reason = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        raise ValueError(reason) from None


def pattern_problem(text: str) -> str | None:
    """Why ``text`` is not a pattern ncuflow accepts (None: it is one)."""
    try:
        _compiled(text)
    except ValueError as error:
        return str(error)
    return None


@dataclass(frozen=True)
class KernelPattern:
    """A checked user pattern; ``search(name)`` says whether it occurs in ``name``."""

    text: str
    _compiled: Any = field(repr=False, compare=False)

    def search(self, name: str) -> bool:
        try:
            return self._compiled.search(name) is not None
        except UnicodeEncodeError:  # a name holding a byte that was not UTF-8 (a surrogate)
            return self._compiled.search(name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")) is not None


def kernel_pattern(text: str, *, option: str = "--kernel") -> KernelPattern:
    """``text`` as a ``KernelPattern``; a ``PatternError`` paragraph naming ``option`` where refused."""
    try:
        return KernelPattern(text, _compiled(text))
    except ValueError as error:
        raise PatternError(
            f"{option} {_shown(text)} is not a pattern ncuflow can search: {error}.",
            "Kernel patterns are regular expressions searched in the kernel's name in linear time (RE2), which "
            "refuses what it cannot search so: backreferences such as \\1, lookaround such as (?<=...), a "
            "repetition count over 1000.",
            "Quote it in the shell, and write it without those, e.g. --kernel 'decode.*' or '^gemm_(f16|bf16)'.",
        ) from None


def _shown(text: str) -> str:
    return repr(text if len(text) <= 120 else text[:100] + "…")
