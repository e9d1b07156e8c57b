"""Operator-supplied regular expressions on a linear-time engine (RE2).

Patterns from an inventory (``redact``, ``policy.deny``) run over every command and every byte of
output. With a backtracking engine one careless pattern such as ``(x+x+)+y`` freezes the client for
minutes on a long run of ``x``; RE2 answers in time linear in the text, whatever the pattern. The
price is that RE2 has no backreferences and no lookaround: such a pattern is refused here with a
message naming the construct, when the inventory is loaded, never at the first command.

This is the only module that imports ``re2``. It never does I/O and never logs (RE2's own error
logging is switched off: a bad pattern is an error for the caller to report, not a line on stderr).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["LinearPattern", "PatternError", "compile_linear"]


class PatternError(ValueError):
    """A pattern RE2 cannot run; the message says which construct and what to do instead."""


@functools.cache
def _re2() -> tuple[Any, Any]:
    """The engine and its options, loaded at the first pattern: a command line whose hosts have no
    pattern (most) never pays for loading RE2."""
    import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

    options = re2.Options()
    options.log_errors = False
    return re2, options

# RE2's error texts, mapped to what an operator would call the construct.
_CONSTRUCTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"invalid escape sequence: \\[1-9]"), "a backreference (\\1 ... \\9)"),
    (re.compile(r"invalid perl operator: \(\?<?="), "a lookahead or lookbehind ((?=...), (?<=...))"),
    (re.compile(r"invalid perl operator: \(\?<?!"), "a negative lookahead or lookbehind ((?!...), (?<!...))"),
    (re.compile(r"invalid perl operator: \(\?>"), "an atomic group ((?>...))"),
    (re.compile(r"bad repetition operator: [*+?}]\+"), "a possessive quantifier (*+, ++, ?+)"),
    (re.compile(r"invalid repetition size"),
     "a repetition count it cannot run ({n} with n over 1000, or {m,n} with m over n)"),
    (re.compile(r"invalid perl operator: \(\?x"), "verbose mode ((?x))"),
    (re.compile(r"invalid escape sequence: \\Z"), "\\Z (write \\z)"),
)


def _describe(pattern_text: str, error: str) -> str:
    if "(?P=" in pattern_text:
        return "it uses a named backreference ((?P=name)), which the linear-time engine (RE2) does not support"
    for pattern, construct in _CONSTRUCTS:
        if pattern.search(error):
            return f"it uses {construct}, which the linear-time engine (RE2) does not support"
    return f"it is not a valid regular expression ({error})"


class LinearPattern:
    """A compiled pattern: search and substitution in time linear in the text."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str, compiled: Any) -> None:
        self.pattern = pattern
        self._compiled = compiled

    def search(self, text: str) -> bool:
        """True when the pattern matches somewhere in ``text``."""
        return self._compiled.search(text) is not None

    def spans(self, text: str) -> Iterator[tuple[int, int]]:
        """The (start, end) of each non-overlapping match, left to right."""
        for match in self._compiled.finditer(text):
            yield match.span()

    def sub(self, replace: Callable[[str], str], text: str) -> str:
        """``text`` with each match replaced by ``replace(matched text)``."""
        if self._compiled.search(text) is None:
            # The common case, and far cheaper than a substitution that finds nothing.
            return text
        pieces: list[str] = []
        done = 0
        for start, end in self.spans(text):
            pieces.append(text[done:start])
            pieces.append(replace(text[start:end]))
            done = end
        pieces.append(text[done:])
        return "".join(pieces)


def compile_linear(pattern: str, *, multiline: bool = False) -> LinearPattern:
    """Compile ``pattern`` for RE2, or raise :class:`PatternError` naming what RE2 cannot run.

    ``multiline`` makes ``^`` and ``$`` match at every line, as ``re.MULTILINE`` does.
    """
    if not isinstance(pattern, str):
        raise PatternError(f"{pattern!r} is not a string")
    re2, options = _re2()
    try:
        compiled = re2.compile(f"(?m){pattern}" if multiline else pattern, options)
    except re2.error as exc:
        message = exc.args[0] if exc.args else str(exc)
        if isinstance(message, bytes):
            message = message.decode("utf-8", "replace")
        if multiline:  # RE2 quotes the text it was given: the pattern as written, not with our prefix
            message = str(message).replace(f"(?m){pattern}", pattern)
        raise PatternError(_describe(pattern, str(message))) from None
    return LinearPattern(pattern, compiled)
