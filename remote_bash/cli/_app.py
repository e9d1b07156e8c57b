"""The argument parser, logging setup and :func:`main`: argv in, an exit status out.

Each command's module is imported only when that command runs, so ``--help`` loads none of them.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ._output import (
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    FLEET_EXIT_CODES,
    PROG,
    _err,
    _exit_code,
    _NoApiKey,
    _one_line,
    _UsageError,
)

if TYPE_CHECKING:
    from datetime import datetime


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
    keep: Callable[[Any], Any] = (lambda v: v) if top else (lambda v: argparse.SUPPRESS)
    group = parser.add_argument_group("global options")
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
    import re
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


def _parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    common = argparse.ArgumentParser(add_help=False)
    _globals(common, top=False)
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=raw,
        description="Run Claude's bash tool, or your own commands, in persistent bash sessions on remote "
                    "hosts over SSH.",
        epilog=f"examples:\n  {PROG} exec web-1 -- uptime\n"
               f"  {PROG} run --host web-1 \"why is the disk full?\"\n"
               f"  {PROG} fleet exec web -- systemctl is-active nginx\n\n{EXIT_CODES}",
    )
    _globals(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, summary: str, example: str, codes: str = EXIT_CODES) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=summary, description=summary, formatter_class=raw,
                              epilog=f"example:\n  {example}\n\n{codes}")

    p = add("exec", "Run one command on a host (no model) and exit with its status.",
            f"{PROG} exec web-1 -- 'df -h / && uptime'")
    p.add_argument("host", nargs="?", metavar="HOST",
                   help="inventory host (optional with no inventory: sandbox)")
    p.add_argument("--timeout", type=_timeout, metavar="SECONDS", help="deadline (default: the host's)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of streaming")
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
    p.usage = f"{PROG} exec [options] [HOST] -- COMMAND..."
    p.set_defaults(handler="_exec:_cmd_exec")  # "module:function", imported when it runs (_command)

    p = add("sessions", "List the kept sessions ('exec --keep'), or stop them.",
            f"{PROG} sessions   /   {PROG} sessions stop web-1   /   {PROG} sessions stop --all")
    p.add_argument("action", nargs="?", choices=["list", "stop"], default="list")
    p.add_argument("host", nargs="?", metavar="HOST", help="stop: the host whose kept session to stop")
    p.add_argument("--all", action="store_true", help="stop: every kept session")
    p.add_argument("--json", action="store_true", help="list: one JSON object per session")
    p.set_defaults(handler="_keep:_cmd_sessions")

    p = add("shell", "An interactive line-by-line prompt on a host, audited like everything else "
                     "(:restart for a fresh shell, :exit or Ctrl-D to leave).", f"{PROG} shell web-1")
    p.add_argument("host", nargs="?", metavar="HOST")
    p.add_argument("--timeout", type=_timeout, metavar="SECONDS", help="deadline per command")
    _sandbox_options(p)
    p.set_defaults(handler="_exec:_cmd_shell")

    p = add("run", "Let Claude do a task on a host with the bash tool, showing every command live.",
            f'{PROG} run --host web-1 --max-turns 20 "find out why nginx returns 502 and fix it"')
    p.add_argument("task", nargs="?", metavar="TASK", help="what Claude should do")
    p.add_argument("--host", metavar="NAME", help="inventory host (optional with no inventory: sandbox)")
    p.add_argument("--model", metavar="MODEL", help="Claude model to use")
    p.add_argument("--max-turns", type=_positive, metavar="N", help="stop after N model turns")
    p.add_argument("--resume", metavar="TRANSCRIPT", help="continue the conversation saved in TRANSCRIPT")
    p.add_argument("--json", action="store_true", help="print events as JSON lines")
    _approval_options(p)
    _sandbox_options(p)
    p.add_argument("--tools", type=_tools, default=["bash", "edit"], metavar="bash,edit",
                   help="tools Claude gets: bash, the text editor (edit), or both (default)")
    p.set_defaults(handler="_run:_cmd_run")

    p = add("hosts", "List the inventory's hosts.", f"{PROG} hosts 'web:&env=production'")
    p.add_argument("pattern", nargs="?", metavar="PATTERN", help="host pattern (default: all)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler="_admin:_cmd_hosts")

    p = add("check", "Connect to each host and report host key, OS and bash version, or the error.",
            f"{PROG} check web --forks 20")
    p.add_argument("pattern", nargs="?", metavar="PATTERN", help="host pattern (default: all)")
    p.add_argument("--forks", type=_positive, default=10, metavar="N", help="hosts checked at once (10)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler="_admin:_cmd_check")

    p = add("credentials", "Store or delete a host's secret (key passphrase or password) in the OS keyring.",
            f"{PROG} credentials set web-1")
    p.add_argument("action", choices=["set", "delete"])
    p.add_argument("host", metavar="HOST")
    p.add_argument("--store-readable", action="store_true",
                   help="store the secret even in a keyring backend that does not encrypt it (such as "
                        "keyrings.alt's PlaintextKeyring), where anyone who can read its file can read it")
    p.set_defaults(handler="_admin:_cmd_credentials")

    p = add("audit", "Show or verify a host's audit log, or create the key of a keyed audit chain.",
            f"{PROG} audit show web-1 --since 2h   /   {PROG} audit verify web-1   /   {PROG} audit key init")
    p.add_argument("action", choices=["show", "verify", "key"])
    p.add_argument("host", metavar="HOST", help="inventory host (for 'key': init)")
    p.add_argument("--file", metavar="FILE", help="key init: write the key to FILE (0600) instead of the "
                                                  "OS keyring; name it in the inventory as audit_key_file")
    p.add_argument("--store-readable", action="store_true",
                   help="key init: allow a keyring backend that does not encrypt (it is then as readable as "
                        "a key file)")
    p.add_argument("--since", type=_since, metavar="TIME", help="ISO 8601 time, or an age: 30m, 2h, 7d")
    p.add_argument("--session", metavar="ID", help="only this session")
    p.add_argument("--tool-use-id", metavar="ID", help="only this tool_use id")
    p.add_argument("--json", action="store_true", help="print records as JSON lines")
    p.set_defaults(handler="_admin:_cmd_audit")

    p = add("sandbox", "Start, stop or show the throwaway local SSH host used without an inventory.",
            f"{PROG} sandbox start && {PROG} exec -- whoami && {PROG} sandbox stop",
            EXIT_CODES + "\n  3    sandbox status: the sandbox is not running")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--json", action="store_true", help="status as JSON, with an inventory snippet")
    _sandbox_options(p)
    p.set_defaults(handler="_sandbox:_cmd_sandbox")

    p = add("mcp", "Serve the inventory's hosts to an MCP client (Claude Code, Claude Desktop) over stdio: "
                   "persistent, audited shells with approval of risky commands.",
            f"claude mcp add remote-bash -- {PROG} mcp --allow 'env=staging'")
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
            f"{PROG} fleet exec 'web:&env=production' --forks 20 -- systemctl is-active nginx",
            FLEET_EXIT_CODES)
    p.add_argument("action", choices=["exec", "run"])
    p.add_argument("pattern", metavar="PATTERN", help="host pattern")
    p.add_argument("task", nargs="?", metavar="TASK", help="fleet run: what Claude should do on each host")
    p.add_argument("--forks", type=_positive, default=10, metavar="N", help="hosts worked on at once (10)")
    p.add_argument("--fail-fast", action="store_true", help="start no more hosts after the first failure")
    p.add_argument("--output-dir", metavar="DIR", help="write each host's output to DIR/<host>.txt")
    p.add_argument("--timeout", type=_timeout, metavar="SECONDS", help="deadline per command")
    p.add_argument("--coordinator", action="store_true",
                   help="fleet run: one conversation drives every host (default: one per host)")
    p.add_argument("--serial", type=_positive, metavar="N", help="fleet run: hosts per batch")
    p.add_argument("--model", metavar="MODEL", help="fleet run: Claude model to use")
    p.add_argument("--max-turns", type=_positive, metavar="N", help="fleet run: stop a conversation after N turns")
    _approval_options(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.usage = (f"{PROG} fleet exec [options] PATTERN -- COMMAND...\n"
               f"       {PROG} fleet run [options] PATTERN TASK")
    p.set_defaults(handler="_fleet:_cmd_fleet")
    return parser


def _command(handler: str) -> Callable[[Any], int]:
    """The function named by ``"module:function"``, a module of this package imported only now."""
    module, _, name = handler.partition(":")
    found: Callable[[Any], int] = getattr(importlib.import_module(f".{module}", __package__), name)
    return found


def _setup_logging(debug: bool) -> None:
    import logging

    from remote_bash.terminal import escape

    class _Escaped(logging.Formatter):
        """Log messages may quote a host's words: shown escaped, like every other message."""

        def format(self, record: logging.LogRecord) -> str:
            return escape(super().format(record))

    handler = logging.StreamHandler(sys.stderr)
    shape = f"{PROG}: %(name)s: %(levelname)s: %(message)s" if debug else f"{PROG}: warning: %(message)s"
    handler.setFormatter(_Escaped(shape))
    logger = logging.getLogger("remote_bash")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.WARNING)
    logger.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    """The ``remote-bash`` entry point; returns the exit status."""
    if hasattr(signal, "SIGXFSZ"):
        # A file-size limit on the audit directory must become an AuditError, not a crash.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    words = list(sys.argv[1:] if argv is None else argv)
    after: list[str] | None = None
    if "--" in words:
        cut = words.index("--")
        words, after = words[:cut], words[cut + 1 :]
    args = _parser().parse_args(words)
    args.words = after
    try:
        if args.handler == "_exec:_cmd_exec":
            # A kept session answers without the SSH stack, pydantic, the models or logging loaded here.
            from . import _keep

            if _keep.wanted(args, os.environ):
                return _keep.exec_kept(args)
        _setup_logging(args.debug)
        from ._context import _Context

        ctx = _Context(args)
        code: int = _command(args.handler)(ctx)
        return code
    except KeyboardInterrupt:
        _err(f"{PROG}: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as exc:
        if args.debug:
            import traceback

            _err(traceback.format_exc())
        from remote_bash.errors import RemoteBashError

        known = isinstance(exc, RemoteBashError | _UsageError | _NoApiKey)
        message = str(exc) if known else f"internal error: {type(exc).__name__}: {exc} (--debug shows where)"
        _err(f"{PROG}: {_one_line(message)}")
        return _exit_code(exc)
