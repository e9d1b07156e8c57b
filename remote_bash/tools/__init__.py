"""The tool contracts Claude works through, beside the bash tool (``remote_bash.tool``).

``remote_bash.tools.edit.EditTool`` is Anthropic's text editor tool (``text_editor_20250728``)
executed on the session's host. This package imports nothing on its own: ``from remote_bash
import EditTool`` loads it on first use.
"""

from __future__ import annotations

__all__: list[str] = []
