"""Secrets the recorder never writes or prints: its API key, authorization headers, URL credentials.

A server may echo the request's headers back (a 401 page, an SSE ``error`` event, a proxy's
message): the recorder's own words about a request (its ``error`` field in the trace, the
"first failure" line) pass through ``Redactor.text`` before they are written or shown. The key
is replaced wherever it appears, as sent and as JSON or a URL would quote it; so is any
``Authorization:`` / ``Bearer`` value and any ``user:password@`` of a URL, whoever's they are.
``Redactor.values`` replaces the key alone (cheap: for every event line, before a message
quotes and cuts it, so no prefix of the key survives a cut); a message cut to length (ending in
``…``) that ends in the head of the key, which the server had spelled otherwise (JSON's
``\u0073k-…``), has that head replaced too. ``without_credentials`` shows a
URL with its ``user:password@`` replaced (a refused base URL is named in its error).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from urllib.parse import quote

REDACTED = "[redacted]"
CUT_MARK = "…"  # how recorder_events.printable ends a message it cut
SHOWN_HEAD = 3  # a key's first characters a cut message may keep ("sk-" tells nothing)
# "Authorization: Bearer x", "authorization=Basic x", "'Authorization': 'x'", "Bearer x", "api_key=x", and a
# URL's "scheme://user:password@".
_AUTHORIZATION = re.compile(r"""((?:proxy-)?authorization['"]?\s*[:=]\s*['"]?)(?:(bearer|basic|token)\s+)?[^\s'",}]+""",
                            re.IGNORECASE)
_BEARER = re.compile(r"\b(bearer|basic|token)(\s+)(?!\[redacted\])[A-Za-z0-9._~+/=:-]{4,}", re.IGNORECASE)
_KEY_FIELD = re.compile(r"""((?:api[_-]?key|x-api-key|access[_-]?token|secret)['"]?\s*[:=]\s*['"]?)[^\s'",}]+""",
                        re.IGNORECASE)
_URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")  # to the last @ of the authority


def without_credentials(url: str) -> str:
    """``url`` with the ``user:password@`` of its authority replaced."""
    return _URL_CREDENTIALS.sub(lambda found: found.group(1) + REDACTED + "@", url)


def _authorization(found: re.Match[str]) -> str:
    scheme = found.group(2)
    return found.group(1) + (f"{scheme} " if scheme else "") + REDACTED


def _forms(secret: str) -> tuple[str, ...]:
    """How ``secret`` reads as sent, inside JSON, and in a URL (longest first)."""
    forms = {secret, json.dumps(secret)[1:-1], quote(secret, safe="")}
    return tuple(sorted(forms, key=len, reverse=True))


@dataclass(frozen=True)
class Redactor:
    """Replaces the secrets of one recording in text the recorder writes or prints."""

    secrets: tuple[str, ...] = ()
    _forms: tuple[str, ...] = field(init=False, repr=False, default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "_forms", tuple(f for s in self.secrets if s for f in _forms(s)))

    def values(self, text: str) -> str:
        """``text`` with every form of the secrets replaced."""
        for form in self._forms:
            if form in text:
                text = text.replace(form, REDACTED)
        return text

    def _head_at_cut(self, text: str) -> str:
        body = text.removesuffix(CUT_MARK)
        if body == text:
            return text
        for secret in self.secrets:
            for size in range(min(len(secret) - 1, len(body)), SHOWN_HEAD, -1):
                if body.endswith(secret[:size]):
                    return body[:-size] + REDACTED + CUT_MARK
        return text

    def text(self, text: str) -> str:
        """``text`` with the secrets, authorization values, key fields and URL credentials replaced."""
        text = self._head_at_cut(self.values(text))
        text = _AUTHORIZATION.sub(_authorization, text)
        text = _BEARER.sub(lambda found: found.group(1) + found.group(2) + REDACTED, text)
        text = _KEY_FIELD.sub(lambda found: found.group(1) + REDACTED, text)
        return without_credentials(text)
