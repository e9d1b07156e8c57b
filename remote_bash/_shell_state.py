"""Shell state that outlives one call: what a persistent bash keeps and uses to run later commands.

The session's shell persists between calls, so a command can change what a later, harmless-looking
command runs: the command hash (``hash -p``, ``BASH_CMDS``), aliases (``alias``, ``BASH_ALIASES``,
``shopt -s expand_aliases``), builtins (``enable -n``/``-f``/``-d``) and function definitions.
Some builtins run a text they are given (``mapfile -C``, ``compgen -C``, ``bind -x``, ``fc``), and
bash evaluates ``a[$(...)]`` in an array subscript whenever a variable holding it is used in
arithmetic, so a quoted literal carrying ``$(`` or a backquote is data that may later run.

Pure functions over words after quote removal, shared by the approval rules and the allowlist;
this module must never claim to know the shell's state, only what the text would change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["LONE_DOLLAR", "LOOKUP_VARIABLES", "NAME", "NAMERS", "Assignment", "arithmetic_assigned",
           "arithmetic_texts", "assembles_substitution", "carries_substitution", "command_assigned",
           "declared", "decode_ansi_c", "lookup_change", "named_variables", "text_assigned", "text_options"]

# Variables whose value decides which program or text a command name runs.
LOOKUP_VARIABLES = frozenset({"BASH_CMDS", "BASH_ALIASES", "EXECIGNORE", "BASH_LOADABLES_PATH"})
LATER = "changes what later commands run"
# Builtins that run a text given by an option, and all the options of each that take a value (an
# option cluster such as -tC takes its value from the rest of the word or the next word).
_TEXT_BUILTINS: dict[str, tuple[str, str]] = {
    "mapfile": ("C", "dnOsuCc"), "readarray": ("C", "dnOsuCc"),
    "compgen": ("CF", "oAGWFCXPS"), "complete": ("CF", "oAGWFCXPS"),
}
_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|c.|.)", re.DOTALL)
# Builtins whose operands (and option values such as ``printf -v NAME``, ``wait -p NAME``) name
# variables they assign or unset.
NAMERS: dict[str, tuple[str, str]] = {  # the options that take a name, and those that take another value
    "read": ("a", "dinNptu"), "mapfile": ("", "dnOsuCc"), "readarray": ("", "dnOsuCc"), "printf": ("v", ""),
    "wait": ("p", ""), "unset": ("", ""), "getopts": ("", "")}
NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?\+?=")
_DECLARERS = frozenset({"export", "declare", "typeset", "readonly", "local"})
# A subscript after a name; a longer or unclosed one leaves a '[' that counts as a possible
# assignment of the name, which keeps every pattern below linear in the text's length.
_SUBSCRIPT = r"(?:\[[^\]]{0,64}\])?"
# Constructs that assign a variable without a NAME=value word: ``${NAME:=word}``/``${NAME=word}``
# (``${!REF:=word}`` assigns the variable REF names), and ``{NAME}>file``, which stores the new
# descriptor's number in NAME.
_EXPANSION_ASSIGNS = re.compile(r"\$\{(!?)(" + NAME + r")" + _SUBSCRIPT + r"(:?=|\[)")
_FD_NAMES = re.compile(r"(?<![^\s;&|(<>])\{(" + NAME + r")\}(?=[<>])")
# Commands that assign the variables their arguments name: a name spelled by an expansion may be any.
DECLARING = re.compile(r"(?<![\w-])(?:export|declare|typeset|local|readonly|env)\s([^;&|\n]*)")
# Arithmetic (``((...))``, ``$((...))``, array subscripts, ``[[ ... -eq ... ]]``, ``let``) assigns
# with ``=``, ``+=``, ... and ``++``/``--``; a target spelled by an expansion (``$x=5``) is any name.
_ARITHMETIC = re.compile(r"\(\((.*?)(?:\)\)|$)|\[\[(.*?)(?:\]\]|$)|\w\[([^\]]*)(?:\]|$)"
                         r"|(?<![\w-])let\s([^;&|\n]*)", re.DOTALL)
_NUMERIC_TEST = re.compile(r"-(?:eq|ne|lt|le|gt|ge)\b")
# The old arithmetic expansion ``$[...]``, and the offset of ``${x:OFFSET:LENGTH}`` (not ``:-``,
# ``:=``, ``:?``, ``:+``; a subscript too long to look at counts as the start of one).
_OLD_ARITHMETIC = re.compile(r"\$\[")
_OFFSET = re.compile(r"\$\{[#!]?(?:[A-Za-z_]\w*|\d+|[@*#?$!-])(?:\[[^\]]{0,64}\]:|\[(?=[^\]]{65})|:)(?![-=?+])")
# A name starts only where no name character comes before it and is never given back: each
# character is looked at a bounded number of times, so the search is linear in the text's length
# (``$((aaa...))`` of any length; a name right after a digit, ``1ab``, is no number bash accepts).
_ATOMIC_NAME = r"(?<![A-Za-z0-9_])(?>" + NAME + r")"
_ARITHMETIC_ASSIGNS = re.compile(r"(?:(?P<d1>[$}])(?P<n1>(?>" + NAME + r")?)|(?P<n1b>" + _ATOMIC_NAME + r"))"
                                 r"\s*+" + _SUBSCRIPT + r"\s*+(?:(?:[-+*/%&|^]|<<|>>|\*\*)?=(?!=)|\[)"
                                 r"|(?:\+\+|--)\s*+(?P<d2>\$?)(?P<n2>(?>" + NAME + r"))"
                                 r"|(?P<d3>\$?)(?P<n3>" + _ATOMIC_NAME + r")\s*+(?:\+\+|--)")
# A '$' that starts no expansion of its own: the end of a value, or before '[', '%', a quote...
LONE_DOLLAR = re.compile(r"\$(?![A-Za-z0-9_{(@*#?!$-])")


def _clusters(values: list[str]) -> list[str]:
    """The option letters of words such as ``-lp`` (not ``--long`` ones), up to ``--``."""
    letters = []
    for value in values:
        if value == "--":
            break
        if value.startswith("-") and not value.startswith("--") and len(value) > 1:
            letters.append(value[1:])
    return letters


def lookup_change(base: str, values: list[str]) -> str | None:
    """Why ``base`` with these arguments changes what a later command name runs, or None."""
    letters = "".join(_clusters(values))
    if base == "hash" and "p" in letters:
        return f"hash -p ties a command name to another program, which {LATER}"
    if base == "shopt" and "expand_aliases" in values and "u" not in letters:
        return f"shopt -s expand_aliases turns aliases on, which {LATER}"
    if base == "enable" and set(letters) & set("nfd"):
        return f"enable -n/-f/-d adds or removes shell builtins, which {LATER}"
    if base == "alias" and any("=" in v for v in values):
        return f"alias gives a command name other text to run, which {LATER}"
    if base == "set" and ("k" in letters or "keyword" in values):
        return f"set -k makes later NAME=value arguments into the command's variables, which {LATER}"
    if base == "fc" and "l" not in letters:
        return "fc runs commands again from the shell's history, which the text does not show"
    if base == "bind" and "x" in letters:
        return "bind -x ties a key to a shell command"
    return None


def text_options(base: str, words: list[tuple[str, bool]]) -> list[tuple[str, tuple[str, bool]]]:
    """The options of a builtin that runs a text (``mapfile -C TEXT``, ``compgen -F FUNCTION``):
    each as its letter and its value word."""
    wanted, with_value = _TEXT_BUILTINS.get(base, ("", ""))
    found: list[tuple[str, tuple[str, bool]]] = []
    i = 0
    while i < len(words):
        word, literal = words[i]
        if word == "--":
            break
        if word.startswith("-") and not word.startswith("--"):
            for j, letter in enumerate(word[1:], start=1):
                if letter not in with_value:
                    continue
                if j + 1 < len(word):
                    value = (word[j + 1:], literal)
                else:
                    i += 1
                    value = words[i] if i < len(words) else ("", True)
                if letter in wanted:
                    found.append((letter, value))
                break
        i += 1
    return found


def decode_ansi_c(body: str) -> str:
    """What a ``$'...'`` body stands for, as far as which characters it can spell."""
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] in "xuU":
            # With no hex digit after it, bash leaves the escape as it is.
            return chr(min(int(code[1:], 16), 0x10FFFF)) if len(code) > 1 else "\\" + code
        if code[0] in "01234567":
            return chr(int(code, 8) & 0xFF)
        return code if code[0] != "c" else ""
    return _ESCAPE.sub(one, body)


def carries_substitution(text: str) -> bool:
    """True when literal data holds ``$(`` or a backquote: bash runs it if the value is ever used in
    arithmetic (``a[$(cmd)]`` as a subscript) or expanded as a prompt (``${x@P}``)."""
    return "$(" in text or "`" in text


@dataclass(frozen=True)
class Assignment:
    """A variable the text assigns, and how."""

    name: str
    """The variable, or '' when an expansion names it (it may be any)."""
    form: str
    """How it is assigned, as a phrase: ``arithmetic``, ``${NAME:=...}``, ``printf -v``..."""


def arithmetic_assigned(text: str) -> list[str]:
    """The variables arithmetic text assigns (``PATH=5``, ``x+=1``, ``i++``); '' for one that an
    expansion names (``$x=5``)."""
    names = []
    for match in _ARITHMETIC_ASSIGNS.finditer(text):
        # '$x=5', '${x}=5', '$x++': an expansion names the target; '=' after a number, an operator
        # or the first '=' of '==' matches nothing.
        dollar = match.group("d1") or match.group("d2") or match.group("d3")
        name = match.group("n1") or match.group("n1b") or match.group("n2") or match.group("n3") or ""
        names.append("" if dollar or not name else name)
    return names


def text_assigned(text: str) -> list[Assignment]:
    """Assignments the words do not show: ``${NAME:=word}``, ``{NAME}>file``, a declaring command
    given a name by an expansion, and arithmetic anywhere in the text (``$((PATH=5))``, ``$[...]``,
    ``${x:0:PATH=3}``, a subscript ``a[PATH=9]``, ``let``, ``((...))``)."""
    found = []
    for match in _EXPANSION_ASSIGNS.finditer(text):
        if match.group(1):
            found.append(Assignment("", f"${{!{match.group(2)}:=...}}"))
        else:
            found.append(Assignment(match.group(2), "${NAME:=...}"))
    found += [Assignment(name, "{NAME}>") for name in _FD_NAMES.findall(text)]
    for match in DECLARING.finditer(text):
        if re.search(r"(?:^|\s)[\"']?[$`]", match.group(1)):
            found.append(Assignment("", match.group(0).split(None, 1)[0]))
    for arithmetic in arithmetic_texts(text, False):
        found += [Assignment(name, "arithmetic") for name in arithmetic_assigned(arithmetic)]
    return found


def _balanced_end(text: str, start: int, opening: str, closing: str) -> int:
    """Where the bracket opened just before ``start`` closes (the text's end when it does not)."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] == opening:
            depth += 1
        elif text[i] == closing:
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def arithmetic_texts(text: str, references: bool) -> list[str]:
    """The texts bash evaluates as arithmetic: ``((...))``, ``$((...))``, subscripts, ``let``,
    ``[[ ... ]]``, the old ``$[...]`` and the offset and length of ``${x:OFFSET:LENGTH}``.
    With ``references``, a ``[[ ... ]]`` counts only when it compares numbers (``-eq``, ...): the
    texts are then read for the variables they name, not for assignments."""
    texts = []
    for match in _ARITHMETIC.finditer(text):
        found = next(g for g in match.groups() if g is not None)
        if not references or match.group(2) is None or _NUMERIC_TEST.search(found):
            texts.append(found)
    for pattern, opening, closing in ((_OLD_ARITHMETIC, "[", "]"), (_OFFSET, "{", "}")):
        position = 0
        while (opened := pattern.search(text, position)) is not None:
            end = _balanced_end(text, opened.end(), opening, closing)
            texts.append(text[opened.end():end])
            position = max(end, opened.end())  # what is nested inside was read with it: linear
    return texts


def named_variables(base: str, words: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """The variables a builtin that assigns by name sets or unsets (``read``, ``printf -v``,
    ``mapfile``, ``getopts``, ``wait -p``, ``unset``), as words with whether each is literal."""
    if base not in NAMERS:
        return []
    takes_name, takes_value = NAMERS[base]
    names: list[tuple[str, bool]] = []
    operands: list[tuple[str, bool]] = []
    i = 0
    while i < len(words):
        word = words[i][0]
        if operands or word in ("-", "+") or word[:1] not in "-+" or base == "getopts":
            operands.append(words[i])
        elif word == "--":
            operands += words[i + 1:]
            break
        else:
            for j, letter in enumerate(word[1:], start=1):
                if letter in takes_name + takes_value:
                    value = (word[j + 1:], words[i][1]) if j + 1 < len(word) else \
                        words[i + 1] if i + 1 < len(words) else ("", True)
                    i += 0 if j + 1 < len(word) else 1
                    if letter in takes_name:
                        names.append(value)
                    break
        i += 1
    if base in ("read", "mapfile", "readarray", "unset"):
        names += operands
    elif base == "getopts":
        names += operands[1:2]
    return names


def declared(base: str, values: list[str]) -> list[str]:
    """The words a declaring command (``export``, ``declare``, ..., ``env``) assigns: ``NAME=value``
    and, for the declarers, bare ``NAME`` operands and the targets of a name reference (``-n``)."""
    if base not in _DECLARERS and base != "env":
        return []
    names = [w for w in values if _ASSIGN.match(w)]
    if base in _DECLARERS:
        names += [w for w in values if re.fullmatch(NAME, w)]
        if any(re.fullmatch(r"-[a-zA-Z]*n[a-zA-Z]*", w) for w in values):  # a name reference
            names += [w.split("=", 1)[1] for w in values if "=" in w]
    return names


def _name_of(word: str) -> str:
    """The variable a word such as ``NAME``, ``NAME[i]`` or ``NAME=value`` names."""
    named = re.match(NAME, word)
    return named.group(0) if named else word


def command_assigned(base: str, words: list[tuple[str, bool]]) -> list[Assignment]:
    """The variables a command assigns by its arguments (not its ``NAME=value`` prefix): a
    ``for``/``select`` loop, ``let``, ``coproc NAME``, the builtins that take names, and the
    declaring commands. A name known only after expansion is ''."""
    values = [w for w, _ in words]
    if base in ("for", "select"):
        return [Assignment(v, base) for v in values[:1]]
    if base == "let":
        return [Assignment(name, "arithmetic") for name in arithmetic_assigned(" ".join(values))]
    if base == "coproc" and values and re.fullmatch(NAME, values[0]) and (
            len(values) == 1 or values[1] in ("{", "(", "((", "[[", "if", "for", "while", "until", "case", "select")):
        return [Assignment(values[0], "coproc"), Assignment(values[0] + "_PID", "coproc")]
    if base in NAMERS:
        return [Assignment(_name_of(word) if literal else "", base) for word, literal in named_variables(base, words)]
    return [Assignment(_name_of(word), base) for word in declared(base, values)]


def assembles_substitution(base: str, args: list[str], joins: bool) -> str | None:
    """Whether printf assembles ``$(`` from its pieces: ``carries`` when its format or arguments
    spell ``$(`` or a backquote with an escape (``\x24``, ``\044``), ``joined`` when a lone ``$``
    among them may be joined to a ``(`` elsewhere in the text (``joins``): ``printf -v x 'a[%c(rm
    F)]' '$'`` stores ``a[$(rm F)]``, which bash runs when the value is used in arithmetic."""
    if base != "printf":
        return None
    decoded = [decode_ansi_c(a) for a in args]
    if any(carries_substitution(d) for d in decoded):
        return "carries"
    if joins and any(LONE_DOLLAR.search(d) for d in decoded):
        return "joined"
    return None
