"""Which commands need a person's yes before they are sent: pure functions, no I/O.

A host's ``approve`` setting is ``never``, ``all``, or a list of rules: named classes
(``privilege``, ``packages``, ``services``, ``deletions``), ``{regex: ...}`` and
``{writes_outside: [paths]}``. With no setting, hosts labelled as production
(``env``/``environment``/``stage``/``tier`` = ``prod`` or ``production``) ask for every named
class, and the rest ask for nothing.

Like the command policy this is a guard rail over the command's text: it reads what the text
would run (through wrappers such as ``sudo``, ``env``, ``nohup``, ``bash -c``), and when it cannot
tell (an unreadable command, a command name known only after expansion) it asks. It cannot see
what a script or an allowed program does once it runs. Asking, and recording the answer, is the
caller's job: this module only decides whether to ask, and remembers time-limited grants.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

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
    "privilege": "privilege escalation: sudo, su, doas, pkexec, runuser, setuid/setcap bits, user, group and "
                 "sudoers changes",
    "packages": "package changes: apt/apt-get/dpkg, yum/dnf/rpm, zypper, apk, pacman, snap, pip and npm "
                "installs, removals and upgrades",
    "services": "service and process changes: systemctl start/stop/restart/enable/..., service, reboot, "
                "shutdown, kill, pkill, killall",
    "deletions": "deletions: rm, rmdir, unlink, shred, truncate, wipefs, mkfs, dd of=, find -delete, "
                 "git clean",
}
PRODUCTION_DEFAULT: tuple[ApproveRule, ...] = ("privilege", "packages", "services", "deletions")

# Programs that run the command given in their arguments: the rest is read as a command of its own.
_WRAPPERS = frozenset({"env", "nohup", "nice", "ionice", "timeout", "stdbuf", "time", "command", "exec",
                       "builtin", "xargs", "setsid", "chrt", "taskset", "flock", "watch", "unbuffer",
                       "busybox", "coproc", "chroot", "nsenter", "unshare", "firejail", "systemd-run",
                       "faketime", "proxychains", "torsocks"})
_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "ash", "fish", "csh", "tcsh"})
# Interpreters whose program may be given inline (None: always, as awk's first operand).
_INLINE: dict[str, tuple[str, ...] | None] = {
    "awk": None, "gawk": None, "mawk": None, "nawk": None, "perl": ("-e", "-E"), "ruby": ("-e",),
    "python": ("-c",), "python3": ("-c",), "node": ("-e", "--eval", "-p"), "php": ("-r",), "lua": ("-e",),
}
# Wrappers whose first operand is theirs (a lock file, a directory), not the command's name.
_OWN_OPERAND = frozenset({"flock", "chroot"})
_ESCALATE = frozenset({"sudo", "su", "doas", "pkexec", "runuser", "setpriv", "sudoedit", "machinectl"})
_ACCOUNTS = frozenset({"useradd", "userdel", "usermod", "adduser", "deluser", "groupadd", "groupdel",
                       "groupmod", "gpasswd", "passwd", "chpasswd", "visudo", "setcap", "newgrp"})
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
}
_PACKAGE_ALIASES = {"apt-get": "apt", "aptitude": "apt", "dnf": "yum", "microdnf": "yum", "pip3": "pip",
                    "pipx": "pip", "yarn": "npm", "pnpm": "npm"}
_SYSTEMCTL_VERBS = frozenset({"start", "stop", "restart", "reload", "try-restart", "reload-or-restart",
                              "try-reload-or-restart", "enable", "disable", "reenable", "mask", "unmask", "kill",
                              "isolate", "daemon-reload", "daemon-reexec", "reboot", "poweroff", "halt", "suspend",
                              "hibernate", "edit", "set-property", "link", "preset", "preset-all", "revert",
                              "rescue", "emergency", "default", "kexec", "soft-reboot", "clean", "freeze"})
_SERVICE_VERBS = frozenset({"start", "stop", "restart", "reload", "force-reload", "try-restart", "condrestart"})
_POWER = frozenset({"reboot", "shutdown", "halt", "poweroff", "init", "telinit", "kill", "pkill", "killall",
                    "killall5", "rc-service", "sv", "initctl", "supervisorctl", "launchctl"})
_DELETERS = frozenset({"rm", "rmdir", "unlink", "shred", "srm", "wipefs", "truncate", "blkdiscard"})
_WRITERS = frozenset({"cp", "mv", "install", "ln", "rsync", "touch", "mkdir", "tee", "truncate", "chmod", "chown",
                      "chgrp", "sed", "patch", "tar", "unzip", "rm", "rmdir", "unlink", "shred", "dd"})
_OUTPUT_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})


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
    """Whether ``command`` needs a person's yes on ``host``, and why; None when it does not."""
    rules = effective_rules(host)
    if rules == "never":
        return None
    if rules == "all":
        return Need("all", f"every command on {host.name} needs approval")
    assert not isinstance(rules, str)
    for rule in rules:
        if isinstance(rule, RegexApproveRule) and re.search(rule.regex, command, re.MULTILINE):
            return Need(f"regex: {rule.regex}", f"the command matches the approval rule {rule.regex!r}")
    named = [r for r in rules if isinstance(r, str)]
    outside = [p for r in rules if isinstance(r, WritesOutsideRule) for p in r.writes_outside]
    writes_rule = any(isinstance(r, WritesOutsideRule) for r in rules)
    if not named and not writes_rule:
        return None
    return _read(command, frozenset(named), outside if writes_rule else None)


def _read(command: str, classes: frozenset[str], allowed_paths: list[str] | None) -> Need | None:
    parsed = simple_commands(command)
    if parsed is None:
        return Need("unreadable", "the command could not be read, so what it would change cannot be told")
    queue = [words for words in parsed.commands]
    for _ in range(256):  # bounded: wrappers and `bash -c` add at most a few commands each
        if not queue:
            break
        words = _skip_assignments(queue.pop(0))
        if not words:
            continue
        name, literal = words[0]
        if not literal:
            return Need("unknown-command", "a command name is only known after expansion, so what it runs "
                                           "cannot be told")
        base = name.rsplit("/", 1)[-1]
        args = [w for w, _ in words[1:]]
        need = _classify(base, args, classes)
        if need is not None:
            return need
        if allowed_paths is not None:
            need = _writes(base, words[1:], allowed_paths)
            if need is not None:
                return need
        inner = _inner_command(base, words[1:], command)
        if isinstance(inner, Need):
            return inner
        queue.extend(inner)
    if allowed_paths is not None:
        for op, target, literal in parsed.redirects:
            if op in _OUTPUT_REDIRECTS and not _inside(target, literal, allowed_paths):
                return Need("writes_outside", f"it writes to {target!r}, outside {', '.join(allowed_paths)}")
    return None


def _skip_assignments(words: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    i = 0
    while i < len(words) and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[i][0]):
        i += 1
    while i < len(words) and words[i][0] in {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}"}:
        i += 1
    return words[i:]


def _classify(base: str, args: list[str], classes: frozenset[str]) -> Need | None:
    if "privilege" in classes:
        if base in _ESCALATE or base in _ACCOUNTS:
            return Need("privilege", f"{base!r} runs with other privileges or changes accounts")
        if base == "chmod" and any(re.fullmatch(r"[0-7]*[4-7][0-7]{3}|.*[+=][rwxXt]*s.*", a) for a in args):
            return Need("privilege", "chmod sets a setuid/setgid bit")
        modes = [m for i, a in enumerate(args) for m in ([args[i + 1]] if a == "-m" and i + 1 < len(args) else
                                                          [a[7:]] if a.startswith("--mode=") else
                                                          [a[2:]] if a.startswith("-m") and len(a) > 2 else [])]
        if base == "install" and any(re.fullmatch(r"[0-7]*[4-7][0-7]{3}|.*[+=][rwxXt]*s.*", m) for m in modes):
            return Need("privilege", "install gives a file a setuid/setgid bit")
    if "packages" in classes:
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
        if base == "find" and ("-delete" in args or any(a in {"-exec", "-execdir", "-ok"} for a in args)):
            return Need("deletions", "find with -delete or -exec can delete files")
        if base == "git" and "clean" in args:
            return Need("deletions", "git clean deletes untracked files")
        if base == "rsync" and any(a.startswith("--delete") for a in args):
            return Need("deletions", "rsync --delete deletes files")
        if base == "mv" and args and args[-1] == "/dev/null":
            return Need("deletions", "mv onto /dev/null throws a file away")
    return None


def _writes(base: str, words: list[tuple[str, bool]], allowed: list[str]) -> Need | None:
    operands = [(w, lit) for w, lit in words if not w.startswith("-")]
    named = _option_targets(base, words)
    if named is not None:
        targets = named
    elif base not in _WRITERS:
        return None
    elif base == "dd":
        targets = [(w[3:], lit) for w, lit in words if w.startswith("of=")]
    elif base == "sed":
        targets = operands[1:] if any(w.startswith("-i") or w == "--in-place" for w, _ in words) else []
    elif base in {"cp", "mv", "install", "ln", "rsync"}:
        targets = operands[-1:]
    elif base in {"chmod", "chown", "chgrp"}:
        targets = operands[1:]
    elif base in {"tar", "unzip"}:
        targets = []  # where an archive writes is decided by its content and -C: asked about as a whole
        if operands:
            return Need("writes_outside", f"{base!r} extracts files where the archive says")
    else:
        targets = operands
    for target, literal in targets:
        if not _inside(target, literal, allowed):
            return Need("writes_outside", f"{base} writes to {target!r}, outside {', '.join(allowed)}")
    return None


def _option_targets(base: str, words: list[tuple[str, bool]]) -> list[tuple[str, bool]] | None:
    """Where programs that write to a file named by an option (or to the current directory) write;
    None for programs that are not such writers."""
    values = [w for w, _ in words]
    if base in ("curl", "wget", "sort"):
        flags = {"curl": ("-o", "--output"), "wget": ("-O", "--output-document"), "sort": ("-o", "--output")}[base]
        cluster = re.compile(r"-[A-Za-z]*" + flags[0][1])  # -so, -sSLo: the last short flag takes the value
        found = [words[i + 1] for i, w in enumerate(values[:-1]) if w in flags or cluster.fullmatch(w)]
        found += [(w.split("=", 1)[1], lit) for w, lit in words if any(w.startswith(f + "=") for f in flags)]
        if base == "curl" and any(w in ("-O", "--remote-name", "-J") for w in values):
            found.append((".", True))  # into the current directory
        if base == "wget" and not found and any(not w.startswith("-") for w in values):
            found.append((".", True))
        return found
    if base == "git" and values and values[0] in ("init", "clone"):
        operands = [(w, lit) for w, lit in words[1:] if not w.startswith("-")]
        return operands[-1:] if operands and (values[0] == "init" or len(operands) > 1) else [(".", True)]
    return None


def _inside(target: str, literal: bool, allowed: list[str]) -> bool:
    if target in {"/dev/null", "/dev/stdout", "/dev/stderr"} or re.fullmatch(r"[0-9]+|-", target):
        return True
    if not literal or not target.startswith("/") or "/../" in f"{target}/":
        return False  # a relative or expanded path: where it lands depends on the shell's state
    return any(target == p.rstrip("/") or target.startswith(p.rstrip("/") + "/") for p in allowed)


def _inner_command(base: str, words: list[tuple[str, bool]], command: str) -> list[list[tuple[str, bool]]] | Need:
    """Commands a wrapper runs: ``sudo rm x`` also runs ``rm x``; ``bash -c 'text'`` runs ``text``."""
    if base in _SHELLS or (base == "script" and any(w in ("-c", "--command") or re.fullmatch(r"-[a-z]*c", w)
                                                     for w, _ in words)):
        for i, (word, _) in enumerate(words):
            if (word in ("-c", "--command") or re.fullmatch(r"-[a-z]*c", word)) and i + 1 < len(words):
                return _read_text(base, words[i + 1])
        if base == "script":
            return []
        # No -c: the shell reads commands from a script file or from its input, neither of which
        # is text here to read.
        return Need("unreadable", f"{base} runs commands from a script or its input, which the text does not show")
    if base in _INLINE:
        flags = _INLINE[base]
        if flags is None:
            # awk: its program reads unless it can write, pipe or run something (or comes from a file)
            program = next((w for w, _ in words if not w.startswith("-")), "")
            if any(w == "-f" or w.startswith("--file") for w, _ in words) or re.search(
                    r"system|getline|close|fflush|[>|]", program):
                return Need("unreadable", f"{base}'s program can write files or run commands, which the text "
                                          "does not show")
            return []
        if any(w in flags for w, _ in words):
            return Need("unreadable", f"{base} runs a program given inline, whose effects the text does not show")
        return []
    if base == "env" and any(w in ("-S", "--split-string") or w.startswith("--split-string=") for w, _ in words):
        for i, (word, _) in enumerate(words):
            if word in ("-S", "--split-string") and i + 1 < len(words):
                return _read_text("env -S", words[i + 1])
        return Need("unreadable", "env -S splits a string into a command that cannot be read here")
    if base in _WRAPPERS or base in _ESCALATE:
        rest = list(words)
        if base in _OWN_OPERAND:
            while rest and rest[0][0].startswith("-"):
                rest = rest[2:] if rest[0][0] in ("-w", "--wait", "--timeout", "-E", "--conflict-exit-code") \
                    else rest[1:]
            rest = rest[1:]  # the lock file, the new root
        while rest and (rest[0][0].startswith("-") or re.match(r"[A-Za-z_][A-Za-z0-9_]*=", rest[0][0])
                        or (base in {"timeout", "nice", "chrt", "taskset", "flock"} and rest[0][0][:1].isdigit())):
            rest = rest[1:]
        return [rest] if rest else []
    return []


def _read_text(what: str, word: tuple[str, bool]) -> list[list[tuple[str, bool]]] | Need:
    text, literal = word
    if not literal:
        return Need("unknown-command", f"{what} runs text known only after expansion")
    inner = simple_commands(text)
    if inner is None:
        return Need("unreadable", f"the text given to {what} could not be read")
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
