"""The host inventory: a YAML file turned into :class:`Inventory`, and Ansible-style host patterns.

The only I/O here is reading the inventory file and, for hosts that name an ``ssh_config`` alias,
the user's ``~/.ssh/config``; nothing here ever connects to a host. Every problem with a file is
an :class:`~remote_bash.errors.InventoryError` naming the file, the line, the field and what was
expected, so a typo is never a silent default.

The file is checked once against the pydantic models of :mod:`remote_bash._inventory_file` (the
settings a host entry, a group's ``vars`` and ``defaults`` share are derived from :class:`Host`);
what stays here is what no single section can check: names, references between hosts and groups
(through :mod:`graphlib` for cycles and nesting), the layering, and the patterns.

A host's settings are layered, lowest first: the built-in defaults of :class:`Host`, the
``defaults`` section, the ``vars`` of each group the host is in (outer groups before the groups
nested in them, then by name), the smallest ``forks`` of those groups, the values found under the
host's ``ssh_config`` alias, and finally the host's own fields. Mapping fields (``env``,
``labels``, ``limits``, ``policy``, and any mapping field added to Host) merge key by key; every
other field replaces.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Collection, Mapping, Sequence
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from remote_bash._paths import config_dir
from remote_bash._plain import Model, Record, factory
from remote_bash._regex import PatternError, compile_linear
from remote_bash._ssh_config import parse_ssh_config, read_ssh_config
from remote_bash._yaml_lines import (
    MAX_FILE_BYTES,
    MAX_NODES,
    Where,
    decode_text,
    line_of,
    parse_yaml,
    read_bytes,
    read_text,
)
from remote_bash.errors import InventoryError, SelectionError
from remote_bash.models import Host, _set_inventory

if TYPE_CHECKING:
    # The models of the file itself are loaded only to read one (not for an inventory from the cache).
    from remote_bash._inventory_file import GroupEntry, HostSettings, InventoryFile

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_NODES",
    "Inventory",
    "default_inventory_path",
    "load_inventory",
    "parse_ssh_config",
    "select_names",
]

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
_GLOB_CHARS = frozenset("*?[")


class Inventory(Model):
    """Every host the inventory file declares, resolved, with its groups."""

    _config: ClassVar[dict[str, Any]] = {"extra": "forbid", "frozen": True}

    path: Path | None = None
    """The file the inventory was read from; ``None`` when built in code."""
    hosts: dict[str, Host] = factory(dict)
    """Hosts by name, in the order the file lists them."""
    groups: dict[str, list[str]] = factory(dict)
    """Group name -> sorted names of its member hosts, through ``children`` too."""
    group_forks: dict[str, int] = factory(dict)
    """The ``forks`` a group declares: how many of its hosts fleet commands work on at once."""
    defaults: dict[str, Any] = factory(dict)
    """The ``defaults`` section as written in the file."""

    def select(self, pattern: str) -> list[Host]:
        """The hosts a pattern selects, in inventory order (see :func:`select_names`)."""
        return [self.hosts[name] for name in select_names(pattern, self.hosts, self.groups)]

    def host(self, name: str) -> Host:
        """The host called ``name``; :class:`SelectionError` with close matches when unknown."""
        try:
            return self.hosts[name]
        except KeyError:
            from remote_bash._inventory_file import suggest

            raise SelectionError(f"unknown host {name!r}{suggest(name, self.hosts)}") from None


# --- host patterns ---------------------------------------------------------------------------


def select_names(pattern: str, hosts: Mapping[str, Host], groups: Mapping[str, Sequence[str]]) -> list[str]:
    """Resolve an Ansible-style host pattern to host names, in the order of ``hosts``.

    Terms are separated by ``,`` or ``:``: ``all`` or ``*``, a host, a group, a glob over host and
    group names, or ``label=value`` (the value may be a glob). Plain terms are united, then each
    ``&term`` intersects and each ``!term`` excludes; a pattern of only ``&``/``!`` terms starts
    from every host. A term that names nothing raises :class:`SelectionError`; a well-formed
    pattern whose combination is empty returns ``[]``.
    """
    terms = [term.strip() for term in re.split(r"[,:]", pattern)]
    if not pattern.strip():
        raise SelectionError("the host pattern is empty; use 'all' for every host")
    union: set[str] = set()
    plain = False
    narrowing: list[tuple[str, set[str]]] = []
    for term in terms:
        op = term[:1] if term[:1] in ("&", "!") else ""
        name = term[len(op) :].strip()
        if not name:
            raise SelectionError(f"the host pattern {pattern!r} has an empty term")
        selected = _resolve_term(name, pattern, hosts, groups)
        if op:
            narrowing.append((op, selected))
        else:
            plain = True
            union |= selected
    result = union if plain else set(hosts)
    for op, selected in narrowing:
        if op == "&":
            result &= selected
    for op, selected in narrowing:
        if op == "!":
            result -= selected
    return [name for name in hosts if name in result]


def _resolve_term(
    term: str, pattern: str, hosts: Mapping[str, Host], groups: Mapping[str, Sequence[str]]
) -> set[str]:
    if term in ("all", "*"):
        return set(hosts)
    if "=" in term:
        key, _, value = (part.strip() for part in term.partition("="))
        in_use = {h.labels[key] for h in hosts.values() if key in h.labels}
        if not in_use:
            keys = sorted({k for h in hosts.values() for k in h.labels})
            raise SelectionError(
                f"no host has a label {key!r} (term {term!r} of pattern {pattern!r}); "
                f"labels in use: {', '.join(keys) or 'none'}"
            )
        found = {n for n, h in hosts.items() if key in h.labels and fnmatch.fnmatchcase(h.labels[key], value)}
        if not found:
            raise SelectionError(
                f"no host has the label {key}={value} (pattern {pattern!r}); "
                f"values of {key!r} in use: {', '.join(sorted(in_use))}"
            )
        return found
    if term in hosts:
        return {term}
    if term in groups:
        return {n for n in groups[term] if n in hosts}
    if _GLOB_CHARS & set(term):
        found = {n for n in hosts if fnmatch.fnmatchcase(n, term)}
        for group, members in groups.items():
            if fnmatch.fnmatchcase(group, term):
                found.update(n for n in members if n in hosts)
        matched_group = any(fnmatch.fnmatchcase(g, term) for g in groups)
        if not found and not matched_group:
            raise SelectionError(f"{term!r} (in pattern {pattern!r}) matches no host or group name")
        return found
    from remote_bash._inventory_file import suggest

    names = [*hosts, *groups]
    raise SelectionError(f"unknown host or group {term!r} in pattern {pattern!r}{suggest(term, names)}")


# --- where the inventory lives ---------------------------------------------------------------


def default_inventory_path(cli_value: str | None, env: Mapping[str, str]) -> Path | None:
    """``--inventory``, else ``$REMOTE_BASH_INVENTORY``, else the per-user file if it exists."""
    if cli_value:
        return Path(cli_value).expanduser()
    if env.get("REMOTE_BASH_INVENTORY"):
        return Path(env["REMOTE_BASH_INVENTORY"]).expanduser()
    candidate = config_dir(env) / "hosts.yaml"
    return candidate if candidate.is_file() else None


# --- resolving the file ----------------------------------------------------------------------


class _Layer(Record):
    """One layer of a host's settings, and where it was written (to point errors at it)."""

    file: str
    where: Where
    values: dict[str, Any]
    places: Mapping[str, tuple[str, int]] = factory(dict)
    """For a layer read from ssh config: the file and line of each value."""


class _Merged:
    """A host's settings with the layers applied, and the layer each value came from."""

    def __init__(self, layers: Sequence[_Layer]) -> None:
        self.values: dict[str, Any] = {}
        self.origins: dict[Where, _Layer] = {}
        for layer in layers:
            for key, value in layer.values.items():
                old = self.values.get(key)
                # Every mapping field (env, labels, limits, policy, and any added to Host later)
                # merges key by key; lists and scalars replace.
                if isinstance(value, dict) and isinstance(old, dict):
                    self.values[key] = {**old, **value}
                else:
                    self.values[key] = value
                    if isinstance(old, dict):  # the keys under the replaced mapping came from elsewhere
                        self.origins = {k: v for k, v in self.origins.items() if k[:1] != (key,)}
                self.origins[(key,)] = layer
                for sub in value if isinstance(value, dict) else ():
                    self.origins[(key, sub)] = layer

    def origin(self, loc: Where) -> _Layer | None:
        """The layer that set the value at ``loc`` (or the value around it)."""
        return next((self.origins[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in self.origins), None)


class _Groups:
    """The groups of a file, resolved: members through children, depth, forks and vars."""

    def __init__(self) -> None:
        self.members: dict[str, set[str]] = {}
        self.depth: dict[str, int] = {}
        self.forks: dict[str, int] = {}
        self.vars: dict[str, _Layer] = {}


class _Builder:
    def __init__(self, file: Path, lines: dict[Where, int], ssh_path: Path | None) -> None:
        self.file = file
        self.name = str(file)
        self.base = file.absolute().parent
        self.lines = lines
        self.ssh_path = ssh_path or Path("~/.ssh/config").expanduser()
        self._ssh_text: str | None = None
        self._ssh_included: dict[str, str] = {}  # each included file is read once per load
        self.used_ssh_config = False
        """Whether a host took settings from ssh config: the result then depends on more than the file."""

    def fail(self, message: str, where: Where, layer: _Layer | None = None) -> InventoryError:
        """An error at ``where`` inside ``layer`` (or the file itself)."""
        if layer is not None and layer.file != self.name:
            file, line = layer.places.get(where[0], (layer.file, 0)) if where else (layer.file, 0)
            return InventoryError(message, path=file, line=line or None, field=".".join(where) or None)
        full = (*(layer.where if layer else ()), *where)
        return InventoryError(message, path=self.name, line=line_of(self.lines, full), field=".".join(full) or None)

    def check_name(self, name: str, where: Where, kind: str) -> None:
        if not _NAME.match(name) or name == "all":
            raise self.fail(
                f"{name!r} cannot be a {kind} name: use letters, digits, '_', '-' and '.', "
                "not starting with '-' or '.', and not 'all'",
                where,
            )

    def layer(self, settings: HostSettings | None, where: Where, hosts: Collection[str]) -> _Layer:
        """The fields a section of the file sets, with paths made absolute, after checking the
        references and patterns in it."""
        from remote_bash._inventory_file import suggest

        values = settings.model_dump(exclude_unset=True) if settings is not None else {}
        empty = [key for key, value in values.items() if isinstance(value, Path) and str(value) == "."]
        for key, value in values.items():
            if isinstance(value, Path):  # relative to the inventory's directory, ~ expanded
                values[key] = self.base / value.expanduser()
        layer = _Layer(self.name, where, values)
        if empty:
            # Read as the inventory's own directory, which no file setting can mean.
            raise self.fail(f"{empty[0]} is empty (or '.'), which names a directory, not a file: name the "
                            "file, or remove the setting", (empty[0],), layer)
        for index, hop in enumerate(values.get("jump") or ()):
            if hop not in hosts:
                raise self.fail(
                    f"jump host {hop!r} is not a host of this inventory{suggest(hop, hosts)}",
                    ("jump", str(index)),
                    layer,
                )
        self.check_patterns(layer)
        return layer

    def check_patterns(self, layer: _Layer) -> None:
        """Every regular expression a layer sets compiles (deny, redact and approval rules): the one
        place patterns are checked at load, each at the line that sets it."""
        values = layer.values
        found: list[tuple[Where, Any]] = [
            (("policy", "deny", str(i)), p) for i, p in enumerate((values.get("policy") or {}).get("deny") or ())
        ]
        found += [(("redact", str(i)), p) for i, p in enumerate(values.get("redact") or ())]
        rules = values.get("approve")
        found += [
            (("approve", str(i), "regex"), rule["regex"])
            for i, rule in enumerate(rules if isinstance(rules, list) else ())
            if isinstance(rule, dict) and "regex" in rule
        ]
        for where, pattern in found:
            try:
                compile_linear(pattern, multiline=where[0] != "redact")
            except PatternError as exc:
                raise self.fail(f"{pattern!r} cannot be used: {exc}", where, layer) from None

    def ssh_layer(self, alias: str, origin: _Layer, hosts: Collection[str], own: Collection[str] = ()) -> _Layer:
        self.used_ssh_config = True
        if self._ssh_text is None:
            if not self.ssh_path.exists():
                raise self.fail(
                    f"ssh config file {self.ssh_path} does not exist (needed for ssh_config {alias!r})",
                    ("ssh_config",),
                    origin,
                )
            self._ssh_text = read_text(self.ssh_path, "ssh config file")
        found = read_ssh_config(
            self._ssh_text, alias, inventory_hosts=hosts, path=self.ssh_path, included=self._ssh_included,
            overridden=own,
        )
        if not found.matched:
            raise self.fail(f"no Host block in {self.ssh_path} matches {alias!r}", ("ssh_config",), origin)
        values = dict(found.values)
        places = dict(found.places)
        if found.identity_files:
            # One key file per host (its passphrase is the host's one keyring secret): the first
            # that exists, as ssh would try it first; else the first, so the error names it.
            paths = [(Path.home() / Path(text).expanduser(), place) for text, place in found.identity_files]
            chosen = next(((p, place) for p, place in paths if p.is_file()), paths[0])
            values["identity_file"], places["identity_file"] = chosen
        values.setdefault("hostname", alias)
        return _Layer(str(self.ssh_path), (), values, places)

    def validate(self, merged: _Merged, name: str, hostname: str, groups: list[str]) -> Host:
        data = {**merged.values, "name": name, "hostname": hostname, "groups": groups}
        from pydantic import ValidationError

        try:
            return Host.model_validate(data)
        except ValidationError as exc:
            from remote_bash._inventory_file import explain, first_problem, yaml_path
            from remote_bash._plain import twin

            first, count = first_problem(exc, data)
            loc = yaml_path(first, data)
            more = f" (and {count - 1} more problems)" if count > 1 else ""
            layer = merged.origin(loc) or _Layer(self.name, ("hosts", name), {})
            raise self.fail(explain(first, twin(Host), loc) + more, loc, layer) from None

    def build(self, spec: InventoryFile, defaults_raw: dict[str, Any]) -> Inventory:
        names = set(spec.hosts)
        for name in spec.hosts:
            self.check_name(name, ("hosts", name), "host")
        defaults = self.layer(spec.defaults, ("defaults",), names)
        entries = {name: self.layer(entry, ("hosts", name), names) for name, entry in spec.hosts.items()}
        groups = self.groups(spec.groups or {}, names)
        hosts: dict[str, Host] = {}
        for name, own in entries.items():
            mine = sorted((g for g, found in groups.members.items() if name in found),
                          key=lambda g: (groups.depth[g], g))
            layers = [defaults, *(groups.vars[g] for g in mine)]
            with_forks = [g for g in mine if g in groups.forks]
            if with_forks:
                least = min(with_forks, key=lambda g: groups.forks[g])
                layers.append(_Layer(self.name, ("groups", least), {"forks": groups.forks[least]}))
            merged = _Merged([*layers, own])
            alias = merged.values.get("ssh_config")
            if isinstance(alias, str) and alias:
                ssh = self.ssh_layer(alias, merged.origins[("ssh_config",)], names, own.values)
                merged = _Merged([*layers, ssh, own])
            hostname = merged.values.get("hostname", name)
            hosts[name] = host = self.validate(merged, name, hostname, sorted(mine))
            if host.credential == "key" and host.identity_file is None:
                # Never a silent login with whatever ~/.ssh/id_* holds: "key" means the named one.
                raise self.fail(
                    "'key' needs identity_file (the private key to log in with): set identity_file, or use "
                    "credential: agent or auto",
                    ("credential",),
                    merged.origins[("credential",)],
                )
        try:
            TopologicalSorter({name: host.jump for name, host in hosts.items()}).prepare()
        except CycleError as exc:
            cycle = _cycle(exc, list(spec.hosts))
            raise self.fail(
                "jump hosts form a cycle: " + " -> ".join(cycle) + " (set jump: [] on a host "
                "to stop it inheriting one)",
                ("hosts", cycle[0], "jump"),
            ) from None
        return Inventory._trusted(
            path=self.file,
            hosts=hosts,
            groups={g: sorted(found) for g, found in groups.members.items()},
            group_forks=groups.forks,
            defaults=defaults_raw,
        )

    def groups(self, spec: Mapping[str, GroupEntry | None], hosts: Collection[str]) -> _Groups:
        from remote_bash._inventory_file import GroupEntry, suggest

        result = _Groups()
        children: dict[str, list[str]] = {}
        for name, body in spec.items():
            where = ("groups", name)
            self.check_name(name, where, "group")
            if name in hosts:
                raise self.fail(
                    f"group {name!r} has the same name as a host; patterns could not tell them apart", where
                )
            body = body or GroupEntry()
            for key, known, kind in (("hosts", hosts, "host"), ("children", spec, "group")):
                for index, member in enumerate(getattr(body, key) or ()):
                    if member not in known:
                        raise self.fail(
                            f"{member!r} is not a {kind} of this inventory{suggest(member, known)}",
                            (*where, key, str(index)),
                        )
            children[name] = list(body.children or ())
            result.vars[name] = self.layer(body.vars, (*where, "vars"), hosts)
            result.members[name] = set(body.hosts or ())
            if body.forks is not None:
                result.forks[name] = body.forks
        try:
            # A group's children are its predecessors: they come first, so their members are known.
            order = list(TopologicalSorter(children).static_order())
        except CycleError as exc:
            cycle = _cycle(exc, list(spec))
            raise self.fail(
                "groups contain each other in a cycle: " + " -> ".join(cycle), ("groups", cycle[0], "children")
            ) from None
        for name in order:
            for child in children[name]:
                result.members[name] |= result.members[child]
        for name in reversed(order):  # outer groups first: depth is the longest way down from the top
            parents = [p for p in children if name in children[p]]
            result.depth[name] = max((result.depth[p] + 1 for p in parents), default=0)
        result.members = {name: result.members[name] for name in spec}
        return result


def _cycle(error: CycleError, order: Sequence[str]) -> list[str]:
    """The cycle graphlib found, each node pointing at the next, from the node the file lists first."""
    # graphlib lists each node before the node that depends on it: reversed, each node points at
    # the next (a host at its jump host, a group at its child).
    nodes = list(reversed(error.args[1]))[:-1]
    start = min(range(len(nodes)), key=lambda i: order.index(nodes[i]) if nodes[i] in order else len(order))
    nodes = nodes[start:] + nodes[:start]
    return [*nodes, nodes[0]]


def load_inventory(
    path: str | os.PathLike[str], *, ssh_config_path: str | os.PathLike[str] | None = None
) -> Inventory:
    """Read and resolve an inventory file; every problem is an :class:`InventoryError`.

    ``ssh_config_path`` replaces ``~/.ssh/config`` for hosts that name an ``ssh_config`` alias.
    """
    file = Path(path)
    inventory, _ = resolve(file, read_bytes(file, "inventory file"), ssh_config_path=ssh_config_path)
    return inventory


def resolve(
    file: Path, data: bytes, *, ssh_config_path: str | os.PathLike[str] | None = None
) -> tuple[Inventory, bool]:
    """The inventory ``data`` (the bytes of ``file``) declares, and whether resolving it read ssh config
    (it then depends on more files than ``file``)."""
    doc, lines = parse_yaml(decode_text(data, file, "inventory file"), str(file))
    if doc is None:
        raise InventoryError("the file is empty; expected a mapping with a 'hosts' section", path=str(file))
    from remote_bash._inventory_file import validate_file

    spec: InventoryFile = validate_file(doc, str(file), lines)
    ssh_path = Path(ssh_config_path).expanduser() if ssh_config_path is not None else None
    builder = _Builder(file, lines, ssh_path)
    inventory = builder.build(spec, doc.get("defaults") or {})
    adopt(inventory)
    return inventory, builder.used_ssh_config


def adopt(inventory: Inventory) -> None:
    """Mark ``inventory``'s hosts as its own: a session made from one of them alone is gated by it
    (access.Gate.of)."""
    for host in inventory.hosts.values():
        _set_inventory(host, inventory)
