"""``remote_bash``: the coordinator's custom tool, whose input names the host to run on.

What this module must never do: raise for anything Claude sends, reach a host outside the
selected ones (the pool's sessions, made through the gate, are the only way to a host), or
import anthropic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from remote_bash.models import Host
from remote_bash.session import RemoteBashSession
from remote_bash.tool import BashHandler
from remote_bash.tools._base import Approver, HostDispatch

from .pool import FleetPool

__all__ = ["HostBashTool"]


class HostBashTool(HostDispatch):
    """A custom tool, ``remote_bash``, with which one conversation drives the sessions of many hosts.

    The built-in bash tool (``bash_20250124``) has a fixed input schema with no room for a host,
    so a coordinator that talks to several hosts from one conversation needs a custom tool whose
    input names the host (an enum of the selected hosts). The trade-off: Claude is trained on the
    built-in bash tool and may use a custom one less fluently, and one conversation accumulates
    every host's output; a conversation per host (``fleet run`` without ``--coordinator``) keeps
    each context small and uses the built-in tool. Each host keeps its own persistent session from
    the pool, so ``cd`` and variables persist per host. Results are the same ``tool_result`` blocks
    that :class:`~remote_bash.tool.BashHandler` builds, and nothing Claude sends raises.
    """

    tool_name = "remote_bash"
    fields = "'host' and 'command'"

    def __init__(self, pool: FleetPool, hosts: Sequence[Host], *, timeout: float | None = None,
                 on_output: Callable[[str, str], None] | None = None, approver: Approver | None = None) -> None:
        super().__init__(pool.connect, hosts, approver)
        self.pool = pool
        self.timeout = timeout
        self.on_output = on_output

    def make(self, session: RemoteBashSession, host: str) -> BashHandler:
        on_output = self.on_output
        return BashHandler(session, timeout=self.timeout, approver=self.approver,
                           on_output=None if on_output is None else (lambda text: on_output(host, text)))

    def to_dict(self) -> dict[str, Any]:
        """The tool definition sent to the Messages API."""
        names = list(self.hosts)
        return {
            "name": self.name,
            "description": (
                "Run a bash command on one remote host, in that host's persistent shell (the working "
                "directory, variables and background jobs persist per host between calls). Hosts: "
                f"{', '.join(names)}. Output is stdout and stderr interleaved, truncated when long. "
                "Set restart to true to replace a host's shell with a fresh one."
            ),
            "input_schema": {
                "type": "object",
                "properties": {
                    "host": {"type": "string", "enum": names, "description": "The host to run on."},
                    "command": {"type": "string", "description": "The bash command to run."},
                    "restart": {"type": "boolean", "description": "Restart this host's shell instead."},
                },
                "required": ["host"],
                "additionalProperties": False,
            },
        }
