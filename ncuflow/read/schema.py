"""ncuflow's own minimal schema of the report file's protobuf messages: what it reads, nothing more.

NVIDIA documents the ``.ncu-rep`` format (Nsight Compute's Customization Guide, "Report
File Format") and ships its schemas with every install (``extras/FileFormat/*.proto``).
The messages below keep, of those schemas, only the fields ncuflow reads, under the same
field numbers and wire types; every other field (sections, sources, the metrics'
per-instance lists, ...) is left unparsed by the protobuf library (``upb``). Two
departures from NVIDIA's text, both wire-compatible:

- the five fields of ``ProfileMetricValue`` are one ``oneof`` (``value``), so that the
  field that is set is found in one call (``WhichOneof``); ncu writes one of them;
- every field is ``optional``: a field NVIDIA marks ``required`` and a writer left out
  is an absent value here, not a parse failure.

The descriptors are built here, in Python, so no ``protoc`` runs at build time; the
message classes exist once per process (``messages()``), and importing this module
imports ``google.protobuf`` (the read side only: the profiling path never needs it).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "ncuflow.report"
_FIELD = descriptor_pb2.FieldDescriptorProto

# (number, name, type, repeated, message type name or None), per message; the numbers
# are NVIDIA's (ProfilerReport.proto, ProfilerResultsCommon.proto, RuleResults.proto,
# Nvtx.proto), the names ncuflow's.
_STRING, _UINT32, _UINT64 = _FIELD.TYPE_STRING, _FIELD.TYPE_UINT32, _FIELD.TYPE_UINT64
_FLOAT, _DOUBLE, _MESSAGE = _FIELD.TYPE_FLOAT, _FIELD.TYPE_DOUBLE, _FIELD.TYPE_MESSAGE
FieldSpec = tuple[int, str, int, bool, str | None]

MESSAGES: dict[str, tuple[FieldSpec, ...]] = {
    # NV.Profiler.Messages.FileHeader
    "FileHeader": ((1, "version", _UINT32, False, None),),
    # NV.Profiler.Messages.ProfilerStringTable
    "StringTable": ((1, "strings", _STRING, True, None),),
    # NV.Profiler.Messages.ProcessInfo
    "ProcessInfo": ((1, "process_id", _UINT32, False, None),),
    # NV.Profiler.Messages.BlockHeader (SessionDetails: not read; the ncu version is read from the bytes)
    "BlockHeader": (
        (1, "num_sources", _UINT32, False, None),
        (2, "num_results", _UINT32, False, None),
        (4, "string_table", _MESSAGE, False, "StringTable"),
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
        (13, "metrics", _MESSAGE, True, "MetricResult"),
        (19, "rule_results", _MESSAGE, True, "RuleResult"),
        (21, "nvtx", _MESSAGE, False, "NvtxState"),
    ),
}


# Messages whose fields form one oneof, and its name.
ONEOFS = {"MetricValue": "value"}


def _add_fields(message: descriptor_pb2.DescriptorProto, fields: tuple[FieldSpec, ...], oneof: str | None = None) -> None:
    if oneof is not None:
        message.oneof_decl.add(name=oneof)
    for number, name, kind, repeated, type_name in fields:
        field = message.field.add(name=name, number=number, type=kind,
                                  label=_FIELD.LABEL_REPEATED if repeated else _FIELD.LABEL_OPTIONAL)
        if type_name is not None:
            field.type_name = f".{_PACKAGE}.{type_name}"
        if oneof is not None:
            field.oneof_index = 0


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """The schema as a ``FileDescriptorProto`` (proto2)."""
    proto = descriptor_pb2.FileDescriptorProto(name="ncuflow/report.proto", package=_PACKAGE, syntax="proto2")
    for name, fields in MESSAGES.items():
        message = proto.message_type.add(name=name)
        _add_fields(message, fields, ONEOFS.get(name))
    return proto


@dataclass(frozen=True)
class Messages:
    """The message classes of the schema."""

    file_header: Any
    block_header: Any
    profile_result: Any


@functools.cache
def messages() -> Messages:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor())

    def message_class(name: str) -> Any:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))

    return Messages(message_class("FileHeader"), message_class("BlockHeader"), message_class("ProfileResult"))
