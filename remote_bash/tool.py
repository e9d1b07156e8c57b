"""The bash tool contract (``bash_20250124``): a ``tool_use`` input in, a ``tool_result`` out.

``BashHandler.handle`` never raises for anything Claude can cause: a bad input, a failing or
timed-out command, a refused command, a lost shell or connection all come back as a
``tool_result`` with ``is_error: true`` and a sentence that says what happened.

What this module must never do: import anthropic. ``remote_bash.BashTool`` (in
``remote_bash.agent``) is this tool as the SDK's tool runner takes it; the MCP server, the hub
and the fleet use :class:`BashHandler` and :func:`run_bash_input` without the SDK.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import AccessDenied, AuditError, ConnectError, ConnectionLost, RemoteBashError
from .models import CommandResult
from .session import RemoteBashSession
from .tools._base import Approver, SessionTool, ask_approval, tool_result

__all__ = ["MAX_COMMAND_CHARS", "TOOL_NAME", "TOOL_TYPE", "Approver", "BashHandler", "format_result",
           "run_bash_input"]

TOOL_TYPE = "bash_20250124"
TOOL_NAME = "bash"
MAX_COMMAND_CHARS = 1_000_000
_SURROGATE = re.compile("[\ud800-\udfff]")


def format_result(result: CommandResult) -> tuple[str, bool]:
    """The tool_result text for a command's result, and whether it is an error."""
    text = result.output
    if result.timed_out:
        note = f"Error: the command did not finish within {result.timeout:g} s and was killed"
        if result.kill is not None:
            if result.shell_lost and not result.kill.shell_replaced:
                note += ("; the shell ended with it, so a new one will be started and the working directory, "
                         "variables and functions are reset")
            elif result.kill.shell_replaced:
                note += ("; the shell had to be replaced (it was stuck, or the deadline came inside a shell "
                         "function), so cwd, variables and functions were reset")
            elif result.kill.signals:
                note += f" (signals sent: {', '.join(result.kill.signals)})"
            if result.kill.survivors:
                note += f"; {result.kill.survivors} of its processes could not be killed"
            if result.kill.unchecked:
                note += f"; not checked: {result.kill.unchecked}"
        note += ". Output so far is above." if text else ". It printed nothing."
        return _join(text, note), True
    if result.shell_lost:
        how = (f"with status {result.exit_code}" if result.exit_code is not None else "abnormally")
        note = (f"Error: the shell exited {how} (exit, exec, a fatal signal or set -e); a new one will be "
                "started for the next command, so the working directory, variables and functions are reset.")
        return _join(text, note), True
    if result.exit_code != 0:
        return _join(text, f"Exit status {result.exit_code}"), True
    return text if text else "(no output)", False


def _join(text: str, note: str) -> str:
    if not text:
        return note
    return f"{text}{note}" if text.endswith("\n") else f"{text}\n{note}"


@dataclass(eq=False, kw_only=True)
class BashHandler(SessionTool):
    """Claude's bash tool on a persistent remote session, without the anthropic SDK: what the MCP
    server and the fleet's ``remote_bash`` tool run, and what ``remote_bash.BashTool`` (the same tool
    for the SDK's tool runner) is built on. Each call is :func:`run_bash_input`."""

    tool_type, tool_name = TOOL_TYPE, TOOL_NAME
    on_output: Callable[[str], None] | None = None
    """Gets the command's output as it comes."""

    async def run(self, tool_input: object, *, tool_use_id: str | None) -> dict[str, Any]:
        """Validate the input, run it, and build the tool_result (tool_use_id filled by handle)."""
        return await run_bash_input(self.session, tool_input, tool_use_id=tool_use_id, timeout=self.timeout,
                                    on_output=self.on_output, approver=self.approver)


async def run_bash_input(
    session: RemoteBashSession,
    tool_input: object,
    *,
    tool_use_id: str | None,
    timeout: float | None = None,
    on_output: Callable[[str], None] | None = None,
    approver: Approver | None = None,
) -> dict[str, Any]:
    """The bash tool's contract on one input: validate, ask for approval where the host's rules say
    so, run, and build the ``tool_result`` (never raises for anything Claude can cause)."""
    problem = _check_input(tool_input)
    if problem:
        return tool_result(tool_use_id, f"Error: {problem}", True)
    assert isinstance(tool_input, Mapping)
    if tool_input.get("restart") is True:
        return await _restart(session, tool_use_id)
    command = tool_input["command"]
    try:
        refusal = await ask_approval(session, command, tool_use_id, approver)
        if refusal is not None:
            return tool_result(tool_use_id, refusal, True)
        result = await session.run(command, timeout, tool_use_id=tool_use_id, on_output=on_output)
    except AccessDenied as exc:  # already audited by the session or its gate
        said = exc.message if exc.message.startswith("refused before") else f"refused before running: {exc.message}"
        return tool_result(tool_use_id, f"Error: {said}", True)
    except AuditError as exc:
        return tool_result(tool_use_id, f"Error: not run, because it could not be audited: {exc.message}", True)
    except ConnectionLost as exc:
        text = exc.partial_output
        note = (f"Error: {exc.message}")
        return tool_result(tool_use_id, _join(text, note), True)
    except ConnectError as exc:
        return tool_result(tool_use_id, f"Error: could not reach the host: {exc.message}", True)
    except RemoteBashError as exc:
        return tool_result(tool_use_id, f"Error: {exc.message}", True)
    text, is_error = format_result(result)
    return tool_result(tool_use_id, text, is_error)


async def _restart(session: RemoteBashSession, tool_use_id: str | None) -> dict[str, Any]:
    try:
        info = await session.restart()
    except RemoteBashError as exc:
        return tool_result(tool_use_id, f"Error: the restart failed: {exc.message}", True)
    kill = session.last_kill
    stopped = ("every process of the old one was stopped." if kill is None or not kill.unchecked
               else f"the old one's processes were stopped, but not all could be checked: {kill.unchecked}.")
    return tool_result(
        tool_use_id,
        f"The bash session was restarted: a new shell (pid {info.shell_pid}, bash {info.bash_version}) "
        f"with a clean working directory and environment; {stopped}",
        False,
    )


def _check_input(tool_input: object) -> str | None:
    if not isinstance(tool_input, Mapping):
        return f"the tool input must be an object with 'command' or 'restart', got {type(tool_input).__name__}"
    unknown = sorted(set(tool_input) - {"command", "restart"})
    if unknown:
        return f"unknown input field(s) {', '.join(map(repr, unknown))}; the bash tool takes 'command' or 'restart'"
    restart = tool_input.get("restart")
    if restart is not None and not isinstance(restart, bool):
        return f"'restart' must be true or false, got {type(restart).__name__}"
    if restart is True:
        return None
    if "command" not in tool_input:
        return "the input has no 'command' (and 'restart' is not true)"
    command = tool_input["command"]
    if not isinstance(command, str):
        return f"'command' must be a string, got {type(command).__name__}"
    if not command.strip():
        return "'command' is empty"
    if "\x00" in command:
        return "'command' contains a NUL byte, which bash cannot pass on"
    if _SURROGATE.search(command):
        return "'command' contains a lone surrogate code point (not valid UTF-8 text); send plain text"
    if len(command) > MAX_COMMAND_CHARS:
        return (f"'command' is {len(command):,} characters; the limit is {MAX_COMMAND_CHARS:,}. "
                "Write long scripts to a file in steps")
    return None

