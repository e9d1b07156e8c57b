"""remote_bash: Claude's bash tool (``bash_20250124``) with each session on a remote host over SSH.

::

    from remote_bash import Host, RemoteBashSession, BashTool, load_inventory

    host = load_inventory("hosts.yaml").hosts["web-1"]
    async with RemoteBashSession(host) as session:
        result = await session.run("cd /srv && ls", timeout=30)
"""

from __future__ import annotations

from .errors import (
    AccessDenied,
    AuditError,
    AuthenticationFailed,
    CommandTimeout,
    ConfigError,
    ConnectError,
    ConnectionLost,
    ConnectionRefused,
    ConnectTimeout,
    CredentialError,
    HostKeyChanged,
    HostKeyError,
    HostNotAllowed,
    HostUnreachable,
    InventoryError,
    KnownHostsMissing,
    PolicyDenied,
    RemoteBashError,
    SelectionError,
    SessionClosed,
    SessionError,
    UnknownHostKey,
)
from .inventory import Inventory, load_inventory
from .models import CommandPolicy, CommandResult, Host, KillReport, ResourceLimits
from .session import RemoteBashSession, RemoteInfo
from .tool import BashTool

__version__ = "0.1.0"

__all__ = [
    "AccessDenied",
    "AuditError",
    "AuthenticationFailed",
    "BashTool",
    "CommandPolicy",
    "CommandResult",
    "CommandTimeout",
    "ConfigError",
    "ConnectError",
    "ConnectTimeout",
    "ConnectionLost",
    "ConnectionRefused",
    "CredentialError",
    "Host",
    "HostKeyChanged",
    "HostKeyError",
    "HostNotAllowed",
    "HostUnreachable",
    "Inventory",
    "InventoryError",
    "KillReport",
    "KnownHostsMissing",
    "PolicyDenied",
    "RemoteBashError",
    "RemoteBashSession",
    "RemoteInfo",
    "ResourceLimits",
    "SelectionError",
    "SessionClosed",
    "SessionError",
    "UnknownHostKey",
    "__version__",
    "load_inventory",
]
