"""The one place where asyncssh and socket errors become remote_bash errors.

Every error names the host, what failed and what to do; callers chain it with ``raise ... from``.
"""

from __future__ import annotations

import errno
import socket

import asyncssh

from remote_bash.errors import (
    AuthenticationFailed,
    ConnectError,
    ConnectionLost,
    ConnectionRefused,
    ConnectTimeout,
    HostKeyChanged,
    HostKeyError,
    HostUnreachable,
    RemoteBashError,
    UnknownHostKey,
)
from remote_bash.models import Host

from .hostkeys import HostKeyCheck, known_hosts_pattern

__all__ = ["map_error"]


def map_error(exc: BaseException, host: Host, *, during: str = "connecting", check: HostKeyCheck | None = None,
              via: str | None = None) -> RemoteBashError:
    """Map an asyncssh or socket error to a remote_bash error that names the host and what to do."""
    name = host.name
    target = f"{host.hostname} port {host.port}" + (f" (through jump host {via})" if via else "")
    if check is not None and check.problem == "changed":
        return HostKeyChanged(
            f"host key for {target} has CHANGED: the server presented {check.seen}, but "
            f"{check.known_hosts} expects {', '.join(check.expected)}. This may be a "
            "man-in-the-middle attack, or the host was reinstalled; if you know why it changed, "
            f"remove the old line (ssh-keygen -R '{known_hosts_pattern(host)}' -f '{check.known_hosts}') "
            "and connect again",
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
    if check is not None and check.problem == "unknown" and check.revoked_authorities:
        # The CA was left out of the pins, so the server showed its plain key: say why it is not trusted.
        cas = ", ".join(sorted({k.get_fingerprint("sha256") for k in check.revoked_authorities}))
        return HostKeyError(
            f"host key {check.seen} of {target} is not trusted: the certificate authority {check.known_hosts} "
            f"lists for this host ({cas}) is REVOKED there (a @revoked line), and no key of the host is "
            "pinned: refusing to connect. The host needs a certificate from a CA you trust, or verify its key "
            "and add it",
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
    if isinstance(exc, asyncssh.ChannelOpenError) and via and during == "connecting":
        return _through_jump_host(exc, host, target, via)
    if isinstance(exc, asyncssh.ChannelOpenError):
        return ConnectionLost(f"{target} refused a new channel while {during}: {exc.reason}", host=name)
    if isinstance(exc, OSError):
        return ConnectError(f"{during} to {target} failed: {exc.strerror or exc}", host=name)
    return ConnectError(f"{during} to {target} failed: {exc}", host=name)


def _through_jump_host(exc: asyncssh.ChannelOpenError, host: Host, target: str, via: str) -> ConnectError:
    """The jump host ``via`` would not open the TCP channel to ``host``: what its sshd says, as the
    error a direct connection meets (refused, unreachable, timed out), naming both hosts."""
    reason = exc.reason or "no reason given"
    said = reason.lower()
    if exc.code == asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED:
        return ConnectionRefused(
            f"connection to {target} refused: {via} does not forward connections there ({reason}). "
            f"Check AllowTcpForwarding and PermitOpen in {via}'s sshd_config",
            host=host.name,
        )
    if exc.code == asyncssh.OPEN_CONNECT_FAILED and "refused" in said:
        return ConnectionRefused(
            f"connection to {target} refused: nothing listens there ({via} reports: {reason}). "
            "Is sshd running, and is the port right?",
            host=host.name,
        )
    if exc.code == asyncssh.OPEN_CONNECT_FAILED and "timed out" in said:
        return ConnectTimeout(
            f"connecting to {target} timed out ({via} reports: {reason}): the host did not answer. Check "
            "that it is up and that no firewall drops SSH",
            host=host.name,
        )
    if exc.code == asyncssh.OPEN_CONNECT_FAILED:
        return HostUnreachable(
            f"{target} is unreachable ({via} reports: {reason}). Check the hostname and port in the "
            "inventory, and that the jump host can reach them",
            host=host.name,
        )
    return ConnectError(f"connecting to {target} failed: {via} would not open a channel to it ({reason})",
                        host=host.name)
