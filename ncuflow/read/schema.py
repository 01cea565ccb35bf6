"""ncuflow's own minimal schema of the report file's protobuf messages: what it reads, nothing more.

NVIDIA documents the ``.ncu-rep`` format (Nsight Compute's Customization Guide, "Report
File Format") and ships its schemas with every install (``extras/FileFormat/*.proto``).
The messages below keep, of those schemas, only the fields ncuflow reads, under the same
field numbers and wire types; every other field (sections, sources, the metrics'
per-instance lists, ...) is left unparsed by the protobuf library (``upb``). Three
departures from NVIDIA's text, all wire-compatible:

- a result's metrics (``ProfileResult`` field 13) are read as the bytes of each
  ``MetricResult``, not parsed into messages: a launch of a full set carries ~2,000 of
  them and reads ~100, each where the report's read plan says it lies
  (``ncuflow.read.fileaction``); ``MetricResult`` parses one where needed;
- the five fields of ``ProfileMetricValue`` are one ``oneof`` (``value``), so that the
  field that is set is found in one call (``WhichOneof``); ncu writes one of them;
- every field is ``optional``: a field NVIDIA marks ``required`` and a writer left out
  is an absent value here, not a parse failure.

The schema is data (``MESSAGES``), encoded here as a serialized ``FileDescriptorProto`` by a
few lines of wire format (``serialized_schema``), so that neither ``protoc`` at build time
nor ``descriptor_pb2`` at import time (~30 ms) is needed; the message classes exist once per
process (``messages()``), and importing this module imports no ``google.protobuf``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from ncuflow.read.layout import varint_bytes as _varint

_PACKAGE = "ncuflow.report"
# FieldDescriptorProto's type and label numbers (descriptor.proto)
_DOUBLE, _FLOAT, _UINT64, _INT32, _STRING, _MESSAGE, _BYTES, _UINT32 = 1, 2, 4, 5, 9, 11, 12, 13
_OPTIONAL, _REPEATED = 1, 3

# (number, name, type, repeated, message type name or None), per message; the numbers
# are NVIDIA's (ProfilerReport.proto, ProfilerResultsCommon.proto, RuleResults.proto,
# Nvtx.proto), the names ncuflow's.
FieldSpec = tuple[int, str, int, bool, str | None]

MESSAGES: dict[str, tuple[FieldSpec, ...]] = {
    # NV.Profiler.Messages.FileHeader
    "FileHeader": ((1, "version", _UINT32, False, None),),
    # NV.Profiler.Messages.ProfilerStringTable
    "StringTable": ((1, "strings", _STRING, True, None),),
    # NV.Profiler.Messages.ProcessInfo
    "ProcessInfo": ((1, "process_id", _UINT32, False, None),),
    # NV.Profiler.Messages.BlockHeader: its string table and session details as bytes (the table
    # is parsed as a StringTable where it is new; the ncu version is searched in the details' bytes)
    "BlockHeader": (
        (1, "num_sources", _UINT32, False, None),
        (2, "num_results", _UINT32, False, None),
        (3, "session_details", _BYTES, False, None),
        (4, "string_table", _BYTES, False, None),
        (5, "payload_size", _UINT32, False, None),
        (6, "process", _MESSAGE, False, "ProcessInfo"),
        (7, "num_range_results", _UINT32, False, None),
    ),
    # NV.Profiler.Messages.ProfileMetricValue
    "MetricValue": (
        (1, "string_value", _STRING, False, None),
        (2, "float_value", _FLOAT, False, None),
        (3, "double_value", _DOUBLE, False, None),
        (4, "uint32_value", _UINT32, False, None),
        (5, "uint64_value", _UINT64, False, None),
    ),
    # NV.RuleSystem.RuleResultMessage / RuleResultBodyItem / RuleResultBody / RuleResult
    "RuleMessage": ((1, "message", _STRING, False, None), (4, "title", _STRING, False, None)),
    "RuleBodyItem": ((1, "message", _MESSAGE, False, "RuleMessage"),),
    "RuleBody": ((1, "items", _MESSAGE, True, "RuleBodyItem"),),
    "RuleResult": ((1, "identifier", _STRING, False, None), (3, "body", _MESSAGE, False, "RuleBody")),
    # NV.Nvtx.NvtxState and the parts of it that name the ranges enclosing a launch
    "NvtxPushPopRange": ((1, "name", _STRING, False, None),),
    "NvtxPushPopDomain": ((1, "id", _UINT64, False, None), (3, "stack", _MESSAGE, True, "NvtxPushPopRange")),
    "NvtxThread": ((1, "tid", _UINT32, False, None),
                   (2, "push_pop_domains", _MESSAGE, True, "NvtxPushPopDomain")),
    "NvtxStartEndRange": ((2, "name", _STRING, False, None),),
    "NvtxStartEndDomain": ((1, "id", _UINT64, False, None), (3, "ranges", _MESSAGE, True, "NvtxStartEndRange")),
    "NvtxDomainInfo": ((1, "id", _UINT64, False, None), (2, "name", _STRING, False, None)),
    "NvtxState": (
        (1, "domains", _MESSAGE, True, "NvtxDomainInfo"),
        (2, "threads", _MESSAGE, True, "NvtxThread"),
        (3, "start_end_domains", _MESSAGE, True, "NvtxStartEndDomain"),
        (4, "default_domain", _UINT64, False, None),
    ),
    # NV.Profiler.Messages.ProfileMetricResult (MetricValueList, 3, and what newer ncu versions
    # add, are not read). Not a map from NameId to MetricValue, which has the same encoding:
    # upb keeps a map entry with a field it does not know as unknown bytes, not as an entry.
    "MetricResult": ((1, "name_id", _UINT32, False, None), (2, "value", _MESSAGE, False, "MetricValue")),
    # NV.Profiler.Messages.ProfileResult
    "ProfileResult": (
        (1, "thread_id", _UINT32, False, None),
        (5, "mangled_name", _STRING, False, None),
        (6, "function_name", _STRING, False, None),
        (7, "demangled_name", _STRING, False, None),
        (13, "metrics", _BYTES, True, None),  # each a MetricResult, parsed where it is read
        (19, "rule_results", _MESSAGE, True, "RuleResult"),
        (21, "nvtx", _MESSAGE, False, "NvtxState"),
    ),
}


# NV.RuleSystem's RuleResult as ``ncu_report`` reads it (RuleResults.proto): what a launch's findings
# are read from, only where they are asked for (``findings_messages``): a second file of the schema, so
# the default parse of a ``ProfileResult`` (its ``RuleResult`` above: the identifier and the messages'
# titles, for ``nvidia_sol``) stays as it is. An enum is read as its number (an int32: the same varint),
# so that a number the schema does not name is kept, not moved to the unknown fields. The tables, charts
# and proposals of a body item (fields 2-7, 9, 11, 12) are left unparsed.
FINDINGS_MESSAGES: dict[str, tuple[FieldSpec, ...]] = {
    # NV.RuleSystem.RuleResultMessage (Name is the title)
    "FindingMessage": ((1, "message", _STRING, False, None), (2, "type", _INT32, False, None),
                       (3, "id", _INT32, False, None), (4, "title", _STRING, False, None)),
    # NV.RuleSystem.RuleResultSpeedup
    "FindingSpeedup": ((1, "type", _INT32, False, None), (2, "value", _DOUBLE, False, None)),
    # NV.RuleSystem.RuleResultFocusMetric
    "FindingFocusMetric": ((1, "message_id", _INT32, False, None), (2, "name", _STRING, False, None),
                           (3, "value", _DOUBLE, False, None), (4, "severity", _INT32, False, None),
                           (5, "info", _STRING, False, None)),
    # NV.RuleSystem.RuleResultBodyItem / RuleResultBody
    "FindingItem": ((1, "message", _MESSAGE, False, "FindingMessage"),
                    (8, "focus_metrics", _MESSAGE, True, "FindingFocusMetric"),
                    (10, "speedup", _MESSAGE, False, "FindingSpeedup")),
    "FindingBody": ((1, "items", _MESSAGE, True, "FindingItem"),),
    # NV.RuleSystem.SourceMarker (Tooltip is the message)
    "FindingMarker": ((1, "kind", _INT32, False, None), (2, "line", _UINT32, False, None),
                      (3, "address", _UINT64, False, None), (4, "tooltip", _STRING, False, None),
                      (5, "type", _INT32, False, None), (6, "file_name", _STRING, False, None)),
    # NV.RuleSystem.RuleResult
    "FindingRule": ((1, "identifier", _STRING, False, None), (2, "display_name", _STRING, False, None),
                    (3, "body", _MESSAGE, False, "FindingBody"), (4, "section", _STRING, False, None),
                    (5, "markers", _MESSAGE, True, "FindingMarker")),
}


# Messages whose fields form one oneof, and its name.
ONEOFS = {"MetricValue": "value"}


def _tagged(number: int, value: int | str | bytes) -> bytes:
    """One field in wire format: a varint (an int) or a length-delimited one (text or bytes)."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    raw = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(raw)) + raw


def _field_descriptor(spec: FieldSpec, in_oneof: bool) -> bytes:
    """A ``FieldDescriptorProto``: name 1, number 3, label 4, type 5, type_name 6, oneof_index 9."""
    number, name, kind, repeated, type_name = spec
    encoded = (_tagged(1, name) + _tagged(3, number) + _tagged(4, _REPEATED if repeated else _OPTIONAL)
               + _tagged(5, kind))
    if type_name is not None:
        encoded += _tagged(6, f".{_PACKAGE}.{type_name}")
    return encoded + (_tagged(9, 0) if in_oneof else b"")


def serialized_schema(schema: dict[str, tuple[FieldSpec, ...]] = MESSAGES, file: str = "ncuflow/report.proto",
                      ) -> bytes:
    """The schema as a serialized ``FileDescriptorProto`` (proto2): name 1, package 2, message_type 4
    (each a ``DescriptorProto``: name 1, field 2, oneof_decl 8), syntax 12."""
    encoded = _tagged(1, file) + _tagged(2, _PACKAGE)
    for name, fields in schema.items():
        oneof = ONEOFS.get(name)
        message = _tagged(1, name) + b"".join(_tagged(2, _field_descriptor(spec, oneof is not None)) for spec in fields)
        if oneof is not None:
            message += _tagged(8, _tagged(1, oneof))
        encoded += _tagged(4, message)
    return encoded + _tagged(12, "proto2")


@dataclass(frozen=True)
class Messages:
    """The message classes of the schema."""

    file_header: Any
    block_header: Any
    string_table: Any
    profile_result: Any
    metric_result: Any


@functools.cache
def messages() -> Messages:
    classes = _upb_classes(MESSAGES) or _classes(MESSAGES)
    return Messages(*(classes[name] for name in ("FileHeader", "BlockHeader", "StringTable", "ProfileResult",
                                                 "MetricResult")))


@functools.cache
def finding_rule_class() -> Any:
    """The message class of a whole ``RuleResult`` (``FINDINGS_MESSAGES``), made the first time findings
    are read."""
    file = "ncuflow/findings.proto"
    classes = _upb_classes(FINDINGS_MESSAGES, file) or _classes(FINDINGS_MESSAGES, file)
    return classes["FindingRule"]


def _classes(schema: dict[str, tuple[FieldSpec, ...]], file: str = "ncuflow/report.proto") -> dict[str, Any]:
    """The message classes through protobuf's public API (its descriptor pool and message factory)."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(serialized_schema(schema, file))
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
            for name in schema}


def _upb_classes(schema: dict[str, tuple[FieldSpec, ...]], file: str = "ncuflow/report.proto",
                 ) -> dict[str, Any] | None:
    """The message classes made straight by ``upb``, as its message factory makes them, without the
    pure-Python layer the public API imports first (``python_message``, ``text_format``: ~35 ms,
    more than the floor's whole read of a small report). None where this protobuf has no ``upb``
    or makes its classes otherwise: ``_classes`` then."""
    try:
        from google._upb import _message
        from google.protobuf import message

        pool = _message.DescriptorPool()
        pool.AddSerializedFile(serialized_schema(schema, file))
        return {name: _message.MessageMeta(name, (message.Message,), {
            "DESCRIPTOR": pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"), "__module__": None})
            for name in schema}
    except Exception:  # any protobuf that does not work so: the public API
        return None
