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

__all__ = ["LOOKUP_VARIABLES", "carries_substitution", "decode_ansi_c", "lookup_change", "text_options"]

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
