"""The text editor's text operations, on plain strings: no I/O, no network.

Bytes become a :class:`Document` (UTF-8, undecodable bytes kept as lone surrogates so they
are written back unchanged; CRLF files seen with ``\\n`` and written back with ``\\r\\n``),
and the commands work on its text: numbered views, a unique ``str_replace``, ``insert`` after
a line, a numbered snippet around a change, a short diff for the audit log, a directory
listing. Every refusal is an :class:`EditRefused` whose message tells Claude what to do.

This module must never touch a file or a connection.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from remote_bash.errors import RemoteBashError

__all__ = [
    "Document",
    "EditRefused",
    "bound",
    "decode",
    "diff_excerpt",
    "display",
    "encode",
    "format_listing",
    "insert_lines",
    "looks_binary",
    "number_lines",
    "replace_unique",
    "snippet",
    "split_lines",
    "view_file",
]

NUMBER_WIDTH = 6
SNIPPET_LINES = 4
MAX_LISTED_LINES = 20
"""Line numbers named in a "several occurrences" error, at most."""
_SURROGATE = re.compile("[\ud800-\udfff]")
_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")

Clean = Callable[[str], str]
"""What one line (or one name) of a file becomes when it is shown: its terminal control text
removed and its secrets masked (the session gives it); the identity here, where nothing is shown."""


class Masked(str):
    """A result whose lines were masked each in its file's context before they were numbered: masking
    the numbered text again would take a line's number and indentation for a YAML value's."""

    __slots__ = ()


def _same(text: str) -> str:
    return text


class EditRefused(RemoteBashError):
    """The edit cannot be made as asked; the message says why and what to do instead."""


@dataclass(frozen=True)
class Document:
    """A text file as the editor sees it."""

    text: str
    """The content; ``\\n`` line ends when ``crlf``; undecodable bytes as lone surrogates."""
    crlf: bool
    """Every line of the file ends with ``\\r\\n`` (written back that way)."""
    invalid_bytes: int
    """Bytes that are not UTF-8 (kept exactly, shown as U+FFFD)."""

    def normalize(self, text: str) -> str:
        """Text from Claude in this document's line-end convention."""
        return text.replace("\r\n", "\n") if self.crlf else text


def looks_binary(data: bytes) -> bool:
    """A NUL byte in the first 8 KiB: not a text file."""
    return b"\x00" in data[:8192]


def decode(data: bytes) -> Document:
    """The document for a file's bytes; ``encode(doc.text, doc.crlf) == data`` always holds."""
    try:
        text, invalid = data.decode("utf-8"), 0
    except UnicodeDecodeError:
        text = data.decode("utf-8", "surrogateescape")
        invalid = len(_SURROGATE.findall(text))
    lf = text.count("\n")
    crlf = lf > 0 and text.count("\r\n") == lf
    return Document(text.replace("\r\n", "\n") if crlf else text, crlf, invalid)


def encode(text: str, crlf: bool) -> bytes:
    """The bytes to write for a document's text."""
    if crlf:
        text = text.replace("\n", "\r\n")
    return text.encode("utf-8", "surrogateescape")


def display(text: str) -> str:
    """Text fit to show: undecodable bytes as U+FFFD."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def split_lines(text: str) -> list[str]:
    """The lines of ``text``, without their ends; a final newline does not start another line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def number_lines(lines: Sequence[str], first: int) -> str:
    """``cat -n`` style: the number right-aligned, a tab, the line."""
    return "\n".join(f"{first + i:>{NUMBER_WIDTH}}\t{line}" for i, line in enumerate(lines))


_CONTEXT_LINES = 3
"""Lines above a range that can hold the key (or start tag, or ``- name:``) whose value is in it: the
key's own line and up to two blank lines."""
_PEM_LINES = 2048
"""How far above a range a private key block's BEGIN is looked for (a block is at most 64 KiB)."""


def masked_lines(lines: Sequence[str], start: int, end: int, clean: Clean, mask_lines: Clean) -> list[str]:
    """Lines ``start`` to ``end`` (1-based, inclusive) as shown: each as ``clean`` makes it, then
    masked by ``mask_lines`` together with the lines above them that can hold the start of a secret
    reaching into them (a private key block open above the range, a key whose value is a few lines
    down), every line kept in its place, so the masks are those of the whole file. A ``mask_lines``
    that does not keep lines (a redactor of one's own) masks each line alone."""
    first = max(1, start - _CONTEXT_LINES)
    for index in range(start - 2, max(-1, start - 2 - _PEM_LINES), -1):
        if "-----END" in lines[index]:
            break
        if "-----BEGIN" in lines[index]:
            first = min(first, index + 1)
            break
    cleaned = [clean(line) for line in lines[first - 1 : end]]
    masked = mask_lines("\n".join(cleaned)).split("\n")
    if len(masked) != len(cleaned):
        masked = [mask_lines(line) for line in cleaned]
    return masked[start - first :]


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def view_file(doc: Document, path: str, view_range: object | None,
              max_characters: int | None, clean: Clean = _same, mask_lines: Clean = _same) -> str:
    """The numbered view of a file, or of ``view_range`` ``[start, end]`` (1-based, ``-1`` = to the end).

    Each line is shown as ``clean`` makes it, then masked by ``mask_lines`` as in the whole file
    (see :func:`masked_lines`); the lines ``clean`` changed are named in a note, since old_str must
    match what the file holds, not what is shown."""
    lines = split_lines(display(doc.text))
    total = len(lines)
    note = ""
    if doc.invalid_bytes:
        note = (f" (not valid UTF-8: {doc.invalid_bytes} byte(s) shown as \ufffd; edits elsewhere in the file "
                "keep them as they are)")
    if view_range is None:
        if not total:
            return f"The file {path} is empty{note}."
        start, end = 1, total
    else:
        if (not isinstance(view_range, list | tuple) or len(view_range) != 2
                or not all(_int(v) for v in view_range)):
            raise EditRefused("'view_range' must be two integers [start, end], e.g. [1, 50] or [10, -1]")
        start, end = int(view_range[0]), int(view_range[1])
        if not total:
            raise EditRefused(f"{path} is empty: it has no lines to show; view it without view_range")
        if start < 1 or start > total:
            raise EditRefused(f"view_range start {start} is outside the file: {path} has {total} line(s), "
                              f"numbered 1 to {total}")
        if end == -1 or end > total:
            end = total
        elif end < start:
            raise EditRefused(f"view_range end {end} is before its start {start}; use -1 to view to the end")
    shown = masked_lines(lines, start, end, clean, mask_lines)
    changed = [start + i for i, raw in enumerate(lines[start - 1:end]) if raw != clean(raw)]
    if changed:
        more = ", ..." if len(changed) > MAX_LISTED_LINES else ""
        note += (f" (line(s) {', '.join(map(str, changed[:MAX_LISTED_LINES]))}{more} hold terminal control "
                 "characters or carriage returns, removed here as from bash output: old_str must match the "
                 "file's exact characters, so match text beside them, or change those lines with bash)")
    body = number_lines(shown, start)
    cut = ""
    if max_characters is not None and len(body) > max_characters:
        body = body[:max_characters]
        cut = (f"\n[... the view was cut at {max_characters:,} characters: view a smaller view_range to see "
               "the rest]")
    span = "" if (start, end) == (1, total) else f" (lines {start}-{end} of {total})"
    return Masked(f"Here's the content of {path} with line numbers{span}{note}:\n{body}{cut}")


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def replace_unique(text: str, old: str, new: str, path: str) -> tuple[str, int, int]:
    """``text`` with its one occurrence of ``old`` replaced by ``new``, and the first and last
    line of the new text. No occurrence, or more than one (overlapping ones count), is refused."""
    if not old:
        raise EditRefused("'old_str' is empty; give the exact text to replace (use insert to add lines)")
    pos = text.find(old)
    if pos < 0:
        raise EditRefused(f"no replacement was made: old_str does not occur in {path}. It must match the file "
                          "exactly, whitespace and indentation included; view the file to copy the text")
    second = text.find(old, pos + 1)
    if second >= 0:
        positions = [pos, second]
        while len(positions) < MAX_LISTED_LINES:
            nxt = text.find(old, positions[-1] + 1)
            if nxt < 0:
                break
            positions.append(nxt)
        apart = text.count(old)
        lines = sorted({_line_of(text, p) for p in positions})
        more = ", ..." if len(positions) == MAX_LISTED_LINES else ""
        many = f"{max(apart, len(positions))} times" + (" (overlapping)" if len(positions) > apart else "")
        raise EditRefused(f"no replacement was made: old_str occurs {many} in {path}, at line(s) "
                          f"{', '.join(map(str, lines))}{more}. Include more of the surrounding lines in "
                          "old_str so that it occurs exactly once")
    first = _line_of(text, pos)
    spans = new.count("\n") - (1 if new.endswith("\n") else 0)
    return text[:pos] + new + text[pos + len(old):], first, first + max(spans, 0)


def insert_lines(text: str, after: object, insert_text: str, path: str) -> tuple[str, int, int]:
    """``text`` with ``insert_text`` as new lines after line ``after`` (0 = before the first),
    and the first and last inserted line. The file keeps its final newline, or its absence."""
    lines = split_lines(text)
    total = len(lines)
    if not _int(after):
        raise EditRefused(f"'insert_line' must be an integer from 0 to {total}")
    assert isinstance(after, int)
    if after < 0 or after > total:
        raise EditRefused(f"insert_line {after} is outside the file: {path} has {total} line(s), so insert_line "
                          f"must be from 0 (before the first line) to {total} (after the last)")
    body = insert_text[:-1] if insert_text.endswith("\n") else insert_text
    added = body.split("\n")
    final_newline = text.endswith("\n") or not text
    result = "\n".join([*lines[:after], *added, *lines[after:]]) + ("\n" if final_newline else "")
    return result, after + 1, after + len(added)


def snippet(text: str, first: int, last: int, path: str, clean: Clean = _same, mask_lines: Clean = _same) -> str:
    """The result of an edit: the changed lines with a few lines around them, numbered, each as
    ``clean`` makes it and masked as in the whole file (see :func:`masked_lines`)."""
    lines = split_lines(display(text))
    start = max(1, first - SNIPPET_LINES)
    end = min(len(lines), max(last, first) + SNIPPET_LINES)
    shown = number_lines(masked_lines(lines, start, end, clean, mask_lines), start) if lines else \
        "(the file is now empty)"
    return Masked(f"The file {path} has been edited. Here's the result of the change, with line numbers:\n"
                  f"{shown}\nReview the change and make sure it is as expected; edit the file again if not.")


def diff_excerpt(before: str, after: str, path: str, limit: int = 2000, *, clean: Clean = _same,
                 mask: Clean = _same, mask_lines: Clean = _same) -> str:
    """A unified diff of the change, cut to at most ``limit`` characters, for the audit log.

    Only the region between the first and the last differing line is compared, so a small
    change in a large file costs little. Each line's text is shown as ``clean`` makes it; the
    whole diff is ``mask``-ed before the cut, which then falls at a line's end (within a line
    only when the first line is longer than ``limit``), so a secret is never cut before it is
    masked. Each side's lines are masked as in its whole file (see :func:`masked_lines`) before they
    are prefixed: a ``-``, ``+`` or blank before a line would hide a value on the line after its key."""
    same = _common_prefix(before, after)
    end_same = _common_prefix(before[same:][::-1], after[same:][::-1])
    # Whole lines around the differing characters, two more on each side.
    start = before.rfind("\n", 0, same) + 1
    for _ in range(2):
        if start == 0:
            break
        start = before.rfind("\n", 0, start - 1) + 1
    base = before.count("\n", 0, start)
    old_end = _line_end(before, len(before) - end_same, 3)
    new_end = _line_end(after, len(after) - end_same, 3)
    old_win, new_win = split_lines(before[start:old_end]), split_lines(after[start:new_end])
    old_shown = _window_masked(before, base, len(old_win), clean, mask_lines)
    new_shown = _window_masked(after, base, len(new_win), clean, mask_lines)
    out = []
    old_at = new_at = 0
    for i, line in enumerate(difflib.unified_diff(old_win, new_win, f"a{path}", f"b{path}", n=2, lineterm="")):
        match = _HUNK.match(line)
        if match:
            a, b = int(match.group(1)), int(match.group(3))
            # An empty side's hunk names the line before it.
            old_at, new_at = a - 1 if match.group(2) != ",0" else a, b - 1 if match.group(4) != ",0" else b
            line = f"@@ -{a + base}{match.group(2) or ''} +{b + base}{match.group(4) or ''} @@"
            out.append(line)
        elif i < 2:
            out.append(line)  # the file names, as given
        elif line[:1] == "-":
            out.append("-" + old_shown[old_at])
            old_at += 1
        elif line[:1] == "+":
            out.append("+" + new_shown[new_at])
            new_at += 1
        else:
            out.append(line[:1] + old_shown[old_at])
            old_at += 1
            new_at += 1
    # Lines masked in their files' context are not masked again once prefixed (a "+" before a line
    # would be read as part of a value on the line after its key).
    text = "\n".join(out) if mask_lines is not _same else mask("\n".join(out))
    if len(text) > limit:
        end = text.rfind("\n", 0, limit + 1)
        text = (text[:end] if end > 0 else text[:limit]) + f"\n[... diff cut at {limit:,} characters]"
    return text


def _window_masked(text: str, base: int, count: int, clean: Clean, mask_lines: Clean) -> list[str]:
    """Lines ``base + 1`` to ``base + count`` of ``text`` as shown (see :func:`masked_lines`)."""
    if not count:
        return []
    lines = split_lines(display(text))
    return masked_lines(lines, base + 1, base + count, clean, mask_lines)


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix of ``a`` and ``b``, by halving (slice compares run in C)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _line_end(text: str, pos: int, lines: int) -> int:
    """The offset just past the ``lines``-th line end at or after ``pos`` (or the text's end)."""
    for _ in range(lines):
        nxt = text.find("\n", pos)
        if nxt < 0:
            return len(text)
        pos = nxt + 1
    return pos


def format_listing(path: str, entries: Sequence[tuple[str, bool]], limit: int, clean: Clean = _same, *,
                   stopped: bool | None = None) -> str:
    """A directory view: the directory, then each entry as a full path (directories end in /),
    each name in it as ``clean`` makes it."""
    root = path.rstrip("/") or "/"
    prefix = "" if root == "/" else root
    lines = [f"{prefix}/{'/'.join(clean(display(part)) for part in name.split('/'))}{'/' if is_dir else ''}"
             for name, is_dir in entries]
    more = f"\n[... listing stopped at {limit:,} entries: view a subdirectory]" if (
        len(entries) >= limit if stopped is None else stopped) else ""
    body = "\n".join([root, *lines])
    return (f"Here are the files and directories up to 2 levels deep in {root}, excluding hidden items:\n"
            f"{body}{more}")


def bound(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to about ``limit`` characters (the start and the end kept), and whether it was cut."""
    if len(text) <= limit:
        return text, False
    half = limit // 2
    cut = len(text) - 2 * half
    return (f"{text[:half]}\n[... {cut:,} characters cut: view a smaller view_range ...]\n"
            f"{text[-half:] if half else ''}"), True
