"""``mcp``: serve the inventory's hosts to an MCP client, over stdio or streamable HTTP."""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
from typing import TYPE_CHECKING

from ._context import _Context, _session
from ._output import PROG, _err, _UsageError

if TYPE_CHECKING:
    from remote_bash.session import RemoteBashSession

TOKEN_ENV = "REMOTE_BASH_MCP_TOKEN"  # noqa: S105 - the name of a variable, not a secret


def _cmd_mcp(ctx: _Context) -> int:
    http = _address(ctx.args.http, public=ctx.args.public) if ctx.args.http else None
    with ctx.inventory() as inventory:
        from remote_bash.hub import ClientTaggedAudit, SessionHub
        from remote_bash.mcp import build_server, serve_http, serve_stdio

        async def factory(name: str) -> RemoteBashSession:
            session, _ = await _session(ctx, inventory, name, wrap_audit=ClientTaggedAudit)
            return session

        hub = SessionHub(inventory, factory, allow=ctx.allow, idle_timeout=ctx.args.idle_timeout)
        server = build_server(hub, approve=not ctx.args.no_approve, approve_timeout=ctx.args.approve_timeout)
        if http is None:
            asyncio.run(serve_stdio(server))
            return 0
        token = ctx.env.get(TOKEN_ENV) or secrets.token_urlsafe(32)
        if TOKEN_ENV not in ctx.env:
            _err(f"{PROG}: mcp: bearer token for {_url(*http)}: {token}")
        asyncio.run(serve_http(server, http[0], http[1], token))
        return 0


def _url(host: str, port: int) -> str:
    """The endpoint's URL; an IPv6 address in brackets, as a URL needs it."""
    return f"http://[{host}]:{port}/mcp" if ":" in host else f"http://{host}:{port}/mcp"


def _address(value: str, *, public: bool) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise _UsageError(f"--http: expected ADDRESS:PORT such as 127.0.0.1:8765, got {value!r}")
    host = host.strip("[]") or "127.0.0.1"
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not public:
        raise _UsageError(f"--http: {host} is not a loopback address; pass --public to serve beyond this "
                          "machine (every request still needs the bearer token)")
    return host, int(port)
