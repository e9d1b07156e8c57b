"""Sessions for many hosts: made through the gate, opened within ``forks`` slots, kept for reuse.

:class:`FleetPool` holds one session per host, made by a :class:`SessionFactory` (the inventory's
gate and route, the audit log, redaction), opened inside the host's slot: at most ``forks`` hosts
at once, and at most ``inventory.group_forks[g]`` of a group ``g``. :func:`exec` runs one command
across a pattern's hosts with it.

What this module must never do:

* run a command twice. Only the *connect* step is retried, and only when the server dropped the
  connection before or during the handshake (sshd's ``MaxStartups`` under a burst of connects);
  a command that was sent is never re-sent, whatever happened to it;
* let one host's failure stall or abort the others: it is that host's :class:`HostResult`;
* leave a session open: :class:`FleetPool` closes every session it opened, also on cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Literal

from remote_bash.access import Gate, jump_chain
from remote_bash.errors import AccessDenied, ConnectError, ConnectionLost, PolicyDenied, RemoteBashError
from remote_bash.inventory import Inventory
from remote_bash.models import CommandResult, Host
from remote_bash.redact import Redactor
from remote_bash.session import (
    KILL_GRACE,
    AuditSink,
    CredentialSource,
    HostCheck,
    RemoteBashSession,
    default_audit,
    off_by_name,
)

from .results import FleetProgress, FleetResult, HostResult, HostRun, Status, _first_line

__all__ = ["CONNECT_ATTEMPTS", "RETRY_DELAYS", "FleetPool", "SessionFactory", "exec", "fleet_exec"]

CONNECT_ATTEMPTS = 3
"""Connection attempts per host when the server drops the connection during the handshake."""
RETRY_DELAYS = (0.2, 0.5, 1.0)
"""Seconds to wait before the 2nd, 3rd, 4th... connect attempt; up to half as much again is added
at random, so the hosts a burst dropped do not all come back at the same instant."""




def _result(host: Host, status: Status, started: float, *, error: BaseException | str | None = None,
            output: str = "", exit_code: int | None = None, attempts: int = 0) -> HostResult:
    if isinstance(error, RemoteBashError) and error.host == host.name:
        message: str | None = error.message  # the host is named by the result already
    else:
        message = error if isinstance(error, str) or error is None else str(error)
    return HostResult._trusted(
        host=host.name, status=status, exit_code=exit_code, duration=time.monotonic() - started,
        output=output, first_line=_first_line(output) or _first_line(message or ""), error=message,
        error_type=None if error is None or isinstance(error, str) else type(error).__name__,
        attempts=attempts,
    )


def _from_command(host: Host, res: CommandResult, started: float, attempts: int) -> HostResult:
    if res.timed_out:
        status: Status = "timed_out"
        error: str | None = f"did not finish within {res.timeout:g} s and was killed"
    elif res.shell_lost and res.exit_code != 0:
        # A shell that exited with status 0 (`...; exit 0`, `exec true`) ran the command to its end: ok.
        status, error = "failed", "the shell exited (exit, exec, a fatal signal or set -e)"
    else:
        status, error = ("ok" if res.exit_code == 0 else "failed"), None
    return _result(host, status, started, output=res.output, exit_code=res.exit_code, attempts=attempts,
                   error=error)




class SessionFactory:
    """Makes a host's session the way the fleet commands need it.

    Every session goes through ``gate`` (default: the inventory's own :class:`~remote_bash.access.Gate`,
    refusals audited), which also gives the route: a host's jump hosts, and theirs, first hop first.
    ``audit`` defaults to the default audit directory, as for a lone session; ``audit=False`` and
    ``gate=False`` turn them off, by name. Every host's ``redact`` patterns (and the built-in secret
    formats) mask each host's output: one host may print another's secret. ``credentials`` and
    ``operator`` are shared by every session.
    """

    def __init__(self, inventory: Inventory, *, audit: AuditSink | Literal[False] | None = None,
                 gate: HostCheck | Literal[False] | None = None, credentials: CredentialSource | None = None,
                 operator: str | None = None, redact: bool = True, kill_grace: float = KILL_GRACE) -> None:
        off_by_name(audit, "audit", "an AuditSink", lambda v: hasattr(v, "awrite"))
        off_by_name(gate, "gate", "a HostCheck", callable)
        self.inventory = inventory
        self._patterns = sorted({p for h in inventory.hosts.values() for p in h.redact})
        if audit is None:
            audit = default_audit(Redactor(self._patterns),
                                  {h.name: h.audit_key_file for h in inventory.hosts.values()})
        self.audit = audit
        self.gate: HostCheck | Literal[False] = (
            Gate(inventory, audit=None if self.audit is False else self.audit) if gate is None else gate)
        self.credentials = credentials
        self.operator = operator
        self.redact = redact
        self.kill_grace = kill_grace
        self._redactor: Redactor | None = None

    def jump_hosts(self, host: Host) -> list[Host]:
        """The route's jump hosts of ``host``, first hop first, their own jump hosts included."""
        if isinstance(self.gate, Gate):
            return self.gate.route(host)[:-1]
        return jump_chain(self.inventory, host)

    def __call__(self, host: Host, *, redactor: Redactor | None = None) -> RemoteBashSession:
        if redactor is None and self.redact:
            if self._redactor is None:
                self._redactor = Redactor(sorted({*self._patterns, *host.redact}))
            redactor = self._redactor
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
            decision = session.check_policy(command)  # run does not check it again
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
        if timeout is not None and not timeout > 0:  # NaN too
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
        pattern = hosts if isinstance(hosts, str) else ",".join(h.name for h in hosts)
        selected = self.inventory.select(hosts) if isinstance(hosts, str) else list(hosts)
        progress = _Progress(len(selected), on_progress)
        results: list[HostResult | None] = [None] * len(selected)
        stop = asyncio.Event()
        maskers: list[Callable[[str], str]] = []

        async def one(index: int, host: Host) -> None:
            result: HostResult | None = None
            if not stop.is_set():
                async with self.slot(host):
                    if not stop.is_set():
                        progress.start()
                        result = await self.run_on(host, command, timeout=timeout)
            if result is None:
                result = HostResult._trusted(host=host.name, status="skipped",
                                    error="not started: an earlier host failed and fail_fast is on")
            elif fail_fast and not result.ok:
                stop.set()
            results[index] = result
            if (session := self._sessions.get(host.name)) is not None:
                maskers.append(session.redact_command)  # its keyring secrets too
            progress.end(result, ran=result.status != "skipped")
            if not keep_open:
                await self.discard(host)

        async with asyncio.TaskGroup() as tasks:
            for index, host in enumerate(selected):
                tasks.create_task(one(index, host))
        done = [r for r in results if r is not None]
        # The command as shown and stored (--json, --output-dir headers): masked with what each host's
        # session masks, its known secrets first (whole, before a keyword's rule takes the first word
        # of one), then with the built-in formats and every selected host's patterns.
        shown = command
        for masker in dict.fromkeys(maskers):
            shown = masker(shown)
        shown = Redactor(sorted({p for h in selected for p in h.redact})).redact_command(shown)
        return FleetResult._trusted(command=shown, pattern=pattern, results=done,
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
