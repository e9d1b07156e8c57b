"""Secret masking for commands, command output and audit records.

A :class:`Redactor` replaces secrets with ``[REDACTED:<kind>]`` so a reader still sees
what kind of value stood there. It knows common formats (private keys, cloud and API
tokens, passwords in URLs, in ``key=value`` assignments, XML elements and YAML, and in the
options of curl, sshpass and mysql, Authorization headers), exact secret values it is
given, and extra regular expressions. :class:`StreamRedactor` does the same over a
stream read in chunks, holding back just enough text that a secret split across two
reads is still masked.

Everything here is pure: no I/O, no logging, and nothing keeps the text it was shown.

Apart from private key blocks, a YAML key whose value is on the next line, a name holding a
keyword at a line's end whose ``value:`` (or, for an XML element, whose attributes) is on the next
line, and an XML start tag named by a keyword whose text is on a later line, no built-in rule matches
across a newline. That is what lets the stream cut its input at newlines (holding back a line that
ends in a key, such a name or such a start tag) and still give exactly what :meth:`Redactor.redact`
gives for the whole text; extra patterns should keep to one line for the same reason.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from enum import Enum

from remote_bash._plain import Record
from remote_bash._redact_rules import (
    _ASSIGNED,
    _AUTH_GROUPS,
    _BLANK_LINES,
    _GAP,
    _NAME_END,
    _OPEN_END,
    _PEM_BEGIN,
    _PEM_END,
    _PEM_END_MAX,
    _PEM_GROUP,
    _QUOTED_OPTION_GROUPS,
    _RULES,
    _XOPEN_END,
    _Rule,
)
from remote_bash._regex import LinearPattern, PatternError, compile_linear
from remote_bash.errors import ConfigError

__all__ = ["Redactor", "StreamRedactor", "mask"]


def mask(kind: str) -> str:
    """The text that replaces a secret of the given kind."""
    return f"[REDACTED:{kind}]"



_OPEN_LINE = re.compile(rf"{_OPEN_END}\n\Z")
"""A line ending in a separator (or a YAML block scalar's header): its value may be on the next line."""
_NAME_LINE = re.compile(rf"{_NAME_END}\n\Z", re.ASCII)
"""A line ending in a keyword: it may be a name whose ``value:`` is on the next line."""
_XOPEN_LINE = re.compile(rf"{_XOPEN_END}\n\Z", re.ASCII)
"""A line ending in a start tag named by a keyword (or a CDATA section's start after it): its text may
be on the next line."""
_XOPEN_NEAR = 512
"""How far back from a line's end such a start tag is looked for (its name and attributes)."""
_TAG_TAIL = re.compile(r"[>\[][ \t\r]*\Z")
"""The end of a start tag or of a CDATA section's start: what a cut such a line can leave."""
_BLANK_LINE = re.compile(r"[ \t\r]*\n")
_LEAD_BLANKS = re.compile(rf"(?:[ \t\r]*\n){{0,{_BLANK_LINES}}}")
"""The blank lines that may stand between a YAML key and its value."""
_BEGIN_RE = re.compile(_PEM_BEGIN)
_END_RE = re.compile(_PEM_END)
_ORPHAN_KEY_END = re.compile(rf"\A(?:[^-]|-(?!----BEGIN))*{_PEM_END}")
"""From the start to an END marker with no BEGIN before it: the end of a key whose start was cut."""
_MARKER_TAIL = re.compile(r"[A-Z0-9 ]*[A-Z]-----|-{1,5}")
"""What a cut can leave of a key block's marker line (``E KEY-----``, or only some of its dashes)."""
_ANY_KEY_END = _END_RE
"""The first END marker of a private key block."""
_CLOSED_LINE = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY-----")
"""A key block's END marker: a line holding one with no BEGIN after it closes its block."""


def _closes_block(line: str) -> bool:
    """Whether ``line`` holds a key block's END marker after its last BEGIN: what follows it is not
    a key's body, whatever text comes after the marker on the line."""
    at = line.rfind("-----END ")
    while at >= 0 and not _CLOSED_LINE.match(line, at):
        at = line.rfind("-----END ", 0, at)
    return at >= 0 and line.find("-----BEGIN", at) < 0


def _first_char(alternative: str) -> str:
    return alternative[:2] if alternative.startswith("\\") else alternative[:1]


def _trigger_expression(alternatives: list[str]) -> str:
    """Join trigger alternatives, one branch per first character (fewer branches to try)."""
    by_first: dict[str, list[str]] = {}
    for alternative in dict.fromkeys(alternatives):
        first = _first_char(alternative)
        by_first.setdefault(first, []).append(alternative[len(first) :])
    return "|".join(
        f"{first}{rests[0]}" if len(rests) == 1 else f"{first}(?:{'|'.join(rests)})"
        for first, rests in by_first.items()
    )


class _Expressions(Record):
    """What a set of rules runs as: one trigger for all, and each rule's part of the combined expression."""

    trigger: re.Pattern[str]
    """Finds the lines worth running the rules on."""
    parts: tuple[str, ...]
    """Rule ``i``'s expression, its groups renamed ``r{i}`` (its end) and ``r{i}v...`` (its values)."""
    triggers: tuple[tuple[str, tuple[int, ...]], ...]
    """Each distinct trigger expression, with the rules it is a trigger of."""


def _expressions(rules: Sequence[_Rule]) -> _Expressions:
    """The trigger of ``rules`` and the parts of their combined expression."""
    triggers = [trigger for rule in rules for trigger in rule.triggers]
    # A group is renamed where it is defined and where a condition tests it (``(?(v0)...)``).
    parts = tuple(f"(?:{rule.pattern.replace('(?P<v', f'(?P<r{index}v').replace('(?(v', f'(?(r{index}v')})"
                  f"(?P<r{index}>)" for index, rule in enumerate(rules))
    of: dict[str, list[int]] = {}
    for index, rule in enumerate(rules):
        for trigger in rule.triggers:
            of.setdefault(trigger, []).append(index)
    # ASCII: keywords match in ASCII case only, in the trigger and in the rules alike.
    return _Expressions(re.compile(_trigger_expression(triggers), re.ASCII), parts,
                        tuple((trigger, tuple(found)) for trigger, found in of.items()))


@functools.cache
def _builtin_expressions() -> _Expressions:
    return _expressions(_RULES)


@functools.cache
def _builtin_triggers() -> tuple[tuple[re.Pattern[str], tuple[int, ...]], ...]:
    return _compile_triggers(_builtin_expressions())


def _compile_triggers(expressions: _Expressions) -> tuple[tuple[re.Pattern[str], tuple[int, ...]], ...]:
    return tuple((re.compile(trigger, re.ASCII), rules) for trigger, rules in expressions.triggers)


_NOTHING = re.compile("(?!)")
"""Matches nowhere: the matcher of a span where no rule has a trigger."""


@functools.lru_cache(maxsize=128)
def _builtin_matcher(rules: tuple[int, ...]) -> re.Pattern[str]:
    """Compiled once per set of rules, not left to ``re``'s cache, which a long run may have emptied of it."""
    parts = _builtin_expressions().parts
    return re.compile("|".join(parts[index] for index in rules), re.ASCII)


class Redactor:
    """Masks secrets in text.

    ``patterns`` are extra regular expressions (RE2 syntax, run in linear time: no
    backreferences, no lookaround) whose every match is masked as ``[REDACTED:custom]``;
    ``literals`` are exact secret values, masked as ``[REDACTED:known-secret]`` wherever they
    appear. A pattern RE2 cannot run raises :class:`~remote_bash.errors.ConfigError` naming it
    and the construct.

    How it stays fast: a trigger expression finds the few lines that could hold a secret
    (for most text, none), and only those lines go through the combined expression of all
    rules. Extra ``patterns`` cannot be pre-checked, so each costs a full pass.
    """

    def __init__(self, patterns: Sequence[str] = (), literals: Sequence[str] = ()) -> None:
        if isinstance(patterns, str) or isinstance(literals, str):
            raise TypeError("patterns and literals are sequences of strings, not one string")
        rules = list(_RULES)
        known = sorted({lit for lit in literals if lit}, key=len, reverse=True)
        if known:
            # Longest first, so a secret that contains another is masked whole.
            escaped = [re.escape(lit) for lit in known]
            rules.insert(1, _Rule("known-secret", "|".join(escaped), tuple(escaped)))
        self._rules = tuple(rules) if known else _RULES
        self._literals = tuple(known)
        # A known secret spanning lines defeats the line-by-line search: scan whole texts then.
        self._whole_text = any("\n" in lit for lit in known)
        # Without known secrets the expressions are the built-in ones, built once for every Redactor
        # (a fleet opens a session, with its own Redactor, per host). Known secrets are never cached.
        self._expressions = _expressions(self._rules) if known else _builtin_expressions()
        self._trigger = self._expressions.trigger
        self._custom = tuple(_compile_custom(p) for p in patterns)
        self._matchers: dict[tuple[int, ...], re.Pattern[str]] = {}

    @functools.cached_property
    def _combined(self) -> re.Pattern[str]:
        """Every rule in one expression: the plain definition of what is masked (tests compare the
        matchers of :meth:`_matcher` with it). Compiling it costs about 100 ms."""
        return re.compile("|".join(self._expressions.parts), re.ASCII)

    @functools.cached_property
    def _rule_triggers(self) -> tuple[tuple[re.Pattern[str], tuple[int, ...]], ...]:
        return _builtin_triggers() if not self._literals else _compile_triggers(self._expressions)

    def _matcher(self, text: str, start: int, end: int) -> re.Pattern[str]:
        """The combined expression of the rules that can match in ``text[start:end]``: those with a
        trigger there.

        Every match of a rule holds one of its triggers, so a rule without one in the span has no
        match in it, and leaving it out of the alternation changes no match: the same rule wins at
        the same place, its groups keep their names. Compiled the first time a set of rules is
        needed: the whole expression is about 100 ms to compile, most of it in the four rules of
        keys whose value may be on the next line; a line with a URL password needs its rule alone."""
        rules = tuple(sorted({index for trigger, found in self._rule_triggers
                              if trigger.search(text, start, end) for index in found}))
        if not rules:
            return _NOTHING
        if not self._literals:
            return _builtin_matcher(rules)
        matcher = self._matchers.get(rules)
        if matcher is None:
            matcher = self._matchers[rules] = re.compile(
                "|".join(self._expressions.parts[index] for index in rules), re.ASCII)
        return matcher

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``[REDACTED:<kind>]``."""
        return self._redact_custom(self._redact_builtin(text, hold_open_pem=False)[0])

    def redact_command(self, text: str) -> str:
        """A command's text, masked as :meth:`redact` masks it, and as its lines joined where a
        backslash-newline continues one (bash joins them before it reads the words, so
        ``--password \\⏎ x`` passes ``x`` to ``--password``): when the joined text shows a secret
        more, the joined text is what is shown, masked."""
        out = self.redact(text)
        if "\\\n" not in text:
            return out
        again = self.redact(text.replace("\\\n", ""))
        return out if again == out.replace("\\\n", "") else again

    def redact_lines(self, text: str) -> str:
        """``text`` masked as :meth:`redact` masks it, with every line kept in its place: a secret over
        several lines (a private key block, a known secret holding newlines, a pattern's match)
        becomes its mask on each of them. What a numbered view of a file shows, so that a line's
        number is still its line's, and any range of lines is masked as the whole file is."""
        return self._redact_custom(self._redact_builtin(text, hold_open_pem=False, keep_lines=True)[0],
                                   keep_lines=True)

    def redact_head(self, text: str) -> str:
        """Redact ``text`` known to be the start of a longer output, cut at an arbitrary point.

        Only what is safe whatever follows comes back: complete lines (or the safe part of a
        long last line, as :class:`StreamRedactor` would release it), so a secret the cut falls
        into is never shown in part. A private key block open at the cut becomes its mask.
        """
        stream = self.stream()
        out = stream.feed(text)
        return out + mask("private-key") if stream._mode is _Mode.HOLD else out

    def redact_tail(self, text: str) -> str:
        """Redact ``text`` known to be the end of a longer output, cut at an arbitrary point.

        The first line is dropped: it may be the end of a secret whose start was cut away (the
        tail of one line longer than ``text`` is dropped whole). What is left of a private key
        block or of a known secret spanning lines that began before the cut is masked.
        """
        newline = text.find("\n")
        if newline < 0:
            return ""
        first, text = text[:newline], text[newline + 1 :]
        lead = _LEAD_BLANKS.match(text)
        assert lead is not None  # it matches the empty string
        if (text[lead.end() : lead.end() + 1] in (" ", "\t") or text[lead.end() : lead.end() + 2] in ("- ", "-\t")
                or _TAG_TAIL.search(first) or first in ("", "\r")):
            # The dropped line may end in a key whose value is this line (or the one after its
            # blank lines): drop it too (unless it cannot be a value, being a key of that kind
            # itself). Any cut line may: the end of a YAML comment after a key can be any text. A
            # line cut in a start tag's ">" (or a CDATA section's "[") may be an element's whose
            # text is the next line, indented or not; and a cut right at a line's end leaves
            # nothing of that line to tell.
            second = text.find("\n", lead.end())
            if second < 0:
                return ""
            if not _OPEN_LINE.search(text, lead.end(), second + 1) and not _tag_opens(text, second + 1):
                named = _NAME_LINE.search(text, max(lead.end(), second + 1 - _OPEN_NEAR), second + 1)
                first, text = f"{first}\n{text[:second]}", text[second + 1 :]
                third = text.find("\n")
                if named and text[:1] in (" ", "\t") and third >= 0 and not self._opens_next(
                        text, max(0, third + 1 - _OPEN_NEAR), third + 1):
                    # That line may be a name (``- name: x_token``) whose ``value:`` is the next
                    # line, and no name is itself a value: drop that value too.
                    first, text = f"{first}\n{text[:third]}", text[third + 1 :]
                elif named and text[:1] in (" ", "\t") and third < 0:
                    return ""
        marker = first.rstrip("\r")
        if ("PRIVATE KEY" in marker or _MARKER_TAIL.fullmatch(marker)) and not _closes_block(marker):
            # The dropped line opened a key block (or was the end of a marker line: no telling
            # which): what follows is its body up to the first END, as it would be for the whole.
            end = _ANY_KEY_END.search(text)
            if end is None:
                return mask("private-key")
            text = mask("private-key") + text[end.end() :]
        elif "PRIVATE KEY" in text:
            text = _ORPHAN_KEY_END.sub(mask("private-key"), text, count=1)
        for literal in self._literals:
            # The lines of a known secret that follow one of its own newlines.
            rests = [literal[at + 1 :] for at, c in enumerate(literal) if c == "\n" and literal[at + 1 :]]
            hit = next((rest for rest in rests if text.startswith(rest)), None)
            if hit is not None:
                text = mask("known-secret") + text[len(hit) :]
                break
        return self.redact(text)

    def stream(self, *, max_line: int = 4096, max_pem: int = 64 * 1024) -> StreamRedactor:
        """A :class:`StreamRedactor` using these rules."""
        return StreamRedactor(self, max_line=max_line, max_pem=max_pem)

    def _redact_builtin(self, text: str, *, hold_open_pem: bool, keep_lines: bool = False) -> tuple[str, int]:
        """Apply the built-in rules and known secrets to the lines the trigger points at.

        With ``hold_open_pem``, a private key block still open at the end of ``text`` is
        left out: the result stops where it starts, and its start is returned (else -1).
        """
        pieces: list[str] = []
        done = 0
        while (hit := self._trigger.search(text, done)) is not None:
            start = text.rfind("\n", 0, hit.start()) + 1
            end = text.find("\n", hit.start()) + 1 or len(text)
            line = start
            while end < len(text) and self._opens_next(text, max(line, end - _OPEN_NEAR), end):
                # A key whose value may be on the next line: take that line too (and the one after
                # the blank lines that may stand before its value). Only the last line is looked at:
                # a run of such lines is read once.
                blanks = _LEAD_BLANKS.match(text, end)
                assert blanks is not None  # it matches the empty string
                line = blanks.end()
                end = text.find("\n", line) + 1 or len(text)
            if self._whole_text or text.find("-----BEGIN", start, end) >= 0:
                # A key block runs over many lines: take the rest of the text in one go.
                end = len(text)
            pieces.append(text[done:start])
            matcher = self._matcher(text, start, end)
            while (match := matcher.search(text, start, end)) is not None:
                pieces.append(text[start : match.start()])
                if hold_open_pem and match.lastgroup == _PEM_GROUP and match.group("pem_end") is None:
                    return "".join(pieces), match.start()
                over = self._literal_over(text, match.start(), match.end())
                if over is None:
                    pieces.append(self._replace(match, keep_lines))
                    start = match.end()
                else:
                    pieces.append(self._replace_through(match, *over, keep_lines))
                    start = over[1]
            pieces.append(text[start:end])
            done = end
        if not pieces:
            return text, -1
        pieces.append(text[done:])
        return "".join(pieces), -1

    def _literal_over(self, text: str, start: int, end: int) -> tuple[int, int] | None:
        """The start and end of the known secrets that begin inside the match ``text[start:end]`` and
        run on after it, or None.

        A value ends at a blank or a quote, and a known secret may hold one: after ``password:`` a
        secret with blanks would otherwise show all but its first word."""
        found: tuple[int, int] | None = None
        for literal in self._literals:
            at = text.find(literal, max(start, end - len(literal) + 1), end + len(literal) - 1)
            while 0 <= at < end:
                over = (at, at + len(literal))
                found = over if found is None else (min(found[0], at), max(found[1], over[1]))
                at = text.find(literal, at + 1, end + len(literal) - 1)
        return found

    def _opens_next(self, text: str, near: int, end: int) -> bool:
        """Whether the line ending at ``end`` (its last characters from ``near``) may have its value
        on the next line: it ends in a separator, in a word with a keyword near it, or in a start tag
        named by a keyword (looked for further back)."""
        return (_OPEN_LINE.search(text, near, end) is not None or _NAME_LINE.search(text, near, end) is not None
                or _tag_opens(text, end))

    def _redact_custom(self, text: str, keep_lines: bool = False) -> str:
        for pattern in self._custom:
            text = pattern.sub(_replace_custom_lines if keep_lines else _replace_custom, text)
        return text

    def _replace(self, match: re.Match[str], keep_lines: bool = False) -> str:
        name = match.lastgroup
        assert name is not None
        rule = self._rules[int(name[1:])]
        if rule.check is not None and not rule.check(match.group()):
            return match.group()
        for value in rule.values:
            start, end = match.span(f"{name}{value}")
            if start >= 0:
                whole = match.start()
                text = match.group()
                hidden = _masks(rule.kind, text[start - whole : end - whole], keep_lines)
                return f"{text[: start - whole]}{hidden}{text[end - whole :]}"
        return _masks(rule.kind, match.group(), keep_lines)

    def _replace_through(self, match: re.Match[str], secret: int, secret_end: int, keep_lines: bool = False) -> str:
        """The match up to its value (or up to ``secret``, where a known secret starts, if sooner),
        then the mask, to ``secret_end``: a known secret runs on from inside the match past its end."""
        name = match.lastgroup
        assert name is not None
        rule = self._rules[int(name[1:])]
        value = next((match.start(f"{name}{v}") for v in rule.values if match.start(f"{name}{v}") >= 0), match.start())
        begin = min(value, secret)
        hidden = _masks(rule.kind, match.string[begin:secret_end], keep_lines)
        return f"{match.string[match.start() : begin]}{hidden}"


def _tag_opens(text: str, end: int) -> bool:
    """Whether the line ending at ``end`` ends in a start tag named by a keyword, looked for in its last
    ``_XOPEN_NEAR`` characters (and not in the lines before: short lines are not read again)."""
    start = text.rfind("\n", max(0, end - 1 - _XOPEN_NEAR), end - 1) + 1
    return _XOPEN_LINE.search(text, max(start, end - _XOPEN_NEAR), end) is not None


def _last_boundary(text: str, start: int, end: int) -> int:
    """The position of the last boundary character in ``text[start:end]``, or -1."""
    match = _LAST_BOUNDARY.match(text, start, end)
    return -1 if match is None else match.end() - 1


@functools.lru_cache(maxsize=256)
def _compile_custom(pattern: str) -> LinearPattern:
    """Compiled once per pattern (LinearPattern is immutable): every session on a host shares them."""
    try:
        return compile_linear(pattern)
    except PatternError as exc:
        raise ConfigError(f"redact pattern {pattern!r} cannot be used: {exc}") from None


def _masks(kind: str, hidden: str, keep_lines: bool) -> str:
    """The mask of ``hidden``; with ``keep_lines``, one on each of its lines."""
    if keep_lines and "\n" in hidden:
        return "\n".join(mask(kind) for _ in range(hidden.count("\n") + 1))
    return mask(kind)


def _replace_custom_lines(matched: str) -> str:
    return _masks("custom", matched, True) if matched else ""


def _replace_custom(matched: str) -> str:
    # A pattern that can match nothing (``x*``) would otherwise mask every gap between characters.
    return mask("custom") if matched else ""


_BOUNDARY = re.compile(r"""[\s"'`,;<>()\[\]{}]""")
"""Characters no token rule matches: the only places an over-long line may be cut."""
_LAST_BOUNDARY = re.compile(rf"(?s:.*){_BOUNDARY.pattern}")
_CONTEXT = 512
"""An over-long line is cut only where this much text before the cut holds no trigger, no
``-----`` and no ``://``: a keyword there could take a value that follows the cut. It is
also what stays held (and is scanned with what follows) when a line outgrows ``_HARD_LINE``."""
_DANGER = re.compile(r"-----|://")
_GAP_RUN = re.compile(f"{_GAP}*")
"""Blanks between the words of a value that goes on over them."""
_RETRY = 1024
"""After finding no place to cut a long line, how much more of it to wait for before looking again."""
_HARD_LINE = 64 * 1024
"""A line part that long with no safe cut is released anyway, but for its last ``_CONTEXT``."""


class _Open(Record):
    """A secret that a cut in a long line would split."""

    start: int
    """Where its match starts (a keyword's start, for an assignment)."""
    value: int
    """Where the masked part starts."""
    kind: str
    drop: re.Pattern[str]
    """Matches the rest of it at the start of what follows the cut."""
    to_end_marker: bool = False
    """A private key block: the rest of it runs to its END marker, blanks and all (``drop`` unused)."""


class _Mode(Enum):
    NORMAL = "normal"
    HOLD = "hold"
    """The buffer starts with a private key block whose END has not come yet."""
    SWALLOW = "swallow"
    """The block outgrew ``max_pem``: its mask is out, the rest is dropped up to END."""
    DROP_VALUE = "drop-value"
    """A secret in a line longer than ``_HARD_LINE`` ran past the part released: its mask is
    out, the rest of it is dropped up to where it ends (``StreamRedactor._drop``)."""


_DROP_QUOTED = {
    '"': re.compile(r'(?:[^"\\\n]|\\[^\n]?)*'),
    "'": re.compile(r"(?:[^'\\\n]|\\[^\n]?)*"),
}
"""The rest of a quoted value: up to its closing quote or the end of the line."""
_DROP_BARE = re.compile(r"""(?:[^\s"'<>\\]|\\[^\n]?)*""")
"""The rest of a token, a bare value or a URL's user and password: up to a space or a quote that
no backslash escapes."""
_DROP_TO = {"v4": re.compile(r"[^\n]*"), "v5": re.compile(r"[^<\n]*"),
            "v6": re.compile(r"(?:[^\]\n]|\](?!\]>))*"), "v7": re.compile(r"""[^\s"'\\]*"""),
            "v10": re.compile(r"[^<>\n]*"), "v12": re.compile(r"[^\n]*"),
            **dict.fromkeys(("v16", "v18", "v22"), re.compile(r"[^<\n]*")),
            **dict.fromkeys(("v17", "v19", "v20", "v21"), re.compile(r"(?:[^\]\n]|\](?!\]>))*")),
            "v13": _DROP_QUOTED['"'], "v14": _DROP_QUOTED["'"], "v15": re.compile(r"[^\n]*"),
            "v25": _DROP_QUOTED['"'], "v26": _DROP_QUOTED["'"],
            "v23": re.compile(r"[^\n]*"), "v24": re.compile(r"[^\n]*"),
            "v32": re.compile(r'''(?:[^"\\\n]|\\\\(?:\\[^\n]|[^\\\n])?|\\[^"\\\n])*''')}
"""The rest of a value on the line after its key or of a list (to the end of the line), of an XML element's
text, or of its CDATA section, or of an Authorization header's credential (to its closing quote or
the end of the line), or of an option's value quoted with its name (to its closing quote), or of a
string inside a JSON string (to its escaped closing quote)."""
_OPEN_NEAR = 128
"""How far back from a line's end :meth:`StreamRedactor._open_line` looks for a keyword and separator."""
_URL_OPEN = re.compile(r"""://[^\s/?#"'<>]*\Z""")
"""A URL whose user part (and maybe password) runs to the end: its ``@`` may still come."""


class StreamRedactor:
    """Redacts a stream fed in chunks of any size.

    Output is held back to the last newline, and from the start of a private key block
    until its END (at most ``max_pem`` characters, after which the block's mask is written
    and the rest of the block is dropped). As long as lines stay under ``max_line``,
    ``''.join(feed(c) for c in chunks) + flush()`` equals ``redactor.redact(''.join(chunks))``
    for any chunking.

    A line longer than ``max_line`` is released in parts, cut only after a character no
    token contains (whitespace, quotes, ``,;<>()[]{}``) with no keyword, ``-----`` or ``://``
    in the text just before, so no built-in secret is split. With no such place, up to 64 KiB
    of the line is held; past that it is released but for its last 512 characters, which are
    scanned with what follows. Extra ``patterns`` are applied to each part on its own.
    """

    def __init__(self, redactor: Redactor, *, max_line: int = 4096, max_pem: int = 64 * 1024) -> None:
        if max_line < 1 or max_pem < 1:
            raise ValueError("max_line and max_pem must be positive")
        self._redactor = redactor
        self._max_line = max_line
        self._max_pem = max_pem
        self._buf = ""
        self._mode = _Mode.NORMAL
        self._searched = 0
        """In HOLD: how much of the buffer was already searched for the END marker."""
        self._retry_at = 0
        """The buffer length at which to look again for a place to cut an over-long line."""
        self._drop: re.Pattern[str] = _DROP_BARE
        self._drop_mask = ""
        """In DROP_VALUE: what of the buffer's start still belongs to the secret being dropped."""

    def feed(self, chunk: str) -> str:
        """Take the next chunk; return the redacted text that is safe to release now."""
        self._buf += chunk
        if self._mode is _Mode.SWALLOW:
            if not self._swallowed():
                return ""
        elif self._mode is _Mode.HOLD:
            if not self._found_end():
                return self._check_pem_bound()
            self._mode = _Mode.NORMAL
        elif self._mode is _Mode.DROP_VALUE and not self._drop_value():
            return ""
        return self._release()

    def _swallowed(self) -> bool:
        """Drop a private key block's body up to its END marker; False while it goes on (the last
        characters are kept, which may be the start of a marker split across reads)."""
        end = _END_RE.search(self._buf)
        if end is None:
            self._buf = self._buf[-_PEM_END_MAX:]
            return False
        self._buf = self._buf[end.end() :]
        self._mode = _Mode.NORMAL
        return True

    def _drop_value(self) -> bool:
        """Drop what remains of a secret cut by a hard line bound; False while it goes on."""
        end = self._drop.match(self._buf)
        assert end is not None  # the drop expressions match the empty string
        if end.end() == len(self._buf):
            # A backslash at the end may escape the quote (or blank) that comes next: keep it.
            self._buf = "\\" if self._buf.endswith("\\") else ""
            return False
        self._buf = self._buf[end.end() :]
        self._mode = _Mode.NORMAL
        return True

    def flush(self) -> str:
        """Release everything held back; the redactor is ready for a new stream afterwards."""
        held, mode = self._buf, self._mode
        self._buf, self._mode, self._searched, self._retry_at = "", _Mode.NORMAL, 0, 0
        return "" if mode in (_Mode.SWALLOW, _Mode.DROP_VALUE) else self._redactor.redact(held)

    def _release(self) -> str:
        buf = self._buf
        cut = buf.rfind("\n") + 1
        # A last complete line that ends in a keyword and a separator stays with the line after
        # it, which may hold its value.
        start = self._open_line(buf, cut)
        if len(buf) - cut > self._max_line and len(buf) >= self._retry_at:
            line_cut = self._line_cut(buf, start)
            # With no place to cut, look again only once the line has grown a little more.
            self._retry_at = len(buf) + _RETRY if line_cut == start else 0
            cut = line_cut
        else:
            cut = start
            if cut and self._redactor._whole_text:
                # A known secret that spans lines may start on the lines about to go out: hold it.
                head = self._literal_head(buf, cut)
                cut = cut if head < 0 else head
        if self._mode is _Mode.DROP_VALUE or self._mode is _Mode.SWALLOW:
            # _line_cut found a secret running past the hard bound: out goes the text before it
            # and its mask, and the rest of it is dropped as it arrives (a key block's to its END).
            out = self._redactor.redact(buf[:cut]) + self._drop_mask
            self._buf = buf[cut:]
            self._retry_at = 0
            if self._drop_value() if self._mode is _Mode.DROP_VALUE else self._swallowed():
                out += self._release()
            return out
        if cut == 0:
            return ""
        out, open_at = self._redactor._redact_builtin(buf[:cut], hold_open_pem=True)
        out = self._redactor._redact_custom(out)
        self._retry_at = 0
        if open_at < 0:
            self._buf = buf[cut:]
            return out
        self._buf = buf[open_at:]
        if _END_RE.search(self._buf) is not None:
            # END already arrived, after the last newline: wait for the line to end.
            return out
        self._mode = _Mode.HOLD
        self._searched = len(self._buf)
        return out + self._check_pem_bound()

    def _open_line(self, buf: str, cut: int, *, names: bool = True) -> int:
        """The start of the line that ends at ``cut`` if its value may be on the next line, else ``cut``.

        A name ending in a keyword (``- name: DB_PASSWORD``, whose ``value:`` may come next) may
        itself be the value of a key before it (``password:``): that key is held with it. Only
        ``names`` looks for such a name: a name is never the value of another name."""
        end = cut
        for _ in range(_BLANK_LINES + 1):
            if end == 0:
                return cut
            start = buf.rfind("\n", 0, end - 1) + 1
            # The separator and the keyword are at the line's end: look only there, so a long held
            # line is not read again at every chunk.
            near = max(start, end - _OPEN_NEAR)
            if ((_OPEN_LINE.search(buf, near, end) and self._redactor._trigger.search(buf, near, end))
                    or _tag_opens(buf, end)):
                return start
            if names and end == cut and _NAME_LINE.search(buf, near, end):
                return self._open_line(buf, start, names=False)
            if not _BLANK_LINE.fullmatch(buf, start, end):
                return cut
            # A blank line: the value may still come after it, if the line before is such a key.
            end = start
        return cut

    def _line_cut(self, buf: str, start: int) -> int:
        """Where to cut the over-long line that starts at ``start``: after its last safe boundary
        at least ``max_line`` characters before the end, else ``start`` (hold it), else, past
        ``_HARD_LINE``, all but the last ``_CONTEXT`` characters."""
        hi = len(buf) - self._max_line  # the cut is at most here
        dangers = [m.start() for m in self._redactor._trigger.finditer(buf, start, hi)]
        dangers += [m.start() for m in _DANGER.finditer(buf, start, hi)]
        # A cut after position ``at`` is safe when no danger lies in (at - _CONTEXT, at]: walk
        # the gaps between dangers from the end; most are empty where dangers are dense.
        for danger in sorted([start - _CONTEXT, *dangers], reverse=True):
            lo = max(start, danger + _CONTEXT)
            while lo < hi:
                at = _last_boundary(buf, lo, hi)
                if at < 0:
                    break
                head = self._literal_head(buf, at + 1)
                if head < 0:
                    opened = self._open_secret(buf, start, at + 1, dangers)
                    if opened is None:
                        return at + 1
                    head = opened.start
                hi = head
            hi = min(hi, danger)
        if len(buf) - start <= _HARD_LINE:
            return start
        # Past the bound: release all but the last _CONTEXT characters. A secret the cut would
        # fall into is masked whole: the text before it goes out, then its mask, and the rest of
        # it is dropped as it arrives (a secret that long is not shown in part, however long).
        cut = len(buf) - _CONTEXT
        opened = self._open_secret(buf, start, cut, dangers)
        if opened is None:
            return cut
        if opened.start > start:
            return opened.start
        mode = _Mode.SWALLOW if opened.to_end_marker else _Mode.DROP_VALUE
        self._mode, self._drop, self._drop_mask = mode, opened.drop, mask(opened.kind)
        return opened.value

    def _open_secret(self, buf: str, start: int, cut: int, dangers: list[int]) -> _Open | None:
        """The secret a cut at ``cut`` would split, or None.

        Secrets that can hold a boundary character are quoted values and URL passwords, and a
        keyword or ``://`` near the cut is already refused by the caller: so this looks at the
        last one before the cut, however far back on the line, and at what starts there."""
        last = max((d for d in dangers if d < cut), default=-1)
        if last < 0:
            return None
        url = _URL_OPEN.search(buf, max(start, last - 2), cut)
        if url is not None:
            return _Open(url.start(), url.start() + 3, "url-password", _DROP_BARE)
        combined = self._redactor._matcher(buf, max(start, last - 64), cut)
        for match in combined.finditer(buf, max(start, last - 64), cut):
            name = match.lastgroup
            assert name is not None
            if match.end() < cut and not (f"{name}v23" in combined.groupindex and match.start(f"{name}v23") >= 0
                                          and _GAP_RUN.fullmatch(buf, match.end(), cut)):
                continue  # ends before the cut (a value of words ends before the blanks the cut follows)
            kind = self._redactor._rules[int(name[1:])].kind
            if name == _PEM_GROUP:
                return _Open(match.start(), match.start(), kind, _DROP_BARE, to_end_marker=True)
            # A quote just before is kept with it: an Authorization header inside quotes ends at
            # the closing one, which the rule only knows with the opening quote in view.
            begin = match.start() - 1 if match.start() > start and buf[match.start() - 1] in "\"'" else match.start()
            for value in (*_ASSIGNED, *_AUTH_GROUPS, *_QUOTED_OPTION_GROUPS):
                group = f"{name}{value}"
                if group in combined.groupindex and match.start(group) >= 0:
                    at = match.start(group)
                    if value in _DROP_TO:
                        drop = _DROP_TO[value]
                    else:
                        quoted = value != "v3" and buf[at - 1] in _DROP_QUOTED
                        drop = _DROP_QUOTED[buf[at - 1]] if quoted else _DROP_BARE
                    return _Open(begin, at, kind, drop)
            return _Open(begin, match.start(), kind, _DROP_BARE)
        return None

    def _literal_head(self, buf: str, end: int) -> int:
        """Where a known secret starts whose head (up to a boundary character) ends at ``end``; else -1."""
        found = -1
        for literal in self._redactor._literals:
            for size in range(1, len(literal)):
                if _BOUNDARY.match(literal, size - 1) and buf.endswith(literal[:size], 0, end):
                    found = max(found, end - size)
        return found

    def _found_end(self) -> bool:
        header = _BEGIN_RE.match(self._buf)
        assert header is not None
        start = max(header.end(), self._searched - _PEM_END_MAX)
        self._searched = len(self._buf)
        return _END_RE.search(self._buf, start) is not None

    def _check_pem_bound(self) -> str:
        if len(self._buf) <= self._max_pem:
            return ""
        self._mode = _Mode.SWALLOW
        self._buf = self._buf[-_PEM_END_MAX:]
        return mask("private-key")
