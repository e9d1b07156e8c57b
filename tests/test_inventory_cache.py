"""The per-user cache of resolved inventories: the same inventory as a full read, or no cache at all.

Each refusal is shown by an entry that would change a host if it were used: the result must be
the file's, never the entry's.
"""

from __future__ import annotations

import json
import os
import pwd
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remote_bash._inventory_cache import cached_inventory, entry_path
from remote_bash.access import Gate
from remote_bash.errors import InventoryError
from remote_bash.inventory import load_inventory
from remote_bash.models import inventory_of

from .sshd import TEST_USER

INVENTORY = """\
defaults:
  user: deploy
  command_timeout: 60
  policy: {deny: ['rm\\s+-rf\\s+/']}
hosts:
  web-1: {hostname: 10.0.0.5, labels: {env: staging}, jump: [bastion], identity_file: keys/web}
  bastion: {hostname: bastion.example.com, jump: [], approve: [privilege, {regex: reboot}]}
  db-1: {hostname: 10.0.0.9, port: 2202, redact: ['token=\\S+']}
groups:
  web: {hosts: [web-1], vars: {env: {APP: web}}, forks: 5}
  staging: {children: [web], hosts: [db-1]}
"""


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return {"HOME": str(home), "XDG_CACHE_HOME": str(tmp_path / "cache")}


def write(tmp_path: Path, text: str = INVENTORY) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def same(a: object, b: object) -> None:
    for name in ("path", "hosts", "groups", "group_forks", "defaults"):
        assert getattr(a, name) == getattr(b, name), name


def tamper(entry: Path, port: int = 4444) -> None:
    """Change db-1's port in the entry, keeping its inputs: used, it would show."""
    data = json.loads(entry.read_text())
    data["inventory"]["hosts"]["db-1"]["port"] = port
    mode = entry.stat().st_mode
    entry.write_text(json.dumps(data))
    entry.chmod(mode)


def test_a_miss_then_a_hit_give_the_inventory_a_full_read_gives(tmp_path: Path, env: dict[str, str]) -> None:
    file = write(tmp_path)
    expected = load_inventory(file)
    first = cached_inventory(file, env)
    entry = entry_path(file, env)
    assert entry.is_file()
    assert entry.stat().st_mode & 0o777 == 0o600
    assert entry.parent.stat().st_mode & 0o777 == 0o700
    second = cached_inventory(file, env)
    same(first, expected)
    same(second, expected)
    # A host from the cache is still gated by its inventory when a session is made from it alone.
    assert all(inventory_of(h) is second for h in second.hosts.values())
    gate = Gate.of(second.hosts["web-1"])
    assert gate is not None
    assert [h.name for h in gate.admitted(["web-1"])] == ["bastion", "web-1"]


def test_an_entry_is_used_only_for_the_same_bytes(tmp_path: Path, env: dict[str, str]) -> None:
    file = write(tmp_path)
    cached_inventory(file, env)
    write(tmp_path, INVENTORY.replace("port: 2202", "port: 2203"))
    assert cached_inventory(file, env).hosts["db-1"].port == 2203
    # A broken file is the file's error, whatever the cache holds.
    write(tmp_path, INVENTORY.replace("port: 2202", "port: nope"))
    with pytest.raises(InventoryError, match="port"):
        cached_inventory(file, env)


def test_the_entry_shows_when_used(tmp_path: Path, env: dict[str, str]) -> None:
    """The premise of the refusals below: an entry's content, when trusted, is what a hit returns."""
    file = write(tmp_path)
    cached_inventory(file, env)
    tamper(entry_path(file, env))
    assert cached_inventory(file, env).hosts["db-1"].port == 4444


def test_an_entry_others_could_read_is_ignored(tmp_path: Path, env: dict[str, str]) -> None:
    file = write(tmp_path)
    cached_inventory(file, env)
    entry = entry_path(file, env)
    tamper(entry)
    entry.chmod(0o644)
    assert cached_inventory(file, env).hosts["db-1"].port == 2202


def test_a_link_in_place_of_an_entry_is_ignored(tmp_path: Path, env: dict[str, str]) -> None:
    file = write(tmp_path)
    cached_inventory(file, env)
    entry = entry_path(file, env)
    tamper(entry)
    moved = entry.with_name("elsewhere.json")
    entry.rename(moved)
    entry.symlink_to(moved)
    assert cached_inventory(file, env).hosts["db-1"].port == 2202


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user's needs root")
def test_an_entry_of_another_user_is_ignored(tmp_path: Path, env: dict[str, str]) -> None:
    file = write(tmp_path)
    cached_inventory(file, env)
    entry = entry_path(file, env)
    tamper(entry)
    os.chown(entry, pwd.getpwnam(TEST_USER).pw_uid, -1)
    assert cached_inventory(file, env).hosts["db-1"].port == 2202


def test_a_cache_directory_others_can_write_is_not_used(tmp_path: Path, env: dict[str, str]) -> None:
    file = write(tmp_path)
    cached_inventory(file, env)
    entry = entry_path(file, env)
    tamper(entry)
    entry.parent.chmod(0o777)
    assert cached_inventory(file, env).hosts["db-1"].port == 2202
    entry.unlink()
    cached_inventory(file, env)
    assert not entry.exists()  # nor written into


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda d: d["inventory"]["hosts"]["db-1"].update(port="nope"), "a value the model refuses"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(surprise=1), "a field the model does not know"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(jump=["nowhere"]), "a jump host that does not exist"),
        (lambda d: d["inventory"]["hosts"]["bastion"].update(jump=["web-1"]), "a jump cycle"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(name="web-1"), "a name that is not its key"),
        (lambda d: d["inventory"]["groups"]["web"].append("db-1"), "a member whose host does not say so"),
        (lambda d: d["inventory"]["groups"].update(ghost=["nowhere"]), "a member that does not exist"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(policy={"deny": ["("]}), "a deny pattern that fails"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(redact=["("]), "a redact pattern that fails"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(approve=[{"regex": "("}]), "an approve regex that fails"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(port=0), "a number out of its bounds"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(port=True), "a boolean for a number"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(port="2202"), "a number as a string"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(command_timeout="60"), "a float as a string"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(command_timeout=-1.0), "a deadline below zero"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(host_key_policy="none"), "a choice not offered"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(env={"1A": "x"}), "a value its validator refuses"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(labels={"a": 1}), "a number where text goes"),
        (lambda d: d["inventory"]["hosts"]["db-1"].pop("port"), "a field left out"),
        (lambda d: d["inventory"]["hosts"]["db-1"]["limits"].update(cores=2), "a nested field unknown"),
        (lambda d: d["inventory"]["hosts"]["db-1"]["limits"].update(nice=20), "a nested bound broken"),
        (lambda d: d["inventory"]["hosts"]["db-1"]["edit"].update(deny=["etc"]), "a relative edit path"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(approve=["sudo"]), "an approval class unknown"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(approve=[{"writes_outside": []}]), "an empty list"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(identity_file=5), "a number for a path"),
        (lambda d: d["inventory"]["group_forks"].update(web="5"), "a group's forks as a string"),
        (lambda d: d["inventory"]["group_forks"].update(web=0), "a group's forks of 0 (a fleet would wait forever)"),
        (lambda d: d["inventory"]["group_forks"].update(web=-5), "a group's forks below 0"),
        (lambda d: d["inventory"]["hosts"]["db-1"].update(credential="key", identity_file=None),
         "a key login without a key, which the file refuses"),
        (lambda d: d["inventory"]["groups"].update(web="web-1"), "a group's members as a string"),
        (lambda d: d["inputs"].update(code=[]), "other code"),
        (lambda d: d["inputs"].update(home="/elsewhere"), "another home directory"),
        (lambda d: d.update(inventory=[]), "a body of the wrong shape"),
    ],
)
def test_an_entry_that_does_not_check_out_is_ignored(
        tmp_path: Path, env: dict[str, str], change: Callable[[dict[str, Any]], None], why: str) -> None:
    file = write(tmp_path)
    expected = load_inventory(file)
    cached_inventory(file, env)
    entry = entry_path(file, env)
    data = json.loads(entry.read_text())
    data["inventory"]["hosts"]["db-1"]["port"] = 4444
    change(data)
    entry.write_text(json.dumps(data))
    same(cached_inventory(file, env), expected)


def test_garbage_in_an_entry_is_ignored(tmp_path: Path, env: dict[str, str]) -> None:
    file = write(tmp_path)
    cached_inventory(file, env)
    entry = entry_path(file, env)
    for garbage in ("", "{", "[]", "null", '{"inputs": 1}', "\x00" * 10):
        entry.write_text(garbage)
        same(cached_inventory(file, env), load_inventory(file))


def test_an_inventory_that_reads_ssh_config_is_never_cached(tmp_path: Path, env: dict[str, str]) -> None:
    ssh = Path(env["HOME"]) / ".ssh"
    ssh.mkdir()
    (ssh / "config").write_text("Host db1-alias\n  HostName db1.internal\n  Port 2202\n")
    file = write(tmp_path, "hosts:\n  db-1: {ssh_config: db1-alias}\n")
    assert cached_inventory(file, env).hosts["db-1"].port == 2202
    assert not entry_path(file, env).exists()
    (ssh / "config").write_text("Host db1-alias\n  HostName db1.internal\n  Port 2203\n")
    assert cached_inventory(file, env).hosts["db-1"].port == 2203


def test_relative_paths_resolve_against_the_file_wherever_it_is_read_from(
        tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path)
    monkeypatch.chdir(tmp_path)
    first = cached_inventory(Path("hosts.yaml"), env)
    assert first.hosts["web-1"].identity_file == tmp_path / "keys" / "web"
    other = tmp_path / "other"
    other.mkdir()
    write(other)
    monkeypatch.chdir(other)
    assert cached_inventory(Path("hosts.yaml"), env).hosts["web-1"].identity_file == other / "keys" / "web"


def test_a_hit_loads_neither_pydantic_nor_yaml(tmp_path: Path, env: dict[str, str]) -> None:
    """What a cold ``exec`` gains from the cache: the inventory, its hosts and a command's result
    without pydantic (a tenth of its start) or PyYAML, in a process of its own."""
    file = write(tmp_path)
    cached_inventory(file, env)
    script = f"""
import sys
from pathlib import Path
from remote_bash._inventory_cache import cached_inventory
from remote_bash.models import CommandResult, KillReport
inventory = cached_inventory(Path({str(file)!r}), {env!r})
host = inventory.host("db-1")
assert host.port == 2202 and host.redact == ["token=\\S+"] and host.user == "deploy", host
assert [type(rule).__name__ for rule in inventory.host("bastion").approve] == ["str", "RegexApproveRule"]
result = CommandResult._from_session(command="true", output="", exit_code=0, timed_out=False, truncated=False,
                                     shell_lost=False, duration=0.1, output_bytes=0, output_sha256="", timeout=1.0,
                                     kill=KillReport._trusted(signals=["KILL"]))
assert result.model_dump(mode="json")["kill"]["signals"] == ["KILL"]
loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("pydantic", "pydantic_core", "yaml"))
assert not loaded, loaded
"""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env}, cwd=Path(__file__).parent.parent)
    assert done.returncode == 0, done.stderr
