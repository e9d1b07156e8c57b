"""What the fleet's conversations share: transcripts, tallies of events, results from outcomes.

What this module must never do: import anthropic (the agent run's types come from
``remote_bash.agent_models``, which does not).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from remote_bash.errors import ConnectError, ConnectionLost, RemoteBashError
from remote_bash.models import Host

from .recap import _file_name
from .results import Conversation, HostRun

if TYPE_CHECKING:
    from remote_bash.agent_models import AgentEvent, AgentOutcome

def _with_timeout(host: Host, timeout: float | None) -> Host:
    if timeout is None:
        return host
    return host.model_copy(update={"command_timeout": min(timeout, host.max_timeout)})


def _transcript(directory: Path, name: str) -> Path:

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return directory / f"{_file_name(name)}-{stamp}-{uuid.uuid4().hex[:6]}.jsonl"


def _last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def _summary(text: str) -> str:
    """The first line of a reply that says something: markdown heading and list marks dropped."""
    for line in text.splitlines():
        bare = line.strip().lstrip("#*->` ").rstrip("*` ").strip()
        if bare:
            return bare
    return ""


def _message(exc: BaseException) -> str:
    if isinstance(exc, RemoteBashError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


def _not_reached(host: Host, exc: RemoteBashError, started: float) -> HostRun:
    """A host whose session could not be started: unreachable, or refused by the gate and the like."""
    reached = not isinstance(exc, ConnectError | ConnectionLost)
    message = exc.message if exc.host in (None, host.name) else str(exc)
    return HostRun(host=host.name, status="error" if reached else "unreachable",
                   duration=time.monotonic() - started, error=message, error_type=type(exc).__name__)


def _from_outcome(outcome: AgentOutcome) -> Conversation:
    return Conversation(stop_reason=outcome.stop_reason, message=outcome.message, turns=outcome.turns,
                        tokens=outcome.usage.total, cost_usd=outcome.cost_usd, transcript=outcome.transcript,
                        final_text=outcome.final_text)


class _Tally:
    """What a conversation's events tell: commands answered, the last result, turns, tokens and cost."""

    def __init__(self, name: str, forward: Callable[[str, AgentEvent], None] | None) -> None:
        self.name = name
        self.forward = forward
        self.commands = self.turns = self.tokens = 0
        self.cost = 0.0
        self.last_error: str | None = None

    def __call__(self, event: AgentEvent) -> None:
        if event.kind == "result":
            self.commands += 1
            self.last_error = (_last_line(event.text) or "error") if event.is_error else None
        elif event.kind == "usage" and event.usage is not None:
            self.turns += 1
            self.tokens = event.usage.total
            self.cost = event.cost_usd or 0.0
        if self.forward is not None:
            self.forward(self.name, event)

    def broken(self, exc: BaseException, transcript: Path) -> Conversation:
        """The conversation of a run that raised (the API refused a request, or a bug)."""
        return Conversation(stop_reason="error", message=_message(exc), turns=self.turns, tokens=self.tokens,
                            cost_usd=self.cost, transcript=transcript if transcript.exists() else None)
