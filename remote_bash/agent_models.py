"""What an agent run is configured with and what it reports: its config, token usage and cost,
events, outcome, and the set of tools a conversation may be given instead of one host's.

What this module must never do: import anthropic; the fleet and the CLI build these without it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .tools._base import ToolHandler

__all__ = [
    "DEFAULT_MODEL",
    "AgentConfig",
    "AgentEvent",
    "AgentOutcome",
    "EventKind",
    "StopReason",
    "TokenUsage",
    "ToolName",
    "ToolSet",
    "estimate_cost",
]

DEFAULT_MODEL = "claude-sonnet-5-5"
ToolName = Literal["bash", "edit"]
_ALL_TOOLS: tuple[ToolName, ...] = ("bash", "edit")

# USD per million tokens (input, output), matched in order against the model id. Cache writes
# are billed at 1.25x the input price and cache reads at 0.1x. List prices copied by hand: the
# cost is an estimate for budgets, the invoice is the authority. An unknown model is priced as
# the dearest family, so a budget errs on the side of stopping early.
_PRICES: tuple[tuple[str, float, float], ...] = (
    ("fable", 10.0, 50.0),
    ("mythos", 10.0, 50.0),
    ("claude-3-opus", 15.0, 75.0),
    ("opus-4-0", 15.0, 75.0),
    ("opus-4-1", 15.0, 75.0),
    ("opus-4-2025", 15.0, 75.0),
    ("opus", 5.0, 25.0),
    ("sonnet", 3.0, 15.0),
    ("claude-3-haiku", 0.25, 1.25),
    ("3-5-haiku", 0.8, 4.0),
    ("haiku", 1.0, 5.0),
)
_FALLBACK_PRICE = (10.0, 50.0)


def _default_model() -> str:
    return os.environ.get("REMOTE_BASH_MODEL") or DEFAULT_MODEL


class AgentConfig(BaseModel):
    """How an agent run talks to Claude and when it stops."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(default_factory=_default_model, min_length=1)
    """The Claude model id; ``REMOTE_BASH_MODEL`` overrides the built-in default."""
    max_tokens: int = Field(default=8192, ge=1)
    """Largest reply Claude may write in one turn, in tokens."""
    max_turns: int = Field(default=50, ge=1)
    """Most requests to Claude in one run; the run stops after the tools of the last one ran."""
    token_budget: int | None = Field(default=None, ge=1)
    """Most tokens (input, cached input and output, summed over turns) one run may use."""
    cost_budget_usd: float | None = Field(default=None, gt=0)
    """Most estimated US dollars one run may spend (list prices; see ``estimate_cost``)."""
    system_extra: str | None = None
    """Extra instructions appended to the system prompt (house rules, context about the host)."""
    tools: list[ToolName] = Field(default_factory=lambda: list(_ALL_TOOLS), min_length=1)
    """The tools one host's conversation offers: ``bash`` (``bash_20250124``) and ``edit`` (the text
    editor, ``text_editor_20250728``, on the same host)."""
    transcript: Path | None = None
    """The JSONL transcript file; ``None`` means one under ``$XDG_STATE_HOME/remote-bash/transcripts``."""
    max_retries: int = Field(default=4, ge=0)
    """Retries the SDK makes, with its own backoff, on 429, 5xx, overload and connection errors
    (only for the client ``run_agent`` creates itself)."""


class TokenUsage(BaseModel):
    """Tokens used, summed over the turns of a run."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: int = 0
    """Input tokens billed at the full price."""
    output_tokens: int = 0
    """Tokens Claude wrote."""
    cache_read_input_tokens: int = 0
    """Input tokens read from the prompt cache."""
    cache_creation_input_tokens: int = 0
    """Input tokens written to the prompt cache."""

    @property
    def total(self) -> int:
        """Every token counted against ``token_budget``."""
        return (self.input_tokens + self.output_tokens + self.cache_read_input_tokens
                + self.cache_creation_input_tokens)

    def add(self, usage: Any) -> None:
        """Add the ``usage`` of one reply (an SDK object or a dict)."""
        for name in type(self).model_fields:
            value = usage.get(name) if isinstance(usage, dict) else getattr(usage, name, None)
            setattr(self, name, getattr(self, name) + (value or 0))


def estimate_cost(model: str, usage: TokenUsage) -> float:
    """An estimate of what ``usage`` costs on ``model``, in US dollars, from a small list-price table."""
    price_in, price_out = next(((i, o) for key, i, o in _PRICES if key in model), _FALLBACK_PRICE)
    return (usage.input_tokens * price_in + usage.cache_creation_input_tokens * price_in * 1.25
            + usage.cache_read_input_tokens * price_in * 0.1 + usage.output_tokens * price_out) / 1e6


EventKind = Literal["text", "command", "output", "result", "usage", "stop", "error"]


@dataclass(frozen=True)
class AgentEvent:
    """Something a front end may show as it happens.

    ``text``: a piece of Claude's reply; ``command``: a command about to run (``command`` is
    ``None`` for a restart); ``output``: a piece of its output; ``result``: its end (``text`` is
    the tool_result sent back); ``usage``: the totals after a reply; ``stop``: the run ended
    (``text`` says why); ``error``: the run failed (``text`` says why).
    """

    kind: EventKind
    text: str = ""
    tool_use_id: str | None = None
    tool: str | None = None
    """The tool's name on ``command`` and ``result`` events (``bash``, ``str_replace_based_edit_tool``, ...)."""
    command: str | None = None
    is_error: bool = False
    exit_code: int | None = None
    duration: float | None = None
    usage: TokenUsage | None = None
    cost_usd: float | None = None


StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "refusal", "pause_turn", "max_turns",
                     "token_budget", "cost_budget", "interrupted", "other"]


class AgentOutcome(BaseModel):
    """How an agent run ended."""

    model_config = ConfigDict(extra="forbid")

    stop_reason: StopReason
    """Claude's own stop reason (``end_turn``, ``max_tokens``, ...), or the limit that stopped the run
    (``max_turns``, ``token_budget``, ``cost_budget``), or ``interrupted`` (Ctrl-C, cancelled)."""
    message: str
    """One sentence saying why the run stopped."""
    turns: int
    """Requests made to Claude in this run."""
    usage: TokenUsage
    """Tokens used in this run."""
    cost_usd: float
    """Estimated cost of this run in US dollars (list prices; not an invoice)."""
    transcript: Path
    """The JSONL transcript; pass it as ``resume=`` to continue."""
    final_text: str
    """The text of Claude's last reply."""


@dataclass(frozen=True)
class ToolSet:
    """What a conversation works with when it is not one host's bash tool.

    Commands run through these tools are reported as ``command`` and ``result`` events, without
    ``output`` events or exit codes (the loop cannot see inside a tool it does not own)."""

    name: str
    """Names the run where a host name would go: the transcript's ``meta`` and its default file name."""
    tools: Sequence[ToolHandler]
    """The tools offered, dispatched by name; a call to any other name is answered with an error."""
    system_prompt: str
    """The system prompt, in place of the one-host prompt; ``AgentConfig.system_extra`` is appended."""
