"""The terminal module: stripping for Claude, escaping for the operator's screen (pure, no network)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remote_bash import terminal
from remote_bash.framing import OutputCapture, TextCleaner, clean_text, render_output
from remote_bash.terminal import ByteTracker, Stripper, escape, escape_json, strip

ESC = "\x1b"
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
# Characters that matter to the scanner, mixed into random text so that sequences actually occur.
_SPECIAL = st.sampled_from([ESC, "[", "]", "P", "X", "^", "_", "\\", "\x07", "\x18", "\x1a", "\x9b", "\x9c",
                            "\x9d", "\x90", "\x85", ";", "1", "m", "(", "B", "\n", "\r", "\t", "\x7f", "\x00",
                            "\u202e", "é", "日"])
TEXT = st.lists(st.one_of(_SPECIAL, st.characters()), max_size=80).map("".join)
PRINTABLE = st.text(st.characters(codec="utf-8", categories=["L", "M", "N", "P", "S", "Zs"]).filter(
    lambda c: c not in BIDI and not 0x80 <= ord(c) <= 0x9F and c not in "\u00ad\u180e"))


# -- stripping: what Claude reads ----------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "plain"), [
    ("\x1b[1mbold\x1b(B\x1b[m\n", "bold\n"),  # tput bold / tput sgr0 with TERM=xterm
    ("\x1b[01;34mdir\x1b[0m  \x1b[01;32mexe\x1b[0m\n", "dir  exe\n"),  # ls --color=always
    ("\x1b7saved\x1b8", "saved"),  # DECSC / DECRC
    ("\x1b=keypad\x1b>", "keypad"),  # DECKPAM / DECKPNM
    ("\x1bcreset", "reset"),  # RIS
    ("\x1b(0lqk\x1b(B", "lqk"),  # charset selection
    ("\x1b#8x\x1b%Gy", "xy"),  # intermediates
    ("\x1b]0;my title\x07after", "after"),  # OSC ended by BEL
    ("\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC 8 hyperlink, ended by ST
    ("\x1b]52;c;ZWNobyBwd25lZA==\x07x", "x"),  # OSC 52: the clipboard
    ("\x1bPq#0;2;0;0;0#0~~@@vv\x1b\\x", "x"),  # DCS (sixel)
    ("\x1b_Gf=100;AAAA\x1b\\x", "x"),  # APC (kitty graphics)
    ("\x1b^private\x1b\\x\x1bXsos\x1b\\y", "xy"),  # PM, SOS
    ("\x9b31mred\x9b0m", "red"),  # 8-bit CSI
    ("\x9d0;title\x9cx\x90dcs\x9cy", "xy"),  # 8-bit OSC, DCS, ST
    ("a\x85b\x84c", "abc"),  # other C1 controls
    ("\x1b[31\x18m", "m"),  # CAN aborts a sequence
    ("\x1b]0;unterminated\x1b[1mx", "x"),  # ESC ends a string and starts the next sequence
    ("\x1b[1\n2mx", "\nx"),  # a C0 control inside a sequence is executed
    ("\x1b[1é", "é"),  # a character that cannot belong to a sequence ends it
    ("a\x00b\x07c\x08d\x7fe", "abcde"),
    ("tab\tnl\n", "tab\tnl\n"),
    ("\x1b", ""),
    ("\x1b[", ""),
    ("\x1b]", ""),
])
def test_strip_removes_sequences(raw: str, plain: str) -> None:
    assert strip(raw) == plain


def test_clean_text_collapses_progress_lines() -> None:
    assert clean_text("10%\r50%\r100%\ndone\r\n") == "100%\ndone\n"
    assert clean_text("\x1b[32m10%\x1b[0m\r\x1b[32m99%\x1b[0m\r\n") == "99%\n"
    assert clean_text("a\r") == "a"
    assert clean_text("a\r\rb") == "b"


def _on_a_terminal(text: str) -> str:
    # A model of a terminal's screen, one column at a time: \r goes to the column 0, a tab to the
    # next multiple of 8 without writing, every other character overwrites its column.
    lines = []
    for line in text.replace("\r\n", "\n").split("\n"):
        screen: dict[int, str] = {}
        col = 0
        for c in line:
            if c == "\r":
                col = 0
            elif c == "\t":
                col = col // 8 * 8 + 8
            else:
                screen[col] = c
                col += 1
        last = max(screen, default=-1)
        lines.append("".join(screen.get(i, " ") for i in range(last + 1)) if "\r" in line else line)
    return "\n".join(lines)


@given(st.text(st.sampled_from("ab\r\n\t")))
def test_progress_lines_collapse_as_on_a_terminal(text: str) -> None:
    assert clean_text(text) == _on_a_terminal(text)


def test_a_shorter_state_does_not_hide_what_it_does_not_cover() -> None:
    assert clean_text("WARNING: wrote /etc/cron.d/backdoor\rDone.\n") == "Done.NG: wrote /etc/cron.d/backdoor\n"
    assert clean_text("[##  ]  10%\r[####] 100%\r\n") == "[####] 100%\n"  # the same width: the last state
    assert clean_text("secret\r\tDone") == "secret  Done"  # a tab moves over, writes nothing
    # A wide character takes two columns: two narrow ones cover it, one blanks it.
    assert clean_text("中中中中\rabcd") == "abcd中中"
    assert clean_text("AAAAA\r中") == "中AAA"
    assert clean_text("a中b\r x") == " x b"
    assert clean_text("e\u0301tc\rX") == "Xtc"  # a combining mark goes with its character
    # A line longer than the terminal's few carriage returns costs one pass.
    assert clean_text("x" * 200_000 + "\ry" * 100_000) == "y" + "x" * 199_999


def test_the_narrow_stretches_are_one_column_each() -> None:
    # What the collapse reads without counting columns must take one column per character.
    import sys

    from remote_bash.framing import _narrow, _width

    wide = [f"U+{o:04X}" for o in range(sys.maxunicode + 1)
            if chr(o) != "\r" and _narrow().fullmatch(chr(o)) and _width(chr(o)) != 1]
    assert wide == []
    assert _width("中") == 2 and _width("\u0301") == 0 and _width("\u200b") == 0 and _width("\u0378") == 1


def test_what_the_collapse_joins_is_masked_again() -> None:
    from remote_bash.framing import collapse_cr

    def mask(text: str) -> str:
        return re.sub(r"password=\S+", "password=[REDACTED]", text)

    # The redactor saw no key beside the value; the collapse puts one there.
    assert collapse_cr("XXXXXXXX=hunter2\rpassword", mask) == "password=[REDACTED]"
    assert collapse_cr("plain\n", mask) == "plain\n"


def reference_strip(text: str) -> str:
    """The same parser, one character at a time and with no shortcuts: what :func:`strip` must equal."""
    ground, esc, inter, csi, osc, string = range(6)
    c1 = {0x90: string, 0x98: string, 0x9B: csi, 0x9D: osc, 0x9E: string, 0x9F: string}
    state, out = ground, []
    for c in text:
        o = ord(c)
        if o == 0x1B:
            state = esc
        elif o in (0x18, 0x1A):
            state = ground
        elif 0x80 <= o <= 0x9F:
            state = c1.get(o, ground)
        elif state == ground:
            if (o >= 0x20 and o != 0x7F) or c in "\n\t\r":
                out.append(c)
        elif state in (osc, string):
            if state == osc and o == 0x07:
                state = ground
        elif o < 0x20:
            if c in "\n\t\r":
                out.append(c)
        elif o == 0x7F:
            pass
        elif o > 0x9F:
            state = ground
            out.append(c)
        elif state == csi:
            if o >= 0x40:
                state = ground
        elif o <= 0x2F:
            state = inter
        elif state == esc:
            state = {"[": csi, "]": osc, "P": string, "X": string, "^": string, "_": string}.get(c, ground)
        else:
            state = ground
    return "".join(out)


@settings(max_examples=2000)
@given(TEXT)
def test_strip_equals_the_plain_parser(text: str) -> None:
    assert strip(text) == reference_strip(text)


@settings(max_examples=500)
@given(TEXT)
def test_strip_leaves_no_control(text: str) -> None:
    out = strip(text)
    assert not any(ord(c) < 0x20 and c not in "\n\t\r" for c in out)
    assert not any(0x7F <= ord(c) <= 0x9F for c in out)


@settings(max_examples=500)
@given(TEXT)
def test_strip_is_idempotent(text: str) -> None:
    assert strip(strip(text)) == strip(text)
    assert clean_text(clean_text(text)) == clean_text(text)


@given(PRINTABLE)
def test_plain_text_is_unchanged(text: str) -> None:
    assert strip(text) == text
    assert escape(text) == text
    assert escape_json(text) == text


@settings(max_examples=500)
@given(TEXT, st.lists(st.integers(0, 80), max_size=6))
def test_a_sequence_split_across_chunks_is_still_stripped(text: str, cuts: list[int]) -> None:
    points = sorted({min(c, len(text)) for c in cuts})
    chunks = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    stripper = Stripper()
    assert "".join(stripper.feed(c) for c in chunks) == strip(text)
    cleaner = TextCleaner()
    streamed = "".join(cleaner.feed(c) for c in chunks)
    assert ESC not in streamed and strip(streamed) == streamed


@settings(max_examples=300)
@given(TEXT, st.lists(st.integers(0, 300), max_size=6))
def test_byte_tracker_follows_the_scanner(text: str, cuts: list[int]) -> None:
    data = text.encode("utf-8", "surrogatepass")
    points = sorted({min(c, len(data)) for c in cuts})
    tracker = ByteTracker()
    for a, b in zip([0, *points], [*points, len(data)], strict=True):
        tracker.feed(data[a:b])
    stripper = Stripper()
    stripper.feed(data.decode("utf-8", "replace"))
    assert tracker.state == stripper.state


@settings(max_examples=300)
@given(st.text(), st.integers(0, 8))
def test_strip_never_raises(text: str, state: int) -> None:
    strip(text, state % 6)
    escape(text)
    escape_json(text)


def test_scanner_regexes_cannot_backtrack() -> None:
    # Every pattern is one character class, alone or repeated with nothing after it, or else every
    # repetition in it is possessive: a match can only extend, never retry, so a scan is linear
    # whatever the input.
    patterns = [v.pattern for v in vars(terminal).values() if isinstance(v, re.Pattern)]
    assert len(patterns) >= 7
    for pattern in patterns:
        if re.fullmatch(r"\[[^\[\]]*\][*+]?", pattern, re.S):
            continue
        shape = re.sub(r"\\.", "e", pattern)  # escaped characters
        shape = re.sub(r"\[[^\]]*\]", "c", shape)  # character classes
        shape = shape.replace("(?:", "(").replace("(?=", "(")  # groups, lookahead
        shape = re.sub(r"[*+]\+", "", shape)  # possessive repetitions
        assert not re.search(r"[*+?{]", shape), pattern


@pytest.mark.parametrize("unit", ["\x1b", "\x1b[", "\x1b[1", "\x1b\n", "\x1b]", "\x1b]\x1b[", "\x1bP", "\x9b",
                                  "\x1b(", "\x1b[1;\x1b]0;"])
def test_repeated_openers_are_read_in_one_pass(unit: str) -> None:
    # Counts the scanner's steps through the regexes it calls: linear in the input, whatever it is.
    text = unit * 20_000
    assert strip(text) in ("", "\n" * 20_000)


def test_the_tail_is_stripped_from_the_state_it_starts_in() -> None:
    # An OSC string that starts in the middle (cut away) and ends in the tail: none of it shows.
    cap = OutputCapture(limit=1024)
    cap.add(b"head\n" + b"x" * 2000)
    cap.add(b"\x1b]8;;https://example.com/")
    cap.add(b"y" * 1500 + b"\n" + b"y" * 1500)  # a newline inside the string is part of it
    cap.add(b"\x07\nvisible\n" + b"z" * 100)  # (the line the cut falls into is not shown)
    text, truncated = render_output(cap, 4000)
    assert truncated
    assert "visible" in text and "yyy" not in text and "example.com" not in text


def test_a_c1_control_split_between_chunks_is_followed() -> None:
    cap = OutputCapture(limit=1024)
    cap.add(b"a" * 2000 + b"\xc2")
    cap.add(b"\x9d0;secret\ntitle")  # U+009D: 8-bit OSC, its two bytes in two chunks
    cap.add(b"\x1b\\\nshown\n" + b"b" * 1100)
    text, _ = render_output(cap, 8000)
    assert "shown" in text and "secret" not in text and "title" not in text


# -- escaping: the operator's terminal ------------------------------------------------------------------


@settings(max_examples=500)
@given(TEXT)
def test_escape_leaves_nothing_a_terminal_acts_on(text: str) -> None:
    for out in (escape(text), escape_json(text)):
        assert ESC not in out
        assert not any(ord(c) < 0x20 and c not in "\n\t" for c in out)
        assert not any(0x7F <= ord(c) <= 0x9F for c in out)
        assert not any(c in BIDI for c in out)
        out.encode("utf-8")  # no lone surrogate left


def test_escape_shows_what_was_there() -> None:
    assert escape("\x1b]52;c;aGk=\x07") == "\\x1b]52;c;aGk=\\x07"
    assert escape("rm -rf /tmp/x\r\x1b[Kls") == "rm -rf /tmp/x\\x0d\\x1b[Kls"
    assert escape("ok\u202e txt.exe") == "ok\\u202e txt.exe"
    assert escape("a\x08\x08b\tc\nd") == "a\\x08\\x08b\tc\nd"
    assert escape("\x9b1m\ud800\U000e0041") == "\\x9b1m\\ud800\\U000e0041"


def test_escape_covers_every_invisible_and_format_character() -> None:
    # The escaped set is a written-out table: it must hold every control, format character,
    # separator and surrogate of the running Python's Unicode (a newer Python may add some).
    import json
    import sys
    import unicodedata

    missed = [f"U+{o:04X}" for o in range(sys.maxunicode + 1)
              if unicodedata.category(chr(o)) in ("Cc", "Cf", "Zl", "Zp", "Cs") and chr(o) not in "\n\t"
              and (escape(chr(o)) == chr(o) or escape_json(chr(o)) == chr(o))]
    assert missed == [], f"not escaped (unicodedata {unicodedata.unidata_version}): {missed}"
    for c in "\U0001d173\U0001343f\U0001bca0\u0891\u0600":
        shown = f"\\U{ord(c):08x}" if ord(c) > 0xFFFF else f"\\u{ord(c):04x}"
        assert escape(f"a{c}b") == f"a{shown}b"
        assert json.loads(escape_json(json.dumps(f"a{c}b", ensure_ascii=False))) == f"a{c}b"


@given(st.recursive(st.none() | st.booleans() | st.integers() | TEXT,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                    max_leaves=8))
def test_escape_json_keeps_the_json_value(value: object) -> None:
    import json

    for indent in (None, 2):
        dumped = json.dumps(value, ensure_ascii=False, indent=indent)
        safe = escape_json(dumped)
        assert json.loads(safe) == value
