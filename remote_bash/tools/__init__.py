"""The tool contracts Claude works through, beside the bash tool (``remote_bash.tool``).

``remote_bash.tools.edit.EditHandler`` is Anthropic's text editor tool (``text_editor_20250728``)
executed on the session's host; ``_base`` holds what every tool shares. Nothing here imports
anthropic (``remote_bash.EditTool`` is the editor as the SDK's tool runner takes it), and this
package imports nothing on its own.
"""

from __future__ import annotations

__all__: list[str] = []
