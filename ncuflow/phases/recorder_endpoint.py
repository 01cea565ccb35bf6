"""The server ``phases-record`` talks to: its base URL, checked once where it enters.

A base URL is ``http://`` or ``https://``, a host (a name, an IPv4 address or a bracketed
IPv6 one), an optional port from 1 to 65535 and an optional path (``/v1`` is added unless it
ends so). Anything else (``:99999``, ``[::1``, ``:abc``, ``:0``, a space or a control
character, a query, credentials) is refused with one paragraph before a request is sent; the
paragraph shows the URL with its ``user:password@`` replaced.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from ncuflow.errors import NcuflowError
from ncuflow.phases.recorder_secrets import without_credentials

EXAMPLE = "http://127.0.0.1:30000"


class RecorderError(NcuflowError):
    """The recorder cannot start (a bad URL, setting or system limit): nothing was sent."""


@dataclass(frozen=True)
class Endpoint:
    """Where each completion request goes: ``scheme://host:port`` + ``path``."""

    scheme: str
    host: str
    port: int
    path: str

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.path}"


def _refuse(base_url: str, why: str) -> RecorderError:
    shown = without_credentials(base_url).encode("unicode_escape").decode("ascii")[:200]
    return RecorderError(
        f"{shown!r} is not a server base URL: {why}.",
        "The recorder talks to an OpenAI-compatible server over HTTP(S).",
        f"Give the server's base URL, e.g. {EXAMPLE} (or {EXAMPLE}/v1).",
    )


def _port(base_url: str, scheme: str, port_text: str | None) -> int:
    if port_text is None:
        return 443 if scheme == "https" else 80
    if not (port_text.isascii() and port_text.isdigit()) or len(port_text) > 5:
        raise _refuse(base_url, f"the port {port_text!r} is not a number from 1 to 65535")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise _refuse(base_url, f"the port {port} is not from 1 to 65535")
    return port


def _host_and_port(base_url: str, netloc: str, scheme: str) -> tuple[str, int]:
    if "@" in netloc:
        raise _refuse(base_url, "it carries credentials (user@), which the recorder does not send")
    if netloc.startswith("["):
        host, bracket, rest = netloc[1:].partition("]")
        if not bracket or not host or (rest and not rest.startswith(":")):
            raise _refuse(base_url, "an IPv6 address must be written whole in brackets, e.g. [::1]:30000")
        return host, _port(base_url, scheme, rest[1:] if rest else None)
    if "[" in netloc or "]" in netloc:
        raise _refuse(base_url, "a bracket outside an IPv6 address")
    host, colon, port_text = netloc.partition(":")
    if not host:
        raise _refuse(base_url, "it names no host")
    return host, _port(base_url, scheme, port_text if colon else None)


def _ascii_host(base_url: str, host: str) -> str:
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        raise _refuse(base_url, f"the host {host!r} is not a valid host name") from None


def parse_endpoint(base_url: str, *, chat: bool) -> Endpoint:
    """The endpoint of ``base_url``'s completions (``/v1/chat/completions`` with ``chat``)."""
    if not base_url or any(not c.isprintable() or c.isspace() for c in base_url):
        raise _refuse(base_url, "it is empty or holds a space or a control character")
    if "://" not in base_url:
        raise _refuse(base_url, "it has no http:// or https://")
    scheme, _, rest = base_url.partition("://")
    scheme = scheme.lower()
    if scheme not in ("http", "https"):
        raise _refuse(base_url, f"the scheme is {scheme!r}, not http or https")
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    host, port = _host_and_port(base_url, netloc, scheme)
    try:
        parts = urlsplit(base_url)
    except ValueError as error:  # what urlsplit itself refuses, said in its words
        raise _refuse(base_url, str(error)) from None
    if parts.query or parts.fragment or "?" in base_url or "#" in base_url:
        raise _refuse(base_url, "it has a query or a fragment (?… or #…)")
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    path += "/chat/completions" if chat else "/completions"
    return Endpoint(scheme, _ascii_host(base_url, host), port, path)
