"""The bash tool contract (``bash_20250124``): a ``tool_use`` input in, a ``tool_result`` out.

``BashTool.handle`` never raises for anything Claude can cause: a bad input, a failing or
timed-out command, a refused command, a lost shell or connection all come back as a
``tool_result`` with ``is_error: true`` and a sentence that says what happened.

``BashTool`` also serves as a tool object for the anthropic SDK's tool runner
(``client.beta.messages.tool_runner``): ``remote_bash.agent`` registers it with the SDK, so
this module itself never imports anthropic.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from .errors import AccessDenied, AuditError, ConnectError, ConnectionLost, RemoteBashError
from .models import CommandResult
from .session import RemoteBashSession

if TYPE_CHECKING:
    from .approval import Approval, Need
    from .models import Host

Approver = Callable[["Host", str, "Need"], Awaitable["Approval"]]
"""Asks a person whether ``command`` may run on the host, and returns their answer."""

__all__ = ["Approver", "BashTool", "ToolCallFailed", "format_result", "run_bash_input"]

TOOL_TYPE = "bash_20250124"
TOOL_NAME = "bash"
MAX_COMMAND_CHARS = 1_000_000
_SURROGATE = re.compile("[\ud800-\udfff]")


class ToolCallFailed(RemoteBashError):
    """Raised by ``BashTool.call`` (the SDK runner's entry point) for an is_error result.

    Its repr is its message, so a runner that shows ``repr(exc)`` shows a clean sentence.
    """

    def __repr__(self) -> str:
        return self.message


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
                note += "; the shell itself was stuck and was replaced, so cwd, variables and functions were reset"
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


class BashTool:
    """Claude's bash tool, backed by a persistent remote session.

    ::

        tool = BashTool(session)
        block = await tool.handle(tool_use_block)
    """

    def __init__(self, session: RemoteBashSession, *, timeout: float | None = None,
                 on_output: Callable[[str], None] | None = None, approver: Approver | None = None) -> None:
        self.session = session
        self.timeout = timeout
        self.on_output = on_output
        self.approver = approver
        _register_with_sdk()

    # The tool as the anthropic SDK's runner sees it.
    @property
    def name(self) -> str:
        return TOOL_NAME

    def to_dict(self) -> dict[str, Any]:
        """The tool definition sent to the Messages API."""
        return {"type": TOOL_TYPE, "name": TOOL_NAME}

    async def call(self, input: object) -> str:
        """The runner's entry point: the result text, or ToolCallFailed for an is_error result."""
        block = await self.run(input, tool_use_id=None)
        if block["is_error"]:
            raise ToolCallFailed(block["content"], host=None)
        return str(block["content"])

    async def handle(self, tool_use: Any) -> dict[str, Any]:
        """Run one ``tool_use`` block (an SDK object or a dict) and return its ``tool_result``."""
        tool_use_id = _get(tool_use, "id")
        name = _get(tool_use, "name")
        if not isinstance(tool_use_id, str) or not tool_use_id:
            raise ValueError("a tool_use block needs a non-empty string id")
        if name not in (None, TOOL_NAME):
            return _result(tool_use_id, f"Error: unknown tool {name!r}; the only tool here is 'bash'.", True)
        block = await self.run(_get(tool_use, "input"), tool_use_id=tool_use_id)
        block["tool_use_id"] = tool_use_id
        return block

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
        return _result(tool_use_id, f"Error: {problem}", True)
    assert isinstance(tool_input, Mapping)
    if tool_input.get("restart") is True:
        return await _restart(session, tool_use_id)
    command = tool_input["command"]
    try:
        refusal = await _approve(session, command, tool_use_id, approver)
        if refusal is not None:
            return _result(tool_use_id, refusal, True)
        result = await session.run(command, timeout, tool_use_id=tool_use_id, on_output=on_output)
    except AccessDenied as exc:  # already audited by the session or its gate
        return _result(tool_use_id, f"Error: refused before running: {exc.message}", True)
    except AuditError as exc:
        return _result(tool_use_id, f"Error: not run, because it could not be audited: {exc.message}", True)
    except ConnectionLost as exc:
        text = exc.partial_output
        note = (f"Error: {exc.message}")
        return _result(tool_use_id, _join(text, note), True)
    except ConnectError as exc:
        return _result(tool_use_id, f"Error: could not reach the host: {exc.message}", True)
    except RemoteBashError as exc:
        return _result(tool_use_id, f"Error: {exc.message}", True)
    text, is_error = format_result(result)
    return _result(tool_use_id, text, is_error)


async def _approve(session: RemoteBashSession, command: str, tool_use_id: str | None,
                   approver: Approver | None) -> str | None:
    """Ask for a person's yes when the host's approval rules name the command; the refusal text, or None.

    The question and the answer are both audited before anything is sent (AuditError stops the call).
    """
    from .approval import Approval, approval_needed

    need = approval_needed(command, session.host)
    if need is None:
        return None
    await session.audit("approval.asked", strict=True, command=command, tool_use_id=tool_use_id, rule=need.rule,
                         reason=need.reason)
    if approver is None:
        answer = Approval(False, "unavailable", reason="nobody can be asked here (no approver is configured)")
    else:
        answer = await approver(session.host, command, need)
    await session.audit("approval.answered", strict=True, command=command, tool_use_id=tool_use_id, rule=need.rule,
                         approved=answer.approved, how=answer.how, by=answer.by or None,
                         minutes=answer.minutes or None, reason=answer.reason or None)
    if answer.approved:
        return None
    why = f": {answer.reason}" if answer.reason else ""
    return (f"Error: not run. On {session.host.name} this command needs a person's approval ({need.reason}), "
            f"and it was not given ({answer.how}{why}). Do not retry it unchanged; ask the user or take "
            "another way.")


async def _restart(session: RemoteBashSession, tool_use_id: str | None) -> dict[str, Any]:
    try:
        info = await session.restart()
    except RemoteBashError as exc:
        return _result(tool_use_id, f"Error: the restart failed: {exc.message}", True)
    kill = session.last_kill
    stopped = ("every process of the old one was stopped." if kill is None or not kill.unchecked
               else f"the old one's processes were stopped, but not all could be checked: {kill.unchecked}.")
    return _result(
        tool_use_id,
        f"The bash session was restarted: a new shell (pid {info.shell_pid}, bash {info.bash_version}) "
        f"with a clean working directory and environment; {stopped}",
        False,
    )


_registered = False


def _register_with_sdk() -> None:
    """Make the SDK's tool runner accept BashTool. The registration lives in ``agent`` (the one
    module that imports anthropic); it is imported here, lazily, only when the SDK is installed."""
    global _registered
    if _registered:
        return
    _registered = True
    import importlib.util

    if importlib.util.find_spec("anthropic") is not None:
        importlib.import_module("remote_bash.agent")


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


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


def _result(tool_use_id: str | None, content: str, is_error: bool) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}
