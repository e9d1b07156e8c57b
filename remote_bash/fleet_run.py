"""``fleet run``: Claude works on many hosts, in one conversation per host or in one for them all.

::

    result = await fleet.run(inventory, "web", "free up disk space under /var/log", serial=2)
    print(fleet.format_run_recap(result))

Per host (the default), every selected host gets its own conversation, transcript and persistent
session, with the built-in bash tool. At most ``forks`` conversations run at once, and at most
``inventory.group_forks[g]`` for a group ``g``, exactly as for ``fleet.exec``. ``serial=N`` works
through the hosts N at a time in inventory order and starts no new batch after one in which a host
did not end ``ok`` (the rest are ``skipped``); ``fail_fast`` stops at the first such host.

With ``coordinator=True``, one conversation works on every selected host through
:class:`~remote_bash.fleet.HostBashTool` (the custom tool ``remote_bash``, whose input names the
host). The bash tool's fixed schema has no room for a host, so it is not offered at all; a call to
it anyway is answered with an error that names ``remote_bash``. Every host is connected first, so
the system prompt can say what each one is, or that it could not be reached.

A host's result is ``ok`` when its conversation ended with Claude's own ``end_turn`` and the last
command run on that host was not an error; see :class:`HostRun` for the other statuses.

What this module must never do: import anthropic (:mod:`remote_bash.agent` is imported inside
:func:`run`), print, or end the run because of one host. It imports :mod:`remote_bash.fleet` only
inside functions, because ``fleet`` re-exports this module.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from .errors import ConnectError, ConnectionLost, RemoteBashError
from .facts import describe
from .inventory import Inventory
from .models import Host
from .session import RemoteBashSession

if TYPE_CHECKING:
    import anthropic  # for the annotation only: agent.py is the one module that uses it

    from .agent import AgentConfig, AgentEvent, AgentOutcome
    from .fleet import FleetPool, FleetProgress, HostBashTool, _Progress

__all__ = ["Conversation", "FleetRun", "HostRun", "count_statuses", "format_run_recap", "run", "write_run_output_dir"]

RunStatus = Literal["ok", "failed", "incomplete", "unreachable", "error", "skipped", "unused"]
Mode = Literal["per-host", "coordinator"]
COORDINATOR: Literal["coordinator"] = "coordinator"
"""The coordinator conversation's name in transcripts and ``on_event``."""

_EXIT_2: frozenset[str] = frozenset({"incomplete", "unreachable", "error", "skipped"})


# -- results ---------------------------------------------------------------------------------------



def count_statuses(order: Iterable[str], statuses: Iterable[str]) -> dict[str, int]:
    """How many of each status, only those that occurred, in ``order`` (shared with fleet.exec)."""
    counts = dict.fromkeys(order, 0)
    for status in statuses:
        counts[status] += 1
    return {s: n for s, n in counts.items() if n}

class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Conversation(_Model):
    """How one conversation with Claude ended."""

    stop_reason: str
    """Claude's own stop reason (``end_turn``, ``max_tokens``, ...), the limit that stopped the run
    (``max_turns``, ``token_budget``, ``cost_budget``), ``interrupted``, or ``error`` when the API
    refused a request (or something else broke the run)."""
    message: str
    """One sentence saying why the conversation stopped."""
    turns: int = 0
    """Requests made to Claude."""
    tokens: int = 0
    """Tokens used, cached ones included."""
    cost_usd: float = 0.0
    """Estimated cost in US dollars (list prices; not an invoice)."""
    transcript: Path | None = None
    """The JSONL transcript (``remote-bash run --resume`` continues a per-host one)."""
    final_text: str = ""
    """The text of Claude's last reply."""


class HostRun(_Model):
    """What a fleet run did on one host."""

    host: str
    """The inventory name of the host."""
    status: RunStatus
    """``ok`` (the conversation ended with ``end_turn`` and the last command on the host was not an
    error); ``failed`` (it ended with ``end_turn`` but that last command was an error);
    ``incomplete`` (a limit, Claude's ``max_tokens`` or ``refusal``, or a stopped coordinator ended
    the conversation before Claude finished); ``unreachable`` (no connection, so nothing ran);
    ``error`` (the API refused a request, the host gate refused the host, or something else broke
    it); ``skipped`` (not started, after a failure with ``serial`` or ``fail_fast``); ``unused``
    (coordinator only: reachable, but Claude ran nothing on it)."""
    duration: float = 0.0
    """Seconds: the host's whole conversation per host; the host's commands for a coordinator."""
    commands: int = 0
    """Tool calls answered on this host (refused and failed ones included)."""
    last_error: str | None = None
    """The last line of the last command's result, when that result was an error."""
    summary: str = ""
    """The first line of Claude's last reply (per host), for a recap."""
    error: str | None = None
    """Why the status is not ``ok``, in a sentence."""
    error_type: str | None = None
    """The error class behind ``error`` (``ConnectionRefused``, ``AgentError``, ...), when there was one."""
    conversation: Conversation | None = None
    """This host's own conversation (per host); ``None`` for a coordinator run and when none began."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class FleetRun(_Model):
    """The outcome of a task across the selected hosts."""

    task: str
    """The task as given to Claude."""
    pattern: str
    """The host pattern the hosts were selected with."""
    mode: Mode
    """``per-host`` (a conversation per host) or ``coordinator`` (one for all)."""
    results: list[HostRun] = Field(default_factory=list)
    """One per selected host, in inventory order."""
    coordinator: Conversation | None = None
    """The coordinator's conversation; ``None`` per host, or when no host could be reached."""
    duration: float = 0.0
    """Wall-clock seconds for the whole run."""

    @property
    def ok(self) -> bool:
        """True when every host is ok (a coordinator's unused hosts aside) and Claude finished."""
        return self.exit_code == 0

    @property
    def counts(self) -> dict[str, int]:
        """Hosts per status, only the statuses that occurred, in a fixed order."""
        return count_statuses(get_args(RunStatus), (r.status for r in self.results))

    @property
    def exit_code(self) -> int:
        """0 when every host is ok (or unused by a coordinator that finished); 1 when Claude finished
        everywhere but a host failed; 2 when a conversation did not finish, or a host was
        unreachable, broken or skipped. 2 wins over 1."""
        statuses = {r.status for r in self.results}
        unfinished = self.coordinator is not None and self.coordinator.stop_reason != "end_turn"
        if statuses & _EXIT_2 or unfinished:
            return 2
        return 0 if statuses <= {"ok", "unused"} else 1

    @property
    def cost_usd(self) -> float:
        """Estimated US dollars over every conversation."""
        return sum(c.cost_usd for c in self._conversations())

    @property
    def tokens(self) -> int:
        return sum(c.tokens for c in self._conversations())

    @property
    def turns(self) -> int:
        return sum(c.turns for c in self._conversations())

    def _conversations(self) -> list[Conversation]:
        if self.coordinator is not None:
            return [self.coordinator]
        return [r.conversation for r in self.results if r.conversation is not None]

    def by_host(self) -> dict[str, HostRun]:
        return {r.host: r for r in self.results}

    def to_json(self, *, indent: int | None = 2) -> str:
        """The result as JSON, with ``ok``, ``exit_code``, ``counts`` and the totals added."""
        data = self.model_dump(mode="json")
        data.update(ok=self.ok, exit_code=self.exit_code, counts=self.counts, turns=self.turns,
                    tokens=self.tokens, cost_usd=round(self.cost_usd, 6))
        return json.dumps(data, indent=indent, ensure_ascii=False)


# -- running ---------------------------------------------------------------------------------------


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
) -> FleetRun:
    """Have Claude carry out ``task`` on every host ``pattern`` selects; see the module docstring.

    ``config`` sets the model and each conversation's limits (its ``transcript`` must be unset:
    each conversation gets ``<transcript_dir>/<host>-<time>-<id>.jsonl``, by default under
    ``$XDG_STATE_HOME/remote-bash/transcripts``). ``timeout`` replaces each host's
    ``command_timeout`` (still clamped to its ``max_timeout``). ``on_progress`` gets the snapshots
    ``fleet.exec`` sends, with a :class:`HostRun` as ``last``; for a coordinator, ``done`` counts the
    hosts it has run a command on and a snapshot follows each command. ``on_event`` gets every
    conversation's events with the host's name, or ``"coordinator"``. ``client`` defaults to one per
    conversation, from the environment.

    Raises SelectionError for a pattern naming nothing known, ValueError for bad options;
    everything that happens on a host is in its :class:`HostRun`.
    """
    from .agent import AgentConfig, default_transcript_dir
    from .fleet import FleetPool, _Progress

    if not task.strip():
        raise ValueError("the task is empty: say what Claude should do on the hosts")
    if serial is not None and serial < 1:
        raise ValueError(f"serial must be at least 1, got {serial}")
    if coordinator and (serial is not None or fail_fast):
        raise ValueError("serial and fail_fast apply to a conversation per host, not to a coordinator")
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    config = config or AgentConfig()
    if config.transcript is not None:
        raise ValueError("a fleet run writes a transcript per conversation: give transcript_dir, not "
                         "config.transcript")
    directory = Path(transcript_dir) if transcript_dir is not None else default_transcript_dir()
    selected = [_with_timeout(h, timeout) for h in inventory.select(pattern)]
    started = time.monotonic()
    async with FleetPool(inventory, forks=forks, session_factory=session_factory) as pool:
        if coordinator:
            team = _Coordinator(pool, selected, on_progress)
            conversation = await team.run(task, config, directory, client, on_event)
            results = team.results(conversation)
        else:
            conversation = None
            crew = _PerHost(pool, task, config, directory, client, on_event, _Progress(len(selected), on_progress))
            results = await crew.run(selected, serial=serial, fail_fast=fail_fast)
    return FleetRun(task=task, pattern=pattern, mode=COORDINATOR if coordinator else "per-host", results=results,
                    coordinator=conversation, duration=time.monotonic() - started)


def _with_timeout(host: Host, timeout: float | None) -> Host:
    if timeout is None:
        return host
    return host.model_copy(update={"command_timeout": min(timeout, host.max_timeout)})


def _transcript(directory: Path, name: str) -> Path:
    from .fleet import _file_name

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


# -- a conversation per host -----------------------------------------------------------------------


class _PerHost:
    """Runs a conversation per host within the pool's limits, batch by batch with ``serial``."""

    def __init__(self, pool: FleetPool, task: str, config: AgentConfig, directory: Path,
                 client: anthropic.AsyncAnthropic | None, on_event: Callable[[str, AgentEvent], None] | None,
                 progress: _Progress) -> None:
        self.pool = pool
        self.task = task
        self.config = config
        self.directory = directory
        self.client = client
        self.on_event = on_event
        self.progress = progress
        self.stop: str | None = None  # why hosts not started yet are skipped; None while they may start

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
        from .agent import run_agent

        started = time.monotonic()
        try:
            session = await self.pool.connect(host)
        except RemoteBashError as exc:
            return _not_reached(host, exc, started)
        path = _transcript(self.directory, host.name)
        tally = _Tally(host.name, self.on_event)
        try:
            outcome = await run_agent(self.task, session, self.config.model_copy(update={"transcript": path}),
                                      client=self.client, on_event=tally)
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


# -- one coordinator for all -----------------------------------------------------------------------


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
                 on_progress: Callable[[FleetProgress], None] | None) -> None:
        self.pool = pool
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
        from .tool import _get

        tool_input = _get(tool_use, "input")
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
        from .agent import ToolSet, run_agent
        from .fleet import HostBashTool

        await self._connect_all()
        if not any(self._reached(h.name) for h in self.hosts):
            return None
        self._tool = HostBashTool(self.pool, self.hosts)
        tools = ToolSet(name=COORDINATOR, tools=[self], system_prompt=self._prompt())
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
        from .fleet import FleetProgress

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
gives that host a clean shell. There is no plain bash tool here.

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


# -- output ------------------------------------------------------------------------------------------


def _money(value: float) -> str:
    return f"${value:.4f}"


def format_run_recap(result: FleetRun, *, width: int = 120, max_lines: int = 40) -> str:
    """A table (host, status, turns, commands, cost, time, summary or error), a totals line, where the
    transcripts are, and for a coordinator Claude's final answer (at most ``max_lines`` lines)."""
    from .fleet import _clip, _first_line, _seconds

    per_host = result.mode == "per-host"
    rows = [["HOST", "STATUS", "TURNS", "CMDS", "COST", "TIME", "SUMMARY"]]
    for r in result.results:
        c = r.conversation
        ran = r.status != "skipped"
        shown = r.summary if r.ok or not r.error else _first_line(r.error)
        rows.append([r.host, r.status, str(c.turns) if c else "-", str(r.commands) if ran else "-",
                     _money(c.cost_usd) if c else "-", _seconds(r.duration) if ran else "-", shown])
    if not per_host:  # one conversation: its turns and cost are in the totals line
        rows = [[row[i] for i in (0, 1, 3, 5, 6)] for row in rows]
    sizes = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        head = "  ".join(cell.ljust(size) for cell, size in zip(row[:-1], sizes, strict=True))
        lines.append(f"{head}  {_clip(row[-1], max(20, width - len(head) - 2))}".rstrip())
    counts = ", ".join(f"{n} {status}" for status, n in result.counts.items())
    lines.append("")
    totals = (f"{result.turns} turns, {result.tokens:,} tokens, about {_money(result.cost_usd)}"
              if result.turns else "no conversation")
    lines.append(f"{len(result.results)} hosts in {_seconds(result.duration)}: {counts or 'none selected'}; "
                 f"{totals}")
    if per_host:
        paths = [r.conversation.transcript for r in result.results if r.conversation and r.conversation.transcript]
        folders = sorted({str(p.parent) for p in paths})
        if len(folders) == 1:
            lines.append(f"transcripts: {folders[0]}")
        lines.extend(f"transcript of {r.host}: {r.conversation.transcript}" for r in result.results
                     if len(folders) > 1 and r.conversation and r.conversation.transcript)
    elif result.coordinator is not None:
        c = result.coordinator
        lines.append(f"coordinator: {c.message}; transcript: {c.transcript or '(none)'}")
        if c.final_text.strip():
            body = c.final_text.strip().splitlines()
            lines.append("")
            lines.extend(_clip(line, width) for line in body[:max_lines])
            if len(body) > max_lines:
                lines.append(f"... {len(body) - max_lines} more lines (in the transcript)")
    return "\n".join(lines) + "\n"


def write_run_output_dir(result: FleetRun, directory: str | Path) -> list[Path]:
    """Write ``<host>.txt`` per host: ``# key: value`` header lines (status, transcript, ...), a blank
    line, then Claude's final answer (the coordinator's, for a coordinator run)."""
    from ._paths import private_dir, write_private
    from .fleet import _output_path

    root = private_dir(directory, what="--output-dir")
    written: list[Path] = []
    for r in result.results:
        conversation = r.conversation or result.coordinator
        header: dict[str, Any] = {"host": r.host, "status": r.status, "mode": result.mode,
                                  "commands": r.commands, "duration": f"{r.duration:.3f}"}
        if conversation is not None:
            header.update(stop_reason=conversation.stop_reason, turns=conversation.turns,
                          cost_usd=f"{conversation.cost_usd:.6f}", transcript=conversation.transcript or "-")
        if r.error:
            header["error"] = r.error
        header["task"] = result.task
        text = "".join(f"# {k}: {str(v).replace(chr(10), ' ')}\n" for k, v in header.items())
        final = conversation.final_text if conversation is not None else ""
        path = _output_path(root, r.host, written)
        write_private(path, (text + "\n" + (final.rstrip() + "\n" if final.strip() else "")).encode(),
                      what="--output-dir")
        written.append(path)
    return written
