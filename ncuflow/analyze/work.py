"""Which launches do the same work: a measurement split by the work its launches did.

Replay stability compares launches that should be measurements of one thing. Two launches
of one kernel with one launch configuration may still do different work: a kernel called
with another offset, another input size hidden in its arguments, a scan whose look-back
spins longer. Their counters then differ because the work differs, not because the
measurement is noisy. So replicas are judged only among launches doing the same work.

The work of a launch is what the program asks of the GPU: the instructions it executes and
the global-load requests they make (``fields.IDENTITY_FIELDS``: ``inst_executed``,
``global_ld_inst``, ``global_ld_requests``). They are fixed by the program and its inputs:
identical in every H200 replica and in every repeated launch of the corpus that is a real
repeat. Launches that differ in any of them did different work.

Pure functions over ``Measurement`` records; no polars, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from ncuflow.analyze.fields import IDENTITY_FIELDS, format_value
from ncuflow.analyze.measurement import Measurement
from ncuflow.read.launch import Launch

WorkKey = tuple[float | None, ...]


@dataclass(frozen=True)
class Work:
    """One work a measurement's launches did: the identity counters' values, and how many did it."""

    values: tuple[tuple[str, float | None], ...]  # identity field -> value (None: not measured)
    launches: int

    def value(self, name: str) -> float | None:
        return dict(self.values).get(name)


def work_key(launch: Launch) -> WorkKey:
    """The identity counters of one launch, in ``IDENTITY_FIELDS`` order (None where not measured)."""
    return tuple(launch.values.get(name) for name in IDENTITY_FIELDS)


def work_measured(launches: tuple[Launch, ...]) -> bool:
    """Whether any launch holds an identity counter (else nothing tells whether they did the same work)."""
    return any(value is not None for launch in launches for value in work_key(launch))


def split_by_work(measurement: Measurement) -> list[Measurement]:
    """The measurement's launches grouped by their work, in order of first appearance.

    One part when every launch did the same work (or none holds an identity counter).
    """
    by_work: dict[WorkKey, list[Launch]] = {}
    for launch in measurement.launches:
        by_work.setdefault(work_key(launch), []).append(launch)
    if len(by_work) == 1:
        return [measurement]
    return [
        Measurement(
            cell=measurement.cell, params=measurement.params, kernel=measurement.kernel,
            launches=tuple(members),
            runs=len({launch.run.run_id if launch.run is not None else launch.report for launch in members}),
            content_keys=measurement.content_keys,
        )
        for members in by_work.values()
    ]


def works_of(parts: list[Measurement]) -> tuple[Work, ...]:
    """Each part's work (its identity values) and launch count."""
    return tuple(
        Work(tuple(zip(IDENTITY_FIELDS, work_key(part.launches[0]), strict=True)), len(part.launches))
        for part in parts
    )


def differing_fields(works: tuple[Work, ...]) -> tuple[str, ...]:
    """The identity counters whose value is not the same in every work."""
    return tuple(name for name in IDENTITY_FIELDS if len({work.value(name) for work in works}) > 1)


def describe_works(works: tuple[Work, ...], fields: tuple[str, ...]) -> str:
    """e.g. 'inst_executed 750 (5 launches) / 825 (1 launch)'."""
    def one(name: str) -> str:
        return f"{name} " + " / ".join(
            f"{format_value(work.value(name))} ({work.launches} launch{'' if work.launches == 1 else 'es'})"
            for work in works
        )

    return "; ".join(one(name) for name in fields)
