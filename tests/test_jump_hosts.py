"""Jump hosts against real sshd: what their keys leave in the audit log, which keys the gate lets
them trust, and the errors a target behind one meets.

A jump host under ``host_key_policy: accept-new`` with an empty pin file has its first key recorded
in that file, and the target's ``session.start`` names the hop and the fingerprint. A copy of an
inventory host (target or jump host) that points at another known_hosts file or another
host_key_policy is refused before anything is dialled. A target behind a jump host on a port where
nothing listens is ``ConnectionRefused``, one whose name does not resolve is ``HostUnreachable``,
one that never answers is ``ConnectTimeout``, and a jump host that does not forward refuses, each
naming the target and the jump host, as a direct connection's errors do.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import yaml

from remote_bash.errors import (
    ConnectError,
    ConnectionRefused,
    ConnectTimeout,
    HostNotAllowed,
    HostUnreachable,
)
from remote_bash.inventory import Inventory, load_inventory
from remote_bash.models import Host
from remote_bash.session import RemoteBashSession

from .sshd import TestHosts
from .test_cli import host_entry


@pytest.fixture(scope="module")
def hops(hosts: TestHosts) -> dict[str, Host]:
    """j1 -> j2 -> target, three real sshd, plus a jump host whose sshd forwards nothing."""
    return {"j1": hosts.start("jh-j1"), "j2": hosts.start("jh-j2"), "target": hosts.start("jh-target"),
            "closed": hosts.start("jh-closed", extra_config=("AllowTcpForwarding no",))}


def inventory(tmp_path: Path, entries: dict[str, dict[str, Any]]) -> Inventory:
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump({"hosts": entries}))
    return load_inventory(path)


def key_fingerprint(hosts: TestHosts, name: str) -> str:
    return asyncssh.import_public_key(hosts.servers[name].host_public_key).get_fingerprint("sha256")


def records(audit_dir: Path, host: str) -> list[dict[str, Any]]:
    path = audit_dir / f"{host}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def audit_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REMOTE_BASH_AUDIT_DIR", str(tmp_path / "audit"))
    return tmp_path / "audit"


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- accept-new on a jump host is in the target's session.start ------------------------------------


async def test_a_jump_hosts_first_key_is_recorded_in_the_targets_session_start(
    hosts: TestHosts, hops: dict[str, Host], tmp_path: Path, audit_dir: Path
) -> None:
    fresh = tmp_path / "pins" / "known_hosts"  # no file yet: both jump hosts record their first key
    inv = inventory(tmp_path, {
        "j1": host_entry(hops["j1"], known_hosts=str(fresh), host_key_policy="accept-new"),
        "j2": host_entry(hops["j2"], known_hosts=str(fresh), host_key_policy="accept-new", jump=["j1"]),
        "target": host_entry(hops["target"], jump=["j2"]),
    })
    async with RemoteBashSession(inv.hosts["target"]) as session:
        assert (await session.run("echo through")).output == "through\n"
    pinned = fresh.read_text()
    assert hosts.servers["jh-j1"].host_public_key.split()[1] in pinned
    assert hosts.servers["jh-j2"].host_public_key.split()[1] in pinned
    (start,) = [r for r in records(audit_dir, "target") if r["event"] == "session.start"]
    assert start["host_key_accepted_new"] is False  # the target's own key was pinned already
    assert start["host_key"] == key_fingerprint(hosts, "jh-target")
    assert start["jump_host_keys_accepted_new"] == [
        {"host": "j1", "host_key": key_fingerprint(hosts, "jh-j1")},
        {"host": "j2", "host_key": key_fingerprint(hosts, "jh-j2")},
    ]

    # Pinned now: the next session accepts nothing new, and says nothing of it.
    async with RemoteBashSession(inv.hosts["target"]) as session:
        await session.run("true")
    last = [r for r in records(audit_dir, "target") if r["event"] == "session.start"][-1]
    assert last.get("jump_host_keys_accepted_new") is None
    assert fresh.read_text() == pinned


# -- the gate: which key is trusted is the inventory's ---------------------------------------------


async def test_a_copy_trusting_other_host_keys_is_refused_before_connecting(
    hosts: TestHosts, hops: dict[str, Host], tmp_path: Path, audit_dir: Path
) -> None:
    inv = inventory(tmp_path, {"j1": host_entry(hops["j1"]), "target": host_entry(hops["target"], jump=["j1"])})
    target, j1 = inv.hosts["target"], inv.hosts["j1"]
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    wildcard = tmp_path / "wildcard_known_hosts"  # trusts the key for any name
    wildcard.write_text(f"* {hosts.servers['jh-target'].host_public_key}\n")
    copies: list[tuple[Host, list[Host] | None, str, str]] = [
        (target.model_copy(update={"known_hosts": empty, "host_key_policy": "accept-new"}), None,
         "'target'", "known_hosts"),
        (target.model_copy(update={"known_hosts": wildcard}), None, "'target'", "known_hosts"),
        (target.model_copy(update={"host_key_policy": "accept-new"}), None, "'target'", "host_key_policy"),
        (target, [j1.model_copy(update={"known_hosts": empty, "host_key_policy": "accept-new"})],
         "jump host (for target) 'j1'", "known_hosts"),
        (target, [j1.model_copy(update={"host_key_policy": "accept-new"})], "jump host (for target) 'j1'",
         "host_key_policy"),
    ]
    for host, jumps, who, field in copies:
        with pytest.raises(HostNotAllowed, match="refused before connecting") as err:
            await RemoteBashSession(host, jump_hosts=jumps).run("true")
        said = str(err.value)
        assert who in said and f"has {field}" in said and f"change {field}: in the inventory" in said, said
    assert empty.read_text() == ""  # no key was accepted into the file the copies named
    denied = [r["denied"] for r in records(audit_dir, "target") if r["event"] == "host.denied"]
    assert denied == ["target", "target", "target", "j1", "j1"]


# -- errors behind a jump host are a direct connection's errors --------------------------------------


async def test_errors_behind_a_jump_host_are_those_of_a_direct_connection(
    hops: dict[str, Host], tmp_path: Path, audit_dir: Path
) -> None:
    silent = socket.socket()  # accepts the connection, never says a word
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        port = unused_port()
        base = host_entry(hops["target"], connect_timeout=5)
        inv = inventory(tmp_path, {
            "j1": host_entry(hops["j1"]), "closed": host_entry(hops["closed"]),
            "nothing": {**base, "hostname": "127.0.0.1", "port": port, "jump": ["j1"]},
            "direct": {**base, "hostname": "127.0.0.1", "port": port},
            "nowhere": {**base, "hostname": "nothing.invalid", "port": 22, "jump": ["j1"]},
            "silent": {**base, "hostname": "127.0.0.1", "port": silent.getsockname()[1], "jump": ["j1"],
                       "connect_timeout": 1},
            "forbidden": {**base, "jump": ["closed"]},
        })
        cases: list[tuple[str, type[ConnectError], str]] = [
            ("direct", ConnectionRefused, "refused"),
            ("nothing", ConnectionRefused, "refused: nothing listens there"),
            ("nowhere", HostUnreachable, "unreachable"),
            ("silent", ConnectTimeout, "timed out"),
            ("forbidden", ConnectionRefused, "does not forward"),
        ]
        for name, kind, words in cases:
            host = inv.hosts[name]
            with pytest.raises(ConnectError) as err:
                await RemoteBashSession(host).run("true")
            said = str(err.value)
            assert type(err.value) is kind, (name, type(err.value).__name__, said)
            assert err.value.host == name and words in said and host.hostname in said, said
            if host.jump:
                assert f"through jump host {host.jump[0]}" in said, said
    finally:
        silent.close()

