"""The command line's grammar: argv in, options out, or one line that says what is wrong.

:func:`parse` is the one place argv becomes options: ``remote-bash [global options] COMMAND ...``
and ``remote-bash COMMAND [options]`` both work, a command with actions (``fleet exec``, ``audit
show``, ``sandbox start``, ...) has a parser per action that accepts only that action's options,
options are never abbreviated, and every mistake is one line naming the command, with that
command's usage. Each command's help has an example and the exit statuses it can return; the
top-level help has the whole table.

What this module must never do: import a command's module, or anything beyond the standard
library and ``_output`` at import time (``--help`` and ``exec --keep`` start from here).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

from ._output import (
    ERROR,
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_NOT_RUNNING,
    INTERRUPTED,
    NOT_ALLOWED,
    OWN,
    PROG,
    REFUSED,
    STOPPED,
    TIMEOUT,
    USAGE,
    _UsageError,
    exit_codes,
)

if TYPE_CHECKING:
    from datetime import datetime


class _Parser(argparse.ArgumentParser):
    """An argument parser whose every complaint is one line: the command, the problem, its usage.

    Options are never abbreviated: ``exec --all`` would otherwise read as ``--allow``, and an
    abbreviation that works today would change meaning when an option is added."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        found, extra = super().parse_known_args(args, namespace)
        if extra:
            # Each parser judges its own leftovers, so the complaint names the command they were given to.
            self.error(self._leftover(extra))
        return found, extra

    def _leftover(self, extra: list[str]) -> str:
        option = next((word for word in extra if word.startswith("-") and len(word) > 1), None)
        if option is not None:
            known = [o for action in self._actions for o in action.option_strings]
            given = option.partition("=")[0]
            longer = [o for o in known if o.startswith(given)]  # options are never abbreviated: say so
            hint = f"; did you mean {' or '.join(map(repr, longer[:3]))}?" if longer else _suggest(given, known)
            return f"unknown option {given}{hint}"
        where = " (the command goes after '--')" if "--" in (self.usage or "") else ""
        return f"unexpected argument {extra[0]!r}{where}"

    def error(self, message: str) -> NoReturn:
        choice = re.fullmatch(r"argument (\S+): invalid choice: '(.*)' \(choose from (.*)\)", message, re.S)
        if choice is not None:
            what, value = choice[1].lower() if choice[1].isupper() else "action", choice[2]
            names = [c.strip(" '") for c in choice[3].split(",")]
            message = f"unknown {what} {value!r}{_suggest(value, names) or '; choose from ' + ', '.join(names)}"
        usage = " ".join((self.usage or self.format_usage().removeprefix("usage: ")).split())
        joint = " " if message.endswith("?") else "; "
        raise _UsageError(f"{self.prog}: {message}{joint}usage: {usage}")


def _suggest(name: str, choices: Sequence[str]) -> str:
    """``; did you mean 'x'?`` for the closest of ``choices``, or nothing: the wording of the
    inventory's suggestions, without loading the inventory's models for a mistyped option."""
    import difflib

    close = [repr(c) for c in difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6)]
    return f"; did you mean {' or '.join(close)}?" if close else ""


def _sandbox_options(p: argparse.ArgumentParser) -> None:
    """How the built-in sandbox host runs, for the commands that start one when no inventory is set."""
    p.add_argument("--backend", choices=["container", "local", "unisolated"],
                   help="sandbox backend when no inventory is configured (default: $REMOTE_BASH_SANDBOX, else "
                        "container when Docker or Podman answers, else local: a throwaway user, as root); "
                        "unisolated runs the commands as you, and is never chosen for you")
    p.add_argument("--image", metavar="IMAGE",
                   help="container sandbox: build on this image (one with sshd, or one apt-get, apk or dnf "
                        "can install it into) instead of Debian's")


def _globals(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # Below the top level the defaults are SUPPRESS, so a global option given before the command is
    # not reset by the command's parser, and one given after it still counts.
    keep: Callable[[Any], Any] = (lambda v: v) if top else (lambda v: argparse.SUPPRESS)
    group = parser.add_argument_group("global options (before or after the command)")
    group.add_argument("--inventory", metavar="PATH", default=keep(None),
                       help="inventory file (default: $REMOTE_BASH_INVENTORY, else "
                            "~/.config/remote-bash/hosts.yaml; with none, the built-in 'sandbox' host)")
    group.add_argument("--allow", metavar="PATTERN", default=keep(None),
                       help="only these hosts may be reached in this run (a host pattern: web,db-1, "
                            "env=prod, ...)")
    group.add_argument("--audit-dir", metavar="DIR", default=keep(None),
                       help="audit log directory (default: $REMOTE_BASH_AUDIT_DIR, else "
                            "~/.local/state/remote-bash/audit)")
    group.add_argument("--debug", action="store_true", default=keep(False), help="show tracebacks")


def _timeout(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError("the timeout must be positive")
    return seconds


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive whole number")
    return int(value)


def _tools(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = sorted(set(names) - {"bash", "edit"})
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{value!r}: the tools are bash and edit (comma-separated)")
    return list(dict.fromkeys(names))


def _since(value: str) -> datetime:
    from datetime import UTC, datetime, timedelta

    relative = re.fullmatch(r"(\d+)\s*([smhd])", value.strip())
    if relative:
        seconds = int(relative[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[relative[2]]
        return datetime.now(UTC) - timedelta(seconds=seconds)
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a time: use ISO 8601 (2025-01-31T12:00:00Z) or an age (30m, 2h, 7d)") from None


def _approval_options(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--approve", dest="approve", action="store_true", default=None,
                       help="ask at the terminal before every command Claude runs")
    group.add_argument("--no-approve", dest="approve", action="store_false",
                       help="ask before nothing, whatever the hosts' approve rules say (recorded in the audit log)")
    p.add_argument("--approve-timeout", type=_timeout, default=300.0, metavar="SECONDS",
                   help="refuse a command when nobody answers the approval question within this (300)")


def _json_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", action="store_true", help=what)


class _Unused:
    """Stands for the parser of a command this command line does not run: takes every call, keeps nothing."""

    prog = ""

    def __getattr__(self, name: str) -> Callable[..., _Unused]:
        return lambda *args, **kwargs: self


class _Commands:
    """Adds commands, and actions of commands, each with its summary, example, usage and exit statuses.

    With ``only``, the other commands get a name and a summary (all the top level shows of them)
    but no parser of their own: building every command's options costs a command line more than
    reading it."""

    def __init__(self, parser: argparse.ArgumentParser, common: _Parser, *, title: str,
                 only: str | None = None) -> None:
        self.sub = parser.add_subparsers(dest=title.lower(), metavar=title, required=True, parser_class=_Parser,
                                         help=f"one of these ('{parser.prog} {title} --help' shows its options)")
        self.common = common
        self.prog = parser.prog
        self.only = only

    def add(self, name: str, summary: str, usage: str, example: str,
            *codes: tuple[int | str, str]) -> argparse.ArgumentParser:
        if self.only is not None and name != self.only:
            return cast("argparse.ArgumentParser", _Unused())
        parser = self.sub.add_parser(
            name, prog=f"{self.prog} {name}", parents=[self.common], help=summary, description=summary, usage=usage,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            epilog=f"example:\n  {example}" + (f"\n\n{exit_codes(*codes)}" if codes else ""))
        # For the mistakes a command finds itself (main): its name and usage, as the parser gives them.
        parser.set_defaults(prog=parser.prog, usage_hint=" ".join(usage.split()))
        return parser


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole grammar; with ``only``, that command's alone (see :func:`_command_word`)."""
    common = _Parser(add_help=False)
    _globals(common, top=False)
    parser = _Parser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage=f"{PROG} [global options] COMMAND [options] ...",
        description="Run Claude's bash tool, or your own commands, in persistent bash sessions on remote "
                    "hosts over SSH.",
        epilog=f"examples:\n  {PROG} exec web-1 -- uptime\n"
               f"  {PROG} run --host web-1 \"why is the disk full?\"\n"
               f"  {PROG} fleet exec web -- systemctl is-active nginx\n\n"
               f"'{PROG} COMMAND --help' shows a command's options and its exit statuses.\n\n{EXIT_CODES}",
    )
    _globals(parser, top=True)
    commands = _Commands(parser, common, title="COMMAND", only=only)
    add = commands.add

    p = add("exec", "Run one command on a host (no model) and exit with its status.",
            f"{PROG} exec [options] [HOST] -- COMMAND...", f"{PROG} exec web-1 -- 'df -h / && uptime'",
            OWN, USAGE, TIMEOUT, ERROR, REFUSED, NOT_ALLOWED, INTERRUPTED, STOPPED)
    p.add_argument("host", nargs="?", metavar="HOST",
                   help="inventory host (optional with one host, or with no inventory: sandbox)")
    p.add_argument("--timeout", type=_timeout, metavar="SECONDS", help="deadline (default: the host's)")
    _json_option(p, "print the result as JSON instead of streaming")
    p.add_argument("-n", "--no-stdin", action="store_true",
                   help="send no input: the command reads /dev/null even when stdin is a pipe or a file (ssh -n)")
    _sandbox_options(p)
    p.add_argument("--keep", action="store_true",
                   help="run it in the host's kept session, started if none: a background process keeps the shell "
                        "(cwd, variables, functions) for the next 'exec --keep' (see 'sessions')")
    p.add_argument("--keep-idle", type=_timeout, metavar="SECONDS",
                   help="with --keep: close the kept session after this long unused (default: $REMOTE_BASH_KEEP, "
                        "else 600); setting REMOTE_BASH_KEEP=SECONDS makes every exec keep its session")
    p.add_argument("--no-keep", action="store_true", help="a session of its own, whatever $REMOTE_BASH_KEEP says")
    p.set_defaults(handler="_exec:_cmd_exec")  # "module:function", imported when it runs (_command)

    p = add("sessions", "List the kept sessions ('exec --keep'), or stop them.",
            f"{PROG} sessions [list] [--json]  |  {PROG} sessions stop HOST|--all",
            f"{PROG} sessions   /   {PROG} sessions stop web-1   /   {PROG} sessions stop --all",
            ("0", "listed, or stopped"), (EXIT_FAILED, "stop: no kept session for the host, or one did not stop"),
            USAGE)
    p.add_argument("action", nargs="?", choices=["list", "stop"], default="list",
                   help="list (the default) or stop")
    p.add_argument("host", nargs="?", metavar="HOST", help="stop: the host whose kept session to stop")
    p.add_argument("--all", action="store_true", help="stop: every kept session")
    _json_option(p, "list: one JSON object per session")
    p.set_defaults(handler="_keep:_cmd_sessions")

    p = add("shell", "An interactive line-by-line prompt on a host, audited like everything else "
                     "(:help lists the meta-commands; :exit or Ctrl-D leaves).",
            f"{PROG} shell [options] [HOST]", f"{PROG} shell web-1",
            ("N", "the last command's exit status (124 timed out, 126 refused, 130 interrupted)"),
            USAGE, ERROR, NOT_ALLOWED)
    p.add_argument("host", nargs="?", metavar="HOST",
                   help="inventory host (optional with one host, or with no inventory: sandbox)")
    p.add_argument("--timeout", type=_timeout, metavar="SECONDS", help="deadline per command")
    _sandbox_options(p)
    p.set_defaults(handler="_shell:_cmd_shell")

    p = add("run", "Let Claude do a task on a host with the bash tool, showing every command live.",
            f'{PROG} run [options] [--host NAME] "TASK"',
            f'{PROG} run --host web-1 --max-turns 20 "find out why nginx returns 502 and fix it"',
            ("0", "Claude finished the task"), (EXIT_FAILED, "Claude stopped before finishing (turn limit, error)"),
            (USAGE[0], "usage error, or no Anthropic API key"), ERROR, NOT_ALLOWED, INTERRUPTED, STOPPED)
    p.add_argument("task", nargs="?", metavar="TASK", help="what Claude should do")
    p.add_argument("--host", metavar="NAME", help="inventory host (optional with one host, or with no inventory: "
                                                  "sandbox)")
    p.add_argument("--model", metavar="MODEL", help="Claude model to use (default: $REMOTE_BASH_MODEL, else the "
                                                    "built-in default)")
    p.add_argument("--max-turns", type=_positive, metavar="N", help="stop after N model turns")
    p.add_argument("--resume", metavar="TRANSCRIPT", help="continue the conversation saved in TRANSCRIPT")
    _json_option(p, "print events as JSON lines")
    _approval_options(p)
    _sandbox_options(p)
    p.add_argument("--tools", type=_tools, default=["bash", "edit"], metavar="bash,edit",
                   help="tools Claude gets: bash, the text editor (edit), or both (default)")
    p.set_defaults(handler="_run:_cmd_run")

    p = add("hosts", "List the inventory's hosts.", f"{PROG} hosts [--json] [PATTERN]",
            f"{PROG} hosts 'web:&env=production'",
            ("0", "listed"), USAGE, (ERROR[0], "remote-bash error: the inventory"),
            (NOT_ALLOWED[0], "the pattern names an unknown host, group or label"))
    p.add_argument("pattern", nargs="?", metavar="PATTERN", help="host pattern (default: all)")
    _json_option(p, "print the hosts as JSON")
    p.set_defaults(handler="_admin:_cmd_hosts")

    p = add("check", "Connect to each host and report host key, distribution, OS and bash version, or the error.",
            f"{PROG} check [--forks N] [--json] [PATTERN]", f"{PROG} check web --forks 20",
            ("0", "every host answered"), (EXIT_FAILED, "some host failed"), USAGE,
            (ERROR[0], "remote-bash error: the inventory, the audit log"),
            (NOT_ALLOWED[0], "the pattern names an unknown host, group or label"))
    p.add_argument("pattern", nargs="?", metavar="PATTERN", help="host pattern (default: all)")
    p.add_argument("--forks", type=_positive, default=10, metavar="N", help="hosts checked at once (10)")
    _json_option(p, "print the results as JSON")
    p.set_defaults(handler="_admin:_cmd_check")

    p = add("credentials", "Store or delete a host's secret (key passphrase or password) in the OS keyring.",
            f"{PROG} credentials set|delete [options] HOST", f"{PROG} credentials set web-1")
    p.set_defaults(handler="_admin:_cmd_credentials")
    actions = _Commands(p, common, title="ACTION")
    credential_codes = (("0", "done"), (EXIT_FAILED, "nothing stored: the two entries differ, or the secret is "
                                                     "empty"),
                        USAGE, (ERROR[0], "remote-bash error: the keyring, the inventory"),
                        (NOT_ALLOWED[0], "the host is not in the inventory"))
    q = actions.add("set", "Store a host's secret, read from the terminal (twice) or from one line of stdin.",
                    f"{PROG} credentials set [--store-readable] HOST", f"{PROG} credentials set web-1",
                    *credential_codes)
    q.add_argument("host", metavar="HOST", help="inventory host")
    q.add_argument("--store-readable", action="store_true",
                   help="store the secret even in a keyring backend that does not encrypt it (such as "
                        "keyrings.alt's PlaintextKeyring), where anyone who can read its file can read it")
    q = actions.add("delete", "Delete a host's stored secret.", f"{PROG} credentials delete HOST",
                    f"{PROG} credentials delete web-1", ("0", "deleted"), *credential_codes[2:])
    q.add_argument("host", metavar="HOST", help="inventory host")

    p = add("audit", "Show or verify a host's audit log, or create the key of a keyed audit chain.",
            f"{PROG} audit show|verify [options] HOST  |  {PROG} audit key init [options]",
            f"{PROG} audit show web-1 --since 2h   /   {PROG} audit verify web-1   /   {PROG} audit key init")
    p.set_defaults(handler="_admin:_cmd_audit")
    actions = _Commands(p, common, title="ACTION")
    q = actions.add("show", "A host's audit records, oldest first.",
                    f"{PROG} audit show [--since TIME] [--session ID] [--tool-use-id ID] [--json] HOST",
                    f"{PROG} audit show web-1 --since 2h",
                    ("0", "shown (possibly none, when the filters match nothing)"),
                    (EXIT_FAILED, "there is no audit log for the host"), USAGE,
                    (ERROR[0], "the audit log is unreadable"))
    q.add_argument("host", metavar="HOST", help="the host whose log to show")
    q.add_argument("--since", type=_since, metavar="TIME", help="ISO 8601 time, or an age: 30m, 2h, 7d")
    q.add_argument("--session", metavar="ID", help="only this session")
    q.add_argument("--tool-use-id", metavar="ID", help="only this tool_use id")
    _json_option(q, "print records as JSON lines")
    q = actions.add("verify", "Check a host's hash chain (and MACs, with an audit key) for edits.",
                    f"{PROG} audit verify HOST", f"{PROG} audit verify web-1",
                    ("0", "intact"), (EXIT_FAILED, "tampered or damaged, not verifiable without its key, or no log"),
                    USAGE, (ERROR[0], "the audit log or its key is unreadable"))
    q.add_argument("host", metavar="HOST", help="the host whose log to verify")
    q = actions.add("key", "Create the key of a keyed audit chain: in the OS keyring, or in a file.",
                    f"{PROG} audit key init [--file FILE] [--store-readable]",
                    f"{PROG} audit key init --file /etc/remote-bash/audit.key",
                    ("0", "created"), (EXIT_FAILED, "a key is already kept in the OS keyring (never replaced)"),
                    USAGE, (ERROR[0], "the keyring or the file could not be written"))
    q.add_argument("key_action", choices=["init"], metavar="init", help="create a new key")
    q.add_argument("--file", metavar="FILE", help="write the key to FILE (0600) instead of the OS keyring; name "
                                                  "it in the inventory as audit_key_file")
    q.add_argument("--store-readable", action="store_true",
                   help="allow a keyring backend that does not encrypt (it is then as readable as a key file)")

    p = add("sandbox", "Start, stop or show the throwaway local SSH host used without an inventory.",
            f"{PROG} sandbox start|stop|status [options]",
            f"{PROG} sandbox start && {PROG} exec -- whoami && {PROG} sandbox stop")
    p.set_defaults(handler="_sandbox:_cmd_sandbox")
    actions = _Commands(p, common, title="ACTION")
    sandbox_codes = (USAGE, (ERROR[0], "remote-bash error: no backend, the engine or sshd failed"))
    q = actions.add("start", "Start the sandbox host, kept until 'sandbox stop'.",
                    f"{PROG} sandbox start [--backend NAME] [--image IMAGE]",
                    f"{PROG} sandbox start --backend local", ("0", "started, or running already"), *sandbox_codes)
    _sandbox_options(q)
    q = actions.add("stop", "Stop the sandbox host and remove what it made.", f"{PROG} sandbox stop",
                    f"{PROG} sandbox stop", ("0", "stopped, or not running"), *sandbox_codes)
    q = actions.add("status", "Whether the sandbox runs, its backend, and an inventory entry for it.",
                    f"{PROG} sandbox status [--json]", f"{PROG} sandbox status --json",
                    ("0", "running"), (EXIT_NOT_RUNNING, "not running"), *sandbox_codes)
    _json_option(q, "status as JSON, with an inventory snippet")

    p = add("mcp", "Serve the inventory's hosts to an MCP client (Claude Code, Claude Desktop) over stdio: "
                   "persistent, audited shells with approval of risky commands.",
            f"{PROG} mcp [options]", f"claude mcp add remote-bash -- {PROG} mcp --allow 'env=staging'",
            ("0", "the client went away"), USAGE, (ERROR[0], "remote-bash error: the inventory, the audit log"))
    p.add_argument("--http", metavar="127.0.0.1:PORT",
                   help="serve the streamable HTTP transport here instead of stdio (bearer token required: "
                        "$REMOTE_BASH_MCP_TOKEN, else one is generated and printed on stderr)")
    p.add_argument("--idle-timeout", type=_timeout, default=1800.0, metavar="SECONDS",
                   help="close a host's session after this long unused (1800)")
    p.add_argument("--approve-timeout", type=_timeout, default=300.0, metavar="SECONDS",
                   help="refuse a command that needs approval when nobody answers within this (300)")
    p.add_argument("--no-approve", action="store_true",
                   help="run commands the hosts' approve rules name without asking (recorded in the audit log)")
    p.add_argument("--public", action="store_true",
                   help="with --http: allow an address other than loopback")
    p.set_defaults(handler="_mcp:_cmd_mcp")

    p = add("fleet", "Run a command, or a task for Claude, on many hosts at once.",
            f"{PROG} fleet exec|run [options] PATTERN ...",
            f"{PROG} fleet exec 'web:&env=production' --forks 20 -- systemctl is-active nginx")
    p.set_defaults(handler="_fleet:_cmd_fleet")
    actions = _Commands(p, common, title="ACTION")
    fleet_codes = (USAGE[0], "usage error; or on some host it did not run to its end: unreachable, timed out, "
                             "lost, or skipped by --fail-fast"), \
        (ERROR[0], "remote-bash error before any host was worked on (inventory, audit)"), \
        (NOT_ALLOWED[0], "the pattern names an unknown host, group or label"), INTERRUPTED, STOPPED
    q = actions.add("exec", "Run one command on every selected host at once.",
                    f"{PROG} fleet exec [options] PATTERN -- COMMAND...",
                    f"{PROG} fleet exec 'web:&env=production' --forks 20 -- systemctl is-active nginx",
                    ("0", "the command exited 0 on every host"),
                    (EXIT_FAILED, "it failed, or was refused by the command policy, on some host"), *fleet_codes)
    q.add_argument("pattern", metavar="PATTERN", help="host pattern")
    _fleet_options(q)
    q.add_argument("-n", "--no-stdin", action="store_true",
                   help="run the command without input when stdin is a pipe or a file (such a stdin is refused "
                        "otherwise: one input cannot go to every host)")
    q = actions.add("run", "Let Claude do a task on every selected host: a conversation per host, or one for all.",
                    f'{PROG} fleet run [options] PATTERN "TASK"',
                    f'{PROG} fleet run web --serial 2 "upgrade nginx and check it still answers"',
                    ("0", "Claude finished on every host and the last command there succeeded"),
                    (EXIT_FAILED, "Claude finished but a host's last command failed"), *fleet_codes)
    q.add_argument("pattern", metavar="PATTERN", help="host pattern")
    q.add_argument("task", nargs="?", metavar="TASK", help="what Claude should do on each host")
    _fleet_options(q)
    q.add_argument("--coordinator", action="store_true",
                   help="one conversation drives every host (default: one per host)")
    q.add_argument("--serial", type=_positive, metavar="N", help="hosts per batch")
    q.add_argument("--model", metavar="MODEL", help="Claude model to use")
    q.add_argument("--max-turns", type=_positive, metavar="N", help="stop a conversation after N turns")
    _approval_options(q)
    return parser


def _fleet_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--forks", type=_positive, default=10, metavar="N", help="hosts worked on at once (10)")
    p.add_argument("--fail-fast", action="store_true", help="start no more hosts after the first failure")
    p.add_argument("--output-dir", metavar="DIR", help="write each host's output to DIR/<host>.txt")
    p.add_argument("--timeout", type=_timeout, metavar="SECONDS", help="deadline per command")
    _json_option(p, "print the result as JSON")


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The options of a command line; for a mistake ``_UsageError`` holding the whole line to print
    (``remote-bash exec: unknown option --workers; usage: ...``); ``SystemExit(0)`` after printing
    ``--help``. The words after ``--`` are ``words`` (None without ``--``)."""
    words = list(argv)
    after: list[str] | None = None
    if "--" in words:
        cut = words.index("--")
        words, after = words[:cut], words[cut + 1 :]
    args = _parser(_command_word(words)).parse_args(words)
    if after is not None and args.handler not in _TAKE_WORDS:
        command = " ".join(w for w in (PROG, args.command, getattr(args, "action", None)) if isinstance(w, str))
        raise _UsageError(f"{command}: takes nothing after '--'; see '{command} --help'")
    args.words = after
    return args


_GLOBAL_VALUED = frozenset({"--inventory", "--allow", "--audit-dir"})
_COMMANDS = frozenset({"exec", "sessions", "shell", "run", "hosts", "check", "credentials", "audit", "sandbox", "mcp",
                       "fleet"})


def _command_word(words: Sequence[str]) -> str | None:
    """The command ``words`` (before any ``--``) name, when they are the plain ``[GLOBAL...] COMMAND ...``
    that only that command's parser needs to read; None for anything else (``--help`` before the
    command, an unknown word or option, no command), which the whole grammar then reads and judges."""
    i = 0
    while i < len(words):
        word = words[i]
        name, equals, _ = word.partition("=")
        if name in _GLOBAL_VALUED:
            i += 1 if equals else 2
        elif word == "--debug":
            i += 1
        else:
            return word if word in _COMMANDS else None
    return None


_TAKE_WORDS = frozenset({"_exec:_cmd_exec", "_run:_cmd_run", "_fleet:_cmd_fleet"})
"""The commands that read the words after ``--``: a command line, or a task."""
