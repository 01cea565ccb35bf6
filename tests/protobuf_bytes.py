"""Per-instance list elements as NVIDIA's schema lays them out, built for tests.

A ``ProfileMetricResult``'s list (field 3) holds ``ProfileMetricListElement`` messages: a
correlation id (field 1) and a value (field 2), each a ``ProfileMetricValue``
(``ncuflow.read.metric_lists`` reads them). Varints are ``ncuflow.read.layout``'s.
"""

from __future__ import annotations

from ncuflow.read.layout import varint_bytes

_LIST, _CORRELATION, _VALUE = 0x1A, 0x0A, 0x12  # the keys of length-delimited fields 3, 1 and 2
_STRING, _UINT64 = 0x0A, 0x28  # ProfileMetricValue.StringValue (field 1), .Uint64Value (field 5)


def _delimited(key: int, body: bytes) -> bytes:
    return bytes([key]) + varint_bytes(len(body)) + body


def uint64_value(value: int) -> bytes:
    """A ``ProfileMetricValue`` holding an unsigned 64-bit integer."""
    return bytes([_UINT64]) + varint_bytes(value)


def string_value(text: str) -> bytes:
    """A ``ProfileMetricValue`` holding a string."""
    return _delimited(_STRING, text.encode())


def list_element(correlation: bytes, value: bytes) -> bytes:
    """One list entry of a ``ProfileMetricResult`` (field 3): a ``ProfileMetricListElement`` of the
    two ``ProfileMetricValue``s."""
    return _delimited(_LIST, _delimited(_CORRELATION, correlation) + _delimited(_VALUE, value))
