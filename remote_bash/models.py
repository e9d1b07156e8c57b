"""Plain data: hosts, limits, policies and command results.

Frozen data classes (:mod:`remote_bash._plain`) that pydantic validates when one is made in code or
read from a file; they never do I/O. Every config class forbids unknown fields so a typo in an
inventory is an error, not a silent default. Reading them back (a cached inventory, a command's
result) needs no pydantic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from remote_bash._plain import After, Before, Bound, Model, factory

__all__ = [
    "ApproveRule",
    "CommandPolicy",
    "CommandResult",
    "EditPolicy",
    "Host",
    "KillReport",
    "RegexApproveRule",
    "ResourceLimits",
    "WritesOutsideRule",
    "inventory_of",
]

DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_TIMEOUT = 600.0
DEFAULT_OUTPUT_LIMIT = 30_000


def _env_names(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        if not key or not (key[0].isalpha() or key[0] == "_") or not all(c.isalnum() or c == "_" for c in key):
            raise ValueError(f"environment variable name {key!r} is not a valid shell name")
        if "\x00" in value[key]:
            # bash would drop the byte and what follows it in silence: the variable would not
            # hold what the inventory says.
            raise ValueError(f"the value of environment variable {key!r} holds a NUL byte, which no "
                             "environment variable can hold")
    return value


# Validators of Host's fields are types rather than methods, so the inventory file's host settings
# (derived from Host's fields) run them too, at the line that sets the value.
EnvVars = Annotated[dict[str, str], After(_env_names)]


def _not_a_bool(value: object) -> object:
    # YAML's `true` would otherwise be read as 1 (port 1, a one-second deadline).
    if isinstance(value, bool):
        raise ValueError(f"a number is needed here, not {str(value).lower()}")
    return value


Int = Annotated[int, Before(_not_a_bool)]
Number = Annotated[float, Before(_not_a_bool)]

# Model's configuration forbids unknown fields and infinite or NaN numbers (a deadline of .inf
# would be none).


class ResourceLimits(Model):
    """ulimit-style limits and a nice level, applied to the remote shell when it starts.

    Every command the shell runs inherits them.
    """

    cpu_seconds: Annotated[Int | None, Bound(ge=1)] = None
    """CPU time per process, in seconds (``ulimit -t``)."""
    virtual_memory_kb: Annotated[Int | None, Bound(ge=1024)] = None
    """Virtual memory per process, in KiB (``ulimit -v``)."""
    file_size_kb: Annotated[Int | None, Bound(ge=1)] = None
    """Largest file a process may write, in KiB (``ulimit -f``)."""
    processes: Annotated[Int | None, Bound(ge=1)] = None
    """Processes the remote user may have (``ulimit -u``)."""
    open_files: Annotated[Int | None, Bound(ge=16)] = None
    """Open file descriptors per process (``ulimit -n``)."""
    nice: Annotated[Int | None, Bound(ge=0, le=19)] = None
    """Scheduling niceness of the shell (``renice``); 0 to 19, higher is kinder."""


class CommandPolicy(Model):
    """A guard rail checked before a command is sent: not the security boundary.

    Isolation and least privilege on the host are the real control.
    """

    allow: list[str] | None = None
    """Executables a command may start with; ``None`` allows any executable."""
    deny: list[Annotated[str, After(_deny_pattern)]] = factory(list)
    """Regular expressions; a command matching any of them is refused."""
    allow_operators: bool = True
    """With an ``allow`` list: whether shell operators (``;``, ``|``, ``&&``, ``$()``, ...) may chain
    further commands. ``False`` refuses them, since each would start an executable the allowlist
    never saw."""


def _absolute_paths(value: list[str]) -> list[str]:
    for path in value:
        if not path.startswith("/"):
            raise ValueError(f"writes_outside paths must be absolute, got {path!r}")
    return value


def _compiles(pattern: str, what: str, *, multiline: bool) -> None:
    """A regular expression the linear-time engine can run, or a ValueError naming it: refused
    where the host is made, not at its first command."""
    from remote_bash._regex import PatternError, compile_linear  # loads RE2: only for a pattern

    try:
        compile_linear(pattern, multiline=multiline)
    except PatternError as exc:
        raise ValueError(f"{what} {pattern!r} cannot be used: {exc}") from None


def _deny_pattern(value: str) -> str:
    _compiles(value, "deny pattern", multiline=True)
    return value


def _redact_pattern(value: str) -> str:
    _compiles(value, "redact pattern", multiline=False)
    return value


def _approve_regex(value: str) -> str:
    _compiles(value, "approve regex", multiline=True)
    return value


def _absolute_patterns(value: list[str] | None) -> list[str] | None:
    for pattern in value or []:
        if not pattern.startswith("/"):
            raise ValueError(f"edit path pattern {pattern!r} must be absolute (start with /)")
    return value


class RegexApproveRule(Model):
    """Ask before a command matching this regular expression is sent."""

    regex: Annotated[str, After(_approve_regex)]
    """A regular expression searched for in the command text."""


class WritesOutsideRule(Model):
    """Ask before a command that writes outside these absolute paths is sent."""

    writes_outside: Annotated[list[str], Bound(min_length=1), After(_absolute_paths)]
    """Absolute paths under which writing needs no approval."""


APPROVE_CLASSES = ("privilege", "packages", "services", "deletions")
ApproveRule = Literal["privilege", "packages", "services", "deletions"] | RegexApproveRule | WritesOutsideRule
"""One approval rule: a named class of commands, a regular expression, or writes outside paths."""


def _approve_rules(value: object) -> object:
    """One clear sentence for a wrong rule, instead of every member of the union failing at once."""
    if value is None or value in ("never", "all"):
        return value
    if not isinstance(value, list):
        raise ValueError(f"expected 'never', 'all' or a list of rules, got {value!r}")
    for index, rule in enumerate(value):
        if isinstance(rule, RegexApproveRule | WritesOutsideRule):
            continue
        if isinstance(rule, str):
            if rule not in APPROVE_CLASSES:
                raise ValueError(f"rule {index}: {rule!r} is not a class of commands; expected one of "
                                 f"{', '.join(APPROVE_CLASSES)}, {{regex: ...}} or {{writes_outside: [...]}}")
            continue
        if not (isinstance(rule, dict) and len(rule) == 1 and next(iter(rule)) in ("regex", "writes_outside")):
            raise ValueError(f"rule {index}: expected a class name, {{regex: PATTERN}} or "
                             f"{{writes_outside: [PATHS]}}, got {rule!r}")
        if "writes_outside" in rule:
            paths = rule["writes_outside"]
            if not isinstance(paths, list) or not paths or not all(
                    isinstance(p, str) and p.startswith("/") for p in paths):
                raise ValueError(f"rule {index}: writes_outside takes a list of absolute paths, got {paths!r}")
        elif not isinstance(rule["regex"], str):
            raise ValueError(f"rule {index}: regex takes a string, got {rule['regex']!r}")
    return value


# A type rather than a model validator, so the inventory file's host settings (derived from
# Host's fields) give the same sentence at the line that sets the rule.
ApproveSetting = Annotated[Literal["never", "all"] | list[ApproveRule] | None, Before(_approve_rules)]


class _Origin:
    """The inventory a host was loaded from, so a session made from the host alone is still gated
    by it. Provenance, not identity: it never makes two hosts unequal."""

    __slots__ = ("inventory",)

    def __init__(self) -> None:
        self.inventory: object | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Origin)

    __hash__ = None  # type: ignore[assignment]  # mutable holder, compared only inside a Host

class EditPolicy(Model):
    """Where the text editor tool may work on a host, checked before anything is sent.

    Patterns are absolute paths or globs (``*`` also matches ``/``); a pattern that names a
    directory covers everything below it. A symbolic link is checked as itself and as the
    file it points to."""

    allow: Annotated[list[str] | None, After(_absolute_patterns)] = None
    """Paths the editor may view or change; ``None`` allows any path not denied."""
    deny: Annotated[list[str], After(_absolute_patterns)] = factory(list)
    """Paths the editor may never view or change; deny wins over allow."""
    read_only: bool = False
    """``True`` allows ``view`` only."""


class Host(Model):
    """One host remote_bash may reach, as the inventory resolved it."""

    _origin: _Origin = factory(_Origin)

    name: Annotated[str, Bound(min_length=1)]
    """The inventory name; what the audit log, the CLI and errors call the host."""
    hostname: Annotated[str, Bound(min_length=1)]
    """The address or DNS name to connect to."""
    port: Annotated[Int, Bound(ge=1, le=65535)] = 22
    """The SSH port."""
    user: str | None = None
    """The remote user; ``None`` means the local user's name."""
    identity_file: Path | None = None
    """A private key file; its passphrase may live in the OS keyring."""
    known_hosts: Path | None = None
    """The known_hosts file to verify the host key against; ``None`` means ``~/.ssh/known_hosts``."""
    host_key_policy: Literal["strict", "accept-new"] = "strict"
    """``strict`` refuses unknown keys; ``accept-new`` records the first key seen (changed keys are
    still refused)."""
    credential: Literal["auto", "agent", "key", "keyring"] = "auto"
    """Where credentials come from: ``auto`` offers the agent, the key file and a keyring secret if
    one is stored; the others restrict to one source."""
    jump: list[str] = factory(list)
    """Inventory names of hosts to tunnel through, first hop first (like ProxyJump)."""
    labels: dict[str, str] = factory(dict)
    """Free-form key/value labels, selectable with ``key=value`` patterns."""
    groups: list[str] = factory(list)
    """Groups the host belongs to (filled in by the inventory)."""
    env: EnvVars = factory(dict)
    """Extra environment exported in the remote shell when it starts."""
    command_timeout: Annotated[Number, Bound(gt=0)] = DEFAULT_TIMEOUT
    """Default deadline of one command, in seconds."""
    max_timeout: Annotated[Number, Bound(gt=0)] = DEFAULT_MAX_TIMEOUT
    """Largest deadline a caller may ask for; longer requests are clamped to it."""
    connect_timeout: Annotated[Number, Bound(gt=0)] = 15.0
    """Deadline for TCP connect plus SSH handshake plus authentication, in seconds."""
    keepalive_interval: Annotated[Number, Bound(ge=0)] = 15.0
    """Seconds between SSH keepalives; 0 turns them off. Three unanswered ones drop the connection."""
    output_limit: Annotated[Int, Bound(ge=200)] = DEFAULT_OUTPUT_LIMIT
    """Characters of output kept per command (the start and the end; the middle is cut)."""
    limits: ResourceLimits = factory(ResourceLimits._trusted)
    """Resource limits applied to the remote shell."""
    policy: CommandPolicy = factory(CommandPolicy._trusted)
    """The command policy checked before a command is sent."""
    edit: EditPolicy = factory(EditPolicy._trusted)
    """Where the text editor tool may view and change files."""
    ssh_config: str | None = None
    """A ``Host`` alias in the user's ``~/.ssh/config`` to take HostName, User, Port, IdentityFile
    and ProxyJump from."""
    redact: list[Annotated[str, After(_redact_pattern)]] = factory(list)
    """Extra regular expressions whose matches are masked in output and audit records."""
    forks: Annotated[Int | None, Bound(ge=1)] = None
    """Largest number of hosts of this host's groups worked on at once by the fleet commands."""
    approve: ApproveSetting = None
    """Which commands Claude asks for need a person's yes before they are sent: ``never``, ``all``
    or a list of rules. ``None``: every named class on hosts labelled production, nothing elsewhere."""
    audit_key_file: Path | None = None
    """A file holding the key of this host's audit chain (``remote-bash audit key init --file``);
    ``None`` means the key in the OS keyring, if one is kept there."""

    @property
    def address(self) -> str:
        """``hostname:port``, as written in audit records."""
        return f"{self.hostname}:{self.port}"


def inventory_of(host: Host) -> object | None:
    """The inventory ``host`` was loaded from (``load_inventory``), or None for a host made in code."""
    return host._origin.inventory


def _set_inventory(host: Host, inventory: object) -> None:
    host._origin.inventory = inventory


class KillReport(Model):
    """What was done to end a command that outran its deadline or was interrupted."""

    signals: list[str] = factory(list)
    """Signals sent, in order (``INT``, ``TERM``, ``KILL``)."""
    survivors: int = 0
    """Processes of the command still alive after the last signal (0 is the goal)."""
    shell_replaced: bool = False
    """True when the shell itself had to be killed and a new one started."""
    cgroup: bool = False
    """True when the host keeps each SSH login in a cgroup of its own, so that processes that left
    the command's process tree and rewrote or cleared their environment were found and signalled."""
    unchecked: str | None = None
    """What could not be checked, in words; ``None`` when every process of the command could be
    found. Set when, without a login cgroup, processes of the same user started while the command
    ran, outside its process tree and without its tag, were left alone (they may be the command's
    daemons or another login's): ``survivors`` does not count them."""


class CommandResult(Model):
    """The outcome of one command run in a session."""

    command: str
    """The command text as sent."""
    output: str
    """stdout and stderr interleaved as bash wrote them, colour codes stripped, bounded."""
    exit_code: int | None
    """The exit status; ``None`` when the command was killed or the shell was lost."""
    timed_out: bool = False
    """True when the command outran its deadline and was killed."""
    truncated: bool = False
    """True when the middle of the output was cut to respect the output limit."""
    shell_lost: bool = False
    """True when the shell died (``exit``, ``exec``, ``kill -9 $$``): cwd, variables and functions
    are gone and the next call gets a fresh shell."""
    duration: float = 0.0
    """Seconds from sending the command to its end."""
    output_bytes: int = 0
    """Bytes the command printed in all, before truncation."""
    output_sha256: str = ""
    """SHA-256 of every byte the command printed, before truncation and redaction."""
    timeout: float = 0.0
    """The deadline that applied, in seconds, after clamping."""
    kill: KillReport | None = None
    """How the command was ended, when it was."""
    audit_error: str | None = None
    """Set when the command ran but the audit log could not record its end (``exec.end``): what
    failed. ``remote-bash audit verify`` then names the call whose end is missing."""

    @property
    def ok(self) -> bool:
        """True when the command ran to completion with exit status 0."""
        return self.exit_code == 0 and not self.timed_out and not self.shell_lost

    @classmethod
    def _from_session(cls, *, command: str, output: str, exit_code: int | None, timed_out: bool, truncated: bool,
                      shell_lost: bool, duration: float, output_bytes: int, output_sha256: str, timeout: float,
                      kill: KillReport | None, audit_error: str | None = None) -> CommandResult:
        """The result a session built from values it computed itself, every field given with its
        type (the signature says which, and mypy holds the caller to it): made without the generic
        field loop and without validation, which would cost more than the rest of the call's
        Python. Equal in every way to the validated result (tests compare the two)."""
        result = cls.__new__(cls)
        _set(result, "__dict__", {
            "command": command, "output": output, "exit_code": exit_code, "timed_out": timed_out,
            "truncated": truncated, "shell_lost": shell_lost, "duration": duration, "output_bytes": output_bytes,
            "output_sha256": output_sha256, "timeout": timeout, "kill": kill, "audit_error": audit_error,
        })
        return result


_set = object.__setattr__

