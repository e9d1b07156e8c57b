"""How a few programs' arguments say what they will do: pure functions over words, no I/O.

Used by :mod:`remote_bash.approval` to tell, from a command's words, whether ``chmod`` sets a
setuid bit, whether a ``sed`` script runs commands or writes files, whether an interpreter runs a
program given inline (or read from its input), whether ``git`` is told to run something, and
where the command a wrapper (``sudo -u root``, ``timeout -s KILL 5``) runs starts. Each
reader errs towards "it may": a form it does not know is reported as such, never as harmless.
"""

from __future__ import annotations

import re

__all__ = ["TEXT_OPTIONS", "awk_programs", "awk_runs", "git_runs", "inline_program", "mode_sets_special", "sed_effects",
           "split_glued", "wrapper_starts"]

# Wrappers whose first operand is theirs (a lock file, a directory, a time), not the command's name.
# timeout's first operand is always its duration (``5``, ``.5``, ``inf``, ``1e3``), whatever its spelling.
_OWN_OPERAND = frozenset({"flock", "chroot", "faketime", "sg", "ssh", "timeout"})
# How many ways a wrapper's options may be read before it asks instead (each is read in full).
_MAX_READINGS = 8
# Wrappers whose leading numbers are theirs (a duration, a priority, a CPU list).
_NUMBER_OPERAND = frozenset({"timeout", "nice", "chrt", "taskset", "flock", "ionice"})
_SU = ("-s", "-g", "-G", "-w", "--shell", "--group", "--supp-group", "--whitelist-environment")
# Wrapper options that take the next word as their value. Any other option might too: the word
# after it is then read both as its value and as the start of the command (see wrapper_starts).
_VALUE_OPTIONS: dict[str, frozenset[str]] = {name: frozenset(opts) for name, opts in {
    "sudo": ("-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user", "--group", "--chdir",
             "--chroot", "--close-from", "--host", "--prompt", "--role", "--type", "--other-user",
             "--command-timeout"),
    "doas": ("-u", "-C"), "su": _SU, "runuser": (*_SU, "-u", "--user"), "pkexec": ("--user",), "exec": ("-a",),
    "env": ("-u", "-C", "--unset", "--chdir"), "timeout": ("-s", "-k", "--signal", "--kill-after"),
    "nice": ("-n", "--adjustment"), "ionice": ("-c", "-n", "-p", "-P", "-u", "--class", "--classdata"),
    "stdbuf": ("-i", "-o", "-e", "--input", "--output", "--error"), "watch": ("-n", "--interval"),
    "time": ("-f", "-o", "--format", "--output"),
    "xargs": ("-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter", "--max-args",
              "--max-procs", "--max-chars", "--max-lines", "--process-slot-var", "--eof"),
    "nsenter": ("-t", "-S", "-G", "--target", "--setuid", "--setgid"),
    "unshare": ("-S", "-G", "-R", "-w", "--setuid", "--setgid", "--propagation", "--root", "--wd"),
    "systemd-run": ("-p", "-u", "-E", "-M", "-H", "--property", "--unit", "--setenv", "--machine", "--host",
                    "--uid", "--gid", "--nice", "--working-directory", "--description", "--slice"),
    "flock": ("-w", "--wait", "--timeout", "-E", "--conflict-exit-code"), "proxychains": ("-f",),
    "torsocks": ("-u", "-p", "-a", "-P"), "faketime": ("-p",),
    "ssh": ("-p", "-i", "-l", "-o", "-F", "-J", "-L", "-R", "-D", "-b", "-c", "-E", "-e", "-I", "-m", "-O", "-Q",
            "-S", "-W", "-w", "-B"),
}.items()}
# Wrappers that run a text given to an option through a shell.
TEXT_OPTIONS: dict[str, tuple[str, ...]] = {"su": ("-c", "--command", "--session-command"),
                                             "runuser": ("-c", "--command", "--session-command"),
                                             "flock": ("-c", "--command"), "sg": ("-c",),
                                             "env": ("-S", "--split-string"), "script": ("-c", "--command")}
# For those wrappers: the short options that take a value (in a cluster such as ``-qc'TEXT'`` or
# ``-vS'TEXT'`` the rest of the word is that value), the letter whose value is a command text, its
# long names (GNU programs take any unambiguous abbreviation: ``--comm``), and whether the options
# end at the first operand (env) rather than anywhere (GNU getopt's order).
_GLUED: dict[str, tuple[str, str, tuple[str, ...], bool]] = {
    "env": ("uCS", "S", ("--split-string",), True),
    "script": ("cEIOBTmo", "c", ("--command",), False),
    "su": ("sgGwc", "c", ("--command", "--session-command"), False),
    "runuser": ("sgGwcu", "c", ("--command", "--session-command"), False),
    "flock": ("wEc", "c", ("--command",), False),
    "sg": ("c", "c", (), False),
}
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?\+?=")

_CLAUSE = re.compile(r"[ugoa]*((?:[-+=](?:[rwxXst]*|[ugo]|[0-7]+))+)")
_ACTION = re.compile(r"([-+=])([rwxXst]*|[ugo]|[0-7]+)")


def mode_sets_special(mode: str) -> bool:
    """True when a chmod/install mode (octal, symbolic, or GNU's operator plus octal, comma-separated
    clauses) adds a setuid or setgid bit."""
    for clause in mode.split(","):
        if re.fullmatch(r"[0-7]+", clause):
            if int(clause, 8) & 0o6000:
                return True
            continue
        match = _CLAUSE.fullmatch(clause)
        if match is None:
            continue
        for op, perms in _ACTION.findall(match.group(1)):
            if op == "-":
                continue
            if "s" in perms or (perms.isdigit() and int(perms, 8) & 0o6000):
                return True
    return False


# Interpreters whose program may be inline: the short flags (letters) and long flags that take it,
# and the flags that only print something (a version, help) and run no program.
_INTERPRETERS: tuple[tuple[re.Pattern[str], str, tuple[str, ...]], ...] = (
    (re.compile(r"python[0-9.]*|pypy[0-9.]*"), "c", ()),
    (re.compile(r"perl[0-9.]*"), "eE", ()),
    (re.compile(r"ruby[0-9.]*"), "e", ()),
    (re.compile(r"node(js)?|bun|deno"), "ep", ("--eval", "--print")),
    (re.compile(r"php[0-9.]*"), "rBRFE", ()),
    (re.compile(r"lua(jit|[0-9.]*)"), "e", ()),
    (re.compile(r"Rscript|julia"), "e", ("--eval",)),
)
_QUIET = frozenset({"-V", "--version", "-v", "-h", "--help", "-VV"})
_VALUE_FLAGS = frozenset({"-W", "-X", "-Q", "-I", "-M", "-r", "-x", "-C", "-d"})


def inline_program(base: str, words: list[str]) -> str | None:
    """For an interpreter: why its program cannot be read (given inline, or read from its input);
    None when it runs a named script or module, or ``base`` is no interpreter known here."""
    found = next((spec for spec in _INTERPRETERS if spec[0].fullmatch(base)), None)
    if found is None:
        return None
    _, letters, longs = found
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-" or not word.startswith("-"):
            return f"{base} reads its program from its input" if word == "-" else None
        if word in _QUIET:
            return None
        if word in longs or any(word.startswith(f + "=") for f in longs):
            return f"{base} runs a program given inline"
        if not word.startswith("--") and re.match(r"-[A-Za-z]*[" + letters + "]", word):
            return f"{base} runs a program given inline"
        if word.startswith("-m"):
            return None  # a module, as a script: not text here to read
        i += 2 if word in _VALUE_FLAGS else 1
    return f"{base} reads its program from its input"


def sed_effects(words: list[str]) -> tuple[str | None, list[str]]:
    """What sed's script does beyond editing text: a reason it runs commands or cannot be read
    (None when it does neither), and the files its ``w``/``W`` commands and ``w`` flags write."""
    scripts: list[str] = []
    operands: list[str] = []
    sandbox = "--sandbox" in words
    i = 0
    while i < len(words):
        word = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if word.startswith("--"):
            if word in ("--expression", "--file"):
                i += 1
            if word.startswith(("--file", "--expression")):
                if word.startswith("--file"):
                    return "sed runs a script from a file, which the text does not show", []
                scripts.append(word.split("=", 1)[1] if "=" in word else nxt)
        elif word.startswith("-") and len(word) > 1:
            for j, flag in enumerate(word[1:], start=1):
                if flag == "i":
                    break  # -i[SUFFIX]: the rest is the suffix
                if flag in "ef":
                    value = word[j + 1:] or nxt
                    if not word[j + 1:]:
                        i += 1
                    if flag == "f":
                        return "sed runs a script from a file, which the text does not show", []
                    scripts.append(value)
                    break
                if flag == "l":
                    i += 0 if word[j + 1:] else 1
                    break
        else:
            operands.append(word)
        i += 1
    if not scripts and operands:
        scripts.append(operands[0])
    runs: str | None = None
    written: list[str] = []
    for script in scripts:
        reading = _sed_script(script)
        if reading is None:
            return "sed's script could not be read", []
        run, files = reading
        if run and not sandbox:
            runs = "sed's script runs a command (the 'e' command or flag)"
        written += [] if sandbox else files
    return runs, written


def _sed_script(script: str) -> tuple[bool, list[str]] | None:
    """Reads a GNU sed script: whether it runs commands, and the files it writes; None when unsure."""
    n, i = len(script), 0
    runs, files = False, list[str]()

    def rest_of_line(k: int) -> tuple[str, int]:
        end = script.find("\n", k)
        end = n if end < 0 else end
        return script[k:end].strip(), end

    def delimited(k: int, parts: int) -> int | None:
        delim = script[k]
        if delim in "\\\n":
            return None
        k += 1
        for _ in range(parts):
            while k < n and script[k] != delim:
                k += 2 if script[k] == "\\" else 1
            if k >= n:
                return None
            k += 1
        return k

    for _ in range(n + 1):
        while i < n and script[i] in " \t\n;":
            i += 1
        if i >= n:
            return runs, files
        if script[i] == "#":
            i = rest_of_line(i)[1]
            continue
        for _part in range(2):  # an address, and after a comma a second one
            if i < n and script[i] == "/":
                end = delimited(i, 1)
                if end is None:
                    return None
                i = end
                while i < n and script[i] in "IM":
                    i += 1
            elif i < n and script[i] == "\\":
                end = delimited(i + 1, 1) if i + 1 < n else None
                if end is None:
                    return None
                i = end
            else:
                m = re.compile(r"\$|[0-9]+(~[0-9]+)?|[+~][0-9]+").match(script, i)
                if m is not None:
                    i = m.end()
            if i < n and script[i] == ",":
                i += 1
                continue
            break
        while i < n and script[i] in " \t!":
            i += 1
        if i >= n:
            return None
        cmd = script[i]
        i += 1
        if cmd in "{}=dDgGhHnNpPxzF":
            continue
        if cmd in "aic" or cmd in "rR":
            i = rest_of_line(i)[1]
        elif cmd in "wW":
            name, i = rest_of_line(i)
            files.append(name)
        elif cmd == "e":
            runs = True
            i = rest_of_line(i)[1]
        elif cmd in ":bTt":
            m = re.compile(r"[^;\n]*").match(script, i)
            i = m.end() if m else n
        elif cmd in "qQlLv":
            m = re.compile(r"[ \t]*[0-9]*").match(script, i)
            i = m.end() if m else i
        elif cmd in "sy":
            if i >= n:
                return None
            end = delimited(i, 2)
            if end is None:
                return None
            i = end
            if cmd == "s":
                m = re.compile(r"[gpiImMe0-9]*").match(script, i)
                flags = m.group(0) if m else ""
                i += len(flags)
                runs = runs or "e" in flags
                if i < n and script[i] == "w":
                    name, i = rest_of_line(i + 1)
                    files.append(name)
        else:
            return None
    return None


_GIT_VALUE = frozenset({"-C", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--list-cmds",
                        "--attr-source"})


# git subcommands' options whose value is a command git runs (the upload or receive program of a
# local or ssh remote, an archive's remote command, a pager, settings of a new clone), by the
# shortest abbreviation git's option parser takes for each, and their short forms.
_GIT_COMMAND_OPTIONS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "fetch": (("--upl",), "", "ojn"), "pull": (("--upl",), "", "ojnsX"),
    "clone": (("--upl", "--con"), "uc", "objnu"), "ls-remote": (("--upl",), "u", "o"),
    "push": (("--rece", "--ex"), "", "o"), "archive": (("--ex", "--rem"), "", "o"),
    "grep": (("--open",), "O", "efABCm"), "send-email": (("--sendm", "--smtp-server", "--to-c", "--cc-c",
                                                         "--header-c"), "", ""),
}


def _git_command_option(subcommand: str, words: list[str]) -> str | None:
    """The option of ``git SUBCOMMAND`` that names a command git runs (``--upload-pack=CMD``,
    ``-u CMD``, ``-O``), as git's option parser reads it; None when none is given."""
    if subcommand not in _GIT_COMMAND_OPTIONS:
        return None
    stems, letters, with_value = _GIT_COMMAND_OPTIONS[subcommand]
    for word in words:
        if word == "--":
            return None
        name = word.split("=", 1)[0]
        if name.startswith("--") and len(name) > 2 and any(
                name.startswith(stem) or (len(name) >= 5 and stem.startswith(name)) for stem in stems):
            return name
        if word.startswith("-") and not word.startswith("--"):
            for letter in word[1:]:
                if letter in letters:
                    return "-" + letter
                if letter in with_value:
                    break
    return None


def git_runs(words: list[str]) -> str | None:
    """Why ``git`` with these arguments may run a command the text does not show, or None."""
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-c" or (word.startswith("-c") and not word.startswith("--")) or word.startswith("--config-env"):
            return ("git -c/--config-env can set a configuration key that runs a command (an alias with '!', "
                    "a pager, an editor, a hook)")
        if word.startswith("--exec-path="):  # without a value it only prints the directory
            return "git --exec-path=DIR runs git's commands from another directory"
        if word in _GIT_VALUE:
            i += 2
            continue
        if word.startswith("-"):
            i += 1
            continue
        rest = words[i + 1:]
        option = _git_command_option(word, rest)
        if option is not None:
            return f"git {word} {option} runs a command given to it, which is not read here"
        if (word == "submodule" and "foreach" in rest) or (word == "bisect" and "run" in rest) \
                or word == "filter-branch" or (word == "rebase" and any(
                    w in ("-x", "--exec") or w.startswith("--exec=") for w in rest)) \
                or (word in ("difftool", "mergetool") and any(
                    w in ("-x", "--extcmd", "-t", "--tool") or w.startswith(("--extcmd=", "--tool=")) for w in rest)):
            return f"git {word} runs a command given to it, which is not read here"
        return None
    return None


def awk_programs(words: list[str]) -> list[int] | None:
    """Where awk's program texts are in its arguments; None when it reads one from a file or library."""
    programs, i = [], 0
    while i < len(words):
        word = words[i]
        if word in ("-f", "-i", "-l") or word.startswith(("--file", "--include", "--load", "-f", "-i", "-l")):
            return None
        if word in ("-e", "--source"):
            programs += [i + 1] if i + 1 < len(words) else []
            i += 2
        elif word in ("-v", "-F", "--assign", "--field-separator"):
            i += 2
        elif word.startswith("-") and word != "-":
            i += 1
        else:
            if not programs:
                programs.append(i)
            break
    return programs


def awk_runs(base: str, words: list[str]) -> str | None:
    """Why awk's program may write, pipe or run something (or cannot be read), or None: it reads."""
    found = awk_programs(words)
    if found is None:
        return f"{base} runs a program from a file or a loaded library, which the text does not show"
    programs = [words[i] for i in found]
    if any(re.search(r"system|getline|close|fflush|[>|]|@load|@include", p) for p in programs):
        return f"{base}'s program can write files or run commands, which the text does not show"
    return None


def wrapper_starts(base: str, words: list[str]) -> tuple[list[int] | None, list[str]]:
    """Where the command a wrapper runs may start in its words (after the wrapper's options, their
    values, assignments and operands), and the assignments it makes. An option the table does not
    know may take a value, so the word after it is read both ways. None for the starts when there
    are more readings than are read here."""
    values = _VALUE_OPTIONS.get(base, frozenset())
    # Every way to read the options, as positions (with whether the wrapper's own operand is still
    # to come, and whether a ``--`` ended the options): at most two per word, so the reading stays
    # linear however many options there are. After ``--`` the wrapper's own operand and numbers are
    # still its own, as the program reads them: ``timeout -- 5 rm`` runs ``rm``.
    todo: list[tuple[int, bool, bool]] = [(0, base in _OWN_OPERAND, False)]
    seen: set[tuple[int, bool, bool]] = set()
    starts: set[int] = set()
    assigned: list[str] = []
    while todo:
        state = todo.pop()
        if state in seen:
            continue
        seen.add(state)
        i, own, ended = state
        if i >= len(words):
            continue
        word = words[i]
        match = _ASSIGN.match(word)
        if word == "--" and not ended:
            todo.append((i + 1, own, True))
        elif word in values and not ended:
            todo.append((i + 2, own, ended))
        elif word.startswith("-") and len(word) > 1 and not ended:
            todo.append((i + 1, own, ended))
            if "=" not in word:
                todo.append((i + 2, own, ended))  # in case it takes a value the table does not know
        elif match is not None:
            assigned.append(word)
            todo.append((i + 1, own, ended))
        elif own:
            todo.append((i + 1, False, ended))
            if base == "timeout":
                starts.add(i)  # not a duration: timeout fails, but read it as the command all the same
        elif base in _NUMBER_OPERAND and word[:1].isdigit():
            todo.append((i + 1, own, ended))
        else:
            starts.add(i)
    if len(starts) > _MAX_READINGS:
        return None, assigned
    return sorted(i for i in starts if i < len(words)), assigned


def split_glued(base: str, words: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """A wrapper's words with its command-text option spelled apart, as its option parser reads
    it: ``script -qec'rm F'`` as ``-qe -c 'rm F'``, ``env -vS'rm F'`` as ``-v -S 'rm F'``,
    ``su --comm='rm F'`` as ``-c 'rm F'``; other wrappers' words unchanged."""
    if base not in _GLUED:
        return words
    with_value, text, longs, first_operand_ends = _GLUED[base]
    out: list[tuple[str, bool]] = []
    for i, (word, literal) in enumerate(words):
        if word == "--" or (first_operand_ends and not word.startswith("-")):
            return out + words[i:]
        if word.startswith("--"):
            name, equals, value = word.partition("=")
            if len(name) > 2 and any(long.startswith(name) for long in longs):
                out.append(("-" + text, literal))
                out += [(value, literal)] if equals else []
                continue
        elif word.startswith("-") and len(word) > 1:
            for j, letter in enumerate(word[1:], start=1):
                if letter == text:
                    out += [(word[:j], literal)] if j > 1 else []
                    out.append(("-" + text, literal))
                    out += [(word[j + 1:], literal)] if j + 1 < len(word) else []
                    break
                if letter in with_value:
                    out.append((word, literal))
                    break
            else:
                out.append((word, literal))
            continue
        out.append((word, literal))
    return out
