"""One persistent session per host for a long-lived server (``remote-bash mcp``).

A hub hands out sessions by host name, only for the hosts its selection allows, keeps each one
for the life of the server (cwd, variables and functions persist between calls), closes a
session that has been idle too long, and closes every session, stopping what they left running,
when the server ends. Building a session (credentials, audit, redaction, the gate) is the
factory's job, so the hub holds no policy of its own beyond which names may be asked for.

It never imports a protocol SDK: the MCP server calls it, and a test can too.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import HostNotAllowed, SelectionError
from .inventory import Inventory
from .models import Host
from .session import AuditSink, RemoteBashSession
from .tool import Approver, run_bash_input

__all__ = ["CLIENT", "ClientTaggedAudit", "HubResult", "SessionHub"]

SessionFactory = Callable[[str], Awaitable[RemoteBashSession]]
"""Builds a (not yet connected) session to an inventory host name."""

CLIENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("remote_bash_client", default=None)
"""The name of the client driving the current call (an MCP client's ``name version``)."""


class ClientTaggedAudit:
    """An audit sink that adds ``client`` (from :data:`CLIENT`) to every record written in a call."""

    def __init__(self, inner: AuditSink) -> None:
        self._inner = inner

    async def awrite(self, host: str, event: str, /, **fields: Any) -> dict[str, Any]:
        client = CLIENT.get()
        if client is not None:
            fields.setdefault("client", client)
        return await self._inner.awrite(host, event, **fields)


@dataclass(frozen=True)
class HubResult:
    """A tool call's answer: the text Claude reads and whether it is an error."""

    text: str
    is_error: bool


class SessionHub:
    """Sessions by host name for the hosts ``allow`` selects from ``inventory``."""

    def __init__(self, inventory: Inventory, factory: SessionFactory, *, allow: str | None = None,
                 idle_timeout: float = 1800.0) -> None:
        if allow is not None and not allow.strip():
            raise SelectionError("the allowlist pattern is empty; use 'all' to allow every host")
        self.inventory = inventory
        self.allow = allow
        self.idle_timeout = idle_timeout
        self._factory = factory
        self._selectable = {h.name: h for h in (inventory.select(allow) if allow else inventory.hosts.values())}
        self._sessions: dict[str, RemoteBashSession] = {}
        self._last_used: dict[str, float] = {}
        self._busy: dict[str, int] = {}
        self._opening = asyncio.Lock()
        self._closed = False

    def hosts(self, pattern: str | None = None) -> list[Host]:
        """The selectable hosts, optionally narrowed by a host pattern, in inventory order."""
        if pattern is None or not pattern.strip():
            return list(self._selectable.values())
        chosen = {h.name for h in self.inventory.select(pattern)}
        return [h for name, h in self._selectable.items() if name in chosen]

    def resolve(self, name: str | None) -> Host:
        """The selectable host called ``name``; with no name, the only selectable host."""
        if name is None or not name.strip():
            if len(self._selectable) == 1:
                return next(iter(self._selectable.values()))
            names = ", ".join(self._selectable) or "none"
            raise SelectionError(f"name a host: {len(self._selectable)} hosts are selectable ({names})")
        host = self._selectable.get(name)
        if host is not None:
            return host
        if name in self.inventory.hosts:
            raise HostNotAllowed(f"host {name!r} is outside this server's allowlist {self.allow!r}; nothing "
                                 "was connected", host=name)
        import difflib

        close = difflib.get_close_matches(name, list(self._selectable), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; selectable: {', '.join(self._selectable)}"
        raise SelectionError(f"no selectable host {name!r}{hint}")

    async def session(self, name: str) -> RemoteBashSession:
        """The persistent session of selectable host ``name``, created on first use."""
        host = self.resolve(name)
        async with self._opening:
            if self._closed:
                raise SelectionError("the server is shutting down")
            session = self._sessions.get(host.name)
            if session is None:
                session = await self._factory(host.name)
                self._sessions[host.name] = session
            self._last_used[host.name] = time.monotonic()
            return session

    async def bash(self, name: str | None, tool_input: Mapping[str, Any], *, tool_use_id: str | None,
                   timeout: float | None = None, on_output: Callable[[str], None] | None = None,
                   approver: Approver | None = None) -> HubResult:
        """One bash tool call on host ``name``: the same text and error flag as ``BashHandler``."""
        return await self._call(name, lambda session: run_bash_input(
            session, tool_input, tool_use_id=tool_use_id, timeout=timeout, on_output=on_output, approver=approver))

    async def edit(self, name: str | None, tool_input: Mapping[str, Any], *, tool_use_id: str | None,
                   approver: Approver | None = None) -> HubResult:
        """One text editor call on host ``name``: the same text and error flag as ``EditHandler``."""
        from .tools.edit import EditHandler

        return await self._call(name, lambda session: EditHandler(session, approver=approver).run(
            tool_input, tool_use_id=tool_use_id))

    async def _call(self, name: str | None,
                    tool: Callable[[RemoteBashSession], Awaitable[dict[str, Any]]]) -> HubResult:
        """Run one tool call on the persistent session of host ``name``, keeping it from the idle close."""
        try:
            host = self.resolve(name)
        except (SelectionError, HostNotAllowed) as exc:
            return await self._refused(name, exc)
        session = await self.session(host.name)
        self._busy[host.name] = self._busy.get(host.name, 0) + 1
        try:
            block = await tool(session)
        finally:
            self._busy[host.name] -= 1
            self._last_used[host.name] = time.monotonic()
        return HubResult(str(block["content"]), bool(block["is_error"]))

    async def _refused(self, name: str | None, exc: SelectionError | HostNotAllowed) -> HubResult:
        """The error for a host that may not be asked for. An inventory host outside the allowlist is
        put to its session's gate, which refuses it before connecting and writes ``host.denied``."""
        if isinstance(exc, HostNotAllowed) and name in self.inventory.hosts:
            session = await self._factory(name)
            try:
                await session.start()
            except HostNotAllowed:
                pass  # refused and audited by the gate, as expected
            finally:
                await session.close()
        return HubResult(f"Error: {exc.message}", True)

    async def close_idle(self) -> list[str]:
        """Close sessions unused for ``idle_timeout`` seconds; the names closed."""
        now = time.monotonic()
        idle = [name for name, used in self._last_used.items()
                if name in self._sessions and not self._busy.get(name) and now - used >= self.idle_timeout]
        for name in idle:
            session = self._sessions.pop(name)
            with contextlib.suppress(Exception):
                await session.close()
        return idle

    async def run_reaper(self) -> None:
        """Close idle sessions until cancelled (checks a few times per idle period)."""
        interval = max(1.0, min(60.0, self.idle_timeout / 4))
        while not self._closed:
            await asyncio.sleep(interval)
            await self.close_idle()

    async def aclose(self) -> None:
        """Close every session; each close stops what its commands left running."""
        self._closed = True
        sessions, self._sessions = list(self._sessions.values()), {}
        results = await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
        del results  # a session that cannot close cleanly has nothing more to tell at shutdown
