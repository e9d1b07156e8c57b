"""Connections: open one (through jump hosts), its exec channels and side commands, its SFTP client.

Nothing here retries anything that could run a command twice: a failed connect is reported,
never re-tried behind the caller's back (the fleet layer decides about retries, and only for
connects). A host is reached only with the keys its credential setting names.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import os
import shlex
import sys
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import asyncssh

from remote_bash._plain import Record
from remote_bash.errors import ConfigError, ConnectionLost, HostKeyError, KnownHostsMissing
from remote_bash.models import Host

from .channel import Flag, InputChannel, ShellChannel, ShellSession
from .hostkeys import Client, HostKeyCheck, default_known_hosts
from .mapping import map_error
from .sftp import SftpFiles

__all__ = ["Credentials", "SshConnection", "connect"]


class Credentials(Record):
    """What to offer a host: keys, their passphrase, a password, and whether to use the agent."""

    use_agent: bool = True
    key_files: Sequence[Path] = ()
    passphrase: str | None = None
    password: str | None = None
    keys: Sequence[Any] = ()
    """Already-loaded private keys (asyncssh key objects), offered before key_files."""


class SshConnection:
    """An open SSH connection to one host (possibly through jump hosts)."""

    __slots__ = (  # one per open session
        "_conn", "_hops", "_sftp", "_sftp_lock", "_sftp_missing", "accepted", "host", "host_key_accepted_new",
        "host_key_ca", "host_key_fingerprint", "lost", "lost_error", "peer_address",
    )

    def __init__(self, host: Host, conn: asyncssh.SSHClientConnection, hops: list[asyncssh.SSHClientConnection],
                 check: HostKeyCheck, lost: Flag) -> None:
        self.host = host
        self._conn = conn
        self._hops = hops
        key = conn.get_server_host_key()
        self.host_key_fingerprint = key.get_fingerprint("sha256") if key is not None else check.seen
        """SHA-256 fingerprint of the host key this connection accepted."""
        self.host_key_accepted_new = check.accepted_new
        vouched = key is not None and not check.accepted_new and all(
            k.public_data != key.public_data for k in check.trusted)
        self.host_key_ca = ", ".join(k.get_fingerprint("sha256") for k in check.authorities) if vouched else ""
        """When the key was accepted through a host certificate: the fingerprint of the CA(s) listed
        for the host that could have signed it; empty for a key pinned as such."""
        self.lost = lost
        self.lost_error: Exception | None = None
        self.accepted: list[tuple[Host, HostKeyCheck, asyncssh.SSHKey | None]] = [(host, check, key)]
        """Each hop's host, the pins it was checked against and the key it accepted, first hop first."""
        peer = conn.get_extra_info("peername")
        self.peer_address = f"{peer[0]}:{peer[1]}" if peer else host.address
        self._sftp: SftpFiles | None = None
        self._sftp_missing = False
        self._sftp_lock: asyncio.Lock | None = None
        """Made at the first SFTP use: most connections never have one."""

    @property
    def jump_host_keys_accepted_new(self) -> list[dict[str, str]]:
        """Each jump host whose key this connection recorded as new (``accept-new``), first hop
        first: its name and the SHA-256 fingerprint appended to its known_hosts."""
        return [{"host": host.name, "host_key": key.get_fingerprint("sha256") if key is not None else check.seen}
                for host, check, key in self.accepted[:-1] if check.accepted_new]

    def recheck_host_keys(self) -> None:
        """Raise the error a new connection would meet when a key this connection accepted (the
        host's or a jump host's) is no longer trusted by its known_hosts file as it reads now (a
        ``@revoked`` line added, the pin changed or removed). The file is parsed again only when its
        content changed."""
        for i, (host, then, key) in enumerate(self.accepted):
            if key is None:
                continue
            via = self.accepted[i - 1][0].name if i else None
            if host.host_key_policy == "strict" and not then.known_hosts.exists():
                raise _missing(host, then.known_hosts)
            try:
                now = HostKeyCheck.load(host, then.known_hosts)
            except (OSError, ValueError) as exc:
                raise HostKeyError(f"cannot read known_hosts file {then.known_hosts}: {exc}",
                                   host=host.name) from exc
            vouched = not then.accepted_new and all(k.public_data != key.public_data for k in then.trusted)
            cas = [k.get_fingerprint("sha256") for k in then.authorities] if vouched else []
            problem = now.verdict(key, cas)
            if not problem:
                continue
            now.seen = key.get_fingerprint("sha256") if not cas else (
                f"a certificate signed by CA {', '.join(cas)}")
            now.problem = "authority" if cas and problem == "changed" else problem
            now.expected = now.expectation()
            raise map_error(asyncssh.HostKeyNotVerifiable(f"Host key is {problem}"), host, check=now, via=via)

    @property
    def is_closed(self) -> bool:
        return self.lost.is_set()

    async def open_shell(self, command: str) -> ShellChannel:
        """Start ``command`` on a new exec channel without a pty."""
        shell = ShellChannel(self.host.name)
        try:
            opening = asyncio.ensure_future(self._conn.create_session(
                functools.partial(ShellSession, shell), command, encoding=None, request_pty=False
            ))
            await self._nudge_until(opening)
            chan, _session = await opening
        except (asyncssh.Error, OSError) as exc:
            raise map_error(exc, self.host, during="opening the shell channel") from exc
        shell._chan = chan
        return shell

    async def _nudge_until(self, pending: asyncio.Future[Any]) -> None:
        """Wait for ``pending`` while sending tiny SSH_MSG_DEBUG packets every 2 ms (for 100 ms
        at most). OpenSSH sets TCP_NODELAY only on sessions with a pty, so its second reply to a
        channel request waits for our ACK, which the kernel delays by up to 40 ms when we have
        nothing to send: each packet carries that ACK at once."""
        for _ in range(50):
            done, _ = await asyncio.wait([pending], timeout=0.002)
            if done or self.lost.is_set():
                return
            self._conn.send_debug("")

    async def run_side(self, command: str, *, timeout: float) -> tuple[int | None, str]:
        """Run a short POSIX sh script on a separate channel (used to kill a runaway command).

        The account's login shell only starts ``/bin/sh`` with it: what a command may have written
        in an rc file (``set -f``, a function named ``kill``, an alias) does not reach the script.

        Returns (exit status, stdout+stderr). Raises ConnectionLost when the connection is gone.
        """
        try:
            result = await asyncio.wait_for(
                self._conn.run(f"exec /bin/sh -c {shlex.quote(command)}", check=False, stdin=asyncssh.DEVNULL,
                               stderr=asyncssh.STDOUT),
                timeout,
            )
        except TimeoutError as exc:
            raise ConnectionLost(
                f"a control command did not answer within {timeout:g} s", host=self.host.name
            ) from exc
        except (asyncssh.Error, OSError) as exc:
            raise map_error(exc, self.host, during="running a control command") from exc
        out = result.stdout
        text = out if isinstance(out, str) else (out or b"").decode("utf-8", "replace")
        return result.exit_status, text

    async def open_input(self, command: str, *, timeout: float) -> InputChannel:
        """Start ``command`` on a new exec channel whose stdin the caller feeds (see InputChannel)."""
        try:
            opening = asyncio.ensure_future(asyncio.wait_for(self._conn.create_process(
                command, encoding=None, stderr=asyncssh.STDOUT, request_pty=False), timeout))
            await self._nudge_until(opening)
            process = await opening
        except TimeoutError as exc:
            raise ConnectionLost(f"an input channel did not open within {timeout:g} s", host=self.host.name) from exc
        except (asyncssh.Error, OSError) as exc:
            raise map_error(exc, self.host, during="opening an input channel") from exc
        return InputChannel(self.host.name, process)

    async def exec_bytes(self, command: str, stdin: bytes, *, timeout: float) -> tuple[int | None, bytes, bytes]:
        """Run ``command`` on a new exec channel with ``stdin`` as its input; bytes in, bytes out.

        Returns (exit status, stdout, stderr). Raises ConnectionLost when the connection is gone
        or the command does not end within ``timeout``.
        """
        try:
            result = await asyncio.wait_for(
                self._conn.run(command, input=stdin, check=False, encoding=None), timeout)
        except TimeoutError as exc:
            raise ConnectionLost(f"a file command did not answer within {timeout:g} s", host=self.host.name) from exc
        except (asyncssh.Error, OSError) as exc:
            raise map_error(exc, self.host, during="running a file command") from exc
        out, err = result.stdout, result.stderr
        return (result.exit_status,
                out if isinstance(out, bytes) else (out or "").encode(),
                err if isinstance(err, bytes) else (err or "").encode())

    async def sftp(self, *, timeout: float) -> SftpFiles | None:
        """This connection's SFTP client, started on first use; None when the host has no ``sftp``
        subsystem (remembered for the connection's life)."""
        if self._sftp_lock is None:
            self._sftp_lock = asyncio.Lock()
        async with self._sftp_lock:
            if self._sftp is not None and not self._sftp.closed:
                return self._sftp
            if self._sftp_missing:
                return None
            try:
                client = await asyncio.wait_for(
                    self._conn.start_sftp_client(path_errors="surrogateescape"), timeout)
            except TimeoutError as exc:
                raise ConnectionLost(f"the SFTP subsystem did not answer within {timeout:g} s",
                                     host=self.host.name) from exc
            except (asyncssh.ChannelOpenError, asyncssh.SFTPError) as exc:
                if self.is_closed:
                    raise map_error(exc, self.host, during="starting SFTP") from exc
                self._sftp_missing = True  # the server refused the subsystem: no SFTP here
                return None
            except (asyncssh.Error, OSError) as exc:
                raise map_error(exc, self.host, during="starting SFTP") from exc
            self._sftp = SftpFiles(self.host, client)
            return self._sftp

    async def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
        for conn in [self._conn, *reversed(self._hops)]:
            conn.close()
        for conn in [self._conn, *reversed(self._hops)]:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 5)


def _missing(host: Host, known_hosts: Path) -> KnownHostsMissing:
    return KnownHostsMissing(
        f"known_hosts file {known_hosts} does not exist, so the key of {host.hostname} cannot be "
        "checked. Create it with the host's key (ssh-keyscan), point known_hosts at the right file, "
        "or set host_key_policy: accept-new",
        host=host.name,
    )


async def _connect_one(host: Host, creds: Credentials, tunnel: asyncssh.SSHClientConnection | None,
                       on_lost: Callable[[Exception | None], None], via: str | None) -> tuple[
                           asyncssh.SSHClientConnection, HostKeyCheck]:
    known_hosts = host.known_hosts or default_known_hosts()
    if host.host_key_policy == "strict" and not known_hosts.exists():
        raise _missing(host, known_hosts)
    _check_key_files(host, creds)
    try:
        check = HostKeyCheck.load(host, known_hosts)
    except (OSError, ValueError) as exc:
        raise HostKeyError(f"cannot read known_hosts file {known_hosts}: {exc}", host=host.name) from exc
    agent, agent_keys, agent_note = await _agent_keys(host, creds)
    check.offered = _offered(creds, agent_note)
    client_keys: list[Any] = [*agent_keys, *creds.keys]
    options: dict[str, Any] = {
        "port": host.port,
        "username": host.user or _local_user(),
        # The only trust asyncssh gets is what the configured file pins for this name and port;
        # anything else reaches _Client, which refuses it (or records it under accept-new).
        "known_hosts": check.pins(),
        "server_host_key_algs": check.host_key_algorithms(),
        "x509_trusted_certs": None,
        # None, never (): asyncssh reads ~/.ssh/id_* for () or an empty list, and a host must be
        # reached only with the keys its credential setting names. The agent's keys are in the list.
        "client_keys": None,  # set below, with the key files' keys
        "agent_path": None,
        "passphrase": creds.passphrase,
        "password": creds.password,
        "keepalive_interval": host.keepalive_interval or None,
        "keepalive_count_max": 3,
        "login_timeout": host.connect_timeout,
        "connect_timeout": host.connect_timeout,
        "config": None,
        "tunnel": tunnel,
        "encryption_algs": encryption_algs(),
        "preferred_auth": _PREFERRED_AUTH,
        "kbdint_auth": creds.password is not None,
        "password_auth": creds.password is not None,
    }
    try:
        client_keys.extend(await _key_files(creds))
        options["client_keys"] = client_keys or None
        conn = await asyncio.wait_for(
            asyncssh.connect(host.hostname, client_factory=functools.partial(Client, check, on_lost), **options),
            host.connect_timeout + 1,
        )
    except asyncio.CancelledError:
        raise
    except (asyncssh.Error, OSError, TimeoutError, ValueError) as exc:
        raise map_error(exc, host, check=check, via=via) from exc
    finally:
        if agent is not None:
            agent.close()  # its keys signed during authentication, which is over
    check.offered = ""  # named only when authentication fails; the check lives as long as the connection
    _share_host_key_algs(conn)
    return conn, check


def _share_host_key_algs(conn: asyncssh.SSHClientConnection) -> None:
    """asyncssh keeps the host key algorithms it offers (for re-keys) as a list it encoded for this
    connection alone: an equal list, one for every connection offering the same, takes its place.
    Only ever replaced by an equal value, so asyncssh sees no difference."""
    algs = getattr(conn, "_server_host_key_algs", None)
    if isinstance(algs, list) and all(isinstance(a, bytes) for a in algs):
        shared = _shared_algs(tuple(algs))
        if shared == algs:
            conn._server_host_key_algs = shared


@functools.lru_cache(maxsize=64)
def _shared_algs(algs: tuple[bytes, ...]) -> list[bytes]:
    return list(algs)


async def _key_files(creds: Credentials) -> list[Any]:
    """What to offer asyncssh for the credentials' key files. A key file needing no passphrase is
    loaded once and its keys shared by the connections open at the same time (asyncssh would load a
    copy for each, kept for its life); they are held only while a connection holds them. A key read
    with a passphrase is left to asyncssh: decrypted for each connection, never cached."""
    if creds.passphrase is not None:
        return [str(p) for p in creds.key_files]
    keys: list[Any] = []
    for path in creds.key_files:
        keys.extend(await _unencrypted_keys(str(path)))
    return keys


_LOADED_KEYS: dict[str, tuple[bytes, list[weakref.ref[Any]]]] = {}
_LOADING: dict[tuple[str, bytes], asyncio.Task[list[Any]]] = {}
"""Loads under way, by file and content: the connections a fleet opens at once wait for one load."""


async def _unencrypted_keys(path: str) -> list[Any]:
    """The keys of the key file ``path`` (and its ``-cert.pub``), as asyncssh loads them; the ones
    loaded earlier while they are still held and the files' content has not changed since, or
    being loaded now for another connection of the same event loop."""
    digest = _key_digest(path)
    cached = _LOADED_KEYS.get(path)
    if cached is not None and cached[0] == digest:
        held = [ref() for ref in cached[1]]
        if all(key is not None for key in held):
            return held
    loading = _LOADING.get((path, digest))
    if loading is None or loading.get_loop() is not asyncio.get_running_loop():
        # In a thread, as asyncssh loads them: an RSA key's check takes a while.
        loading = _LOADING[path, digest] = asyncio.ensure_future(_load_keys(path, digest))
        loading.add_done_callback(functools.partial(_loaded, (path, digest)))
    # Shielded: a connection given up (its deadline, Ctrl-C) leaves the load to the others waiting.
    return list(await asyncio.shield(loading))


async def _load_keys(path: str, digest: bytes) -> list[Any]:
    keys = list(await asyncio.to_thread(asyncssh.load_keypairs, path))
    _LOADED_KEYS[path] = (digest, [weakref.ref(key) for key in keys])
    return keys


def _loaded(key: tuple[str, bytes], task: asyncio.Task[list[Any]]) -> None:
    if _LOADING.get(key) is task:
        del _LOADING[key]
    if not task.cancelled():
        task.exception()  # retrieved: each waiter has it raised; none is left to be logged


def _key_digest(path: str) -> bytes:
    """What the keys loaded from ``path`` depend on: its content and its certificate's (a few
    hundred bytes each, as the known_hosts file is read: by content, not times)."""
    digest = hashlib.sha256()
    for name in (path, f"{path}-cert.pub"):
        with contextlib.suppress(FileNotFoundError):
            digest.update(Path(name).expanduser().read_bytes())
        digest.update(b"\0")
    return digest.digest()


_PREFERRED_AUTH = ("publickey", "keyboard-interactive", "password")
"""One tuple that every connection's options keep (asyncssh would keep a list split from a string each)."""


AES_GCM_FIRST = "^aes256-gcm@openssh.com,aes128-gcm@openssh.com"
"""asyncssh's default ciphers with AES-GCM moved to the front (OpenSSH's ``^`` form): every cipher
of the default list stays, for a server that offers no AES-GCM."""


@functools.cache
def encryption_algs() -> str:
    """The ciphers offered, most preferred first: AES-GCM first when this machine's CPU has AES
    instructions, else asyncssh's default order (ChaCha20-Poly1305 first).

    The client's order decides (the server takes the first it also supports), and the client is
    where the cost is: asyncssh runs ChaCha20-Poly1305 as three cipher contexts made in Python per
    packet, AES-GCM as one call into OpenSSL. With AES instructions a 32 KB packet decrypts about
    ten times faster, which is most of a large output's client CPU and a share of every call's."""
    return AES_GCM_FIRST if _cpu_has_aes() else "default"


def _cpu_has_aes() -> bool:
    if sys.platform == "darwin":
        return True  # every Mac a supported macOS runs on has them (AES-NI, or ARMv8's crypto extension)
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if not line.strip():
                    break  # the first CPU's block says it: the rest is not generated, nor read
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):  # x86, ARM
                    return "aes" in value.split()
    except OSError:
        pass
    return False


def _check_key_files(host: Host, creds: Credentials) -> None:
    """A key login needs a key file that exists: say so in one line rather than let asyncssh fail
    on it, or (with no file named) fall back to keys nobody configured for this host."""
    if host.credential == "key" and not creds.key_files and not creds.keys:
        raise ConfigError(
            f"credential: key needs identity_file: set identity_file for {host.name} in the inventory "
            "(no other key is tried)", host=host.name,
        )
    for path in creds.key_files:
        if not Path(path).expanduser().is_file():
            raise ConfigError(f"identity_file {path} does not exist: fix identity_file for {host.name} "
                              "in the inventory", host=host.name)


async def _agent_keys(host: Host, creds: Credentials) -> tuple[asyncssh.SSHAgentClient | None, list[Any], str]:
    """The keys ssh-agent holds (at SSH_AUTH_SOCK), when the credentials use the agent, and what
    to say about them when authentication fails; none when there is no agent or it does not
    answer within the connect deadline."""
    if not creds.use_agent:
        return None, [], ""
    path = os.environ.get("SSH_AUTH_SOCK", "")
    if not path:
        return None, [], "no ssh-agent (SSH_AUTH_SOCK is not set)"
    agent = asyncssh.SSHAgentClient(path)
    try:
        keys = await asyncio.wait_for(agent.get_keys(), host.connect_timeout)
    except asyncio.CancelledError:
        agent.close()
        raise
    except (ValueError, OSError, TimeoutError) as exc:
        agent.close()
        return None, [], f"no keys from ssh-agent ({path}: {exc or type(exc).__name__})"
    return agent, list(keys), f"{len(keys)} key(s) from ssh-agent"


def _offered(creds: Credentials, agent_note: str) -> str:
    parts = [agent_note] if agent_note else []
    parts.extend(f"identity file {p}" for p in creds.key_files)
    if creds.keys:
        parts.append(f"{len(creds.keys)} loaded key(s)")
    if creds.password is not None:
        parts.append("a password from the keyring")
    return ", ".join(parts) or "nothing"


def _local_user() -> str:
    import getpass

    return getpass.getuser()


class _OnLost:
    """Told by the client that its connection ended: sets ``lost`` and, once ``conn`` is known,
    records why on it (a small object rather than a closure: one lives as long as each connection)."""

    __slots__ = ("conn", "lost")

    def __init__(self, lost: Flag) -> None:
        self.lost = lost
        self.conn: SshConnection | None = None

    def __call__(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.conn.lost_error = exc
        self.lost.set()


async def connect(chain: Sequence[Host], credentials: Sequence[Credentials]) -> SshConnection:
    """Open a connection to ``chain[-1]`` through the jump hosts ``chain[:-1]``, first hop first.

    ``credentials`` has one entry per element of ``chain``. Errors name the host that failed.
    """
    if not chain or len(chain) != len(credentials):
        raise ValueError("connect needs one Credentials per host in the chain")
    lost = Flag()
    on_lost = _OnLost(lost)
    hops: list[asyncssh.SSHClientConnection] = []
    accepted: list[tuple[Host, HostKeyCheck, asyncssh.SSHKey | None]] = []
    tunnel: asyncssh.SSHClientConnection | None = None
    try:
        for i, (hop, creds) in enumerate(zip(chain, credentials, strict=True)):
            last = i == len(chain) - 1
            via = chain[i - 1].name if i else None
            conn, check = await _connect_one(hop, creds, tunnel, on_lost if last else _OnLost(lost), via)
            if last:
                ssh = SshConnection(chain[-1], conn, hops, check, lost)
                ssh.accepted[:0] = accepted
                on_lost.conn = ssh
                return ssh
            accepted.append((hop, check, conn.get_server_host_key()))
            hops.append(conn)
            tunnel = conn
    except BaseException:
        for conn in reversed(hops):
            conn.close()
        raise
    raise AssertionError("unreachable")
