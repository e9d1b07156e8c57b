"""Fan-out: one command, or a task for Claude, on many hosts at once, each host in its own persistent session.

::

    result = await fleet.exec(inventory, "web:&prod", "df -h /", forks=20, timeout=30)
    print(fleet.format_recap(result))

    done = await fleet.run(inventory, "web", "free up disk space under /var/log", serial=2)
    print(fleet.format_run_recap(done))

:func:`run` and its results live in :mod:`remote_bash.fleet_run` and are re-exported here.

Every selected host gets its own :class:`~remote_bash.session.RemoteBashSession`, so its own
timeout, command policy, limits and audit trail apply. At most ``forks`` hosts are worked on at
once, and at most ``inventory.group_forks[g]`` hosts of a group ``g``. A slow, unreachable or
failing host only ever shows up as its own :class:`HostResult`: it never stalls or aborts the others.

What this module must never do:

* run a command twice. Only the *connect* step is retried, and only when the server dropped the
  connection before or during the handshake (sshd's ``MaxStartups`` under a burst of connects);
  a command that was sent is never re-sent, whatever happened to it;
* print, or read argv: the CLI does that with :func:`format_recap` and :func:`write_output_dir`;
* leave a session open: :class:`FleetPool` closes every session it opened, also on cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from ._paths import private_dir, write_private
from .access import Gate, jump_chain
from .errors import (
    AccessDenied,
    ConnectError,
    ConnectionLost,
    PolicyDenied,
    RemoteBashError,
)
from .fleet_run import (
    Conversation,
    FleetRun,
    HostRun,
    count_statuses,
    format_run_recap,
    run,
    write_run_output_dir,
)
from .inventory import Inventory
from .models import CommandResult, Host
from .policy import check_command
from .redact import Redactor
from .session import KILL_GRACE, AuditSink, CredentialSource, HostGate, RemoteBashSession, default_audit
from .tool import BashTool, _get
from .tool import _result as _tool_block

__all__ = [
    "Conversation",
    "FleetPool",
    "FleetProgress",
    "FleetResult",
    "FleetRun",
    "HostBashTool",
    "HostResult",
    "HostRun",
    "OutputGroup",
    "SessionFactory",
    "exec",
    "fleet_exec",
    "format_recap",
    "format_run_recap",
    "run",
    "write_output_dir",
    "write_run_output_dir",
]

Status = Literal["ok", "failed", "unreachable", "timed_out", "refused", "error", "skipped"]

CONNECT_ATTEMPTS = 3
"""Connection attempts per host when the server drops the connection during the handshake."""
RETRY_DELAYS = (0.2, 0.5, 1.0)
"""Seconds to wait before the 2nd, 3rd, 4th... connect attempt; up to half as much again is added
at random, so the hosts a burst dropped do not all come back at the same instant."""


# -- results ---------------------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HostResult(_Model):
    """What happened on one host."""

    host: str
    """The inventory name of the host."""
    status: Status
    """``ok`` (exit 0); ``failed`` (non-zero exit, or the shell died); ``timed_out`` (killed at the
    deadline); ``unreachable`` (no connection, so nothing ran); ``refused`` (the gate refused the host
    or a hop of its route, so nothing was connected, or the command policy refused the command,
    so nothing was sent); ``error`` (anything else, e.g. the connection died while the
    command ran: its effects are unknown); ``skipped`` (not started, after a failure with fail_fast)."""
    exit_code: int | None = None
    """The command's exit status; ``None`` when it did not run to its end."""
    duration: float = 0.0
    """Seconds from taking the host's slot to its result, connecting included."""
    output: str = ""
    """stdout and stderr interleaved, bounded by the host's ``output_limit`` (partial on timeout)."""
    first_line: str = ""
    """The first non-blank line of the output, stripped."""
    error: str | None = None
    """What went wrong, in a sentence, when the command did not simply run."""
    error_type: str | None = None
    """The remote_bash error class behind ``error`` (``ConnectionRefused``, ``PolicyDenied``, ...)."""
    attempts: int = 0
    """Connect attempts: 1 normally (also when an open session was reused), more when a dropped
    handshake was retried, 0 when no connection was tried (refused, skipped)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class OutputGroup(_Model):
    """Hosts whose command printed exactly the same text (trailing whitespace aside)."""

    output: str
    hosts: list[str]


_EXIT_2: frozenset[str] = frozenset({"unreachable", "timed_out", "error", "skipped"})


class FleetResult(_Model):
    """The outcome of one command across the selected hosts."""

    command: str
    """The command as sent to every host."""
    pattern: str
    """The host pattern the hosts were selected with."""
    results: list[HostResult] = Field(default_factory=list)
    """One per selected host, in inventory order."""
    duration: float = 0.0
    """Wall-clock seconds for the whole fan-out."""

    @property
    def ok(self) -> bool:
        """True when the command exited 0 on every selected host."""
        return all(r.ok for r in self.results)

    @property
    def counts(self) -> dict[str, int]:
        """Hosts per status, only the statuses that occurred, in a fixed order."""
        return count_statuses(get_args(Status), (r.status for r in self.results))

    @property
    def exit_code(self) -> int:
        """The exit status for the CLI: 0 when every host is ok; 1 when the command ran everywhere
        but failed or was refused somewhere; 2 when on some host it did not run to its end
        (unreachable, timed out, error, or skipped by fail_fast). 2 wins over 1."""
        statuses = {r.status for r in self.results}
        if statuses & _EXIT_2:
            return 2
        return 0 if statuses <= {"ok"} else 1

    def by_host(self) -> dict[str, HostResult]:
        return {r.host: r for r in self.results}

    def groups(self) -> list[OutputGroup]:
        """Hosts whose command completed (``ok`` or ``failed``), grouped by identical output,
        largest group first."""
        found: dict[str, list[str]] = {}
        for r in self.results:
            if r.status in ("ok", "failed"):
                found.setdefault(r.output.rstrip(), []).append(r.host)
        ordered = sorted(found.items(), key=lambda item: -len(item[1]))  # stable: first seen first
        return [OutputGroup(output=out, hosts=hosts) for out, hosts in ordered]

    def to_json(self, *, indent: int | None = 2) -> str:
        """The result as JSON, with ``ok``, ``exit_code`` and ``counts`` added."""
        data = self.model_dump(mode="json")
        data.update(ok=self.ok, exit_code=self.exit_code, counts=self.counts)
        return json.dumps(data, indent=indent, ensure_ascii=False)


@dataclass(frozen=True)
class FleetProgress:
    """A snapshot for a live display, sent when a host starts and when it ends."""

    total: int
    done: int
    running: int
    failed: int
    """Hosts done with any status other than ``ok``."""
    elapsed: float
    last: HostResult | HostRun | None = None
    """The result that just came in (a :class:`HostRun` for :func:`run`); ``None`` when a host just
    started."""

    @property
    def waiting(self) -> int:
        return self.total - self.done - self.running


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _result(host: Host, status: Status, started: float, *, error: BaseException | str | None = None,
            output: str = "", exit_code: int | None = None, attempts: int = 0) -> HostResult:
    if isinstance(error, RemoteBashError) and error.host == host.name:
        message: str | None = error.message  # the host is named by the result already
    else:
        message = error if isinstance(error, str) or error is None else str(error)
    return HostResult(
        host=host.name, status=status, exit_code=exit_code, duration=time.monotonic() - started,
        output=output, first_line=_first_line(output) or _first_line(message or ""), error=message,
        error_type=None if error is None or isinstance(error, str) else type(error).__name__,
        attempts=attempts,
    )


def _from_command(host: Host, res: CommandResult, started: float, attempts: int) -> HostResult:
    if res.timed_out:
        status: Status = "timed_out"
        error: str | None = f"did not finish within {res.timeout:g} s and was killed"
    elif res.shell_lost:
        status, error = "failed", "the shell exited (exit, exec, a fatal signal or set -e)"
    else:
        status, error = ("ok" if res.exit_code == 0 else "failed"), None
    return _result(host, status, started, output=res.output, exit_code=res.exit_code, attempts=attempts,
                   error=error)


# -- sessions ----------------------------------------------------------------------------------------


class SessionFactory:
    """Makes a host's session the way the fleet commands need it.

    Every session goes through ``gate`` (default: the inventory's own :class:`~remote_bash.access.Gate`,
    refusals audited), which also gives the route: a host's jump hosts, and theirs, first hop first.
    ``audit`` defaults to the default audit directory, as for a lone session; ``audit=False`` and
    ``gate=False`` turn them off, by name. The host's ``redact`` patterns (and the built-in secret
    formats) mask its output; ``credentials`` and ``operator`` are shared by every session.
    """

    def __init__(self, inventory: Inventory, *, audit: AuditSink | Literal[False] | None = None,
                 gate: HostGate | Literal[False] | None = None, credentials: CredentialSource | None = None,
                 operator: str | None = None, redact: bool = True, kill_grace: float = KILL_GRACE) -> None:
        self.inventory = inventory
        if audit is None:
            audit = default_audit(Redactor(sorted({p for h in inventory.hosts.values() for p in h.redact})))
        self.audit = audit
        self.gate: HostGate | Literal[False] = (
            Gate(inventory, audit=self.audit or None) if gate is None else gate)
        self.credentials = credentials
        self.operator = operator
        self.redact = redact
        self.kill_grace = kill_grace
        self._redactors: dict[tuple[str, ...], Redactor] = {}

    def jump_hosts(self, host: Host) -> list[Host]:
        """The route's jump hosts of ``host``, first hop first, their own jump hosts included."""
        if isinstance(self.gate, Gate):
            return self.gate.route(host)[:-1]
        return jump_chain(self.inventory, host)

    def __call__(self, host: Host, *, redactor: Redactor | None = None) -> RemoteBashSession:
        if redactor is None and self.redact:
            key = tuple(host.redact)
            if key not in self._redactors:
                self._redactors[key] = Redactor(key)
            redactor = self._redactors[key]
        return RemoteBashSession(host, jump_hosts=self.jump_hosts(host), credentials=self.credentials,
                                 audit=self.audit, redactor=redactor, gate=self.gate, operator=self.operator,
                                 kill_grace=self.kill_grace)


def _dropped(exc: RemoteBashError) -> bool:
    """True when the server closed the connection before or during the handshake: what sshd does
    to connects past ``MaxStartups``. Nothing of the caller's has run yet, so a retry is safe."""
    if isinstance(exc, ConnectionLost):
        return True
    return type(exc) is ConnectError and isinstance(
        exc.__cause__, ConnectionResetError | ConnectionAbortedError | BrokenPipeError)


def _has_rules(host: Host) -> bool:
    return host.policy.allow is not None or bool(host.policy.deny)


class _Limits:
    """``forks`` slots overall and ``group_forks[g]`` per group.

    A host takes its groups' semaphores in sorted order, so two hosts can never each hold what the
    other waits for, and the overall slot last, so a host held back by its group does not keep a
    slot that a host of another group could use.
    """

    def __init__(self, forks: int, group_forks: Mapping[str, int]) -> None:
        self._forks = asyncio.Semaphore(forks)
        self._groups = {g: asyncio.Semaphore(n) for g, n in group_forks.items()}

    @contextlib.asynccontextmanager
    async def slot(self, host: Host) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for group in sorted(set(host.groups) & self._groups.keys()):
                await stack.enter_async_context(self._groups[group])
            await stack.enter_async_context(self._forks)
            yield


class _Progress:
    def __init__(self, total: int, callback: Callable[[FleetProgress], None] | None) -> None:
        self.total, self.callback = total, callback
        self.started = time.monotonic()
        self.done = self.running = self.failed = 0

    def start(self) -> None:
        self.running += 1
        self._send(None)

    def end(self, result: HostResult | HostRun, *, ran: bool) -> None:
        self.running -= ran
        self.done += 1
        self.failed += not result.ok
        self._send(result)

    def _send(self, last: HostResult | HostRun | None) -> None:
        if self.callback is not None:
            self.callback(FleetProgress(self.total, self.done, self.running, self.failed,
                                        time.monotonic() - self.started, last))


class FleetPool:
    """One session per host, opened on first use and kept for the next commands.

    ::

        async with FleetPool(inventory, forks=20) as pool:
            await pool.run("web", "systemctl is-active nginx")
            await pool.run("web", "journalctl -u nginx -n 20")   # same sessions, same shells

    Connections are opened inside the host's slot, so at most ``forks`` handshakes are in flight.
    ``session_factory`` makes a host's session (default: :class:`SessionFactory` of the inventory).
    """

    def __init__(self, inventory: Inventory, *, forks: int = 10,
                 session_factory: Callable[[Host], RemoteBashSession] | None = None,
                 connect_attempts: int = CONNECT_ATTEMPTS,
                 retry_delays: Sequence[float] = RETRY_DELAYS) -> None:
        if forks < 1:
            raise ValueError(f"forks must be at least 1, got {forks}")
        if connect_attempts < 1:
            raise ValueError(f"connect_attempts must be at least 1, got {connect_attempts}")
        self.inventory = inventory
        self.forks = forks
        self.connect_attempts = connect_attempts
        self.retry_delays = tuple(retry_delays) or (0.0,)
        self._factory = session_factory or SessionFactory(inventory)
        self._sessions: dict[str, RemoteBashSession] = {}
        self._limits = _Limits(forks, inventory.group_forks)
        self._closed = False

    async def __aenter__(self) -> FleetPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def sessions(self) -> Mapping[str, RemoteBashSession]:
        """The sessions made so far, by host name."""
        return self._sessions

    def session(self, host: Host) -> RemoteBashSession:
        """The host's session, made (not connected) on first use."""
        if self._closed:
            raise RuntimeError("this FleetPool is closed")
        session = self._sessions.get(host.name)
        if session is None:
            session = self._sessions[host.name] = self._factory(host)
        return session

    def slot(self, host: Host) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold one of the pool's ``forks`` slots, and the host's group slots, for the ``async with``."""
        return self._limits.slot(host)

    async def connect(self, host: Host) -> RemoteBashSession:
        """The host's session, connected (a dropped handshake is retried); raises the last error."""
        session = self.session(host)
        _attempts, error = await self._start(session)
        if error is not None:
            raise error
        return session

    async def _start(self, session: RemoteBashSession) -> tuple[int, RemoteBashError | None]:
        """Start the session, retrying a dropped handshake. Returns (attempts made, final error)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                await session.start()
            except RemoteBashError as exc:
                if attempt >= self.connect_attempts or not _dropped(exc):
                    return attempt, exc
                delay = self.retry_delays[min(attempt - 1, len(self.retry_delays) - 1)]
                # Jitter, not cryptography: spread out the hosts that one burst dropped.
                await asyncio.sleep(delay * (1 + random.random() / 2))  # noqa: S311
            else:
                return attempt, None

    # `timeout` (ASYNC109, here and below) is each host's command deadline, handed to its session;
    # it is not a deadline for the call, so asyncio.timeout() could not replace it.
    async def run_on(self, host: Host, command: str, *, timeout: float | None = None,
                     tool_use_id: str | None = None) -> HostResult:
        """Run ``command`` on one host; every failure becomes a :class:`HostResult`, never an error."""
        started = time.monotonic()
        try:
            session = self.session(host)
            decision = check_command(command, host.policy) if _has_rules(host) else None
            if decision is not None and not decision.allowed:
                denied = PolicyDenied(decision.reason, host=host.name, rule=decision.rule)
                await session.audit_denied(denied, command, tool_use_id)
                return _result(host, "refused", started, error=denied)
            attempts, error = await self._start(session)
            if error is not None:
                if isinstance(error, AccessDenied):  # the gate refused a hop: nothing was dialled
                    return _result(host, "refused", started, error=error, attempts=0)
                reached = not isinstance(error, ConnectError | ConnectionLost)
                return _result(host, "error" if reached else "unreachable", started, error=error,
                               attempts=attempts)
            try:
                res = await session.run(command, timeout, tool_use_id=tool_use_id)
            except AccessDenied as exc:  # audited by the session (policy) or its gate (host)
                return _result(host, "refused", started, error=exc, attempts=attempts)
            except ConnectionLost as exc:
                return _result(host, "error", started, error=exc, output=exc.partial_output,
                               attempts=attempts)
            except ConnectError as exc:  # the connection dropped between start and run; nothing ran
                return _result(host, "unreachable", started, error=exc, attempts=attempts)
            return _from_command(host, res, started, attempts)
        except Exception as exc:  # one host's surprise must not end the fan-out
            return _result(host, "error", started, error=exc)

    async def run(self, hosts: str | Sequence[Host], command: str, *,
                  timeout: float | None = None,
                  fail_fast: bool = False, on_progress: Callable[[FleetProgress], None] | None = None,
                  keep_open: bool = True) -> FleetResult:
        """Run ``command`` on every host of a pattern (or a list), bounded by the pool's limits.

        With ``fail_fast``, the first result that is not ``ok`` stops the hosts not started yet
        (they are ``skipped``); hosts already running are left to finish within their own
        deadline, because cancelling a command halfway leaves a host in a state nobody chose.
        ``keep_open=False`` closes each host's session as soon as its result is in (``exec``).
        An exception raised by ``on_progress`` cancels the run (running commands are killed).
        """
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        pattern = hosts if isinstance(hosts, str) else ",".join(h.name for h in hosts)
        selected = self.inventory.select(hosts) if isinstance(hosts, str) else list(hosts)
        progress = _Progress(len(selected), on_progress)
        results: list[HostResult | None] = [None] * len(selected)
        stop = asyncio.Event()

        async def one(index: int, host: Host) -> None:
            result: HostResult | None = None
            if not stop.is_set():
                async with self.slot(host):
                    if not stop.is_set():
                        progress.start()
                        result = await self.run_on(host, command, timeout=timeout)
            if result is None:
                result = HostResult(host=host.name, status="skipped",
                                    error="not started: an earlier host failed and fail_fast is on")
            elif fail_fast and not result.ok:
                stop.set()
            results[index] = result
            progress.end(result, ran=result.status != "skipped")
            if not keep_open:
                await self.discard(host)

        async with asyncio.TaskGroup() as tasks:
            for index, host in enumerate(selected):
                tasks.create_task(one(index, host))
        done = [r for r in results if r is not None]
        return FleetResult(command=command, pattern=pattern, results=done,
                           duration=time.monotonic() - progress.started)

    async def discard(self, host: Host | str) -> None:
        """Close a host's session and forget it (the next command opens a new one)."""
        session = self._sessions.pop(host if isinstance(host, str) else host.name, None)
        if session is not None:
            with contextlib.suppress(RemoteBashError, OSError):
                await session.close()

    async def close(self) -> None:
        """Close every session, concurrently. Idempotent."""
        self._closed = True
        sessions, self._sessions = list(self._sessions.values()), {}
        if sessions:
            await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)


# Named after the `fleet exec` command it serves; `fleet_exec` is the same function.
async def exec(
    inventory: Inventory,
    pattern: str,
    command: str,
    *,
    forks: int = 10,
    timeout: float | None = None,
    fail_fast: bool = False,
    session_factory: Callable[[Host], RemoteBashSession] | None = None,
    on_progress: Callable[[FleetProgress], None] | None = None,
) -> FleetResult:
    """Run ``command`` once on every host ``pattern`` selects, each in a fresh session.

    ``timeout`` overrides each host's ``command_timeout`` (still clamped to its ``max_timeout``).
    Raises SelectionError for a pattern naming nothing known, ValueError for bad ``forks`` or
    ``timeout``; everything that happens on a host is in its :class:`HostResult`.
    """
    async with FleetPool(inventory, forks=forks, session_factory=session_factory) as pool:
        return await pool.run(pattern, command, timeout=timeout, fail_fast=fail_fast,
                              on_progress=on_progress, keep_open=False)


fleet_exec = exec


# -- output ------------------------------------------------------------------------------------------


def _seconds(value: float) -> str:
    return f"{value:.2f}s" if value < 10 else f"{value:.1f}s"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def format_recap(result: FleetResult, *, width: int = 120, max_names: int = 8, max_lines: int = 20) -> str:
    """A table (host, status, exit, time, first line of output or error), a summary line, then
    the distinct outputs (at most ``max_lines`` lines each) with the hosts that printed each."""
    rows = [("HOST", "STATUS", "EXIT", "TIME", "OUTPUT")]
    for r in result.results:
        completed = r.status in ("ok", "failed")
        shown = r.first_line if completed else _first_line(r.error or "") or r.first_line
        rows.append((r.host, r.status, "-" if r.exit_code is None else str(r.exit_code),
                     _seconds(r.duration), shown))
    sizes = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for row in rows:
        head = "  ".join(cell.ljust(size) for cell, size in zip(row[:4], sizes, strict=True))
        lines.append(f"{head}  {_clip(row[4], max(20, width - len(head) - 2))}".rstrip())
    counts = ", ".join(f"{n} {status}" for status, n in result.counts.items())
    lines.append("")
    lines.append(f"{len(result.results)} hosts in {_seconds(result.duration)}: {counts or 'none selected'}")
    for group in result.groups():
        names = ", ".join(group.hosts[:max_names])
        if len(group.hosts) > max_names:
            names += f" and {len(group.hosts) - max_names} more"
        noun = "host" if len(group.hosts) == 1 else "hosts"
        body = group.output or "(no output)"
        if "\n" not in body:
            lines.append(f"\n{len(group.hosts)} {noun}: {_clip(body, width)}\n  ({names})")
        else:
            lines.append(f"\n{len(group.hosts)} {noun} ({names}):")
            body_lines = body.splitlines()
            lines.extend(f"  {_clip(line, width)}" for line in body_lines[:max_lines])
            if len(body_lines) > max_lines:
                more = len(body_lines) - max_lines
                lines.append(f"  ... {more} more lines (all of them in the output directory)")
    return "\n".join(lines) + "\n"


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _file_name(host: str) -> str:
    """A host name made safe as a file name: no separators, no leading dot."""
    return _UNSAFE.sub("_", host).lstrip(".") or "_"


def _output_path(root: Path, host: str, written: Sequence[Path]) -> Path:
    """``root/<host>.txt``, numbered when two host names come out the same."""
    name = _file_name(host)
    path = root / f"{name}.txt"
    n = 1
    while path in written:
        n += 1
        path = root / f"{name}-{n}.txt"
    return path


def write_output_dir(result: FleetResult, directory: str | Path) -> list[Path]:
    """Write ``<host>.txt`` per host: a few ``# key: value`` header lines, a blank line, the output."""
    root = private_dir(directory, what="--output-dir")
    written: list[Path] = []
    for r in result.results:
        path = _output_path(root, r.host, written)
        header = {"host": r.host, "status": r.status, "exit": "-" if r.exit_code is None else r.exit_code,
                  "duration": f"{r.duration:.3f}", "command": result.command.replace("\n", "\\n")}
        if r.error:
            header["error"] = r.error.replace("\n", " ")
        text = "".join(f"# {k}: {v}\n" for k, v in header.items()) + "\n" + r.output
        write_private(path, text.encode(), what="--output-dir")
        written.append(path)
    return written


# -- the coordinator's tool -------------------------------------------------------------------------


class HostBashTool:
    """A custom tool, ``remote_bash``, with which one conversation drives the sessions of many hosts.

    The built-in bash tool (``bash_20250124``) has a fixed input schema with no room for a host,
    so a coordinator that talks to several hosts from one conversation needs a custom tool whose
    input names the host (an enum of the selected hosts). The trade-off: Claude is trained on the
    built-in bash tool and may use a custom one less fluently, and one conversation accumulates
    every host's output; a conversation per host (``fleet run`` without ``--coordinator``) keeps
    each context small and uses the built-in tool. Each host keeps its own persistent session from
    the pool, so ``cd`` and variables persist per host. Results are the same ``tool_result`` blocks
    that :class:`~remote_bash.tool.BashTool` builds, and nothing Claude sends raises.
    """

    name = "remote_bash"

    def __init__(self, pool: FleetPool, hosts: Sequence[Host], *, timeout: float | None = None,
                 on_output: Callable[[str, str], None] | None = None) -> None:
        if not hosts:
            raise ValueError("HostBashTool needs at least one host")
        self.pool = pool
        self.hosts = {h.name: h for h in hosts}
        self.timeout = timeout
        self.on_output = on_output
        self._tools: dict[str, BashTool] = {}

    def to_dict(self) -> dict[str, Any]:
        """The tool definition sent to the Messages API."""
        names = list(self.hosts)
        return {
            "name": self.name,
            "description": (
                "Run a bash command on one remote host, in that host's persistent shell (the working "
                "directory, variables and background jobs persist per host between calls). Hosts: "
                f"{', '.join(names)}. Output is stdout and stderr interleaved, truncated when long. "
                "Set restart to true to replace a host's shell with a fresh one."
            ),
            "input_schema": {
                "type": "object",
                "properties": {
                    "host": {"type": "string", "enum": names, "description": "The host to run on."},
                    "command": {"type": "string", "description": "The bash command to run."},
                    "restart": {"type": "boolean", "description": "Restart this host's shell instead."},
                },
                "required": ["host"],
                "additionalProperties": False,
            },
        }

    async def handle(self, tool_use: Any) -> dict[str, Any]:
        """Run one ``tool_use`` block (an SDK object or a dict) and return its ``tool_result``."""
        tool_use_id = _get(tool_use, "id")
        if not isinstance(tool_use_id, str) or not tool_use_id:
            raise ValueError("a tool_use block needs a non-empty string id")
        name = _get(tool_use, "name")
        if name not in (None, self.name):
            return _tool_block(tool_use_id, f"Error: unknown tool {name!r}; the tool here is {self.name!r}.",
                               True)
        return await self.run(_get(tool_use, "input"), tool_use_id=tool_use_id)

    async def run(self, tool_input: object, *, tool_use_id: str | None) -> dict[str, Any]:
        """Check the host, then let that host's :class:`BashTool` check and run the rest."""
        if not isinstance(tool_input, Mapping):
            return _tool_block(tool_use_id, "Error: the input must be an object with 'host' and 'command'.",
                               True)
        host_name = tool_input.get("host")
        if not isinstance(host_name, str) or host_name not in self.hosts:
            allowed = ", ".join(self.hosts)
            return _tool_block(tool_use_id, f"Error: unknown host {host_name!r}; the hosts are: {allowed}.",
                               True)
        host = self.hosts[host_name]
        try:
            session = await self.pool.connect(host)
        except RemoteBashError as exc:
            return _tool_block(tool_use_id, f"Error: could not reach {host_name}: {exc.message}", True)
        tool = self._tools.get(host_name)
        if tool is None or tool.session is not session:
            on_output = self.on_output
            tool = self._tools[host_name] = BashTool(
                session, timeout=self.timeout,
                on_output=None if on_output is None else (lambda text: on_output(host_name, text)))
        block = await tool.run({k: v for k, v in tool_input.items() if k != "host"}, tool_use_id=tool_use_id)
        block["tool_use_id"] = tool_use_id
        return block

