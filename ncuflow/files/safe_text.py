"""Text from a report or a log, made safe to show: ``safe_text``, the one function every
renderer (console tables, Markdown, plots, messages) passes such text through.

A kernel name, a GPU's name, an NVTX range, a serving log's run label or a manifest's value
is whatever the file says: escape sequences that set a terminal's title or clear its screen,
newlines that start a Markdown heading, ``<img onerror=...>``, table pipes, 2 MB of
characters. ``safe_text`` shortens it for display (the head and the tail kept: template
kernels differ at either end) and shows every control character escaped (``\\x1b``,
``\\n``, ``\\u202e``: C0 and C1 controls, DEL, the bidirectional and zero-width format
characters, line and paragraph separators, lone surrogates; and every character that shows as
nothing or as something it is not: Unicode's format characters (category Cf: the soft hyphen,
U+180E, the interlinear annotation marks U+FFF9-FFFB, the tag characters U+E0000-E007F that
spell invisible text), private-use (Co) and unassigned (Cn) code points, and the blank letters
and marks that render as nothing (the Hangul fillers U+3164, U+115F, U+1160, U+FFA0, the
combining grapheme joiner, the Khmer inherent vowels)); for Markdown it also escapes
every character that Markdown or its HTML would read as syntax; for a plot, matplotlib's
mathtext ``$``. Linear in the text and the shortening is done first, so a 2 MB name costs
microseconds. Plain standard library (rich's markup is escaped by rich itself, lazily).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

Target = Literal["terminal", "rich", "markdown", "plot"]

# How much of a name is shown by default: real kernel names are at most a few hundred characters
# (templated C++); the head and the tail of a longer one are kept.
DISPLAY_CHARS = 200
# A sentence that holds names (a note, a warning, a verdict's reasons): longer, its end kept too.
SENTENCE_CHARS = 2000
ELLIPSIS = "…"

# Characters that are never shown as themselves: C0, DEL and C1 controls; the Unicode format
# characters that reorder or hide text (bidi embeddings, overrides and isolates, marks,
# zero-width joiners, the BOM); line and paragraph separators; lone surrogates (bytes that were
# not UTF-8, which no encoder writes).
_CONTROL = "\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff"
_CONTROLS = re.compile(f"[{_CONTROL}]")
# Beyond those (checked by category, outside ASCII only): Unicode's other / format / private-use /
# unassigned code points, separators of lines and paragraphs, and the letters and marks that render
# as blank space or nothing (a label of Hangul fillers looks empty; tag characters hide a sentence).
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
BLANK_LOOKALIKES = frozenset("\u115f\u1160\u3164\uffa0\u034f\u17b4\u17b5")
# Markdown: what CommonMark (and GitHub's tables, strike-through and math) would read as syntax:
# code, emphasis, HTML and autolinks, table cells, strike-through, math, entities; a link or an
# image only where "](" or "][" joins its parts (a lone [grid=...] stays as written); underscores
# only where they could emphasise (a run between two letters or digits cannot: dram_bytes stays).
_MARKDOWN = re.compile(f"[{_CONTROL}" + r"\\`*<>|~$&]|\]\(|\]\[|_+")
# At the start of the text (a list item's or a line's beginning): what starts a block or a link.
_BLOCK_START = re.compile(r"^(\s*)(#|[-+=](?=\s|$)|\d+[.)](?=\s|$)|\[)")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def is_hidden(character: str) -> bool:
    """Whether ``character`` is never shown as itself (a control, an invisible or format one)."""
    return bool(_CONTROLS.match(character)) or unicodedata.category(character) in HIDDEN_CATEGORIES \
        or character in BLANK_LOOKALIKES


def _escaped(character: str) -> str:
    if character in _NAMED:
        return _NAMED[character]
    code = ord(character)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _hidden_escaped(text: str, prefix: str = "") -> str:
    """``text`` with every hidden character outside ASCII escaped (``prefix`` before each: Markdown's
    backslash); linear, and free for ASCII text."""
    if text.isascii():
        return text
    return "".join(prefix + _escaped(c) if c > "\x7f" and is_hidden(c) else c for c in text)


def _markdown_escaped(found: re.Match[str]) -> str:
    token, text = found.group(), found.string
    if token.startswith("_"):
        inside = found.start() > 0 and found.end() < len(text) and text[found.start() - 1].isalnum() \
            and text[found.end()].isalnum()
        return token if inside else "\\_" * len(token)
    if token[0] == "]":
        return "]\\" + token[1]
    if _CONTROLS.match(token):
        return "\\" + _escaped(token)  # the backslash itself escaped: Markdown shows \x1b
    return "\\" + token


def _block_escaped(found: re.Match[str]) -> str:
    marker = found.group(2)
    if marker[0].isdigit():
        return found.group(1) + marker[:-1] + "\\" + marker[-1]
    return found.group(1) + "\\" + marker


def shortened(text: str, limit: int | None = DISPLAY_CHARS) -> str:
    """``text`` within ``limit`` characters: its head and tail around an ellipsis (None: whole)."""
    if limit is None or len(text) <= limit:
        return text
    tail = max(1, (limit - 1) // 3)
    return text[: limit - 1 - tail] + ELLIPSIS + text[-tail:]


def safe_text(value: object, target: Target = "terminal", *, limit: int | None = DISPLAY_CHARS) -> str:
    """``value`` as text that shows as itself on ``target``, shortened to ``limit`` characters.

    ``terminal``: control characters escaped (plain output, ``click.echo``, rich with
    ``markup=False``); ``rich``: that, and rich's markup escaped (table cells, markup strings);
    ``markdown``: control characters escaped and Markdown's syntax backslash-escaped, for a
    table cell, a heading or a line of text; ``plot``: that of ``terminal``, and mathtext's
    ``$`` escaped (matplotlib labels and titles).
    """
    text = shortened(str(value), limit)
    if target == "markdown":
        text = _hidden_escaped(_MARKDOWN.sub(_markdown_escaped, text), "\\")
        return _BLOCK_START.sub(_block_escaped, text, count=1)
    text = _hidden_escaped(_CONTROLS.sub(lambda found: _escaped(found.group()), text))
    if target == "rich":
        from rich.markup import escape

        return escape(text)
    if target == "plot":
        return text.replace("$", r"\$")
    return text


def markup_text(value: object) -> str:
    """A path, a name or a message to interpolate into a rich markup string (a console line, a status,
    a progress description, a table title): whole, as itself (a store under ``run[bold]/`` is printed
    as that path, not in bold and without its ``[bold]``)."""
    return safe_text(value, "rich", limit=None)


# A spreadsheet reads a cell that starts with one of these as a formula (=HYPERLINK(...), +cmd|...,
# -2+3, @SUM(...); a tab or carriage return before one of them too): such a text cell is written
# with a single quote first, as spreadsheets expect (OWASP's CSV injection advice). A cell that
# is a plain number (-1.5, +3e-2) is a value, not a formula: left as it is.
FORMULA_STARTS = "=+-@\t\r"
FORMULA_PREFIX = "'"
FORMULA_START = "^[" + "".join({"\t": r"\t", "\r": r"\r", "-": r"\-"}.get(c, c) for c in FORMULA_STARTS) + "]"
PLAIN_NUMBER = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"
_PLAIN_NUMBER = re.compile(PLAIN_NUMBER)


def spreadsheet_cell(value: object) -> object:
    """``value`` as a CSV cell no spreadsheet runs: a text that would start a formula is quoted."""
    if isinstance(value, str) and value[:1] in FORMULA_STARTS and value and not _PLAIN_NUMBER.match(value):
        return FORMULA_PREFIX + value
    return value
