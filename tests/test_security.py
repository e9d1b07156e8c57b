"""Security properties, end to end against real sshd hosts.

Host keys are strict by default, and an unknown key, a changed key and a missing known_hosts
file are distinct errors; ``accept-new`` records a first key (and the audit log says so) but
still refuses a changed one. Hosts outside the inventory or the allowlist, and jump hosts
outside the allowlist, are refused before any connection: a plain TCP listener stands where
they would be reached, and must see nothing. Secrets come from a real headless keyring
backend (keyrings.alt's PlaintextKeyring, in tmp_path), never reach the audit log, and a
machine without a keyring gets one line saying so. Audit files are private.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import keyring
import pytest
import yaml
from keyring.backend import KeyringBackend
from keyring.backends import fail
from keyrings.alt.file import PlaintextKeyring

from remote_bash import credentials
from remote_bash._ssh import hostkeys
from remote_bash.access import Gate
from remote_bash.credentials import acredentials_for, credentials_for, reset_keyring_state, set_secret
from remote_bash.errors import ConnectError, HostKeyChanged, HostKeyError, SelectionError
from remote_bash.inventory import Inventory
from remote_bash.models import Host
from remote_bash.sandbox import generate_keypair, start_sshd
from remote_bash.session import RemoteBashSession

from .sshd import TestHosts

CLI = [sys.executable, "-m", "remote_bash.cli"]
PASSPHRASE = "correct horse battery staple"


def run_cli(tmp_path: Path, inventory: dict[str, Any], *args: str, stdin: str | None = None,
            **env_extra: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump({"hosts": inventory}))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "REMOTE_BASH_", "XDG_", "PYTHON_KEYRING"))}
    env.update(HOME=str(home), XDG_STATE_HOME=str(home / ".state"), XDG_DATA_HOME=str(home / ".data"),
               REMOTE_BASH_INVENTORY=str(path), REMOTE_BASH_AUDIT_DIR=str(tmp_path / "audit"),
               PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring")
    env.update(env_extra)
    return subprocess.run([*CLI, *args], env=env, input=stdin, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL if stdin is None else None)


def entry(host: Host, **extra: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"hostname": host.hostname, "port": host.port, "user": host.user,
                              "identity_file": str(host.identity_file), "known_hosts": str(host.known_hosts),
                              "credential": "key"}
    fields.update(extra)
    return fields


def audit(tmp_path: Path, host: str) -> list[dict[str, Any]]:
    path = tmp_path / "audit" / f"{host}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def fingerprint(public_key_line: str, tmp_path: Path) -> str:
    pub = tmp_path / "fp.pub"
    pub.write_text(public_key_line + "\n")
    out = subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


def check_one(tmp_path: Path, inventory: dict[str, Any], name: str) -> dict[str, Any]:
    out = run_cli(tmp_path, inventory, "check", "--json", name)
    (result,) = json.loads(out.stdout)
    return dict(result)


# -- host keys -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(hosts: TestHosts) -> Host:
    return hosts.start("sec-keys")


def test_unknown_host_key_is_refused_by_default(keyed: Host, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    result = check_one(tmp_path, {"sec-keys": entry(keyed, known_hosts=str(known))}, "sec-keys")
    assert result["error_type"] == "UnknownHostKey"
    assert fingerprint(server_key(keyed), tmp_path) in result["error"]
    assert known.read_text() == ""


def test_missing_known_hosts_is_its_own_error(keyed: Host, tmp_path: Path) -> None:
    known = tmp_path / "nowhere" / "known_hosts"
    result = check_one(tmp_path, {"sec-keys": entry(keyed, known_hosts=str(known))}, "sec-keys")
    assert result["error_type"] == "KnownHostsMissing"
    assert str(known) in result["error"]
    assert not known.exists()


def test_accept_new_records_the_first_key_and_audits_it(keyed: Host, tmp_path: Path) -> None:
    known = tmp_path / "fresh" / "known_hosts"
    inventory = {"sec-keys": entry(keyed, known_hosts=str(known), host_key_policy="accept-new")}
    out = run_cli(tmp_path, inventory, "exec", "sec-keys", "--", "echo first")
    assert (out.returncode, out.stdout) == (0, "first\n"), out.stderr
    assert server_key(keyed).split()[1] in known.read_text()
    (start,) = [r for r in audit(tmp_path, "sec-keys") if r["event"] == "session.start"]
    assert start["host_key_accepted_new"] is True
    assert start["host_key"] == fingerprint(server_key(keyed), tmp_path)

    inventory["sec-keys"]["host_key_policy"] = "strict"  # the recorded key now verifies strictly
    again = run_cli(tmp_path, inventory, "exec", "sec-keys", "--", "echo second")
    assert (again.returncode, again.stdout) == (0, "second\n"), again.stderr


def test_changed_host_key_is_refused_even_with_accept_new(hosts: TestHosts, tmp_path: Path) -> None:
    host = hosts.start("sec-rekeyed")
    old = hosts.servers["sec-rekeyed"]
    known = tmp_path / "known_hosts"
    known.write_text(old.known_hosts_line + "\n")
    old.stop()
    new = start_sshd(tmp_path / "rekeyed", address=old.address, port=old.port, users=[hosts.user],
                     authorized_keys=[hosts.client_key.with_suffix(".pub").read_text()])
    hosts.servers["sec-rekeyed"] = new  # stopped with the others
    seen, expected = fingerprint(new.host_public_key, tmp_path), fingerprint(old.host_public_key, tmp_path)
    assert seen != expected

    for policy in ("strict", "accept-new"):
        inventory = {"sec-rekeyed": entry(host, known_hosts=str(known), host_key_policy=policy)}
        result = check_one(tmp_path, inventory, "sec-rekeyed")
        assert result["error_type"] == "HostKeyChanged", policy
        assert seen in result["error"]
        assert expected in result["error"]
        assert "CHANGED" in result["error"]
        out = run_cli(tmp_path, inventory, "exec", "sec-rekeyed", "--", "echo never")
        assert out.returncode == 125
        assert out.stdout == ""
        assert len(out.stderr.splitlines()) == 1
        assert "CHANGED" in out.stderr
    assert known.read_text() == old.known_hosts_line + "\n"  # accept-new wrote nothing


def server_key(host: Host) -> str:
    """The public key line a fixture host's sshd presents, from its known_hosts line."""
    for line in Path(str(host.known_hosts)).read_text().splitlines():
        pattern, _, key = line.partition(" ")
        if pattern == f"[{host.hostname}]:{host.port}":
            return key
    raise AssertionError(f"no known_hosts line for {host.address}")


def key_of(host: Host) -> str:
    """The key type and base64 of the key a fixture host's sshd presents."""
    return " ".join(server_key(host).split()[:2])


def other_key(tmp_path: Path) -> str:
    """A key type and base64 of a key nobody serves."""
    path = generate_keypair(tmp_path / "other_key", "other")
    return " ".join(Path(f"{path}.pub").read_text().split()[:2])


async def reach(host: Host) -> str:
    async with RemoteBashSession(host) as session:
        return (await session.run("echo reached")).output


async def test_an_entry_for_the_address_does_not_override_the_names_pin(keyed: Host, tmp_path: Path) -> None:
    a, b, c, d = keyed.hostname.split(".")
    alias = f"{a}.{b}.{int(c) * 256 + int(d)}"  # another spelling of the same address
    known = tmp_path / "known_hosts"
    known.write_text(f"[{alias}]:{keyed.port} {other_key(tmp_path)}\n[{keyed.hostname}]:{keyed.port} {key_of(keyed)}\n")
    with pytest.raises(HostKeyChanged, match="CHANGED"):
        await reach(keyed.model_copy(update={"hostname": alias, "known_hosts": known}))
    # A host named by its address matches the entry for that address: its name is the address.
    assert await reach(keyed.model_copy(update={"known_hosts": known})) == "reached\n"


@pytest.mark.parametrize("policy", ["strict", "accept-new"])
async def test_a_revoked_host_key_is_refused(keyed: Host, tmp_path: Path, policy: str) -> None:
    known = tmp_path / "known_hosts"
    listed = f"[{keyed.hostname}]:{keyed.port} {key_of(keyed)}\n" if policy == "strict" else ""
    text = f"{listed}@revoked * {key_of(keyed)}\n"
    known.write_text(text)
    with pytest.raises(HostKeyError, match="REVOKED") as caught:
        await reach(keyed.model_copy(update={"known_hosts": known, "host_key_policy": policy}))
    assert str(known) in str(caught.value)
    assert known.read_text() == text  # accept-new never records a revoked key


async def test_accept_new_starts_a_new_line_after_a_file_without_one(keyed: Host, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    first = f"elsewhere.example {other_key(tmp_path)}"
    known.write_text(first)  # hand-edited: no final newline
    assert await reach(keyed.model_copy(update={"known_hosts": known, "host_key_policy": "accept-new"})) == "reached\n"
    assert known.read_text() == f"{first}\n[{keyed.hostname}]:{keyed.port} {key_of(keyed)}\n"
    assert await reach(keyed.model_copy(update={"known_hosts": known})) == "reached\n"


def test_concurrent_accept_new_appends_whole_lines(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    other = other_key(tmp_path)
    known.write_text(f"elsewhere.example {other}")
    key = asyncssh.import_public_key(other)
    threads = [threading.Thread(target=hostkeys.append_known_host,
                                args=(known, Host(name=f"h{i}", hostname=f"h{i}.example", port=2200 + i), key))
               for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = known.read_text().split("\n")
    assert lines[-1] == ""
    assert sorted(line.split()[0] for line in lines[1:-1]) == sorted(f"[h{i}.example]:{2200 + i}" for i in range(16))
    assert all(len(line.split()) == 3 for line in lines[:-1])


def test_known_hosts_cache_sees_a_same_size_edit_with_the_old_mtime(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    old, new = other_key(tmp_path), " ".join(
        Path(f"{generate_keypair(tmp_path / 'third_key', 'third')}.pub").read_text().split()[:2])
    known.write_text(f"[h.example]:2222 {old}\n")
    before = known.stat()
    assert hostkeys.read_known_hosts(known).match("h.example", "", 2222)[0][0].public_data == \
        asyncssh.import_public_key(old).public_data
    known.write_text(f"[h.example]:2222 {new}\n")
    os.utime(known, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert known.stat().st_size == before.st_size
    assert hostkeys.read_known_hosts(known).match("h.example", "", 2222)[0][0].public_data == \
        asyncssh.import_public_key(new).public_data


# -- the allowlist -------------------------------------------------------------------------------


class Listener:
    """A plain TCP listener on a loopback address that records whether anything connected.

    The kernel completes a handshake without ``accept()``, so at the end a non-blocking
    ``accept()`` tells whether a connection ever arrived.
    """

    def __init__(self, address: str, port: int = 0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, port))
        self.sock.listen(16)
        self.address, self.port = self.sock.getsockname()

    def connections(self) -> int:
        self.sock.setblocking(False)
        count = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def trap() -> Iterator[Listener]:
    listener = Listener("127.0.0.201")
    yield listener
    listener.close()


@pytest.fixture(scope="module")
def allowed(hosts: TestHosts) -> Host:
    return hosts.start("sec-allowed")


def test_host_outside_the_allowlist_is_refused_before_connecting(
    trap: Listener, allowed: Host, tmp_path: Path
) -> None:
    inventory = {"sec-allowed": entry(allowed), "trap": {"hostname": trap.address, "port": trap.port}}
    out = run_cli(tmp_path, inventory, "--allow", "sec-allowed", "exec", "trap", "--", "true")
    assert out.returncode == 127
    assert "outside" in out.stderr
    assert "allowlist" in out.stderr
    assert len(out.stderr.splitlines()) == 1
    assert trap.connections() == 0
    assert [r["event"] for r in audit(tmp_path, "trap")] == ["host.denied"]

    ok = run_cli(tmp_path, inventory, "--allow", "sec-allowed", "exec", "sec-allowed", "--", "echo in")
    assert (ok.returncode, ok.stdout) == (0, "in\n")


@pytest.mark.parametrize("pattern", ["", "  "])
def test_an_empty_allowlist_pattern_is_an_error(allowed: Host, pattern: str) -> None:
    inventory = Inventory(hosts={"sec-allowed": allowed})
    with pytest.raises(SelectionError, match="allowlist pattern is empty"):
        Gate(inventory, pattern)


def test_host_not_in_the_inventory_is_refused_before_connecting(allowed: Host, tmp_path: Path) -> None:
    # Named by address, port 22: were it reached, it would reach this listener.
    try:
        listener = Listener("127.0.0.202", 22)
    except PermissionError:
        pytest.skip("binding port 22 needs root")
    try:
        out = run_cli(tmp_path, {"sec-allowed": entry(allowed)}, "exec", "127.0.0.202", "--", "true")
        assert out.returncode == 127
        assert "not in the inventory" in out.stderr
        assert listener.connections() == 0
    finally:
        listener.close()
    # A name the inventory does not declare is an error before any session: no audit file of its own.
    assert not list(tmp_path.rglob("127.0.0.202.jsonl*"))


def test_jump_host_outside_the_allowlist_is_refused_before_connecting(
    trap: Listener, allowed: Host, tmp_path: Path
) -> None:
    inventory = {"inner": entry(allowed, jump=["bastion"]), "bastion": {"hostname": trap.address,
                                                                       "port": trap.port}}
    out = run_cli(tmp_path, inventory, "--allow", "inner", "exec", "inner", "--", "true")
    assert out.returncode == 127
    assert "jump host" in out.stderr
    assert "bastion" in out.stderr
    assert trap.connections() == 0
    (denied,) = audit(tmp_path, "inner")
    assert (denied["event"], denied["denied"]) == ("host.denied", "bastion")


def test_jump_host_carries_the_connection(hosts: TestHosts, allowed: Host, tmp_path: Path) -> None:
    """The same target works through a bastion that forwards and fails through one that does not:
    the connection really goes through the jump host."""
    forwarding = hosts.start("sec-bastion")
    closed = hosts.start("sec-bastion-closed", extra_config=("AllowTcpForwarding no",))
    inventory = {
        "bastion": entry(forwarding),
        "closed-bastion": entry(closed),
        "via-bastion": entry(allowed, jump=["bastion"]),
        "via-closed": entry(allowed, jump=["closed-bastion"]),
    }
    out = run_cli(tmp_path, inventory, "--allow", "via-bastion,bastion", "exec", "via-bastion", "--",
                  "echo through")
    assert (out.returncode, out.stdout) == (0, "through\n"), out.stderr
    blocked = run_cli(tmp_path, inventory, "exec", "via-closed", "--", "echo never")
    assert blocked.returncode == 125
    assert blocked.stdout == ""
    assert len(blocked.stderr.splitlines()) == 1
    assert "closed-bastion" in blocked.stderr


# -- credentials from the keyring ---------------------------------------------------------------------


@pytest.fixture
def plaintext_keyring(tmp_path: Path) -> Iterator[PlaintextKeyring]:
    previous = keyring.get_keyring()
    backend = PlaintextKeyring()
    backend.file_path = str(tmp_path / "keyring" / "keyring_pass.cfg")
    keyring.set_keyring(backend)
    reset_keyring_state()
    yield backend
    keyring.set_keyring(previous)
    reset_keyring_state()


@pytest.fixture(scope="module")
def locked(hosts: TestHosts) -> Iterator[Host]:
    """A host that accepts only a key protected by a passphrase."""
    root = hosts.root / "sec-locked"  # readable by the remote user, who sshd reads authorized_keys as
    root.mkdir()
    key = root / "locked_ecdsa"
    # PEM, because asyncssh decrypts OpenSSH-format keys only with the optional bcrypt package.
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-m", "PEM", "-N", PASSPHRASE, "-f", str(key)],
                   check=True)
    server = start_sshd(root / "sshd", address="127.0.0.203", users=[hosts.user],
                        authorized_keys=[key.with_suffix(".pub").read_text()])
    known = root / "known_hosts"
    known.write_text(server.known_hosts_line + "\n")
    yield Host(name="sec-locked", hostname=server.address, port=server.port, user=hosts.user,
               identity_file=key, known_hosts=known, credential="key")
    server.stop()


async def test_key_passphrase_from_the_keyring(locked: Host, plaintext_keyring: PlaintextKeyring) -> None:
    assert credentials.key_is_encrypted(Path(str(locked.identity_file))) is True
    with pytest.raises(ConnectError):
        async with RemoteBashSession(locked, credentials=acredentials_for) as session:
            await session.run("true")

    set_secret("sec-locked", PASSPHRASE, store_readable=True)
    assert plaintext_keyring.get_password("remote-bash", "sec-locked") == PASSPHRASE
    assert credentials_for(locked).passphrase == PASSPHRASE
    async with RemoteBashSession(locked, credentials=acredentials_for) as session:
        result = await session.run("echo unlocked")
    assert result.output == "unlocked\n"


def test_keyring_secret_never_reaches_output_or_audit(locked: Host, tmp_path: Path) -> None:
    inventory = {"sec-locked": entry(locked)}
    stored = run_cli(tmp_path, inventory, "credentials", "set", "sec-locked", "--store-readable",
                     stdin=PASSPHRASE + "\n")
    assert stored.returncode == 0, stored.stderr
    out = run_cli(tmp_path, inventory, "exec", "sec-locked", "--", f"echo '{PASSPHRASE}'")
    assert out.returncode == 0, out.stderr
    assert PASSPHRASE not in out.stdout
    assert "[REDACTED:known-secret]" in out.stdout
    log = (tmp_path / "audit" / "sec-locked.jsonl").read_text()
    assert "exec.end" in log
    assert PASSPHRASE not in log
    assert PASSPHRASE not in (tmp_path / "hosts.yaml").read_text()


def test_no_keyring_backend_is_said_once_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    previous = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())  # type: ignore[no-untyped-call]
    reset_keyring_state()
    try:
        caplog.set_level(logging.WARNING, logger="remote_bash.credentials")
        password_hosts = [Host(name=f"pw-{i}", hostname="127.0.0.1") for i in range(3)]
        got = [credentials_for(h) for h in password_hosts]
        assert [c.password for c in got] == [None, None, None]
        assert all(c.use_agent for c in got)
    finally:
        keyring.set_keyring(previous)
        reset_keyring_state()
    (record,) = [r for r in caplog.records if r.name == "remote_bash.credentials"]
    message = record.getMessage()
    assert "\n" not in message
    assert "keyring" in message
    assert "keyrings.cryptfile" in message
    assert "PYTHON_KEYRING_BACKEND" in message


def test_no_keyring_backend_in_the_cli(locked: Host, tmp_path: Path) -> None:
    out = run_cli(tmp_path, {"sec-locked": entry(locked)}, "exec", "sec-locked", "--", "true",
                  PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring")
    assert out.returncode == 125  # the key cannot be unlocked without its passphrase
    warnings = [line for line in out.stderr.splitlines() if "keyring" in line.lower()]
    assert len(warnings) == 1
    assert warnings[0].startswith("remote-bash: warning:")
    assert "Traceback" not in out.stderr


class _StuckKeyring(KeyringBackend):
    """A keyring waiting for an unlock prompt nobody answers."""

    priority = 1
    release = threading.Event()

    def get_password(self, service: str, username: str) -> str | None:
        self.release.wait(30)
        return None

    def set_password(self, service: str, username: str, password: str) -> None:
        raise NotImplementedError

    def delete_password(self, service: str, username: str) -> None:
        raise NotImplementedError


async def test_a_stuck_keyring_never_blocks(monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(credentials, "KEYRING_TIMEOUT", 0.3)
    previous = keyring.get_keyring()
    keyring.set_keyring(_StuckKeyring())  # type: ignore[no-untyped-call]
    reset_keyring_state()
    try:
        got = await acredentials_for(Host(name="stuck", hostname="127.0.0.1"))
        again = await acredentials_for(Host(name="stuck-2", hostname="127.0.0.1"))
    finally:
        _StuckKeyring.release.set()
        keyring.set_keyring(previous)
        reset_keyring_state()
    assert got.password is None
    assert again.password is None
    messages = [r.getMessage() for r in caplog.records if r.name == "remote_bash.credentials"]
    assert len(messages) == 1
    assert "did not answer" in messages[0]


# -- the audit log's files -----------------------------------------------------------------------------


def test_audit_files_are_private(allowed: Host, tmp_path: Path) -> None:
    out = run_cli(tmp_path, {"sec-allowed": entry(allowed)}, "exec", "sec-allowed", "--", "echo private")
    assert out.returncode == 0
    directory = tmp_path / "audit"
    assert directory.stat().st_mode & 0o777 == 0o700
    files = list(directory.iterdir())
    assert files
    for path in files:
        assert path.stat().st_mode & 0o777 == 0o600, path


async def test_a_key_recorded_for_port_22_is_not_trusted_on_another_port(web1: Host, tmp_path: Path) -> None:
    from remote_bash import RemoteBashSession, UnknownHostKey

    known = tmp_path / "known_hosts"
    line = next(x for x in Path(str(web1.known_hosts)).read_text().splitlines()
                if x.startswith(f"[{web1.hostname}]:{web1.port} "))
    key = line.split(" ", 1)[1]
    known.write_text(f"{web1.hostname} {key}\n")  # the same key, but for port 22 only
    with pytest.raises(UnknownHostKey):
        await RemoteBashSession(web1.model_copy(update={"known_hosts": known})).start()
    known.write_text(f"[{web1.hostname}]:{web1.port} {key}\n")
    async with RemoteBashSession(web1.model_copy(update={"known_hosts": known})) as s:
        assert (await s.run("echo ok")).output == "ok\n"
