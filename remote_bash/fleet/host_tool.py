"""``remote_bash``: the coordinator's custom tool, whose input names the host to run on.

What this module must never do: raise for anything Claude sends, or reach a host outside the
selected ones (the pool's sessions, made through the gate, are the only way to a host).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from remote_bash.errors import RemoteBashError
from remote_bash.models import Host
from remote_bash.tool import Approver, BashTool, _get
from remote_bash.tool import _result as _tool_block

from .pool import FleetPool

__all__ = ["HostBashTool"]

class HostBashTool:
    """A custom tool, ``remote_bash``, with which one conversation drives the sessions of many hosts.

    The built-in bash tool (``bash_20250124``) has a fixed input schema with no room for a host,
    so a coordinator that talks to several hosts from one conversation needs a custom tool whose
    input names the host (an enum of the selected hosts). The trade-off: Claude is trained on the
    built-in bash tool and may use a custom one less fluently, and one conversation accumulates
    every host's output; a conversation per host (``fleet run`` without ``--coordinator``) keeps
    each context small and uses the built-in tool. Each host keeps its own persistent session from
    the pool, so ``cd`` and variables persist per host. Results are the same ``tool_result`` blocks
    that :class:`~remote_bash.tool.BashTool` builds, and nothing Claude sends raises.
    """

    name = "remote_bash"

    def __init__(self, pool: FleetPool, hosts: Sequence[Host], *, timeout: float | None = None,
                 on_output: Callable[[str, str], None] | None = None, approver: Approver | None = None) -> None:
        if not hosts:
            raise ValueError("HostBashTool needs at least one host")
        self.pool = pool
        self.hosts = {h.name: h for h in hosts}
        self.timeout = timeout
        self.on_output = on_output
        self.approver = approver
        self._tools: dict[str, BashTool] = {}

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

    async def handle(self, tool_use: Any) -> dict[str, Any]:
        """Run one ``tool_use`` block (an SDK object or a dict) and return its ``tool_result``."""
        tool_use_id = _get(tool_use, "id")
        if not isinstance(tool_use_id, str) or not tool_use_id:
            raise ValueError("a tool_use block needs a non-empty string id")
        name = _get(tool_use, "name")
        if name not in (None, self.name):
            return _tool_block(tool_use_id, f"Error: unknown tool {name!r}; the tool here is {self.name!r}.",
                               True)
        return await self.run(_get(tool_use, "input"), tool_use_id=tool_use_id)

    async def run(self, tool_input: object, *, tool_use_id: str | None) -> dict[str, Any]:
        """Check the host, then let that host's :class:`BashTool` check and run the rest."""
        if not isinstance(tool_input, Mapping):
            return _tool_block(tool_use_id, "Error: the input must be an object with 'host' and 'command'.",
                               True)
        host_name = tool_input.get("host")
        if not isinstance(host_name, str) or host_name not in self.hosts:
            allowed = ", ".join(self.hosts)
            return _tool_block(tool_use_id, f"Error: unknown host {host_name!r}; the hosts are: {allowed}.",
                               True)
        host = self.hosts[host_name]
        try:
            session = await self.pool.connect(host)
        except RemoteBashError as exc:
            return _tool_block(tool_use_id, f"Error: could not reach {host_name}: {exc.message}", True)
        tool = self._tools.get(host_name)
        if tool is None or tool.session is not session:
            on_output = self.on_output
            tool = self._tools[host_name] = BashTool(
                session, timeout=self.timeout, approver=self.approver,
                on_output=None if on_output is None else (lambda text: on_output(host_name, text)))
        block = await tool.run({k: v for k, v in tool_input.items() if k != "host"}, tool_use_id=tool_use_id)
        block["tool_use_id"] = tool_use_id
        return block
