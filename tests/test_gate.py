"""One gate for who may be reached, on every path, through a three-hop chain of real sshd.

The chain is client -> j1 -> j2 -> target: ``target`` names ``j2`` as its jump host, and ``j2``
names ``j1`` (so ``j1`` is a jump host's own jump host). Each sshd sits behind a counting relay
on its own loopback address, and the inventory names the relays: a relay's count is proof that a
hop was reached (and by whom: j2's relay is dialled by j1's sshd, target's by j2's). Every path
(``exec``, ``shell``, ``run``, ``check``, ``fleet exec``, ``fleet run``, ``--coordinator``,
``RemoteBashSession``, ``fleet.exec``) reaches the target when every hop is allowed, and is
refused with no relay touched and a ``host.denied`` record naming the hop when any hop is outside
``--allow`` or the inventory.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from remote_bash import fleet
from remote_bash.access import Gate
from remote_bash.audit import AuditLog, load_key_file, write_key_file
from remote_bash.errors import HostNotAllowed
from remote_bash.inventory import Inventory, load_inventory
from remote_bash.models import Host
from remote_bash.session import RemoteBashSession

from .messages_server import MessagesServer, Reply, text, tool_use
from .sshd import TestHosts

CHAIN = ("j1", "j2", "target")


class Relay:
    """A TCP relay on a loopback address that counts the connections it carries to ``upstream``."""

    def __init__(self, address: str, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, 0))
        self.sock.listen(64)
        self.address, self.port = self.sock.getsockname()
        self.count = 0
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True, name=f"relay-{address}").start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return  # closed
            with self._lock:
                self.count += 1
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        with self._lock:
            for s in self._open:
                s.close()


@dataclass
class Chain:
    relays: dict[str, Relay]
    inventory_file: Path
    defaults: dict[str, Any]

    def counts(self) -> dict[str, int]:
        return {name: relay.count for name, relay in self.relays.items()}


@pytest.fixture(scope="module")
def chain(hosts: TestHosts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    root = tmp_path_factory.mktemp("gate")
    known = root / "known_hosts"
    relays: dict[str, Relay] = {}
    for index, name in enumerate(CHAIN):
        made = hosts.start(f"gate-{name}")
        server = hosts.servers[made.name]
        relays[name] = relay = Relay(f"127.0.4.{index + 2}", (made.hostname, made.port))
        with known.open("a") as fh:
            fh.write(f"[{relay.address}]:{relay.port} {server.host_public_key}\n")
    defaults = {"user": hosts.user, "identity_file": str(hosts.client_key), "known_hosts": str(known),
                "credential": "key", "connect_timeout": 10}
    entries: dict[str, Any] = {name: {"hostname": r.address, "port": r.port} for name, r in relays.items()}
    entries["j2"]["jump"] = ["j1"]
    entries["target"]["jump"] = ["j2"]
    path = root / "hosts.yaml"
    path.write_text(yaml.safe_dump({"defaults": defaults, "hosts": entries}, sort_keys=False))
    yield Chain(relays, path, defaults)
    for relay in relays.values():
        relay.close()


def cli_env(chain: Chain, tmp_path: Path, server: MessagesServer | None = None) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "REMOTE_BASH_", "XDG_"))}
    env.update(HOME=str(home), XDG_STATE_HOME=str(home / ".state"), XDG_CONFIG_HOME=str(home / ".config"),
               PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring",
               REMOTE_BASH_INVENTORY=str(chain.inventory_file), REMOTE_BASH_AUDIT_DIR=str(tmp_path / "audit"))
    if server is not None:
        env.update(ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=server.url)
    return env


def cli(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "remote_bash.cli", *args], env=env, input=stdin,
                          capture_output=True, text=True, timeout=90,
                          stdin=subprocess.DEVNULL if stdin is None else None)


def denied(audit_dir: Path, host: str = "target") -> list[str]:
    """The hops named by the host's ``host.denied`` records."""
    path = audit_dir / f"{host}.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [r["denied"] for r in records if r["event"] == "host.denied"]


def reached(before: dict[str, int], chain: Chain) -> dict[str, int]:
    return {name: chain.relays[name].count - before[name] for name in CHAIN}


# What each CLI path needs: its arguments, its stdin, the scripted replies, and what success prints.
ECHO = "echo through-$((6*7))"


def _path_args(path: str) -> tuple[list[str], str | None, list[Reply]]:
    use = Reply([tool_use({"command": ECHO})])
    use_remote = Reply([tool_use({"host": "target", "command": ECHO}, name="remote_bash")])
    done = Reply([text("done")])
    return {
        "exec": (["exec", "target", "--", ECHO], None, []),
        "shell": (["shell", "target"], f"{ECHO}\n:exit\n", []),
        "check": (["check", "target"], None, []),
        "run": (["run", "--host", "target", "say hi"], None, [use, done]),
        "fleet exec": (["fleet", "exec", "target", "--", ECHO], None, []),
        "fleet run": (["fleet", "run", "target", "say hi"], None, [use, done]),
        "fleet run --coordinator": (["fleet", "run", "--coordinator", "target", "say hi"], None, [use_remote, done]),
    }[path]


CLI_PATHS = ["exec", "shell", "check", "run", "fleet exec", "fleet run", "fleet run --coordinator"]


@pytest.mark.reliability
@pytest.mark.parametrize("path", CLI_PATHS)
def test_every_cli_path_goes_through_the_whole_chain_or_is_refused_naming_the_hop(
    chain: Chain, tmp_path: Path, path: str
) -> None:
    args, stdin, script = _path_args(path)
    with MessagesServer(script) as server:
        env = cli_env(chain, tmp_path, server)
        before = chain.counts()
        out = cli(env, "--allow", "target,j1,j2", *args, stdin=stdin)
        assert out.returncode == 0, (path, out.stdout, out.stderr)
        if path in ("exec", "shell", "fleet exec"):
            assert "through-42" in out.stdout
        if script:
            results = server.tool_results()
            assert results and "through-42" in str(results[0]["content"]), server.requests[-1]
        assert all(n >= 1 for n in reached(before, chain).values()), reached(before, chain)
        assert not server.problems

    # A hop outside --allow: j1 (the jump host's own jump host), then j2. Nothing is dialled.
    for allow, hop in (("target,j2", "j1"), ("target,j1", "j2"), ("j1,j2", "target")):
        audit_dir = tmp_path / f"audit-{hop}"
        env = cli_env(chain, tmp_path, None) | {"REMOTE_BASH_AUDIT_DIR": str(audit_dir),
                                                 "ANTHROPIC_API_KEY": "test",
                                                 "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}
        before = chain.counts()
        out = cli(env, "--allow", allow, *args, stdin=stdin)
        assert out.returncode != 0, (path, allow, out.stdout)
        assert reached(before, chain) == dict.fromkeys(CHAIN, 0), (path, allow)
        shown = out.stdout + out.stderr
        assert f"'{hop}'" in shown, (path, allow, shown)
        assert hop in denied(audit_dir), (path, allow, denied(audit_dir), shown)


# -- the gate's decisions, without a network -----------------------------------------------------------


@given(st.data())
def test_a_host_is_admitted_exactly_when_every_hop_of_its_route_is_allowed(data: st.DataObject) -> None:
    count = data.draw(st.integers(1, 7))
    names = [f"h{i}" for i in range(count)]
    made: dict[str, Host] = {}
    for i, name in enumerate(names):  # a host jumps only through later ones: no cycles
        later = names[i + 1:]
        jumps = data.draw(st.lists(st.sampled_from(later), unique=True, max_size=2)) if later else []
        made[name] = Host(name=name, hostname=f"10.0.0.{i}", jump=jumps)
    allowed = data.draw(st.sets(st.sampled_from(names), min_size=1))
    gate = Gate(Inventory(hosts=made), ",".join(sorted(allowed)))

    def closure(name: str) -> set[str]:
        return {name}.union(*(closure(j) for j in made[name].jump))

    for name in names:
        assert gate.admits(name) == (closure(name) <= allowed)
        route = gate.route(made[name])
        assert route[-1].name == name
        assert {h.name for h in route} == closure(name)
        assert len(route) == len(closure(name))
        where = {h.name: i for i, h in enumerate(route)}
        assert all(where[j] < where[h.name] for h in route for j in h.jump), "a hop's own jump hosts come first"
        refused = gate.refusal(made[name])
        if refused is not None:
            assert refused.hop in closure(name) - allowed


# -- the Python API ---------------------------------------------------------------------------------


@pytest.mark.reliability
async def test_a_session_from_a_loaded_inventory_is_gated_by_it_and_takes_its_route(
    chain: Chain, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMOTE_BASH_AUDIT_DIR", str(tmp_path / "audit"))
    inventory = load_inventory(chain.inventory_file)
    target = inventory.hosts["target"]

    before = chain.counts()
    async with RemoteBashSession(target) as session:  # no gate, route or audit wired in by hand
        assert [h.name for h in session.jump_hosts] == ["j1", "j2"]
        result = await session.run(ECHO)
    assert result.output == "through-42\n"
    assert all(n >= 1 for n in reached(before, chain).values())

    # A hop the inventory does not have, or a route that skips one, is refused: nothing dialled.
    stranger = Host(name="j9", hostname=chain.relays["j1"].address, port=chain.relays["j1"].port)
    for jumps, hop in (([stranger, inventory.hosts["j2"]], "j9"), ([inventory.hosts["j2"]], "j1"),
                       ([inventory.hosts["j1"]], "j2")):
        before = chain.counts()
        session = RemoteBashSession(target, jump_hosts=jumps)
        with pytest.raises(HostNotAllowed, match="refused before connecting") as err:
            await session.run("true")
        assert repr(hop) in str(err.value) or hop in str(err.value)
        assert reached(before, chain) == dict.fromkeys(CHAIN, 0)
        await session.close()
    assert denied(tmp_path / "audit") == ["j9", "j1", "j2"]

    # A host moved to another address after loading is refused too.
    moved = target.model_copy(update={"port": chain.relays["j1"].port})
    with pytest.raises(HostNotAllowed, match="but the inventory says"):
        await RemoteBashSession(moved).run("true")

    # A name the inventory does not know is refused, and no log file is made under that name.
    renamed = target.model_copy(update={"name": "\x1b]0;x\x07typo"})
    with pytest.raises(HostNotAllowed, match="not in the inventory"):
        await RemoteBashSession(renamed).run("true")
    assert not [p.name for p in (tmp_path / "audit").iterdir() if "typo" in p.name]

    # An allowlist, as the CLI's --allow: the jump host's own jump host is checked.
    audit = AuditLog(tmp_path / "explicit")
    before = chain.counts()
    session = RemoteBashSession(target, gate=Gate(inventory, "target,j2", audit), audit=audit)
    with pytest.raises(HostNotAllowed, match="'j1' is outside this session's allowlist"):
        await session.run("true")
    assert reached(before, chain) == dict.fromkeys(CHAIN, 0)
    assert [r["denied"] for r in audit.read("target") if r["event"] == "host.denied"] == ["j1"]


@pytest.mark.reliability
async def test_a_copy_with_another_jump_list_is_refused_not_rerouted(chain: Chain, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMOTE_BASH_AUDIT_DIR", str(tmp_path / "audit"))
    inventory = load_inventory(chain.inventory_file)
    target, j2 = inventory.hosts["target"], inventory.hosts["j2"]
    # target's own jump list is [j2]; each of these would have been carried along the inventory's
    # route (j1 -> j2) as if the change had been honoured.
    for host, jump in ((target, []), (target, ["j1"]), (target, ["j1", "j2"]), (j2, [])):
        copied = host.model_copy(update={"jump": jump})
        before = chain.counts()
        with pytest.raises(HostNotAllowed, match=r"names the jump hosts .* but the inventory says") as err:
            await RemoteBashSession(copied).run("true")
        assert f"{host.jump}" in str(err.value) and "inventory route" in str(err.value)
        assert reached(before, chain) == dict.fromkeys(CHAIN, 0)
    assert denied(tmp_path / "audit") == ["target", "target", "target"]
    assert denied(tmp_path / "audit", "j2") == ["j2"]
    # As a jump host handed in by hand, too: the copy of j2 without its own jump host.
    before = chain.counts()
    with pytest.raises(HostNotAllowed, match="jump host \\(for target\\) 'j2' names the jump hosts"):
        await RemoteBashSession(target, jump_hosts=[inventory.hosts["j1"], j2.model_copy(update={"jump": []})]
                                ).run("true")
    assert reached(before, chain) == dict.fromkeys(CHAIN, 0)


@pytest.mark.reliability
async def test_gate_false_is_the_only_way_to_skip_the_inventorys_gate(chain: Chain, tmp_path: Path) -> None:
    inventory = load_inventory(chain.inventory_file)
    stranger = Host(name="j9", hostname=chain.relays["j1"].address, port=chain.relays["j1"].port)
    with pytest.raises(HostNotAllowed):
        await RemoteBashSession(inventory.hosts["target"], jump_hosts=[stranger], gate=None, audit=False).run("true")
    # Said by name: the session then dials what it was given (here j1's sshd, as "j9").
    hand_made = inventory.hosts["j1"].model_copy(update={"name": "j1-by-hand"})
    async with RemoteBashSession(hand_made, gate=False, audit=False) as session:
        assert (await session.run(ECHO)).output == "through-42\n"


@pytest.mark.reliability
async def test_fleet_exec_takes_the_whole_route_and_its_gate(chain: Chain, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMOTE_BASH_AUDIT_DIR", str(tmp_path / "audit"))
    inventory = load_inventory(chain.inventory_file)
    before = chain.counts()
    result = await fleet.exec(inventory, "target", ECHO)
    assert [(r.host, r.status, r.output) for r in result.results] == [("target", "ok", "through-42\n")]
    assert all(n >= 1 for n in reached(before, chain).values())
    # The default factory audits to the default directory, like a lone session.
    events = [json.loads(line)["event"] for line in (tmp_path / "audit" / "target.jsonl").read_text().splitlines()]
    assert events[:3] == ["session.start", "exec.start", "exec.end"]

    audit = AuditLog(tmp_path / "explicit")
    factory = fleet.SessionFactory(inventory, audit=audit, gate=Gate(inventory, "target,j2", audit))
    before = chain.counts()
    result = await fleet.exec(inventory, "target", "true", session_factory=factory)
    (refused,) = result.results
    assert (refused.status, refused.error_type) == ("refused", "HostNotAllowed")
    assert "'j1'" in (refused.error or "")
    assert reached(before, chain) == dict.fromkeys(CHAIN, 0)
    assert [r["denied"] for r in audit.read("target") if r["event"] == "host.denied"] == ["j1"]

    # An inventory built in code gets its own gate too: a host it does not hold is refused.
    partial = Inventory(hosts={"target": inventory.hosts["target"]})
    result = await fleet.exec(partial, "target", "true")
    assert result.results[0].status == "refused"
    assert "not in the inventory" in (result.results[0].error or "")


# -- safe defaults from Python ----------------------------------------------------------------------


@pytest.mark.reliability
async def test_a_session_audits_to_the_default_directory_unless_told_audit_false(
    hosts: TestHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = hosts.start("gate-audit-default")
    monkeypatch.setenv("REMOTE_BASH_AUDIT_DIR", str(tmp_path / "default"))
    async with RemoteBashSession(host) as session:
        await session.run("echo password=hunter22-secret")
    log = tmp_path / "default" / "gate-audit-default.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["event"] for r in records] == ["session.start", "exec.start", "exec.end", "session.end"]
    assert "hunter22-secret" not in log.read_text()  # the default log redacts, as the CLI's does
    assert oct(log.stat().st_mode & 0o777) == "0o600"
    assert AuditLog(tmp_path / "default").verify("gate-audit-default").ok

    # None is the default, not a way out; only audit=False turns the log off.
    async with RemoteBashSession(host, audit=None) as session:
        await session.run("true")
    assert len(log.read_text().splitlines()) == len(records) + 4
    monkeypatch.setenv("REMOTE_BASH_AUDIT_DIR", str(tmp_path / "off"))
    async with RemoteBashSession(host, audit=False) as session:
        assert (await session.run("echo off")).output == "off\n"
    assert not (tmp_path / "off").exists()


@pytest.mark.reliability
async def test_the_default_audit_log_is_keyed_as_the_clis_is(
    hosts: TestHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMOTE_BASH_AUDIT_DIR", str(tmp_path / "audit"))
    key_file = tmp_path / "keys" / "audit.key"
    write_key_file(key_file)
    host = hosts.start("gate-audit-keyed", audit_key_file=key_file)
    async with RemoteBashSession(host) as session:
        await session.run("true")
    lines = (tmp_path / "audit" / "gate-audit-keyed.jsonl").read_text().splitlines()
    assert lines and all('"mac":"' in line for line in lines)
    assert AuditLog(tmp_path / "audit", key=load_key_file(key_file)).verify("gate-audit-keyed").ok
