"""One term of the max model for one launch: its utilization and where it came from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    """One term of the max model for one launch."""

    name: str
    utilization: float | None
    source: str | None  # the metric or formula the value came from
    unavailable: str | None = None  # why it is None: the metric(s) missing
    unit: str | None = None  # the hardware unit that sets it, in words ("LSU pipe")

    @property
    def available(self) -> bool:
        return self.utilization is not None

    def text(self) -> str:
        if self.utilization is None:
            return f"u_{self.name} unavailable ({self.unavailable})"
        where = f"{self.unit}: {self.source}" if self.unit else self.source
        return f"u_{self.name}={self.utilization:.2f} ({where})"
