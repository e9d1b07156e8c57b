"""Terminal control text: strip it from what Claude reads, show it escaped on the operator's screen.

Two jobs over plain ``str``, both one linear pass:

- :func:`strip` (and :class:`Stripper`, the same over a stream of chunks) removes what a terminal
  would interpret rather than print, following the ECMA-48 / DEC VT500 parser: ``ESC`` sequences
  (``ESC 7``, ``ESC c``, charset selection ``ESC ( B``, ...), CSI sequences (colours, cursor
  movement), the control strings OSC (ended by BEL or ST), DCS, SOS, PM and APC, the C1 controls
  U+0080-U+009F (which are the 8-bit forms of all of these), and the other C0 controls and DEL.
  Newline, tab and carriage return are kept (a terminal executes them even inside a sequence).
  CAN and SUB abort a sequence, and ESC starts a new one, wherever they come, as on a terminal.
  A sequence split across chunks is stripped all the same: the scanner's state is carried over.
- :func:`escape` shows every character a terminal could act on as visible text (``\\x1b]52;...``):
  C0 controls but newline and tab, DEL, C1 controls, bidirectional overrides and isolates,
  zero-width and every other format character (category Cf), line and paragraph separators, and
  lone surrogates (which cannot be encoded).
  :func:`escape_json` does the same with JSON's ``\\uXXXX`` escapes, for JSON text.

The scanner uses regular expressions only as single character classes (a run of one class) and
one pattern of whole well-formed sequences whose runs are all possessive, so nothing can
backtrack, and every character is looked at a bounded number of times. This module does no I/O
and imports nothing of the package but :mod:`remote_bash._escape`, where :func:`escape` lives (a
kept call's client loads that alone, not the scanner's patterns).
"""

from __future__ import annotations

import codecs
import re

from remote_bash._escape import escape, escape_json

__all__ = ["GROUND", "ByteTracker", "Stripper", "escape", "escape_json", "strip"]

GROUND, ESCAPE, INTERMEDIATE, CSI, OSC, STRING = range(6)
"""Scanner states: plain text; after ESC; after ESC and intermediates; inside a CSI sequence;
inside an OSC string (BEL or ST ends it); inside a DCS, SOS, PM or APC string (ST ends it)."""

# What a C1 control does, from any state: the 8-bit forms of ESC P, ESC X, ESC [, ESC \, ESC ],
# ESC ^, ESC _ open (or, ST, end) a sequence; every other C1 control is executed on its own.
_C1_STATE = [GROUND] * 32
_C1_STATE[0x10] = _C1_STATE[0x18] = _C1_STATE[0x1E] = _C1_STATE[0x1F] = STRING
_C1_STATE[0x1B] = CSI
_C1_STATE[0x1D] = OSC
_AFTER_ESC = {"[": CSI, "]": OSC, "P": STRING, "X": STRING, "^": STRING, "_": STRING}

# In plain text, characters that leave the state unchanged: all but ESC and C1.
_GROUND_RUN = re.compile(r"[^\x1b\x80-\x9f]*")
# Removed from plain text: C0 controls but tab, newline and carriage return; DEL. (ESC and C1
# never reach this: they change the state.)
_DROP = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]+")
_DROP_BYTES = bytes([*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
# A whole well-formed sequence at an ESC or an 8-bit CSI, removed in one step (most sequences are
# these): CSI; ESC with intermediates; ESC and a final that opens nothing; OSC ended by BEL or ST;
# DCS, SOS, PM or APC ended by ST. Every run is possessive (``*+``, ``++``) and each alternative
# starts with its own characters, so a failed match costs one pass and nothing is retried; what
# does not match (a C0 control inside, a sequence cut short) goes through the state machine, which
# reads it the same way.
_WHOLE = (
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*+[\x20-\x2f]*+[\x40-\x7e]"
    r"|\x1b[\x20-\x2f]++[\x30-\x7e]"
    r"|\x1b[\x30-\x4f\x51-\x57\x59\x5a\x5c\x60-\x7e]"
    r"|\x1b\][^\x07\x18\x1a\x1b\x80-\x9f]*+(?:\x07|\x1b\\)"
    r"|\x1b[PX^_][^\x18\x1a\x1b\x80-\x9f]*+\x1b\\"
)
_SEQUENCE = re.compile(_WHOLE)
# From plain text: a stretch of plain runs and whole sequences, read in one call. Within it every
# ESC or C1 control starts a whole sequence, so removing _SEQUENCE's matches leaves its text.
_STRETCH = re.compile(r"(?:[^\x1b\x80-\x9f]++|" + _WHOLE + r")*+")
_CSI_RUN = re.compile(r"[\x20-\x3f]*")  # parameter and intermediate bytes
_INTERMEDIATE_RUN = re.compile(r"[\x20-\x2f]*")
_OSC_RUN = re.compile(r"[^\x07\x18\x1a\x1b\x80-\x9f]*")
_STRING_RUN = re.compile(r"[^\x18\x1a\x1b\x80-\x9f]*")
_KEPT_IN_SEQUENCE = frozenset("\n\t\r")


def _scan(text: str, state: int, keep: bool) -> tuple[str, int]:
    """Strip ``text`` starting in ``state``; returns the kept text ("" unless ``keep``) and the
    state at its end. Each turn of the loop consumes at least one character."""
    out: list[str] = []
    pos, n = 0, len(text)
    while pos < n:
        if state == GROUND:
            end = _STRETCH.match(text, pos).end()  # type: ignore[union-attr]  # `*` always matches
            if end > pos:
                if keep:
                    out.append(_SEQUENCE.sub("", text[pos:end]))
                pos = end
                if pos == n:
                    break
            c = text[pos]
            pos += 1
            state = ESCAPE if c == "\x1b" else _C1_STATE[ord(c) - 0x80]
            continue
        c = text[pos]
        o = ord(c)
        # Anywhere: ESC starts a sequence, CAN and SUB abort one, a C1 control acts at once.
        if o == 0x1B:
            state, pos = ESCAPE, pos + 1
        elif o in (0x18, 0x1A):
            state, pos = GROUND, pos + 1
        elif 0x80 <= o <= 0x9F:
            state, pos = _C1_STATE[o - 0x80], pos + 1
        elif state == OSC:
            pos = _OSC_RUN.match(text, pos).end()  # type: ignore[union-attr]
            if pos < n and text[pos] == "\x07":
                state, pos = GROUND, pos + 1
        elif state == STRING:
            pos = _STRING_RUN.match(text, pos).end()  # type: ignore[union-attr]
        elif o < 0x20:
            # A terminal executes a C0 control met inside a sequence, and goes on with the sequence.
            if keep and c in _KEPT_IN_SEQUENCE:
                out.append(c)
            pos += 1
        elif o == 0x7F:
            pos += 1
        elif o > 0x9F:
            # Not part of any sequence: the sequence is abandoned and the character is text.
            state = GROUND
        elif state == CSI:
            pos = _CSI_RUN.match(text, pos).end()  # type: ignore[union-attr]
            if pos < n and "\x40" <= text[pos] <= "\x7e":
                state, pos = GROUND, pos + 1
        elif o <= 0x2F:
            state = INTERMEDIATE
            pos = _INTERMEDIATE_RUN.match(text, pos).end()  # type: ignore[union-attr]
        else:
            # The final character of ESC x or ESC intermediates x: 0x30-0x7E.
            state = _AFTER_ESC.get(c, GROUND) if state == ESCAPE else GROUND
            pos += 1
    # The controls plain text drops are dropped at the end, in one pass: inside a sequence only
    # newline, tab and carriage return were kept, and those stay.
    return _drop("".join(out)) if keep else "", state


def _drop(text: str) -> str:
    if text.isascii():
        # bytes.translate deletes at C speed: several times faster than a regex substitution.
        return text.encode("ascii").translate(None, _DROP_BYTES).decode("ascii")
    return _DROP.sub("", text)


def strip(text: str, state: int = GROUND) -> str:
    """``text`` with every escape sequence, control string and control character removed, as read
    starting in ``state``; newline, tab and carriage return are kept. Idempotent."""
    if state == GROUND and "\x1b" not in text and (text.isascii() or not _has_c1(text)):
        return _drop(text)
    return _scan(text, state, True)[0]


def _has_c1(text: str) -> bool:
    return _GROUND_RUN.match(text).end() < len(text)  # type: ignore[union-attr]


class Stripper:
    """:func:`strip` over a stream: a sequence split across chunks is removed all the same.

    Nothing is held back: the characters of a sequence are dropped as they arrive, so
    ``"".join(s.feed(c) for c in chunks) == strip("".join(chunks))`` for any split.
    """

    def __init__(self, state: int = GROUND) -> None:
        self.state = state

    def feed(self, text: str) -> str:
        if self.state == GROUND and "\x1b" not in text and (text.isascii() or not _has_c1(text)):
            return _drop(text)
        out, self.state = _scan(text, self.state, True)
        return out


class ByteTracker:
    """Follows the scanner's state over a stream of UTF-8 bytes without producing text, so that
    text cut out of the middle of the stream can be stripped from the state it starts in.

    Chunks with neither ESC nor the lead byte of a C1 control (0xC2) cost two ``bytes.find``.
    """

    def __init__(self) -> None:
        self.state = GROUND
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._held = False  # the decoder holds the start of a character cut at a chunk's end

    def feed(self, data: bytes) -> None:
        if self.state == GROUND and not self._held and b"\x1b" not in data and b"\xc2" not in data:
            # Neither ESC nor a C1 control (U+0080-U+009F is 0xC2 0x80-0x9F), and no character
            # of the chunk before to complete: the state stays as it is. A character cut at this
            # chunk's end has no 0xC2, so it cannot be a C1 control either: it is let go.
            self._decoder.reset()
            return
        self.state = _scan(self._decoder.decode(data), self.state, False)[1]
        self._held = bool(self._decoder.getstate()[0])
