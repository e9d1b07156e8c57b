"""Host keys: the configured known_hosts file is the only source of trust, against real sshd.

Every test runs with a ``HOME`` whose ``~/.ssh/known_hosts`` trusts the real key of every
test host (under its ``[address]:port`` name and its bare address), so a check that consulted
the user's file next to the pinned one would let each refused connection through. The pinned
file follows OpenSSH's rules: ``[host]:port`` entries (a port-22 entry is not trusted on another
port), ``@revoked`` lines, hashed names, and ``@cert-authority`` keys vouching for host
certificates made with ``ssh-keygen -s CA -h``. Whatever is accepted, its SHA-256 fingerprint is
in ``session.start``, in every exec record and in ``check``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from remote_bash.errors import HostKeyChanged, HostKeyError, UnknownHostKey
from remote_bash.models import Host
from remote_bash.sandbox import SshdServer, generate_keypair, start_sshd
from remote_bash.session import RemoteBashSession

from .sshd import TestHosts

pytestmark = pytest.mark.reliability

CLI = [sys.executable, "-m", "remote_bash.cli"]
CERT_ADDRESS = "127.0.0.221"


def fingerprint(key_line: str, tmp_path: Path) -> str:
    pub = tmp_path / "fingerprint.pub"
    pub.write_text(key_line.strip() + "\n")
    out = subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True, timeout=30)
    return out.stdout.split()[1]


def key_of(server: SshdServer) -> str:
    return " ".join(server.host_public_key.split()[:2])


def other_key(tmp_path: Path, name: str = "other") -> str:
    path = generate_keypair(tmp_path / name, name)
    return " ".join(Path(f"{path}.pub").read_text().split()[:2])


@dataclass
class Signed:
    """An sshd presenting a host certificate signed by ``ca``; ``stranger`` signed nothing."""

    server: SshdServer
    host: Host
    ca: str
    stranger: str
    host_key: Path
    ca_key: Path


def sign(ca_key: Path, host_key: Path, principal: str | None) -> None:
    """Sign a host certificate for ``principal`` (None: with no principals at all)."""
    names = ["-n", principal] if principal is not None else []
    subprocess.run(["ssh-keygen", "-q", "-s", str(ca_key), "-h", "-I", principal or "any", *names,
                    f"{host_key}.pub"], check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def plain(hosts: TestHosts) -> tuple[Host, SshdServer]:
    host = hosts.start("hk-plain")
    return host, hosts.servers["hk-plain"]


@pytest.fixture(scope="module")
def signed(hosts: TestHosts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Signed]:
    work = hosts.root / "hk-signed"
    keys = tmp_path_factory.mktemp("hk-ca")
    ca = generate_keypair(keys / "ca", "test-ca")
    stranger = generate_keypair(keys / "stranger_ca", "stranger-ca")
    host_key = generate_keypair(work / "ssh_host_ed25519_key", "hk-signed-host")
    sign(ca, host_key, CERT_ADDRESS)
    cert = Path(f"{host_key}-cert.pub")
    assert cert.exists()
    server = start_sshd(work, address=CERT_ADDRESS, users=[hosts.user], host_key=host_key,
                        authorized_keys=[hosts.client_key.with_suffix(".pub").read_text()],
                        extra_config=(f"HostCertificate {cert}",))
    host = Host(name="hk-signed", hostname=server.address, port=server.port, user=hosts.user,
                identity_file=hosts.client_key, credential="key")
    yield Signed(server, host, " ".join(Path(f"{ca}.pub").read_text().split()[:2]),
                 " ".join(Path(f"{stranger}.pub").read_text().split()[:2]), host_key, ca)
    server.stop()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plain: tuple[Host, SshdServer],
         signed: Signed) -> Path:
    """A HOME whose known_hosts trusts every test host's real key, however it is named."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    lines = []
    for server in (plain[1], signed.server):
        lines += [f"[{server.address}]:{server.port} {key_of(server)}", f"{server.address} {key_of(server)}"]
    lines.append(f"@cert-authority * {signed.ca}")
    (home / ".ssh" / "known_hosts").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("HOME", str(home))
    return home


async def reach(host: Host) -> tuple[str, str]:
    async with RemoteBashSession(host) as session:
        out = (await session.run("echo reached")).output
        assert session.info is not None
        return out, session.info.host_key


def pin(tmp_path: Path, *lines: str) -> Path:
    known = tmp_path / "pinned_known_hosts"
    known.write_text("".join(line + "\n" for line in lines))
    return known


# -- the pinned file and nothing else ---------------------------------------------------------------


async def test_a_changed_key_is_refused_though_the_users_file_lists_it(
        home: Path, plain: tuple[Host, SshdServer], tmp_path: Path) -> None:
    host, server = plain
    known = pin(tmp_path, f"[{server.address}]:{server.port} {other_key(tmp_path)}")
    with pytest.raises(HostKeyChanged, match="CHANGED") as caught:
        await reach(host.model_copy(update={"known_hosts": known}))
    assert fingerprint(key_of(server), tmp_path) in str(caught.value)
    assert str(known) in str(caught.value)


@pytest.mark.parametrize("text", ["", "# nothing pinned\n"])
async def test_an_empty_pin_is_refused_under_strict(home: Path, plain: tuple[Host, SshdServer], tmp_path: Path,
                                                    text: str) -> None:
    host, _ = plain
    known = tmp_path / "empty_known_hosts"
    known.write_text(text)
    with pytest.raises(UnknownHostKey):
        await reach(host.model_copy(update={"known_hosts": known}))
    assert known.read_text() == text


async def test_a_port_22_entry_is_not_trusted_on_another_port(home: Path, plain: tuple[Host, SshdServer],
                                                              tmp_path: Path) -> None:
    host, server = plain
    known = pin(tmp_path, f"{server.address} {key_of(server)}")
    with pytest.raises(UnknownHostKey):
        await reach(host.model_copy(update={"known_hosts": known}))
    known = pin(tmp_path, f"[{server.address}]:{server.port} {key_of(server)}")
    assert (await reach(host.model_copy(update={"known_hosts": known})))[0] == "reached\n"


@pytest.mark.parametrize("scope", ["*", "port"])
async def test_a_revoked_key_is_refused_though_also_listed(home: Path, plain: tuple[Host, SshdServer],
                                                          tmp_path: Path, scope: str) -> None:
    host, server = plain
    name = "*" if scope == "*" else f"[{server.address}]:{server.port}"
    known = pin(tmp_path, f"[{server.address}]:{server.port} {key_of(server)}", f"@revoked {name} {key_of(server)}")
    with pytest.raises(HostKeyError, match="REVOKED") as caught:
        await reach(host.model_copy(update={"known_hosts": known}))
    assert fingerprint(key_of(server), tmp_path) in str(caught.value)


def hash_names(known: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(known)], check=True, capture_output=True, timeout=30)


async def test_a_hashed_entry_is_trusted(home: Path, plain: tuple[Host, SshdServer], tmp_path: Path) -> None:
    host, server = plain
    known = pin(tmp_path, f"[{server.address}]:{server.port} {key_of(server)}")
    hash_names(known)
    text = known.read_text()
    assert text.startswith("|1|")
    assert server.address not in text
    out, seen = await reach(host.model_copy(update={"known_hosts": known}))
    assert out == "reached\n"
    assert seen == fingerprint(key_of(server), tmp_path)


async def test_without_a_pinned_file_the_users_file_is_the_one(home: Path, plain: tuple[Host, SshdServer],
                                                               tmp_path: Path) -> None:
    host, server = plain
    out, seen = await reach(host.model_copy(update={"known_hosts": None}))
    assert (out, seen) == ("reached\n", fingerprint(key_of(server), tmp_path))
    (home / ".ssh" / "known_hosts").write_text(f"[{server.address}]:{server.port} {other_key(tmp_path)}\n")
    with pytest.raises(HostKeyChanged):
        await reach(host.model_copy(update={"known_hosts": None}))


async def test_accept_new_records_host_and_port_in_the_pinned_file_only(
        home: Path, plain: tuple[Host, SshdServer], tmp_path: Path) -> None:
    host, server = plain
    users = (home / ".ssh" / "known_hosts").read_text()
    known = tmp_path / "new" / "known_hosts"
    out, _ = await reach(host.model_copy(update={"known_hosts": known, "host_key_policy": "accept-new"}))
    assert out == "reached\n"
    assert known.read_text() == f"[{server.address}]:{server.port} {key_of(server)}\n"
    assert (home / ".ssh" / "known_hosts").read_text() == users


# -- host certificates -----------------------------------------------------------------------------


async def test_a_host_certificate_from_a_listed_ca_is_accepted(home: Path, signed: Signed, tmp_path: Path) -> None:
    known = pin(tmp_path, f"@cert-authority [{CERT_ADDRESS}]:{signed.server.port} {signed.ca}")
    out, seen = await reach(signed.host.model_copy(update={"known_hosts": known}))
    assert out == "reached\n"
    assert seen == fingerprint(Path(f"{signed.host_key}.pub").read_text(), tmp_path)
    wildcard = pin(tmp_path, f"@cert-authority * {signed.ca}")
    assert (await reach(signed.host.model_copy(update={"known_hosts": wildcard})))[0] == "reached\n"


async def test_a_host_certificate_from_another_ca_is_refused(home: Path, signed: Signed, tmp_path: Path) -> None:
    known = pin(tmp_path, f"@cert-authority * {signed.stranger}")
    with pytest.raises(HostKeyChanged, match="not trusted") as caught:
        await reach(signed.host.model_copy(update={"known_hosts": known}))
    assert fingerprint(signed.ca, tmp_path) in str(caught.value)  # the CA that did sign it
    assert fingerprint(signed.stranger, tmp_path) in str(caught.value)  # the one expected


async def test_a_certificate_for_another_name_is_refused(home: Path, hosts: TestHosts, signed: Signed,
                                                        tmp_path: Path) -> None:
    work = hosts.root / "hk-misnamed"
    host_key = generate_keypair(work / "ssh_host_ed25519_key", "hk-misnamed-host")
    sign(signed.ca_key, host_key, "db.example.org")
    cert = Path(f"{host_key}-cert.pub")
    server = start_sshd(work, address=CERT_ADDRESS, users=[hosts.user], host_key=host_key,
                        authorized_keys=[hosts.client_key.with_suffix(".pub").read_text()],
                        extra_config=(f"HostCertificate {cert}",))
    try:
        known = pin(tmp_path, f"@cert-authority * {signed.ca}")
        with pytest.raises(HostKeyError, match="principal"):
            await reach(signed.host.model_copy(update={"port": server.port, "known_hosts": known}))
    finally:
        server.stop()


async def test_a_certificate_with_no_principals_names_every_host_as_in_openssh(
        home: Path, hosts: TestHosts, signed: Signed, tmp_path: Path) -> None:
    """OpenSSH reads a certificate without principals as valid for any host; so does remote_bash,
    which is why the CA's signer must name the host (``-n``): the README says so."""
    work = hosts.root / "hk-anyname"
    host_key = generate_keypair(work / "ssh_host_ed25519_key", "hk-anyname-host")
    sign(signed.ca_key, host_key, None)
    cert = Path(f"{host_key}-cert.pub")
    server = start_sshd(work, address=CERT_ADDRESS, users=[hosts.user], host_key=host_key,
                        authorized_keys=[hosts.client_key.with_suffix(".pub").read_text()],
                        extra_config=(f"HostCertificate {cert}",))
    try:
        known = pin(tmp_path, f"@cert-authority * {signed.ca}")
        out, _ = await reach(signed.host.model_copy(update={"port": server.port, "known_hosts": known}))
        assert out == "reached\n"
    finally:
        server.stop()


async def test_a_revoked_ca_is_refused(home: Path, signed: Signed, tmp_path: Path) -> None:
    known = pin(tmp_path, f"@cert-authority * {signed.ca}", f"@revoked * {signed.ca}")
    with pytest.raises(HostKeyError, match=r"certificate authority .* is REVOKED there") as err:
        await reach(signed.host.model_copy(update={"known_hosts": known}))
    assert not isinstance(err.value, UnknownHostKey)  # said as revoked, not as a key missing from the file


async def test_a_ca_for_other_hosts_vouches_for_nothing_here(home: Path, signed: Signed, tmp_path: Path) -> None:
    known = pin(tmp_path, f"@cert-authority *.example.org {signed.ca}")
    with pytest.raises(UnknownHostKey):
        await reach(signed.host.model_copy(update={"known_hosts": known}))


# -- the fingerprint on record ---------------------------------------------------------------------


def run_cli(tmp_path: Path, home: Path, inventory: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump({"hosts": inventory}))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "REMOTE_BASH_", "XDG_", "PYTHON_KEYRING", "SSH_AUTH_SOCK"))}
    env.update(HOME=str(home), XDG_STATE_HOME=str(home / ".state"), XDG_DATA_HOME=str(home / ".data"),
               REMOTE_BASH_INVENTORY=str(path), REMOTE_BASH_AUDIT_DIR=str(tmp_path / "audit"),
               PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring")
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def entry(host: Host, known: Path) -> dict[str, Any]:
    return {"hostname": host.hostname, "port": host.port, "user": host.user, "credential": "key",
            "identity_file": str(host.identity_file), "known_hosts": str(known)}


def test_every_record_and_check_carry_the_accepted_fingerprint(home: Path, plain: tuple[Host, SshdServer],
                                                               signed: Signed, tmp_path: Path) -> None:
    host, server = plain
    known = pin(tmp_path, f"[{server.address}]:{server.port} {key_of(server)}", f"@cert-authority * {signed.ca}")
    inventory = {"hk-plain": entry(host, known), "hk-signed": entry(signed.host, known)}
    expected = {"hk-plain": fingerprint(key_of(server), tmp_path),
                "hk-signed": fingerprint(Path(f"{signed.host_key}.pub").read_text(), tmp_path)}
    for name in inventory:
        out = run_cli(tmp_path, home, inventory, "exec", name, "--", "echo one")
        assert (out.returncode, out.stdout) == (0, "one\n"), out.stderr
        records = [json.loads(line) for line in (tmp_path / "audit" / f"{name}.jsonl").read_text().splitlines()]
        events = [r["event"] for r in records]
        assert "session.start" in events
        assert "exec.start" in events
        assert "exec.end" in events
        for record in records:
            if record["event"].startswith(("session.", "exec.")):
                assert record.get("host_key") == expected[name], record
        (start,) = [r for r in records if r["event"] == "session.start"]
        assert start.get("host_key_ca") == (fingerprint(signed.ca, tmp_path) if name == "hk-signed" else None)

    checked = run_cli(tmp_path, home, inventory, "check", "--json")
    assert checked.returncode == 0, checked.stderr
    assert {r["host"]: r["host_key"] for r in json.loads(checked.stdout)} == expected
    table = run_cli(tmp_path, home, inventory, "check")
    assert table.returncode == 0, table.stderr
    for name, fp in expected.items():
        (line,) = [x for x in table.stdout.splitlines() if x.startswith(name + " ")]
        assert fp in line


def test_a_refused_key_is_one_line_in_the_cli(home: Path, plain: tuple[Host, SshdServer], tmp_path: Path) -> None:
    host, server = plain
    known = pin(tmp_path, f"[{server.address}]:{server.port} {other_key(tmp_path)}")
    out = run_cli(tmp_path, home, {"hk-plain": entry(host, known)}, "exec", "hk-plain", "--", "echo never")
    assert out.returncode == 125
    assert out.stdout == ""
    assert len(out.stderr.splitlines()) == 1
    assert "CHANGED" in out.stderr
    assert f"ssh-keygen -R '[{server.address}]:{server.port}' -f '{known}'" in out.stderr
