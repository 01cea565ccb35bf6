"""The values every reading command and its Python API take, checked by one rule each.

``--jobs`` and ``jobs=``, ``--top`` and ``top=``, ``--threshold`` and ``threshold=``,
``--per`` and ``per=``: the command line's option callbacks (``ncuflow.cli.options``) and
``ncuflow.output.api`` call the same function, so a value one refuses the other refuses too,
in the same words (``summary(top=-1)`` as ``--top -1``). Plain Python: no click, no polars.
"""

from __future__ import annotations

import math

from ncuflow.errors import UsageError

POINT_KINDS = ("kernel", "launch")


def _refuse(name: str, value: object, what: str) -> UsageError:
    return UsageError(f"{name} {value!r} is out of range: it must be {what}.", "", f"Give {name} {what}.")


def whole_number(value: object, *, name: str, minimum: int) -> int:
    """``value`` as an ``int`` of at least ``minimum`` (a bool, a float or a string is refused)."""
    what = f"a whole number of at least {minimum}"
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise _refuse(name, value, what)
    return value


def checked_jobs(value: object, name: str = "jobs") -> int | None:
    """Worker processes: None (the default), 0 (this process reads everything) or more."""
    return None if value is None else whole_number(value, name=name, minimum=0)


def checked_top(value: object, name: str = "top") -> int | None:
    """How many kernels a summary shows per report: None (all) or at least 1."""
    return None if value is None else whole_number(value, name=name, minimum=1)


def checked_threshold(value: object, name: str = "threshold") -> float:
    """The max model's on-wall threshold: a finite number in (0, 1]."""
    what = "a finite number above 0 and at most 1"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not 0 < value <= 1:
        raise _refuse(name, value, what)
    return float(value)


def checked_per(value: object, name: str = "per") -> str:
    """What a roofline point is: one per kernel and setting, or one per launch."""
    if value not in POINT_KINDS:
        raise _refuse(name, value, f"one of {', '.join(POINT_KINDS)}")
    return str(value)
