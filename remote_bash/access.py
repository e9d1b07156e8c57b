"""Who may be reached, and how a session to an inventory host is put together.

The gate refuses, before any connection is made, a host that is not in the inventory (or
whose address differs from the inventory's), a host outside the allowlist pattern, and a
jump host outside it; every refusal is written to the host's audit log as ``host.denied``.
``open_session`` builds a :class:`RemoteBashSession` with jump hosts resolved, the gate,
credentials, the audit log and redaction wired in: the CLI and the fleet use it alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import HostNotAllowed, SelectionError
from .inventory import Inventory
from .models import Host
from .session import AuditSink, CredentialSource, Redactor, RemoteBashSession

__all__ = ["HostGate", "jump_chain", "open_session"]


class HostGate:
    """Checks a host and its jump hosts against the inventory and an allowlist pattern."""

    def __init__(self, inventory: Inventory, allow: str | None = None, audit: AuditSink | None = None) -> None:
        self.inventory = inventory
        self.allow = allow
        self.audit = audit
        if allow is not None and not allow.strip():
            # An empty pattern must not read as "no allowlist": that would allow every host.
            raise SelectionError("the allowlist pattern is empty; use 'all' to allow every host")
        self.allowed: frozenset[str] | None = (
            frozenset(h.name for h in inventory.select(allow)) if allow is not None else None
        )

    def problem(self, host: Host, role: str = "host") -> str | None:
        """Why ``host`` may not be reached, or None when it may."""
        known = self.inventory.hosts.get(host.name)
        if known is None:
            return f"{role} {host.name!r} is not in the inventory ({self.inventory.path or 'in memory'})"
        if (known.hostname, known.port) != (host.hostname, host.port):
            return (f"{role} {host.name!r} points at {host.hostname}:{host.port}, but the inventory says "
                    f"{known.hostname}:{known.port}")
        if self.allowed is not None and host.name not in self.allowed:
            return f"{role} {host.name!r} is outside this session's allowlist {self.allow!r}"
        return None

    async def __call__(self, host: Host, jumps: Sequence[Host]) -> None:
        checks = [(host, "host"), *((j, f"jump host (for {host.name})") for j in jumps)]
        for target, role in checks:
            why = self.problem(target, role)
            if why is None:
                continue
            if self.audit is not None:
                await self.audit.awrite(host.name, "host.denied", address=host.address, denied=target.name,
                                        error=why)
            raise HostNotAllowed(f"refused before connecting: {why}", host=host.name)


def jump_chain(inventory: Inventory, host: Host) -> list[Host]:
    """The jump hosts of ``host``, first hop first, each expanded with its own jump hosts."""
    chain: list[Host] = []
    seen: set[str] = {host.name}
    for name in host.jump:
        hop = inventory.host(name)
        if hop.name in seen:
            continue
        for inner in jump_chain(inventory, hop):
            if inner.name not in seen:
                chain.append(inner)
                seen.add(inner.name)
        chain.append(hop)
        seen.add(hop.name)
    return chain


def open_session(
    inventory: Inventory,
    name: str,
    *,
    allow: str | None = None,
    audit: AuditSink | None = None,
    redactor: Redactor | None = None,
    credentials: CredentialSource | None = None,
    gate: HostGate | None = None,
    **session_options: Any,
) -> RemoteBashSession:
    """A session (not yet connected) to inventory host ``name``, gated by ``allow``.

    A name the inventory does not know still gets a session object, whose first use is
    refused by the gate (and audited as ``host.denied``) before anything is connected.
    """
    known = inventory.hosts.get(name)
    host = known if known is not None else Host(name=name, hostname=name)
    gate = gate or HostGate(inventory, allow, audit)
    return RemoteBashSession(
        host,
        jump_hosts=jump_chain(inventory, host) if known is not None else [],
        credentials=credentials,
        audit=audit,
        redactor=redactor,
        gate=gate,
        **session_options,
    )
