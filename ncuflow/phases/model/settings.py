"""A server setting the model needs and a log may not state (SGLang's ``decode_log_interval``):
its value and where that value came from, so that every sentence using it can say so.

A format declares each such setting once, as a ``FormatOption`` row (``parse/format.py``): the
``phases`` option, its help and its default derive from that row; the format's reader resolves
the value (the log's own statement first, then the option, then the default) into one
``ServerSetting`` on each trace it returns."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


def option_flag(name: str) -> str:
    """The ``phases`` option of a server setting: named after the server's own flag."""
    return "--" + name.replace("_", "-")


class SettingSource(Enum):
    """Where a setting's value came from, most trusted first."""

    LOG = "log"  # the server printed it (SGLang's ``server_args=ServerArgs(…)`` line)
    OPTION = "option"  # given to ``ncuflow phases``
    DEFAULT = "default"  # the server's default, assumed


@dataclass(frozen=True)
class ServerSetting:
    name: str  # the server's own argument name, e.g. "decode_log_interval"
    value: int
    source: SettingSource
    line: int | None = None  # the log line that states it (``SettingSource.LOG``)
    given: int | None = None  # the option's value where the log states another

    @property
    def flag(self) -> str:
        """The ``phases`` option that sets it (named after the server's own flag)."""
        return option_flag(self.name)

    def provenance(self) -> str:
        """Where the value came from, in words: "from the log (line 3)"."""
        if self.source is SettingSource.LOG:
            return f"from the log's server arguments (line {self.line})"
        if self.source is SettingSource.OPTION:
            return f"from {self.flag}"
        return "the default (not in the log)"

    def stated(self) -> str:
        """"decode_log_interval 40, the default (not in the log)"."""
        return f"{self.name} {self.value}, {self.provenance()}"

    def disagreement(self) -> str | None:
        """A note where the option was given but the log states another value (the log's is used)."""
        if self.given is None or self.given == self.value:
            return None
        return (
            f"{self.flag} {self.given} was given, but the log's server arguments (line {self.line}) "
            f"state {self.name}={self.value}: the log's value is used"
        )
