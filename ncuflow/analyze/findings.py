"""NVIDIA's findings under the verdict: which wall each concerns, ranked by estimated speedup.

A finding (``ncuflow.read.findings.Finding``) is tied to the walls of the max model it is
about by its rule, one row per rule identifier (``RULE_TERMS``): bank conflicts and
uncoalesced accesses are L1's (and L2's, whose sectors they waste), the occupancy, warp-stall
and launch-configuration rules are about latency, NVIDIA's speed-of-light rule about whichever
wall binds. Where one rule's messages are about different walls (``CPIStall`` names one stall
reason per message: "Not Selected Stalls" are warps ready to issue that the scheduler passed
over, an issue limit, not a latency), the row names the wall per kind of message
(``MessageTerms``, matched on the message's title); its other messages keep the row's walls.
A rule no row names is ``other``: shown, never guessed at. ``ranked`` orders a
launch's findings as ``classify --evidence`` lists them: those with an estimated speedup
first, the binding wall's before the other walls', each by estimate (largest first); then
those without an estimate (NVIDIA's notes: "Balanced", "Roofline Analysis"), the binding
wall's first; the report's order among equals. Findings that say nothing (no title, no message, no speedup:
what ncu writes for a rule's source table) are left out of the ranking, not of the data.
``top_ranked`` is the first of that ranking with an estimate: a kernel's top finding wherever one is
shown (``summary``, each side of ``compare --markdown``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ncuflow.read.findings import Finding, RuleResults
from ncuflow.terms import BOUND_NAMES, TERM_NAMES

OTHER = "other"
_LATENCY = "latency"
_WALLS = (*TERM_NAMES, _LATENCY)


def message_kind(title: str) -> str:
    """A message's title as a kind of message: ncu 2023+ writes 'Not Selected Stalls', older ncu
    'not_selected'; both are 'not selected'."""
    return " ".join(title.replace("_", " ").lower().split()).removesuffix(" stalls")


def _check_walls(where: str, terms: tuple[str, ...]) -> None:
    unknown = [t for t in terms if t not in BOUND_NAMES]
    if unknown:
        raise ValueError(f"{where}: {unknown} are no walls ({', '.join(_WALLS)})")


@dataclass(frozen=True)
class MessageTerms:
    """One kind of message of a rule whose messages are about different walls (by its title)."""

    title: str  # the title as ncu 2023+ writes it, e.g. "Not Selected Stalls"
    terms: tuple[str, ...]
    why: str

    def __post_init__(self) -> None:
        _check_walls(f"message {self.title}", self.terms)


@dataclass(frozen=True)
class RuleTerms:
    """One of NVIDIA's rules and the walls its findings are about (none: ``other``); ``messages``:
    the kinds of its messages that are about other walls than the rule's."""

    rule: str
    terms: tuple[str, ...]
    why: str
    messages: tuple[MessageTerms, ...] = ()

    def __post_init__(self) -> None:
        _check_walls(f"rule {self.rule}", self.terms)

    def terms_for(self, title: str) -> tuple[str, ...]:
        """The walls of the message titled ``title``: its kind's row, else the rule's."""
        kind = message_kind(title)
        return next((m.terms for m in self.messages if message_kind(m.title) == kind), self.terms)


RULES: tuple[RuleTerms, ...] = (
    RuleTerms("SOLBottleneck", _WALLS, "NVIDIA's speed-of-light verdict: about whichever wall binds"),
    RuleTerms("Memory", ("dram", "l2", "l1"), "the memory units' throughput"),
    RuleTerms("Compute", ("issue", "pipe", "math"), "the SM's compute throughput"),
    RuleTerms("SOLFPRoofline", ("math",), "floating-point throughput against the roofline"),
    RuleTerms("HighPipeUtilization", ("pipe", "math"), "the most used instruction pipeline"),
    RuleTerms("SlowPipeLimiter", ("math", "pipe"), "a slow pipeline (FP64, XU) that limits issue"),
    RuleTerms("FPInstructions", ("math",), "fused vs non-fused floating-point instructions"),
    RuleTerms("IssueSlotUtilization", ("issue",), "the schedulers' issue slots"),
    RuleTerms("ThreadDivergence", ("issue",), "issued instructions with inactive lanes"),
    RuleTerms("SharedMemoryConflicts", ("l1", "pipe"), "shared-memory bank conflicts: extra L1 wavefronts"),
    RuleTerms("UncoalescedSharedAccess", ("l1",), "excess shared-memory wavefronts in L1"),
    RuleTerms("UncoalescedGlobalAccess", ("l1", "l2"), "excess global sectors between L1 and L2"),
    RuleTerms("MemoryCacheAccessPattern", ("l1", "l2", "dram"), "sectors per request at L1, L2 and DRAM"),
    RuleTerms("MemoryL2Compression", ("l2", "dram"), "L2 compression of the data written"),
    RuleTerms("MemoryApertureUsage", ("l1",), "local and shared accesses through the generic aperture"),
    RuleTerms("Occupancy", (_LATENCY,), "warps resident per SM: what hides latency"),
    RuleTerms("TheoreticalOccupancy", (_LATENCY,), "the occupancy the launch configuration allows"),
    RuleTerms("AchievedOccupancy", (_LATENCY,), "the occupancy reached against the theoretical"),
    RuleTerms("LaunchConfiguration", (_LATENCY,), "a grid too small for the GPU, or its tail"),
    RuleTerms("WorkloadImbalance", (_LATENCY,), "work spread unevenly over SMs or cache slices"),
    RuleTerms("CPIStall", (_LATENCY,), "why warps stall between instructions", messages=(
        MessageTerms("Not Selected Stalls", ("issue",), "warps ready to issue that the scheduler passed over"),
        MessageTerms("Math Pipe Throttle Stalls", ("pipe",), "waits for a math pipeline to be free"),
        MessageTerms("LG Throttle Stalls", ("l1",), "waits for L1's local/global instruction queue to have room"),
    )),
    RuleTerms("CPIStallWait", (_LATENCY,), "fixed-latency waits between instructions"),
    RuleTerms("CPIStallLongScoreboard", (_LATENCY,), "waits for L1TEX (global, local, texture) results"),
    RuleTerms("CPIStallBarrier", (_LATENCY,), "waits at barriers"),
)
RULE_TERMS: Mapping[str, RuleTerms] = {row.rule: row for row in RULES}


def terms_of(rule: str, title: str = "") -> tuple[str, ...]:
    """The walls a rule's message titled ``title`` is about (the rule's, unless its row names that
    kind of message); () for a rule no row names (``other``)."""
    row = RULE_TERMS.get(rule)
    return row.terms_for(title) if row is not None else ()


def concerns(finding: Finding) -> tuple[str, ...]:
    """The walls a finding is about: its rule's, or its kind of message's (``terms_of``)."""
    return terms_of(finding.rule, finding.title)


@dataclass(frozen=True)
class RankedFinding:
    """A finding with the walls it concerns, and whether the binding wall is one of them."""

    finding: Finding
    terms: tuple[str, ...]
    on_binding: bool

    def concerns(self, bound: str) -> str:
        """The wall to name beside it: the binding one where it concerns it, else its walls or 'other'."""
        if self.on_binding and bound in self.terms:
            return bound
        return "/".join(self.terms) if self.terms else OTHER


def says_something(finding: Finding) -> bool:
    """Whether a finding has a title, a message or a speedup (ncu writes empty ones for its tables)."""
    return bool(finding.title or finding.message or finding.speedup is not None)


def ranked(results: RuleResults, bound: str) -> tuple[RankedFinding, ...]:
    """The findings that say something: those with an estimated speedup first, the binding wall's
    before the rest, each by estimate (largest first); then the others, the binding wall's first;
    the report's order among equals."""
    tied = [RankedFinding(f, concerns(f), bound in concerns(f)) for f in results.findings if says_something(f)]
    return tuple(sorted(tied, key=_rank))


def _rank(item: RankedFinding) -> tuple[bool, bool, float]:
    return item.finding.speedup is None, not item.on_binding, _speedup_key(item.finding)


def _speedup_key(finding: Finding) -> float:
    return -finding.speedup if finding.speedup is not None else float("inf")


@dataclass(frozen=True)
class PooledFinding:
    """A finding as several launches of one kernel give it (by rule and title): the estimate of the
    launch that gives the largest, and on how many launches it is found."""

    item: RankedFinding
    launches: int


def pooled(results: Sequence[RuleResults | None], bound: str) -> tuple[PooledFinding, ...]:
    """The findings of a kernel's launches by rule and title, ranked as ``ranked`` ranks one launch's."""
    best: dict[tuple[str, str], RankedFinding] = {}
    counts: dict[tuple[str, str], int] = {}
    for launch in results:
        seen: set[tuple[str, str]] = set()
        for item in ranked(launch, bound) if launch is not None else ():
            key = (item.finding.rule, item.finding.heading)
            if key not in best or _speedup_key(item.finding) < _speedup_key(best[key].finding):
                best[key] = item
            seen.add(key)
        for key in seen:
            counts[key] = counts.get(key, 0) + 1
    items = list(best.items())
    items.sort(key=lambda pair: _rank(pair[1]))
    return tuple(PooledFinding(item, counts[key]) for key, item in items)


def top_ranked(results: Sequence[RuleResults | None], bound: str) -> Finding | None:
    """A kernel's top finding, as ``classify --evidence`` ranks its launches' findings (``pooled``): the
    largest estimated speedup among those about the binding wall ``bound``, else the largest among the
    others (None where none estimates one)."""
    return next((p.item.finding for p in pooled(results, bound) if p.item.finding.speedup is not None), None)


def held(results: Sequence[RuleResults | None]) -> bool | None:
    """Whether any launch holds rule results (None: none of them was read for findings)."""
    read = [r for r in results if r is not None]
    return any(r.held for r in read) if read else None
