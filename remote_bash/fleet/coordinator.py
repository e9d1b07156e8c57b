"""``fleet run --coordinator``: one Claude conversation that works on every selected host.

The built-in bash tool's fixed schema has no room for a host, so it is not offered at all;
:class:`~remote_bash.fleet.host_tool.HostBashTool` (``remote_bash``) is. Every host is connected
first, so the system prompt can say what each one is, or that it could not be reached. What a
host reports about itself enters that prompt only checked and marked as the host's data
(:mod:`remote_bash.facts`), and a host's error only by its class: one host must not write the
instructions that drive all the others.

What this module must never do: import anthropic at import time, or end the run because of one host.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_bash.errors import ConnectError, ConnectionLost, RemoteBashError
from remote_bash.facts import describe
from remote_bash.models import Host
from remote_bash.tools._base import Approver, field

from .conversation import _from_outcome, _last_line, _message, _Tally, _transcript
from .host_tool import HostBashTool
from .pool import FleetPool
from .results import COORDINATOR, Conversation, FleetProgress, HostRun, RunStatus

if TYPE_CHECKING:
    import anthropic

    from remote_bash.agent import AgentConfig, AgentEvent

class _HostWork:
    """One host's share of a coordinator run."""

    def __init__(self) -> None:
        self.commands = 0
        self.duration = 0.0
        self.last_error: str | None = None
        self.connect_error: RemoteBashError | None = None


class _Coordinator:
    """Connects every host, then runs one conversation over them through the ``remote_bash`` tool.

    It is also that conversation's tool (an ``agent.ToolHandler``): it hands each call to
    :class:`~remote_bash.fleet.HostBashTool` and keeps each host's count of commands and last result.
    """

    def __init__(self, pool: FleetPool, hosts: Sequence[Host],
                 on_progress: Callable[[FleetProgress], None] | None, approver: Approver | None = None) -> None:
        self.pool = pool
        self.approver = approver
        self.hosts = list(hosts)
        self.work = {h.name: _HostWork() for h in hosts}
        self.on_progress = on_progress
        self.started = time.monotonic()
        self.running = False
        self._tool: HostBashTool | None = None

    # The ToolHandler the conversation sees.
    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def tool(self) -> HostBashTool:
        assert self._tool is not None, "the tool exists once the hosts are connected"
        return self._tool

    def to_dict(self) -> dict[str, Any]:
        return self.tool.to_dict()

    async def handle(self, tool_use: Any) -> dict[str, Any]:
        tool_input = field(tool_use, "input")
        host = tool_input.get("host") if isinstance(tool_input, Mapping) else None
        work = self.work.get(host) if isinstance(host, str) else None
        if work is None:  # not a selected host: the tool answers with an error listing them
            return await self.tool.handle(tool_use)
        started = time.monotonic()
        self.running = True
        self._report(None)
        try:
            block = await self.tool.handle(tool_use)
        finally:
            self.running = False
            work.duration += time.monotonic() - started
        work.commands += 1
        work.last_error = (_last_line(str(block["content"])) or "error") if block["is_error"] else None
        assert isinstance(host, str)
        self._report(self._snapshot(host, None))
        return block

    # The run.
    async def run(self, task: str, config: AgentConfig, directory: Path, client: anthropic.AsyncAnthropic | None,
                  on_event: Callable[[str, AgentEvent], None] | None) -> Conversation | None:
        from remote_bash.agent import ToolSet, run_agent
        from remote_bash.tools.host_edit import HostEditTool

        await self._connect_all()
        if not any(self._reached(h.name) for h in self.hosts):
            return None
        self._tool = HostBashTool(self.pool, self.hosts, approver=self.approver)
        editor = HostEditTool(self.pool.connect, self.hosts, approver=self.approver)
        tools = ToolSet(name=COORDINATOR, tools=[self, editor], system_prompt=self._prompt())
        path = _transcript(directory, COORDINATOR)
        tally = _Tally(COORDINATOR, on_event)
        try:
            outcome = await run_agent(task, tools, config.model_copy(update={"transcript": path}), client=client,
                                      on_event=tally)
        except Exception as exc:  # the API refused, or a surprise: report it with the hosts' results
            return tally.broken(exc, path)
        return _from_outcome(outcome)

    async def _connect_all(self) -> None:
        async def connect(host: Host) -> None:
            async with self.pool.slot(host):
                try:
                    await self.pool.connect(host)
                except RemoteBashError as exc:
                    self.work[host.name].connect_error = exc

        async with asyncio.TaskGroup() as tasks:
            for host in self.hosts:
                tasks.create_task(connect(host))

    def _reached(self, name: str) -> bool:
        session = self.pool.sessions.get(name)
        return session is not None and session.info is not None

    def results(self, conversation: Conversation | None) -> list[HostRun]:
        results = [self._snapshot(h.name, conversation) for h in self.hosts]
        if self.on_progress is not None:
            self._report(None, done=len(results))
        return results

    def _snapshot(self, name: str, conversation: Conversation | None) -> HostRun:
        """The host's result; ``conversation`` is the finished one, or None while it still runs."""
        work = self.work[name]
        finished = conversation is None or conversation.stop_reason == "end_turn"
        status: RunStatus
        error: str | None = None
        error_type: str | None = None
        if not self._reached(name):
            status = "unreachable"
            exc = work.connect_error
            if exc is not None and not isinstance(exc, ConnectError | ConnectionLost):
                status = "error"
            error = _message(exc) if exc is not None else "never connected"
            error_type = type(exc).__name__ if exc is not None else None
        elif work.commands == 0:
            status = "unused"
        elif not finished:
            assert conversation is not None
            status, error = "incomplete", f"the coordinator stopped before Claude finished: {conversation.message}"
        elif work.last_error is not None:
            status, error = "failed", f"the last command on {name} failed: {work.last_error}"
        else:
            status = "ok"
        return HostRun(host=name, status=status, duration=work.duration, commands=work.commands,
                       last_error=work.last_error, error=error, error_type=error_type)

    def _report(self, last: HostRun | None, *, done: int | None = None) -> None:
        if self.on_progress is None:
            return

        used = [w for w in self.work.values() if w.commands]
        failed = sum(1 for n, w in self.work.items() if w.last_error is not None or not self._reached(n))
        self.on_progress(FleetProgress(len(self.work), len(used) if done is None else done, int(self.running),
                                       failed, time.monotonic() - self.started, last))

    def _prompt(self) -> str:
        lines = []
        for host in self.hosts:
            session = self.pool.sessions.get(host.name)
            info = session.info if session is not None else None
            where = f"- {host.name} ({host.hostname})"
            if info is None:
                # The error's class only: its message may quote what the host printed.
                exc = self.work[host.name].connect_error
                why = type(exc).__name__ if exc is not None else "not connected"
                lines.append(f"{where}: could not be reached when the run began ({why}); a call to it tries again.")
                continue
            # What a host reports is checked and marked as data: one host must not write the
            # instructions that drive all the others.
            lines.append(f"{where}: {describe(info.user, info.os, info.bash_version)}. Each command must "
                         f"finish within {host.command_timeout:g} s; output is cut to {host.output_limit:,} "
                         f"characters.")
        host_lines = "\n".join(lines)
        return f"""\
You are working on several real machines over SSH, through the remote_bash tool. Each call names \
one host, and each host has its own persistent bash session: the working directory, variables and \
functions carry over from one command to the next on the same host. {{"host": ..., "restart": true}} \
gives that host a clean shell. There is no plain bash tool here. Change files with the remote_edit \
tool (view, create, str_replace, insert on one host's absolute path): it writes atomically and keeps \
modes and line endings; prefer it to sed -i or heredocs.

Hosts:
{host_lines}

Rules:
- The calls of one reply run one after another, in the order given.
- A command that runs past its host's limit is killed with everything it started, and reported as \
an error. Start long jobs in the background with their output in a file (nohup ... > /tmp/job.log \
2>&1 &) and check on them. Narrow long output with grep, head, tail or wc.
- A command policy may refuse a command before it runs; the refusal names the rule. Do not try to \
get around it: do the work another way, or say what you would need.
- Nothing can answer a prompt: no editors, pagers, password or confirmation prompts. Use \
non-interactive forms (-y, --no-pager, PAGER=cat, sudo -n, DEBIAN_FRONTEND=noninteractive).
- These are real machines, maybe in production. Look before you change anything, prefer reversible \
steps, and back up a file before you edit it. Make a change on one host and check it before you \
make it on the others.
- When the task is done, or cannot be done, answer without calling the tool: say, host by host, \
what you found and what you changed."""
