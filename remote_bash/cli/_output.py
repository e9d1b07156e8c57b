"""What the command line shows: stdout and stderr writers, tables, durations, and exit statuses.

The lowest layer of the CLI: of the package it imports only the pure ``terminal`` module. Every
byte the ``remote-bash`` command prints goes through a writer here, and every error becomes one of
the exit statuses here (:func:`_exit_code`).

Text that came from a host, from Claude, from a command or from a log may hold what a terminal
would act on (escape sequences, OSC 52 that sets the clipboard, ``\\r`` or backspaces that hide
part of a line, bidi overrides that reorder it). :func:`_out` and :func:`_err` show all of it
visibly escaped, whether or not the stream is a terminal (a file is read on a terminal later);
:func:`_out_json` does it with JSON escapes, so the JSON keeps its values. Only :func:`_out_raw`
writes text as it is: a command's own output on a pipe or file, and styling built from constants
around text that was escaped already.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing's: the kept-session client loads this module, and typing costs it
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

PROG = "remote-bash"

EXIT_FAILED = 1
"""check/audit verify/credentials found a problem; fleet: the command failed on some host."""
EXIT_USAGE = 2
"""Bad arguments, or no Anthropic API key for ``run``."""
EXIT_TIMEOUT = 124
"""The command outran its deadline and was killed."""
EXIT_ERROR = 125
"""remote_bash itself failed: config, connect, authentication, host key, audit, lost connection."""
EXIT_REFUSED = 126
"""The command policy refused the command; nothing was sent."""
EXIT_NOT_ALLOWED = 127
"""The host is unknown or outside the allowlist; nothing was connected."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C); the remote command was killed."""
EXIT_NOT_RUNNING = 3
"""``sandbox status``: the sandbox is not running."""

# The rows of the exit-status tables: the top-level help shows every row once, each command's help
# only the rows that command can return.
OWN = ("N", "the command's own exit status")
USAGE = (EXIT_USAGE, "usage error")
TIMEOUT = (EXIT_TIMEOUT, "the command timed out and was killed")
ERROR = (EXIT_ERROR, "remote-bash error: inventory, connect, authentication, host key, audit")
REFUSED = (EXIT_REFUSED, "the command policy refused the command (nothing was sent)")
NOT_ALLOWED = (EXIT_NOT_ALLOWED, "unknown host, or outside --allow (nothing was connected)")
INTERRUPTED = (EXIT_INTERRUPTED, "interrupted with Ctrl-C (the remote command was killed)")
STOPPED = ("143, 129", "stopped by SIGTERM, SIGHUP: as Ctrl-C")


def exit_codes(*rows: tuple[int | str, str]) -> str:
    """An ``exit status:`` table for a help text."""
    width = max(len(str(code)) for code, _ in rows)
    return "exit status:\n" + "\n".join(f"  {str(code).ljust(width)}  {what}" for code, what in rows)


EXIT_CODES = exit_codes(
    ("0", "success"), ("N", "exec, shell: the command's own exit status"),
    (EXIT_FAILED, "a check, verification or fleet host failed; Claude did not finish"),
    (EXIT_USAGE, "usage error, or no Anthropic API key for run; fleet: some host did not run to its end"),
    TIMEOUT, ERROR, REFUSED, NOT_ALLOWED, INTERRUPTED, STOPPED,
)
"""Every exit status of every command: the top-level help's table."""


# -- output ------------------------------------------------------------------------------------------


def _out(text: str) -> None:
    """Write ``text`` to stdout with everything a terminal would act on shown escaped."""
    # Imported here: a kept call's client prints what its background process escaped already, and
    # compiling the pattern would cost it more than its call.
    from remote_bash._escape import escape

    _out_raw(escape(text))


def _out_raw(text: str) -> None:
    """Write ``text`` to stdout as it is: only text that is safe already, or not for a terminal."""
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()


def _json(value: Any, *, indent: int | None = None, ascii_only: bool = False) -> str:
    """One JSON document and a newline; control and bidi characters as ``\\uXXXX`` escapes."""
    import json

    from remote_bash._escape import escape_json

    return escape_json(json.dumps(value, ensure_ascii=ascii_only, indent=indent)) + "\n"


def _out_json(value: Any, *, indent: int | None = None, ascii_only: bool = False) -> None:
    _out_raw(_json(value, indent=indent, ascii_only=ascii_only))


def _err(text: str) -> None:
    """A message on stderr (a newline added), escaped like :func:`_out`."""
    from remote_bash._escape import escape

    text = escape(text)
    sys.stderr.write(text if text.endswith("\n") else text + "\n")
    sys.stderr.flush()


def _stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _table(rows: Sequence[Sequence[str]]) -> str:
    sizes = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ("  ".join(c.ljust(s) for c, s in zip(row, sizes, strict=True)).rstrip() for row in rows)
    return "".join(line + "\n" for line in lines)


def _count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 host``, ``2 hosts``, ``0 problems``: a number and its noun, in agreement."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def _duration(seconds: float) -> str:
    """1 ms, 250 ms, 1.25 s: what a person reads at a glance."""
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


# -- errors and exit statuses ---------------------------------------------------------------------------


class _UsageError(Exception):
    """A mistake in the command line: exit 2."""


class _NoApiKey(Exception):
    """``run`` without credentials for the Anthropic API: exit 2."""


def _exit_code(exc: BaseException) -> int:
    from remote_bash.errors import HostNotAllowed, PolicyDenied, RemoteBashError, SelectionError

    if isinstance(exc, PolicyDenied):
        return EXIT_REFUSED
    if isinstance(exc, HostNotAllowed | SelectionError):
        return EXIT_NOT_ALLOWED
    if isinstance(exc, RemoteBashError):
        return EXIT_ERROR
    if isinstance(exc, _UsageError | _NoApiKey):
        return EXIT_USAGE
    return EXIT_FAILED
