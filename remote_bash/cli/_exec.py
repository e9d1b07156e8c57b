"""``exec``: one command on a host, its output streamed, exiting with its status (``shell`` is in ``_shell``)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._context import _Context, _pick_host, _session
from ._input import open_input
from ._output import (
    EXIT_ERROR,
    EXIT_TIMEOUT,
    PROG,
    _err,
    _one_line,
    _out,
    _out_json,
    _out_raw,
    _stdout_is_terminal,
    _UsageError,
)

if TYPE_CHECKING:
    from remote_bash._stdin import StdinSource
    from remote_bash.inventory import Inventory
    from remote_bash.models import CommandResult
    from remote_bash.redact import Redactor
    from remote_bash.session import RemoteBashSession


def _command_text(args: argparse.Namespace, example: str) -> str:
    words: list[str] | None = args.words
    if not words or not " ".join(words).strip():
        raise _UsageError(f"no command: put it after '--', e.g. {example}")
    return " ".join(words)


def _cmd_exec(ctx: _Context) -> int:
    command = _command_text(ctx.args, f"{PROG} exec web-1 -- uptime")
    with ctx.inventory() as inventory:
        name = _pick_host(inventory, ctx.args.host)
        return asyncio.run(_exec(ctx, inventory, name, command))


async def _exec(ctx: _Context, inventory: Inventory, name: str, command: str) -> int:
    session, redactor = await _session(ctx, inventory, name)
    as_json: bool = ctx.args.json
    echo = _Echo(redactor)
    result: CommandResult | None = None
    stdin = open_input(getattr(ctx.args, "no_stdin", False))
    try:
        result = await _run_one(session, command, ctx.args.timeout, None if as_json else echo.feed, stdin=stdin)
    finally:
        if not as_json:
            echo.finish(result)
        await session.close()
    if as_json:
        _out_json({"host": name, **result.model_dump(mode="json")})
    return _status(name, result)


async def _run_one(session: RemoteBashSession, command: str, deadline: float | None,
                   on_output: Callable[[str], None] | None, stdin: StdinSource | None = None) -> CommandResult:
    """Run one command (the session audits policy refusals, its gate host refusals); ``stdin``, the
    local input that is not a terminal, is the command's input, as ``ssh`` forwards it."""
    return await session.run(command, deadline, on_output=on_output, stdin=stdin)


class _Echo:
    """Streams a command's output to stdout, redacted as it goes.

    The session hands over the text Claude would read: escape sequences and control characters
    already stripped. On a terminal, what is left that a terminal could still act on (bidi and
    invisible format characters) is shown escaped; to a pipe or a file the text goes as it is.

    When the shell exits mid-call (``exit 3``), the session hands the last bytes it held back
    only to the result, not to ``on_output``: they are printed from the result here.
    """

    def __init__(self, redactor: Redactor) -> None:
        self.stream = redactor.stream()
        self.count = 0
        self.tail = ""
        self.write = _out if _stdout_is_terminal() else _out_raw

    def feed(self, text: str) -> None:
        self._write(self.stream.feed(text))

    def finish(self, result: CommandResult | None) -> None:
        self._write(self.stream.flush())
        if result is None or not result.shell_lost or result.truncated:
            return
        out, count = result.output, self.count
        if len(out) > count and out[count - len(self.tail) : count] == self.tail:
            self._write(out[count:])

    def _write(self, text: str) -> None:
        if text:
            self.write(text)
            self.count += len(text)
            self.tail = (self.tail + text)[-200:]


def _status(name: str, result: CommandResult) -> int:
    """The exit status for a command's result, with a line on stderr when it did not simply end."""
    status, line = _status_line(name, result)
    if line is not None:
        _err(line)
    return status


def _status_line(name: str, result: CommandResult) -> tuple[int, str | None]:
    """The exit status for a command's result, and the line for stderr when it did not simply end
    (or its end could not be audited: said on a line of its own, the status kept)."""
    status, line = _ending(name, result)
    if result.audit_error:
        audit = f"{PROG}: {name}: {_one_line(result.audit_error)}"
        line = audit if line is None else f"{line}\n{audit}"
    return status, line


def _ending(name: str, result: CommandResult) -> tuple[int, str | None]:
    if result.timed_out:
        line = f"{PROG}: {name}: the command did not finish within {result.timeout:g} s and was killed"
        if result.shell_lost:
            line += "; the shell went with it (its working directory, variables and functions are reset)"
        if result.kill is not None and result.kill.unchecked:
            # Strays that left the process tree: said here too, not only in --json and the audit log.
            line += f"; not checked: {_one_line(result.kill.unchecked)}"
        return EXIT_TIMEOUT, line
    if result.exit_code is None:
        return EXIT_ERROR, f"{PROG}: {name}: the shell ended abnormally (killed by a signal)"
    return result.exit_code, None
