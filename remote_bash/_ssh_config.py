"""Reading the user's ``~/.ssh/config`` for the few settings an inventory host may borrow from it.

Only ``HostName``, ``User``, ``Port``, ``IdentityFile`` and ``ProxyJump`` are read, the first value
of each winning as in ssh; ``Match`` blocks and ``Include`` are not evaluated. Pure: this module
never reads a file itself (the inventory hands it the text) and never connects anywhere. A line it
cannot read is an :class:`~remote_bash.errors.InventoryError` naming the file and line.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Sequence
from typing import Any

from remote_bash.errors import InventoryError

__all__ = ["parse_ssh_config", "ssh_options"]

_SSH_KEYS = {
    "hostname": "hostname",
    "user": "user",
    "port": "port",
    "identityfile": "identity_file",
    "proxyjump": "jump",
}

def parse_ssh_config(
    text: str,
    alias: str,
    *,
    inventory_hosts: Collection[str] | None = None,
    path: str | None = None,
) -> dict[str, Any]:
    """The settings ``~/.ssh/config`` text gives ``alias``, as Host field names.

    Returns any of ``hostname``, ``user``, ``port`` (int), ``identity_file`` (as written) and
    ``jump`` (list of hop names). The first value of a keyword wins, as in ssh. ``Match`` blocks
    and ``Include`` are not evaluated. With ``inventory_hosts``, every ProxyJump hop must be one
    of them. ``path`` only names the file in errors.
    """
    return {key: value for key, (value, _line) in ssh_options(text, alias, inventory_hosts, path)[0].items()}


def ssh_options(
    text: str, alias: str, inventory_hosts: Collection[str] | None, path: str | None
) -> tuple[dict[str, tuple[Any, int]], bool]:
    """As :func:`parse_ssh_config`, with the line of each value, and whether any ``Host`` block matched."""
    found: dict[str, tuple[Any, int]] = {}
    active, matched = True, False  # lines before the first Host block apply to every host
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        parsed = re.match(r"([A-Za-z][A-Za-z0-9]*)\s*(?:=\s*|\s+)(.*)\Z", stripped)
        if parsed is None:
            raise InventoryError(f"cannot read ssh config line {stripped!r}", path=path, line=lineno)
        try:
            args = shlex.split(parsed[2], comments=True)
        except ValueError as exc:
            raise InventoryError(f"cannot read ssh config line: {exc}", path=path, line=lineno) from None
        keyword = parsed[1].lower()
        if keyword in ("host", "match"):
            active = keyword == "host" and _ssh_host_matches(args, alias)
            matched = matched or active
            continue
        key = _SSH_KEYS.get(keyword)
        if not active or key is None or key in found or not args:
            continue
        found[key] = (_ssh_value(key, args[0], alias, inventory_hosts, path, lineno), lineno)
    return found, matched


def _ssh_value(
    key: str, value: str, alias: str, inventory_hosts: Collection[str] | None, path: str | None, line: int
) -> Any:
    if key == "port":
        if not value.isdigit() or not 1 <= int(value) <= 65535:
            raise InventoryError(
                f"expected an integer from 1 to 65535, got {value!r}", path=path, line=line, field="Port"
            )
        return int(value)
    if key == "hostname":
        return re.sub(r"%(.)", lambda m: {"%": "%", "h": alias}.get(m[1], m[0]), value)
    if key == "jump":
        if value.lower() == "none":
            return []
        hops = [hop.strip() for hop in value.split(",")]
        for hop in hops:
            if inventory_hosts is not None and hop not in inventory_hosts:
                raise InventoryError(
                    f"ProxyJump hop {hop!r} (for {alias!r}) is not a host of the inventory; every hop must "
                    "be an inventory host name: add it under hosts:, or set jump: on the host",
                    path=path,
                    line=line,
                    field="ProxyJump",
                )
        return hops
    return value


def _ssh_host_matches(patterns: Sequence[str], alias: str) -> bool:
    positive = False
    for pattern in (p for arg in patterns for p in arg.split(",") if p):
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in body)
        if re.fullmatch(regex, alias, re.IGNORECASE | re.DOTALL):
            if negated:
                return False
            positive = True
    return positive
