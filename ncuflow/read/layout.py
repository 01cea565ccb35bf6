"""Where a result's metric records lie: the metric lists of reports, and reading one record.

A ``ProfileResult`` holds its metrics as a list of ``MetricResult`` records (field 13), each
naming its metric by an id into the report's string table. The results of a report carry the
same metric names in the same order as a rule, and so do the reports of one collection on one
chip, whatever their string tables number the names. A ``Layout`` is one such list by name
(the name at each position): one object per distinct list in a process (``layout_of``), with
the read plans made on it (``ncuflow.read.plan``). A result is first read through the layout
a result of its length had before (``Last``, whatever report it was in), each record checked
as it is read: it must name the metric its position says (``ReportNames.prefix``, or its
parsed name id). A record naming another metric, or a metric the guessed layout lacks that the
report's string table holds (``ReportNames.lacks``), is ``Unsettled``: the result's own records
are walked (``record_ids``) and it is read again through its own layout.

``value`` decodes a record's value where ncu writes it (its name id, then one ``MetricValue``
holding a double, float or integer; the per-instance values after it are not looked at, so
their number costs nothing) and leaves every other record (strings, anything that does not
begin so) to the protobuf library. A record that repeated its value field after the
per-instance values (no writer does; ``upb`` would take the last) is read as its first.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

SLOW = object()  # a record ``value`` leaves to the protobuf library
DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")
_NAME_FIELD = b"\x08"  # field 1 (name id), a varint: how ncu begins a record
_UINT32, _UINT64 = 0x20, 0x28  # MetricValue fields 4 and 5, varints


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

    def name_of(self, name_id: int) -> str | None:
        """The name an id stands for; None for an id beyond the table (a cut or corrupted file)."""
        return self.strings[name_id] if 0 <= name_id < len(self.strings) else None


def text_of(value: str | bytes) -> str:
    """A string field's text: the protobuf library gives a proto2 string that is not valid
    UTF-8 (a corrupted file) as bytes; it is decoded with replacement characters."""
    return value if isinstance(value, str) else value.decode("utf-8", errors="replace")


class Layout:
    """One metric list by name: the metric at each position (None where the record names no
    string of its table) and where each name lies (its last record, as ``IAction`` keeps a name
    written twice), with the read plans made on it."""

    def __init__(self, names: tuple[str | None, ...]) -> None:
        self.names = names
        self.index: dict[str, int] = {name: position for position, name in enumerate(names) if name is not None}
        self.beyond = None in names  # a record names a string its report's table does not hold
        self.plans: dict[object, Any] = {}

    def index_of(self, name: str) -> int | None:
        return self.index.get(name)


# A list longer than this is not kept (ncu's full sets carry ~2,200 metrics; a hostile file may
# claim millions): it is planned for its result alone.
KEPT_LIST_LENGTH = 100_000


def layout_of(names: tuple[str | None, ...]) -> Layout:
    """The one ``Layout`` of this list in this process (its plans are made once)."""
    return _kept_layout(names) if len(names) <= KEPT_LIST_LENGTH else Layout(names)


@functools.lru_cache(maxsize=64)
def _kept_layout(names: tuple[str | None, ...]) -> Layout:
    return Layout(names)


class Last:
    """The layouts results read last had, by their number of records: the first guess for the
    next result, in any report (reports of two collections read in turn keep one each)."""

    by_count: dict[int, Layout] = {}  # noqa: RUF012 - one per process, on purpose
    layout: Layout | None = None

    @classmethod
    def guess(cls, count: int) -> Layout | None:
        return cls.by_count.get(count, cls.layout)

    @classmethod
    def keep(cls, layout: Layout) -> Layout:
        if len(cls.by_count) >= 64:
            cls.by_count.clear()
        cls.by_count[len(layout.names)] = cls.layout = layout
        return layout


@dataclass
class ReportNames:
    """A report's string table as its records are checked against it: how a record naming each
    metric begins (``prefix``: its name id's, made once per id in a process)."""

    table: NameIndex
    by_layout: dict[Layout, dict[int, bytes]] = field(default_factory=dict)
    lacking_checked: dict[int, tuple[set[str], int]] = field(default_factory=dict)
    version: str | None = None  # the ncu version a block header of the report names

    def prefix(self, name: str) -> bytes:
        return _name_prefix(self.table.ids.get(name, -1) & 0xFFFFFFFF)

    def lacks(self, names: set[str]) -> bool:
        """Whether this report's string table names none of ``names`` (a plan's lacking metrics:
        checked again only where the set has grown since)."""
        checked = self.lacking_checked.get(id(names))
        if checked is not None and checked[0] is names and checked[1] == len(names):
            return True
        if any(name in self.table.ids for name in names):
            return False
        self.lacking_checked[id(names)] = (names, len(names))
        return True

    def leads_of(self, layout: Layout | None) -> dict[int, bytes]:
        """Position -> ``double_lead`` of its metric, for one layout read with this table (filled
        as positions are read)."""
        if layout is None:
            return {}
        found = self.by_layout.get(layout)
        if found is None:
            found = self.by_layout[layout] = {}
        return found

    def double_lead(self, name: str) -> bytes:
        """How a record of this metric holding one double begins: its name id, then field 2
        (9 bytes: the double's field 3 and its 8 bytes); the double follows."""
        return _double_lead(self.table.ids.get(name, -1) & 0xFFFFFFFF)

    def layout(self, ids: Sequence[int]) -> Layout:
        """The layout of a result whose records name these ids, in order."""
        strings = self.table.strings
        if ids and min(ids) >= 0 and max(ids) < len(strings):
            return layout_of(tuple(map(strings.__getitem__, ids)))
        return layout_of(tuple(map(self.table.name_of, ids)))


# How a record begins depends on its name id alone: made once per id in a process (whatever
# report's table gives the id), not once per name and report.
@functools.lru_cache(maxsize=1 << 14)
def _name_prefix(name_id: int) -> bytes:
    return _NAME_FIELD + varint_bytes(name_id)


@functools.lru_cache(maxsize=1 << 14)
def _double_lead(name_id: int) -> bytes:
    return _name_prefix(name_id) + b"\x12\x09\x19"


def record_ids(records: Sequence[bytes], parse_id: Any) -> list[int]:
    """The name id of each record: read from its first bytes where ncu begins a record with it
    in one or two bytes, else by ``parse_id(record)``."""
    ids = [(record[1] if record[1] < 0x80 else (record[1] & 0x7F | record[2] << 7) if record[2] < 0x80 else -1)
           if len(record) > 2 and record[0] == 8 else -1 for record in records]
    if -1 in ids:
        ids = [found if found != -1 else int(parse_id(record)) for found, record in zip(ids, records, strict=True)]
    return ids


def varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def varint_at(data: bytes, at: int, end: int | None = None) -> tuple[int, int] | None:
    """(value, position after it) of the varint at ``at``; None where it runs past ``end`` (the
    data's end by default) or 10 bytes."""
    value = shift = 0
    end = min(len(data) if end is None else end, at + 10)
    while at < end:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    return None


def value(record: bytes, at: int) -> Any:
    """The value of a ``MetricResult`` record whose name id ends at ``at``, as ncu writes it
    (field 2, a ``MetricValue`` holding one double, float or integer; then the per-instance
    values and other fields, which are not looked at: no writer repeats field 1 or 2 after
    them, so their bytes cost nothing whatever their number); ``SLOW`` for anything else
    (strings included), which the protobuf library reads."""
    if record[at:at + 1] != b"\x12" or at + 1 >= len(record):
        return SLOW
    size = record[at + 1]
    body, end = at + 2, at + 2 + size
    if size >= 0x80 or end > len(record):
        return SLOW
    if size == 0:
        return None
    kind = record[body]
    if kind == 0x19 and size == 9:
        return DOUBLE.unpack_from(record, body + 1)[0]
    if kind == 0x15 and size == 5:
        return _FLOAT.unpack_from(record, body + 1)[0]
    if kind in (_UINT32, _UINT64):
        found = varint_at(record, body + 1)
        if found is not None and found[1] == end:
            return found[0] & (0xFFFFFFFF if kind == _UINT32 else 0xFFFFFFFFFFFFFFFF)
    return SLOW
