"""remote_bash: Claude's bash tool (``bash_20250124``) with each session on a remote host over SSH.

::

    from remote_bash import Host, RemoteBashSession, BashTool, load_inventory

    host = load_inventory("hosts.yaml").hosts["web-1"]
    async with RemoteBashSession(host) as session:
        result = await session.run("cd /srv && ls", timeout=30)
"""

from __future__ import annotations

# Not typing.TYPE_CHECKING: importing typing would cost the kept-session client more than its call.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .agent import BashTool, EditTool
    from .errors import *  # noqa: F403  (every error is public: errors.__all__ lists them)
    from .inventory import Inventory, load_inventory
    from .models import CommandPolicy, CommandResult, EditPolicy, Host, KillReport, ResourceLimits
    from .session import RemoteBashSession, RemoteInfo

_ERRORS = (
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
)
"""Every error, as ``errors.__all__`` lists them (tests/test_exports.py holds the two together)."""

# Imported on first use, so that `remote-bash --help` does not pay for asyncssh and pydantic, nor
# a kept call's client for the error classes (whose creation costs it more than its call).
_LAZY = {
    "BashTool": "agent",
    "CommandPolicy": "models",
    "CommandResult": "models",
    "EditPolicy": "models",
    "EditTool": "agent",
    "Host": "models",
    "Inventory": "inventory",
    "KillReport": "models",
    "RemoteBashSession": "session",
    "RemoteInfo": "session",
    "ResourceLimits": "models",
    "load_inventory": "inventory",
    **dict.fromkeys(_ERRORS, "errors"),
}


def __getattr__(name: str) -> Any:
    import importlib

    if name == "errors":  # the module, as it was when the package imported it at once
        return importlib.import_module(".errors", __name__)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'remote_bash' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__version__ = "0.1.0"

__all__ = [
    "BashTool",
    "CommandPolicy",
    "CommandResult",
    "EditPolicy",
    "EditTool",
    "Host",
    "Inventory",
    "KillReport",
    "RemoteBashSession",
    "RemoteInfo",
    "ResourceLimits",
    "__version__",
    "load_inventory",
]
__all__ += _ERRORS
