"""``fleet.run``: Claude carries out a task on many hosts, a conversation per host or one for all.

What this module must never do: import anthropic at import time (``remote_bash.agent`` is imported
inside :func:`run`), print, or end the run because of one host.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from remote_bash.inventory import Inventory
from remote_bash.models import Host
from remote_bash.session import RemoteBashSession

from .conversation import _with_timeout
from .coordinator import _Coordinator
from .per_host import _PerHost
from .pool import FleetPool, _Progress
from .results import COORDINATOR, FleetProgress, FleetRun

if TYPE_CHECKING:
    import anthropic

    from remote_bash.agent import AgentConfig, AgentEvent
    from remote_bash.tool import Approver

__all__ = ["run"]

async def run(
    inventory: Inventory,
    pattern: str,
    task: str,
    *,
    forks: int = 10,
    serial: int | None = None,
    fail_fast: bool = False,
    coordinator: bool = False,
    timeout: float | None = None,
    config: AgentConfig | None = None,
    transcript_dir: str | Path | None = None,
    client: anthropic.AsyncAnthropic | None = None,
    session_factory: Callable[[Host], RemoteBashSession] | None = None,
    on_progress: Callable[[FleetProgress], None] | None = None,
    on_event: Callable[[str, AgentEvent], None] | None = None,
    approver: Approver | None = None,
) -> FleetRun:
    """Have Claude carry out ``task`` on every host ``pattern`` selects; see the module docstring.

    ``config`` sets the model and each conversation's limits (its ``transcript`` must be unset:
    each conversation gets ``<transcript_dir>/<host>-<time>-<id>.jsonl``, by default under
    ``$XDG_STATE_HOME/remote-bash/transcripts``). ``timeout`` replaces each host's
    ``command_timeout`` (still clamped to its ``max_timeout``). ``on_progress`` gets the snapshots
    ``fleet.exec`` sends, with a :class:`HostRun` as ``last``; for a coordinator, ``done`` counts the
    hosts it has run a command on and a snapshot follows each command. ``on_event`` gets every
    conversation's events with the host's name, or ``"coordinator"``. ``client`` defaults to one per
    conversation, from the environment. ``approver`` is asked before a command or edit the hosts'
    ``approve`` rules name; without one, such a command is refused.

    Raises SelectionError for a pattern naming nothing known, ValueError for bad options;
    everything that happens on a host is in its :class:`HostRun`.
    """
    from remote_bash.agent import AgentConfig, default_transcript_dir

    if not task.strip():
        raise ValueError("the task is empty: say what Claude should do on the hosts")
    if serial is not None and serial < 1:
        raise ValueError(f"serial must be at least 1, got {serial}")
    if coordinator and (serial is not None or fail_fast):
        raise ValueError("serial and fail_fast apply to a conversation per host, not to a coordinator")
    if timeout is not None and not timeout > 0:  # NaN too
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
    config = config or AgentConfig()
    if config.transcript is not None:
        raise ValueError("a fleet run writes a transcript per conversation: give transcript_dir, not "
                         "config.transcript")
    directory = Path(transcript_dir) if transcript_dir is not None else default_transcript_dir()
    selected = [_with_timeout(h, timeout) for h in inventory.select(pattern)]
    started = time.monotonic()
    async with FleetPool(inventory, forks=forks, session_factory=session_factory) as pool:
        if coordinator:
            team = _Coordinator(pool, selected, on_progress, approver)
            conversation = await team.run(task, config, directory, client, on_event)
            results = team.results(conversation)
        else:
            conversation = None
            crew = _PerHost(pool, task, config, directory, client, on_event, _Progress(len(selected), on_progress),
                            approver)
            results = await crew.run(selected, serial=serial, fail_fast=fail_fast)
    return FleetRun(task=task, pattern=pattern, mode=COORDINATOR if coordinator else "per-host", results=results,
                    coordinator=conversation, duration=time.monotonic() - started)
