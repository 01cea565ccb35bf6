"""What ncu collects and how (``NcuOptions``): the collection part of a run record.

Defined here, below profiling, because a stored run records it as it was given (not as a
label string): ``profile`` builds it once from the command line or a sweep file, and a
re-profile of a stored run (stability) takes it back from the run's manifest unchanged.
Validated on construction, so nothing odd reaches ncu's command line: every name is one
line, never empty and never starting with ``-`` (a value read from a sweep file or a
manifest cannot become an ncu option of its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ncuflow.errors import UsageError
from ncuflow.files.patterns import pattern_problem

REPLAY_MODES: tuple[str, ...] = ("kernel", "application", "range", "app-range")
CACHE_CONTROLS: tuple[str, ...] = ("all", "none")
CLOCK_CONTROLS: tuple[str, ...] = ("base", "none")
TARGET_PROCESSES: tuple[str, ...] = ("all", "application-only")
# ncu --graph-profiling: each kernel node of a CUDA graph as its own launch (ncu's default), or
# each graph as one workload (read through ncu_report, marked as a graph: ``read.ncureport``).
GRAPH_PROFILING: tuple[str, ...] = ("node", "graph")
# ncu's own section sets (``ncu --list-sets``); "decisive" is ncuflow's metric list.
NAMED_SETS: tuple[str, ...] = ("basic", "detailed", "full", "nvlink", "pmsampling", "roofline")
DECISIVE = "decisive"
DECISIVE_TIER2 = "decisive-tier2"  # the escalation run for launches tier 1 leaves undecided
METRIC_SETS: tuple[str, ...] = (DECISIVE, DECISIVE_TIER2, "none", *NAMED_SETS)


@dataclass(frozen=True)
class NcuOptions:
    """What to collect and how. Validated on construction; hashable; no paths in it."""

    replay_mode: str = "kernel"
    cache_control: str = "all"
    clock_control: str = "base"
    metric_set: str = DECISIVE  # "decisive", "decisive-tier2", "none" or one of NAMED_SETS
    sections: tuple[str, ...] = ()  # --section NAME each (with or instead of a set)
    extra_metrics: tuple[str, ...] = ()
    exclude_metrics: tuple[str, ...] = ()  # names this ncu/GPU rejected (dropped, recorded)
    launch_count: int | None = None
    launch_skip: int | None = None
    kernel_regex: str | None = None
    nvtx_include: tuple[str, ...] = ()  # full ncu expressions, e.g. "ncuflow/flat_decode/"
    target_processes: str = "all"
    import_source: bool = False  # --import-source yes: the CUDA source files in the report (source counters)
    extra_args: tuple[str, ...] = field(default=())
    graph_profiling: str | None = None  # --graph-profiling node|graph; None: not passed (ncu's default, node)

    def __post_init__(self) -> None:
        _check_types(self)
        _choice("--replay-mode", self.replay_mode, REPLAY_MODES)
        _choice("--cache-control", self.cache_control, CACHE_CONTROLS)
        _choice("--clock-control", self.clock_control, CLOCK_CONTROLS)
        _choice("--target-processes", self.target_processes, TARGET_PROCESSES)
        if self.graph_profiling is not None:
            _choice("--graph-profiling", self.graph_profiling, GRAPH_PROFILING)
        if self.metric_set not in METRIC_SETS:
            raise UsageError(
                f"Unknown metric set {self.metric_set!r}.",
                f"ncuflow collects its decisive metric list ({DECISIVE}) or one of ncu's sets: "
                f"{', '.join(NAMED_SETS)}; use 'none' with --section for sections only.",
                "Choose one of those (`ncu --list-sets` shows what each holds).",
            )
        if not isinstance(self.import_source, bool):
            raise UsageError(f"The ncu option import_source = {self.import_source!r} is not a boolean.", "",
                             "Give import_source true or false.")
        if self.metric_set == "none" and not self.sections and not self.extra_metrics:
            raise UsageError(
                "The metric set 'none' with no --section or --metrics collects nothing.",
                "", "Add --section NAME or choose a set.",
            )
        for name, value, low in (("--launch-count", self.launch_count, 1), ("--launch-skip", self.launch_skip, 0)):
            if value is not None and value < low:
                raise UsageError(f"{name} {value} is out of range.", "",
                                 f"Give {name} a {'positive' if low else 'non-negative'} integer.")
        for text in (*self.sections, *self.extra_metrics, *self.exclude_metrics, *self.nvtx_include):
            _check_name(text)

    @property
    def dropped_metrics(self) -> tuple[str, ...]:
        """The names this ncu or GPU refused, collected without (``exclude_metrics``)."""
        return self.exclude_metrics

    def label(self) -> str:
        """One line for people: ``decisive; sections: A, B; +metrics: x; -metrics: y``."""
        parts = [self.metric_set]
        for title, names in (("sections", self.sections), ("+metrics", self.extra_metrics),
                             ("-metrics", self.exclude_metrics)):
            if names:
                parts.append(f"{title}: {', '.join(names)}")
        return "; ".join(parts)


def _check_name(text: str) -> None:
    if not text.strip() or "\n" in text or text.lstrip().startswith("-"):
        raise UsageError(
            f"The ncu option value {text!r} is empty, spans lines or starts with '-'.",
            "Each section, metric and NVTX expression reaches ncu as the value of its option; "
            "one that starts with '-' would be read as an option of its own.",
            "Give one name per option, as ncu spells it (e.g. SpeedOfLight, dram__bytes.sum, 'step/').",
        )


def _check_types(options: NcuOptions) -> None:
    """Every field of its declared type, the kernel regex compiled: nothing odd reaches ncu."""
    for name in ("replay_mode", "cache_control", "clock_control", "metric_set", "target_processes"):
        value = getattr(options, name)
        if not isinstance(value, str):
            raise UsageError(f"The ncu option {name} = {value!r} is not a string.", "",
                             f"Give {name} one word, e.g. {getattr(NcuOptions, name)!r}.")
    for name in ("sections", "extra_metrics", "exclude_metrics", "nvtx_include", "extra_args"):
        value = getattr(options, name)
        if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
            raise UsageError(f"The ncu option {name} = {value!r} is not a list of names.", "",
                             f"Give {name} as strings.")
    for name in ("launch_count", "launch_skip"):
        value = getattr(options, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise UsageError(f"The ncu option {name} = {value!r} is not an integer.", "",
                             f"Give {name} a whole number.")
    _check_regex(options.kernel_regex)


def _check_regex(regex: object) -> None:
    if regex is None:
        return
    if not isinstance(regex, str) or not regex.strip() or "\n" in regex:
        raise UsageError(f"The kernel regex {regex!r} is not one regular expression.", "",
                         "Give --kernel one pattern, e.g. --kernel 'gemm|matmul'.")
    problem = pattern_problem(regex)
    if problem is not None:
        raise UsageError(
            f"The kernel regex {regex!r} does not compile for a linear-time search (RE2): {problem}.",
            "ncuflow searches a run's kernel pattern in every name it reads, in time linear in the name; "
            "backreferences such as \\1 and lookaround such as (?<=...) cannot be searched so.",
            "Fix the pattern (escape ( [ { with a backslash to match them literally; write it without "
            "backreferences and lookaround).",
        )


def _choice(option: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise UsageError(f"{option} {value!r} is not valid.", f"ncu accepts {', '.join(allowed)}.",
                         f"Use one of: {', '.join(allowed)}.")


def options_from_label(label: str | None, **fields: object) -> NcuOptions:
    """The options a schema-1/2 manifest recorded as ``set;sections:a,b;+metrics:x;-metrics:y``
    (what ``NcuOptions.metric_set_label`` wrote before schema 3), with its other fields."""
    metric_set, *parts = (label or DECISIVE).split(";")
    lists: dict[str, tuple[str, ...]] = {"sections:": (), "+metrics:": (), "-metrics:": ()}
    for part in parts:
        for prefix in lists:
            if part.startswith(prefix):
                lists[prefix] = tuple(name for name in part[len(prefix):].split(",") if name)
    given = {k: v for k, v in fields.items() if v is not None}
    return NcuOptions(metric_set=metric_set, sections=lists["sections:"], extra_metrics=lists["+metrics:"],
                      exclude_metrics=lists["-metrics:"], **given)  # type: ignore[arg-type]
