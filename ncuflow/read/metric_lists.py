"""A metric's per-instance list, streamed from its record's bytes: ``(correlation id, value)`` pairs.

A ``ProfileMetricResult`` (NVIDIA's ``ProfilerResultsCommon.proto``) holds, besides its name id
(field 1) and value (field 2), a ``MetricValueList`` (field 3): repeated
``ProfileMetricListElement`` messages, each a ``CorrelationId`` (field 1), an ``ElementValue``
(field 2) and ``InstanceValues`` (field 3, repeated), every one a ``ProfileMetricValue`` (a
string 1, float 2, double 3, uint32 4 or uint64 5). For the source counters
(``ncuflow.read.source_counters``) the correlation id is an instruction's address (PC).

ncuflow's message classes (``ncuflow.read.schema``) leave field 3 unparsed, so that the default
read costs nothing for it; ``elements`` walks it only where the source view asks, one element
at a time from the record's bytes: nothing of the list is kept, whatever its length. A value
field written twice counts as its last (as ``upb`` and ``ncu_report`` read it). Bytes that do
not follow the layout, a correlation id that is no integer or a value that is no number, are
``DamagedList``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import TypeVar

from ncuflow.read.layout import varint_at

_DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_LIST_FIELD = 3  # ProfileMetricResult.MetricValueList
_CORRELATION, _ELEMENT = 1, 2  # ProfileMetricListElement.CorrelationId, .ElementValue
_UINT32_MASK, _UINT64_MASK = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF

Number = int | float


class DamagedList(Exception):
    """A per-instance list whose bytes do not follow NVIDIA's layout; ``str()`` says where."""


def _varint(data: bytes, at: int, end: int) -> tuple[int, int]:
    found = varint_at(data, at, end)
    if found is None:
        raise DamagedList(f"a varint at byte {at} runs past its message")
    return found


def _skip(data: bytes, at: int, end: int, wire: int) -> int:
    """The position after a field's value of this wire type (the key already read)."""
    if wire == _VARINT:
        return _varint(data, at, end)[1]
    if wire == _LENGTH:
        size, at = _varint(data, at, end)
        after = at + size
    elif wire in (_FIXED64, _FIXED32):
        after = at + (8 if wire == _FIXED64 else 4)
    else:
        raise DamagedList(f"a field at byte {at} has wire type {wire}, which no message of the list uses")
    if after > end:
        raise DamagedList(f"a field at byte {at} runs past its message (wire type {wire})")
    return after


def _metric_value(data: bytes, at: int, end: int) -> str | Number | None:
    """A ``ProfileMetricValue`` in ``data[at:end]``: the last value field set; None for none."""
    found: str | Number | None = None
    while at < end:
        key, at = _varint(data, at, end)
        field, wire = key >> 3, key & 7
        if field == 3 and wire == _FIXED64 and at + 8 <= end:
            found = _DOUBLE.unpack_from(data, at)[0]
            at += 8
        elif field in (4, 5) and wire == _VARINT:
            raw, at = _varint(data, at, end)
            found = raw & (_UINT32_MASK if field == 4 else _UINT64_MASK)
        elif field == 2 and wire == _FIXED32 and at + 4 <= end:
            found = _FLOAT.unpack_from(data, at)[0]
            at += 4
        elif field == 1 and wire == _LENGTH:
            after = _skip(data, at, end, wire)
            found = "text"  # a string value: no number (the source counters are numbers)
            at = after
        else:
            at = _skip(data, at, end, wire)
    return found


_IdValue = TypeVar("_IdValue")


def _element_fields(data: bytes, at: int, end: int,
                    read_id: Callable[[bytes, int, int], _IdValue]) -> tuple[_IdValue | None, str | Number | None]:
    """(correlation id as ``read_id`` reads it, value) of one ``ProfileMetricListElement`` in
    ``data[at:end]``, the last of each written; None for one absent."""
    correlation: _IdValue | None = None
    found: str | Number | None = None
    while at < end:
        key, at = _varint(data, at, end)
        field, wire = key >> 3, key & 7
        after = _skip(data, at, end, wire)
        if wire == _LENGTH and field in (_CORRELATION, _ELEMENT):
            inner = _varint(data, at, end)[1]
            if field == _CORRELATION:
                correlation = read_id(data, inner, after)
            else:
                found = _metric_value(data, inner, after)
        at = after
    return correlation, found


def _number(found: str | Number | None, start: int) -> Number:
    """The element's value; ``DamagedList`` where it holds no number."""
    if found is None or isinstance(found, str):
        raise DamagedList(f"the list element at byte {start} holds no number ({found!r})")
    return found


def _element(data: bytes, at: int, end: int) -> tuple[int, Number]:
    """(correlation id, value) of one ``ProfileMetricListElement`` in ``data[at:end]``."""
    correlation, found = _element_fields(data, at, end, _metric_value)
    if not isinstance(correlation, int):
        raise DamagedList(f"the list element at byte {at} has no address (correlation id {correlation!r})")
    return correlation, _number(found, at)


# The encodings of values seen lately (an address, a count), each decoded once: a launch's lists
# hold the same addresses, and mostly the same few counts. Bounded: emptied when full.
_DECODED: dict[bytes, str | Number | None] = {}
_DECODED_KEPT = 1 << 14


def _value_of(encoded: bytes) -> str | Number | None:
    found = _DECODED.get(encoded, _DECODED)
    if found is _DECODED:
        if len(_DECODED) >= _DECODED_KEPT:
            _DECODED.clear()
        found = _DECODED[encoded] = _metric_value(encoded, 0, len(encoded))
    return found  # type: ignore[return-value]


def _common(element: bytes) -> tuple[int, Number] | None:
    """An element as ncu writes it (a correlation id, then a value, each under 128 bytes, no
    instance values), through the decoded encodings; None for any other shape."""
    if len(element) < 4 or element[0] != 0x0A or element[1] >= 0x80:
        return None
    value_at = 2 + element[1]
    if value_at + 2 > len(element) or element[value_at] != 0x12 or value_at + 2 + element[value_at + 1] != len(
            element):
        return None
    correlation, found = _value_of(element[2:value_at]), _value_of(element[value_at + 2:])
    if isinstance(correlation, int) and isinstance(found, int | float):
        return correlation, found
    return None


def _list_field_at(record: bytes, at: int, end: int) -> tuple[int | None, int]:
    """Where the element of the field at ``at`` begins (None for a field that is no list element)
    and the position after the field; ``DamagedList`` for a list field that is no message."""
    key, at = _varint(record, at, end)
    field, wire = key >> 3, key & 7
    after = _skip(record, at, end, wire)
    if field != _LIST_FIELD:
        return None, after
    if wire != _LENGTH:
        raise DamagedList(f"the list field at byte {at} has wire type {wire}, not a message")
    return _varint(record, at, end)[1], after


def elements(record: bytes) -> Iterator[tuple[int, Number]]:
    """(correlation id, value) of each element of a ``MetricResult`` record's list, in order."""
    at, end = 0, len(record)
    while at < end:
        if record[at] == 0x1A and at + 1 < end and record[at + 1] < 0x80:  # an element under 128 bytes
            after = at + 2 + record[at + 1]
            if after <= end and (common := _common(record[at + 2:after])) is not None:
                yield common
                at = after
                continue
        start, at = _list_field_at(record, at, end)
        if start is not None:
            yield _element(record, start, at)


def _text_value(data: bytes, at: int, end: int) -> str | None:
    """The string (field 1) of a ``ProfileMetricValue`` in ``data[at:end]``; None where it holds none."""
    found: str | None = None
    while at < end:
        key, at = _varint(data, at, end)
        field, wire = key >> 3, key & 7
        after = _skip(data, at, end, wire)
        if field == 1 and wire == _LENGTH:
            start = _varint(data, at, end)[1]
            found = data[start:after].decode("utf-8", errors="replace")
        at = after
    return found


def labelled_elements(record: bytes) -> Iterator[tuple[str, Number]]:
    """(label, value) of each element of a list whose correlation ids are strings (an opcode's name:
    ``sass__inst_executed_per_opcode``), in order; ``DamagedList`` for any other element."""
    at, end = 0, len(record)
    while at < end:
        start, at = _list_field_at(record, at, end)
        if start is not None:
            yield _labelled(record, start, at)


def _labelled(data: bytes, at: int, end: int) -> tuple[str, Number]:
    """(label, value) of one ``ProfileMetricListElement`` whose correlation id is a string."""
    label, found = _element_fields(data, at, end, _text_value)
    if label is None:
        raise DamagedList(f"the list element at byte {at} has no label")
    return label, _number(found, at)
