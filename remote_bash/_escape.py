"""Showing text on the operator's terminal: every character a terminal could act on, escaped.

:func:`escape` and :func:`escape_json` (re-exported by :mod:`remote_bash.terminal`, which documents
them) live here, apart from the scanner that strips terminal control text, so that printing a
kept call's output loads one pattern, not the scanner's. No I/O; imports nothing of the package.
"""

from __future__ import annotations

import functools
import re

__all__ = ["escape", "escape_json"]

# Every character of Unicode category Cc (controls), Cf (format: zero-width, bidi, invisible
# operators, tags), Zl and Zp (line and paragraph separators) and Cs (surrogates), of Unicode 15
# (the Egyptian format controls it added included), with the unassigned code points between them
# in a block. Written out rather than derived from unicodedata, which would cost a scan of every
# code point (0.2 s) at each start; tests/test_terminal.py checks the table against the running Python's unicodedata.
_ESCAPED_RANGES = [
    (0x00, 0x08), (0x0B, 0x1F), (0x7F, 0x9F),  # C0 but tab and newline, DEL, C1
    (0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD),  # soft hyphen, Arabic
    (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2),  # Syriac, Arabic marks
    (0x180E, 0x180E), (0x200B, 0x200F),  # Mongolian vowel separator, zero-width, bidi marks
    (0x2028, 0x202E), (0x2060, 0x206F), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB),  # separators, bidi, invisible
    (0xD800, 0xDFFF),  # lone surrogates: not text, and no terminal encoding takes them
    (0x110BD, 0x110BD), (0x110CD, 0x110CD),  # Kaithi number signs
    (0x13430, 0x1343F),  # Egyptian hieroglyph format controls
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol format controls
    (0xE0000, 0xE007F),  # tag characters: invisible
]
_VISIBLE = re.compile("[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in _ESCAPED_RANGES) + "]")


def _c_escape(o: int) -> str:
    if o <= 0xFF:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}"


def _json_escape(o: int) -> str:
    if o <= 0xFFFF:
        return f"\\u{o:04x}"
    o -= 0x10000
    return f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}"


@functools.cache
def _table(json: bool) -> dict[int, str]:
    # Built on first use: most runs never need it, and the command line should start fast.
    how = _json_escape if json else _c_escape
    return {o: how(o) for a, b in _ESCAPED_RANGES for o in range(a, b + 1)}


def escape(text: str) -> str:
    """``text`` with every character a terminal could act on, or that would not show, written as
    ``\\xHH``, ``\\uHHHH`` or ``\\UHHHHHHHH``; newline and tab are kept. Plain text is unchanged."""
    return text.translate(_table(False)) if _VISIBLE.search(text) else text


def escape_json(text: str) -> str:
    """:func:`escape` for JSON text (``json.dumps(..., ensure_ascii=False)``): the same characters as
    JSON ``\\uXXXX`` escapes, so the JSON still decodes to the same values. Such characters can only
    stand inside JSON strings, where these escapes are valid."""
    return text.translate(_table(True)) if _VISIBLE.search(text) else text
