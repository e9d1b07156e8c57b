"""Every error remote_bash raises, rooted in :class:`RemoteBashError`.

This module imports nothing from the rest of the package. Every error carries the
host it concerns (``host``, ``None`` when there is none) and says in its message
what failed and what to do about it.

::

    RemoteBashError
    ├── ConfigError                 a config or inventory file is wrong
    │   ├── InventoryError          (with file, line and field)
    │   └── UnsafePath              a path to write could be changed by another user, or is a link
    ├── SelectionError              a host pattern names something unknown
    ├── AccessDenied                refused before anything was sent
    │   ├── HostNotAllowed          host outside the inventory or the allowlist
    │   └── PolicyDenied            command refused by the command policy
    ├── ConnectError                could not open the SSH connection
    │   ├── HostUnreachable         name does not resolve, no route, network down
    │   ├── ConnectionRefused       nothing listens on the port
    │   ├── ConnectTimeout          (also TimeoutError) no answer within connect_timeout
    │   ├── AuthenticationFailed    the server refused every credential offered
    │   └── HostKeyError            the server is not who the known_hosts says
    │       ├── UnknownHostKey      no key on record for this host
    │       ├── HostKeyChanged      a different key is on record
    │       └── KnownHostsMissing   the known_hosts file does not exist
    ├── SessionError                the session cannot serve this call
    │   ├── ConnectionLost          the connection or the remote shell died mid-call
    │   ├── SessionClosed           the session was closed by its owner
    │   └── RemoteFileError         a file operation of the text editor failed on the host
    ├── AuditError                  the audit log cannot be written: nothing is run
    └── CredentialError             the keyring cannot give or store a secret
"""

from __future__ import annotations

__all__ = [
    "AccessDenied",
    "AuditError",
    "AuthenticationFailed",
    "ConfigError",
    "ConnectError",
    "ConnectTimeout",
    "ConnectionLost",
    "ConnectionRefused",
    "CredentialError",
    "HostKeyChanged",
    "HostKeyError",
    "HostNotAllowed",
    "HostUnreachable",
    "InventoryError",
    "KnownHostsMissing",
    "PolicyDenied",
    "RemoteBashError",
    "RemoteFileError",
    "SelectionError",
    "SessionClosed",
    "SessionError",
    "UnknownHostKey",
    "UnsafePath",
]


class RemoteBashError(Exception):
    """The root of every error remote_bash raises."""

    def __init__(self, message: str, *, host: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.host = host

    def __str__(self) -> str:
        if self.host and not self.message.startswith(f"{self.host}:"):
            return f"{self.host}: {self.message}"
        return self.message


class ConfigError(RemoteBashError):
    """A configuration value or file is wrong."""


class UnsafePath(ConfigError):
    """A file or directory remote_bash would write could be changed by another user, or is a
    symbolic link in place of a file; the message names the path and what to do."""


class InventoryError(ConfigError):
    """The inventory file is wrong; the message names the file, line and field."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        where = ""
        if path:
            where = path if line is None else f"{path}:{line}"
        if field:
            where = f"{where}: {field}" if where else field
        super().__init__(f"{where}: {message}" if where else message)
        self.path = path
        self.line = line
        self.field = field


class SelectionError(RemoteBashError):
    """A host pattern names a host, group or label that does not exist."""


class AccessDenied(RemoteBashError):
    """Refused before anything was sent to a host."""


class HostNotAllowed(AccessDenied):
    """The host is not in the inventory, or outside the session's allowlist."""


class PolicyDenied(AccessDenied):
    """The command policy refused the command; ``rule`` names the rule."""

    def __init__(self, message: str, *, host: str | None = None, rule: str = "") -> None:
        super().__init__(message, host=host)
        self.rule = rule


class ConnectError(RemoteBashError):
    """The SSH connection could not be opened."""


class HostUnreachable(ConnectError):
    """The host name does not resolve, or there is no route to it."""


class ConnectionRefused(ConnectError):
    """Nothing accepts connections on that address and port."""


class ConnectTimeout(ConnectError, TimeoutError):
    """The host did not complete the SSH handshake within the connect timeout."""


class AuthenticationFailed(ConnectError):
    """The server refused every credential offered."""


class HostKeyError(ConnectError):
    """The server's host key could not be verified."""


class UnknownHostKey(HostKeyError):
    """No key for this host is on record in known_hosts."""


class HostKeyChanged(HostKeyError):
    """The key on record differs from the one the server presented."""

    def __init__(self, message: str, *, host: str | None = None, seen: str = "", expected: str = "") -> None:
        super().__init__(message, host=host)
        self.seen = seen
        self.expected = expected


class KnownHostsMissing(HostKeyError):
    """The configured known_hosts file does not exist."""


class SessionError(RemoteBashError):
    """The session cannot serve this call."""


class ConnectionLost(SessionError):
    """The connection or the remote shell died while a call was running.

    The command is never re-run; the next call opens a new connection.
    ``partial_output`` holds what the command printed before the loss.
    """

    def __init__(self, message: str, *, host: str | None = None, partial_output: str = "") -> None:
        super().__init__(message, host=host)
        self.partial_output = partial_output


class SessionClosed(SessionError):
    """The session was closed and cannot be used again."""


class RemoteFileError(SessionError):
    """A file operation on the host failed; nothing was changed unless the message says so.

    ``reason`` is one of ``missing``, ``denied``, ``exists``, ``not_dir``, ``unavailable``
    (the host has no SFTP subsystem) or ``failure``.
    """

    def __init__(self, message: str, *, host: str | None = None, reason: str = "failure") -> None:
        super().__init__(message, host=host)
        self.reason = reason


class AuditError(RemoteBashError):
    """The audit log cannot be written, so the command was not run."""


class CredentialError(RemoteBashError):
    """The OS keyring cannot give or store a secret."""
