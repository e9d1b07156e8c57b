"""``remote_edit``: the text editor for a conversation that drives several hosts at once.

The built-in text editor tool (``text_editor_20250728``) has a fixed input schema with no room
for a host, so a coordinator needs a custom tool whose input names one: the same commands and
fields as the built-in tool, plus ``host`` (an enum of the selected hosts). Each call is handed
to that host's :class:`~remote_bash.tools.edit.EditHandler`, on the host's own session, so it gets
the same policy checks, audit records and ``tool_result`` blocks. Nothing Claude sends raises.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from remote_bash.models import Host
from remote_bash.session import RemoteBashSession

from ._base import Approver, HostDispatch
from .edit import COMMANDS, EditHandler

__all__ = ["HostEditTool"]


class HostEditTool(HostDispatch):
    """The text editor, per host: ``{"host": ..., "command": "view", "path": ...}``.

    ``connect`` returns the host's open session (``FleetPool.connect`` fits)."""

    tool_name = "remote_edit"
    fields = "'host', 'command' and 'path'"

    def __init__(self, connect: Callable[[Host], Awaitable[RemoteBashSession]], hosts: Sequence[Host], *,
                 max_characters: int | None = None, approver: Approver | None = None) -> None:
        super().__init__(connect, hosts, approver)
        self.max_characters = max_characters

    def make(self, session: RemoteBashSession, host: str) -> EditHandler:
        return EditHandler(session, max_characters=self.max_characters, approver=self.approver)

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
