"""The only module that imports asyncssh: connect, channels, host keys, error mapping.

Everything asyncssh raises is turned into a :mod:`remote_bash.errors` error here,
once, naming the host. Nothing here retries anything that could run a command
twice: a failed connect is reported, never re-tried behind the caller's back
(the fleet layer decides about retries, and only for connects).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import posixpath
import secrets
import socket
import stat as stat_mod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
from asyncssh.public_key import get_default_certificate_algs, get_default_public_key_algs

from ._paths import open_private, private_dir
from .errors import (
    AuthenticationFailed,
    ConfigError,
    ConnectError,
    ConnectionLost,
    ConnectionRefused,
    ConnectTimeout,
    HostKeyChanged,
    HostKeyError,
    HostUnreachable,
    KnownHostsMissing,
    RemoteBashError,
    RemoteFileError,
    UnknownHostKey,
)
from .models import Host

__all__ = ["Credentials", "FileInfo", "SftpFiles", "ShellChannel", "SshConnection", "connect", "default_known_hosts"]


def default_known_hosts() -> Path:
    """The user's known_hosts file, which strict checking uses unless a host names another."""
    return Path("~/.ssh/known_hosts").expanduser()


@dataclass(frozen=True)
class Credentials:
    """What to offer a host: keys, their passphrase, a password, and whether to use the agent."""

    use_agent: bool = True
    key_files: Sequence[Path] = ()
    passphrase: str | None = None
    password: str | None = None
    keys: Sequence[Any] = ()
    """Already-loaded private keys (asyncssh key objects), offered before key_files."""


@dataclass
class _HostKeyCheck:
    """What the configured known_hosts file pins for one host, and the outcome of checking its key.

    The pins come from that one file only (never also from the user's own file), matched as
    OpenSSH does: on a port other than 22 only ``[name]:port`` entries count, hashed names
    match, ``@revoked`` keys are never trusted and ``@cert-authority`` keys vouch for host
    certificates naming the host."""

    host: Host
    known_hosts: Path
    trusted: list[asyncssh.SSHKey] = field(default_factory=list)
    authorities: list[asyncssh.SSHKey] = field(default_factory=list)
    revoked: list[asyncssh.SSHKey] = field(default_factory=list)
    seen: str = ""
    expected: list[str] = field(default_factory=list)
    accepted_new: bool = False
    problem: str = ""  # "", "unknown", "changed", "authority"
    offered: str = ""

    @classmethod
    def load(cls, host: Host, known_hosts: Path) -> _HostKeyCheck:
        known = _read_known_hosts(known_hosts)
        # Match on the host's name and port only, never on the address it resolved to (as
        # OpenSSH with CheckHostIP off): an entry for the IP must not override the name's pin.
        # A host named by its IP address still matches its IP entry, its name being the IP.
        # The port goes into the name, so that asyncssh's fallback from "[name]:port" to the
        # bare name (which would trust the port-22 host's key on any port) never happens.
        name = host.hostname
        pattern = name if host.port == 22 else f"[{name}]:{host.port}"
        keys, authorities, revoked, *_ = known.match(pattern, "", None)
        if host.port != 22:
            revoked = [*revoked, *known.match(name, "", None)[2]]
        gone = {k.public_data for k in revoked}
        return cls(host=host, known_hosts=known_hosts,
                   trusted=[k for k in keys if k.public_data not in gone],
                   authorities=[k for k in authorities if k.public_data not in gone],
                   revoked=list(revoked))

    def pins(self) -> tuple[list[asyncssh.SSHKey], list[asyncssh.SSHKey], list[asyncssh.SSHKey]]:
        """The trusted keys, CA keys and revoked keys, in the form asyncssh's known_hosts option takes."""
        return self.trusted, self.authorities, self.revoked

    def host_key_algorithms(self) -> list[str]:
        """The host key algorithms to offer, pinned kinds first (as OpenSSH orders them), so the
        server presents the key that was pinned. Certificate algorithms only when a CA is listed
        for the host (a certificate can be accepted only then); every other plain algorithm last,
        so a changed key is seen and reported as changed rather than as a failed negotiation."""
        algs: list[bytes] = []
        for key in self.trusted:
            algs.extend(a for a in key.sig_algorithms if a not in algs)
        if self.authorities:
            algs.extend(a for a in get_default_certificate_algs() if a not in algs)
        algs.extend(a for a in get_default_public_key_algs() if a not in algs)
        return [a.decode("ascii") for a in algs]

    def expectation(self) -> list[str]:
        return sorted({k.get_fingerprint("sha256") for k in self.trusted}) + sorted(
            {f"a certificate signed by CA {k.get_fingerprint('sha256')}" for k in self.authorities})


class _Client(asyncssh.SSHClient):
    """Asked by asyncssh about a host key only when no pin of the configured file vouched for it
    (revoked keys never get here: asyncssh refuses them first); keeps what was seen, so the error
    can name the key seen and the one expected, and lets ``accept-new`` record a first key."""

    def __init__(self, check: _HostKeyCheck, on_lost: Callable[[Exception | None], None]) -> None:
        self._check = check
        self._on_lost = on_lost

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        check = self._check
        check.seen = key.get_fingerprint("sha256")
        if check.trusted or check.authorities:
            check.problem = "changed"
            check.expected = check.expectation()
            return False
        if check.host.host_key_policy == "accept-new":
            _append_known_host(check.known_hosts, check.host, key)
            check.accepted_new = True
            return True
        check.problem = "unknown"
        return False

    def validate_host_ca_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        check = self._check
        check.seen = f"a certificate signed by CA {key.get_fingerprint('sha256')}"
        check.problem = "authority"
        check.expected = check.expectation()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost(exc)


_KNOWN_HOSTS_CACHE: dict[Path, tuple[tuple[int, ...], asyncssh.SSHKnownHosts]] = {}


def _read_known_hosts(path: Path) -> asyncssh.SSHKnownHosts:
    """The parsed known_hosts file, re-read whenever its inode, size, modification or change time
    differs from the cached read (a fleet connects to many hosts against one file). The change
    time catches an edit that kept the size and restored the modification time."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return asyncssh.import_known_hosts("")
    stamp = (st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
    cached = _KNOWN_HOSTS_CACHE.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    known = asyncssh.read_known_hosts(str(path))
    _KNOWN_HOSTS_CACHE[path] = (stamp, known)
    return known


def _append_known_host(path: Path, host: Host, key: asyncssh.SSHKey) -> None:
    """Append ``host``'s key, under an exclusive lock so that sessions accepting at once do not
    interleave, starting a new line first when the file (say, hand-edited) lacks a final newline."""
    line = f"{_pattern(host)} {key.export_public_key('openssh').decode().strip()}\n".encode()
    # Never through a link or a directory someone else can change (UnsafePath says which).
    private_dir(path.parent, what="known_hosts")
    fd = open_private(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, what="known_hosts")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        os.write(fd, line)
    finally:
        os.close(fd)  # releases the lock


class _ShellSession(asyncssh.SSHClientSession[bytes]):
    """Delivers channel bytes to a callback as they arrive: no stream buffering in between."""

    def __init__(self, owner: ShellChannel) -> None:
        self._owner = owner

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self._owner._on_data(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner._on_closed(exc)

    # The shell's exit is reported before the channel closes: the channel stays open while a
    # child of the dead shell still holds its stdout, so waiting for the close could take long.
    def exit_status_received(self, status: int) -> None:
        self._owner._on_exited()

    def exit_signal_received(self, signal: str, core_dumped: bool, msg: str, lang: str) -> None:
        self._owner._on_exited()


class ShellChannel:
    """One exec channel running a long-lived process, read through a data callback."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.closed = asyncio.Event()
        self.exited = False
        self.close_error: Exception | None = None
        self.on_data: Callable[[bytes], None] = lambda _data: None
        self.on_closed: Callable[[], None] = lambda: None
        self._chan: asyncssh.SSHClientChannel[bytes] | None = None

    def _on_data(self, data: bytes) -> None:
        self.on_data(data)

    def _on_closed(self, exc: Exception | None) -> None:
        self.close_error = exc
        self.closed.set()
        self.on_closed()

    def _on_exited(self) -> None:
        self.exited = True
        self.on_closed()

    def write(self, data: bytes) -> None:
        """Send bytes to the process's stdin; raises ConnectionLost when the channel is gone."""
        if self._chan is None or self.closed.is_set():
            raise ConnectionLost("the shell channel is closed", host=self.host)
        try:
            self._chan.write(data)
        except (asyncssh.Error, OSError, BrokenPipeError) as exc:
            raise ConnectionLost(f"writing to the shell failed: {exc}", host=self.host) from exc

    @property
    def exit_status(self) -> int | None:
        """The process's exit status; None when it died of a signal or is still running."""
        if self._chan is None:
            return None
        status = self._chan.get_exit_status()
        return None if status is None or status < 0 else status

    @property
    def exit_signal(self) -> str | None:
        if self._chan is None:
            return None
        sig = self._chan.get_exit_signal()
        return None if sig is None else sig[0]

    def close(self) -> None:
        if self._chan is not None:
            self._chan.close()


class SshConnection:
    """An open SSH connection to one host (possibly through jump hosts)."""

    def __init__(self, host: Host, conn: asyncssh.SSHClientConnection, hops: list[asyncssh.SSHClientConnection],
                 check: _HostKeyCheck, lost: asyncio.Event) -> None:
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
        peer = conn.get_extra_info("peername")
        self.peer_address = f"{peer[0]}:{peer[1]}" if peer else host.address
        self._sftp: SftpFiles | None = None
        self._sftp_missing = False
        self._sftp_lock = asyncio.Lock()

    @property
    def is_closed(self) -> bool:
        return self.lost.is_set()

    async def open_shell(self, command: str) -> ShellChannel:
        """Start ``command`` on a new exec channel without a pty."""
        shell = ShellChannel(self.host.name)
        try:
            opening = asyncio.ensure_future(self._conn.create_session(
                lambda: _ShellSession(shell), command, encoding=None, request_pty=False
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
        """Run a short command on a separate channel (used to kill a runaway command).

        Returns (exit status, stdout+stderr). Raises ConnectionLost when the connection is gone.
        """
        try:
            result = await asyncio.wait_for(
                self._conn.run(command, check=False, stdin=asyncssh.DEVNULL, stderr=asyncssh.STDOUT),
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


def _pattern(host: Host) -> str:
    """How OpenSSH names ``host`` in known_hosts: ``[name]:port`` unless the port is 22."""
    return host.hostname if host.port == 22 else f"[{host.hostname}]:{host.port}"


@dataclass(frozen=True)
class FileInfo:
    """What a path is on the host, symbolic links followed."""

    path: str
    """The path with every symbolic link resolved (the path itself when it does not exist)."""
    kind: str
    """``file``, ``dir``, ``other`` (device, fifo, socket) or ``missing``."""
    size: int = 0
    mode: int = 0
    """Permission bits, set-id and sticky bits included."""
    uid: int = -1
    gid: int = -1
    link: bool = False
    """The path given was a symbolic link."""


_SFTP_REASONS = {
    asyncssh.FX_NO_SUCH_FILE: "missing",
    asyncssh.FX_NO_SUCH_PATH: "missing",
    asyncssh.FX_PERMISSION_DENIED: "denied",
    asyncssh.FX_WRITE_PROTECT: "denied",
    asyncssh.FX_FILE_ALREADY_EXISTS: "exists",
    asyncssh.FX_NOT_A_DIRECTORY: "not_dir",
}


class SftpFiles:
    """File operations over one connection's SFTP channel.

    Writes go to a temporary file in the same directory, which then replaces the target by a
    rename, so a reader sees the old file or the new one, never a part."""

    def __init__(self, host: Host, client: asyncssh.SFTPClient) -> None:
        self.host = host
        self._client = client
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self._client.exit()

    def _error(self, exc: asyncssh.Error | OSError, what: str, path: str) -> RemoteBashError:
        if isinstance(exc, asyncssh.SFTPError):
            reason = _SFTP_REASONS.get(exc.code, "failure")
            if exc.code == asyncssh.FX_FAILURE and "exist" in str(exc.reason).lower():
                reason = "exists"
            return RemoteFileError(f"{what} {path} failed: {exc.reason}", host=self.host.name, reason=reason)
        self.closed = True
        return map_error(exc, self.host, during=f"{what} {path}")

    async def inspect(self, path: str) -> FileInfo:
        """What ``path`` is, every symbolic link on the way resolved (a missing file's path is
        resolved through its directory; a dangling link's through the path it names)."""
        try:
            link = False
            try:
                first = await self._client.lstat(path)
                link = first.type == asyncssh.FILEXFER_TYPE_SYMLINK or stat_mod.S_ISLNK(first.permissions or 0)
                resolved = str(await self._client.realpath(path))
                attrs = await self._client.stat(resolved)
            except asyncssh.SFTPNoSuchFile:
                target = path
                if link:
                    target = posixpath.join(posixpath.dirname(path), str(await self._client.readlink(path)))
                folder, name = posixpath.split(posixpath.normpath(target))
                with contextlib.suppress(asyncssh.SFTPNoSuchFile):
                    folder = str(await self._client.realpath(folder))
                return FileInfo(path=posixpath.join(folder, name), kind="missing", link=link)
        except (asyncssh.Error, OSError) as exc:
            raise self._error(exc, "looking at", path) from exc
        perms = attrs.permissions or 0
        kind = "file" if stat_mod.S_ISREG(perms) else "dir" if stat_mod.S_ISDIR(perms) else "other"
        return FileInfo(path=resolved, kind=kind, size=attrs.size or 0, mode=stat_mod.S_IMODE(perms),
                        uid=attrs.uid if attrs.uid is not None else -1,
                        gid=attrs.gid if attrs.gid is not None else -1, link=link)

    async def read(self, path: str, limit: int) -> bytes:
        """Up to ``limit`` + 1 bytes of the file (one more than allowed tells the caller it is longer)."""
        try:
            async with self._client.open(path, "rb", encoding=None) as fh:
                data = await fh.read(limit + 1)
        except (asyncssh.Error, OSError) as exc:
            raise self._error(exc, "reading", path) from exc
        return data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape")

    async def write(self, path: str, data: bytes, *, mode: int, owner: tuple[int, int] | None,
                    create: bool) -> bool:
        """Write ``data`` as ``path`` atomically: a temporary file beside it, then a rename.

        ``create`` never replaces an existing file. Returns False when ``owner`` (uid, gid) could
        not be given to the new file (the user may not hand files to others)."""
        folder, name = posixpath.split(path)
        temp = posixpath.join(folder, f".{name}.rb-{secrets.token_hex(4)}")
        flags = asyncssh.FXF_WRITE | asyncssh.FXF_CREAT | asyncssh.FXF_EXCL
        owner_kept = True
        try:
            async with self._client.open(temp, flags, asyncssh.SFTPAttrs(permissions=0o600),
                                         encoding=None) as fh:
                await fh.write(data)
                with contextlib.suppress(asyncssh.SFTPOpUnsupported):
                    await fh.fsync()
        except (asyncssh.Error, OSError) as exc:
            await self._discard(temp)
            raise self._error(exc, "writing a temporary file for", path) from exc
        except BaseException:
            await self._discard(temp)  # cancelled: leave nothing behind, then stop
            raise
        try:
            if owner is not None:  # before chmod: a chown clears the set-id bits
                try:
                    await self._client.chown(temp, uid=owner[0], gid=owner[1])
                except asyncssh.SFTPError:
                    owner_kept = False
            await self._client.chmod(temp, mode)
            if create:
                await self._client.rename(temp, path)  # OpenSSH's plain rename never replaces
            else:
                await self._client.posix_rename(temp, path)
        except (asyncssh.Error, OSError) as exc:
            await self._discard(temp)
            raise self._error(exc, "replacing" if not create else "creating", path) from exc
        except BaseException:
            await self._discard(temp)
            raise
        return owner_kept

    async def _discard(self, temp: str) -> None:
        with contextlib.suppress(asyncssh.Error, OSError):
            await self._client.remove(temp)

    async def listing(self, path: str, *, depth: int, limit: int) -> list[tuple[str, bool]]:
        """Entries under ``path`` up to ``depth`` levels, hidden ones left out, as (relative
        path, is a directory), sorted; at most ``limit`` entries."""
        found: list[tuple[str, bool]] = []

        async def walk(rel: str, level: int) -> None:
            here = posixpath.join(path, rel) if rel else path
            try:
                names = await self._client.readdir(here)
            except asyncssh.SFTPError:
                if not rel:
                    raise
                return  # unreadable below the top: listed, not entered
            for entry in sorted(names, key=lambda n: str(n.filename)):
                name = str(entry.filename)
                if name.startswith(".") or len(found) >= limit:
                    continue
                child = posixpath.join(rel, name) if rel else name
                perms = entry.attrs.permissions or 0
                is_dir = stat_mod.S_ISDIR(perms)
                if stat_mod.S_ISLNK(perms):
                    with contextlib.suppress(asyncssh.SFTPError):
                        is_dir = stat_mod.S_ISDIR((await self._client.stat(posixpath.join(here, name))).permissions
                                                  or 0)
                found.append((child, is_dir))
                if is_dir and level < depth:
                    await walk(child, level + 1)

        try:
            await walk("", 1)
        except (asyncssh.Error, OSError) as exc:
            raise self._error(exc, "listing", path) from exc
        return found


def map_error(exc: BaseException, host: Host, *, during: str = "connecting", check: _HostKeyCheck | None = None,
              via: str | None = None) -> RemoteBashError:
    """Map an asyncssh or socket error to a remote_bash error that names the host and what to do."""
    name = host.name
    target = f"{host.hostname} port {host.port}" + (f" (through jump host {via})" if via else "")
    if check is not None and check.problem == "changed":
        return HostKeyChanged(
            f"host key for {target} has CHANGED: the server presented {check.seen}, but "
            f"{check.known_hosts} expects {', '.join(check.expected)}. This may be a "
            "man-in-the-middle attack, or the host was reinstalled; if you know why it changed, "
            f"remove the old line (ssh-keygen -R '{_pattern(host)}' -f '{check.known_hosts}') and connect again",
            host=name, seen=check.seen, expected=", ".join(check.expected),
        )
    if check is not None and check.problem == "authority":
        return HostKeyChanged(
            f"host key for {target} is not trusted: the server presented {check.seen}, which "
            f"{check.known_hosts} does not list as a @cert-authority for this host; it expects "
            f"{', '.join(check.expected)}. This may be a man-in-the-middle attack",
            host=name, seen=check.seen, expected=", ".join(check.expected),
        )
    revoked_by_asyncssh = isinstance(exc, asyncssh.HostKeyNotVerifiable) and "revoked" in str(exc).lower()
    if check is not None and revoked_by_asyncssh:
        # asyncssh refuses a revoked key (or CA) before asking _Client, so the key it saw is one of these.
        what = ", ".join(sorted({k.get_fingerprint("sha256") for k in check.revoked}))
        return HostKeyError(
            f"host key {what} of {target} is REVOKED in {check.known_hosts} (a @revoked line): "
            "refusing to connect. The host must get a new key, which you then verify and add",
            host=name,
        )
    if check is not None and check.problem == "unknown":
        return UnknownHostKey(
            f"host key {check.seen} of {target} is not in {check.known_hosts}. Verify it, then add it "
            f"(ssh-keyscan -p {host.port} {host.hostname} >> {check.known_hosts}), or set "
            "host_key_policy: accept-new for this host in the inventory",
            host=name,
        )
    if isinstance(exc, asyncssh.PermissionDenied):
        offered = f" (offered: {check.offered})" if check is not None and check.offered else ""
        return AuthenticationFailed(
            f"authentication as {host.user or 'the local user'} on {target} failed: the server refused "
            f"every key and password offered{offered}. Check that the key is in the remote authorized_keys, "
            "that ssh-agent holds it, or store a secret with 'remote-bash credentials set "
            f"{name}'",
            host=name,
        )
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        where = f" against {check.known_hosts}" if check is not None else ""
        return HostKeyError(f"host key of {target} could not be verified{where}: {exc}", host=name)
    if isinstance(exc, TimeoutError) or (
        isinstance(exc, asyncssh.ConnectionLost) and "timeout" in str(exc).lower() and during == "connecting"
    ):
        return ConnectTimeout(
            f"{during} to {target} timed out after {host.connect_timeout:g} s: the host did not answer. "
            "Check that it is up and that no firewall drops SSH",
            host=name,
        )
    if isinstance(exc, socket.gaierror):
        return HostUnreachable(
            f"cannot resolve {host.hostname!r}: {exc.strerror}. Check the hostname in the inventory",
            host=name,
        )
    if isinstance(exc, ConnectionRefusedError) or getattr(exc, "errno", None) == errno.ECONNREFUSED:
        return ConnectionRefused(
            f"connection to {target} refused: nothing listens there. Is sshd running, and is the port right?",
            host=name,
        )
    if isinstance(exc, OSError) and exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL):
        return HostUnreachable(f"{target} is unreachable: {exc.strerror}", host=name)
    if isinstance(exc, asyncssh.ConnectionLost | asyncssh.DisconnectError | BrokenPipeError | ConnectionResetError):
        return ConnectionLost(f"connection to {target} lost while {during}: {exc}", host=name)
    if isinstance(exc, asyncssh.ChannelOpenError):
        return ConnectionLost(f"{target} refused a new channel while {during}: {exc.reason}", host=name)
    if isinstance(exc, OSError):
        return ConnectError(f"{during} to {target} failed: {exc.strerror or exc}", host=name)
    return ConnectError(f"{during} to {target} failed: {exc}", host=name)


async def _connect_one(host: Host, creds: Credentials, tunnel: asyncssh.SSHClientConnection | None,
                       on_lost: Callable[[Exception | None], None], via: str | None) -> tuple[
                           asyncssh.SSHClientConnection, _HostKeyCheck]:
    known_hosts = host.known_hosts or default_known_hosts()
    if host.host_key_policy == "strict" and not known_hosts.exists():
        raise KnownHostsMissing(
            f"known_hosts file {known_hosts} does not exist, so the key of {host.hostname} cannot be "
            "checked. Create it with the host's key (ssh-keyscan), point known_hosts at the right file, "
            "or set host_key_policy: accept-new",
            host=host.name,
        )
    _check_key_files(host, creds)
    try:
        check = _HostKeyCheck.load(host, known_hosts)
    except (OSError, ValueError) as exc:
        raise HostKeyError(f"cannot read known_hosts file {known_hosts}: {exc}", host=host.name) from exc
    agent, agent_keys, agent_note = await _agent_keys(host, creds)
    check.offered = _offered(creds, agent_note)
    client_keys: list[Any] = [*agent_keys, *creds.keys, *(str(p) for p in creds.key_files)]
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
        "client_keys": client_keys or None,
        "agent_path": None,
        "passphrase": creds.passphrase,
        "password": creds.password,
        "keepalive_interval": host.keepalive_interval or None,
        "keepalive_count_max": 3,
        "login_timeout": host.connect_timeout,
        "connect_timeout": host.connect_timeout,
        "config": None,
        "tunnel": tunnel,
        "preferred_auth": "publickey,keyboard-interactive,password",
        "kbdint_auth": creds.password is not None,
        "password_auth": creds.password is not None,
    }
    try:
        conn = await asyncio.wait_for(
            asyncssh.connect(host.hostname, client_factory=lambda: _Client(check, on_lost), **options),
            host.connect_timeout + 1,
        )
    except asyncio.CancelledError:
        raise
    except (asyncssh.Error, OSError, TimeoutError, ValueError) as exc:
        raise map_error(exc, host, check=check, via=via) from exc
    finally:
        if agent is not None:
            agent.close()  # its keys signed during authentication, which is over
    return conn, check


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


async def connect(chain: Sequence[Host], credentials: Sequence[Credentials]) -> SshConnection:
    """Open a connection to ``chain[-1]`` through the jump hosts ``chain[:-1]``, first hop first.

    ``credentials`` has one entry per element of ``chain``. Errors name the host that failed.
    """
    if not chain or len(chain) != len(credentials):
        raise ValueError("connect needs one Credentials per host in the chain")
    lost = asyncio.Event()
    holder: list[SshConnection] = []

    def on_lost(exc: Exception | None) -> None:
        if holder:
            holder[0].lost_error = exc
        lost.set()

    hops: list[asyncssh.SSHClientConnection] = []
    tunnel: asyncssh.SSHClientConnection | None = None
    try:
        for i, (hop, creds) in enumerate(zip(chain, credentials, strict=True)):
            last = i == len(chain) - 1
            via = chain[i - 1].name if i else None
            conn, check = await _connect_one(hop, creds, tunnel, on_lost if last else (lambda _e: lost.set()), via)
            if last:
                ssh = SshConnection(chain[-1], conn, hops, check, lost)
                holder.append(ssh)
                return ssh
            hops.append(conn)
            tunnel = conn
    except BaseException:
        for conn in reversed(hops):
            conn.close()
        raise
    raise AssertionError("unreachable")


# -- the fallback sandbox server, for machines without OpenSSH's sshd ------------------------


async def _serve_process(process: asyncssh.SSHServerProcess[bytes]) -> None:
    """Run an exec request as sshd does: the user's shell with -c, stdin/stdout/stderr piped."""
    command = process.command
    if command is None:
        process.stderr.write(b"this sandbox serves commands only, not interactive shells\n")
        process.exit(1)
        return
    shell = os.environ.get("SHELL") or "/bin/bash"
    child = await asyncio.create_subprocess_exec(
        shell, "-c", command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None

    async def pump_in() -> None:
        assert child.stdin is not None
        with contextlib.suppress(Exception):
            while data := await process.stdin.read(65536):
                child.stdin.write(data)
                await child.stdin.drain()
        with contextlib.suppress(Exception):
            child.stdin.close()

    async def pump_out(source: asyncio.StreamReader, sink: asyncssh.SSHWriter[bytes]) -> None:
        with contextlib.suppress(Exception):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()

    feeder = asyncio.create_task(pump_in())
    try:
        await asyncio.gather(pump_out(child.stdout, process.stdout), pump_out(child.stderr, process.stderr))
        status = await child.wait()
    finally:
        feeder.cancel()
        if child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
    if status < 0:
        process.exit_with_signal(_signal_name(-status))
    else:
        process.exit(status)


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name.removeprefix("SIG")
    except ValueError:
        return "KILL"


async def serve_fallback(address: str, port: int, host_key: str, authorized_keys: str) -> None:
    """Serve exec channels for the current user on a loopback address until cancelled.

    Prints ``Server listening on ADDRESS port PORT.`` to stderr once listening, as sshd -e does.
    """
    import ipaddress
    import sys

    if not ipaddress.ip_address(address).is_loopback:
        raise ValueError(f"the fallback sandbox only listens on loopback, not {address}")
    server = await asyncssh.create_server(
        asyncssh.SSHServer, address, port, server_host_keys=[host_key], authorized_client_keys=authorized_keys,
        process_factory=_serve_process, encoding=None, allow_scp=False, sftp_factory=None,
        keepalive_interval=0,
    )
    bound = server.sockets[0].getsockname()[1]
    print(f"Server listening on {address} port {bound}.", file=sys.stderr, flush=True)
    async with server:
        await server.wait_closed()


if __name__ == "__main__":  # python -m remote_bash._ssh ADDRESS PORT HOST_KEY AUTHORIZED_KEYS
    import sys

    addr, port_text, key_path, auth_path = sys.argv[1:5]
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_fallback(addr, int(port_text), key_path, auth_path))
