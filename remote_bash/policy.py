"""The command policy and the host allowlist: pure functions, no I/O.

This is a guard rail, not the security boundary. Deny patterns and an executable allowlist stop
mistakes and plain misuse before a command reaches a host (a session told it may only read logs
is stopped before ``rm`` is sent), but they cannot contain a determined user: an allowed program
may run others (``find -exec``, ``awk 'BEGIN{system("...")}'``), aliases and functions on the
host can rename commands, a listed wrapper or shell (``sudo``, ``env``, ``bash``) allows
whatever it runs, and bash's grammar is larger than the parser here. Least privilege on the host
(the remote user's rights, a container, sudo rules) is the real control.

When in doubt the parser refuses: a command it cannot read, or whose name is only known after an
expansion (``$cmd``, ``l?``, ``{rm,-rf}``), is not allowed through an allowlist. Neither is a
variable assignment in any form the approval reader knows (``LD_PRELOAD=x.so cat``, ``PATH=/tmp``,
``printf -v PATH``, ``$((PATH=5))``, ``{PATH}>f``, ...: ``_shell_state`` finds them for both), since
a variable can change what an allowed program runs, unless the allowlist names it as ``NAME=``; and
a name entry allows only the bare name, never a path ending in it (``/tmp/x/cat``, ``./cat``).

Deny patterns run on a linear-time engine (RE2, see ``_regex``): a command of any length is
checked in time proportional to its length, whatever the pattern.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection
from dataclasses import dataclass, field

from remote_bash._programs import awk_programs
from remote_bash._regex import LinearPattern, PatternError, compile_linear
from remote_bash._shell_state import (
    LOOKUP_VARIABLES,
    Assignment,
    assembles_substitution,
    carries_substitution,
    command_assigned,
    decode_ansi_c,
    lookup_change,
    text_assigned,
    text_options,
)
from remote_bash.models import CommandPolicy

__all__ = ["PolicyDecision", "SimpleCommands", "check_command", "deny_pattern", "host_in_allowlist",
           "simple_commands"]

_MAX_DEPTH = 32
_MAX_REPARSES = 16
# Longest first, so that "&&" is not read as two "&" and "2>&1" is a redirection.
_OPERATORS = (
    "<<<", "<<-", ";;&", "&>>",
    "&&", "||", "|&", ";;", ";&", "<<", ">>", "<&", ">&", "<>", ">|", "&>", "<(", ">(",
    ";", "&", "|", "<", ">",
)  # fmt: skip
_SEPARATORS = frozenset({";", "&", ";;", ";&", ";;&"})
_CHAINS = frozenset({"&&", "||", "|", "|&"})
_META = frozenset(" \t\n;&|<>()")
# Reserved words that only introduce or close the command after them.
_TRANSPARENT = frozenset({"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_FD = re.compile(r"[0-9]+|\{[A-Za-z_][A-Za-z0-9_]*\}")
_PLAIN_GLOB_WORDS = frozenset({"[", "[[", "{"})
# Commands that write nothing: a '>' onto a file with one of these only empties it.
_SILENT: tuple[list[str], ...] = ([], [":"], ["true"], ["false"], ["cat", "/dev/null"], ["echo", "-n"], ["printf", ""])
_OPERATOR_NAMES = {
    "newline": "a newline between commands",
    "$(": "command substitution '$(...)'",
    "`": "command substitution '`...`'",
    "<(": "process substitution '<(...)'",
    ">(": "process substitution '>(...)'",
}


@dataclass(frozen=True)
class PolicyDecision:
    """Whether a command may be sent, the rule that decided, and why, in a sentence.

    ``rule`` is ``deny[i]: <pattern>``, ``allow_operators: <operator>``, ``allow`` (the allowlist
    decided) or ``default`` (no allowlist, no deny rule matched).
    """

    allowed: bool
    rule: str
    reason: str


def host_in_allowlist(host_name: str, allowed_names: Collection[str] | None) -> bool:
    """True when ``allowed_names`` is ``None`` (no allowlist) or holds ``host_name``."""
    return allowed_names is None or host_name in allowed_names


@functools.lru_cache(maxsize=256)
def deny_pattern(pattern: str) -> LinearPattern:
    """A ``policy.deny`` pattern compiled for the linear-time engine, ``^``/``$`` at every line.

    Raises :class:`~remote_bash._regex.PatternError` for what RE2 cannot run (backreferences,
    lookaround); the inventory loader calls this so such a pattern fails when the file is read.
    """
    return compile_linear(pattern, multiline=True)


def check_command(command: str, policy: CommandPolicy) -> PolicyDecision:
    """Check a command against a host's policy: deny patterns first, then the allowlist.

    Never raises: a broken deny pattern refuses every command, and a command that cannot be
    parsed is refused when an allowlist is set (without one, bash reports the syntax error).
    """
    for index, pattern in enumerate(policy.deny):
        rule = f"deny[{index}]: {pattern}"
        try:
            hit = deny_pattern(pattern).search(command)
        except PatternError as exc:
            reason = f"deny pattern {pattern!r} cannot be used: {exc}, so nothing runs"
            return PolicyDecision(False, rule, reason)
        if hit:
            return PolicyDecision(False, rule, f"the command matches this host's deny rule {pattern!r}")
    if policy.allow is None:
        return PolicyDecision(True, "default", "no deny rule matched and this host has no allowlist")
    names, paths, variables = _allow_entries(policy.allow)
    listing = f"(allowed: {', '.join(sorted(set(policy.allow))) or 'nothing'})"
    if not command.strip():
        return PolicyDecision(False, "allow", f"the command is empty {listing}")
    try:
        parsed = _parse(command)
    except _ParseError as exc:
        reason = f"could not parse the command ({exc}), so it cannot be checked against this host's allowlist"
        return PolicyDecision(False, "allow", reason)
    if not policy.allow_operators and parsed.operators:
        op = parsed.operators[0]
        name = _OPERATOR_NAMES.get(op, f"the shell operator {op!r}")
        reason = (
            f"{name} is not allowed on this host, since it runs further commands; "
            "send one simple command per call"
        )
        return PolicyDecision(False, f"allow_operators: {op}", reason)
    refused = _shell_state_refusal(parsed, "(" in command)
    if refused is not None:
        return PolicyDecision(False, "allow", f"{refused} {listing}")
    for words in parsed.commands:
        refused = _assignment_refusal([Assignment(name, "") for name in _assignments(words)], variables)
        if refused is not None:
            return PolicyDecision(False, "allow", f"{refused} {listing}")
        word = _command_name(words)
        if word is None:
            continue
        if not word.literal:
            reason = (
                f"the command name {word.raw!r} is only known after shell expansion, so it cannot be "
                f"checked against this host's allowlist {listing}"
            )
            return PolicyDecision(False, "allow", reason)
        if "/" in word.value:
            if word.value not in paths:
                reason = (
                    f"command {word.value!r} is named by a path, which only an allowlist entry of that exact "
                    f"path allows (a name entry allows the bare name only) {listing}"
                )
                return PolicyDecision(False, "allow", reason)
        elif word.value not in names:
            return PolicyDecision(
                False, "allow", f"command {word.value!r} is not in this host's allowlist {listing}"
            )
    # Every name is listed: now the variables set by arguments (printf -v, read, let, export...)
    # and by the text itself (arithmetic, ${NAME:=...}, {NAME}>), which last for later calls too.
    found = [a for words in parsed.commands for a in _assigned_by(words)] + text_assigned(command)
    refused = _assignment_refusal(found, variables)
    if refused is not None:
        return PolicyDecision(False, "allow", f"{refused} {listing}")
    return PolicyDecision(True, "allow", "every command is in this host's allowlist")


@dataclass(frozen=True)
class SimpleCommands:
    """What a command text would run, as far as a reading of its text can tell."""

    commands: list[list[tuple[str, bool]]]
    """Every simple command (inside substitutions and subshells too): its words after quote removal,
    each with whether it is literal (no expansion, glob or brace could change it)."""
    redirects: list[tuple[str, str, bool]]
    """Redirections: the operator, the target after quote removal, and whether it is literal."""
    functions: list[str] = field(default_factory=list)
    """The names of the functions the text defines."""
    truncated: list[str] = field(default_factory=list)
    """Targets of ``>`` on a command that writes nothing (``: > f``, ``> f``): emptied, not written."""
    data: list[str] = field(default_factory=list)
    """Quoted text that is no word of a command: quoted here-document bodies, and ``$'...'``
    strings as the characters they spell."""


def simple_commands(command: str) -> SimpleCommands | None:
    """The simple commands and redirections of ``command``; None when it cannot be read."""
    try:
        parsed = _parse(command)
    except _ParseError:
        return None
    return SimpleCommands(
        commands=[[(w.value, w.literal) for w in words] for words in parsed.commands],
        redirects=[(op, w.value, w.literal) for op, w in parsed.redirects],
        functions=parsed.functions,
        truncated=parsed.truncated,
        data=parsed.data,
    )


def _assignment_refusal(found: list[Assignment], variables: frozenset[str]) -> str | None:
    """Why assigning these variables is refused: a name known only after expansion, a variable that
    changes what later command names run, or one the allowlist does not name as ``NAME=``."""
    for assignment in found:
        name, form = assignment.name, f" ({assignment.form})" if assignment.form else ""
        if not name:
            return (f"{assignment.form} assigns a variable whose name is known only after expansion, so it "
                    "cannot be checked against this host's allowlist")
        if name in LOOKUP_VARIABLES:
            return f"the assignment {name}=...{form} changes what later commands run"
        if name not in variables:
            return (f"the assignment {name}=...{form} is not allowed on this host: a variable can change what an "
                    f"allowed command runs or loads (LD_PRELOAD, PATH, PYTHONPATH); list '{name}=' in allow "
                    "to permit it")
    return None


def _assigned_by(words: list[_Word]) -> list[Assignment]:
    """The variables a command assigns by its arguments (``printf -v``, ``read``, ``let``,
    ``export``, ``env NAME=...``, ...), after ``builtin``/``command``."""
    name = _command_name(words)
    if name is None:
        return []
    rest = words[words.index(name) + 1:]
    while name.value in ("builtin", "command") and rest:
        name, rest = rest[0], rest[1:]
    return command_assigned(name.value, [(w.value, w.literal) for w in rest])


def _shell_state_refusal(parsed: _Parsed, joins: bool) -> str | None:
    """Why the text is refused whatever the allowlist lists: it defines a function (which would
    shadow a listed name with unlisted behaviour), changes what later command names run, makes a
    builtin run text, or holds data that bash may later run (see ``_shell_state``)."""
    if parsed.functions:
        return (f"defining the function {parsed.functions[0]!r} is not allowed with an allowlist: a function "
                "changes what later commands run, and one named like a listed command would run unlisted ones")
    texts = [t for words in parsed.commands for t in _data_words(words)] + [w.value for _, w in parsed.redirects]
    if any(carries_substitution(t) for t in texts + parsed.data):
        return ("quoted text holds '$(' or '`': bash runs it if the value is ever used in arithmetic or as a "
                "prompt, so it is not allowed with an allowlist")
    for words in parsed.commands:
        name = _command_name(words)
        if name is None:
            continue
        rest = words[words.index(name) + 1:]
        while name.value in ("builtin", "command") and rest:
            name, rest = rest[0], rest[1:]
        values = [w.value for w in rest]
        assembled = assembles_substitution(name.value, values, joins)
        if assembled is not None:
            return ("printf spells '$(' or '`' from escapes, or a '$' to be joined to a '(' in the text: bash runs "
                    "what it assembles if the value is used in arithmetic, so it is not allowed with an allowlist")
        why = lookup_change(name.value, values)
        if why is not None:
            return f"{why}, so it is not allowed with an allowlist"
        for letter, _ in text_options(name.value, [(w.value, w.literal) for w in rest]):
            return f"{name.value} -{letter} runs a command or function, so it is not allowed with an allowlist"
    return None


def _data_words(words: list[_Word]) -> list[str]:
    """A command's words that may become shell data: all but an awk program's text (its ``$(NF)``
    is awk's, and awk can spell any text from escapes anyway)."""
    name = _command_name(words)
    if name is None or not name.literal or name.value not in ("awk", "gawk", "mawk", "nawk"):
        return [w.value for w in words]
    start = words.index(name) + 1
    skipped = {start + i for i in awk_programs([w.value for w in words[start:]]) or []}
    return [w.value for i, w in enumerate(words) if i not in skipped]


def _allow_entries(entries: list[str]) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """An allowlist's bare names, exact paths, and assignable variables (entries ``NAME=``).

    A bare name allows the command word with that name and no ``/``: it runs what the shell finds
    on its ``PATH``, which no allowed command may change. A path entry allows that exact word only,
    so ``/tmp/x/cat`` or ``./cat`` never passes for ``cat``.
    """
    names = {e for e in entries if "/" not in e and not e.endswith("=")}
    paths = {e for e in entries if "/" in e}
    variables = {e[:-1] for e in entries if e.endswith("=") and "/" not in e}
    return frozenset(names), frozenset(paths), frozenset(variables)


def _assignments(words: list[_Word]) -> list[str]:
    """The variables a simple command assigns before its name (all of them when it has none)."""
    assigned: list[str] = []
    for word in words:
        if word.literal and word.raw in _TRANSPARENT:
            continue
        match = _ASSIGNMENT.match(word.raw)
        if match is None:
            break
        assigned.append(re.split(r"[\[+=]", match.group(0), maxsplit=1)[0])
    return assigned


def _command_name(words: list[_Word]) -> _Word | None:
    """The word naming the executable: after reserved words and ``VAR=value`` assignments."""
    for word in words:
        if (word.literal and word.raw in _TRANSPARENT) or _ASSIGNMENT.match(word.raw):
            continue
        return word
    return None


class _ParseError(ValueError):
    pass


@dataclass
class _Word:
    raw: str
    """The word as written."""
    value: str
    """The word after quote removal (expansions left as written)."""
    literal: bool
    """False when an expansion, a glob or brace expansion could change the word."""


@dataclass
class _Parsed:
    commands: list[list[_Word]] = field(default_factory=list)
    """Every simple command, including those inside substitutions and subshells."""
    operators: list[str] = field(default_factory=list)
    """Chaining operators and substitutions, in the order they were met."""
    pending: str | None = None
    """A separator (``;``, ``&``, newline) counted only once another command follows it."""
    reparses: int = 0
    """``((`` openings that turned out to be subshells and were read again (bounded)."""
    redirects: list[tuple[str, _Word]] = field(default_factory=list)
    """Output and input redirections with their targets (``>``, ``file``), here-documents left out."""
    functions: list[str] = field(default_factory=list)
    """Names given a function definition (``name () ...``, ``function name ...``)."""
    data: list[str] = field(default_factory=list)
    """Quoted here-document bodies, and ``$'...'`` strings decoded."""
    truncated: list[str] = field(default_factory=list)
    """Targets of ``>`` given to a command that writes nothing to them."""


def _parse(text: str) -> _Parsed:
    parsed = _Parsed()
    _Parser(text, parsed, 0).parse_list(closing=False)
    return parsed


class _Parser:
    """A small reader of bash's lexical structure: enough to find every command's first word."""

    def __init__(self, text: str, out: _Parsed, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise _ParseError("commands are nested too deeply")
        self.text = text
        self.pos = 0
        self.out = out
        self.depth = depth
        self.heredocs: list[tuple[str, bool, bool]] = []  # delimiter, strip tabs, expands
        self.heredoc_op: str | None = None
        self.redirect_op = ""

    def parse_list(self, *, closing: bool) -> None:
        """Read commands up to the end of the text or, with ``closing``, the matching ``)``."""
        text = self.text
        words: list[_Word] = []
        target = False  # the next word is the target of a redirection
        while True:
            self._blanks()
            if target and (self.pos >= len(text) or text[self.pos] in "\n;&|()#"):
                raise _ParseError("a redirection has no target")
            if self.pos >= len(text):
                if closing:
                    raise _ParseError("a '(' is never closed")
                break
            char = text[self.pos]
            if char == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            elif char == "\n":
                self.pos += 1
                words = self._end(words)
                self.out.pending = self.out.pending or "newline"
                self._heredoc_bodies()
            elif char == ")":
                if not closing:
                    raise _ParseError("unexpected ')'")
                self.pos += 1
                break
            elif char == "(":
                if words and text[self.pos + 1 :].lstrip(" \t").startswith(")"):
                    self.out.functions.append(words[-1].value)  # name () compound-command
                words = self._end(words)
                if text.startswith("((", self.pos):
                    self._arithmetic(len("(("))
                else:
                    self.pos += 1
                    self._nested()
            elif op := next((op for op in _OPERATORS if text.startswith(op, self.pos)), None):
                self.pos += len(op)
                if op in _SEPARATORS or op in _CHAINS:
                    words = self._end(words)
                    if op in _CHAINS:
                        self.out.operators.append(op)
                    else:
                        self.out.pending = self.out.pending or op
                elif op in ("<(", ">("):
                    self.out.operators.append(op)
                    self._nested()
                    if not target:
                        words = self._add(words, _Word(op + "...)", "", literal=False))
                    target = False
                else:
                    if target:
                        raise _ParseError("a redirection has no target")
                    if op in ("<<", "<<-") and words and words[0].raw == "[[":
                        raise _ParseError("'<<' inside '[[ ]]'")
                    target = True
                    self.redirect_op = op
                    self.heredoc_op = op if op in ("<<", "<<-") else None
            else:
                word = self._word()
                if target:
                    target = False
                    if self.heredoc_op:
                        # bash never expands a delimiter; refusing these keeps both readings equal.
                        if "$" in word.raw or "`" in word.raw:
                            raise _ParseError("a here-document delimiter with '$' or '`'")
                        quoted = any(q in word.raw for q in "'\"\\")
                        self.heredocs.append((word.value, self.heredoc_op == "<<-", not quoted))
                        self.heredoc_op = None
                    else:
                        self.out.redirects.append((self.redirect_op, word))
                        if self.redirect_op in (">", ">|", "&>") and [w.value for w in words] in _SILENT:
                            self.out.truncated.append(word.value)
                elif not (_FD.fullmatch(word.raw) and text.startswith(("<", ">"), self.pos)):
                    words = self._add(words, word)
        self._end(words)
        if closing or self.depth:
            self.out.pending = None  # a separator inside a substitution chains nothing outside it

    def _add(self, words: list[_Word], word: _Word) -> list[_Word]:
        if not words and self.out.pending:
            self.out.operators.append(self.out.pending)
            self.out.pending = None
        words.append(word)
        return words

    def _end(self, words: list[_Word]) -> list[_Word]:
        if len(words) > 1 and words[0].literal and words[0].raw == "function":
            self.out.functions.append(words[1].value)
        if words:
            self.out.commands.append(words)
        return []

    def _nested(self) -> None:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise _ParseError("commands are nested too deeply")
        self.parse_list(closing=True)
        self.depth -= 1

    def _sub(self, text: str) -> None:
        _Parser(text, self.out, self.depth + 1).parse_list(closing=False)

    def _blanks(self) -> None:
        text = self.text
        while self.pos < len(text):
            if text[self.pos] in " \t":
                self.pos += 1
            elif text.startswith("\\\n", self.pos):
                self.pos += 2
            else:
                return

    def _heredoc_bodies(self) -> None:
        text = self.text
        for delimiter, strip_tabs, expands in self.heredocs:
            start = body_end = self.pos
            while self.pos < len(text):
                body_end, line = self.pos, ""
                while True:
                    end = text.find("\n", self.pos)
                    end = len(text) if end < 0 else end
                    part = text[self.pos : end]
                    self.pos = min(end + 1, len(text))
                    part = part.lstrip("\t") if strip_tabs else part
                    # In an expanding here-document bash joins a line ending in an odd number
                    # of backslashes with the next one before comparing it with the delimiter.
                    trailing = len(part) - len(part.rstrip("\\"))
                    if not (expands and trailing % 2 and self.pos < len(text)):
                        line += part
                        break
                    line += part[:-1]
                if line == delimiter:
                    break
            else:
                body_end = len(text)  # bash accepts a here-document ended by the end of input
            if expands:
                _Parser(text[start:body_end], self.out, self.depth + 1)._dquoted([], closing=False)
            else:
                self.out.data.append(text[start:body_end])
        self.heredocs = []

    def _word(self) -> _Word:
        text, start = self.text, self.pos
        value: list[str] = []
        literal, glob = True, False
        while self.pos < len(text):
            char = text[self.pos]
            if char in _META:
                if char == "(" and _ASSIGNMENT.fullmatch(text[start : self.pos]):
                    self._array()
                    literal = False
                    continue
                break
            if char == "\\":
                if text.startswith("\n", self.pos + 1):
                    self.pos += 2
                else:
                    value.append(text[self.pos + 1 : self.pos + 2] or "\\")
                    self.pos += 2
            elif char == "'":
                end = text.find("'", self.pos + 1)
                if end < 0:
                    raise _ParseError("a single quote is never closed")
                value.append(text[self.pos + 1 : end])
                self.pos = end + 1
            elif char == '"':
                self.pos += 1
                literal = self._dquoted(value) and literal
            elif char == "`":
                literal = False
                self._backtick()
            elif char == "$":
                literal = self._dollar(value, quoted=False) and literal
            else:
                glob = glob or char in "*?[{"
                value.append(char)
                self.pos += 1
        raw = text[start : self.pos]
        return _Word(raw, "".join(value), literal and not (glob and raw not in _PLAIN_GLOB_WORDS))

    def _array(self) -> None:
        """``name=(a b c)``: the items are words, not a subshell."""
        self.pos += 1
        while True:
            self._blanks()
            if self.pos >= len(self.text):
                raise _ParseError("an array '(' is never closed")
            char = self.text[self.pos]
            if char == ")":
                self.pos += 1
                return
            if char == "\n":
                self.pos += 1
            elif char in _META:
                raise _ParseError(f"unexpected {char!r} in an array")
            else:
                self._word()

    def _dquoted(self, value: list[str], *, closing: bool = True) -> bool:
        """Read a double-quoted string (or a here-document body); False if it expands anything."""
        text, literal = self.text, True
        while self.pos < len(text):
            char = text[self.pos]
            if char == '"' and closing:
                self.pos += 1
                return literal
            if char == "\\" and text[self.pos + 1 : self.pos + 2] in ("$", "`", '"', "\\", "\n"):
                value.append(text[self.pos + 1].replace("\n", ""))
                self.pos += 2
            elif char == "`":
                literal = False
                self._backtick()
            elif char == "$":
                literal = self._dollar(value, quoted=True) and literal
            else:
                value.append(char)
                self.pos += 1
        if closing:
            raise _ParseError("a double quote is never closed")
        return literal

    def _dollar(self, value: list[str], *, quoted: bool) -> bool:
        """Read what follows a ``$``; False when it is an expansion."""
        text = self.text
        after = text[self.pos + 1 : self.pos + 2]
        if text.startswith("$((", self.pos):
            self._arithmetic(len("$(("))
        elif after == "(":
            self.out.operators.append("$(")
            self.pos += 2
            self._nested()
        elif after == "{":
            self.pos += 2
            self._braced(in_dquotes=quoted)
        elif after == "'" and not quoted:  # $'...' may spell any name with escapes
            self.pos += 2
            begin = self.pos
            while not text.startswith("'", self.pos):
                if self.pos >= len(text):
                    raise _ParseError("a $' quote is never closed")
                self.pos += 2 if text[self.pos] == "\\" else 1
            # The word's value holds what it spells, so checks of the value (a '$(' in data that
            # may run later) see a '$' spelled as \x24 or \044 joined to the rest of the word.
            decoded = decode_ansi_c(text[begin : self.pos])
            self.out.data.append(decoded)
            value.append(decoded)
            self.pos += 1
        elif after == '"' and not quoted:
            self.pos += 2
            self._dquoted(value)
        elif after and (after.isalnum() or after in "_@*#?$!-"):
            self.pos += 1
        else:
            value.append("$")
            self.pos += 1
            return True
        return False

    def _backtick(self) -> None:
        self.out.operators.append("`")
        text, index, body = self.text, self.pos + 1, []
        while index < len(text) and text[index] != "`":
            if text[index] == "\\" and text[index + 1 : index + 2] in ("$", "`", "\\"):
                index += 1
            body.append(text[index])
            index += 1
        if index >= len(text):
            raise _ParseError("a backquote is never closed")
        self.pos = index + 1
        self._sub("".join(body))

    def _arithmetic(self, opener: int) -> None:
        """``$(( ... ))`` or ``(( ... ))``: not a command, but it may hold substitutions."""
        text, start, depth = self.text, self.pos, 0
        out = self.out
        saved = (len(out.commands), len(out.operators), out.pending, list(self.heredocs))
        self.pos += opener
        while self.pos < len(text):
            char = text[self.pos]
            if char == ")" and depth == 0:
                if text.startswith("))", self.pos):
                    self.pos += 2
                    return
                # "$((a) b)" and "((a) b)" are really a subshell, as bash decides too: forget
                # what the arithmetic reading found and read it again. Each reading may hold
                # more of them, so the count is bounded to keep the work linear.
                out.reparses += 1
                if out.reparses > _MAX_REPARSES:
                    raise _ParseError("too many '((' that open subshells")
                del out.commands[saved[0] :], out.operators[saved[1] :]
                out.pending, self.heredocs = saved[2], saved[3]
                if opener == len("$(("):
                    out.operators.append("$(")
                self.pos = start + opener - 1
                self._nested()
                return
            if char in "()":
                depth += 1 if char == "(" else -1
                self.pos += 1
            elif char == "$":
                self._dollar([], quoted=True)
            elif char == "`":
                self._backtick()
            elif char == '"':
                self.pos += 1
                self._dquoted([])
            else:
                self.pos += 2 if char == "\\" else 1
        raise _ParseError("an arithmetic '((' is never closed")

    def _braced(self, *, in_dquotes: bool) -> None:
        """``${...}``: may hold quotes and substitutions, and nested braces.

        Inside double quotes, a single quote in ``${x:-'...'}`` is an ordinary character and a
        ``$(...)`` between such quotes still runs, so there they are not skipped as quotes.
        """
        self.depth += 1  # ${x:-${y:-...}} nests: bounded like other nesting, so it never overflows
        if self.depth > _MAX_DEPTH:
            raise _ParseError("expansions are nested too deeply")
        try:
            self._braced_body(in_dquotes=in_dquotes)
        finally:
            self.depth -= 1

    def _braced_body(self, *, in_dquotes: bool) -> None:
        text, depth = self.text, 0
        while self.pos < len(text):
            char = text[self.pos]
            if char == "}":
                self.pos += 1
                if depth == 0:
                    return
                depth -= 1
            elif char == "{":
                depth += 1
                self.pos += 1
            elif char == "'" and in_dquotes:
                self.pos += 1
            elif char == "'":
                end = text.find("'", self.pos + 1)
                if end < 0:
                    raise _ParseError("a single quote is never closed")
                self.pos = end + 1
            elif char == '"':
                self.pos += 1
                self._dquoted([])
            elif char == "`":
                self._backtick()
            elif char == "$":
                self._dollar([], quoted=True)
            else:
                self.pos += 2 if char == "\\" else 1
        raise _ParseError("a '${' is never closed")
