"""The host inventory: a YAML file turned into :class:`Inventory`, and Ansible-style host patterns.

The only I/O here is reading the inventory file and, for hosts that name an ``ssh_config`` alias,
the user's ``~/.ssh/config``; nothing here ever connects to a host. Every problem with a file is
an :class:`~remote_bash.errors.InventoryError` naming the file, the line, the field and what was
expected, so a typo is never a silent default.

A host's settings are layered, lowest first: the built-in defaults of :class:`Host`, the
``defaults`` section, the ``vars`` of each group the host is in (outer groups before the groups
nested in them, then by name), the smallest ``forks`` of those groups, the values found under the
host's ``ssh_config`` alias, and finally the host's own fields. Mapping fields (``env``,
``labels``, ``limits``, ``policy``) merge key by key; every other field replaces.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from remote_bash._paths import config_dir
from remote_bash._ssh_config import parse_ssh_config, ssh_options
from remote_bash._yaml_lines import MAX_FILE_BYTES, MAX_NODES, Where, parse_yaml, read_text
from remote_bash.errors import InventoryError, SelectionError
from remote_bash.models import Host, _set_inventory

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_NODES",
    "Inventory",
    "default_inventory_path",
    "load_inventory",
    "parse_ssh_config",
    "select_names",
]

_TOP_KEYS = ("defaults", "hosts", "groups")
_GROUP_KEYS = ("hosts", "children", "vars", "forks")
_INHERITED = tuple(f for f in Host.model_fields if f not in ("name", "hostname", "groups"))
_HOST_KEYS = tuple(f for f in Host.model_fields if f not in ("name", "groups"))
_MERGED = frozenset({"env", "labels", "limits", "policy"})
_PATH_FIELDS = frozenset({"identity_file", "known_hosts", "audit_key_file"})
_FIXED = {
    "name": "a host's name is its key under hosts:",
    "groups": "list the host under groups.<group>.hosts instead",
    "hostname": "set it on each host",
}
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
_GLOB_CHARS = frozenset("*?[")


class Inventory(BaseModel):
    """Every host the inventory file declares, resolved, with its groups."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path | None = None
    """The file the inventory was read from; ``None`` when built in code."""
    hosts: dict[str, Host] = Field(default_factory=dict)
    """Hosts by name, in the order the file lists them."""
    groups: dict[str, list[str]] = Field(default_factory=dict)
    """Group name -> sorted names of its member hosts, through ``children`` too."""
    group_forks: dict[str, int] = Field(default_factory=dict)
    """The ``forks`` a group declares: how many of its hosts fleet commands work on at once."""
    defaults: dict[str, Any] = Field(default_factory=dict)
    """The ``defaults`` section as written in the file."""

    def select(self, pattern: str) -> list[Host]:
        """The hosts a pattern selects, in inventory order (see :func:`select_names`)."""
        return [self.hosts[name] for name in select_names(pattern, self.hosts, self.groups)]

    def host(self, name: str) -> Host:
        """The host called ``name``; :class:`SelectionError` with close matches when unknown."""
        try:
            return self.hosts[name]
        except KeyError:
            raise SelectionError(f"unknown host {name!r}{_suggest(name, self.hosts)}") from None


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
    names = [*hosts, *groups]
    raise SelectionError(f"unknown host or group {term!r} in pattern {pattern!r}{_suggest(term, names)}")


def _suggest(name: str, choices: Collection[str]) -> str:
    close = [repr(c) for c in difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6)]
    if not close:
        return ""
    return (
        "; did you mean " + (f"{', '.join(close[:-1])} or {close[-1]}" if len(close) > 1 else close[0]) + "?"
    )


# --- where the inventory lives ---------------------------------------------------------------


def default_inventory_path(cli_value: str | None, env: Mapping[str, str]) -> Path | None:
    """``--inventory``, else ``$REMOTE_BASH_INVENTORY``, else the per-user file if it exists."""
    if cli_value:
        return Path(cli_value).expanduser()
    if env.get("REMOTE_BASH_INVENTORY"):
        return Path(env["REMOTE_BASH_INVENTORY"]).expanduser()
    candidate = config_dir(env) / "hosts.yaml"
    return candidate if candidate.is_file() else None


# --- validation messages ---------------------------------------------------------------------


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nothing (null)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(annotation: Any, metadata: Sequence[Any]) -> str:
    if get_origin(annotation) in (Union, UnionType):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if annotation is bool:
        return "true or false"
    if annotation in (int, float):
        bound = {k: getattr(m, k) for m in metadata for k in ("ge", "gt", "le") if hasattr(m, k)}
        noun = "an integer" if annotation is int else "a number"
        if "ge" in bound and "le" in bound:
            return f"{noun} from {bound['ge']} to {bound['le']}"
        if "ge" in bound:
            return f"{noun} of at least {bound['ge']}"
        return f"{noun} greater than {bound['gt']}" if "gt" in bound else noun
    if annotation is str:
        return "a non-empty string" if any(getattr(m, "min_length", 0) for m in metadata) else "a string"
    if annotation is Path:
        return "a file path"
    if origin is list:
        return "a list of strings" if args == (str,) else "a list"
    if origin is dict:
        return "a mapping of names to strings" if args == (str, str) else "a mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "a mapping with any of the keys " + ", ".join(annotation.model_fields)
    return str(annotation)


def _explain(error: ErrorDetails) -> str:
    kind, loc = error["type"], error["loc"]
    annotation: Any = Host
    metadata: Sequence[Any] = ()
    for part in loc if kind != "extra_forbidden" else loc[:-1]:
        if get_origin(annotation) in (Union, UnionType):
            annotation = next(a for a in get_args(annotation) if a is not type(None))
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:
                break
            annotation, metadata = field.annotation, field.metadata
        elif get_origin(annotation) in (list, dict):
            annotation, metadata = get_args(annotation)[0 if part == "[key]" else -1], ()
    if kind == "extra_forbidden" and isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _unknown_key(str(loc[-1]), tuple(annotation.model_fields))
    if kind == "missing":
        return "this field is required"
    if kind == "value_error":
        return str(error.get("ctx", {}).get("error", error["msg"]))
    return f"expected {_describe(annotation, metadata)}, got {_show(error['input'])}"


def _unknown_key(key: str, allowed: Sequence[str]) -> str:
    hint = _suggest(key, allowed)
    return f"unknown field {key!r}" + (hint or f"; expected one of: {', '.join(allowed)}")


# --- building the inventory ------------------------------------------------------------------


@dataclass(frozen=True)
class _Origin:
    """Where a host setting came from, to point errors at the right file and line."""

    file: str
    where: Where
    line: int | None = None  # None: look the line up in the inventory's own key lines


class _Fields:
    """A host's settings as the layers are applied, with the origin of each."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.origins: dict[Where, _Origin] = {}

    def apply(self, layer: Mapping[str, Any], origin: _Origin) -> None:
        for key, value in layer.items():
            old = self.values.get(key)
            at = _Origin(origin.file, (*origin.where, key), origin.line)
            if key in _MERGED and isinstance(value, dict) and isinstance(old, dict):
                self.values[key] = {**old, **value}
            else:
                self.values[key] = value
                self.origins = {k: v for k, v in self.origins.items() if k[:1] != (key,)}
            self.origins[(key,)] = at
            if isinstance(value, dict):
                for sub in value:
                    self.origins[(key, sub)] = _Origin(at.file, (*at.where, sub), at.line)


class _Builder:
    def __init__(self, file: Path, lines: dict[Where, int], ssh_path: Path | None) -> None:
        self.file = file
        self.name = str(file)
        self.base = file.absolute().parent
        self.lines = lines
        self.ssh_path = ssh_path or Path("~/.ssh/config").expanduser()
        self._ssh_text: str | None = None

    def fail(self, message: str, where: Where, origin: _Origin | None = None) -> InventoryError:
        origin = origin or _Origin(self.name, ())
        full = (*origin.where, *where)
        line = origin.line
        if origin.file == self.name:
            line = next(
                (self.lines[full[:n]] for n in range(len(full), 0, -1) if full[:n] in self.lines), None
            )
        return InventoryError(message, path=origin.file, line=line, field=".".join(full) or None)

    def mapping(
        self, value: Any, where: Where, allowed: Sequence[str] | None, expected: str
    ) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"expected {expected}, got {_show(value)}", where)
        for key in value:
            if allowed is None or key in allowed:
                continue
            if key in _FIXED:
                raise self.fail(f"{key!r} cannot be set here: {_FIXED[key]}", (*where, key))
            raise self.fail(_unknown_key(key, allowed), (*where, key))
        return value

    def names(self, value: Any, where: Where, known: Collection[str], kind: str) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"expected a list of {kind} names, got {_show(value)}", where)
        for index, name in enumerate(value):
            if name not in known:
                raise self.fail(
                    f"{name!r} is not a {kind} of this inventory{_suggest(name, known)}", (*where, str(index))
                )
        return value

    def check_name(self, name: str, where: Where, kind: str) -> None:
        if not _NAME.match(name) or name == "all":
            raise self.fail(
                f"{name!r} cannot be a {kind} name: use letters, digits, '_', '-' and '.', "
                "not starting with '-' or '.', and not 'all'",
                where,
            )

    def layer(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """A layer of settings from the inventory, with its paths made absolute."""
        result = dict(raw)
        for key in _PATH_FIELDS & result.keys():
            if isinstance(result[key], str):
                result[key] = self.base / Path(result[key]).expanduser()
        for key in ("env", "labels"):
            # ``PORT: 8080`` means the string; booleans stay errors, as yes/no/on/off are ambiguous.
            if isinstance(result.get(key), dict):
                result[key] = {
                    k: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v
                    for k, v in result[key].items()
                }
        return result

    def validate(self, fields: _Fields, name: str, hostname: str, groups: list[str]) -> Host:
        try:
            return Host.model_validate(
                {**fields.values, "name": name, "hostname": hostname, "groups": groups}
            )
        except ValidationError as exc:
            errors = exc.errors()
            error = errors[0]
            loc = tuple(str(part) for part in error["loc"])
            found = next((loc[:n] for n in range(len(loc), 0, -1) if loc[:n] in fields.origins), None)
            origin = fields.origins[found] if found else _Origin(self.name, ("hosts", name))
            more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
            rest = tuple(part for part in loc[len(found or ()) :] if part != "[key]")
            raise self.fail(_explain(error) + more, rest, origin) from None

    def ssh_layer(
        self, alias: str, origin: _Origin, hosts: Collection[str]
    ) -> tuple[dict[str, Any], _Origin]:
        if self._ssh_text is None:
            if not self.ssh_path.exists():
                raise self.fail(
                    f"ssh config file {self.ssh_path} does not exist (needed for ssh_config {alias!r})",
                    (),
                    origin,
                )
            self._ssh_text = read_text(self.ssh_path, "ssh config file")
        found, matched = ssh_options(self._ssh_text, alias, hosts, str(self.ssh_path))
        if not matched:
            raise self.fail(f"no Host block in {self.ssh_path} matches {alias!r}", (), origin)
        values = {key: value for key, (value, _) in found.items()}
        if isinstance(values.get("identity_file"), str):
            values["identity_file"] = Path.home() / Path(values["identity_file"]).expanduser()
        values.setdefault("hostname", alias)
        return values, _Origin(str(self.ssh_path), (f"Host {alias}",))

    def build(self, doc: Any) -> Inventory:
        if doc is None:
            raise self.fail("the file is empty; expected a mapping with a 'hosts' section", ())
        top = self.mapping(doc, (), _TOP_KEYS, "a mapping with 'hosts', 'groups' and 'defaults' sections")
        if "hosts" not in top:
            raise self.fail("the file has no 'hosts' section", ())
        defaults = self.mapping(top.get("defaults"), ("defaults",), _INHERITED, "a mapping of host settings")
        hosts_raw = self.mapping(top["hosts"], ("hosts",), None, "a mapping of host names to settings")
        groups_raw = self.mapping(top.get("groups"), ("groups",), None, "a mapping of group names")
        probe = _Fields()
        probe.apply(self.layer(defaults), _Origin(self.name, ("defaults",)))
        self.validate(probe, "defaults", "defaults", [])
        entries = {}
        for name, entry in hosts_raw.items():
            self.check_name(name, ("hosts", name), "host")
            entries[name] = self.mapping(entry, ("hosts", name), _HOST_KEYS, "a mapping of host settings")
        groups, members, order, forks = self.groups(groups_raw, hosts_raw)
        hosts: dict[str, Host] = {}
        for name, own in entries.items():
            mine = sorted((g for g in groups if name in members[g]), key=lambda g: (order[g], g))
            layers = [(self.layer(defaults), _Origin(self.name, ("defaults",)))]
            layers += [
                (self.layer(groups[g].get("vars") or {}), _Origin(self.name, ("groups", g, "vars")))
                for g in mine
            ]
            with_forks = [g for g in mine if g in forks]
            if with_forks:
                least = min(with_forks, key=lambda g: forks[g])
                layers.append(({"forks": forks[least]}, _Origin(self.name, ("groups", least))))
            mine_layer = (self.layer(own), _Origin(self.name, ("hosts", name)))
            fields = _Fields()
            for layer, origin in [*layers, mine_layer]:
                fields.apply(layer, origin)
            alias = fields.values.get("ssh_config")
            if isinstance(alias, str) and alias:
                ssh_values, ssh_origin = self.ssh_layer(alias, fields.origins[("ssh_config",)], hosts_raw)
                fields = _Fields()
                for layer, origin in [*layers, (ssh_values, ssh_origin), mine_layer]:
                    fields.apply(layer, origin)
            hostname = fields.values.pop("hostname", name)
            hosts[name] = host = self.validate(fields, name, hostname, sorted(mine))
            self.check_patterns(host, fields)
            if host.credential == "key" and host.identity_file is None:
                # Never a silent login with whatever ~/.ssh/id_* holds: "key" means the named one.
                raise self.fail("'key' needs identity_file (the private key to log in with): set "
                                "identity_file, or use credential: agent or auto", (), fields.origins[("credential",)])
            for index, hop in enumerate(host.jump):
                if hop not in hosts_raw:
                    raise self.fail(
                        f"jump host {hop!r} is not a host of this inventory{_suggest(hop, hosts_raw)}",
                        (str(index),),
                        fields.origins[("jump",)],
                    )
        cycle = _find_cycle({name: host.jump for name, host in hosts.items()})
        if cycle:
            raise self.fail(
                "jump hosts form a cycle: " + " -> ".join(cycle) + " (set jump: [] on a host "
                "to stop it inheriting one)",
                ("hosts", cycle[0], "jump"),
            )
        return Inventory(
            path=self.file,
            hosts=hosts,
            groups={g: sorted(members[g]) for g in groups},
            group_forks=forks,
            defaults=defaults,
        )

    def check_patterns(self, host: Host, fields: _Fields) -> None:
        for field, patterns in (("policy", host.policy.deny), ("redact", host.redact)):
            key = ("policy", "deny") if field == "policy" else ("redact",)
            for index, pattern in enumerate(patterns):
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise self.fail(
                        f"{pattern!r} is not a valid regular expression: {exc}",
                        (str(index),),
                        fields.origins[key],
                    ) from None

    def groups(
        self, raw: Mapping[str, Any], hosts: Collection[str]
    ) -> tuple[dict[str, dict[str, Any]], dict[str, set[str]], dict[str, int], dict[str, int]]:
        groups: dict[str, dict[str, Any]] = {}
        forks: dict[str, int] = {}
        for name, body in raw.items():
            where = ("groups", name)
            self.check_name(name, where, "group")
            if name in hosts:
                raise self.fail(
                    f"group {name!r} has the same name as a host; patterns could not tell them apart", where
                )
            group = self.mapping(body, where, _GROUP_KEYS, "a mapping with hosts, children, vars or forks")
            group["hosts"] = self.names(group.get("hosts"), (*where, "hosts"), hosts, "host")
            group["children"] = self.names(group.get("children"), (*where, "children"), raw, "group")
            variables = self.mapping(
                group.get("vars"), (*where, "vars"), _INHERITED, "a mapping of host settings"
            )
            probe = _Fields()
            probe.apply(self.layer(variables), _Origin(self.name, (*where, "vars")))
            self.validate(probe, name, name, [])
            if "forks" in group:
                value = group["forks"]
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise self.fail(f"expected a positive integer, got {_show(value)}", (*where, "forks"))
                forks[name] = value
            groups[name] = group
        children = {name: group["children"] for name, group in groups.items()}
        cycle = _find_cycle(children)
        if cycle:
            raise self.fail(
                "groups contain each other in a cycle: " + " -> ".join(cycle),
                ("groups", cycle[0], "children"),
            )
        members: dict[str, set[str]] = {}
        for name in groups:
            seen, todo, found = {name}, [name], set()
            while todo:
                group = groups[todo.pop()]
                found.update(group["hosts"])
                todo.extend(c for c in group["children"] if c not in seen)
                seen.update(group["children"])
            members[name] = found
        return groups, members, _depths(children), forks


def _find_cycle(graph: Mapping[str, Sequence[str]]) -> list[str] | None:
    """The first cycle found in a directed graph, as a path that ends where it starts."""
    state: dict[str, int] = {}  # 1: on the current path, 2: fully explored
    for root in graph:
        if root in state:
            continue
        path, stack = [root], [iter(graph.get(root, ()))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(graph.get(nxt, ())))
    return None


def _depths(children: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Longest distance from a top-level group: parents always sort before their children."""
    indegree = dict.fromkeys(children, 0)
    for kids in children.values():
        for kid in kids:
            indegree[kid] += 1
    depth = dict.fromkeys(children, 0)
    ready = [g for g, n in indegree.items() if n == 0]
    while ready:
        group = ready.pop()
        for kid in children[group]:
            depth[kid] = max(depth[kid], depth[group] + 1)
            indegree[kid] -= 1
            if indegree[kid] == 0:
                ready.append(kid)
    return depth


def load_inventory(
    path: str | os.PathLike[str], *, ssh_config_path: str | os.PathLike[str] | None = None
) -> Inventory:
    """Read and resolve an inventory file; every problem is an :class:`InventoryError`.

    ``ssh_config_path`` replaces ``~/.ssh/config`` for hosts that name an ``ssh_config`` alias.
    """
    file = Path(path)
    text = read_text(file, "inventory file")
    doc, lines = parse_yaml(text, str(file))
    ssh_path = Path(ssh_config_path).expanduser() if ssh_config_path is not None else None
    inventory = _Builder(file, lines, ssh_path).build(doc)
    for host in inventory.hosts.values():
        # A session made from one of these hosts alone is gated by this inventory (access.Gate.of).
        _set_inventory(host, inventory)
    return inventory
