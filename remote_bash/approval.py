"""Which commands need a person's yes before they are sent: pure functions, no I/O.

A host's ``approve`` setting is ``never``, ``all``, or a list of rules: named classes
(``privilege``, ``packages``, ``services``, ``deletions``), ``{regex: ...}`` and
``{writes_outside: [paths]}``. With no setting, hosts labelled as production
(``env``/``environment``/``stage``/``tier`` = ``prod`` or ``production``) ask for every named
class, and the rest ask for nothing.

Like the command policy this is a guard rail over the command's text: it reads what the text
would run (through wrappers such as ``sudo``, ``env``, ``nohup``, ``bash -c``, ``eval`` of plain
literals, ``trap`` texts, ``find -exec``, ``mapfile -C``), and when the text runs code it cannot read
it asks: an unreadable command, a command name or ``eval`` text known only after expansion, a
script (``source``, ``bash FILE``, a shell or interpreter reading its input), an inline program,
a variable that makes programs load or run other code (``LD_PRELOAD``, ``PATH``, ``BASH_ENV``, ...),
however it is assigned (a loop variable, ``${NAME:=...}``, ``{NAME}>``, ``read``, arithmetic), an
option that runs a command (``ssh -o ProxyCommand=``, ``zip -TT``, ``tar --to-command``, ...). A
``--`` ends a wrapper's options as the program reads it.
Since the shell persists between calls, it also asks when the text changes what a later command
runs (``hash -p``, ``BASH_CMDS``, aliases, ``enable``, any function definition) and when quoted
text holds ``$(`` or a backquote, which bash runs if the value is later used in arithmetic.
It cannot see what a script or an allowed program does once it runs, nor the host's file system
(a symbolic link that already leads out of an allowed path). Asking, and recording the answer, is the
caller's job: this module only decides whether to ask, and remembers time-limited grants.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from remote_bash._approval_writes import OUTPUT_REDIRECTS, inside, writes_outside
from remote_bash._programs import (
    TEXT_OPTIONS,
    awk_programs,
    awk_runs,
    git_runs,
    inline_program,
    mode_sets_special,
    sed_effects,
    split_glued,
    wrapper_starts,
)
from remote_bash._regex import LinearPattern, PatternError, compile_linear
from remote_bash._shell_state import (
    DECLARING,
    LATER,
    LONE_DOLLAR,
    LOOKUP_VARIABLES,
    NAME,
    NAMERS,
    Assignment,
    arithmetic_assigned,
    arithmetic_texts,
    assembles_substitution,
    carries_substitution,
    command_assigned,
    declared,
    decode_ansi_c,
    lookup_change,
    text_assigned,
    text_options,
)
from remote_bash.models import ApproveRule, Host, RegexApproveRule, WritesOutsideRule
from remote_bash.policy import simple_commands

__all__ = [
    "CLASSES",
    "PRODUCTION_DEFAULT",
    "Approval",
    "Grants",
    "Need",
    "approval_needed",
    "effective_rules",
    "is_production",
]

_PRODUCTION_VALUES = frozenset({"prod", "production"})
_PRODUCTION_KEYS = ("env", "environment", "stage", "tier")

CLASSES: dict[str, str] = {
    "privilege": "privilege escalation: sudo, su, doas, pkexec, runuser, sg, setuid/setcap bits, user, group, "
                 "sudoers and account (chsh, chfn, chage) changes, chown/chgrp to root",
    "packages": "package changes: apt/apt-get/dpkg, yum/dnf/rpm, zypper, apk, pacman, snap, pip and npm "
                "installs, removals and upgrades",
    "services": "service and process changes: systemctl start/stop/restart/enable/..., service, reboot, "
                "shutdown, kill, pkill, killall",
    "deletions": "deletions: rm, rmdir, unlink, shred, truncate, wipefs, mkfs, dd of=, find -delete, "
                 "git clean, mv, fallocate -p/-c/-z, '> FILE' with nothing written",
}
PRODUCTION_DEFAULT: tuple[ApproveRule, ...] = ("privilege", "packages", "services", "deletions")

# Programs that run the command given in their arguments: the rest is read as a command of its own.
_WRAPPERS = frozenset({"env", "nohup", "nice", "ionice", "timeout", "stdbuf", "time", "command", "exec",
                       "builtin", "xargs", "setsid", "chrt", "taskset", "flock", "watch", "unbuffer",
                       "busybox", "coproc", "chroot", "nsenter", "unshare", "firejail", "systemd-run",
                       "faketime", "proxychains", "torsocks", "ssh"})
_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "ash", "fish", "csh", "tcsh"})
_AWKS = frozenset({"awk", "gawk", "mawk", "nawk", "busybox-awk"})
# Variables that make programs load or run code the text does not show, or change which program a
# name runs, or how the shell reads later text. A list cannot be complete (a program may read any
# variable): it names the well-known ones.
_CODE_VARIABLES = re.compile(
    r"LD_\w*|DYLD_\w*|GCONV_PATH|GLIBC_TUNABLES|BASH_ENV|ENV|BASH_FUNC_\w*|SHELLOPTS|BASHOPTS|PROMPT_COMMAND"
    r"|PS[0-4]|IFS|PATH|HOME|XDG_CONFIG_HOME|PYTHON\w*|PERL5\w*|PERLLIB|RUBY\w*|GEM_\w*|NODE_OPTIONS|NODE_PATH"
    r"|GIT_\w*|LESSOPEN|LESSCLOSE|PAGER|MANPAGER|\w*_PAGER|EDITOR|VISUAL|\w*_EDITOR|\w*ASKPASS"
    r"|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS|JDK_JAVA_OPTIONS|LUA_\w*|OPENSSL_CONF|OPENSSL_ENGINES|TCLLIBPATH"
    r"|SHELL|BROWSER|EXINIT|VIMINIT|MYVIMRC|\w*_RSH|RSYNC_CONNECT_PROG|TAR_OPTIONS|ZIPOPT")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?\+?=")
_DECLARERS = frozenset({"export", "declare", "typeset", "readonly", "local"})
_ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'", re.DOTALL)
# ssh, scp and sftp: their options that take a value, the -o settings that run a local command (or
# read settings that may), and the options that name a program to run or a library to load.
_SSH_VALUES = {"ssh": "BbcDEeFIiJLlmOoPpQRSWw", "scp": "cDFiJlPoSX", "sftp": "BbcDFiJlPoRSs"}
_SSH_RUNNERS = frozenset({"proxycommand", "localcommand", "permitlocalcommand", "knownhostscommand", "match",
                          "include", "pkcs11provider", "securitykeyprovider", "remotecommand"})
_SSH_PROGRAMS = {"ssh": "I", "scp": "DS", "sftp": "bDS"}
# git configuration keys whose value is a command, a program, or more settings to read.
_GIT_RUNNING_KEYS = re.compile(
    r"(?i)alias\..+|include\.path|includeif\..+|protocol\..+|sequence\.editor"
    r"|core\.(sshcommand|pager|editor|fsmonitor|hookspath|askpass|gitproxy|alternaterefscommand)"
    r"|.+\.(pager|command|cmd|program|textconv|clean|smudge|process|helper|driver|editor|external"
    r"|packobjectshook)|pager\..+")
_PACKAGE_MODULES = frozenset({"pip", "pip3", "ensurepip"})
_ESCALATE = frozenset({"sudo", "su", "doas", "pkexec", "runuser", "setpriv", "sudoedit", "machinectl", "sg"})
_ACCOUNTS = frozenset({"useradd", "userdel", "usermod", "adduser", "deluser", "groupadd", "groupdel",
                       "groupmod", "gpasswd", "passwd", "chpasswd", "visudo", "setcap", "newgrp", "chsh", "chfn",
                       "chage"})
_PACKAGE_VERBS: dict[str, frozenset[str]] = {
    "apt": frozenset({"install", "remove", "purge", "upgrade", "full-upgrade", "dist-upgrade", "autoremove",
                      "reinstall", "build-dep", "autopurge"}),
    "yum": frozenset({"install", "remove", "erase", "update", "upgrade", "downgrade", "reinstall",
                      "autoremove", "distro-sync", "swap", "localinstall", "groupinstall", "groupremove"}),
    "zypper": frozenset({"install", "in", "remove", "rm", "update", "up", "dist-upgrade", "dup", "patch"}),
    "apk": frozenset({"add", "del", "upgrade", "fix"}),
    "snap": frozenset({"install", "remove", "refresh", "revert"}),
    "flatpak": frozenset({"install", "uninstall", "update"}),
    "pip": frozenset({"install", "uninstall"}),
    "npm": frozenset({"install", "i", "uninstall", "remove", "rm", "un", "update", "upgrade", "ci", "link"}),
    "gem": frozenset({"install", "uninstall", "update"}),
    "conda": frozenset({"install", "remove", "uninstall", "update", "upgrade", "create"}),
    "brew": frozenset({"install", "uninstall", "remove", "rm", "upgrade", "reinstall"}),
    "cargo": frozenset({"install", "uninstall"}),
}
_PACKAGE_ALIASES = {"apt-get": "apt", "aptitude": "apt", "dnf": "yum", "microdnf": "yum", "pip3": "pip",
                    "pipx": "pip", "yarn": "npm", "pnpm": "npm", "mamba": "conda", "micromamba": "conda"}
_SYSTEMCTL_VERBS = frozenset({"start", "stop", "restart", "reload", "try-restart", "reload-or-restart",
                              "try-reload-or-restart", "enable", "disable", "reenable", "mask", "unmask", "kill",
                              "isolate", "daemon-reload", "daemon-reexec", "reboot", "poweroff", "halt", "suspend",
                              "hibernate", "edit", "set-property", "link", "preset", "preset-all", "revert",
                              "rescue", "emergency", "default", "kexec", "soft-reboot", "clean", "freeze"})
_SERVICE_VERBS = frozenset({"start", "stop", "restart", "reload", "force-reload", "try-restart", "condrestart"})
_POWER = frozenset({"reboot", "shutdown", "halt", "poweroff", "init", "telinit", "kill", "pkill", "killall",
                    "killall5", "rc-service", "sv", "initctl", "supervisorctl", "launchctl"})
_TO_ROOT = re.compile(r"(?:root|0)(?:[:.]\S*)?|\S*[:.](?:root|0)")  # an owner or group of root
_DELETERS = frozenset({"rm", "rmdir", "unlink", "shred", "srm", "wipefs", "truncate", "blkdiscard"})


@dataclass(frozen=True)
class Need:
    """Why a command needs a person's approval: a sentence and the rule that asked."""

    rule: str
    reason: str


@dataclass(frozen=True)
class Approval:
    """A person's answer, as recorded in the audit log and told to Claude when it is a no."""

    approved: bool
    how: Literal["once", "grant", "granted", "all", "refused", "unavailable", "timeout"]
    """``once`` this call; ``grant`` this exact command on this host for ``minutes``; ``granted``
    an earlier grant covered it; ``all`` the operator passed --no-approve; ``refused`` a person
    said no; ``unavailable`` nobody could be asked; ``timeout`` nobody answered in time."""
    by: str = ""
    """Who answered: the operator's name, or the MCP client's."""
    reason: str = ""
    """A refusal's reason, which Claude sees."""
    minutes: float = 0.0
    """For ``grant``: how long this exact command stays approved on this host."""


def is_production(host: Host) -> bool:
    """True when the host's labels say it is production."""
    return any(host.labels.get(key, "").strip().lower() in _PRODUCTION_VALUES for key in _PRODUCTION_KEYS)


def effective_rules(host: Host) -> Literal["never", "all"] | Sequence[ApproveRule]:
    """The host's approve setting, or the label-based default when it has none."""
    if host.approve is not None:
        return host.approve
    return PRODUCTION_DEFAULT if is_production(host) else "never"


def approval_needed(command: str, host: Host) -> Need | None:
    """Whether ``command`` needs a person's yes on ``host``, and why; None when it does not.

    A setting this function cannot read (a host changed with ``model_copy``, which does not
    validate) asks: a rule is never skipped because of its form."""
    rules = effective_rules(host)
    if rules == "never":
        return None
    if rules == "all":
        return Need("all", f"every command on {host.name} needs approval")
    if isinstance(rules, str) or not isinstance(rules, list | tuple):
        return Need("unreadable", f"the approve setting of {host.name} ({rules!r}) is not 'never', 'all' or a "
                                  "list of rules, so every command asks")
    read = [_rule(rule) for rule in rules]
    if None in read:
        return Need("unreadable", f"an approve rule of {host.name} is not a class name, {{regex: ...}} or "
                                  "{writes_outside: [...]}, so every command asks")
    rules = [rule for rule in read if rule is not None]
    for rule in rules:
        if isinstance(rule, RegexApproveRule):
            try:
                matched = _compiled(rule.regex).search(command)
            except PatternError as exc:
                return Need(f"regex: {rule.regex}", f"the approval rule {rule.regex!r} cannot be used ({exc}), "
                                                    "so every command asks")
            if matched:
                return Need(f"regex: {rule.regex}", f"the command matches the approval rule {rule.regex!r}")
    named = [r for r in rules if isinstance(r, str)]
    outside = [p for r in rules if isinstance(r, WritesOutsideRule) for p in r.writes_outside]
    writes_rule = any(isinstance(r, WritesOutsideRule) for r in rules)
    if not named and not writes_rule:
        return None
    return _read(command, frozenset(named), outside if writes_rule else None)


def _rule(rule: object) -> ApproveRule | None:
    """A rule in the form the validated Host holds, from that form or the file's; None for any other."""
    if isinstance(rule, str) and rule in CLASSES:
        return rule  # type: ignore[return-value]  # a class name, checked just above
    # A rule object's fields are checked too: model_copy can put anything in them.
    if isinstance(rule, RegexApproveRule):
        rule = {"regex": rule.regex}
    elif isinstance(rule, WritesOutsideRule):
        rule = {"writes_outside": rule.writes_outside}
    if isinstance(rule, dict) and len(rule) == 1:
        regex, paths = rule.get("regex"), rule.get("writes_outside")
        if isinstance(regex, str):
            return RegexApproveRule._trusted(regex=regex)
        if isinstance(paths, list | tuple) and paths and all(isinstance(p, str) and p.startswith("/") for p in paths):
            return WritesOutsideRule._trusted(writes_outside=list(paths))
    return None


@functools.lru_cache(maxsize=256)
def _compiled(regex: str) -> LinearPattern:
    """An approve rule's pattern on the linear-time engine, as deny and redact patterns run: the
    command text is Claude's, and a careless pattern must not freeze the client on it."""
    return compile_linear(regex, multiline=True)


def _read(command: str, classes: frozenset[str], allowed_paths: list[str] | None) -> Need | None:
    parsed = simple_commands(command)
    if parsed is None:
        return Need("unreadable", "the command could not be read, so what it would change cannot be told")
    need = _state_change(parsed.functions, parsed.data) or _assigns_in_text(command) or _ansi_c_data(command)
    if need is not None:
        return need
    if "deletions" in classes:
        emptied = [t for t in parsed.truncated if not t.startswith("/dev/")]
        if emptied:
            return Need("deletions", f"'>' onto {emptied[0]!r} with nothing written empties the file")
    queue = [words for words in parsed.commands]
    # Bounded in commands read, and in words queued and characters read again (a wrapper read two
    # ways queues a command more than once; eval of eval reads its text again), both linear in the
    # text's length. Past the bound the rest is unread, so it asks.
    reading = _Reading(list(parsed.redirects), 16 * len(command) + 4096, arithmetic_texts(command, True),
                       _integers(command), joins="(" in command)
    redirects = reading.redirects
    for _ in range(4 * len(command) + 16):
        if not queue:
            break
        command_words = queue.pop(0)
        if any(carries_substitution(w) for w in _data_words(command_words)):
            return _CARRIES
        assigned, words = _skip_assignments(command_words)
        need = _risky_assignment(assigned) or _values_assigned(command_words, reading)
        if need is not None:
            return need
        if not words:
            continue
        name, literal = words[0]
        if not literal:
            return Need("unknown-command", "a command name is only known after expansion, so what it runs "
                                           "cannot be told")
        base = name.rsplit("/", 1)[-1]
        args = [w for w, _ in words[1:]]
        need = _assigns(base, words[1:])
        if need is not None:
            return need
        assembled = assembles_substitution(base, args, reading.joins)
        if assembled is not None:  # printf -v x 'a[%c(rm F)]' '$' assembles 'a[$(rm F)]' from its pieces
            return _CARRIES if assembled == "carries" else _JOINED
        need = _classify(base, args, classes)
        if need is not None:
            return need
        why = lookup_change(base, args)
        if why is not None:
            return Need("lookup", why)
        if allowed_paths is not None:
            why = writes_outside(base, words[1:], allowed_paths)
            if why is not None:
                return Need("writes_outside", why)
        inner = _inner_command(base, words[1:], reading)
        if isinstance(inner, Need):
            return inner
        reading.budget -= sum(len(words) for words in inner)
        if reading.budget < 0:
            return Need("unreadable", "the command holds more commands than are read here")
        queue.extend(inner)
    if queue:
        return Need("unreadable", "the command holds more commands than are read here")
    need = _arithmetic_on_values(reading)
    if need is not None:
        return need
    if any(carries_substitution(target) for _, target, _ in redirects):
        return _CARRIES
    if allowed_paths is not None:
        for op, target, literal in redirects:
            if op in OUTPUT_REDIRECTS and not inside(target, literal, allowed_paths):
                return Need("writes_outside", f"it writes to {target!r}, outside {', '.join(allowed_paths)}")
    return None


_CARRIES = Need("substitution-data", "quoted text holds '$(' or '`': bash runs it if the value is ever used in "
                                    "arithmetic (an array subscript) or expanded as a prompt, so it may run later")

_JOINED = Need("substitution-data", "a '$' on its own is set or printed where a '(' follows in the text: joined, "
                                   "they make a command substitution that bash runs if the value is used in "
                                   "arithmetic, so it may run later")


def _state_change(functions: list[str], data: list[str]) -> Need | None:
    """A function definition (it may take any command's name), or data that may run later."""
    if functions:
        return Need("lookup", f"it defines the function {functions[0]!r}, which {LATER} (a function may take "
                              "the name of any command)")
    if any(carries_substitution(text) for text in data):
        return _CARRIES
    return None


def _data_words(words: list[tuple[str, bool]]) -> list[str]:
    """A command's words that may become shell data: all but an awk program's text, whose ``$(NF)``
    is awk's (awk can spell any text from escapes anyway, so skipping it hides nothing new)."""
    _, rest = _skip_assignments(words)
    if rest and rest[0][1] and rest[0][0].rsplit("/", 1)[-1] in _AWKS:
        start = len(words) - len(rest) + 1  # where awk's arguments begin
        skipped = {start + i for i in awk_programs([w for w, _ in rest[1:]]) or []}
        return [w for i, (w, _) in enumerate(words) if i not in skipped]
    return [w for w, _ in words]


@dataclass
class _Reading:
    """What reading one command collects across the texts it runs: their redirections, and what is
    left of the work allowed."""

    redirects: list[tuple[str, str, bool]]
    budget: int
    arithmetic: list[str] = field(default_factory=list)
    """The texts bash evaluates as arithmetic (``$((...))``, ``$[...]``, ``${x:OFFSET}``, ``-eq``...)."""
    integers: set[str] = field(default_factory=set)
    """Names declared ``-i``: a value assigned to one is evaluated as arithmetic."""
    joins: bool = False
    """Whether the text holds a '(' that a lone '$' could be joined to."""
    values: dict[str, list[tuple[str, bool]]] = field(default_factory=dict)
    """The values the text assigns to each name, and whether each is plain literal text."""


def _skip_assignments(words: list[tuple[str, bool]]) -> tuple[list[str], list[tuple[str, bool]]]:
    """The prefix assignments of a simple command, and the words after them and reserved words."""
    i, assigned = 0, []
    while i < len(words):
        if words[i][0] in {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}"}:
            i += 1
            continue
        match = _ASSIGN.match(words[i][0])
        if match is None:
            break
        assigned.append(words[i][0])
        i += 1
    return assigned, words[i:]


def _risky_assignment(assigned: list[str]) -> Need | None:
    """Whether setting these (``NAME`` or ``NAME=value`` words) may change what runs."""
    for word in assigned:
        named = re.match(r"[A-Za-z_][A-Za-z0-9_]*", word)
        name, equals, value = named.group(0) if named else word, "=" in word, word.split("=", 1)[-1]
        if name in LOOKUP_VARIABLES:
            return Need("lookup", f"it sets {name}, which {LATER}")
        if equals and value in ("", "cat") and name.endswith("PAGER"):
            continue  # no pager, or cat: the commonest way to keep output plain, and it runs nothing else
        if _CODE_VARIABLES.fullmatch(name):
            return Need("environment", f"it sets {name}, which changes what programs load or run (or how the "
                                       "shell reads later commands), so what runs cannot be told from the text")
    return None


def _assigns(base: str, words: list[tuple[str, bool]]) -> Need | None:
    """Whether a command that assigns variables by name (a ``for``/``select`` loop, ``read``,
    ``printf -v``, ``mapfile``, ``getopts``, ``wait -p``, ``unset``, ``let``) sets one that changes
    what runs, or one whose name is known only after expansion."""
    if base in _DECLARERS or base == "env":
        return None  # read with their values in _inner_command
    return _assignments_need(command_assigned(base, words))


def _assignments_need(found: list[Assignment]) -> Need | None:
    """Whether these assignments set a variable that changes what runs (``PATH=5`` in arithmetic
    makes a directory named 5 the search path), or one named by an expansion."""
    for assignment in found:
        if not assignment.name:
            return Need("environment", f"{assignment.form} sets a variable whose name is known only after "
                                       "expansion, so what it changes cannot be told")
    return _risky_assignment([assignment.name for assignment in found])


def _arithmetic_assigns(text: str) -> Need | None:
    """Whether arithmetic text assigns a variable that changes what runs, or one named by an expansion."""
    return _assignments_need([Assignment(name, "arithmetic") for name in arithmetic_assigned(text)])


def _assigns_in_text(text: str) -> Need | None:
    """Assignments the words do not show: ``${NAME:=word}``, ``{NAME}>file``, and arithmetic."""
    return _assignments_need(text_assigned(text))


def _integers(text: str) -> set[str]:
    """The names a ``declare -i`` (``typeset``, ``local``, ``export``, ``readonly``) in the text makes
    integers: bash evaluates every value later assigned to one as arithmetic."""
    names: set[str] = set()
    for match in DECLARING.finditer(text):
        if match.group(0).startswith("env"):
            continue
        words = match.group(1).split()
        if any(re.fullmatch(r"-[a-zA-Z]*i[a-zA-Z]*", w) for w in words):
            names.update(m.group(1) for w in words if (m := re.match(r"[\"']?(" + NAME + ")", w)))
    return names


def _values_assigned(words: list[tuple[str, bool]], reading: _Reading) -> Need | None:
    """Record the values a command assigns (its prefix ``NAME=value`` words, a declarer's
    operands); a value assigned to an integer variable (``declare -i y='PATH=5'``) is arithmetic."""
    _, rest = _skip_assignments(words)
    pairs = [(w, lit) for w, lit in words[:len(words) - len(rest)] if _ASSIGN.match(w)]
    base = rest[0][0].rsplit("/", 1)[-1] if rest and rest[0][1] else ""
    integer = False
    if base in _DECLARERS:
        pairs += [(w, lit) for w, lit in rest[1:] if _ASSIGN.match(w)]
        integer = any(re.fullmatch(r"-[a-zA-Z]*i[a-zA-Z]*", w) for w, _ in rest[1:])
    elif base == "printf":
        for i, (word, _) in enumerate(rest[1:-1], start=1):
            if word.startswith("-v") and re.fullmatch(NAME, word[2:] or rest[i + 1][0]):
                name = word[2:] or rest[i + 1][0]
                tail = [w for w, _ in rest[i + (1 if word[2:] else 2):]]
                # What printf stores is assembled from its format and arguments: with a directive
                # or an escape, it counts as built at run time; its pieces are read all the same.
                value = decode_ansi_c(" ".join(tail))
                built = any("%" in w or "\\" in w for w in tail) or not all(lit for _, lit in rest)
                pairs.append((f"{name}={value}", not built))
                break
    elif base in ("for", "select") and len(rest) > 2 and rest[2][0] == "in":
        pairs += [(f"{rest[1][0]}={w}", lit) for w, lit in rest[3:] if w not in (";", "do")]
    for word, literal in pairs:
        match = _ASSIGN.match(word)
        assert match is not None
        name, value = match.group(1), word[match.end():]
        reading.values.setdefault(name, []).append((value, literal))
        if reading.joins and LONE_DOLLAR.search(value):
            return _JOINED  # d=$'\x24'; x="a[${d}(rm F)]" splices '$' before '('
        if integer or name in reading.integers:
            need = _arithmetic_assigns(value)
            if need is not None:
                return need
    return None


def _arithmetic_on_values(reading: _Reading) -> Need | None:
    """Whether arithmetic names a variable whose value, set in the same text, assigns in turn when
    bash evaluates it (``x=PATH=5; echo $((x))``): a value in arithmetic is arithmetic too."""
    todo = [name for text in reading.arithmetic for name in re.findall(NAME, text)]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for value, literal in reading.values.get(name, []):
            if not literal and "=" in value:
                return Need("environment", f"arithmetic evaluates {name}, whose value is built at run time and "
                                           "may assign a variable, so what it changes cannot be told")
            need = _arithmetic_assigns(value)
            if need is not None:
                return need
            todo += re.findall(NAME, value)
    return None


def _ansi_c_data(text: str) -> Need | None:
    """A ``$'...'`` anywhere in the text (inside ``${x:-$'...'}`` too) that decodes to ``$(`` or a
    backquote."""
    for match in _ANSI_C.finditer(text):
        if carries_substitution(decode_ansi_c(match.group(1))):
            return _CARRIES
    return None


def _python_module(base: str, args: list[str]) -> tuple[str, list[str]] | None:
    """``python3 -m pip install x`` as ``("pip", ["install", "x"])``; None for other forms."""
    if not re.fullmatch(r"python[0-9.]*|pypy[0-9.]*", base):
        return None
    for i, arg in enumerate(args):
        if arg == "-m" and i + 1 < len(args):
            return args[i + 1], args[i + 2:]
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:], args[i + 1:]
        if not arg.startswith("-"):
            return None
    return None


def _classify(base: str, args: list[str], classes: frozenset[str]) -> Need | None:
    if "privilege" in classes:
        if base in _ESCALATE or base in _ACCOUNTS:
            return Need("privilege", f"{base!r} runs with other privileges or changes accounts")
        if base in ("chown", "chgrp") and any(_TO_ROOT.fullmatch(a) or a.startswith("--reference") for a in args):
            return Need("privilege", f"{base} gives a file to root")
        if base == "chmod" and any(a.startswith("--reference") for a in args):
            return Need("privilege", "chmod --reference copies a mode that may carry a setuid/setgid bit")
        if base == "chmod" and any(mode_sets_special(a) for a in args if not a.startswith("--")):
            return Need("privilege", "chmod sets a setuid/setgid bit")
        modes = [m for i, a in enumerate(args) for m in ([args[i + 1]] if a == "-m" and i + 1 < len(args) else
                                                          [a[7:]] if a.startswith("--mode=") else
                                                          [a[2:]] if a.startswith("-m") and len(a) > 2 else [])]
        if base == "install" and any(mode_sets_special(m) for m in modes):
            return Need("privilege", "install gives a file a setuid/setgid bit")
    if "packages" in classes:
        module = _python_module(base, args)
        if module is not None and module[0] in _PACKAGE_MODULES:
            if module[0] == "ensurepip":
                return Need("packages", f"{base} -m ensurepip installs pip")
            base, args = "pip", module[1]
        if base == "uv" and args[:1] == ["pip"]:
            base, args = "pip", args[1:]
        if re.fullmatch(r"pip[0-9.]+", base):
            base = "pip"
        family = _PACKAGE_ALIASES.get(base, base)
        verbs = _PACKAGE_VERBS.get(family)
        if verbs is not None and any(a in verbs for a in args if not a.startswith("-")):
            return Need("packages", f"{base!r} changes installed packages")
        if base == "dpkg" and any(a in {"-i", "-r", "-P", "--install", "--remove", "--purge", "--configure",
                                        "--unpack"} for a in args):
            return Need("packages", "dpkg changes installed packages")
        if base == "rpm" and any(re.fullmatch(r"-[a-zA-Z]*[iUeF][a-zA-Z]*|--(install|upgrade|erase|freshen)", a)
                                 for a in args):
            return Need("packages", "rpm changes installed packages")
        if base == "pacman" and any(re.fullmatch(r"-[a-zA-Z]*[SRU][a-zA-Z]*", a) for a in args):
            return Need("packages", "pacman changes installed packages")
    if "services" in classes:
        if base == "systemctl" and any(a in _SYSTEMCTL_VERBS for a in args if not a.startswith("-")):
            return Need("services", f"systemctl {next(a for a in args if a in _SYSTEMCTL_VERBS)} changes services")
        if base == "service" and any(a in _SERVICE_VERBS for a in args[1:]):
            return Need("services", "service changes a service's state")
        if base in _POWER:
            return Need("services", f"{base!r} stops processes, services or the machine")
    if "deletions" in classes:
        if base in _DELETERS or base.startswith("mkfs"):
            return Need("deletions", f"{base!r} deletes or overwrites data")
        if base == "dd" and any(a.startswith("of=") for a in args):
            return Need("deletions", "dd writes over a file or device")
        if base == "find" and "-delete" in args:
            return Need("deletions", "find -delete deletes files")
        if base == "git" and "clean" in args:
            return Need("deletions", "git clean deletes untracked files")
        if base == "rsync" and any(a.startswith("--delete") for a in args):
            return Need("deletions", "rsync --delete deletes files")
        if base == "mv":
            # mv removes its sources from where they were and replaces what the target held.
            return Need("deletions", "mv removes a file from where it was and replaces what its target held")
        if base == "fallocate" and any(a in ("--punch-hole", "--collapse-range", "--zero-range")
                                       or re.fullmatch(r"-[a-zA-Z]*[pcz][a-zA-Z]*", a) for a in args):
            return Need("deletions", "fallocate punches, collapses or zeroes a range, deleting the data in it")
    return None


def _inner_command(base: str, words: list[tuple[str, bool]],
                   reading: _Reading) -> list[list[tuple[str, bool]]] | Need:
    """Commands a wrapper runs: ``sudo rm x`` also runs ``rm x``; ``bash -c 'text'`` runs ``text``."""
    words = split_glued(base, words)
    if base in _SHELLS:
        text = _shell_text(words)
        if text is None:
            # No -c: the shell reads commands from a script file or from its input, neither of which
            # is text here to read.
            return Need("unreadable", f"{base} runs commands from a script or its input, which the text does "
                                      "not show")
        return _read_text(base, reading, text)
    if base == "script":
        if not any(w in TEXT_OPTIONS["script"] for w, _ in words):
            return Need("unreadable", "script runs a shell that reads commands from its input, which the text "
                                      "does not show")
        return _wrapped(base, words, reading)
    values = [w for w, _ in words]
    if base == "eval":
        if not all(literal for _, literal in words):
            return Need("unknown-command", "eval runs text known only after expansion")
        operands = values[1:] if values[:1] == ["--"] else values  # eval, as a builtin, ends options at --
        return _read_text("eval", reading, (" ".join(operands), True))
    if base in ("source", "."):
        if values in (["/etc/os-release"], ["/usr/lib/os-release"], ["/etc/lsb-release"]) and words[0][1]:
            return []  # the system's identity: assignments of plain values, owned by root
        return Need("unreadable", f"{base} runs the commands of a script ({' '.join(values)!r}), which the text "
                                  "does not show")
    if base in ("at", "batch") and not any(re.fullmatch(r"-[a-zA-Z]*[lrdc][a-zA-Z]*", w) for w in values):
        return Need("unreadable", f"{base} schedules commands read from its input or a file, which the text "
                                  "does not show")
    if base == "crontab" and not any(re.fullmatch(r"-[a-zA-Z]*l[a-zA-Z]*", w) for w in values):
        return Need("unreadable", "crontab installs or changes commands that run later, which the text does not show")
    if base == "enable" and any(re.fullmatch(r"-[a-z]*f", w) for w in values):
        return Need("unreadable", "enable -f loads a shared object into the shell")
    if base == "trap":
        operands = values[1:] if values[:1] == ["--"] else values
        if len(operands) >= 2 and not operands[0].startswith("-") and operands[0]:
            return _read_text("trap", reading, (operands[0], words[values.index(operands[0])][1]))
        return []
    if base == "alias":
        inner: list[list[tuple[str, bool]]] = []
        for word, literal in words:
            if "=" in word:
                read = _read_text("alias", reading, (word.split("=", 1)[1], literal))
                if isinstance(read, Need):
                    return read
                inner += read
        return inner
    if base in _DECLARERS or base == "env":
        need = _risky_assignment(declared(base, values))
        if need is not None or base in _DECLARERS:
            return need or []
    options = text_options(base, words)
    for letter, value in options:
        if letter == "F":
            return Need("unreadable", f"{base} -F runs a shell function, whose body the text does not show")
        read = _read_text(f"{base} -{letter}", reading, value)
        if isinstance(read, Need) or read:
            return read
    if base in NAMERS:
        return []
    if base == "sed":
        runs, _ = sed_effects(values)
        return Need("unreadable", runs) if runs else []
    if base == "git":
        why = git_runs(values) or _git_config_runs(values)
        return Need("unreadable", why) if why else []
    if base == "find":
        found: list[list[tuple[str, bool]]] = []
        for i, word in enumerate(values):
            if word in ("-exec", "-execdir", "-ok", "-okdir"):
                end = next((j for j in range(i + 1, len(values)) if values[j] in (";", "+")), len(values))
                found.append(list(words[i + 1:end]))
        return found
    if base in _AWKS:
        why = awk_runs(base, values)
        return Need("unreadable", why) if why else []
    why = _runs_given_command(base, values)
    if why is not None:
        return Need("unreadable", why)
    if base == "rsync":
        return _rsync_shells(words, reading)
    why = inline_program(base, values)
    if why is not None:
        return Need("unreadable", f"{why}, whose effects the text does not show")
    if base in _WRAPPERS or base in _ESCALATE:
        return _wrapped(base, words, reading)
    return []


def _clusters(words: list[str], with_value: str) -> list[tuple[str, str]]:
    """Short options of ``words`` (up to ``--``) as (letter, value), reading a cluster as getopt
    does: a letter in ``with_value`` takes the rest of its word or the next word."""
    found: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            break
        if word.startswith("-") and not word.startswith("--") and len(word) > 1:
            for j, letter in enumerate(word[1:], start=1):
                if letter in with_value:
                    value = word[j + 1:] or (words[i + 1] if i + 1 < len(words) else "")
                    i += 0 if word[j + 1:] else 1
                    found.append((letter, value))
                    break
                found.append((letter, ""))
        i += 1
    return found


def _long(words: list[str], stems: tuple[str, ...]) -> str | None:
    """The first long option (``--name`` or ``--name=value``, up to ``--``) whose name starts with one of
    ``stems``: GNU programs accept any unambiguous abbreviation, so a stem is the shortest one."""
    for word in words:
        if word == "--":
            return None
        if word.startswith("--") and word.split("=", 1)[0].startswith(stems):
            return word.split("=", 1)[0]
    return None


def _runs_given_command(base: str, words: list[str]) -> str | None:
    """Why a program runs a command (or loads code) named in its options or its input, which is not
    read here; None when none of its well-known ways to do so is used."""
    if base in _SSH_VALUES:
        for letter, value in _clusters(words, _SSH_VALUES[base]):
            key = re.split(r"[\s=]", value.strip(), maxsplit=1)[0].lower()
            if letter == "o" and key in _SSH_RUNNERS:
                return f"{base} -o {key} runs a local command (or reads settings that may)"
            if letter == "F" and value not in ("none", "/dev/null"):
                return f"{base} -F reads a configuration file that may run local commands (ProxyCommand, Match exec)"
            if letter in _SSH_PROGRAMS.get(base, ""):
                return f"{base} -{letter} runs a program (or loads a library) named in its options"
        return None
    if base == "zip" and any(w.startswith(("-TT", "--unzip-command")) for w in words):
        return "zip -TT/--unzip-command runs a command to test the archive"
    if base == "tar":
        old_style = words[:1] if words and not words[0].startswith("-") else []
        letters = [letter for letter, _ in _clusters(words, "bCfFgHIKLNTVX")] + list("".join(old_style))
        option = _long(words, ("--to-c", "--use-", "--checkpoint-", "--inf", "--new-", "--rs", "--rm"))
        if option or "I" in letters or "F" in letters:
            return f"tar {option or '-I/-F'} runs a command given in its options"
    if base == "sort" and _long(words, ("--com",)):
        return "sort --compress-program runs a program"
    if base in ("diff3", "sdiff") and _long(words, ("--diff-p",)):
        return f"{base} --diff-program runs a program"
    if base == "man" and (_long(words, ("--pa", "--htm")) or
                          any(letter in "PH" for letter, _ in _clusters(words, "CMmLpPrSeEHR"))):
        return "man -P/-H runs a pager or browser named in its options"
    if base == "wget" and _long(words, ("--use-a",)):
        return "wget --use-askpass runs a program"
    if base == "rpm" and _long(words, ("--pipe",)):
        return "rpm --pipe runs a command"
    if base == "dpkg" and _long(words, ("--pre-i", "--post-i")):
        return "dpkg --pre-invoke/--post-invoke runs a command"
    if base in ("apt", "apt-get", "apt-cache", "aptitude") and any(
            (letter == "o" and re.search(r"invoke|install-pkgs", value, re.IGNORECASE)) or letter == "c"
            for letter, value in _clusters(words, "cot")):
        return f"{base} -o ...Invoke/-c sets a command to run (or reads settings that may)"
    if base in ("ed", "ex", "vi", "vim", "nvim", "view", "vimdiff", "rvim"):
        return f"{base} reads editor commands from its input or options, which can run shell commands"
    if base == "sqlite3" and (any(w.startswith(".") or w in ("-cmd", "-init") for w in words)
                              or "load_extension" in " ".join(words).lower()
                              or len([w for w in words if not w.startswith("-")]) < 2):
        return "sqlite3 runs dot commands ('.shell', '.system', '.output |...') or reads them from its input"
    return None


def _git_config_runs(words: list[str]) -> str | None:
    """Why ``git config`` sets a key that makes a later git command run something, or None."""
    if "config" not in words:
        return None
    rest = words[words.index("config") + 1:]
    if rest[:1] and rest[0] in ("set", "edit"):
        rest = rest[1:] if rest[0] == "set" else ["-e"]
    if any(w in ("-e", "--edit") for w in rest):
        return "git config --edit opens an editor on the configuration"
    operands = [w for w in rest if not w.startswith("-")]
    if len(operands) >= 2 and _GIT_RUNNING_KEYS.fullmatch(operands[0]):
        return f"git config {operands[0]} sets a command (or a file of settings) that later git commands run"
    return None


def _rsync_shells(words: list[tuple[str, bool]], reading: _Reading) -> list[list[tuple[str, bool]]] | Need:
    """The remote shell ``rsync -e``/``--rsh`` runs (and ``--rsync-path``), read as commands here."""
    values = [w for w, _ in words]
    texts: list[tuple[str, bool]] = []
    for i, (word, literal) in enumerate(words):
        if word == "--":
            break
        if word in ("--rsh", "--rsync-path") and i + 1 < len(words):
            texts.append(words[i + 1])
        elif word.startswith(("--rsh=", "--rsync-path=")):
            texts.append((word.split("=", 1)[1], literal))
    for letter, value in _clusters(values, "BefMT@"):
        if letter == "e":
            texts.append((value, all(lit for _, lit in words)))
    found: list[list[tuple[str, bool]]] = []
    for text in texts:
        read = _read_text("rsync -e", reading, text)
        if isinstance(read, Need):
            return read
        found += read
    return found


def _shell_text(words: list[tuple[str, bool]]) -> tuple[str, bool] | None:
    """The text ``bash -c`` runs: its first operand after the options (``-xc``, ``-o NAME``,
    ``--``, ``--rcfile FILE``), as bash reads them; None without ``-c`` (a script or the input)."""
    command, i = False, 0
    while i < len(words):
        word = words[i][0]
        if word == "--":
            i += 1
            break
        if word in ("--rcfile", "--init-file"):
            i += 2
        elif word.startswith("--") or word in ("-", "+"):
            i += 1
        elif word[:1] in "-+" and len(word) > 1:
            command = command or (word[0] == "-" and "c" in word[1:])
            i += 1 + sum(word[1:].count(letter) for letter in "oO")  # -o NAME, -O NAME take the next word
        else:
            break
    if not command:
        return None
    return words[i] if i < len(words) else ("", True)


def _wrapped(base: str, words: list[tuple[str, bool]],
             reading: _Reading) -> list[list[tuple[str, bool]]] | Need:
    """The command a wrapper runs: its words after the wrapper's options, assignments and operands.

    An option the table does not know may take a value, so the word after it is read both ways:
    as that value (the command starts after it) and as the command's name."""
    texts = TEXT_OPTIONS.get(base, ())
    from_text: list[list[tuple[str, bool]]] = []
    for i, (word, literal) in enumerate(words):
        if word in texts and i + 1 < len(words):
            text = _read_text(f"{base} {word}", reading, words[i + 1])
            if isinstance(text, Need):
                return text
            # Words after the text are read as a command too, whatever the wrapper makes of them,
            # and so is what follows any options among them (``-c x --opt y rm F``); and so are the
            # words as the wrapper's own command (``env rm -S x F`` runs rm).
            rest = words[i + 2:]
            starts, _ = wrapper_starts("", [w for w, _ in rest])
            if starts is None:
                return Need("unreadable", f"{base}'s options cannot be told apart from the command it runs")
            from_text = [*text, *([rest] if rest else []), *(rest[j:] for j in starts if j)]
            break
        if any(word.startswith(f + "=") for f in texts if f.startswith("--")):
            text = _read_text(base, reading, (word.split("=", 1)[1], literal))
            if isinstance(text, Need):
                return text
            from_text = text
            break
    if base not in _WRAPPERS and base not in _ESCALATE:
        return from_text  # script: its operands are its log files, not a command
    starts, assigned = wrapper_starts(base, [w for w, _ in words])
    need = _risky_assignment(assigned)
    if need is not None:
        return need
    if starts is None:
        return Need("unreadable", f"{base}'s options cannot be told apart from the command it runs")
    found: list[list[tuple[str, bool]]] = from_text
    for i in starts:
        found.append(words[i:])
        # watch (always) and sudo -s, su, ... (when the name is not a plain word) run the words
        # as one shell text: read that too.
        if base == "watch" or not re.fullmatch(r"[\w./+:@%,=~-]*", words[i][0]):
            text = _read_text(base, reading, (" ".join(w for w, _ in words[i:]), all(lit for _, lit in words[i:])))
            if isinstance(text, Need):
                return text
            found += text
    return found


def _read_text(what: str, reading: _Reading,
               word: tuple[str, bool]) -> list[list[tuple[str, bool]]] | Need:
    text, literal = word
    reading.budget -= len(text)
    if reading.budget < 0:
        return Need("unreadable", "the command holds more commands than are read here")
    if not literal:
        return Need("unknown-command", f"{what} runs text known only after expansion")
    inner = simple_commands(text)
    if inner is None:
        return Need("unreadable", f"the text given to {what} could not be read")
    need = _state_change(inner.functions, inner.data) or _assigns_in_text(text) or _ansi_c_data(text)
    if need is not None:
        return need
    reading.redirects += inner.redirects
    reading.arithmetic += arithmetic_texts(text, True)
    reading.integers |= _integers(text)
    return inner.commands


@dataclass
class Grants:
    """Approvals of one exact command on one host for a while ("approve this for N minutes")."""

    clock: Callable[[], float] = time.monotonic
    _until: dict[tuple[str, str], float] = field(default_factory=dict)

    def add(self, host: str, command: str, minutes: float) -> None:
        self._until[(host, command)] = self.clock() + minutes * 60.0

    def covers(self, host: str, command: str) -> bool:
        until = self._until.get((host, command))
        if until is None:
            return False
        if self.clock() >= until:
            del self._until[(host, command)]
            return False
        return True
