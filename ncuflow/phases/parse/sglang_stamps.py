"""The timestamps of SGLang's log lines: ``[date time]``, ``[date time TP0]``, ``[date time
DPk TPk EPk]``, with or without fractional seconds, and SGLang 0.3's date-less ``[HH:MM:SS
TP0]`` (dated on a stand-in day that rolls over at midnight: ``values.TimeOfDayDates``).
A line's stamp gives its seconds since t = 0 and its rank tags."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ncuflow.phases.parse.values import LogClock, TimeOfDayDates

TIMESTAMP = re.compile(
    r"^\[(?:(?P<date>\d{4}-\d{2}-\d{2})[ T])?(?P<time>\d{2}:\d{2}:\d{2})(?:[.,](?P<frac>\d{1,6}))?"
    r"(?P<tags>(?:\s+[A-Z]+\d+)*)\s*\]"
)


@dataclass
class SglangStamps:
    """The clock of one SGLang log, read from its lines' stamps."""

    clock: LogClock = field(default_factory=LogClock)
    undated: TimeOfDayDates | None = None  # stamps without a date (SGLang 0.3: "[HH:MM:SS TP0]")
    any_fraction: bool = False
    seconds_of: dict[str, float] = field(default_factory=dict)  # "date time" → seconds

    @property
    def started(self) -> bool:
        return self.clock.origin_s is not None

    def time_of(self, line: str) -> tuple[float, str] | None:
        """(seconds since t = 0, rank tags) of a line's timestamp; raises ``BadValue``."""
        stamp = TIMESTAMP.match(line)
        if not stamp:
            return None
        date, time, frac = stamp.group("date", "time", "frac")
        if date is None:
            self.undated = self.undated or TimeOfDayDates()
            date = self.undated.date_of(time)
        key = date + time
        whole = self.seconds_of.get(key)
        if whole is None:
            if len(self.seconds_of) > 4096:
                self.seconds_of.clear()
            whole = self.seconds_of[key] = self.clock.seconds(date, time, None)
        if frac:
            self.any_fraction = True
            return whole + float("0." + frac), stamp.group("tags") or ""
        return whole, stamp.group("tags") or ""

    @property
    def resolution_s(self) -> float:
        return 0.001 if self.any_fraction else 1.0

    def clock_origin(self) -> str:
        """The wall-clock text of t = 0 (the time of day alone where the log prints no date)."""
        text = self.clock.origin_text
        return text.partition(" ")[2] if self.undated is not None and text.startswith("2000-") else text
