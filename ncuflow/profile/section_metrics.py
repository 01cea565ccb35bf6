"""Which metrics ncu collects for a list of sections, asked of the ncu that will run them.

A section is a file of the ncu install (``sections/*.section``) naming metrics, and tables
whose metrics ncu expands itself (``group:memory__dram_table``). ``ncu --section S ...
--list-metrics`` prints them all, needs no GPU and takes about half a second; the section
files change between ncu versions, so the list is asked of the ncu ``profile`` will run,
never kept here. Names ncu expands itself (``group:``), sampling and source counters are
then classed by ``ncuflow.profile.passes`` as not modelled by Perfworks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ncuflow.files.safe_text import shortened
from ncuflow.host import run_bounded

LIST_TIMEOUT_S = 60.0
MAX_NAMES = 20_000


@dataclass(frozen=True)
class SectionMetrics:
    """The metric names ncu lists for ``sections``, or why it could not list them."""

    sections: tuple[str, ...]
    names: tuple[str, ...] = ()
    problem: str | None = None


def parse_listing(text: str) -> tuple[str, ...]:
    """``--list-metrics`` output -> the names, in order, once each: one name a line; the indented
    lines under a name (its filters, ``-arch:80:90:group:…``) and ncu's own ``==`` lines skipped."""
    names: list[str] = []
    for line in text.splitlines()[:MAX_NAMES * 4]:
        if not line or line[0].isspace() or line.startswith("=="):
            continue
        name = line.strip()
        if name and " " not in name and name not in names:
            names.append(name)
    return tuple(names[:MAX_NAMES])


def list_section_metrics(ncu: str | Path, sections: Sequence[str]) -> SectionMetrics:
    """Ask ``ncu`` which metrics ``sections`` collect (no GPU needed)."""
    wanted = tuple(sections)
    command = [str(ncu)]
    for section in wanted:
        command += ["--section", section]
    command.append("--list-metrics")
    try:
        done = run_bounded(command, LIST_TIMEOUT_S)
    except OSError as error:
        return SectionMetrics(wanted, problem=f"{ncu} could not be started ({error.strerror or error})")
    if done is None:
        return SectionMetrics(wanted, problem=f"{ncu} --list-metrics did not answer in {LIST_TIMEOUT_S:.0f} s")
    errors = [line for line in (done.stdout + "\n" + done.stderr).splitlines() if line.startswith("==ERROR==")]
    if done.returncode != 0 or errors:
        said = shortened(" ".join(errors) or (done.stderr or done.stdout).strip(), 300)
        return SectionMetrics(wanted, problem=f"{ncu} could not list the sections' metrics (exit {done.returncode}): {said}")
    names = parse_listing(done.stdout)
    if not names:
        return SectionMetrics(wanted, problem=f"{ncu} --list-metrics listed no metric for {', '.join(wanted)}")
    return SectionMetrics(wanted, names)
