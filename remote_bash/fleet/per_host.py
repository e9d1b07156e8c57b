"""``fleet run`` with a conversation per host: each host its own Claude, shell and transcript.

What this module must never do: import anthropic at import time, or end the run because of one host.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from remote_bash.errors import RemoteBashError
from remote_bash.models import Host

from .conversation import _from_outcome, _not_reached, _summary, _Tally, _transcript
from .pool import FleetPool, _Progress
from .results import HostRun, RunStatus

if TYPE_CHECKING:
    import anthropic

    from remote_bash.agent_models import AgentConfig, AgentEvent
    from remote_bash.tools._base import Approver


@dataclass(eq=False)
class _PerHost:
    """Runs a conversation per host within the pool's limits, batch by batch with ``serial``."""

    pool: FleetPool
    task: str
    config: AgentConfig
    directory: Path
    client: anthropic.AsyncAnthropic | None
    on_event: Callable[[str, AgentEvent], None] | None
    progress: _Progress
    approver: Approver | None = None
    stop: str | None = field(default=None, init=False)
    """Why hosts not started yet are skipped; None while they may start."""

    async def run(self, selected: Sequence[Host], *, serial: int | None, fail_fast: bool) -> list[HostRun]:
        results: dict[str, HostRun] = {}
        size = serial or max(len(selected), 1)
        for first in range(0, len(selected), size):
            batch = selected[first : first + size]
            async with asyncio.TaskGroup() as tasks:
                for host in batch:
                    tasks.create_task(self._one(host, results, fail_fast))
            bad = next((results[h.name] for h in batch if not results[h.name].ok), None)
            if serial and bad is not None and self.stop is None:
                self.stop = f"{bad.host} ended {bad.status} in an earlier batch (serial {serial})"
        return [results[h.name] for h in selected]

    async def _one(self, host: Host, results: dict[str, HostRun], fail_fast: bool) -> None:
        result: HostRun | None = None
        if self.stop is None:
            async with self.pool.slot(host):
                if self.stop is None:
                    self.progress.start()
                    try:
                        result = await self._converse(host)
                    finally:
                        await self.pool.discard(host)
        if result is None:
            result = HostRun(host=host.name, status="skipped", error=f"not started: {self.stop}")
        elif fail_fast and not result.ok and self.stop is None:
            self.stop = f"{host.name} ended {result.status} and fail_fast is on"
        results[host.name] = result
        self.progress.end(result, ran=result.status != "skipped")

    async def _converse(self, host: Host) -> HostRun:
        from remote_bash.agent import run_agent

        started = time.monotonic()
        try:
            session = await self.pool.connect(host)
        except RemoteBashError as exc:
            return _not_reached(host, exc, started)
        path = _transcript(self.directory, host.name)
        tally = _Tally(host.name, self.on_event)
        try:
            outcome = await run_agent(self.task, session, self.config.model_copy(update={"transcript": path}),
                                      client=self.client, on_event=tally, approver=self.approver)
        except Exception as exc:  # the API refused, or a surprise: either way it ends this host only
            broken = tally.broken(exc, path)
            return HostRun(host=host.name, status="error", duration=time.monotonic() - started,
                           commands=tally.commands, last_error=tally.last_error, error=broken.message,
                           error_type=type(exc).__name__, conversation=broken)
        conversation = _from_outcome(outcome)
        if outcome.stop_reason != "end_turn":
            status: RunStatus = "incomplete"
            error: str | None = outcome.message
        elif tally.last_error is not None:
            status, error = "failed", f"Claude finished, but the last command failed: {tally.last_error}"
        else:
            status, error = "ok", None
        return HostRun(host=host.name, status=status, duration=time.monotonic() - started,
                       commands=tally.commands, last_error=tally.last_error, summary=_summary(outcome.final_text),
                       error=error, conversation=conversation)
