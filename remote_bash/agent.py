"""The agent loop: Claude works on one host through the bash tool. The only module that imports anthropic.

:func:`run_agent` sends the task, runs every ``tool_use`` block of each reply in order through
:class:`BashTool` (and :class:`EditTool`) and answers them all in one user message, until Claude
ends its turn or a limit (turns, tokens, estimated cost) or Ctrl-C stops it. Every request, reply,
command and result goes to a JSONL transcript (``remote_bash.transcript``) as it happens, so a
crash leaves a transcript that ``resume=`` can continue from.

Instead of one host's session, a :class:`ToolSet` may be passed: the conversation then offers
those tools (any :class:`ToolHandler`, such as ``fleet.HostBashTool``) with that system prompt,
which is how ``fleet run --coordinator`` drives several hosts from one conversation.

This module never re-runs a command and never retries one: transient API errors are retried
by the SDK alone (``max_retries``), and a command whose result was never recorded is answered
with an error that says its effect is unknown.

:class:`BashTool` and :class:`EditTool` are the tools as the SDK's runner takes them: subclasses of
its ``BetaAsyncBuiltinFunctionTool``, as the SDK's own built-in tools are, that signal a failed call
with its ``ToolError`` and the whole result text. Their logic lives below, without the SDK
(``remote_bash.tool.BashHandler``, ``remote_bash.tools.edit.EditHandler``), for the MCP server and
the fleet, which never import anthropic.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import anthropic
from anthropic.lib.tools import BetaAsyncBuiltinFunctionTool, ToolError

from ._paths import private_dir, write_private
from .agent_models import (
    AgentConfig,
    AgentEvent,
    AgentOutcome,
    StopReason,
    TokenUsage,
    ToolSet,
    estimate_cost,
)
from .facts import describe
from .models import CommandResult
from .redact import Redactor
from .session import RemoteBashSession
from .tool import BashHandler
from .tools._base import Approver, ToolContract, ToolHandler
from .tools.edit import EditHandler
from .transcript import (
    AgentError,
    Transcript,
    add_user,
    answer_pending,
    block_param,
    default_transcript,
    default_transcript_dir,
    now,
    rebuild,
)

__all__ = [
    "AgentConfig",
    "AgentError",
    "AgentEvent",
    "AgentOutcome",
    "BashTool",
    "EditTool",
    "TokenUsage",
    "ToolHandler",
    "ToolSet",
    "default_transcript_dir",
    "estimate_cost",
    "run_agent",
]

async def _call_for_runner(tool: ToolContract, tool_input: object) -> str:
    """What the SDK's tool runner calls: the result text, or ToolError with the whole text for an error,
    so that the runner sends it as an is_error result, neither cut nor logged as a traceback."""
    text, is_error = await tool.answer(tool_input)
    if is_error:
        raise ToolError(text)
    return text


# The SDK types to_dict as its TypedDict of tool params, the handlers as the plain dict it is.
class BashTool(BashHandler, BetaAsyncBuiltinFunctionTool):  # type: ignore[misc]
    """Claude's bash tool (``bash_20250124``), backed by a persistent remote session.

    ``handle`` answers a ``tool_use`` block with its ``tool_result``; ``call`` is the SDK tool
    runner's entry point: ``client.beta.messages.tool_runner(tools=[BashTool(session)], ...)``. ::

        tool = BashTool(session)
        block = await tool.handle(tool_use_block)
    """

    async def call(self, input: object) -> str:
        return await _call_for_runner(self, input)


class EditTool(EditHandler, BetaAsyncBuiltinFunctionTool):  # type: ignore[misc]
    """Claude's text editor tool (``text_editor_20250728``), on the host of a remote bash session.

    ``handle`` answers a ``tool_use`` block with its ``tool_result``; ``call`` is the SDK tool
    runner's entry point. ::

        tool = EditTool(session)
        block = await tool.handle(tool_use_block)
    """

    async def call(self, input: object) -> str:
        return await _call_for_runner(self, input)


class _Watched:
    """Passes every call through to the session and keeps the last CommandResult, for the events."""

    def __init__(self, session: RemoteBashSession) -> None:
        self._session = session
        self.last: CommandResult | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    async def run(self, *args: Any, **kwargs: Any) -> CommandResult:
        self.last = None
        self.last = await self._session.run(*args, **kwargs)
        return self.last


async def run_agent(
    task: str,
    session: RemoteBashSession | ToolSet,
    config: AgentConfig,
    *,
    client: anthropic.AsyncAnthropic | None = None,
    on_event: Callable[[AgentEvent], None] | None = None,
    resume: Path | None = None,
    approver: Approver | None = None,
) -> AgentOutcome:
    """Have Claude carry out ``task`` on the session's host (with the bash tool), or with the tools
    of a :class:`ToolSet`; see the module docstring.

    With ``resume``, the conversation is rebuilt from that transcript and continued (``task``,
    when not empty, is added as a new instruction). Limits count this run only. Raises
    :class:`AgentError` when the API refuses a request for good; Ctrl-C returns an outcome
    whose ``stop_reason`` is ``interrupted``. ``approver`` is asked before a command the host's
    ``approve`` rules name is sent; without one, such a command is refused.
    """
    if resume is None and not task.strip():
        raise AgentError("the task is empty: say what Claude should do on the host")
    if client is not None:
        return await _run(task, session, config, client, on_event, resume, approver)
    # The client reads ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL; it is closed with the run.
    try:
        own = anthropic.AsyncAnthropic(max_retries=config.max_retries)
    except anthropic.CredentialsError as exc:
        raise AgentError(f"no usable Anthropic API credentials ({exc}); set ANTHROPIC_API_KEY") from exc
    async with own:
        if not (own.api_key or own.auth_token or getattr(own, "credentials", None)):
            raise AgentError("no Anthropic API credentials: set ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL "
                             "for a proxy)")
        return await _run(task, session, config, own, on_event, resume, approver)


async def _run(task: str, session: RemoteBashSession | ToolSet, config: AgentConfig,
               client: anthropic.AsyncAnthropic, on_event: Callable[[AgentEvent], None] | None,
               resume: Path | None, approver: Approver | None = None) -> AgentOutcome:
    if isinstance(session, ToolSet):
        system = _prompt_blocks(session.system_prompt, config.system_extra)
        name, user = session.name, None
        tools: list[dict[str, Any]] = [t.to_dict() for t in session.tools]
    else:
        if session.info is None:
            await session.start()
        system = _system_blocks(session, config.system_extra, config.tools)
        name, user = session.host.name, session.info.user if session.info else None
        tools = [t.to_dict() for t in _host_tools(session, config, None)]
    # The session's redactor (with its host's patterns and known secrets); for a set of tools
    # over many hosts, the built-in secret formats.
    # Every string of a transcript may be a command (Claude's tool inputs): masked as one is, its
    # backslash-newline continuations joined where that shows a secret.
    redact = session.redact_command if isinstance(session, RemoteBashSession) else Redactor().redact_command
    transcript, messages = await asyncio.to_thread(_prepare, task, name, user, tools, config, system, resume,
                                                   redact)
    loop = _Loop(session, config, client, on_event or (lambda event: None), transcript, messages, system,
                 approver)
    try:
        return await loop.run()
    finally:
        transcript.close()


def _prepare(task: str, host: str, user: str | None, tools: list[dict[str, Any]], config: AgentConfig,
             system: list[dict[str, Any]], resume: Path | None,
             redact: Callable[[str], str]) -> tuple[Transcript, list[dict[str, Any]]]:
    """Open the transcript and build the first messages: the task, or the resumed conversation."""
    if resume is None:
        transcript = Transcript(config.transcript or default_transcript(host), redact)
        transcript.write("meta", task=task, host=host, model=config.model, started=now(), user=user,
                         system=system, tools=tools)
        return transcript, [{"role": "user", "content": task}]
    messages, records = rebuild(resume, host)
    path = config.transcript or resume
    if path.resolve() != resume.resolve():
        private_dir(path.parent, what="transcripts")
        write_private(path, resume.read_bytes(), what="the transcript")
    transcript = Transcript(path, redact)
    transcript.write("resume", host=host, model=config.model, started=now(), task=task or None)
    answer_pending(messages, records, transcript)
    note = task if task.strip() else ""
    if not note and messages[-1]["role"] == "assistant":
        note = "The run was resumed. Carry on with the task if it is not finished; otherwise summarize."
    if note:
        add_user(messages, [{"type": "text", "text": note}])
        transcript.write("user", content=[{"type": "text", "text": note}])
    return transcript, messages


class _Loop:
    """One run: request, run the tools, answer, until a stop."""

    def __init__(self, session: RemoteBashSession | ToolSet, config: AgentConfig,
                 client: anthropic.AsyncAnthropic, emit: Callable[[AgentEvent], None], transcript: Transcript,
                 messages: list[dict[str, Any]], system: list[dict[str, Any]],
                 approver: Approver | None = None) -> None:
        self.config = config
        self.client = client
        self.emit = emit
        self.transcript = transcript
        self.messages = messages
        self.system = system
        self.usage = TokenUsage()
        self.turns = 0
        self.final_text = ""
        self.current_id: str | None = None
        handlers: Sequence[ToolHandler]
        if isinstance(session, ToolSet):
            self.watched: _Watched | None = None
            handlers = session.tools
        else:
            self.watched = _Watched(session)
            handlers = _host_tools(session, config, self, approver)
        self.tools = {t.name: t for t in handlers}
        self.tool_defs = [t.to_dict() for t in handlers]

    def _on_output(self, chunk: str) -> None:
        self.emit(AgentEvent("output", text=chunk, tool_use_id=self.current_id))

    @property
    def cost(self) -> float:
        return estimate_cost(self.config.model, self.usage)

    async def run(self) -> AgentOutcome:
        try:
            while True:
                limit = self._limit_reached()
                if limit is not None:
                    return self._stop(*limit)
                message = await self._request()
                content = message["content"]
                self.final_text = "".join(b.get("text", "") for b in content if b.get("type") == "text")
                uses = [b for b in content if b.get("type") == "tool_use"]
                stop_reason = message.get("stop_reason")
                if stop_reason != "tool_use" or not uses:
                    return self._stop(*_claude_stop(stop_reason))
                results = [await self._run_tool(block) for block in uses]
                self.transcript.write("tool_results", content=results)
                add_user(self.messages, results)
        except (asyncio.CancelledError, KeyboardInterrupt) as exc:
            # Ctrl-C: session.run has already killed the remote command. Record the stop and
            # report it as an outcome, taking the cancellation back so the task's count stays right.
            task = asyncio.current_task()
            if isinstance(exc, asyncio.CancelledError) and task is not None:
                task.uncancel()
            return self._stop("interrupted", "interrupted (Ctrl-C); any running command was killed")

    def _limit_reached(self) -> tuple[StopReason, str] | None:
        if self.turns >= self.config.max_turns:
            return "max_turns", f"stopped after {self.turns} turns (max_turns)"
        budget = self.config.token_budget
        if budget is not None and self.usage.total >= budget:
            return "token_budget", f"stopped: {self.usage.total:,} tokens used, budget {budget:,}"
        cost_budget = self.config.cost_budget_usd
        if cost_budget is not None and self.cost >= cost_budget:
            return ("cost_budget",
                    f"stopped: about ${self.cost:.4f} spent (estimate), budget ${cost_budget:.4f}")
        return None

    def _stop(self, reason: StopReason, why: str) -> AgentOutcome:
        outcome = AgentOutcome(stop_reason=reason, message=why, turns=self.turns, usage=self.usage,
                               cost_usd=self.cost, transcript=self.transcript.path,
                               final_text=self.final_text)
        self.transcript.write("stop", stop_reason=reason, message=why, turns=self.turns,
                              usage=self.usage.model_dump(), cost_usd=round(self.cost, 6))
        self.emit(AgentEvent("stop", text=why, usage=self.usage, cost_usd=self.cost))
        return outcome

    async def _request(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.config.model,
            "max_tokens": self.config.max_tokens,
            "system": self.system,
            "tools": self.tool_defs,
            # Only valid text can be sent: a lone surrogate (in a tool_use id Claude made, say)
            # goes as U+FFFD, the same in the tool_use and in its result.
            "messages": _valid_text(_with_cache_breakpoint(self.messages)),
        }
        self.turns += 1
        self.transcript.write("request", turn=self.turns, model=self.config.model,
                              max_tokens=self.config.max_tokens, messages=len(self.messages))
        try:
            async with self.client.messages.stream(**params) as stream:
                async for event in stream:
                    if event.type == "text":
                        self.emit(AgentEvent("text", text=event.text))
                reply = await stream.get_final_message()
        except (anthropic.APIError, ValueError) as exc:
            # ValueError: a response the SDK could not read (a tool input that is not JSON).
            text = (_api_error_text(exc, self.config, self.transcript.path) if isinstance(exc, anthropic.APIError)
                    else f"the Messages API's response could not be read ({exc}); nothing of it was run. "
                         f"Transcript: {self.transcript.path}")
            error = AgentError(text, transcript=self.transcript.path)
            self.transcript.write("error", turn=self.turns, error=error.message,
                                  status=getattr(exc, "status_code", None))
            self.emit(AgentEvent("error", text=error.message))
            raise error from exc
        message = reply.model_dump(mode="json", exclude_none=True)
        self.transcript.write("response", turn=self.turns, message=message)
        self.messages.append({"role": "assistant", "content": [block_param(b) for b in message["content"]]})
        self.usage.add(reply.usage)
        self.emit(AgentEvent("usage", usage=self.usage.model_copy(), cost_usd=self.cost))
        return message

    async def _run_tool(self, block: dict[str, Any]) -> dict[str, Any]:
        tool_input = block.get("input")
        command = tool_input.get("command") if isinstance(tool_input, dict) else None
        tool = block.get("name")
        if isinstance(tool_input, dict) and isinstance(tool_input.get("path"), str):
            command = f"{command} {tool_input['path']}"  # an editor: what it does, and where
        if not isinstance(command, str) and not (isinstance(tool_input, dict) and tool_input.get("restart") is True):
            # Not a command and not a restart (the only event with no command): show what was sent.
            command = "(input: " + json.dumps(tool_input, ensure_ascii=True, default=str)[:200] + ")"
        self.current_id = block["id"]
        self.emit(AgentEvent("command", tool_use_id=block["id"], tool=tool,
                             command=command if isinstance(command, str) else None))
        started = time.monotonic()
        if self.watched is not None:
            self.watched.last = None
        handler = self.tools.get(block.get("name", ""))
        try:
            result = await handler.handle(block) if handler is not None else self._unknown_tool(block)
        except (asyncio.CancelledError, KeyboardInterrupt):
            self.transcript.write("command", tool_use_id=block["id"], input=tool_input, interrupted=True,
                                  duration=round(time.monotonic() - started, 3))
            raise
        finally:
            self.current_id = None
        duration = time.monotonic() - started
        ran = self.watched.last if self.watched is not None else None
        exit_code = ran.exit_code if ran is not None else None
        self.transcript.write("command", tool_use_id=block["id"], name=block.get("name"), input=tool_input,
                              exit_code=exit_code, timed_out=ran.timed_out if ran is not None else None,
                              duration=round(duration, 3), result=result)
        self.emit(AgentEvent("result", text=str(result["content"]), tool_use_id=block["id"], tool=tool,
                             command=command if isinstance(command, str) else None,
                             is_error=bool(result["is_error"]), exit_code=exit_code, duration=duration))
        return result


    def _unknown_tool(self, block: dict[str, Any]) -> dict[str, Any]:
        names = ", ".join(repr(n) for n in self.tools)
        return {"type": "tool_result", "tool_use_id": block["id"], "is_error": True,
                "content": f"Error: unknown tool {block.get('name')!r}; the tools here are: {names}."}


def _host_tools(session: RemoteBashSession, config: AgentConfig, loop: _Loop | None,
                approver: Approver | None = None) -> list[ToolHandler]:
    """The tools of one host's conversation, in the order the config names them."""
    handlers: list[ToolHandler] = []
    for name in dict.fromkeys(config.tools):
        if name == "bash":
            watched = cast(RemoteBashSession, loop.watched) if loop is not None else session
            handlers.append(BashTool(watched, on_output=loop._on_output if loop is not None else None,
                                     approver=approver))
        else:
            handlers.append(EditTool(session, approver=approver))
    return handlers


def _system_blocks(session: RemoteBashSession, extra: str | None, tools: Sequence[str] = ("bash",)) -> list[
        dict[str, Any]]:
    host = session.host
    info = session.info
    # What the host reports is checked and marked as data: a hostile host must not write here.
    reported = describe(info.user, info.os, info.bash_version) if info else describe(None, None, None)
    editor = ""
    if "edit" in tools:
        editor = ("\n- Change files with the text editor tool (view, create, str_replace, insert; absolute "
                  "paths): it works on the same host, writes atomically and keeps modes and line endings. "
                  "Prefer it to sed -i or heredocs.")
    through = "the bash tool" if "edit" not in tools else "the bash tool and the text editor tool"
    if "bash" not in tools:
        through = "the text editor tool"
    prompt = f"""\
You are working on a real machine over SSH, through {through}.

Host: {host.name} ({host.hostname}), as named in the operator's inventory.
{reported}.
Every command runs on that host, in one persistent bash session: the working directory, \
variables and functions carry over from one command to the next. {{"restart": true}} gives a \
clean shell.

Rules:
- Each command must finish within {host.command_timeout:g} s (never more than \
{host.max_timeout:g} s). One that runs longer is killed with everything it started, and \
reported as an error. Start long jobs in the background with their output in a file \
(nohup ... > /tmp/job.log 2>&1 &) and check on them.
- Output is cut to {host.output_limit:,} characters (the start and the end are kept): narrow \
it with grep, head, tail or wc.
- A command policy may refuse a command before it runs; the refusal names the rule. Do not \
try to get around it: do the work another way, or say what you would need.
- Nothing can answer a prompt: no editors, pagers, password or confirmation prompts. Use \
non-interactive forms (-y, --no-pager, PAGER=cat, sudo -n, DEBIAN_FRONTEND=noninteractive).
- This is a real machine, maybe in production. Look before you change anything, prefer \
reversible steps, back up a file before you edit it, and do not delete, stop or restart \
anything the task does not need.{editor}
- When the task is done, or cannot be done, answer without calling the tool: say what you \
found and what you changed."""
    return _prompt_blocks(prompt, extra)


def _prompt_blocks(prompt: str, extra: str | None) -> list[dict[str, Any]]:
    """The system prompt as text blocks, the cache breakpoint on the last one."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": prompt}]
    if extra:
        blocks.append({"type": "text", "text": extra})
    blocks[-1] = {**blocks[-1], "cache_control": {"type": "ephemeral"}}
    return blocks


def _with_cache_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with a cache breakpoint on the last block, so each turn reads the previous
    turns from the cache; the stored messages stay unmarked."""
    last = messages[-1]
    content = last["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    blocks[-1] = {**blocks[-1], "cache_control": {"type": "ephemeral"}}
    return [*messages[:-1], {**last, "content": blocks}]


def _claude_stop(reason: str | None) -> tuple[StopReason, str]:
    if reason == "end_turn":
        return "end_turn", "Claude finished"
    if reason == "max_tokens":
        return "max_tokens", "stopped: the reply hit max_tokens and was cut off (raise it, then resume)"
    if reason in ("stop_sequence", "refusal", "pause_turn"):
        return cast(StopReason, reason), f"stopped: Claude's reply ended with stop_reason {reason}"
    return "other", f"stopped: Claude's reply ended with stop_reason {reason!r} and no command to run"


def _api_error_text(exc: anthropic.APIError, config: AgentConfig, transcript: Path) -> str:
    tail = f"The transcript is in {transcript}."
    if isinstance(exc, anthropic.APIConnectionError):
        return (f"could not reach the Anthropic API ({exc.message}) after the SDK's retries: check the "
                f"network or ANTHROPIC_BASE_URL, then resume. {tail}")
    status = getattr(exc, "status_code", None)
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error") if isinstance(body.get("error"), dict) else body
    kind = error.get("type", "error") if isinstance(error, dict) else "error"
    detail = error.get("message", "") if isinstance(error, dict) else ""
    said = f"{status} {kind}: {detail}" if status and status != 200 else f"{kind}: {detail}"
    if isinstance(exc, anthropic.AuthenticationError):
        hint = "check ANTHROPIC_API_KEY"
    elif isinstance(exc, anthropic.PermissionDeniedError):
        hint = f"the key may not use model {config.model!r}"
    elif isinstance(exc, anthropic.NotFoundError):
        hint = f"check the model id {config.model!r} (REMOTE_BASH_MODEL) and ANTHROPIC_BASE_URL"
    elif isinstance(exc, anthropic.BadRequestError):
        hint = "the request was invalid; it will fail again unchanged"
    elif status == 200 or (isinstance(status, int) and (status == 429 or status >= 500)):
        hint = "the API stayed busy or failed after the SDK's retries: wait, then resume"
    else:
        hint = "see the API's message"
    return f"the Anthropic API refused the request ({said.rstrip(': ')}); {hint}. {tail}"


_SURROGATE = re.compile("[\ud800-\udfff]")


def _valid_text(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings replaced by U+FFFD."""
    if isinstance(value, str):
        return value if value.isascii() else _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {k: _valid_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_valid_text(v) for v in value]
    return value
