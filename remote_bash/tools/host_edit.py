"""``remote_edit``: the text editor for a conversation that drives several hosts at once.

The built-in text editor tool (``text_editor_20250728``) has a fixed input schema with no room
for a host, so a coordinator needs a custom tool whose input names one: the same commands and
fields as the built-in tool, plus ``host`` (an enum of the selected hosts). Each call is handed
to that host's :class:`~remote_bash.tools.edit.EditTool`, on the host's own session, so it gets
the same policy checks, audit records and ``tool_result`` blocks. Nothing Claude sends raises.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from remote_bash.errors import RemoteBashError
from remote_bash.models import Host
from remote_bash.session import RemoteBashSession
from remote_bash.tool import Approver, _get, _result

from .edit import COMMANDS, EditTool

__all__ = ["HostEditTool"]


class HostEditTool:
    """The text editor, per host: ``{"host": ..., "command": "view", "path": ...}``.

    ``connect`` returns the host's open session (``FleetPool.connect`` fits)."""

    name = "remote_edit"

    def __init__(self, connect: Callable[[Host], Awaitable[RemoteBashSession]], hosts: Sequence[Host], *,
                 max_characters: int | None = None, approver: Approver | None = None) -> None:
        if not hosts:
            raise ValueError("HostEditTool needs at least one host")
        self._connect = connect
        self.hosts = {h.name: h for h in hosts}
        self.max_characters = max_characters
        self.approver = approver
        self._tools: dict[str, EditTool] = {}

    def to_dict(self) -> dict[str, Any]:
        """The tool definition sent to the Messages API."""
        names = list(self.hosts)
        text = {"type": "string"}
        return {
            "name": self.name,
            "description": (
                "View, create and edit text files on one remote host, over that host's SSH connection. "
                f"Hosts: {', '.join(names)}. view shows a file with line numbers (or a directory two levels "
                "deep); create writes a new file (never overwrites); str_replace replaces old_str, which must "
                "occur exactly once, with new_str; insert adds insert_text after line insert_line (0 = at the "
                "top). Paths are absolute. Writes are atomic and keep the file's mode and line endings."
            ),
            "input_schema": {
                "type": "object",
                "properties": {
                    "host": {"type": "string", "enum": names, "description": "The host whose file to work on."},
                    "command": {"type": "string", "enum": list(COMMANDS)},
                    "path": {"type": "string", "description": "Absolute path of the file or directory."},
                    "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2,
                                   "description": "view: [first, last] line, 1-based; last -1 = to the end."},
                    "file_text": {**text, "description": "create: the content of the new file."},
                    "old_str": {**text, "description": "str_replace: the exact text to replace."},
                    "new_str": {**text, "description": "str_replace: the text to put in its place."},
                    "insert_line": {"type": "integer", "description": "insert: the line to insert after."},
                    "insert_text": {**text, "description": "insert: the text to insert."},
                },
                "required": ["host", "command", "path"],
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
            return _result(tool_use_id, f"Error: unknown tool {name!r}; the tool here is {self.name!r}.", True)
        return await self.run(_get(tool_use, "input"), tool_use_id=tool_use_id)

    async def run(self, tool_input: object, *, tool_use_id: str | None) -> dict[str, Any]:
        """Check the host, then let that host's :class:`EditTool` check and do the rest."""
        if not isinstance(tool_input, Mapping):
            return _result(tool_use_id, "Error: the input must be an object with 'host', 'command' and 'path'.",
                           True)
        host_name = tool_input.get("host")
        if not isinstance(host_name, str) or host_name not in self.hosts:
            return _result(tool_use_id, f"Error: unknown host {host_name!r}; the hosts are: "
                                        f"{', '.join(self.hosts)}.", True)
        try:
            session = await self._connect(self.hosts[host_name])
        except RemoteBashError as exc:
            return _result(tool_use_id, f"Error: could not reach {host_name}: {exc.message}", True)
        tool = self._tools.get(host_name)
        if tool is None or tool.session is not session:
            tool = self._tools[host_name] = EditTool(session, max_characters=self.max_characters,
                                                     approver=self.approver)
        block = await tool.run({k: v for k, v in tool_input.items() if k != "host"}, tool_use_id=tool_use_id)
        block["tool_use_id"] = tool_use_id
        return block
