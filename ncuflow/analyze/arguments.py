"""The values every reading command and its Python API take, checked by one rule each.

``--jobs`` and ``jobs=``, ``--top`` and ``top=``, ``--threshold`` and ``threshold=``,
``--per`` and ``per=``: the command line's option callbacks (``ncuflow.cli.options``) and
``ncuflow.output.api`` call the same function, so a value one refuses the other refuses too,
in the same words (``summary(top=-1)`` as ``--top -1``). Plain Python: no click, no polars.
"""

from __future__ import annotations

from ncuflow.errors import UsageError

POINT_KINDS = ("kernel", "launch")


def _refuse(name: str, value: object, what: str) -> UsageError:
    return UsageError(f"{name} {_shown(value)} is out of range: it must be {what}.", "", f"Give {name} {what}.")


def _shown(value: object) -> str:
    """``repr(value)`` cut to a line (``10**400`` has 401 digits; Python refuses ints over 4300)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to turn into text
        return f"an integer of {value.bit_length() if isinstance(value, int) else '?'} bits"
    return text if len(text) <= 60 else text[:50] + "…"


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
    # compared before anything converts it: 10**400 is an int no float holds (math.isfinite overflowed)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise _refuse(name, value, what)
    return float(value)


def checked_per(value: object, name: str = "per") -> str:
    """What a roofline point is: one per kernel and setting, or one per launch."""
    if value not in POINT_KINDS:
        raise _refuse(name, value, f"one of {', '.join(POINT_KINDS)}")
    return str(value)


def checked_text(value: object, name: str) -> str | None:
    """An optional text argument (``kernel=``, ``nvtx=``: what ``--kernel`` and ``--nvtx`` always
    are on the command line): None or a string."""
    if value is not None and not isinstance(value, str):
        raise UsageError(f"{name} {_shown(value)} is not text: it must be a string (or None).", "",
                         f"Give {name} as a string, e.g. {name}='decode'.")
    return value


def checked_pair(base: object, new: object, shown: str) -> tuple[str, str]:
    """One ``--pair BASE=NEW`` (``shown``: the option or argument as the user wrote it): two names, neither empty."""
    if not isinstance(base, str) or not isinstance(new, str) or not base.strip() or not new.strip():
        raise UsageError(
            f"{shown} is not BASE=NEW.",
            "--pair names a kernel of BASE and the kernel of NEW it became (a renamed kernel).",
            "Write it like --pair old_kernel=new_kernel (each a name or a regular expression); "
            "from Python, pairs=[('old_kernel', 'new_kernel')].",
        )
    return base.strip(), new.strip()


def parse_pair(text: str) -> tuple[str, str]:
    """``--pair BASE=NEW`` as (base name, new name)."""
    base, equals, new = text.partition("=")
    return checked_pair(base if equals else "", new, f"--pair {text!r}")


def checked_pairs(value: object) -> tuple[tuple[str, str], ...]:
    """``pairs=``: a sequence of (BASE, NEW) names, each checked as ``--pair`` is."""
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise UsageError(f"pairs {_shown(value)} is not a list of (BASE, NEW) names.", "",
                         "Give pairs=[('old_kernel', 'new_kernel')].")
    found = []
    for item in value:
        if not isinstance(item, list | tuple) or len(item) != 2:
            raise UsageError(f"pairs holds {_shown(item)}, which is not one (BASE, NEW) pair of names.", "",
                             "Give pairs=[('old_kernel', 'new_kernel')].")
        found.append(checked_pair(item[0], item[1], f"The pair {_shown(tuple(item))}"))
    return tuple(found)
