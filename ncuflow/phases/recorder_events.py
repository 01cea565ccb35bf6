"""One server-sent event of an OpenAI-compatible completion stream, checked by shape.

A ``data:`` payload is ``[DONE]`` or a JSON object: ``choices`` a list (or absent/null)
whose first entry is an object with ``text`` (completions) or ``delta.content`` /
``delta.reasoning_content`` (chat) as a string or null; ``usage`` an object or null whose
``completion_tokens`` is a count from 1 to ``MAX_COUNT``; ``error`` an object or text the
server sends instead of a chunk. Anything else (``[1,2,3]``, ``5``, ``null``,
``{"choices":5}``, ``{"choices":{"a":1}}``, JSON nested deeper than ``MAX_DEPTH``, an
integer of thousands of digits, ``completion_tokens`` of −5 or ``true``, text that is no
JSON) raises ``MalformedEvent``, which names what the event holds: the request is recorded
as failed with that reason, the others go on. Fields the recorder does not use are not
checked (a logprob of ``-Infinity`` is the server's business).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ncuflow.files.inputs import deepest_nesting
from ncuflow.phases.parse.json_values import BadJson, count_or_none, loads
from ncuflow.phases.parse.values import MAX_COUNT

MAX_DEPTH = 32  # an OpenAI chunk nests 7 levels at most (tool calls); checked before json reads it
DONE = "[DONE]"


class MalformedEvent(ValueError):
    """An event that is not a completion chunk; the text says what it holds."""


@dataclass(frozen=True)
class Event:
    """What one event carried: output text, the final token count, the end, or a server error."""

    text: str = ""
    completion_tokens: int | None = None
    done: bool = False
    error: str | None = None


def printable(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters with control characters escaped (a server's words
    reach the terminal in the failure line)."""
    cut = text[:limit]
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in cut)
    return shown + ("…" if len(text) > limit else "")


def _nesting(text: str) -> int:
    """How deep ``text`` nests, when it could nest past ``MAX_DEPTH`` (0 when it cannot)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0
    return deepest_nesting(text)


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), f"the number {value!r}" if isinstance(value, int | float) else type(value).__name__)


def _decode(payload: str) -> dict[str, Any]:
    if _nesting(payload) > MAX_DEPTH:
        raise MalformedEvent(f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        value = loads(payload)
    except BadJson as error:
        raise MalformedEvent(f"{error}: '{printable(payload, 60)}'") from None
    if not isinstance(value, dict):
        raise MalformedEvent(f"{_kind(value)}, not a JSON object")
    return value


def _optional_text(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedEvent(f"'{where}' is {_kind(value)}, not text")
    return value


def _choice_text(event: dict[str, Any]) -> str:
    choices = event.get("choices")
    if choices is None:
        return ""
    if not isinstance(choices, list):
        raise MalformedEvent(f"'choices' is {_kind(choices)}, not a list")
    if not choices:
        return ""
    choice = choices[0]
    if not isinstance(choice, dict):
        raise MalformedEvent(f"'choices[0]' is {_kind(choice)}, not an object")
    if "text" in choice:
        return _optional_text(choice["text"], "choices[0].text")
    delta = choice.get("delta")
    if delta is None:
        return ""
    if not isinstance(delta, dict):
        raise MalformedEvent(f"'choices[0].delta' is {_kind(delta)}, not an object")
    content = _optional_text(delta.get("content"), "choices[0].delta.content")
    return content or _optional_text(delta.get("reasoning_content"), "choices[0].delta.reasoning_content")


def _completion_tokens(event: dict[str, Any]) -> int | None:
    usage = event.get("usage")
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise MalformedEvent(f"'usage' is {_kind(usage)}, not an object")
    tokens = usage.get("completion_tokens")
    if tokens is None:
        return None
    if count_or_none(tokens, low=1) is None:
        raise MalformedEvent(f"'usage.completion_tokens' is {_kind(tokens)}, not a count from 1 to {MAX_COUNT:,}")
    return tokens


def _server_error(event: dict[str, Any]) -> str | None:
    error = event.get("error")
    if not error:
        return None
    message = error.get("message", error) if isinstance(error, dict) else error
    return printable(str(message))


def read_event(payload: str) -> Event:
    """The event of one ``data:`` payload (its text after ``data:``, stripped)."""
    if payload == DONE:
        return Event(done=True)
    event = _decode(payload)
    error = _server_error(event)
    if error is not None:
        return Event(error=error)
    return Event(text=_choice_text(event), completion_tokens=_completion_tokens(event))
