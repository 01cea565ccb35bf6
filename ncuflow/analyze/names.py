"""Kernel names a person can read: demangled C++ names shortened, templates folded.

``void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>,
at::detail::Array<char *, 1>>(int, T2, T3)`` becomes
``at::native::vectorized_elementwise_kernel<…>``: no return type, no parameter list,
template arguments folded, ``(int)128`` written ``128``. Where two different kernels would
get the same short name, ``distinct_short_names`` shows their first level of template
arguments (deeper ones folded), and numbers them if they still collide. Outputs keep the
full name beside the short one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

FOLD = "…"
_QUALIFIERS = ("static ", "__global__ ", "extern ", "inline ")
_ANONYMOUS = re.compile(r"\(anonymous namespace\)::|<unnamed>::|`anonymous namespace'::")
# how the demangler spells template constants: "(int)128" -> "128", "(bool)0" -> "false"
_CAST = re.compile(r"\((?:unsigned |signed )?(?:int|long|long long|short|char|unsigned)\)(-?\d+)")
_BOOL = re.compile(r"\(bool\)([01])")


def _top_level(text: str, wanted: str) -> int:
    """Index of the first ``wanted`` character outside template brackets (-1: none)."""
    depth = 0
    for index, char in enumerate(text):
        if char == "<":
            depth += 1
        elif char == ">":
            depth = max(0, depth - 1)
        elif char == wanted and depth == 0 and index > 0:
            return index
    return -1


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated template arguments of ``text`` (the part inside ``<…>``)."""
    args: list[str] = []
    depth = 0
    start = 0
    for index, char in enumerate(text):
        if char in "<([":
            depth += 1
        elif char in ">)]":
            depth = max(0, depth - 1)
        elif char == "," and depth == 0:
            args.append(text[start:index].strip())
            start = index + 1
    args.append(text[start:].strip())
    return [a for a in args if a]


def fold_templates(text: str) -> str:
    """Every template argument list replaced by ``<…>``."""
    out: list[str] = []
    depth = 0
    for char in text:
        if char == "<":
            depth += 1
            if depth == 1:
                out.append("<" + FOLD + ">")
        elif char == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(char)
    return "".join(out)


def _parts(name: str) -> tuple[str, list[str] | None]:
    """(qualified name, its template arguments or None) of a demangled kernel name."""
    text = _ANONYMOUS.sub("", " ".join(name.split()))
    text = _BOOL.sub(lambda m: "true" if m.group(1) == "1" else "false", _CAST.sub(r"\1", text))
    for qualifier in _QUALIFIERS:
        text = text.removeprefix(qualifier)
    paren = _top_level(text, "(")
    if paren > 0:
        text = text[:paren].rstrip()
    space = -1
    depth = 0
    for index, char in enumerate(text):  # the return type ends at the last space outside brackets
        if char == "<":
            depth += 1
        elif char == ">":
            depth = max(0, depth - 1)
        elif char == " " and depth == 0:
            space = index
    text = text[space + 1:]
    angle = text.find("<")
    if angle <= 0 or not text.endswith(">"):
        return text, None
    return text[:angle], _split_args(text[angle + 1:-1])


def _shorten_head(head: str, width: int) -> str:
    parts = head.split("::")
    while len(parts) > 1 and len("::".join(parts)) + 3 > width:
        parts = parts[1:]
    shortened = "::".join(parts)
    return shortened if shortened == head else FOLD + "::" + shortened


def short_name(name: str, width: int = 60, show_arguments: bool = False) -> str:
    """A readable form of a (demangled) kernel name of about ``width`` characters.

    Template arguments are folded to ``<…>``; with ``show_arguments`` the first level is
    shown (each argument's own templates folded) as far as the width allows.
    """
    head, args = _parts(name)
    if not head:
        return "(unnamed kernel)"
    if args is None:
        return _shorten_head(head, width)
    if not show_arguments:
        return _shorten_head(head, max(width - 3, 8)) + "<" + FOLD + ">"
    head = _shorten_head(head, max(width // 2, 8))
    shown: list[str] = []
    for arg in (fold_templates(a) for a in args):
        if len(head) + len(", ".join([*shown, arg])) + 4 > width and shown:
            shown.append(FOLD)
            break
        shown.append(arg)
    return f"{head}<{', '.join(shown)}>"


def distinct_short_names(names: Iterable[str], width: int = 60) -> Mapping[str, str]:
    """A short name per distinct full name, no two alike (first template level shown, then numbered)."""
    unique = list(dict.fromkeys(names))
    short = {name: short_name(name, width) for name in unique}
    for expanded in (False, True):
        counts: dict[str, int] = {}
        for text in short.values():
            counts[text] = counts.get(text, 0) + 1
        clashing = [name for name in unique if counts[short[name]] > 1]
        if not clashing or expanded:
            break
        for name in clashing:
            short[name] = short_name(name, max(width, 100), show_arguments=True)
    counts = {}
    for text in short.values():
        counts[text] = counts.get(text, 0) + 1
    seen: dict[str, int] = {}
    for name in unique:
        text = short[name]
        if counts[text] > 1:
            seen[text] = seen.get(text, 0) + 1
            short[name] = f"{text} #{seen[text]}"
    return short


def shorten_middle(text: str, width: int = 40) -> str:
    """``long-repository__report-name.ncu-rep`` cut in the middle, so both ends stay readable."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + FOLD + text[len(text) - (width - 1 - head):]
