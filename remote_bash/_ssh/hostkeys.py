"""Host keys: what the configured known_hosts file pins for a host, and the asyncssh client that checks them.

A key is trusted only when that one file pins it for the host's name and port (or a
``@cert-authority`` there signed it); nothing here trusts a key any other way, and the
only write is ``accept-new`` appending a first key under a lock.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import asyncssh
from asyncssh.public_key import get_default_certificate_algs, get_default_public_key_algs

from remote_bash._paths import open_private, private_dir
from remote_bash._plain import Record
from remote_bash.models import Host

__all__ = ["Client", "HostKeyCheck", "append_known_host", "default_known_hosts", "known_hosts_pattern",
           "read_known_hosts"]


def default_known_hosts() -> Path:
    """The user's known_hosts file, which strict checking uses unless a host names another."""
    return Path("~/.ssh/known_hosts").expanduser()

def known_hosts_pattern(host: Host) -> str:
    """How OpenSSH names ``host`` in known_hosts: ``[name]:port`` unless the port is 22."""
    return host.hostname if host.port == 22 else f"[{host.hostname}]:{host.port}"


class HostKeyCheck(Record, frozen=False):
    """What the configured known_hosts file pins for one host, and the outcome of checking its key.

    The pins come from that one file only (never also from the user's own file), matched as
    OpenSSH does: on a port other than 22 only ``[name]:port`` entries count, hashed names
    match, ``@revoked`` keys are never trusted and ``@cert-authority`` keys vouch for host
    certificates naming the host."""

    host: Host
    known_hosts: Path
    # Tuples: a connection keeps its check for its life, and most of these are empty (one shared ()).
    trusted: tuple[asyncssh.SSHKey, ...] = ()
    authorities: tuple[asyncssh.SSHKey, ...] = ()
    revoked: tuple[asyncssh.SSHKey, ...] = ()
    revoked_authorities: tuple[asyncssh.SSHKey, ...] = ()
    """@cert-authority keys for this host that a @revoked line cancels (named in the error)."""
    seen: str = ""
    expected: Sequence[str] = ()
    accepted_new: bool = False
    problem: str = ""  # "", "unknown", "changed", "authority"
    offered: str = ""

    @classmethod
    def load(cls, host: Host, known_hosts: Path) -> HostKeyCheck:
        known = read_known_hosts(known_hosts)
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
                   trusted=tuple(k for k in keys if k.public_data not in gone),
                   authorities=tuple(k for k in authorities if k.public_data not in gone),
                   revoked=tuple(revoked),
                   revoked_authorities=tuple(k for k in authorities if k.public_data in gone))

    def pins(self) -> tuple[tuple[asyncssh.SSHKey, ...], tuple[asyncssh.SSHKey, ...], tuple[asyncssh.SSHKey, ...]]:
        """The trusted keys, CA keys and revoked keys, in the form asyncssh's known_hosts option takes."""
        return self.trusted, self.authorities, self.revoked

    def host_key_algorithms(self) -> list[str]:
        """The host key algorithms to offer, pinned kinds first (as OpenSSH orders them), so the
        server presents the key that was pinned. Certificate algorithms only when a CA is listed
        for the host (a certificate can be accepted only then); every other plain algorithm last,
        so a changed key is seen and reported as changed rather than as a failed negotiation."""
        pinned = tuple(a for key in self.trusted for a in key.sig_algorithms)
        return _algorithms(pinned, bool(self.authorities))

    def verdict(self, key: asyncssh.SSHKey, authorities: Collection[str] = ()) -> str:
        """Whether the file as loaded still trusts ``key``, accepted earlier (directly, or through a
        certificate signed by one of the CAs whose fingerprints are ``authorities``): "" when it
        does (or would accept it anew, under ``accept-new`` with nothing pinned), else the problem
        a new connection would meet: "revoked", "changed" or "unknown"."""
        if any(k.public_data == key.public_data for k in self.revoked):
            return "revoked"
        if any(k.public_data == key.public_data for k in self.trusted):
            return ""
        if authorities and {k.get_fingerprint("sha256") for k in self.authorities} & set(authorities):
            return ""
        if self.trusted or self.authorities:
            return "changed"
        return "" if self.host.host_key_policy == "accept-new" else "unknown"

    def expectation(self) -> list[str]:
        return sorted({k.get_fingerprint("sha256") for k in self.trusted}) + sorted(
            {f"a certificate signed by CA {k.get_fingerprint('sha256')}" for k in self.authorities})


@functools.lru_cache(maxsize=64)
def _algorithms(pinned: tuple[bytes, ...], certificates: bool) -> list[str]:
    # One list for every connection that pins the same kinds: asyncssh keeps it for the
    # connection's life, and a fleet opens hundreds. Never changed by its users.
    algs: list[bytes] = []
    algs.extend(a for a in pinned if a not in algs)
    if certificates:
        algs.extend(a for a in get_default_certificate_algs() if a not in algs)
    algs.extend(a for a in get_default_public_key_algs() if a not in algs)
    return [a.decode("ascii") for a in algs]


class Client(asyncssh.SSHClient):
    """Asked by asyncssh about a host key only when no pin of the configured file vouched for it
    (revoked keys never get here: asyncssh refuses them first); keeps what was seen, so the error
    can name the key seen and the one expected, and lets ``accept-new`` record a first key."""

    def __init__(self, check: HostKeyCheck, on_lost: Callable[[Exception | None], None]) -> None:
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
            append_known_host(check.known_hosts, check.host, key)
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


_KNOWN_HOSTS_CACHE: dict[Path, tuple[bytes, asyncssh.SSHKnownHosts]] = {}


def read_known_hosts(path: Path) -> asyncssh.SSHKnownHosts:
    """The parsed known_hosts file, parsed again whenever its content differs from the cached read
    (a fleet connects to many hosts against one file; a kept session checks it before every call).
    Content, not times: an edit in place that restores the modification time is still seen."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return asyncssh.import_known_hosts("")
    digest = hashlib.sha256(data).digest()
    cached = _KNOWN_HOSTS_CACHE.get(path)
    if cached is not None and cached[0] == digest:
        return cached[1]
    known = asyncssh.import_known_hosts(data.decode("utf-8", "replace"))
    _KNOWN_HOSTS_CACHE[path] = (digest, known)
    return known


def append_known_host(path: Path, host: Host, key: asyncssh.SSHKey) -> None:
    """Append ``host``'s key, under an exclusive lock so that sessions accepting at once do not
    interleave, starting a new line first when the file (say, hand-edited) lacks a final newline."""
    line = f"{known_hosts_pattern(host)} {key.export_public_key('openssh').decode().strip()}\n".encode()
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
