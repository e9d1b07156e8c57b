"""Credentials: ssh-agent logins, key files named by the inventory only, keyring backends judged.

ssh-agent is a real ``ssh-agent -D -a SOCK`` started per test, loaded with ``ssh-add``. The
``HOME`` of these tests holds a copy of the authorized client key as ``~/.ssh/id_ed25519``, so
a login that fell back to the user's default keys would succeed where it must fail. Keyring
backends are real: keyrings.alt's PlaintextKeyring (refused unless ``--store-readable``),
keyrings.cryptfile's CryptFileKeyring (encrypts: accepted), keyring's null and fail backends.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keyring
import pytest
import yaml
from keyring.backend import KeyringBackend
from keyrings.alt.file import PlaintextKeyring
from keyrings.cryptfile.cryptfile import CryptFileKeyring

from remote_bash.credentials import acredentials_for, get_secret, reset_keyring_state, set_secret
from remote_bash.errors import AuthenticationFailed, ConfigError, CredentialError, InventoryError
from remote_bash.inventory import load_inventory
from remote_bash.models import Host
from remote_bash.sandbox import generate_keypair
from remote_bash.session import RemoteBashSession

from .sshd import TestHosts
from .waiting import wait_until

pytestmark = pytest.mark.reliability

CLI = [sys.executable, "-m", "remote_bash.cli"]
SECRET = "tr0ub4dor-and-3"


@pytest.fixture(scope="module")
def target(hosts: TestHosts) -> Host:
    return hosts.start("cr-target")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hosts: TestHosts) -> Path:
    """A HOME whose default key ~/.ssh/id_ed25519 is the authorized one: it must never be used
    unless named."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    for suffix in ("", ".pub"):
        shutil.copy(f"{hosts.client_key}{suffix}", home / ".ssh" / f"id_ed25519{suffix}")
    (home / ".ssh" / "id_ed25519").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home


class Agent:
    """A real ssh-agent on its own socket, for one test."""

    def __init__(self) -> None:
        # A short directory: a unix socket path must fit in 108 bytes.
        self.directory = Path(tempfile.mkdtemp(prefix="rb-agent-"))
        self.socket = self.directory / "agent.sock"
        self.process = subprocess.Popen(["ssh-agent", "-D", "-a", str(self.socket)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: self.socket.exists() or self.process.poll() is not None, within=10,
                   what=f"ssh-agent to create {self.socket}")
        assert self.socket.exists(), f"ssh-agent exited ({self.process.returncode}) before creating {self.socket}"

    def add(self, key: Path) -> None:
        env = {**os.environ, "SSH_AUTH_SOCK": str(self.socket)}
        subprocess.run(["ssh-add", "-q", str(key)], env=env, check=True, capture_output=True, timeout=30)
        listed = subprocess.run(["ssh-add", "-l"], env=env, capture_output=True, text=True, timeout=30)
        assert "ED25519" in listed.stdout, listed

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture
def agent(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Agent]:
    running = Agent()
    monkeypatch.setenv("SSH_AUTH_SOCK", str(running.socket))
    yield running
    running.stop()


async def reach(host: Host) -> str:
    async with RemoteBashSession(host, credentials=acredentials_for) as session:
        return (await session.run("echo reached")).output


# -- ssh-agent -------------------------------------------------------------------------------------


@pytest.mark.parametrize("credential", ["agent", "auto"])
async def test_agent_login(agent: Agent, hosts: TestHosts, target: Host, credential: str) -> None:
    # HOME's id_ed25519 is the same key: take it away, so only the agent can log in.
    (Path(os.environ["HOME"]) / ".ssh" / "id_ed25519").unlink()
    agent.add(hosts.client_key)
    host = target.model_copy(update={"credential": credential, "identity_file": None})
    assert await reach(host) == "reached\n"


async def test_an_empty_agent_says_so(agent: Agent, target: Host) -> None:
    host = target.model_copy(update={"credential": "agent", "identity_file": None})
    with pytest.raises(AuthenticationFailed, match=r"0 key\(s\) from ssh-agent"):
        await reach(host)


async def test_a_dead_agent_socket_says_so(home: Path, target: Host, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "no-agent.sock"))
    host = target.model_copy(update={"credential": "agent", "identity_file": None})
    with pytest.raises(AuthenticationFailed, match="no keys from ssh-agent") as caught:
        await reach(host)
    assert str(tmp_path / "no-agent.sock") in str(caught.value)


async def test_agent_credential_uses_only_the_agent(home: Path, target: Host) -> None:
    host = target.model_copy(update={"credential": "agent"})  # identity_file set, but not for "agent"
    with pytest.raises(AuthenticationFailed, match="SSH_AUTH_SOCK is not set"):
        await reach(host)


# -- key files -------------------------------------------------------------------------------------


async def test_key_without_identity_file_never_uses_the_default_keys(home: Path, target: Host) -> None:
    host = target.model_copy(update={"credential": "key", "identity_file": None})
    with pytest.raises(ConfigError, match="identity_file"):
        await reach(host)


async def test_auto_without_agent_or_identity_file_never_uses_the_default_keys(home: Path, target: Host) -> None:
    host = target.model_copy(update={"credential": "auto", "identity_file": None})
    with pytest.raises(AuthenticationFailed):
        await reach(host)


async def test_a_key_file_replaced_while_a_session_holds_its_keys_is_read_again(
        home: Path, hosts: TestHosts, target: Host, tmp_path: Path) -> None:
    # Connections open at once share a key file's keys: a key replaced on disk must still be the
    # one the next login offers, not the one an open session loaded.
    key = tmp_path / "keys" / "id_ed25519"
    key.parent.mkdir(mode=0o700)
    shutil.copy(hosts.client_key, key)
    key.chmod(0o600)
    other = generate_keypair(tmp_path / "other" / "id_ed25519")
    host = target.model_copy(update={"credential": "key", "identity_file": key})
    async with RemoteBashSession(host, credentials=acredentials_for, audit=False) as open_one:
        assert (await open_one.run("echo reached")).output == "reached\n"
        other.replace(key)
        with pytest.raises(AuthenticationFailed):
            await reach(host)  # the new key is not authorized on the host
        assert (await open_one.run("echo still")).output == "still\n"


@pytest.fixture
def rsa_key(tmp_path: Path) -> Path:
    key = tmp_path / "id_rsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "3072", "-N", "", "-f", str(key)], check=True,
                   capture_output=True, timeout=60)
    return key


async def test_connections_opened_at_once_load_a_key_file_once(rsa_key: Path) -> None:
    # A fleet's connections start together: they wait for one load of the file (an RSA key's
    # check takes a while), even when the first to ask gives up on it.
    from remote_bash._ssh import connection

    key = rsa_key
    first = asyncio.ensure_future(connection._unencrypted_keys(str(key)))
    await asyncio.sleep(0)  # the first has asked
    rest = [asyncio.ensure_future(connection._unencrypted_keys(str(key))) for _ in range(5)]
    first.cancel()
    loaded = await asyncio.gather(*rest)
    assert first.cancelled()
    assert all(len(keys) == 1 and keys[0] is loaded[0][0] for keys in loaded)
    assert not connection._LOADING
    key.write_text("not a key\n")
    for _ in range(2):  # a failed load is not kept: the next connection reads the file again
        with pytest.raises(ValueError, match="Invalid private key"):
            await connection._unencrypted_keys(str(key))
    assert not connection._LOADING


@pytest.mark.parametrize("where", ["host", "defaults"])
def test_inventory_key_without_identity_file_names_file_line_and_field(tmp_path: Path, where: str) -> None:
    path = tmp_path / "hosts.yaml"
    if where == "host":
        path.write_text("hosts:\n  web:\n    hostname: 127.0.0.9\n    credential: key\n")
        expected = f"{path}:4: hosts.web.credential:"
    else:
        path.write_text("defaults:\n  credential: key\nhosts:\n  web:\n    hostname: 127.0.0.9\n")
        expected = f"{path}:2: defaults.credential:"
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    message = str(caught.value)
    assert message.startswith(expected), message
    assert "identity_file" in message
    assert "\n" not in message


def cli(tmp_path: Path, home: Path, inventory: dict[str, Any] | None, *args: str, stdin: str | None = None,
        **env_extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "REMOTE_BASH_", "XDG_", "PYTHON_KEYRING", "SSH_AUTH_SOCK"))}
    env.update(HOME=str(home), XDG_STATE_HOME=str(home / ".state"), XDG_DATA_HOME=str(home / ".data"),
               REMOTE_BASH_AUDIT_DIR=str(tmp_path / "audit"))
    if inventory is not None:
        path = tmp_path / "hosts.yaml"
        path.write_text(yaml.safe_dump({"hosts": inventory}))
        env["REMOTE_BASH_INVENTORY"] = str(path)
    env.update(env_extra)
    return subprocess.run([*CLI, *args], env=env, input=stdin, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL if stdin is None else None)


def test_a_missing_identity_file_is_one_line(home: Path, target: Host, tmp_path: Path) -> None:
    missing = tmp_path / "keys" / "gone_ed25519"
    inventory = {"cr-target": {"hostname": target.hostname, "port": target.port, "user": target.user,
                               "credential": "key", "identity_file": str(missing),
                               "known_hosts": str(target.known_hosts)}}
    out = cli(tmp_path, home, inventory, "exec", "cr-target", "--", "echo never",
              PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring")
    assert out.returncode == 125
    assert out.stdout == ""
    assert len(out.stderr.splitlines()) == 1, out.stderr
    assert str(missing) in out.stderr
    assert "identity_file" in out.stderr


# -- keyring backends ------------------------------------------------------------------------------

PLAINTEXT = "keyrings.alt.file.PlaintextKeyring"


def test_a_plaintext_backend_is_refused_without_the_flag(home: Path, tmp_path: Path) -> None:
    store = home / ".data" / "python_keyring" / "keyring_pass.cfg"
    refused = cli(tmp_path, home, None, "credentials", "set", "web", stdin=SECRET + "\n",
                  PYTHON_KEYRING_BACKEND=PLAINTEXT)
    assert refused.returncode == 125
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    assert PLAINTEXT in refused.stderr
    assert "--store-readable" in refused.stderr
    assert "keyrings.cryptfile" in refused.stderr
    assert not store.exists() or SECRET not in store.read_text()

    stored = cli(tmp_path, home, None, "credentials", "set", "web", "--store-readable", stdin=SECRET + "\n",
                 PYTHON_KEYRING_BACKEND=PLAINTEXT)
    assert stored.returncode == 0, stored.stderr
    assert PLAINTEXT in stored.stdout
    assert str(store) in stored.stdout
    assert "NOT encrypted" in stored.stdout
    backend = PlaintextKeyring()
    backend.file_path = str(store)
    assert backend.get_password("remote-bash", "web") == SECRET


@pytest.mark.parametrize(("backend", "says"), [("keyring.backends.null.Keyring", "stores nothing"),
                                               ("keyring.backends.fail.Keyring", "no OS keyring backend")])
def test_a_backend_that_stores_nothing_is_refused_even_with_the_flag(home: Path, tmp_path: Path, backend: str,
                                                                     says: str) -> None:
    out = cli(tmp_path, home, None, "credentials", "set", "web", "--store-readable", stdin=SECRET + "\n",
              PYTHON_KEYRING_BACKEND=backend)
    assert out.returncode == 125
    assert says in out.stderr
    assert len(out.stderr.splitlines()) == 1, out.stderr


@pytest.fixture
def use_backend() -> Iterator[Any]:
    previous = keyring.get_keyring()

    def use(backend: KeyringBackend) -> KeyringBackend:
        keyring.set_keyring(backend)
        reset_keyring_state()
        return backend

    yield use
    keyring.set_keyring(previous)
    reset_keyring_state()


def test_an_encrypting_file_backend_is_accepted_and_named(use_backend: Any, tmp_path: Path) -> None:
    backend = CryptFileKeyring()
    backend.file_path = str(tmp_path / "cryptfile_pass.cfg")
    backend.keyring_key = "keyring password for the test"
    use_backend(backend)
    stored = set_secret("web", SECRET)
    assert stored.encrypted
    assert stored.backend.startswith("keyrings.cryptfile.cryptfile.CryptFileKeyring")
    assert str(tmp_path / "cryptfile_pass.cfg") in stored.backend
    assert SECRET not in (tmp_path / "cryptfile_pass.cfg").read_text()
    assert get_secret("web") == SECRET


class _MemoryKeyring(KeyringBackend):
    """A backend remote_bash knows nothing about."""

    priority = 1

    def __init__(self) -> None:
        super().__init__()
        self.stored: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.stored.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.stored[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        del self.stored[(service, username)]


def test_a_backend_not_known_to_encrypt_needs_the_flag(use_backend: Any) -> None:
    backend = use_backend(_MemoryKeyring())
    with pytest.raises(CredentialError, match="not known to encrypt") as caught:
        set_secret("web", SECRET)
    assert "_MemoryKeyring" in str(caught.value)
    assert backend.stored == {}
    stored = set_secret("web", SECRET, store_readable=True)
    assert (stored.encrypted, backend.stored) == (False, {("remote-bash", "web"): SECRET})


@pytest.fixture
def encrypted_key(hosts: TestHosts, tmp_path: Path) -> Path:
    """The authorized key, encrypted under SECRET."""
    key = tmp_path / "encrypted_ed25519"
    shutil.copy(hosts.client_key, key)
    key.chmod(0o600)
    subprocess.run(["ssh-keygen", "-q", "-p", "-f", str(key), "-P", "", "-N", SECRET], check=True,
                   capture_output=True, timeout=30)
    return key


async def test_a_session_made_from_python_asks_the_keyring_as_the_command_line_does(
        use_backend: Any, home: Path, target: Host, encrypted_key: Path) -> None:
    """No ``credentials=``: the key's passphrase still comes from the keyring (it did only on the
    command line, and an encrypted key failed from Python)."""
    key = encrypted_key
    backend = use_backend(_MemoryKeyring())
    host = target.model_copy(update={"credential": "key", "identity_file": key})
    backend.set_password("remote-bash", host.name, SECRET)
    async with RemoteBashSession(host) as session:
        assert (await session.run("echo reached")).output == "reached\n"


@pytest.mark.parametrize("switch", ["audit", "gate"])
@pytest.mark.parametrize("value", [0, "", [], "off"])
def test_a_safety_switch_is_off_only_by_false(target: Host, switch: str, value: object) -> None:
    with pytest.raises(TypeError, match=f"{switch}= takes .* or False"):
        RemoteBashSession(target, **{switch: value})  # type: ignore[arg-type]
