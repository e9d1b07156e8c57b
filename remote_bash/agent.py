"""The agent loop: the only module that imports anthropic.

It also registers :class:`remote_bash.tool.BashTool` with the SDK's tool runner, so a
``BashTool`` can be passed to ``client.beta.messages.tool_runner(tools=[...])`` directly.
"""

from __future__ import annotations

from anthropic.lib.tools import BetaAsyncBuiltinFunctionTool

from .tool import BashTool

BetaAsyncBuiltinFunctionTool.register(BashTool)
