"""Values of server-log lines, checked once where they enter.

A count (``#running-req``, ``Running:``…) is a whole number from 0 to ``MAX_COUNT``; a rate
or a duration is a finite, non-negative decimal number; a timestamp is a real date and time.
Anything else (``nan``, ``inf``, ``99999999999999999999999``, ``2026-13-45``) raises
``BadValue``, which the parsers turn into one paragraph naming the file and line (or, with
``--skip-malformed``, a line left out and counted). Fields are split at commas, then at the
first colon, so reading a line costs time linear in its length whatever it holds.
"""

from __future__ import annotations

import datetime
import math
import re

MAX_COUNT = 1_000_000_000
MAX_RATE = 1e12
DECIMAL = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


class BadValue(ValueError):
    """A field whose value is not what the format promises (key, the text as written)."""

    def __init__(self, key: str, text: str, expected: str) -> None:
        self.key, self.text, self.expected = key, text, expected
        super().__init__(f"'{key}: {text[:40]}' is not {expected}")


def split_fields(text: str, separator: str = ":") -> dict[str, str]:
    """``key: value`` pairs of a comma-separated list (values keep their text; a trailing
    ``%`` is dropped). Linear in the length of ``text``."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, found, value = part.partition(separator)
        if found:
            key = key.strip()
            if key and key not in fields:
                fields[key] = value.strip().removesuffix("%").strip()
    return fields


def count_value(key: str, text: str) -> int:
    if len(text) < 10 and text.isascii() and text.isdigit():
        return int(text)
    if len(text) == 10 and text.isascii() and text.isdigit() and int(text) <= MAX_COUNT:
        return int(text)
    raise BadValue(key, text, f"a count (a whole number from 0 to {MAX_COUNT:,})")


def rate_value(key: str, text: str) -> float:
    if not DECIMAL.fullmatch(text):
        raise BadValue(key, text, "a finite, non-negative number")
    value = float(text)
    if not math.isfinite(value) or value > MAX_RATE:
        raise BadValue(key, text, "a finite, non-negative number")
    return value


def optional_rate(fields: dict[str, str], key: str) -> float | None:
    return rate_value(key, fields[key]) if key in fields else None


class LogClock:
    """Seconds since the first valid timestamp of a log ("t = 0", at its whole second).

    Dates are checked once each (``2026-13-45`` raises ``BadValue``); times of day are
    checked on every line. ``year`` stands in for logs whose stamps have none (vLLM: 2000,
    a leap year, so that 02-29 is a date)."""

    def __init__(self) -> None:
        self._days: dict[str, int] = {}
        self.origin_s: float | None = None
        self.origin_text = ""

    def absolute(self, date: str, time: str, frac: str | None) -> float:
        days = self._days.get(date)
        if days is None:
            try:
                year, month, day = (int(p) for p in date.split("-"))
                days = datetime.date(year, month, day).toordinal()
            except ValueError:
                raise BadValue("timestamp", f"{date} {time}", "a real date") from None
            self._days[date] = days
        hour, minute, second = int(time[0:2]), int(time[3:5]), int(time[6:8])
        if hour > 23 or minute > 59 or second > 60:
            raise BadValue("timestamp", f"{date} {time}", "a real time of day")
        return days * 86400.0 + hour * 3600 + minute * 60 + second + (float("0." + frac) if frac else 0.0)

    def seconds(self, date: str, time: str, frac: str | None) -> float:
        """Seconds since t = 0; the first valid stamp sets t = 0 (at its whole second)."""
        moment = self.absolute(date, time, frac)
        if self.origin_s is None:
            self.origin_s = math.floor(moment)
            self.origin_text = f"{date} {time}"
        return moment - self.origin_s


class TimeOfDayDates:
    """Dates for stamps that print only the time of day (SGLang 0.3's ``[HH:MM:SS TP0]``): a
    stand-in first day (2000-01-01, as vLLM's stand-in year), and each stamp dated on the day
    that puts it nearest the stamp before it, so a log that runs past midnight goes on (and a
    line of another rank a second behind, across midnight, stays on the day before)."""

    FIRST_DAY = datetime.date(2000, 1, 1)

    def __init__(self) -> None:
        self._last: int | None = None  # seconds since the stand-in first day's midnight

    def date_of(self, time: str) -> str:
        of_day = int(time[0:2]) * 3600 + int(time[3:5]) * 60 + int(time[6:8])
        day = 0 if self._last is None else round((self._last - of_day) / 86400)
        self._last = day * 86400 + of_day
        return (self.FIRST_DAY + datetime.timedelta(days=day)).isoformat()

