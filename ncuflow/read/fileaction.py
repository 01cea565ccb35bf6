"""One parsed ``ProfileResult`` as ncuflow reads an action: metrics by name, names, NVTX, rule results.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ncuflow.errors import ReportError
from ncuflow.read.launch import KernelName
from ncuflow.read.layout import (
    DOUBLE,
    SLOW,
    Last,
    Layout,
    NameIndex,
    ReportNames,
    record_ids,
    text_of,
    value,
)
from ncuflow.read.plan import Unsettled
from ncuflow.read.reportfile import DamagedActionWarning, check_bytes
from ncuflow.read.reportformat import KEPT_TABLE_BYTES

if TYPE_CHECKING:
    from ncuflow.read.findings import RuleResults
    from ncuflow.read.reportformat import ReportFile

_SOL_RULE = "SOLBottleneck"
_DEFAULT_DOMAIN_NAMES = ("", "<default domain>")


def metric_value(value: Any) -> float | int | str | None:
    """A ``MetricValue`` message as ``IMetric.value()`` returns it; None where no field is set."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    found = getattr(value, which)
    return text_of(found) if isinstance(found, bytes) else found


def _as_text(value: float | int | str | None) -> str | None:
    """A value as text (a number formatted as ``extract.metric_text`` does)."""
    if value is None or isinstance(value, str):
        return value
    return str(value) if isinstance(value, int) else str(float(value))


class FileAction:
    """One result of a report read by ``ncuflow.read.reportformat`` (valid while its file is open).

    Its metric records are read where the layout of the result before it says they lie
    (``ncuflow.read.layout``), each checked to name the metric asked for; a record that names
    another, or a metric that layout lacks and the report's strings hold, is ``Unsettled``: the
    result's own layout is then walked (``settle``) and it is read again. Reading by name
    settles first."""

    def __init__(self, result: Any, names: ReportNames, metric_class: Any, settle: bool = False) -> None:
        self._result = result
        self._records = result.metrics
        self._count = len(self._records)
        self._names = names
        self._metric_class = metric_class
        self._layout = Last.guess(self._count)
        self._leads = names.leads_of(self._layout)
        self._exact = False
        if settle or self._layout is None:
            self.settle()

    # --- the metric list and reading by position (``ncuflow.read.extract`` reads through a plan)

    def metric_list(self) -> Layout:
        """The layout to plan on: this result's own once settled, else the one guessed for it."""
        assert self._layout is not None
        return self._layout

    def confirm(self, lacking: set[str]) -> None:
        """``Unsettled`` where this result may hold a metric its guessed layout lacks: one its
        report's string table names (checked once per report, plan and list of names)."""
        if not self._exact and not self._names.lacks(lacking):
            raise Unsettled(sorted(lacking & self._names.table.ids.keys())[:1])

    def settle(self) -> None:
        """Walk this result's records once: its own layout from now on."""
        if not self._exact:
            self._layout = Last.keep(self._names.layout(record_ids(self._records, self._parsed_id)))
            self._leads = self._names.leads_of(self._layout)
            self._exact = True

    def value_at(self, position: int) -> float | int | str | None:
        """The value (``IMetric.value()``) of the record at ``position`` of the layout."""
        assert self._layout is not None
        name = self._layout.names[position] if position < len(self._layout.names) else None
        if position >= self._count or name is None:
            self._unsettled(position)
            return None
        record = self._records[position]
        prefix = self._names.prefix(name)
        if record.startswith(prefix):
            found = value(record, len(prefix))
            if found is not SLOW:
                return found
        parsed = self._parse(record)
        if self._names.table.name_of(parsed.name_id) != name:
            self._unsettled(position)
            return None
        return metric_value(parsed.value) if parsed.HasField("value") else None

    def _unsettled(self, position: int) -> None:
        """A record that is not what the layout says: unsettled, unless the layout is the result's
        own (then only a hostile record, a field written twice, disagrees: no value)."""
        if not self._exact:
            raise Unsettled(position)

    def number_at(self, position: int) -> float | None:
        """A numeric metric's finite value; None where it is valueless, a string or not finite."""
        lead = self._leads.get(position)
        if lead is None:
            lead = self._lead(position)
        if lead and position < self._count:  # the common record: its name, then one double
            record = self._records[position]
            if record.startswith(lead) and len(record) >= len(lead) + 8:
                number: float = DOUBLE.unpack_from(record, len(lead))[0]
                return number if number - number == 0.0 else None  # NaN and infinities are not numbers
        found = self.value_at(position)
        if found is None or isinstance(found, str):
            return None
        number = float(found)
        return number if math.isfinite(number) else None

    def _lead(self, position: int) -> bytes:
        """How the record at ``position`` begins where it holds one double (b"" for no metric)."""
        assert self._layout is not None
        name = self._layout.names[position] if position < len(self._layout.names) else None
        lead = self._leads[position] = b"" if name is None else self._names.double_lead(name)
        return lead

    def stored_non_finite_at(self, position: int) -> bool:
        found = self.value_at(position)
        return isinstance(found, float) and not math.isfinite(found)

    def text_at(self, position: int) -> str | None:
        return _as_text(self.value_at(position))

    def _parsed_id(self, record: bytes) -> int:
        return int(self._parse(record).name_id)

    def _parse(self, record: bytes) -> Any:
        try:
            return self._metric_class.FromString(record)
        except Exception:  # a record that does not parse: a metric with no name and no value
            return self._metric_class()

    # --- the action as ``ncuflow.read.extract.Action`` reads it by name

    def is_damaged(self) -> bool:
        """No kernel name and no metrics: what a result cut off by the end of the file leaves."""
        result = self._result
        return not (result.function_name or result.mangled_name or result.demangled_name) and not self._count

    def refers_beyond(self) -> bool:
        """Whether a metric names a string beyond the report's table (a cut file; the result is
        settled for it)."""
        self.settle()
        assert self._layout is not None
        return self._layout.beyond

    def _position(self, name: str) -> int | None:
        self.settle()
        assert self._layout is not None
        return self._layout.index.get(name)

    def value(self, name: str) -> float | int | str | None:
        """The metric's value (``IMetric.value()``); None where it is absent or has none."""
        position = self._position(name)
        return None if position is None else self.value_at(position)

    def number(self, name: str) -> float | None:
        """A numeric metric's finite value; None where it is absent, valueless, a string or not finite."""
        position = self._position(name)
        return None if position is None else self.number_at(position)

    def stored_non_finite(self, name: str) -> bool:
        """Whether ncu stored this metric as NaN or infinite (``number`` gives None for it)."""
        found = self.value(name)
        return isinstance(found, float) and not math.isfinite(found)

    def text(self, name: str) -> str | None:
        """A metric's value as text (a number formatted as ``extract.metric_text`` does); None where valueless."""
        return _as_text(self.value(name))

    def record(self, name: str) -> bytes | None:
        """A metric's record as the file holds it, per-instance list included (read by
        ``ncuflow.read.metric_lists`` where the source view asks); None where it is absent."""
        position = self._position(name)
        return None if position is None or position >= self._count else bytes(self._records[position])

    def metric_names(self) -> list[str]:
        self.settle()
        assert self._layout is not None
        return sorted(self._layout.index)

    def metric_values(self) -> Iterator[tuple[str, float | int | str | None]]:
        """(name, value) of every metric, in ``metric_names()`` order."""
        self.settle()
        assert self._layout is not None
        index = self._layout.index
        for name in sorted(index):
            yield name, self.value_at(index[name])

    def ncu_version(self) -> str | None:
        """The ncu version that wrote the report, where a block header names it (else None: the
        file's bytes are searched, ``reportfile.read_ncu_version``)."""
        return self._names.version

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

    def rule_results(self) -> RuleResults:
        """NVIDIA's findings and source markers for this launch (each rule result parsed whole, now)."""
        from ncuflow.read.rule_results import file_rule_results

        return file_rule_results(self._result.rule_results)

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
        names = _names_of(report)
        # A cut file may lack strings its results name: each result is walked for them (settled).
        cut_short = report.damage is not None
        intact, damaged = 0, _Damaged()
        for index, parsed in report.results(schema.profile_result):
            action = FileAction(parsed, names, schema.metric_result, settle=cut_short) if parsed is not None else None
            if action is None or action.is_damaged() or (cut_short and action.refers_beyond()):
                damaged.add(index)
                continue
            intact += 1
            # Every result of a kernel-replay report is an action of its one range (ncu_report's view).
            yield 0, index, action
        cut, trailing = report.damage, report.trailing
    _report_damage(path, intact, damaged, cut)
    if trailing and intact:
        warnings.warn(f"{path}: {trailing} (a padded or overwritten copy); its {intact} actions before them are used.",
                      DamagedActionWarning, stacklevel=2)


@dataclass
class _Damaged:
    """The damaged results of a report: how many, and the first few (a hostile file may hold millions)."""

    count: int = 0
    first: list[int] = field(default_factory=list)

    def add(self, index: int) -> None:
        self.count += 1
        if len(self.first) < 5:
            self.first.append(index)


# String tables kept by their bytes: reports that name their metrics alike (a store's runs of one
# collection on one chip, the replicas of a run) share one, its names indexed and checked once.
_TABLES: dict[tuple[bytes, ...], ReportNames] = {}
_TABLES_KEPT = 4


def _names_of(report: ReportFile) -> ReportNames:
    names = _TABLES.pop(report.tables_key, None)
    if names is None:
        names = ReportNames(NameIndex.of(report.strings))
        while len(_TABLES) >= _TABLES_KEPT:
            del _TABLES[next(iter(_TABLES))]  # the least recently used
    if sum(map(len, report.tables_key)) <= KEPT_TABLE_BYTES:
        _TABLES[report.tables_key] = names  # the most recently used last
    names.version = report.version
    return names


def _report_damage(path: Path, intact: int, damaged: _Damaged, cut: str | None) -> None:
    if intact == 0 and not damaged.count:
        raise ReportError(
            f"{path} holds no profiled launch: {cut or 'it holds no result'}.",
            "The file carries the report signature but no complete result: it is cut off (an interrupted "
            "ncu or an incomplete copy), corrupted, or ncu profiled no kernel.",
            "Profile again and let ncu finish; check its log for 'No kernels were profiled'.",
        )
    if intact == 0:
        raise ReportError(
            f"{path} is damaged: its only {'action has' if damaged.count == 1 else f'{damaged.count:,} actions have'} no "
            "readable kernel name and metrics.",
            f"The report was cut off while ncu (or a copy) was writing it{f' ({cut})' if cut else ''}.",
            "Profile again and let ncu finish, or copy the complete file.",
        )
    shown = ", ".join(str(index) for index in damaged.first) + (", ..." if damaged.count > 5 else "")
    if damaged.count:
        warnings.warn(
            f"{path}: {damaged.count:,} action{'s' if damaged.count > 1 else ''} ({shown}) of range 0 "
            f"{'are' if damaged.count > 1 else 'is'} damaged (no readable kernel name and metrics"
            f"{f'; the file was cut off: {cut}' if cut else ''}) and skipped; the {intact} complete actions are used.",
            DamagedActionWarning, stacklevel=3)
    elif cut:
        warnings.warn(f"{path} is cut off ({cut}) after its last complete result; its {intact} actions are used.",
                      DamagedActionWarning, stacklevel=3)
