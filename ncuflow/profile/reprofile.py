"""Profiling cells again for their replay stability (``ncuflow stability CELL_SPEC``, ``--headline``).

Each (spec, options) is profiled ``replicas`` times in fresh ncu processes, with exactly the
options given (a headline cell's are its stored run's): replicas of one point must differ
only in the replay itself. No escalation: a replica is the collection as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ncuflow.profile.orchestrate import profile
from ncuflow.profile.plan import CellTarget, ProfileJob
from ncuflow.profile.settings import ProfileSettings
from ncuflow.store import RunRecord
from ncuflow.store.collection import NcuOptions
from ncuflow.store.manifest import Provenance


def reprofiler(settings: ProfileSettings, replicas: int,
               say: Callable[[str], None]) -> Callable[[Sequence[tuple[str, NcuOptions]]], list[RunRecord]]:
    """The ``Reprofile`` function ``ncuflow.analyze.stability_run.check_stability`` takes."""
    settings = replace(settings, escalation=replace(settings.escalation, enabled=False))

    def reprofile(targets: Sequence[tuple[str, NcuOptions]]) -> list[RunRecord]:
        jobs = [(CellTarget(settings.cells.parse(text)), options) for text, options in targets]  # all checked first
        records = []
        for target, options in jobs:
            for replica in range(replicas):
                say(f"profiling {target.label} (replica {replica + 1}/{replicas}; "
                    f"clocks {options.clock_control}, cache {options.cache_control})")
                job = ProfileJob(target, options, provenance=Provenance(replica=replica, replicas=replicas))
                records.append(profile(job, settings).record)
        return records

    return reprofile
