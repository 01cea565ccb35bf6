"""Values of JSON traces (JSONL requests, bench_serving results), checked once where they enter.

``loads`` reads JSON text whose integers have at most ``MAX_DIGITS`` digits (Python's own
limit, 4,300, raises ``ValueError`` deep in ``json``; a 5,000-digit integer is no time or
count of a trace); nesting beyond the interpreter's limit is its ``RecursionError``. Both
become ``BadJson`` with a sentence for the user, as does text that is no JSON.

A time is a finite number of seconds of at most ``MAX_SECONDS`` in size (``time.time()`` is
under 2·10^9; 1e308 is no time and overflows every sum made of it), a duration (TTFT,
inter-token latency) one from 0 to ``MAX_DURATION_S``, a count (output tokens) a whole
number from 0 to ``MAX_COUNT`` (and a request's output tokens at most
``MAX_TOKENS_PER_CHUNK`` times the chunks it streamed). The parsers name the file, line and field of a value that is
none of these, in one paragraph.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ncuflow.phases.parse.values import MAX_COUNT

MAX_DIGITS = 40
MAX_SECONDS = 1e10  # the year 2286 on the Unix clock
MAX_DURATION_S = 1e6  # 11.6 days for one token, or one request's first token
# A streamed chunk carries one token, a few under speculative decoding or a stream interval;
# a request declaring more than this many per chunk it streamed declares what it did not send.
MAX_TOKENS_PER_CHUNK = 64


class BadJson(ValueError):
    """JSON text that cannot be read; ``str`` says why in a few words."""


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise BadJson(f"an integer of {len(text.lstrip('-')):,} digits")
    return int(text)


def loads(text: str) -> Any:
    """``json.loads`` with integers bounded; every failure is ``BadJson``."""
    try:
        return json.loads(text, parse_int=_integer)
    except BadJson:
        raise
    except json.JSONDecodeError as error:
        raise BadJson(f"not valid JSON ({error.msg} at column {error.colno})") from None
    except RecursionError:
        raise BadJson("JSON nested too deeply to read") from None
    except ValueError as error:  # what json refuses beyond syntax
        raise BadJson(f"JSON that cannot be read ({str(error)[:80]})") from None


def _real(value: Any) -> float | None:
    """``value`` as a float when it is a JSON number that is finite (never a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        return float(value) if abs(value) <= MAX_SECONDS * 10 else math.inf
    return value if math.isfinite(value) else None


def seconds_or_none(value: Any) -> float | None:
    """A time on any clock: a finite number of seconds no larger than ``MAX_SECONDS``."""
    real = _real(value)
    return real if real is not None and abs(real) <= MAX_SECONDS else None


def duration_or_none(value: Any) -> float | None:
    """A duration: a finite number of seconds from 0 to ``MAX_DURATION_S``."""
    real = _real(value)
    return real if real is not None and 0 <= real <= MAX_DURATION_S else None


def count_or_none(value: Any, low: int = 0, high: int = MAX_COUNT) -> int | None:
    """A count: a whole number (not a bool) from ``low`` to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return None
    return value


def shown(value: Any) -> str:
    """A value as a message shows it: short whatever it holds."""
    if isinstance(value, list):
        return f"a list of {len(value):,} item(s)"
    if isinstance(value, dict):
        return f"an object of {len(value):,} key(s)"
    text = repr(value[:60] if isinstance(value, str) else value)
    return text if len(text) <= 60 else text[:57] + "…"
