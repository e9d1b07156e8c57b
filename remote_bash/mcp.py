"""``remote-bash mcp``: persistent, audited remote shells for any MCP client.

The only module that imports the MCP SDK. It exposes the hub's hosts as three tools: ``bash``
(one persistent session per host for the life of the server, the same text and error flag Claude
gets from :class:`~remote_bash.tool.BashHandler`), ``edit`` (the text editor tool on the same host and
connection, as :class:`~remote_bash.tools.edit.EditHandler`) and ``hosts`` (what may be reached).
Everything else (the gate, the policy, redaction, limits, the audit log) is the session's,
unchanged; audit records written during a call name the client.

A command the host's ``approve`` rules name is asked about through the client (MCP elicitation:
in-call on handshake-era connections, as an input-required round on 2026-era ones) and refused,
saying why, when the client cannot ask or nobody answers in time. A client's cancellation kills
the remote command as Ctrl-C does; the kill runs shielded, so its audit records are written.

It must never print anything but protocol on stdout: logs go to stderr.
"""
# No `from __future__ import annotations`: the SDK reads the tools' annotations at run time, and
# they name functions local to build_server.



import asyncio
import contextlib
import hmac
import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import anyio
import mcp_types as types
from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit, ElicitationResult, MCPServer, Resolve
from pydantic import BaseModel, Field

from .access import Gate
from .approval import Approval, Grants, Need, approval_needed
from .errors import RemoteBashError
from .hub import CLIENT, SessionHub
from .models import Host
from .terminal import escape, escape_json
from .tools.edit import approval_text

__all__ = ["build_server", "serve_http", "serve_stdio"]

log = logging.getLogger("remote_bash.mcp")

_PROGRESS_EVERY = 1.0
_PROGRESS_TAIL = 2000
_KILL_WAIT = 60.0

BASH_DESCRIPTION = (
    "Run a bash command in a persistent shell on a remote host over SSH. Each host has one long-lived "
    "session: the working directory, environment variables and shell functions persist between calls. "
    "stdin is /dev/null and there is no terminal, so interactive programs (vim, less, password prompts) "
    "cannot be used; pass non-interactive flags (-y, --no-pager). Output is stdout and stderr together; "
    "very long output is cut in the middle. A command that outruns its timeout is killed on the host and "
    "the session stays usable. Set restart=true to get a fresh shell. Some commands need a person's "
    "approval before they run; a refusal says why. Call the hosts tool to see which hosts can be used."
)
EDIT_DESCRIPTION = (
    "View, create and edit text files on a remote host, on the same host and connection as the bash "
    "tool. view shows a file's lines numbered (or a directory two levels deep); create writes a new file "
    "(never over an existing one); str_replace replaces one exact, unique occurrence of old_str; insert "
    "adds text after a line. Paths are absolute. Writes are atomic and keep the file's mode, owner, line "
    "endings and final newline. Prefer it to sed -i or heredocs. Some writes need a person's approval."
)
HOSTS_DESCRIPTION = (
    "List the hosts this server may select: name, address, user, groups, labels, jump hosts, and whether "
    "it can be reached (a host whose jump host may not be reached cannot; the reason is given). An "
    "optional host pattern narrows the list (a name, a group, 'web-*', 'env=staging', 'web:&env=prod')."
)


class ApprovalForm(BaseModel):
    """What the person answering is asked to fill in."""

    decision: Literal["run once", "allow for minutes", "refuse"] = Field(
        description="Run this exact command once, allow this exact command on this host for a while, or refuse")
    minutes: int = Field(default=15, ge=1, le=1440, description="With 'allow for minutes': for how long")
    reason: str = Field(default="", max_length=500, description="With 'refuse': why (the model is told)")


class _Settings:
    def __init__(self, approve: bool, approve_timeout: float) -> None:
        self.approve = approve
        self.approve_timeout = approve_timeout
        self.grants = Grants()


def build_server(hub: SessionHub, *, approve: bool = True, approve_timeout: float = 300.0,
                 name: str = "remote-bash") -> MCPServer:
    """An MCP server whose tools work on ``hub``'s hosts. ``approve=False`` skips approval questions
    (the operator's explicit decision, recorded as ``how: all`` in the audit log)."""
    settings = _Settings(approve, approve_timeout)

    @contextlib.asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[None]:
        reaper = asyncio.ensure_future(hub.run_reaper())
        try:
            yield None
        finally:
            reaper.cancel()
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(asyncio.CancelledError):
                    await reaper
                await hub.aclose()

    server: MCPServer[Any] = MCPServer(name, instructions=BASH_DESCRIPTION, lifespan=lifespan, log_level="WARNING")
    logging.getLogger("asyncssh").setLevel(logging.WARNING)

    async def ask(ctx: Context, host: str | None, text: str) -> Any:
        """Whether a person must be asked about ``text`` on ``host`` (the rules read shell text), and
        the asking: an :class:`Approval`, an ``Elicit`` for a later round, or None (no question)."""
        try:
            target = hub.resolve(host)
        except RemoteBashError:
            return None  # the tool body reports it
        need = approval_needed(text, target)
        if need is None:
            return None
        client = _client_name(ctx)
        if not settings.approve:
            return Approval(True, "all", by="operator (--no-approve)")
        if settings.grants.covers(target.name, text):
            return Approval(True, "granted", by=client)
        caps = ctx.client_capabilities
        if caps is None or caps.elicitation is None:
            return Approval(False, "unavailable", reason=f"the MCP client ({client}) cannot ask a person "
                                                         "(it does not support elicitation)")
        message = _question(target, text, need)
        if ctx.protocol_version in _modern_versions():
            return Elicit(message, ApprovalForm)  # answered in a later round of the same call
        with anyio.move_on_after(settings.approve_timeout):
            try:
                answer = await ctx.elicit(message, ApprovalForm)
            except Exception as exc:  # the client failed to ask: fail closed, saying so
                return Approval(False, "unavailable", reason=f"the client could not ask ({exc})")
            return _to_approval(answer, client, settings, target.name, text)
        return Approval(False, "timeout", reason=f"nobody answered within {settings.approve_timeout:g} s")

    async def approval(ctx: Context, command: str | None = None, host: str | None = None,
                       restart: bool | None = None) -> Any:
        """Decides, before the bash tool's body runs, whether a person must be asked, and asks."""
        if restart or not isinstance(command, str):
            return None
        return await ask(ctx, host, command)

    async def edit_approval(ctx: Context, command: str | None = None, path: str | None = None,
                            host: str | None = None) -> Any:
        """The same for an edit: a write is put to the rules as the shell text of what it does."""
        if not isinstance(command, str) or not isinstance(path, str):
            return None
        text = approval_text({"command": command, "path": path})
        return None if text is None else await ask(ctx, host, text)

    @server.tool(name="bash", description=BASH_DESCRIPTION)
    async def bash(
        ctx: Context,
        asked: Annotated[ElicitationResult[Any], Resolve(approval)],
        command: Annotated[str | None, Field(description="The bash command to run")] = None,
        host: Annotated[str | None, Field(
            description="The host to run it on (a name from the hosts tool); may be left out when only "
                        "one host is selectable")] = None,
        restart: Annotated[bool | None, Field(
            description="true to replace this host's shell with a fresh one (cwd, variables reset)")] = None,
        timeout: Annotated[float | None, Field(
            description="Seconds before the command is killed (default: the host's; capped by the host's "
                        "max_timeout)", gt=0)] = None,
    ) -> types.CallToolResult:
        client = _client_name(ctx)
        CLIENT.set(client)
        decided = _decision(asked, client, settings, host, command, hub)
        tool_input: dict[str, Any] = {}
        if command is not None:
            tool_input["command"] = command
        if restart is not None:
            tool_input["restart"] = restart

        async def approver(target: Host, cmd: str, need: Need) -> Approval:
            return decided or Approval(False, "unavailable", reason="no answer was recorded")

        progress = _Progress(ctx) if _progress_token(ctx) is not None else None
        call = asyncio.ensure_future(hub.bash(
            host, tool_input, tool_use_id=f"mcp-{ctx.request_id}", timeout=timeout,
            on_output=progress.feed if progress else None, approver=approver))
        ticker = asyncio.ensure_future(progress.run()) if progress else None
        try:
            result = await asyncio.shield(call)
        except asyncio.CancelledError:
            # The client cancelled: stop the remote command once, and let the session finish its kill
            # and its audit records outside the SDK's cancel scope, which would cancel them again.
            call.cancel()
            with anyio.CancelScope(shield=True), anyio.move_on_after(_KILL_WAIT), \
                    contextlib.suppress(BaseException):
                await call
            raise
        finally:
            if ticker is not None:
                ticker.cancel()
        return types.CallToolResult(content=[types.TextContent(type="text", text=result.text)],
                                    is_error=result.is_error)

    @server.tool(name="hosts", description=HOSTS_DESCRIPTION)
    async def hosts(
        pattern: Annotated[str | None, Field(description="A host pattern; default: every selectable host")] = None,
    ) -> types.CallToolResult:
        try:
            chosen = hub.hosts(pattern)
        except RemoteBashError as exc:
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"Error: {exc.message}")],
                                        is_error=True)
        gate = Gate(hub.inventory, allow=hub.allow)
        rows: list[dict[str, Any]] = []
        for h in chosen:
            row: dict[str, Any] = {"name": h.name, "address": h.address, "user": h.user, "groups": h.groups,
                                   "labels": h.labels, "jump": h.jump}
            refused = gate.refusal(h)  # the whole route: a jump host outside --allow makes it unreachable
            row["reachable"] = refused is None
            if refused is not None:
                row["not_reachable_because"] = refused.why
            rows.append(row)
        text = escape_json(json.dumps(rows, ensure_ascii=False, indent=1)) if rows else "No selectable host matches."
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=False)

    @server.tool(name="edit", description=EDIT_DESCRIPTION)
    async def edit(
        ctx: Context,
        asked: Annotated[ElicitationResult[Any], Resolve(edit_approval)],
        command: Annotated[Literal["view", "create", "str_replace", "insert"], Field(
            description="view a file or directory, create a new file, replace one exact occurrence of "
                        "old_str, or insert text after a line")],
        path: Annotated[str, Field(description="An absolute path on the host")],
        host: Annotated[str | None, Field(
            description="The host (a name from the hosts tool); may be left out when only one host is "
                        "selectable")] = None,
        file_text: Annotated[str | None, Field(description="create: the whole content of the new file")] = None,
        old_str: Annotated[str | None, Field(
            description="str_replace: the exact text to replace; it must occur exactly once")] = None,
        new_str: Annotated[str | None, Field(description="str_replace: the text that replaces old_str")] = None,
        insert_line: Annotated[int | None, Field(
            description="insert: the line after which to insert (0: before the first line)", ge=0)] = None,
        insert_text: Annotated[str | None, Field(description="insert: the text to insert")] = None,
        view_range: Annotated[list[int] | None, Field(
            description="view: [first, last] line, 1-based; last -1 means to the end", min_length=2,
            max_length=2)] = None,
    ) -> types.CallToolResult:
        client = _client_name(ctx)
        CLIENT.set(client)
        tool_input: dict[str, Any] = {"command": command, "path": path}
        for key, value in (("file_text", file_text), ("old_str", old_str), ("new_str", new_str),
                           ("insert_line", insert_line), ("insert_text", insert_text), ("view_range", view_range)):
            if value is not None:
                tool_input[key] = value
        said = approval_text(tool_input)
        decided = _decision(asked, client, settings, host, said, hub)

        async def approver(target: Host, text: str, need: Need) -> Approval:
            return decided or Approval(False, "unavailable", reason="no answer was recorded")

        call = asyncio.ensure_future(hub.edit(host, tool_input, tool_use_id=f"mcp-{ctx.request_id}",
                                              approver=approver))
        try:
            result = await asyncio.shield(call)
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_KILL_WAIT), \
                    contextlib.suppress(BaseException):
                await call  # an edit is short and atomic: let it finish and write its records
            raise
        return types.CallToolResult(content=[types.TextContent(type="text", text=result.text)],
                                    is_error=result.is_error)

    return server


def _decision(asked: Any, client: str, settings: _Settings, host: str | None, command: str | None,
              hub: SessionHub) -> Approval | None:
    """The approval outcome the resolver produced, as an :class:`Approval` (None: no question)."""
    data = asked.data if isinstance(asked, AcceptedElicitation) else asked
    if data is None or isinstance(data, Approval):
        return data
    try:
        name = hub.resolve(host).name
    except RemoteBashError:
        return Approval(False, "unavailable", reason="the host could not be resolved")
    return _to_approval(asked, client, settings, name, command or "")


def _to_approval(answer: Any, client: str, settings: _Settings, host: str, command: str) -> Approval:
    """A person's elicitation answer as an :class:`Approval`; a grant is remembered for its minutes."""
    if isinstance(answer, AcceptedElicitation):
        form = answer.data
        if not isinstance(form, ApprovalForm):
            try:
                form = ApprovalForm.model_validate(form)
            except ValueError:
                return Approval(False, "unavailable", by=client, reason="the client's answer could not be read")
        if form.decision == "refuse":
            return Approval(False, "refused", by=client, reason=form.reason or "refused")
        if form.decision == "allow for minutes":
            settings.grants.add(host, command, form.minutes)
            return Approval(True, "grant", by=client, minutes=float(form.minutes))
        return Approval(True, "once", by=client)
    action = getattr(answer, "action", "cancel")
    return Approval(False, "refused", by=client,
                    reason="the person declined" if action == "decline" else "the question was cancelled")


def _question(host: Host, command: str, need: Need) -> str:
    """The question put to the person: every character a terminal would act on, or that would not
    show (a carriage return, an escape sequence, a bidi override), is shown escaped, as at the
    command line's prompt, so what is read is what would run."""
    shown = command if len(command) <= 2000 else command[:2000] + " ..."
    return (f"Claude wants to run this on {escape(host.name)} ({escape(host.address)}), which needs approval "
            f"because {escape(need.reason)}:\n\n{escape(shown)}")


def _client_name(ctx: Context) -> str:
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    if info is None:
        return "unknown MCP client"
    return f"{info.name} {info.version}".strip()


def _modern_versions() -> frozenset[str]:
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return frozenset(MODERN_PROTOCOL_VERSIONS)


def _progress_token(ctx: Context) -> Any:
    meta = ctx.request_context.meta
    return meta.get("progress_token") if meta is not None else None


class _Progress:
    """Output so far, sent as progress notifications about once a second while a command runs."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._tail = ""
        self._chars = 0
        self._sent = 0

    def feed(self, text: str) -> None:
        self._chars += len(text)
        self._tail = (self._tail + text)[-_PROGRESS_TAIL:]

    async def run(self) -> None:
        while True:
            await asyncio.sleep(_PROGRESS_EVERY)
            if self._chars != self._sent:
                self._sent = self._chars
                with contextlib.suppress(Exception):
                    await self._ctx.report_progress(float(self._chars), None, self._tail)


async def serve_stdio(server: MCPServer[Any]) -> None:
    """Serve MCP on stdin/stdout until the client goes away."""
    await server.run_stdio_async()


async def serve_http(server: MCPServer[Any], host: str, port: int, token: str) -> None:
    """Serve the streamable HTTP transport on ``host:port``; every request needs ``Bearer <token>``."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    # DNS rebinding protection, for the address served: the SDK's default admits only 127.0.0.1,
    # localhost and ::1, so a server on 127.0.0.2 answered every request 421.
    shown = f"[{host}]" if ":" in host else host
    names = {shown, *(("127.0.0.1", "localhost", "[::1]") if host in ("127.0.0.1", "localhost", "::1") else ())}
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                         allowed_hosts=sorted(f"{name}:{port}" for name in names),
                                         allowed_origins=sorted(f"http://{name}:{port}" for name in names))
    app = server.streamable_http_app(transport_security=security, host=host)
    expected = f"Bearer {token}".encode()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b"a valid bearer token is required\n"})
                return
        await app(scope, receive, send)

    config = uvicorn.Config(guarded, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
