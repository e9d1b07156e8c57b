"""Who may be reached: the one gate that every path to a host goes through.

A :class:`Gate` holds an inventory and an optional allowlist pattern. Before anything is
connected it refuses a host when any hop of its route is not in the inventory, points at an
address, names jump hosts or trusts host keys (another known_hosts file or host_key_policy) the
inventory does not give it, or is outside the allowlist; the route is the host's
jump hosts, theirs, and so on (recursively, from the inventory), first hop first. A route that
differs from the inventory's (a jump host left out, or one added) is refused too, so no caller can
reach a host by a way the inventory does not describe. Every refusal raises
:class:`~remote_bash.errors.HostNotAllowed` and is written to the host's audit log as
``host.denied``, naming the hop.

The CLI (``exec``, ``shell``, ``run``, ``check``), the fleet (``fleet exec``, ``fleet run``, the
coordinator), a :class:`~remote_bash.session.RemoteBashSession` made from an inventory host, and
any server mode use the same object: a session calls its gate before it connects.

What this module must never do: connect, do I/O other than the audit record of a refusal, or
import the session (the session imports this module).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from .errors import HostNotAllowed, SelectionError
from .inventory import Inventory
from .models import Host, inventory_of

__all__ = ["Gate", "Refusal", "jump_chain"]


class _AuditSink(Protocol):
    async def awrite(self, host: str, event: str, /, **fields: Any) -> dict[str, Any]: ...


class Refusal:
    """Why a host may not be reached: the hop refused and the reason, in a sentence."""

    __slots__ = ("hop", "host", "why")

    def __init__(self, host: str, hop: str, why: str) -> None:
        self.host, self.hop, self.why = host, hop, why

    def error(self) -> HostNotAllowed:
        return HostNotAllowed(f"refused before connecting: {self.why}", host=self.host)


class Gate:
    """Checks a host and its whole route against the inventory and an allowlist pattern.

    ::

        gate = Gate(inventory, allow="web:&staging", audit=AuditLog(dir))
        await gate(host, jumps)        # raises HostNotAllowed (audited) or returns
        gate.route(host)               # [first jump, ..., host], from the inventory
        gate.admits("web-1")           # the same decision, without I/O

    ``audit`` receives the ``host.denied`` records; ``None`` writes none (the caller records
    the refusal, or nobody needs it).
    """

    def __init__(self, inventory: Inventory, allow: str | None = None, audit: _AuditSink | None = None) -> None:
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
        """Why ``host`` itself may not be reached (its route aside), or None when it may."""
        known = self.inventory.hosts.get(host.name)
        if known is None:
            return f"{role} {host.name!r} is not in the inventory ({self.inventory.path or 'in memory'})"
        if (known.hostname, known.port) != (host.hostname, host.port):
            return (f"{role} {host.name!r} points at {host.hostname}:{host.port}, but the inventory says "
                    f"{known.hostname}:{known.port}")
        if list(known.jump) != list(host.jump):
            # The route is the inventory's; a copy that names other jump hosts must not be
            # carried along it silently as if the change had been honoured.
            return (f"{role} {host.name!r} names the jump hosts {list(host.jump)}, but the inventory says "
                    f"{list(known.jump)}: a host is reached only by its inventory route (to route it another "
                    "way, change its jump: in the inventory)")
        changed = _key_trust(host, known)
        if changed:
            # Which key is trusted is the inventory's: a copy pointing at another known_hosts file (an
            # empty one, to accept any key anew) or another policy would trust what it does not.
            field, theirs, ours = changed[0]
            return (f"{role} {host.name!r} has {field} {theirs}, but the inventory says {ours}: a host key is "
                    f"trusted only as the inventory says (to change it, change {field}: in the inventory)")
        if self.allowed is not None and host.name not in self.allowed:
            return f"{role} {host.name!r} is outside this session's allowlist {self.allow!r}"
        return None

    def route(self, host: Host) -> list[Host]:
        """The inventory's route to ``host``: its jump hosts, first hop first, then ``host``.

        A host the inventory does not know has the route ``[host]`` (the gate refuses it).
        """
        if host.name not in self.inventory.hosts:
            return [host]
        try:
            return [*jump_chain(self.inventory, self.inventory.hosts[host.name]), host]
        except SelectionError:  # an inventory built in code, with a broken route: refusal() says why
            return [host]

    def refusal(self, host: Host, jumps: Sequence[Host] | None = None) -> Refusal | None:
        """Why ``host`` may not be reached through ``jumps`` (default: the inventory's route)."""
        why = self.problem(host)
        if why is not None:
            return Refusal(host.name, host.name, why)
        try:
            expected = jump_chain(self.inventory, self.inventory.hosts[host.name])
        except SelectionError as exc:
            return Refusal(host.name, host.name, exc.message)
        given = expected if jumps is None else list(jumps)
        role = f"jump host (for {host.name})"
        # What would be dialled first is checked first; then the inventory's own route, so a
        # jump host's own jump host is checked even when a caller left it out.
        for hop in [*given, *expected]:
            why = self.problem(hop, role)
            if why is not None:
                return Refusal(host.name, hop.name, why)
        if [h.name for h in given] != [h.name for h in expected]:
            names = {h.name for h in given}
            missing = [h.name for h in expected if h.name not in names]
            extra = [h.name for h in given if h.name not in {e.name for e in expected}]
            in_order = [g.name for g, e in zip(given, expected, strict=False) if g.name != e.name]
            differs = (missing or extra or in_order)[0]
            return Refusal(host.name, differs, f"the route to {host.name!r} ({_path(given, host)}) is not the "
                                           f"inventory's ({_path(expected, host)})")
        return None

    def admits(self, name: str) -> bool:
        """True when the inventory host ``name`` may be reached by its inventory route."""
        host = self.inventory.hosts.get(name)
        return host is not None and self.refusal(host) is None

    def admitted(self, names: Iterable[str]) -> list[Host]:
        """The inventory hosts among ``names`` that may be reached, with every hop of their routes."""
        hops: dict[str, Host] = {}
        for name in names:
            if self.admits(name):
                hops.update((h.name, h) for h in self.route(self.inventory.hosts[name]))
        return list(hops.values())

    async def check(self, host: Host, jumps: Sequence[Host] | None = None) -> list[Host]:
        """The route to connect by (jump hosts first, ``host`` last), or HostNotAllowed, audited."""
        refused = self.refusal(host, jumps)
        if refused is not None:
            # A name the inventory does not know gets no log of its own: the log's file name would
            # come from whatever was typed (a typo, escape sequences, 300 characters), one per attempt.
            if self.audit is not None and host.name in self.inventory.hosts:
                await self.audit.awrite(host.name, "host.denied", address=host.address, denied=refused.hop,
                                        error=refused.why)
            raise refused.error()
        return [*(self.route(host)[:-1] if jumps is None else jumps), host]

    async def __call__(self, host: Host, jumps: Sequence[Host]) -> None:
        """What a session calls before it connects to ``host`` through ``jumps``."""
        await self.check(host, jumps)

    @classmethod
    def of(cls, host: Host, audit: _AuditSink | None = None) -> Gate | None:
        """The gate of the inventory ``host`` was loaded from, or None for a host made in code."""
        inventory = inventory_of(host)
        return cls(inventory, audit=audit) if isinstance(inventory, Inventory) else None


def _known_hosts(host: Host) -> Path:
    """The known_hosts file ``host``'s key is checked against (as the connection picks it)."""
    return (host.known_hosts or Path("~/.ssh/known_hosts")).expanduser()


def _key_trust(host: Host, known: Host) -> list[tuple[str, str, str]]:
    """The settings deciding which key of ``host`` is trusted that differ from the inventory's
    ``known``, as (field, given, inventory's). The CAs and revoked keys are lines of the file."""
    differ: list[tuple[str, str, str]] = []
    if _known_hosts(host) != _known_hosts(known):
        differ.append(("known_hosts", str(_known_hosts(host)), str(_known_hosts(known))))
    if host.host_key_policy != known.host_key_policy:
        differ.append(("host_key_policy", host.host_key_policy, known.host_key_policy))
    return differ


def _path(jumps: Sequence[Host], host: Host) -> str:
    return " -> ".join([*(h.name for h in jumps), host.name])


def jump_chain(inventory: Inventory, host: Host, _through: tuple[str, ...] = ()) -> list[Host]:
    """The jump hosts of ``host``, first hop first, each expanded with its own jump hosts.

    Raises SelectionError for a jump host the inventory does not have, or a cycle (a loaded
    inventory has neither; one built in code may).
    """
    through = (*_through, host.name)
    chain: list[Host] = []
    seen: set[str] = {host.name}
    for name in host.jump:
        hop = inventory.hosts.get(name)
        if hop is None:
            raise SelectionError(f"jump host {name!r} of {host.name} is not in the inventory", host=host.name)
        if name in through:
            raise SelectionError("jump hosts form a cycle: " + " -> ".join([*through, name]), host=host.name)
        if hop.name in seen:
            continue
        for inner in jump_chain(inventory, hop, through):
            if inner.name not in seen:
                chain.append(inner)
                seen.add(inner.name)
        chain.append(hop)
        seen.add(hop.name)
    return chain
