"""Reading the user's ``~/.ssh/config`` as OpenSSH does, for the settings an inventory host borrows.

Only ``HostName``, ``User``, ``Port``, ``IdentityFile`` and ``ProxyJump`` are read, with OpenSSH's
rules (ssh_config(5)). Options that would send the connection elsewhere or change which key is
trusted, and that remote_bash does not carry out (``ProxyCommand`` other than ``none``,
``HostKeyAlias``, ``CanonicalizeHostname`` yes or always, ``RevokedHostKeys``), are refused with an error naming the
line rather than silently ignored.

- the first value obtained for a keyword wins, except ``IdentityFile``: every one is kept, in order;
- lines before the first ``Host`` apply to every host; ``Host`` patterns (``*``, ``?``, ``!``,
  lists) match the alias case-insensitively;
- ``Include`` reads each file its globs name (relative ones under ``~/.ssh``), only when the block
  around it applies, at most 16 levels deep;
- ``Match`` evaluates ``all``, ``host`` (the HostName so far, else the alias), ``originalhost``,
  ``user``, ``localuser`` and ``canonical`` (false: nothing is canonicalized). Other criteria
  (``exec`` would run a command) are refused with an error naming the line, but only when the block
  could change a value read here; as in ssh, criteria after one that failed are not evaluated;
- ``%`` tokens: ``%h`` and ``%%`` in HostName; ``%%``, ``%d``, ``%h``, ``%i``, ``%L``, ``%l``,
  ``%n``, ``%p``, ``%r``, ``%u`` and ``${VAR}`` in IdentityFile, expanded once every value is known.

It never connects anywhere and never runs a command; the only files it reads are those ``Include``
names. A line it cannot read is an :class:`~remote_bash.errors.InventoryError` naming file and line.
"""

from __future__ import annotations

import getpass
import glob
import os
import re
import shlex
import socket
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from remote_bash._plain import Record, factory
from remote_bash._yaml_lines import read_text
from remote_bash.errors import InventoryError

__all__ = ["SshOptions", "parse_ssh_config", "read_ssh_config"]

_KEYS = {
    "hostname": "hostname",
    "user": "user",
    "port": "port",
    "identityfile": "identity_file",
    "proxyjump": "jump",
}
# Options that would change where the connection goes, or which known_hosts entry is trusted, and
# that remote_bash does not carry out: ignoring one would dial another way than the user set up (a
# trust problem), so the host is refused instead. Options it ignores cannot change the host key
# decision nor the address dialled: they only make the connection stricter (StrictHostKeyChecking,
# UserKnownHostsFile: the inventory's pin decides), ask for something it never does (Tunnel,
# LocalCommand, ForwardAgent, ControlMaster) or shape the socket (BindAddress, ConnectTimeout).
_REFUSED = {
    "proxycommand": (
        "{value!r} (for {alias!r}) is not supported: remote_bash never runs a local command to "
        "connect, and would otherwise dial the host directly. Use ProxyJump with an inventory host, or "
        "set jump: on the host in the inventory (or put 'ProxyCommand none' in a Host block for this alias "
        "before this line)"
    ),
    "hostkeyalias": (
        "{value!r} (for {alias!r}) is not supported: remote_bash checks the host key under the "
        "host's address and port in the inventory's known_hosts, not under an alias. Add the key under "
        "[HOSTNAME]:PORT to that known_hosts, or set known_hosts: on the host to a file that holds it"
    ),
    "canonicalizehostname": (
        "{value!r} (for {alias!r}) is not supported: remote_bash connects to the "
        "HostName as written and would not reach the name ssh would. Set the full name as HostName (or "
        "hostname: in the inventory), or put 'CanonicalizeHostname no' in a Host block for this alias"
    ),
    # Ignoring it would trust a key the user revoked: the one option that loosens the pin.
    "revokedhostkeys": (
        "{value!r} (for {alias!r}) is not supported: remote_bash does not read revocation files, and "
        "would otherwise trust a key revoked there. Put each revoked key in the known_hosts the inventory "
        "pins for this host as a '@revoked * KEY' line, and remove this line (or put 'RevokedHostKeys none' "
        "in a Host block for this alias before it)"
    ),
}
_NAMES = {"proxycommand": "ProxyCommand", "hostkeyalias": "HostKeyAlias",
          "canonicalizehostname": "CanonicalizeHostname", "revokedhostkeys": "RevokedHostKeys"}
_HARMLESS = {"proxycommand": {"none"}, "canonicalizehostname": {"no", "false"}, "revokedhostkeys": {"none"}}
_MAX_INCLUDE_DEPTH = 16  # as OpenSSH's READCONF_MAX_DEPTH
_EVALUATED = frozenset({"host", "originalhost", "user", "localuser"})
_NOT_EVALUATED = frozenset(
    {"exec", "localnetwork", "tagged", "command", "address", "localaddress", "localport", "rdomain",
     "version", "sessiontype"}
)  # fmt: skip
_Place = tuple[str, int]


class SshOptions(Record, frozen=False):
    """What an ssh config gives one alias, as Host field names."""

    values: dict[str, Any] = factory(dict)
    """Any of ``hostname``, ``user``, ``port`` (int), ``jump`` (hop names) and ``identity_file``
    (the first IdentityFile, tokens expanded, ``~`` kept)."""
    places: dict[str, _Place] = factory(dict)
    """The file and line each value came from."""
    identity_files: list[tuple[str, _Place]] = factory(list)
    """Every IdentityFile, in order, with its file and line."""
    matched: bool = False
    """Whether any ``Host`` or ``Match`` block applied to the alias."""


def parse_ssh_config(
    text: str,
    alias: str,
    *,
    inventory_hosts: Collection[str] | None = None,
    path: str | None = None,
) -> dict[str, Any]:
    """The settings ssh config ``text`` gives ``alias``, as Host field names (see :class:`SshOptions`).

    With ``inventory_hosts``, every ProxyJump hop must be one of them. ``path`` names the file in
    errors.
    """
    return read_ssh_config(text, alias, inventory_hosts=inventory_hosts, path=path).values


def read_ssh_config(
    text: str,
    alias: str,
    *,
    inventory_hosts: Collection[str] | None = None,
    path: str | os.PathLike[str] | None = None,
    home: Path | None = None,
    included: dict[str, str] | None = None,
    overridden: Collection[str] = (),
) -> SshOptions:
    """Everything ssh config ``text`` (read from ``path``) gives ``alias``; ``home`` is ``~``.

    ``included`` caches the text of included files by name, for reading many aliases at once.
    ``overridden`` names the Host fields the caller sets itself: a ProxyCommand is not refused when
    ``jump`` is one of them (the host's own jump list replaces it).
    """
    reader = _Reader(alias, inventory_hosts, home or Path.home(), {} if included is None else included)
    reader.overridden = frozenset(overridden)
    reader.read(text, str(path) if path is not None else None, 0, True)
    reader.finish()
    return reader.found


class _Reader:
    def __init__(
        self, alias: str, inventory_hosts: Collection[str] | None, home: Path, included: dict[str, str]
    ) -> None:
        self.alias = alias
        self.included = included
        self.inventory_hosts = inventory_hosts
        self.home = home
        self.found = SshOptions()
        self._identity: list[tuple[str, _Place]] = []
        self._taken: set[str] = set()
        self.overridden: frozenset[str] = frozenset()

    def read(self, text: str, path: str | None, depth: int, active: bool | str) -> None:
        """Apply the lines of one file; ``active`` is whether the block around it applies (a
        string: it cannot be told, and why)."""
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
                active = _host_matches(args, self.alias) if keyword == "host" else self.match(args, path, lineno)
                self.found.matched = self.found.matched or active is True
                continue
            if active is False:
                continue
            if keyword == "include":
                if isinstance(active, str):
                    raise InventoryError(active, path=path, line=lineno)
                self.include(args, path, lineno, depth)
                continue
            if keyword in _REFUSED and args:
                self.refuse(keyword, args, active, (path or "", lineno))
                continue
            key = _KEYS.get(keyword)
            if key is None or not args or (key in self.found.values and key != "identity_file"):
                continue
            if isinstance(active, str):
                raise InventoryError(active, path=path, line=lineno)
            self.set(key, args[0], (path or "", lineno))

    def refuse(self, keyword: str, args: Sequence[str], active: bool | str, place: _Place) -> None:
        """An option remote_bash does not carry out, obtained first: refused unless it changes nothing."""
        # ProxyCommand and ProxyJump share one slot: the first of either obtained wins, as in ssh.
        slot = "jump" if keyword == "proxycommand" else keyword
        if slot in self.found.values or slot in self._taken:
            return
        if isinstance(active, str):
            raise InventoryError(active, path=place[0] or None, line=place[1])
        value = " ".join(args)
        if slot in self.overridden:
            self._taken.add(slot)  # the host's own jump list is used; this line changes nothing
            return
        if value.lower() in _HARMLESS.get(keyword, set()):
            if slot == "jump":
                self.found.values["jump"], self.found.places["jump"] = [], place  # as 'ProxyJump none'
            else:
                self._taken.add(slot)
            return
        raise InventoryError(_REFUSED[keyword].format(value=value, alias=self.alias), path=place[0] or None,
                             line=place[1], field=_NAMES[keyword])

    def set(self, key: str, value: str, place: _Place) -> None:
        path, line = place
        if key == "identity_file":
            self._identity.append((value, place))
            return
        if key == "port":
            if not value.isdigit() or not 1 <= int(value) <= 65535:
                raise InventoryError(
                    f"expected an integer from 1 to 65535, got {value!r}", path=path or None, line=line, field="Port"
                )
            self.found.values[key] = int(value)
        elif key == "hostname":
            self.found.values[key] = self.expand(value, {"%": "%", "h": self.alias}, "HostName", place)
        elif key == "jump":
            self.found.values[key] = self.hops(value, place)
        else:
            self.found.values[key] = value
        self.found.places[key] = place

    def hops(self, value: str, place: _Place) -> list[str]:
        if value.lower() == "none":
            return []
        hops = [hop.strip() for hop in value.split(",")]
        for hop in hops:
            if self.inventory_hosts is not None and hop not in self.inventory_hosts:
                raise InventoryError(
                    f"ProxyJump hop {hop!r} (for {self.alias!r}) is not a host of the inventory; every hop must "
                    "be an inventory host name: add it under hosts:, or set jump: on the host",
                    path=place[0] or None,
                    line=place[1],
                    field="ProxyJump",
                )
        return hops

    def match(self, args: Sequence[str], path: str | None, line: int) -> bool | str:
        """Whether a ``Match`` line applies; a string says why it cannot be told."""
        if not args:
            raise InventoryError("Match needs at least one criterion", path=path, line=line)
        result: bool | str = True
        index = 0
        while index < len(args):
            word = args[index].lower()
            index += 1
            negated, word = word.startswith("!"), word.lstrip("!")
            value: bool | str
            if word == "all":
                value = True
            elif word == "canonical":
                value = False
            elif word == "final":
                value = "Match final (a second reading of the config) is not evaluated by remote_bash"
            elif word in _EVALUATED or word in _NOT_EVALUATED:
                if index >= len(args):
                    raise InventoryError(f"Match {word} needs an argument", path=path, line=line)
                pattern = args[index]
                index += 1
                value = self.criterion(word, pattern)
            else:
                raise InventoryError(f"unknown Match criterion {word!r}", path=path, line=line)
            if result is False:
                continue  # as ssh: once one criterion fails, the rest are not evaluated (exec not run)
            if isinstance(value, str):
                result = (
                    f"{value}; it could change what the ssh config gives {self.alias!r}: set these values on "
                    "the host in the inventory, or add a Host line before the Match that excludes this alias"
                )
            elif value == negated:
                result = False
        return result

    def criterion(self, word: str, pattern: str) -> bool | str:
        if word in _NOT_EVALUATED:
            why = " (it would run a command)" if word == "exec" else ""
            return f"Match {word} is not evaluated by remote_bash{why}"
        subject = {
            "host": str(self.found.values.get("hostname", self.alias)),
            "originalhost": self.alias,
            "user": str(self.found.values.get("user") or _local_user()),
            "localuser": _local_user(),
        }[word]
        return _host_matches([pattern], subject)

    def include(self, args: Sequence[str], path: str | None, line: int, depth: int) -> None:
        if depth >= _MAX_INCLUDE_DEPTH:
            raise InventoryError(
                f"Include nested more than {_MAX_INCLUDE_DEPTH} levels deep (does a file include itself?)",
                path=path,
                line=line,
            )
        for pattern in args:
            expanded = str(self.home) + pattern[1:] if pattern.startswith("~/") else pattern
            full = expanded if os.path.isabs(expanded) else str(self.home / ".ssh" / expanded)
            for name in sorted(glob.glob(full)):
                if name not in self.included and Path(name).is_file():
                    self.included[name] = read_text(Path(name), "ssh config file")
                if name in self.included:
                    self.read(self.included[name], name, depth + 1, True)

    def finish(self) -> None:
        """Expand IdentityFile tokens now that HostName, Port and User are known."""
        values = self.found.values
        tokens = {
            "%": "%",
            "d": str(self.home),
            "h": str(values.get("hostname", self.alias)),
            "i": str(os.getuid()) if hasattr(os, "getuid") else "",
            "L": socket.gethostname().split(".", 1)[0],
            "l": socket.gethostname(),
            "n": self.alias,
            "p": str(values.get("port", 22)),
            "r": str(values.get("user") or _local_user()),
            "u": _local_user(),
        }
        for value, place in self._identity:
            expanded = self.expand(value, tokens, "IdentityFile", place)
            self.found.identity_files.append((self.environment(expanded, place), place))
        if self.found.identity_files:
            values["identity_file"], self.found.places["identity_file"] = self.found.identity_files[0]

    def expand(self, value: str, tokens: dict[str, str], keyword: str, place: _Place) -> str:
        def token(match: re.Match[str]) -> str:
            if match[1] not in tokens:
                allowed = " ".join("%" + t for t in tokens)
                raise InventoryError(
                    f"{keyword} {value!r}: unknown token %{match[1]} ({keyword} accepts {allowed})",
                    path=place[0] or None,
                    line=place[1],
                    field=keyword,
                )
            return tokens[match[1]]

        return re.sub(r"%(.?)", token, value, flags=re.DOTALL)

    def environment(self, value: str, place: _Place) -> str:
        def variable(match: re.Match[str]) -> str:
            if match[1] not in os.environ:
                raise InventoryError(
                    f"IdentityFile {value!r}: the environment variable {match[1]} is not set",
                    path=place[0] or None,
                    line=place[1],
                    field="IdentityFile",
                )
            return os.environ[match[1]]

        return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", variable, value)


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


def _host_matches(patterns: Sequence[str], name: str) -> bool:
    """ssh_config pattern lists: any positive match and no negated one; case-insensitive."""
    positive = False
    for pattern in (p for arg in patterns for p in arg.split(",") if p):
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in body)
        if re.fullmatch(regex, name, re.IGNORECASE | re.DOTALL):
            if negated:
                return False
            positive = True
    return positive
