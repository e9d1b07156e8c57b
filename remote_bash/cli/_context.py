"""What every command needs from the global options: inventory, audit log, credentials, sessions."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ._output import PROG, _err, _UsageError

if TYPE_CHECKING:
    from remote_bash._ssh import Credentials
    from remote_bash.access import Gate
    from remote_bash.audit import AuditLog
    from remote_bash.errors import SelectionError
    from remote_bash.inventory import Inventory
    from remote_bash.models import Host
    from remote_bash.redact import Redactor
    from remote_bash.session import AuditSink, RemoteBashSession


class _Context:
    """What every command needs from the global options."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.env = os.environ
        if args.allow is not None and not args.allow.strip():
            # An empty pattern must not read as "no allowlist": that would allow every host.
            raise _UsageError("--allow: the allowlist pattern is empty; use 'all' to allow every host")
        self.allow: str | None = args.allow
        self.debug: bool = args.debug
        self._keyring_key: Callable[[], str | None] | None = None
        self._loaded: Inventory | None = None

    @property
    def audit_dir(self) -> Path:
        if self.args.audit_dir:
            return Path(self.args.audit_dir).expanduser()
        from remote_bash.audit import default_audit_dir

        return default_audit_dir(self.env)

    def inventory_path(self) -> Path | None:
        from remote_bash.inventory import default_inventory_path

        return default_inventory_path(self.args.inventory, self.env)

    def load(self) -> Inventory | None:
        """The configured inventory, or None when there is none (the sandbox host is used).

        Read once per command (the sessions and their audit keys see the same one), through the
        per-user cache of resolved inventories (:mod:`remote_bash._inventory_cache`)."""
        if self._loaded is None:
            path = self.inventory_path()
            if path is None:
                return None
            from remote_bash._inventory_cache import cached_inventory

            self._loaded = cached_inventory(path, self.env)
        return self._loaded

    @contextlib.contextmanager
    def inventory(self) -> Iterator[Inventory]:
        """The inventory; with none configured, one holding the ``sandbox`` host, running for the duration.

        The command's host (``HOST``, ``--host``) is checked first: a name nobody declared is an
        error with the closest names, before a sandbox is started or anything is written."""
        loaded = self.load()
        name = getattr(self.args, "host", None)
        if loaded is not None:
            if name:
                _known_host(loaded, name)
            yield loaded
            return
        from remote_bash.inventory import Inventory
        from remote_bash.sandbox import SANDBOX, sandbox_for_command

        if name and name != SANDBOX:
            raise _unknown(name, f"with no inventory configured, the only host is {SANDBOX!r}", [SANDBOX])

        with sandbox_for_command(self.env, getattr(self.args, "backend", None), image=getattr(self.args, "image", None),
                                 progress=_progress, private_paths=self.private_paths()) as host:
            yield Inventory._trusted(hosts={host.name: host})

    def private_paths(self) -> list[Path]:
        """What a sandboxed command must not read: the operator's home, audit logs and state."""
        from remote_bash.sandbox import sandbox_dir

        return [Path(self.env.get("HOME") or Path.home()), self.audit_dir, sandbox_dir(self.env).parent]

    def audit_log(self, redactor: Redactor | None = None, *, keyring: bool | None = None) -> AuditLog:
        """The audit log; its key comes from the inventory's ``audit_key_file``, else from the OS
        keyring when ``keyring`` (by default: when ``audit key init`` left its marker, so that a
        command without a keyed log never loads the keyring)."""
        from remote_bash.audit import AuditLog, keyring_marker

        if keyring is None:
            keyring = keyring_marker(self.env).exists()
        if keyring and self._keyring_key is None:
            from remote_bash.credentials import audit_key_lookup

            self._keyring_key = audit_key_lookup()  # read while the connection is made
        return AuditLog(self.audit_dir, redactor=redactor, key=self.audit_key)

    def audit_key(self, host: str) -> bytes | None:
        """The audit key of ``host``: its inventory ``audit_key_file``, else the keyring's, else None."""
        from remote_bash.audit import load_key_file, parse_key

        inventory = self.load() if self.inventory_path() is not None else None
        entry = inventory.hosts.get(host) if inventory is not None else None
        if entry is not None and entry.audit_key_file is not None:
            return load_key_file(entry.audit_key_file)
        if self._keyring_key is None:
            return None
        text = self._keyring_key()
        return None if text is None else parse_key(text, "the audit key in the OS keyring")

    def gate(self, inventory: Inventory, audit: AuditSink | None) -> Gate:
        """The one gate for this run: the inventory, ``--allow``, refusals written to ``audit``."""
        from remote_bash.access import Gate

        return Gate(inventory, self.allow, audit)

    def audit(self, redactor: Redactor | None) -> AuditSink:
        # AuditLog.awrite takes host and event positional-only, which session.AuditSink does not
        # spell out; the call sites pass them positionally, so the cast is sound.
        return cast("AuditSink", self.audit_log(redactor))


def _unknown(name: str, why: str, names: Iterable[str]) -> SelectionError:
    from remote_bash._inventory_file import suggest
    from remote_bash.errors import SelectionError

    return SelectionError(f"unknown host {name!r}: {why}{suggest(name, list(names))}")


def _known_host(inventory: Inventory, name: str) -> Host:
    """The inventory's host ``name``; for a name it does not declare, a :class:`SelectionError`
    (exit 127) naming the closest names. Checked before a session exists, so a typo is never
    connected to, and leaves no audit file of its own."""
    host = inventory.hosts.get(name)
    if host is None:
        where = f"not in the inventory {inventory.path}" if inventory.path else "not in the inventory"
        raise _unknown(name, where, inventory.hosts)
    return host


def _pick_host(inventory: Inventory, name: str | None) -> str:
    if name:
        return _known_host(inventory, name).name
    if len(inventory.hosts) == 1:
        return next(iter(inventory.hosts))
    raise _UsageError(f"name a host: the inventory {inventory.path} has {len(inventory.hosts)} hosts "
                      f"(see '{PROG} hosts')")


async def _session(ctx: _Context, inventory: Inventory, name: str,
                   wrap_audit: Callable[[AuditSink], AuditSink] | None = None) -> tuple[RemoteBashSession, Redactor]:
    """A session to the inventory host ``name`` (not connected yet) and its redactor, which also masks
    the host's keyring secrets, so a command that prints one never shows it on screen or in the audit
    log. A name the inventory does not know is a :class:`SelectionError` (see :func:`_known_host`);
    a known host outside ``--allow`` gets a session whose first use the gate refuses and audits."""
    from remote_bash.redact import Redactor
    from remote_bash.session import RemoteBashSession

    host = _known_host(inventory, name)
    creds = await _credentials(ctx, inventory, [host])
    redactor = Redactor(host.redact, _literals(creds.values()))
    audit = ctx.audit(redactor)
    if wrap_audit is not None:
        audit = wrap_audit(audit)
    gate = ctx.gate(inventory, audit)
    # The session takes its route (the jump hosts, recursively) from the gate it checks it with.
    session = RemoteBashSession(host, credentials=_source(creds), audit=audit, redactor=redactor, gate=gate)
    return session, redactor


async def _credentials(ctx: _Context, inventory: Inventory, hosts: Sequence[Host]) -> dict[str, Credentials]:
    """The credentials of ``hosts`` and their jump hosts, looked up now, so their secrets are known to
    the redactors. Hosts the gate will refuse are left out: the keyring is not even asked for them."""
    from remote_bash.credentials import acredentials_for
    from remote_bash.errors import SelectionError

    try:
        gate = ctx.gate(inventory, None)
    except SelectionError:
        return {}  # the gate says why, when the session asks it
    hops = gate.admitted(h.name for h in hosts)
    found = await asyncio.gather(*(acredentials_for(hop) for hop in hops))
    return {hop.name: creds for hop, creds in zip(hops, found, strict=True)}


def _literals(creds: Iterable[Credentials]) -> list[str]:
    # A very short secret would mask every occurrence of a common string: it is not worth hiding.
    return [s for c in creds for s in (c.password, c.passphrase) if s and len(s) >= 4]


def _source(known: dict[str, Credentials]) -> Callable[[Host], Awaitable[Credentials]]:
    from remote_bash.credentials import acredentials_for

    async def credentials(hop: Host) -> Credentials:
        return known[hop.name] if hop.name in known else await acredentials_for(hop)

    return credentials


def _address(session: RemoteBashSession) -> str:
    """Where the session's shell is: the connection's peer, or for a host behind jump hosts (whose
    tunnelled connection has no peer address of its own) the inventory's address and the route."""
    host = session.host
    if host.jump:
        return f"{host.address} via {' -> '.join(host.jump)}"
    info = session.info
    return info.address if info is not None and info.address else host.address


def _progress(message: str) -> None:
    """Say what a slow sandbox step (the first image build) is doing."""
    _err(f"{PROG}: {message}\n")
