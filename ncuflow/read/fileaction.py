"""One parsed ``ProfileResult`` as ncuflow reads an action: metrics by name, names, NVTX, rules.

What ``ncu_report``'s ``IAction`` gives for the same launch, from the message itself
(``ncuflow.read.schema``): a metric's value is the ``MetricValue`` field that is set
(a ``float`` is widened to a double, integers stay integers, as ``IMetric.value()``
returns them); a metric with no ``MetricValue`` (only per-instance values, which are
not read) has no value; the names are the report's string table entries, each once,
sorted (``IAction.metric_names()``'s order). A name that appears twice in one result
(ncu writes a few ``profiler__pmsampler_*`` twice, with equal values) is read once.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncuflow.errors import ReportError
from ncuflow.read.launch import KernelName
from ncuflow.read.reportfile import DamagedActionWarning, check_bytes

_SOL_RULE = "SOLBottleneck"
_DEFAULT_DOMAIN_NAMES = ("", "<default domain>")


@dataclass(frozen=True)
class NameIndex:
    """A report's string table: each name's id, and (where a name appears twice in the
    table) the id every id of that name stands for, its last."""

    strings: list[str]
    ids: dict[str, int]
    canonical: list[int] | None  # None: every name appears once

    @classmethod
    def of(cls, strings: list[str]) -> NameIndex:
        if any(map(bytes.__instancecheck__, strings)):
            strings = [text_of(name) for name in strings]
        ids = dict(zip(strings, range(len(strings)), strict=True))  # a name that appears twice: its last id
        canonical = None if len(ids) == len(strings) else [ids[name] for name in strings]
        return cls(strings, ids, canonical)


def text_of(value: str | bytes) -> str:
    """A string field's text: the protobuf library gives a proto2 string that is not valid
    UTF-8 (a corrupted file) as bytes; it is decoded with replacement characters."""
    return value if isinstance(value, str) else value.decode("utf-8", errors="replace")


def metric_value(value: Any) -> float | int | str | None:
    """A ``MetricValue`` message as ``IMetric.value()`` returns it; None where no field is set."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    found = getattr(value, which)
    return text_of(found) if isinstance(found, bytes) else found


class FileAction:
    """One result of a report read by ``ncuflow.read.reportformat`` (valid while its file is open)."""

    def __init__(self, result: Any, names: NameIndex) -> None:
        self._result = result
        # name id -> its MetricResult (a name written twice keeps its last, equal, value)
        canonical = names.canonical
        self._metrics: dict[int, Any] = (
            {metric.name_id: metric for metric in result.metrics} if canonical is None
            else {canonical[metric.name_id] if metric.name_id < len(canonical) else metric.name_id: metric
                  for metric in result.metrics})
        self._ids = names.ids
        self._names = names

    def is_damaged(self) -> bool:
        """No kernel name and no metrics: what a result cut off by the end of the file leaves."""
        result = self._result
        return not (result.function_name or result.mangled_name or result.demangled_name) and not self._metrics

    def refers_beyond(self, count: int) -> bool:
        """Whether a metric names a string beyond the first ``count`` of the table (a cut file)."""
        return bool(self._metrics) and max(self._metrics) >= count

    def value(self, name: str) -> float | int | str | None:
        """The metric's value (``IMetric.value()``); None where it is absent or has none."""
        metric = self._metrics.get(self._ids.get(name, -1))
        if metric is None:
            return None
        return metric_value(metric.value)

    def number(self, name: str) -> float | None:
        """A numeric metric's finite value; None where it is absent, valueless, a string or not finite."""
        metric = self._metrics.get(self._ids.get(name, -1))  # value(), inlined: ~100 look-ups a launch
        if metric is None:
            return None
        value = metric.value
        which = value.WhichOneof("value")
        if which is None or which == "string_value":
            return None
        number = float(getattr(value, which))
        return number if math.isfinite(number) else None

    def stored_non_finite(self, name: str) -> bool:
        """Whether ncu stored this metric as NaN or infinite (``number`` gives None for it)."""
        value = self.value(name)
        return isinstance(value, float) and not math.isfinite(value)

    def text(self, name: str) -> str | None:
        """A metric's value as text (a number formatted as ``extract.metric_text`` does); None where valueless."""
        value = self.value(name)
        if value is None or isinstance(value, str):
            return value
        return str(value) if isinstance(value, int) else str(float(value))

    def metric_names(self) -> list[str]:
        strings = self._names.strings
        return sorted({strings[name_id] for name_id in self._metrics})

    def metric_values(self) -> Iterator[tuple[str, float | int | str | None]]:
        """(name, value) of every metric, in ``metric_names()`` order."""
        strings = self._names.strings
        by_name = {strings[name_id]: metric for name_id, metric in self._metrics.items()}
        for name in sorted(by_name):
            yield name, metric_value(by_name[name].value)

    def kernel(self) -> KernelName:
        result = self._result
        function = text_of(result.function_name)
        return KernelName(function=function, demangled=text_of(result.demangled_name) or function,
                          mangled=text_of(result.mangled_name) or function)

    def nvtx(self) -> tuple[str, ...]:
        """The NVTX ranges enclosing the launch, as ``extract`` names them from ``ncu_report``:
        per domain, the launch thread's push/pop stack, then the domain's start/end ranges."""
        result = self._result
        if not result.HasField("nvtx"):
            return ()
        state = result.nvtx
        stacks = {domain.id: domain.stack for thread in state.threads if thread.tid == result.thread_id
                  for domain in thread.push_pop_domains}
        started = {domain.id: domain.ranges for domain in state.start_end_domains}
        ranges: list[str] = []
        for domain in state.domains:
            name = text_of(domain.name)
            prefix = "" if name in _DEFAULT_DOMAIN_NAMES else f"{name}@"
            ranges.extend(f"{prefix}{text_of(pushed.name)}" for pushed in stacks.get(domain.id, ()))
            ranges.extend(f"{prefix}{text_of(begun.name)}" for begun in started.get(domain.id, ()))
        return tuple(ranges)

    def nvidia_sol(self) -> str | None:
        """The title of NVIDIA's speed-of-light rule result (its first message), where there is one."""
        for rule in self._result.rule_results:
            if text_of(rule.identifier) == _SOL_RULE:
                for item in rule.body.items:
                    if item.HasField("message"):
                        return text_of(item.message.title) or None
                return None
        return None


def iter_file_actions(path: Path) -> Iterator[tuple[int, int, FileAction]]:
    """(range index, action index, action) for every intact result of the report, read from
    the file itself. Raises ``UnknownLayout`` (before yielding anything) for a file version
    or layout this reader does not know, ``ReportError`` for a file that holds no usable
    result; warns with ``DamagedActionWarning`` for results cut off by the end of the file."""
    from ncuflow.read.reportformat import open_report
    from ncuflow.read.schema import messages

    check_bytes(path)
    schema = messages()
    with open_report(path, schema) as report:
        names = NameIndex.of(report.strings)
        intact, damaged = 0, []
        for index, parsed in report.results(schema.profile_result):
            action = FileAction(parsed, names) if parsed is not None else None
            if action is None or action.is_damaged() or action.refers_beyond(len(names.strings)):
                damaged.append(index)
                continue
            intact += 1
            # Every result of a kernel-replay report is an action of its one range (ncu_report's view).
            yield 0, index, action
        cut = report.damage
    _report_damage(path, intact, damaged, cut)


def _report_damage(path: Path, intact: int, damaged: list[int], cut: str | None) -> None:
    if intact == 0 and not damaged:
        raise ReportError(
            f"{path} holds no profiled launch: {cut or 'it holds no result'}.",
            "The file carries the report signature but no complete result: it is cut off (an interrupted "
            "ncu or an incomplete copy), corrupted, or ncu profiled no kernel.",
            "Profile again and let ncu finish; check its log for 'No kernels were profiled'.",
        )
    if intact == 0:
        raise ReportError(
            f"{path} is damaged: its only {'action has' if len(damaged) == 1 else 'actions have'} no "
            "readable kernel name and metrics.",
            f"The report was cut off while ncu (or a copy) was writing it{f' ({cut})' if cut else ''}.",
            "Profile again and let ncu finish, or copy the complete file.",
        )
    shown = ", ".join(str(index) for index in damaged[:5]) + (", ..." if len(damaged) > 5 else "")
    if damaged:
        warnings.warn(
            f"{path}: {len(damaged)} action{'s' if len(damaged) > 1 else ''} ({shown}) of range 0 "
            f"{'are' if len(damaged) > 1 else 'is'} damaged (no readable kernel name and metrics; the file was "
            f"cut off{f': {cut}' if cut else ''}) and skipped; the {intact} complete actions are used.",
            DamagedActionWarning, stacklevel=3)
    elif cut:
        warnings.warn(f"{path} is cut off ({cut}) after its last complete result; its {intact} actions are used.",
                      DamagedActionWarning, stacklevel=3)
