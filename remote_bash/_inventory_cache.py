"""A per-user cache of resolved inventories, so that a command line does not parse YAML at every start.

An inventory is read in full every time (its bytes are the cache's key); what the cache spares is
parsing the YAML, checking it against the file's models (not even loaded on a hit) and layering
each host's settings. A cache entry holds the resolved hosts, groups, group forks and defaults as
JSON, with the inputs it was made from, all of which must match exactly for it to be used:

* the SHA-256 of the file's bytes, and the file's absolute path (relative paths in it resolve
  against its directory);
* the home directory (``~`` in paths);
* the code that reads a file: the size and modification time of each of the package's modules
  that take part, the version of Python, and those of the files of pydantic, PyYAML and RE2
  (which checks the patterns), found without importing them.

An inventory whose hosts take settings from ssh config (``ssh_config:``) is never cached: it
depends on more files than its own. Neither is one whose values do not survive a JSON round trip
unchanged (checked when the entry is written, host by host).

A cache is a speed-up, never a source of truth, and it cannot widen what a command may do:

* entries live in ``$XDG_CACHE_HOME/remote-bash/inventory`` (``~/.cache/...``), a directory
  checked as every directory remote_bash writes into (:func:`remote_bash._paths.private_dir`:
  owned by the user or root, writable by no one else, no link owned by someone else); an entry is
  used only when it is a regular file (never a link) owned by the user and readable by no one else,
  which is how it is written (0600, through a temporary file renamed into place);
* a hit is checked again against :class:`~remote_bash.models.Host`'s declarations, field by field
  (exact types, bounds and validators, by :func:`remote_bash._plain.from_json`, without pydantic;
  an entry is kept only when that check gives back the very hosts resolved), and checked for what
  no single host shows (each name as its key, jump hosts and group members that exist, no jump
  cycle); anything that fails is ignored and the file read in full, as is any
  entry that cannot be read, parsed or trusted. So the only entry that can change which hosts
  exist, or their settings, is one the user's own account wrote: the same account can edit the
  inventory itself. ``--allow`` is applied by the gate after loading, never cached.

Nothing here prints, logs or raises about the cache itself: errors are the inventory's own
(:class:`~remote_bash.errors.InventoryError`, from reading the file or resolving it on a miss).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
from collections.abc import Mapping
from functools import cache
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Any

from remote_bash._paths import UnsafePath, cache_dir, open_private, private_dir
from remote_bash._plain import NotValid, from_json
from remote_bash._yaml_lines import read_bytes
from remote_bash.inventory import Inventory, adopt, resolve
from remote_bash.models import Host

__all__ = ["FORMAT", "cached_inventory", "entry_path"]

FORMAT = 1
"""The layout of an entry; bumped when it changes, so an older entry is never misread."""
_MAX_ENTRY_BYTES = 64 * 2**20
_WHAT = "the inventory cache"
_MODULES = ("_inventory_cache", "_inventory_file", "_plain", "_regex", "_ssh_config", "_yaml_lines",
            "inventory", "models")
"""The package's modules whose code decides what a file resolves to."""


def entry_path(file: Path, env: Mapping[str, str]) -> Path:
    """Where the cache entry of the inventory ``file`` is kept (one per file: a new one replaces it)."""
    name = hashlib.sha256(os.fsencode(file.absolute())).hexdigest()[:32]
    return cache_dir(env) / "inventory" / f"{name}.json"


def cached_inventory(file: Path, env: Mapping[str, str]) -> Inventory:
    """The inventory ``file`` declares, as :func:`remote_bash.inventory.load_inventory` gives it,
    taken from the cache when an entry made from the very same inputs is there (and kept there
    when it was not)."""
    data = read_bytes(file, "inventory file")
    inputs = _inputs(file, data)
    path = entry_path(file, env)
    entry = _read(path)
    if entry is not None and entry.get("inputs") == inputs:
        found = _rebuild(file, entry.get("inventory"))
        if found is not None:
            return found
    inventory, used_ssh_config = resolve(file, data)
    if not used_ssh_config:
        _write(path, inputs, inventory)
    return inventory


# -- the key ------------------------------------------------------------------------------------------


def _inputs(file: Path, data: bytes) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "path": str(file.absolute()),
        "sha256": hashlib.sha256(data).hexdigest(),
        "home": os.path.expanduser("~"),
        "code": _code(),
    }


@cache
def _code() -> list[Any]:
    """What identifies the code that resolves a file: our modules' sizes and times, the libraries'."""
    import importlib.util

    package = Path(__file__).parent
    found: list[Any] = [sys.version]
    files = [package / f"{name}.py" for name in _MODULES]
    # Found, not imported (a hit loads neither pydantic nor YAML): pydantic's version file, and
    # the directory of each library, whose time changes when it is installed again.
    for library in ("pydantic", "pydantic_core", "yaml", "re2"):
        spec = importlib.util.find_spec(library)
        origin = Path(spec.origin) if spec is not None and spec.origin else Path(library)
        files.append(origin.with_name("version.py") if library == "pydantic" else origin)
        if spec is not None and spec.submodule_search_locations:
            files.append(origin.parent)
    for each in files:
        try:
            info = os.stat(each)
        except OSError:
            found.append([str(each), None])
        else:
            found.append([str(each), info.st_size, info.st_mtime_ns])
    return found


# -- reading and writing --------------------------------------------------------------------------------


def _read(path: Path) -> dict[str, Any] | None:
    """The entry at ``path``, or None when there is none or it cannot be trusted."""
    try:
        private_dir(path.parent, what=_WHAT, create=False)
        fd = open_private(path, os.O_RDONLY, what=_WHAT)
    except (OSError, UnsafePath):  # missing, unreadable, or not safely ours
        return None
    try:
        info = os.fstat(fd)
        if stat.S_IMODE(info.st_mode) & 0o077 or info.st_size > _MAX_ENTRY_BYTES:
            return None  # not as written here: an entry is owner-only
        with os.fdopen(os.dup(fd), "rb") as stream:
            entry = json.loads(stream.read(_MAX_ENTRY_BYTES + 1))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return entry if isinstance(entry, dict) else None


def _write(path: Path, inputs: dict[str, Any], inventory: Inventory) -> None:
    """Keep ``inventory`` as the entry for ``inputs``, when it survives the round trip unchanged."""
    hosts = {name: host.model_dump(mode="json") for name, host in inventory.hosts.items()}
    body = {"hosts": hosts, "groups": inventory.groups, "group_forks": inventory.group_forks,
            "defaults": inventory.defaults}
    try:
        text = json.dumps({"inputs": inputs, "inventory": body}, allow_nan=False)
        if json.loads(text)["inventory"] != body:
            return
    except (TypeError, ValueError):  # a YAML value JSON cannot hold (a date, bytes) in the defaults
        return
    try:
        if any(from_json(Host, dump) != inventory.hosts[name] for name, dump in hosts.items()):
            return
    except NotValid:  # a value the check of a hit would refuse: never kept
        return
    import secrets

    temporary = path.with_name(f".{path.stem}.{secrets.token_hex(8)}.tmp")
    try:
        private_dir(path.parent, what=_WHAT)
        fd = open_private(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, what=_WHAT)
        try:
            view = memoryview(text.encode())
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except (OSError, UnsafePath):  # a cache that cannot be written is only a slower next start
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def _rebuild(file: Path, body: Any) -> Inventory | None:
    """The inventory an entry's body holds, validated again; None when anything in it is wrong."""
    try:
        hosts = {name: from_json(Host, value) for name, value in body["hosts"].items()}
        inventory = Inventory._trusted(
            path=file, hosts=hosts, groups=_strings(body["groups"], list),
            group_forks=_strings(body["group_forks"], int), defaults=_strings(body["defaults"], object))
    except (NotValid, KeyError, TypeError, AttributeError):
        return None
    if not _consistent(inventory) or not _patterns_compile(inventory):
        return None
    adopt(inventory)
    return inventory


def _strings(value: Any, kind: type) -> dict[str, Any]:
    """``value``, a mapping of strings to ``kind`` (a group's members: a list of strings)."""
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise NotValid("not a mapping of strings")
    for each in value.values():
        if kind is int and (type(each) is not int or each < 1):
            raise NotValid("not a number of hosts at once (1 or more)")
        if kind is list and not (isinstance(each, list) and all(isinstance(name, str) for name in each)):
            raise NotValid("not a list of names")
    return value


def _patterns_compile(inventory: Inventory) -> bool:
    """The file's reader refuses a policy, redact or approve pattern that does not compile: an entry
    holding one is read in full again, not used to refuse every command."""
    from ._regex import PatternError, compile_linear

    for host in inventory.hosts.values():
        found = [(p, True) for p in host.policy.deny] + [(p, False) for p in host.redact]
        for rule in host.approve if isinstance(host.approve, list) else ():
            regex = rule.get("regex") if isinstance(rule, dict) else getattr(rule, "regex", None)
            if isinstance(regex, str):
                found.append((regex, True))
        for pattern, multiline in found:
            try:
                compile_linear(pattern, multiline=multiline)
            except PatternError:
                return False
    return True


def _consistent(inventory: Inventory) -> bool:
    """What the file's reader checks across hosts and groups, checked again for an entry."""
    hosts, groups = inventory.hosts, inventory.groups
    if any(host.name != name for name, host in hosts.items()):
        return False
    if any(hop not in hosts for host in hosts.values() for hop in host.jump):
        return False
    if any(member not in hosts for members in groups.values() for member in members):
        return False
    if any(host.groups != sorted(g for g, found in groups.items() if name in found) for name, host in hosts.items()):
        return False
    if any(group not in groups for group in inventory.group_forks):
        return False
    if any(host.credential == "key" and host.identity_file is None for host in hosts.values()):
        return False  # the file's reader refuses it
    try:
        TopologicalSorter({name: host.jump for name, host in hosts.items()}).prepare()
    except CycleError:
        return False
    return True
