"""A toy per-request log format, whole: one module (this) and one registry row (added by the
test that uses it). Its log has one line per finished request, ``req=ID start=S first=F end=E
tokens=N`` (submit, first token, last token, output tokens), the shape of engines that log each
request's timing rather than batch statistics (TGI, llama.cpp's server)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ncuflow.phases.model.capabilities import per_request_capabilities
from ncuflow.phases.model.traces import RequestRecord, RequestTrace
from ncuflow.phases.parse.format import LineFormat

REQ = re.compile(r"^req=(?P<id>\w+) start=(?P<start>[\d.]+) first=(?P<first>[\d.]+) end=(?P<end>[\d.]+) tokens=(?P<tokens>\d+)$")
TOY_REQUESTS = per_request_capabilities(
    name="toyreq", title="Toy per-request log", server="ToyServe", admission_evidence="a request's line",
    preemption_word="eviction", batch_field="in flight", throughput_field="tokens", batch_cap_option="--toy-slots",
)

@dataclass
class ToyRequestReader:
    """Each request line as a request: its first and last token as two chunks."""

    path: Path
    requests: list[RequestRecord] = field(default_factory=list)
    def context(self, number: int, line: str) -> None:
        """Nothing around the request lines is read."""
    def feed(self, number: int, line: str) -> None:
        found = REQ.match(line)
        if found:
            n = int(found["tokens"])
            self.requests.append(RequestRecord(found["id"], float(found["start"]), (float(found["first"]), float(found["end"])), (1, n - 1), number))
    def traces(self) -> tuple[RequestTrace, ...]:
        return (RequestTrace(str(self.path), "toy", "toyreq", tuple(self.requests)),)

TOY_REQUEST_FORMAT = LineFormat(
    name="toyreq", capabilities=TOY_REQUESTS, claims=lambda line: bool(REQ.match(line)),
    reader=lambda path, skip: ToyRequestReader(path), describe="a toy per-request log ('req=… start=… first=… end=… tokens=…' lines)",
    help="one line per request: 'req=ID start=S first=F end=E tokens=N'",
)
