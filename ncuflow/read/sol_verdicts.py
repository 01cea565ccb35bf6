"""ncu's speed-of-light verdicts, one row each: the name ncu gives it, its class, and how its message reads.

The ``SOLBottleneck`` rule (``SpeedOfLight.py``, shipped with every ncu) titles its result with the
verdict ("Latency Issue", "High Throughput" ...). ncu 2020.x wrote the result with an empty title:
there the verdict is known only from the message, whose wording each version keeps ("This kernel
exhibits low compute throughput and memory bandwidth utilization ..." is a latency issue). The
name read from the title, or recognised from the message, is shown as ncu names it; the class
(memory / compute / latency / balanced / high) is what ncuflow's own verdict is compared against.
A message that is none of these (the rule's own error, "Rule Bottleneck returned an error ...")
gives no verdict.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SolVerdict:
    """One verdict of ncu's SOLBottleneck rule."""

    name: str  # as ncu titles it
    category: str  # memory / compute / latency / balanced / high (either class over 80 %)
    phrases: tuple[str, ...]  # words its message holds, in every ncu version seen (lower case)


SOL_VERDICTS: tuple[SolVerdict, ...] = (
    SolVerdict("Latency Issue", "latency", ("low compute throughput and memory bandwidth utilization",)),
    SolVerdict("Small Grid", "latency", ("grid is too small to fill the available resources",)),
    SolVerdict("High Compute Throughput", "compute", ("compute is more heavily utilized than memory",)),
    SolVerdict("High Memory Throughput", "memory", ("memory is more heavily utilized than compute",)),
    SolVerdict("Balanced Throughput", "balanced", ("compute and memory are well-balanced",)),
    SolVerdict("High Throughput", "high", ("utilizing greater than",)),
)
_BY_NAME = {verdict.name.lower(): verdict for verdict in SOL_VERDICTS}
_BY_NAME["latency issues"] = _BY_NAME["latency issue"]  # an older title's plural


def sol_verdict_named(title: str) -> SolVerdict | None:
    """The verdict a rule title names (case and surrounding blanks ignored)."""
    return _BY_NAME.get(title.strip().lower())


def sol_verdict_of_message(message: str) -> SolVerdict | None:
    """The verdict a rule message words (ncu 2020.x's results carry no title); None for any other message."""
    text = message[:2000].lower()
    return next((verdict for verdict in SOL_VERDICTS if any(phrase in text for phrase in verdict.phrases)), None)


def sol_verdict_name(title: str, message: str) -> str | None:
    """NVIDIA's verdict as ncu names it: the title where there is one, else the one the message words."""
    if title.strip():
        return title
    verdict = sol_verdict_of_message(message)
    return verdict.name if verdict is not None else None
