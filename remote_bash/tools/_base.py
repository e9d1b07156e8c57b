"""What every tool shares: the ``tool_result`` block, the ``tool_use`` dispatch, asking for approval,
and the per-host dispatch of the tools whose input names a host.

The tools' logic lives below the anthropic SDK: this package, ``remote_bash.tool`` and the MCP
server never import it, and ``remote_bash.agent`` (the one module that does) subclasses these
tools as the SDK's own built-in tools are written.

What this module must never do: raise for anything Claude can send (only a block without an id,
a programming error, raises), or import anthropic.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar, Protocol

from remote_bash.approval import Approval, Need, approval_needed
from remote_bash.errors import RemoteBashError
from remote_bash.models import Host
from remote_bash.session import RemoteBashSession

__all__ = ["Approver", "HostDispatch", "SessionTool", "ToolContract", "ToolHandler", "ask_approval", "field",
           "tool_result"]

Approver = Callable[[Host, str, Need], Awaitable[Approval]]
"""Asks a person whether ``command`` may run on the host, and returns their answer."""


class ToolHandler(Protocol):
    """A tool a conversation offers: its definition for the API, and what answers its ``tool_use`` blocks.

    ``BashTool`` is one; so is ``fleet.HostBashTool``. ``handle`` returns a ``tool_result`` block
    for the block's id and must not raise for anything Claude can send.
    """

    @property
    def name(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...

    async def handle(self, tool_use: Any) -> dict[str, Any]: ...


def tool_result(tool_use_id: str | None, content: str, is_error: bool) -> dict[str, Any]:
    """A ``tool_result`` block."""
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}


def field(obj: Any, key: str) -> Any:
    """``key`` of a block that is a dict or an SDK object; None when it has none."""
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _block_id(tool_use: Any) -> str:
    tool_use_id = field(tool_use, "id")
    if not isinstance(tool_use_id, str) or not tool_use_id:
        raise ValueError("a tool_use block needs a non-empty string id")
    return tool_use_id


class ToolContract(ABC):
    """One tool's contract: ``handle`` a ``tool_use`` block, ``run`` its input, ``answer`` with the text.

    Subclasses give ``tool_name``, ``to_dict`` and ``run``; nothing Claude sends makes them raise.
    """

    tool_name: ClassVar[str]

    @property
    def name(self) -> str:
        """The tool's name in the API."""
        return self.tool_name

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """The tool definition sent to the Messages API."""

    @abstractmethod
    async def run(self, tool_input: object, *, tool_use_id: str | None) -> dict[str, Any]:
        """Validate the input, do the work, and build the ``tool_result`` (id filled by ``handle``)."""

    async def handle(self, tool_use: Any) -> dict[str, Any]:
        """Run one ``tool_use`` block (an SDK object or a dict) and return its ``tool_result``."""
        tool_use_id = _block_id(tool_use)
        name = field(tool_use, "name")
        if name not in (None, self.name):
            return tool_result(tool_use_id, f"Error: unknown tool {name!r}; the tool here is {self.name!r}.", True)
        block = await self.run(field(tool_use, "input"), tool_use_id=tool_use_id)
        block["tool_use_id"] = tool_use_id
        return block

    async def answer(self, tool_input: object) -> tuple[str, bool]:
        """The result text for one input, and whether it is an error (what a tool runner needs)."""
        block = await self.run(tool_input, tool_use_id=None)
        return str(block["content"]), bool(block["is_error"])


@dataclass(eq=False)
class SessionTool(ToolContract):
    """One of Anthropic's built-in tools (``tool_type``), worked on one host's session: what the bash
    tool and the text editor share."""

    tool_type: ClassVar[str]
    session: RemoteBashSession
    _: KW_ONLY
    timeout: float | None = None
    """The deadline of one call; None means the host's ``command_timeout``."""
    approver: Approver | None = None
    """Asked before a call the host's ``approve`` rules name; without one, such a call is refused."""

    def to_dict(self) -> dict[str, Any]:
        """The tool definition sent to the Messages API."""
        return {"type": self.tool_type, "name": self.tool_name}


class HostDispatch(ToolContract):
    """A custom tool whose input names one of several hosts: each call goes to that host's own tool.

    The built-in tools have fixed input schemas with no room for a host, so a conversation that
    drives several hosts needs a custom tool with a ``host`` field (an enum of the selected
    hosts). ``connect`` returns the host's open session; each host keeps its tool, and so its
    session, from call to call. Subclasses give ``tool_name``, ``to_dict``, ``fields`` and ``make``.
    """

    fields: ClassVar[str] = "'host'"
    """How the input's required fields are named in the error for an input that is no object."""

    def __init__(self, connect: Callable[[Host], Awaitable[RemoteBashSession]], hosts: Sequence[Host],
                 approver: Approver | None) -> None:
        if not hosts:
            raise ValueError(f"{type(self).__name__} needs at least one host")
        self._connect = connect
        self.hosts = {h.name: h for h in hosts}
        self.approver = approver
        self._tools: dict[str, ToolContract] = {}
        self._sessions: dict[str, RemoteBashSession] = {}

    @abstractmethod
    def make(self, session: RemoteBashSession, host: str) -> ToolContract:
        """The tool that serves ``host`` on its session."""

    async def run(self, tool_input: object, *, tool_use_id: str | None) -> dict[str, Any]:
        """Check the host, then let that host's tool check and do the rest."""
        if not isinstance(tool_input, Mapping):
            return tool_result(tool_use_id, f"Error: the input must be an object with {self.fields}.", True)
        host_name = tool_input.get("host")
        if not isinstance(host_name, str) or host_name not in self.hosts:
            return tool_result(tool_use_id, f"Error: unknown host {host_name!r}; the hosts are: "
                                            f"{', '.join(self.hosts)}.", True)
        try:
            session = await self._connect(self.hosts[host_name])
        except RemoteBashError as exc:
            return tool_result(tool_use_id, f"Error: could not reach {host_name}: {exc.message}", True)
        tool = self._tools.get(host_name)
        if tool is None or self._sessions.get(host_name) is not session:
            tool = self._tools[host_name] = self.make(session, host_name)
            self._sessions[host_name] = session
        block = await tool.run({k: v for k, v in tool_input.items() if k != "host"}, tool_use_id=tool_use_id)
        block["tool_use_id"] = tool_use_id
        return block


async def ask_approval(session: RemoteBashSession, command: str, tool_use_id: str | None,
                       approver: Approver | None) -> str | None:
    """Ask for a person's yes when the host's approval rules name the command; the refusal text, or None.

    The question and the answer are both audited before anything is sent (AuditError stops the call).
    """
    need = approval_needed(command, session.host)
    if need is None:
        return None
    await session.audit("approval.asked", strict=True, command=command, tool_use_id=tool_use_id, rule=need.rule,
                        reason=need.reason)
    if approver is None:
        answer = Approval(False, "unavailable", reason="nobody can be asked here (no approver is configured)")
    else:
        answer = await approver(session.host, command, need)
    await session.audit("approval.answered", strict=True, command=command, tool_use_id=tool_use_id, rule=need.rule,
                        approved=answer.approved, how=answer.how, by=answer.by or None,
                        minutes=answer.minutes or None, reason=answer.reason or None)
    if answer.approved:
        return None
    why = f": {answer.reason}" if answer.reason else ""
    return (f"Error: not run. On {session.host.name} this command needs a person's approval ({need.reason}), "
            f"and it was not given ({answer.how}{why}). Do not retry it unchanged; ask the user or take "
            "another way.")
