"""RemoteBashSession: one persistent bash on a remote host, with deadlines and a remote kill.

A session owns one SSH connection and one long-lived ``bash`` on an exec channel. Calls
run one after the other (a lock), each framed by a sentinel unique to the call. When a
call outruns its deadline, the processes it started are found on the remote host (by the
tag in their environment, below the shell, and as strays started since the call began:
see :mod:`remote_bash.reaper`) and signalled INT, then TERM, then KILL, over a second
channel; the shell survives unless it is the shell itself that is stuck. A kill never
claims more than it checked: what it could not tell is said in ``KillReport.unchecked``.

This module never retries a command: a lost connection ends the call with an error. What
the lost call left running on the host (the shell, adopted by init, and the command) is then
stopped before the session is done with the host: the next call reconnects and stops it
first, and ``close()`` reconnects once to stop it, within the host's connect timeout and a
short kill deadline; when it cannot, ``close()`` says so. A reconnect only ever kills: nothing
is sent again. Every command is audited before it is sent; a command that cannot be audited
is not run.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import enum
import functools
import math
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from . import _stdin, framing, reaper
from ._plain import Record
from ._ssh import Credentials, ShellChannel, SshConnection, connect
from .access import Gate
from .errors import (
    AccessDenied,
    AuditError,
    ConnectError,
    ConnectionLost,
    PolicyDenied,
    RemoteBashError,
    SessionClosed,
    SessionError,
)
from .models import CommandResult, Host, KillReport

if TYPE_CHECKING:
    from .policy import PolicyDecision

__all__ = ["AuditSink", "RemoteBashSession", "RemoteInfo", "SessionState", "default_audit", "off_by_name"]

KILL_GRACE = 1.0
"""Seconds to wait after each signal before escalating to the next."""
# More KILL rounds after the last, while the check after each still finds processes of the call.
_EMPTY_SCANS = 3
"""Scans in a row that must find nothing of a killed call before it is taken as gone."""
_KILL_REPEATS = 3
LOST_KILL_DEADLINE = 5.0
"""Seconds the kill of what a lost connection left running may take once reconnected; with the
connect timeouts of the route, what ``close()`` may spend on it."""
_LOST = "left running by a lost connection"


class AuditSink(Protocol):
    """Where a session writes its audit records (``remote_bash.audit.AuditLog`` fits)."""

    async def awrite(self, host: str, event: str, /, **fields: Any) -> dict[str, Any]: ...


class SupportsRedact(Protocol):
    """What masks secrets in text (``remote_bash.redact.Redactor`` fits)."""

    def redact(self, text: str) -> str: ...


class SessionState(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


class RemoteInfo(Record):
    """Facts about the remote side, read when the shell starts."""

    shell_pid: int
    bash_version: str
    os: str
    user: str
    address: str
    host_key: str
    started: int | None = None
    """The host's clock since boot when the shell started, in ticks (None without /proc/uptime)."""


CredentialSource = Callable[[Host], Credentials | Awaitable[Credentials]]
HostCheck = Callable[[Host, Sequence[Host]], Awaitable[None] | None]
"""Asked before connecting: raises (HostNotAllowed) to refuse the host or its route.
``remote_bash.access.Gate`` is one."""


def default_audit(redactor: SupportsRedact | None = None,
                  key_files: Mapping[str, Path | None] | None = None) -> AuditSink:
    """An audit log in the default audit directory, the one the CLI writes to: what a session
    writes to unless told otherwise. Keyed as the CLI's is: a host's ``audit_key_file`` (from
    ``key_files``, by host name), else the OS keyring's key when ``audit key init`` put one there."""
    from typing import cast

    from .audit import AuditLog, default_audit_dir, keyring_marker, load_key_file, parse_key
    from .redact import Redactor

    files = dict(key_files or {})
    lookup: Callable[[], str | None] | None = None
    if keyring_marker().exists():
        from .credentials import audit_key_lookup

        lookup = audit_key_lookup()

    def key(host: str) -> bytes | None:
        path = files.get(host)
        if path is not None:
            return load_key_file(path)
        text = lookup() if lookup is not None else None
        return None if text is None else parse_key(text, "the audit key in the OS keyring")

    log = AuditLog(default_audit_dir(), redactor=redactor if isinstance(redactor, Redactor) else None,
                   key=key)
    # AuditLog.awrite takes host and event positional-only, as AuditSink says; the cast is for the
    # keyword names of **fields, which a Protocol cannot spell out.
    return cast("AuditSink", log)


class _Call:
    """The state of the one call in flight."""

    def __init__(self, token: framing.CallToken, limit: int, on_output: Callable[[str], None] | None) -> None:
        self.token = token
        self.scanner = framing.FrameScanner(token)
        self.capture = framing.OutputCapture(limit=_capture_limit(limit))
        self.outcome: bool | None = None
        """True once the sentinel came, False once the shell ended without it; None until then."""
        self.waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        """Resolved True by the sentinel or the shell's end, False by a deadline; rearmed after."""
        self.status: int | None = None
        self.restart = False
        """The sentinel said the shell left its driver loop (see framing.driver)."""
        self.on_output = on_output
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace") if on_output else None
        self.cleaner = framing.TextCleaner() if on_output else None
        self.live: _LiveOutput | None = None
        self.sent_at = 0.0
        """When the frame was written (monotonic): the kill dates the call's start on the host by it."""
        self.noise: framing.KillNoiseFilter | None = None
        """Set once a kill began: the shell's reports of the jobs it killed are dropped."""
        self.subshell = False
        """The command may run a subshell ``( … )``: a deadline stops the shell (see framing.may_run_a_subshell)."""

    def feed(self, data: bytes) -> bytes:
        """Scan ``data``; returns the bytes that follow the sentinel, if it was found."""
        result = self.scanner.feed(data)
        out = result.data
        if self.noise is not None:
            out = self.noise.feed(out) + (self.noise.flush() if result.done else b"")
        if out:
            self.add(out)
        if result.done:
            self.status = result.status
            self.restart = result.restart
            if self.outcome is None:
                self.outcome = True
            if not self.waiter.done():
                self.waiter.set_result(True)
            return result.rest
        return b""

    def add(self, data: bytes, *, final: bool = False) -> None:
        """Output of the call: captured, and shown live when someone watches."""
        self.capture.add(data)
        if self.decoder is not None and self.on_output is not None:
            text = self.decoder.decode(data, final=final)
            if text:
                self.on_output(self.cleaner.feed(text) if self.cleaner is not None else text)

    def end(self) -> None:
        """The shell's channel closed: wake whoever waits for this call."""
        if self.outcome is None:
            self.outcome = False
        if not self.waiter.done():
            self.waiter.set_result(True)

    def rearm(self) -> None:
        """A fresh waiter after a wait ended by the deadline (the kill phase waits again)."""
        if self.waiter.done() and self.outcome is None:
            self.waiter = asyncio.get_running_loop().create_future()

    @property
    def finished(self) -> bool:
        """True when the sentinel was seen."""
        return self.outcome is True


class _LiveOutput:
    """Streams a call's output to a callback with secrets masked, across chunk boundaries.

    It is fed text with its escape sequences stripped but its ``\\r`` kept: each line is masked
    before its progress states are collapsed, as :func:`framing.clean_text` does for the result.
    The stream releases whole lines (it holds the incomplete last one), so a key and a value that
    a ``\\r`` separates are masked together even when they come in two reads."""

    def __init__(self, sink: Callable[[str], None], redactor: SupportsRedact,
                 on_error: Callable[[BaseException], None]) -> None:
        self._sink: Callable[[str], None] | None = sink
        stream = getattr(redactor, "stream", None)
        self._stream: Any = stream() if callable(stream) else None
        self._redactor = redactor
        self._on_error = on_error
        self.error: BaseException | None = None
        """What the callback raised, once it did."""

    def feed(self, text: str) -> None:
        out = self._stream.feed(text) if self._stream is not None else self._redactor.redact(text)
        if out:
            self._emit(framing.collapse_cr(out, self._redactor.redact))

    def flush(self) -> None:
        if self._stream is not None:
            out = self._stream.flush()
            if out:
                self._emit(framing.collapse_cr(out, self._redactor.redact))

    def _emit(self, text: str) -> None:
        # The caller's callback runs inside the SSH library's data callback: an exception let out
        # there would end the connection and leave the command running unwatched. It is caught,
        # the callback is not called again, and the session stops the command (see _output_failed).
        if self._sink is None:
            return
        try:
            self._sink(text)
        except (KeyboardInterrupt, SystemExit):
            raise  # the program is being stopped: not this call's error to report
        except BaseException as exc:
            self._sink = None
            self.error = exc
            self._on_error(exc)


class RemoteBashSession:
    """A persistent remote bash session.

    ::

        async with RemoteBashSession(host) as session:
            result = await session.run("cd /srv && ls", timeout=30)
    """

    # Slots: a fleet holds one session per host open at once, and an instance dictionary of these
    # thirty-odd names was about 1.5 KiB of each. ``__dict__`` too, made only when something else is
    # set on a session (a wrapped method, a caller's own tag), so that still works.
    __slots__ = (
        "__dict__", "__weakref__", "_allowed", "_audit", "_between", "_call", "_closing", "_conn", "_credentials",
        "_cut", "_deadline", "_driver_left", "_feed", "_first_started", "_gate", "_kill_grace", "_lock", "_lost_shells",
        "_names", "_orphaned", "_redact_head", "_redact_tail", "_redactor", "_running", "_shell", "_shell_lost",
        "_shells", "_stage", "_stopping", "host", "info", "jump_hosts", "last_kill", "operator", "session_id", "state",
    )

    def __init__(
        self,
        host: Host,
        *,
        jump_hosts: Sequence[Host] | None = None,
        credentials: CredentialSource | None = None,
        audit: AuditSink | Literal[False] | None = None,
        redactor: SupportsRedact | None = None,
        gate: HostCheck | Literal[False] | None = None,
        operator: str | None = None,
        kill_grace: float = KILL_GRACE,
    ) -> None:
        """``audit`` and ``gate`` are safe unless turned off by name: ``audit`` defaults to the
        host's log in the default audit directory (``audit=False``: no log); ``gate`` defaults to
        the gate of the inventory ``host`` was loaded from, when it was (``gate=False``: none).
        ``jump_hosts`` defaults to the gate's route, else to none."""
        off_by_name(audit, "audit", "an AuditSink", lambda v: hasattr(v, "awrite"))
        off_by_name(gate, "gate", "a HostCheck", callable)
        self.host = host
        self.session_id = os.urandom(6).hex()  # as random as uuid4, whose module loads platform
        self.operator = operator or _operator()
        self.info: RemoteInfo | None = None
        self.state = SessionState.NEW
        self._credentials = credentials or _default_credentials
        if redactor is None:
            redactor = _host_redactor(tuple(host.redact))
        self._redactor = redactor
        # The redactor's head/tail forms, when it has them, know where the capture cut the output.
        self._redact_head: Callable[[str], str] | None = getattr(redactor, "redact_head", None)
        self._redact_tail: Callable[[str], str] | None = getattr(redactor, "redact_tail", None)
        if audit is None:
            audit = default_audit(redactor, {host.name: host.audit_key_file})
        self._audit: AuditSink | None = None if audit is False else audit
        self._gate: HostCheck | None = (Gate.of(host, self._audit) if gate is None else
                                        None if gate is False else gate)
        if jump_hosts is None:
            jump_hosts = self._gate.route(host)[:-1] if isinstance(self._gate, Gate) else ()
        self.jump_hosts = list(jump_hosts)
        self._kill_grace = kill_grace
        self._lock = asyncio.Lock()
        self._deadline = _Deadline()
        self._conn: SshConnection | None = None
        self._shell: ShellChannel | None = None
        self._call: _Call | None = None
        self._between: framing.OutputCapture | None = None
        self._feed: _stdin.StdinFeed | None = None
        self._names = framing.ShellNames.new()
        self._driver_left = False
        """The shell left its driver loop: the next frame brings it again."""
        self._orphaned = False
        self._lost_shells: list[tuple[int, int]] = []
        """The pid and start (host clock ticks) of each shell lost with its connection and not yet stopped."""
        self._first_started: int | None = None
        """When this session's first shell started (host clock ticks). Once a later shell replaced
        it, what an earlier shell left running started after it, and close looks that far back."""
        self._shells = 0
        self._shell_lost = False
        """A shell of this session died or was replaced and no shell has been started since: its
        jobs, adopted by init, are stopped at close or restart all the same."""
        self._allowed: tuple[str, Any] | None = None
        """The command ``check_policy`` just allowed, with the policy it was checked against."""
        self._running: asyncio.Task[Any] | None = None
        self._cut: _Cut | None = None
        """The call that ``close()`` or ``restart()`` interrupted: its caller is told so, not cancelled."""
        self._closing: asyncio.Task[KillReport | None] | None = None
        """The close under way or done: a second ``close()`` waits for it, and a cancelled caller
        does not cut it short."""
        self._stage = _NOT_SENT
        """Where the call in flight is: not sent yet, sent and waited for, or ended (its result is
        being made: ``close()`` then waits for it rather than interrupt it)."""
        self._stopping: asyncio.Future[None] | None = None
        """The stop of an interrupted call, while it runs: the next use of the shell waits for it."""
        self.last_kill: KillReport | None = None
        """What the last ``restart()`` or ``close()`` did to the old shell's processes."""

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> RemoteBashSession:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect and start the shell now, rather than on the first call."""
        self._check_open()
        async with self._lock:
            self._check_open()
            await self._ensure_shell()
            if self.state is SessionState.CLOSED:
                # close() came while this connected: it ends what was just started, once this
                # lets go of the shell.
                raise SessionClosed("the session was closed while it started; open a new one", host=self.host.name)
            self.state = SessionState.OPEN

    async def close(self) -> KillReport | None:
        """End the shell (and every process it started) and the connection. Idempotent.

        Returns what was done to the shell's processes (also kept in ``last_kill``), or None when
        there was no shell to end. After a lost connection (``orphaned``) it reconnects once to stop
        what the lost call left running (see :meth:`stop_orphans`), and raises the ConnectionLost
        of that when it cannot: the session is closed all the same.

        The close runs as a task of its own: a ``close()`` while another is under way waits for it
        and returns the same report, and a caller cancelled meanwhile does not cut it short (the
        command is still stopped and the records written). Once it is done, ``close()`` returns
        None.
        """
        closing = self._closing
        if closing is None:
            if self.state is SessionState.CLOSED:
                return None
            self.state = SessionState.CLOSED
            closing = self._closing = asyncio.ensure_future(self._close(asyncio.current_task()))
        elif closing.done():
            return None
        return await asyncio.shield(closing)

    async def _close(self, caller: asyncio.Task[Any] | None) -> KillReport | None:
        cut = await self._interrupt_running("closed", caller)
        async with self._lock:
            await self._stopped()
            if self._conn is not None and self._conn.is_closed and self.info is not None:
                # Lost between calls: what earlier calls left in the background runs on there.
                self._orphan()
            report = await self._drop_shell(kill=True, closing=True)
            if cut is not None and cut.kill is not None:
                # The interrupted call's processes were stopped first: that is part of this close.
                report = _merged(cut.kill, report)
            self._deadline.cancel()
            unstopped: ConnectionLost | None = None
            if self._orphaned:
                try:
                    orphans = await self._stop_orphans()
                    if report is None or orphans.signals:
                        report = orphans
                except ConnectionLost as exc:
                    unstopped = exc
            if self._conn is not None:
                await self._conn.close()
                self._conn = None
                await self._audit_write("session.end", kill=report.model_dump() if report else None)
            if unstopped is not None:
                raise unstopped
            return report

    @property
    def orphaned(self) -> bool:
        """A connection of this session was lost while a call ran, and what that call left running
        on the host (its shell, adopted by init, and the command) has not been stopped yet."""
        return self._orphaned

    async def stop_orphans(self) -> KillReport | None:
        """Stop what a call lost with its connection left running, now: over the connection when
        one is open, else over a new one made only for this (nothing else is sent, nothing is run
        again). Bounded by the route's connect timeouts plus ``LOST_KILL_DEADLINE``. Returns None
        when the session is not ``orphaned``.

        Raises ConnectionLost, naming the host and saying that the command may still be running
        there, when the host cannot be reached or does not answer (also in the audit log, as an
        ``exec.kill`` record with the reason); the session stays ``orphaned``, so the next call
        or ``close()`` tries again."""
        self._check_open()
        async with self._lock:
            await self._stopped()
            return await self._stop_orphans() if self._orphaned else None

    async def restart(self) -> RemoteInfo:
        """Kill the shell and everything it started, and start a clean one.

        ``last_kill`` then says what was done to the old shell's processes, and what could not be
        checked."""
        self._check_open()
        await self._interrupt_running("restarted", asyncio.current_task())
        async with self._lock:
            await self._stopped()
            await self._drop_shell(kill=True)
            await self._ensure_shell()
            assert self.info is not None
            return self.info

    async def _interrupt_running(self, why: Literal["closed", "restarted"],
                                 caller: asyncio.Task[Any] | None) -> _Cut | None:
        """Stop the call in flight, if any (its remote command is killed), and wait for it. Its
        caller gets a SessionError saying so (``run`` turns this cancel into it), not a bare
        CancelledError: the task is the caller's, and nobody cancelled it but this session."""
        task = self._running
        if task is None or task.done() or task is caller:
            return None
        if self._cut is not None and self._cut.task is task:
            # Interrupted already (a restart and a close at once): one cancel, which run() turns
            # into its error; a second would make it a cancel of the caller's own.
            await asyncio.wait([task], timeout=15)
            return self._cut
        if self._stage is _ENDED:
            # The command has ended and its result and audit record are being made: the caller
            # gets them (bounded: that is a few writes and at most a 2 s wait for the channel).
            await asyncio.wait([task], timeout=15)
            return None
        cut = self._cut = _Cut(task, why, sent=self._stage is _SENT)
        task.cancel()
        await asyncio.wait([task], timeout=15)  # its outcome is its caller's; only its end matters here
        return cut

    def _output_failed(self, exc: BaseException) -> None:
        """The call's ``on_output`` callback raised: nobody watches the command any more, so it is
        stopped as a close stops it, and ``run()`` raises an error that carries the callback's.
        (Once the command has ended, its result is made as usual.)"""
        # Decided once this read is scanned: when the sentinel came in it, the command has ended
        # and _finish says so with the result, instead of a stop of nothing.
        asyncio.get_running_loop().call_soon(self._stop_unwatched, self._call, exc)

    def _stop_unwatched(self, call: _Call | None, exc: BaseException) -> None:
        task = self._running
        if task is None or task.done() or self._stage is not _SENT or self._cut is not None:
            return
        if call is None or self._call is not call or call.outcome is not None:
            return
        self._cut = _Cut(task, "output", sent=True)
        self._cut.cause = exc
        task.cancel()

    def _cut_short(self, cut: _Cut) -> SessionError:
        """The error for the caller of a call that ``close()`` or ``restart()`` interrupted."""
        what = ("the session was closed" if cut.why == "closed" else "the shell was restarted" if cut.why == "restarted"
                else f"the on_output callback raised {type(cut.cause).__name__}: {cut.cause}")
        kill = cut.kill
        if not cut.sent:  # cancelled while connecting, starting the shell or writing exec.start
            said = "before the command was sent; it did not run"
        elif kill is None:
            said = ("while the command ran, and the command could not be stopped by itself: the session's "
                    f"{'end' if cut.why == 'closed' else 'restart'} stops what the session left running")
        else:
            said = "while the command ran; it was stopped"
            said += f" (signals sent: {', '.join(kill.signals)})" if kill.signals else " (it had ended)"
            if kill.survivors:
                said += f", but {kill.survivors} of its processes could not be killed"
            if kill.unchecked:
                said += f"; not checked: {kill.unchecked}"
        said += ". It is not run again"
        if cut.audit_error:
            said += f". Its exec.end audit record could not be written: {cut.audit_error}"
        error = SessionClosed if cut.why == "closed" else SessionError
        return error(f"{what} {said}", host=self.host.name)

    async def _abandon(self, conn: SshConnection) -> None:
        """Drop a connection that stopped answering; the next connect, or close, cleans up after it."""
        self._shell = None
        self._call = None
        self._orphan()
        if self._conn is conn:
            self._conn = None
        with contextlib.suppress(Exception):
            await conn.close()

    def _check_open(self) -> None:
        if self.state is SessionState.CLOSED:
            raise SessionClosed("this session was closed; open a new one", host=self.host.name)

    # -- connection and shell --------------------------------------------------------

    async def _connect(self) -> SshConnection:
        if self._gate is not None:
            gated = self._gate(self.host, self.jump_hosts)
            if gated is not None:
                await gated
        chain = [*self.jump_hosts, self.host]
        creds: list[Credentials] = []
        for hop in chain:
            got = self._credentials(hop)
            creds.append(await got if isinstance(got, Awaitable) else got)
        try:
            return await connect(chain, creds)
        except ConnectError as exc:
            await self._audit_write("connect.error", error=str(exc), error_type=type(exc).__name__,
                                    strict=False)
            raise

    async def _ensure_shell(self) -> None:
        await self._stopped()
        if self._shell is not None and not self._shell.closed.is_set() and not self._shell.exited:
            return
        if self._conn is None or self._conn.is_closed:
            self._conn = await self._connect()
            if self._orphaned:
                # Before anything else is sent: the lost call's shell must not go on to the rest
                # of its command text alongside the next call.
                with contextlib.suppress(RemoteBashError):
                    await self._kill_orphans(self._conn, timeout=10)
        conn = self._conn
        shell = await conn.open_shell(framing.SHELL_COMMAND)
        self._shell = shell
        self._names = framing.ShellNames.new()
        self._driver_left = False
        shell.on_data = self._on_data
        shell.on_closed = self._on_shell_closed
        token = framing.CallToken.new()
        startup = _Call(token, 8192, None)
        self._call = startup
        ulimits = _ulimits(self.host)
        env = {**self.host.env, "REMOTE_BASH_SESSION": self.session_id}
        try:
            try:
                shell.write(framing.init_script(token, self._names, env, ulimits, self.host.limits.nice))
            except ConnectionLost:
                if not (shell.closed.is_set() or shell.exited):
                    raise
                # The far side ended the channel before the script could go (a ForceCommand that
                # exits at once): said below, with what it printed and its exit status.
            else:
                await self._wait(startup, shell, self.host.connect_timeout)
                if not startup.finished and shell.exited and not shell.closed.is_set() and not conn.is_closed:
                    # sshd sends the exit status as soon as the process ends, which can be before
                    # the rest of what it printed (a ForceCommand's message) has been sent: that
                    # is all here only once the channel has closed.
                    await _first_of(shell.closed, conn.lost, timeout=2)
        except (Exception, asyncio.CancelledError):
            # Cancelled or failed half-way: this shell's start-up output must not reach a call.
            self._call = None
            self._shell = None
            shell.close()
            raise
        self._call = None
        text = bytes(startup.capture.head).decode("utf-8", "replace")
        if not startup.finished:
            ended = shell.closed.is_set() or shell.exited
            status = shell.exit_status if ended else None
            signal_name = shell.exit_signal if ended else None
            shell.close()
            self._shell = None
            if ended:
                # The far side ended the channel: a ForceCommand or a login shell that exits, not a slow start.
                how = (f"exit status {status}" if status is not None
                       else f"signal {signal_name}" if signal_name else "no exit status")
                raise SessionError(
                    f"the remote side closed the shell channel before bash started ({how}); is a ForceCommand "
                    f"or the account's login shell in the way on {self.host.hostname}? It printed: {text[-300:]!r}",
                    host=self.host.name,
                )
            raise SessionError(
                f"the remote bash did not start within {self.host.connect_timeout:g} s "
                f"(is bash installed on {self.host.hostname}?); it printed: {text[-300:]!r}",
                host=self.host.name,
            )
        problems = [line[6:] for line in text.splitlines() if line.startswith("RBERR ")]
        info_line = next((line for line in text.splitlines() if line.startswith("RBINFO ")), "")
        parts = [*info_line[7:].split("|"), "", "", "", "", ""][:5]
        # Interned: the sessions of a fleet share these few strings rather than hold a copy each.
        self.info = RemoteInfo(
            shell_pid=int(parts[0]) if parts[0].isdigit() else 0,
            bash_version=sys.intern(parts[1]),
            os=sys.intern(parts[2]),
            user=sys.intern(parts[3]),
            address=conn.peer_address,
            host_key=conn.host_key_fingerprint,
            started=reaper.uptime_ticks(parts[4]),
        )
        self._shells += 1
        self._shell_lost = False
        if self._shells == 1:
            self._first_started = self.info.started
        await self._audit_write(
            "session.start", bash_version=self.info.bash_version, os=self.info.os,
            shell_pid=self.info.shell_pid, host_key_accepted_new=conn.host_key_accepted_new,
            host_key_ca=conn.host_key_ca or None,
            jump_host_keys_accepted_new=conn.jump_host_keys_accepted_new or None,
            problems=problems or None, strict=False,
        )
        if problems:
            await self._drop_shell(kill=True)
            raise SessionError(
                "the remote shell could not apply the configured limits: " + "; ".join(problems)
                + ". Lower them in the inventory or raise the hard limits on the host",
                host=self.host.name,
            )

    def _on_shell_closed(self) -> None:
        if self._call is not None:
            self._call.end()

    def _on_data(self, data: bytes) -> None:
        call = self._call
        if call is None:
            # Output of background jobs between calls: kept (bounded, counted) for the next call.
            if self._between is None:
                self._between = framing.OutputCapture(limit=_capture_limit(self.host.output_limit))
            self._between.add(data)
            return
        rest = call.feed(data)
        if call.restart:
            self._driver_left = True
        if rest:
            self._call = None
            self._on_data(rest)

    async def _drop_shell(self, *, kill: bool, closing: bool = False) -> KillReport | None:
        """End the shell (with ``kill``, everything the session left running first). ``closing``:
        the connection is closed right after, which ends the channel with it: a shell that
        reported the end of its kill script is then not sent a channel close of its own (two
        packets each way, and a wait for the answer)."""
        shell, self._shell = self._shell, None
        self._between = None
        if shell is None:
            if kill and self._shell_lost:
                return await self._stop_what_a_lost_shell_left()
            return None
        tag = f"{reaper.SESSION_ENV}={self.session_id}"
        conn = self._conn
        info = self.info
        report: KillReport | None = None
        if kill and conn is not None and not conn.is_closed and info is not None:
            # Strays (daemons that left the shell's tree and rewrote their environment) are looked
            # for among the processes started since the shell itself.
            since = info.started - 1 if info.started is not None else None
            if self._shells > 1 and since is not None:
                # An earlier shell of this session died or was replaced: its jobs, adopted by init,
                # are older than this shell. Look back to the first one (a host that rebooted since
                # has a younger clock: then the current shell's start stands).
                since = min(since, self._first_started - 1) if self._first_started is not None else None
            out = b""
            alive = not shell.closed.is_set() and not shell.exited
            if alive:
                # The idle shell replaces itself with the kill script: no second channel needed.
                # Its report, not the channel's end, says it is done: a stray that escaped may
                # hold the channel open.
                got = bytearray()
                reported = asyncio.Event()

                def collect(data: bytes) -> None:
                    got.extend(data)
                    if reaper.reported(got):
                        reported.set()

                shell.on_data = collect
                with contextlib.suppress(RemoteBashError):
                    shell.write(framing.exit_frame(reaper.end_script(tag, info.shell_pid, since), self._names,
                                                   restart=self._driver_left))
                await _first_of(reported, shell.closed, timeout=10)
                out = bytes(got)
            if not reaper.reported(out):
                with contextlib.suppress(RemoteBashError):
                    _status, text = await conn.run_side(reaper.kill_script(
                        tag, "KILL", also_pid=info.shell_pid, below=info.shell_pid, since=since), timeout=10)
                    out = text.encode()
            report = await self._session_end_report(out.decode("utf-8", "replace"), since)
            if closing and reaper.reported(out) and self._conn is conn:
                return report
        shell.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(shell.closed.wait(), 2)
        return report

    async def _stop_what_a_lost_shell_left(self) -> KillReport | None:
        """At close or restart with no shell: what a shell of this session that died (or was
        replaced) left running is stopped by the session's tag, strays looked for since the
        session's first shell started."""
        self._shell_lost = False
        conn = self._conn
        if conn is None or conn.is_closed:
            return None  # a lost connection: the next connect stops them (see _kill_orphans)
        since = self._first_started - 1 if self._first_started is not None else None
        try:
            _status, text = await conn.run_side(reaper.kill_script(
                f"{reaper.SESSION_ENV}={self.session_id}", "KILL", since=since, login_strays=True), timeout=10)
        except RemoteBashError:
            return None
        return await self._session_end_report(text, since)

    async def _session_end_report(self, out: str, since: int | None) -> KillReport:
        """The report of a session-end kill script's output, kept as ``last_kill`` and audited when
        it stopped or could not check something."""
        scan = reaper.parse_kill_output(out)
        report = KillReport._trusted(signals=["KILL"] if scan.count else [], survivors=0, cgroup=scan.cgroup,
                                     unchecked=_unchecked(scan, since, "the session"))
        self.last_kill = report
        if scan.count or report.unchecked:
            await self._audit_write("exec.kill", reason="session end", kill=report.model_dump(),
                                    processes=scan.count, strict=False)
        return report

    # -- running commands ------------------------------------------------------------

    def clamp_timeout(self, timeout: float | None) -> float:
        """The deadline that applies: the host default when None, never above max_timeout."""
        value = self.host.command_timeout if timeout is None else float(timeout)
        if not value > 0:  # NaN too: no deadline could be kept, nor recorded in the audit log
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
        return min(value, self.host.max_timeout)

    async def run(
        self,
        command: str,
        timeout: float | None = None,
        *,
        tool_use_id: str | None = None,
        on_output: Callable[[str], None] | None = None,
        stdin: _stdin.StdinSource | None = None,
    ) -> CommandResult:
        """Run ``command`` in the shell and return its result.

        ``stdin`` is the command's input (bytes, a binary file object or an async iterable of
        bytes), streamed to it as it reads (see :mod:`remote_bash._stdin`); without it the command
        reads /dev/null.

        Raises PolicyDenied (never sent), AuditError (not run), ConnectError (could not
        connect) or ConnectionLost (the connection died mid-call; the command is not re-run).
        """
        self._check_open()
        if not isinstance(command, str):
            raise TypeError(f"command must be a str, got {type(command).__name__}")
        deadline_s = self.clamp_timeout(timeout)
        if stdin is not None:
            _stdin.check_source(stdin)
        try:
            self._check_policy(command)
        except PolicyDenied as exc:
            await self.audit_denied(exc, command, tool_use_id)
            raise
        async with self._lock:
            self._check_open()
            if self.state is SessionState.NEW:
                self.state = SessionState.OPEN
            self._running = task = asyncio.current_task()
            self._stage = _NOT_SENT
            try:
                shell = self._shell
                if self._stopping is not None or shell is None or shell.closed.is_set() or shell.exited:
                    await self._ensure_shell()
                if stdin is not None:
                    return await self._run_fed(command, deadline_s, tool_use_id, on_output, stdin)
                return await self._run_locked(command, deadline_s, tool_use_id, on_output)
            except asyncio.CancelledError:
                cut = self._cut
                # Only this session's own cancel becomes an error; one from anyone else (Ctrl-C, a
                # timeout around the call, a task group) stays a cancel, as asyncio.timeout does it.
                if cut is None or task is None or cut.task is not task or task.cancelling() != 1:
                    raise
                task.uncancel()
                raise self._cut_short(cut) from cut.cause
            finally:
                self._running = None
                if self._cut is not None and self._cut.task is task:
                    self._cut = None

    async def _run_fed(self, command: str, timeout: float, tool_use_id: str | None,
                       on_output: Callable[[str], None] | None, stdin: _stdin.StdinSource) -> CommandResult:
        """A call whose command reads ``stdin`` from a FIFO on the host, fed while it runs."""
        assert self._conn is not None
        feed = _stdin.StdinFeed(stdin, host=self.host.name, session_id=self.session_id)
        await feed.open(self._conn)
        self._feed = feed
        try:
            return await self._run_locked(command, timeout, tool_use_id, on_output)
        finally:
            self._feed = None
            await asyncio.shield(feed.close())

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[SshConnection]:
        """Hold the session between commands and yield its connection (connecting through the
        host gate when needed): no command of this session runs until the block ends. The text
        editor works on the host inside such a block, so an edit never interleaves with a command."""
        self._check_open()
        async with self._lock:
            self._check_open()
            if self.state is SessionState.NEW:
                self.state = SessionState.OPEN
            await self._ensure_shell()
            assert self._conn is not None
            yield self._conn

    async def recheck_host_keys(self) -> None:
        """Before reusing the open connection: raise the error connecting would give when a host key
        it accepted (the host's or a jump host's) is no longer trusted by its known_hosts file as it
        reads now, audited as a refused connect is. The caller then closes the session."""
        conn = self._conn
        if conn is None or conn.is_closed:
            return
        try:
            await asyncio.to_thread(conn.recheck_host_keys)  # reads a file: off the event loop
        except ConnectError as exc:
            await self._audit_write("connect.error", error=str(exc), error_type=type(exc).__name__,
                                    strict=False)
            raise

    async def audit(self, event: str, *, strict: bool = False, **fields: Any) -> None:
        """Write an audit record with this session's fields; ``strict`` raises AuditError on failure."""
        await self._audit_write(event, strict=strict, **fields)

    def check_policy(self, command: str) -> PolicyDecision | None:
        """The host's command policy's decision on ``command``, or None when it has no rules. For
        callers that refuse before asking the session (the fleet does, so that a refused command
        opens no connection): ``run`` of the command just allowed does not check it a second time."""
        policy = self.host.policy
        if policy.allow is None and not policy.deny:
            return None
        from .policy import check_command

        decision = check_command(command, policy)
        self._allowed = (command, policy) if decision.allowed else None
        return decision

    def _check_policy(self, command: str) -> None:
        allowed, self._allowed = self._allowed, None
        if allowed is not None and allowed[0] == command and allowed[1] is self.host.policy:
            return
        decision = self.check_policy(command)
        self._allowed = None
        if decision is not None and not decision.allowed:
            raise PolicyDenied(decision.reason, host=self.host.name, rule=decision.rule)

    async def audit_denied(self, exc: AccessDenied, command: str, tool_use_id: str | None) -> None:
        """Record a refusal. ``run`` records its own policy refusals and the gate its host refusals;
        this is for callers that refuse before asking the session (the fleet checks policy first)."""
        event = "policy.denied" if isinstance(exc, PolicyDenied) else "host.denied"
        await self._audit_write(event, command=command, tool_use_id=tool_use_id, rule=getattr(exc, "rule", None),
                                error=exc.message, strict=False)

    async def _run_locked(self, command: str, timeout: float, tool_use_id: str | None,
                          on_output: Callable[[str], None] | None) -> CommandResult:
        assert self._shell is not None and self._conn is not None
        shell, conn = self._shell, self._conn
        token = framing.CallToken.new()
        frame = framing.frame_command(command, token, self._names, restart=self._driver_left,
                                      stdin=self._feed.path if self._feed is not None else None)
        if self._audit is not None:
            await self._audit_write("exec.start", command=command, tool_use_id=tool_use_id, timeout=timeout,
                                    call_id=token.call_id, strict=True)
        live = _LiveOutput(on_output, self._redactor, self._output_failed) if on_output is not None else None
        call = _Call(token, self.host.output_limit, live.feed if live is not None else None)
        call.live = live
        call.subshell = framing.may_run_a_subshell(command)
        if self._between is not None:
            # What background jobs printed since the last call opens this call's output,
            # counted and hashed like the rest of it.
            call.capture, self._between = self._between, None
        self._call = call
        kill: KillReport | None = None
        timed_out = False
        started = call.sent_at = time.monotonic()
        try:
            shell.write(frame)
            self._stage = _SENT
            self._driver_left = False
            if self._feed is not None:
                self._feed.start()  # after the frame: the writer opens the FIFO only once it is on its way
            if not await self._wait(call, shell, timeout):
                timed_out = True
                kill = await self._kill_timed_out(call, shell, conn, timeout)
        except asyncio.CancelledError:
            # Ctrl-C or a cancelled task: the remote command must not run on unattended. Its stop
            # runs as a task of its own, so that a second cancel cannot cut it short; the next use
            # of the shell waits for it (_stopped).
            cut = self._cut if self._cut is not None and self._cut.task is asyncio.current_task() else None
            self._stopping = asyncio.ensure_future(
                self._stop_interrupted(call, shell, conn, command, tool_use_id, started, cut))
            await asyncio.shield(self._stopping)
            raise
        except Exception:
            self._call = None
            raise
        self._stage = _ENDED
        self._call = None
        duration = time.monotonic() - started
        return await self._finish(command, call, shell, conn, timeout, timed_out, kill, duration, tool_use_id)

    async def _kill_timed_out(self, call: _Call, shell: ShellChannel, conn: SshConnection,
                              timeout: float) -> KillReport:
        try:
            return await self._kill_call(call, shell, conn, "timeout")
        except RemoteBashError as exc:
            # The kill channel did not answer: nothing more can be said of this host.
            await self._abandon(conn)
            raise ConnectionLost(
                f"the command outran its {timeout:g} s deadline and the host did not answer the "
                f"kill ({exc.message}); the connection was dropped and the next call reconnects and "
                "stops what is left of it", host=self.host.name,
            ) from exc

    async def _stop_interrupted(self, call: _Call, shell: ShellChannel, conn: SshConnection, command: str,
                                tool_use_id: str | None, started: float, cut: _Cut | None) -> None:
        """Kill what an interrupted call started, drop the shell when its sentinel did not come
        (it may still come: this shell cannot be trusted with the next call), and audit the end."""
        kill: KillReport | None = None
        try:
            kill = await self._kill_call(call, shell, conn, "interrupted")
            if cut is not None:
                cut.kill = kill
        except RemoteBashError:
            # The kill channel failed: the sentinel did not come, so the shell is dropped below.
            # With the connection gone, what the call left is stopped as a lost call's is.
            if conn.is_closed:
                self._orphan()
        finally:
            if self._call is call:
                self._call = None
        if not call.finished:
            with contextlib.suppress(RemoteBashError):
                await self._drop_shell(kill=True)
        text, truncated = self._render(call.capture)  # what the interrupted command printed is recorded too
        failed = await self._audit_write(
            "exec.end", command=command, tool_use_id=tool_use_id, call_id=call.token.call_id, interrupted=True,
            kill=kill.model_dump() if kill else None, duration=round(time.monotonic() - started, 6),
            **_output_fields(call.capture, text, truncated, await _sha256(call.capture)), strict=False)
        if cut is not None:
            cut.audit_error = failed  # said to the caller, as a result's audit_error is

    async def _stopped(self) -> None:
        """Wait for the stop of an interrupted call, if one is under way. Waiting is cancellable;
        the stop itself is not cut short by it."""
        stopping = self._stopping
        if stopping is not None:
            await asyncio.wait([stopping])
            self._stopping = None

    async def _wait(self, call: _Call, shell: ShellChannel, timeout: float) -> bool:
        """Wait for the sentinel, the shell's end, or the deadline. True unless the deadline passed."""
        if call.outcome is not None:
            return True
        if shell.closed.is_set() or shell.exited:
            call.end()
            return True
        # A bare future and the session's one timer: asyncio.wait would add a waiter and callbacks,
        # and a timer of its own would be made and cancelled, per call.
        waiter = call.waiter
        timer = self._deadline.arm(waiter, timeout)
        try:
            return await waiter
        finally:
            if timer is None:
                self._deadline.disarm(waiter)
            else:
                timer.cancel()
            call.rearm()

    async def _kill_call(self, call: _Call, shell: ShellChannel, conn: SshConnection, why: str) -> KillReport:
        """Signal the call's processes INT, TERM, KILL; replace the shell if it is the shell that hangs.

        The first round (INT, which also aborts the rest of the command text) reads the host's
        clock, which dates the call's start there; later rounds also look for strays started
        since then (see :mod:`remote_bash.reaper`)."""
        if call.noise is None:
            call.noise = framing.KillNoiseFilter()
        tag = f"{framing.CALL_ENV}={call.token.call_id}"
        sent: list[str] = []
        survivors = 0
        shell_pid = self.info.shell_pid if self.info else None
        since: int | None = None
        last = reaper.KillScan()
        for sig in ("INT", "TERM", "KILL"):
            if shell.closed.is_set() or shell.exited:
                break
            scan, replied = await self._signal(conn, tag, sig, since=since,
                                               abort_pid=shell_pid if sig == "INT" else None, stop=call.subshell)
            if since is None:
                since = _call_start(call, scan, replied)
            else:
                last = scan
            found = scan.count
            if found > scan.termed and sig not in sent:
                sent.append(sig)
            if scan.termed and "TERM" not in sent:
                sent.append("TERM")  # those that ignore INT got TERM in its round
            await self._wait(call, shell, self._kill_grace if found or sig == "INT" else 0.05)
            if call.finished:
                last = await self._survivors(conn, tag, since)
                survivors = last.count
                if survivors == 0:
                    break
        replaced = False
        if not call.finished and not shell.closed.is_set() and not shell.exited:
            # Nothing of the command left to signal, yet no sentinel: the shell itself is stuck
            # (a builtin loop, say). Its state cannot be saved; replace it.
            if shell_pid:
                await conn.run_side(reaper.kill_script(tag, "KILL", also_pid=shell_pid, below=shell_pid,
                                                       untagged_only=True, since=since), timeout=5)
                sent.append("KILL shell")
            await self._wait(call, shell, 2.0)
            replaced = True
        if not shell.closed.is_set() or replaced:
            last = await self._survivors(conn, tag, since)
            survivors = last.count
        # A scan can miss what a loaded host let run on between its scans (a chain that re-forks
        # faster than the freeze reads /proc): while the check still finds some, KILL again, bounded.
        for _ in range(_KILL_REPEATS):
            if not survivors:
                break
            scan, _replied = await self._signal(conn, tag, "KILL", since=since)
            if scan.count and "KILL" not in sent:
                sent.append("KILL")
            last = await self._survivors(conn, tag, since)
            survivors = last.count
        report = KillReport._trusted(signals=sent, survivors=survivors, shell_replaced=replaced, cgroup=last.cgroup,
                                     unchecked=_unchecked(last, since, "the command"))
        await self._audit_write("exec.kill", call_id=call.token.call_id, reason=why, kill=report.model_dump(),
                                strict=False)
        return report

    async def _survivors(self, conn: SshConnection, tag: str, since: int | None) -> reaper.KillScan:
        """What is left of the call: a scan that finds nothing is trusted only when the next ones
        (``_EMPTY_SCANS`` in a row) find nothing either. One scan reads /proc in pid order, and a
        chain that re-forks can be between two of its pids as it passes (a pid reused below it)."""
        scan = reaper.KillScan()
        for _ in range(_EMPTY_SCANS):
            scan, _replied = await self._signal(conn, tag, "0", since=since)
            if scan.count:
                break
        return scan

    async def _signal(self, conn: SshConnection, tag: str, sig: str, *, since: int | None,
                      abort_pid: int | None = None, stop: bool = False) -> tuple[reaper.KillScan, float]:
        """Send ``sig`` to the call's processes: those with its tag, the shell's children that carry
        no tag at all (they cleared their environment) and, with ``since``, strays in the login's
        cgroup. Returns what the script reported and when its answer came (monotonic)."""
        shell_pid = self.info.shell_pid if self.info else None
        script = reaper.kill_script(tag, sig, abort_pid=abort_pid, below=shell_pid, untagged_only=True,
                                    since=since, abort_stop=stop)
        _status, out = await conn.run_side(script, timeout=10)
        return reaper.parse_kill_output(out), time.monotonic()

    async def _finish(self, command: str, call: _Call, shell: ShellChannel, conn: SshConnection, timeout: float,
                      timed_out: bool, kill: KillReport | None, duration: float,
                      tool_use_id: str | None) -> CommandResult:
        shell_lost = not call.finished
        if shell_lost:
            # The sentinel never came: the shell ended (exit, exec, kill -9 $$, set -e) or the
            # connection died. Keep what it printed; never re-run the command. Its last words (bash's
            # "unbound variable") may still be on their way behind its exit status: they are this
            # call's, not the next one's, so the call takes them until the channel has closed.
            if not shell.closed.is_set() and not conn.is_closed:
                self._call = call
                try:
                    await _first_of(shell.closed, conn.lost, timeout=2)
                finally:
                    self._call = None
            held = call.scanner.pending()
            if call.noise is not None:
                held = call.noise.feed(held) + call.noise.flush()
            call.add(held, final=True)
            await self._settle(shell, conn)
            self._shell = None
            self._shell_lost = True
            if not conn.is_closed:
                # The shell is gone, but what it was running may not be (a child holding its
                # output open): nothing of a dead shell's call may run on unattended.
                with contextlib.suppress(RemoteBashError):
                    await conn.run_side(reaper.kill_script(f"{framing.CALL_ENV}={call.token.call_id}", "KILL"),
                                        timeout=5)
                shell.close()
            if conn.is_closed or (shell.exit_status is None and shell.exit_signal is None and not
                                  (kill and kill.shell_replaced)):
                text, _ = self._render(call.capture)
                error = f"the connection to {self.host.hostname} was lost while the command ran"
                if conn.lost_error:
                    error += f" ({conn.lost_error})"
                await self._audit_write("exec.end", command=command, tool_use_id=tool_use_id,
                                        call_id=call.token.call_id, error=error, exit_code=None,
                                        duration=round(duration, 6), output_bytes=call.capture.total,
                                        output_sha256=await _sha256(call.capture), strict=False)
                if call.live is not None:
                    call.live.flush()
                self._conn = None
                self._orphan()
                with contextlib.suppress(Exception):
                    await conn.close()
                raise ConnectionLost(
                    error + "; it was not re-run, and its effects are unknown. The next call, or closing the "
                    "session, reconnects to stop what it left running", host=self.host.name, partial_output=text,
                )
        if call.live is not None:
            call.live.flush()
        exit_code: int | None
        if shell_lost:
            exit_code = shell.exit_status if not timed_out else None
        else:
            exit_code = call.status
            if timed_out:
                exit_code = None
        text, truncated = self._render(call.capture)
        sha256 = await _sha256(call.capture)
        audit_error = None
        if self._audit is not None:  # the record's fields cost a few microseconds to build
            audit_error = await self._audit_write(
                "exec.end", command=command, tool_use_id=tool_use_id, call_id=call.token.call_id,
                exit_code=exit_code, duration=round(duration, 6), timed_out=timed_out, shell_lost=shell_lost,
                exit_signal=shell.exit_signal if shell_lost else None,
                kill=kill.model_dump() if kill else None, **_output_fields(call.capture, text, truncated, sha256),
                strict=False,
            )
        result = CommandResult._from_session(
            command=self.redact_command(command),  # shown and stored (--json, fleet files): masked like the output
            output=text,
            exit_code=exit_code,
            timed_out=timed_out,
            truncated=truncated,
            shell_lost=shell_lost,
            duration=duration,
            output_bytes=call.capture.total,
            output_sha256=sha256,
            timeout=timeout,
            kill=kill,
            audit_error=audit_error,
        )
        failed = call.live.error if call.live is not None else None
        if failed is not None:
            # The callback raised on the last of the output, once the command had ended: nothing
            # was left to stop, and the result stands. Said all the same, with the result on it.
            ended = (f"exit status {exit_code}" if exit_code is not None
                     else "timed out and killed" if timed_out else "the shell ended")
            said = SessionError(
                f"the on_output callback raised {type(failed).__name__}: {failed} on the command's last output, "
                f"after the command ended ({ended}); the result is on this error's 'result'",
                host=self.host.name)
            said.result = result  # type: ignore[attr-defined]
            raise said from failed
        return result

    async def _settle(self, shell: ShellChannel, conn: SshConnection) -> None:
        """After the shell's channel closed: wait briefly so a dying connection shows as such."""
        if conn.is_closed:
            return
        if shell.exit_status is None and shell.exit_signal is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(conn.lost.wait(), 2.0)

    async def _kill_orphans(self, conn: SshConnection, *, timeout: float) -> KillReport:
        """After a lost connection: stop what the lost shell and its commands left running.
        Raises RemoteBashError when the kill does not answer (the session stays orphaned)."""
        _status, out = await conn.run_side(self._orphan_script(), timeout=timeout)
        self._orphaned = False
        self._lost_shells.clear()
        # One report per script run: a lost shell's, then the tag's.
        count = sum(int(line[7:]) for line in out.splitlines() if line.startswith("RBKILL ") and line[7:].isdigit())
        scan = reaper.parse_kill_output(out)
        report = KillReport._trusted(signals=["KILL"] if count else [], survivors=0, cgroup=scan.cgroup,
                                     unchecked=_script_unchecked(scan, "the lost call"))
        self.last_kill = report
        if count or report.unchecked:
            await self._audit_write("exec.kill", reason=_LOST, kill=report.model_dump(), processes=count,
                                    strict=False)
        return report

    def _orphan(self) -> None:
        """The connection was lost (with a call in flight, or between calls): mark the session, and
        note its shell."""
        self._orphaned = True
        info = self.info
        if info is not None and info.shell_pid and info.started is not None:
            shell = (info.shell_pid, info.started)
            if shell not in self._lost_shells:
                self._lost_shells.append(shell)

    def _orphan_script(self) -> str:
        """The kill of what lost connections left (see :func:`reaper.orphan_script`)."""
        return reaper.orphan_script(f"{reaper.SESSION_ENV}={self.session_id}", self._lost_shells)

    async def _stop_orphans(self) -> KillReport:
        """:meth:`stop_orphans`, the lock held."""
        conn = self._conn if self._conn is not None and not self._conn.is_closed else None
        own: SshConnection | None = None
        bound = sum(hop.connect_timeout for hop in (*self.jump_hosts, self.host)) + LOST_KILL_DEADLINE
        try:
            async with asyncio.timeout(bound):
                if conn is None:
                    conn = own = await self._connect()
                return await self._kill_orphans(conn, timeout=LOST_KILL_DEADLINE)
        except (RemoteBashError, TimeoutError) as exc:
            reason = (exc.message if isinstance(exc, RemoteBashError)
                      else f"no answer within {bound:g} s")
            where = self.host.hostname
            error = (f"the connection to {where} was lost (no command was re-run), and "
                     f"reconnecting to stop what it left running failed ({reason}): the command may still "
                     f"be running on {where}")
            await self._audit_write("exec.kill", reason=_LOST, error=error, strict=False)
            raise ConnectionLost(error, host=self.host.name) from exc
        finally:
            if own is not None:
                with contextlib.suppress(Exception):
                    await own.close()

    def redact(self, text: str) -> str:
        """``text`` with the secrets this session's redactor knows masked, as its output and audit
        records are (transcripts use it for the commands Claude writes)."""
        return self._redact(text)

    def redact_command(self, text: str) -> str:
        """A command's text as it is shown and stored: masked, and masked as its lines joined where a
        backslash-newline continues one (:meth:`remote_bash.redact.Redactor.redact_command`; a
        redactor of one's own without ``redact_command`` masks it as any text)."""
        if self._redactor is None:
            return text
        joining = getattr(self._redactor, "redact_command", None)
        return joining(text) if callable(joining) else self._redactor.redact(text)

    def redact_lines(self, text: str) -> str:
        """``text`` masked as :meth:`redact` masks it, with each line kept in its place (a secret over
        several lines becomes a mask on each): what a numbered view of a file needs. A redactor of
        one's own without ``redact_lines`` masks the whole text, and, when that changes the number of
        lines, the editor masks each line alone."""
        if self._redactor is None:
            return text
        keeping = getattr(self._redactor, "redact_lines", None)
        return keeping(text) if callable(keeping) else self._redactor.redact(text)

    def _redact(self, text: str) -> str:
        return self._redactor.redact(text) if self._redactor is not None else text

    def _render(self, capture: framing.OutputCapture) -> tuple[str, bool]:
        return framing.render_output(capture, self.host.output_limit, self._redact,
                                     redact_head=self._redact_head, redact_tail=self._redact_tail)

    async def _audit_write(self, event: str, *, strict: bool = False, **fields: Any) -> str | None:
        """Write a record; with ``strict`` a failure raises AuditError, else it is returned as text
        (for a record written after the command ran: the command was run all the same)."""
        if self._audit is None:
            return None
        if self._feed is not None:
            fields = {**fields, **self._feed.audit_fields(event)}
        record = {k: v for k, v in fields.items() if v is not None}
        if isinstance(record.get("command"), str):
            record["command"] = self.redact_command(record["command"])
        record.setdefault("session_id", self.session_id)
        record.setdefault("address", self.host.address)
        record.setdefault("user", self.host.user or (self.info.user if self.info else None))
        record.setdefault("operator", self.operator)
        # After close the connection is gone, but session.end still names the key it accepted.
        host_key = self._conn.host_key_fingerprint if self._conn is not None else (
            self.info.host_key if self.info is not None else "")
        if host_key:
            record.setdefault("host_key", host_key)
        try:
            await self._audit.awrite(self.host.name, event, **record)
        except AuditError as exc:
            if strict:
                raise
            return _after_the_fact(exc.message, event, self.host.name)
        except OSError as exc:
            if strict:
                raise AuditError(f"cannot write the audit log ({exc}); the command was not run",
                                 host=self.host.name) from exc
            return _after_the_fact(f"cannot write the audit log ({exc})", event, self.host.name)
        return None


class _Settable(Protocol):
    def wait(self) -> Coroutine[Any, Any, object]: ...


_NOT_SENT, _SENT, _ENDED = "not sent", "sent", "ended"


class _Cut:
    """A call that ``close()`` or ``restart()`` interrupted: by what, and what was done to it."""

    __slots__ = ("audit_error", "cause", "kill", "sent", "task", "why")

    def __init__(self, task: asyncio.Task[Any], why: Literal["closed", "restarted", "output"], *, sent: bool) -> None:
        self.task = task
        self.why = why
        self.sent = sent
        """The command had been sent (else the cancel came while connecting or starting the shell)."""
        self.kill: KillReport | None = None
        self.audit_error: str | None = None
        self.cause: BaseException | None = None
        """What the caller's ``on_output`` raised, when that is what stopped the call."""


def _merged(first: KillReport, then: KillReport | None) -> KillReport:
    """One report of two kills in a row: an interrupted call's, then the session end's."""
    if then is None:
        return first
    unchecked = "; ".join(dict.fromkeys(u for u in (first.unchecked, then.unchecked) if u)) or None
    return KillReport._trusted(signals=[*first.signals, *(s for s in then.signals if s not in first.signals)],
                               survivors=then.survivors, shell_replaced=first.shell_replaced or then.shell_replaced,
                               cgroup=first.cgroup or then.cgroup, unchecked=unchecked)


async def _first_of(*events: _Settable, timeout: float) -> None:
    """Wait until one of ``events`` is set, or ``timeout`` seconds; whichever comes first."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def _output_fields(capture: framing.OutputCapture, text: str, truncated: bool, sha256: str) -> dict[str, object]:
    """What an ``exec.end`` record says of the output: its size, digest, head and tail as shown."""
    return {"output_bytes": capture.total, "output_sha256": sha256, "output_head": text[:500],
            "output_tail": text[-500:] if len(text) > 500 else None, "truncated": truncated}


async def _sha256(capture: framing.OutputCapture) -> str:
    """The capture's digest, once the batch a worker thread may still be hashing is done: waited
    for here, off the loop's thread (shielded: a cancel must not drop a batch from the digest)."""
    hashing = capture.hashing()
    if hashing is not None:
        await asyncio.shield(asyncio.wrap_future(hashing))
    return capture.sha256


def _capture_limit(output_limit: int) -> int:
    """Bytes kept at each end of a stream: twice the characters shown, so cleaning (colour codes,
    progress lines) and multi-byte text still leave enough to show."""
    return max(output_limit, 1024) * 2


def _call_start(call: _Call, scan: reaper.KillScan, replied: float) -> int | None:
    """The call's start in the host's clock ticks, never later than the truth: the host's clock
    when the kill script started, less all the time since the frame was sent (the script's answer
    took some of it). The tick before, for the rounding of start times."""
    if scan.uptime is None or not call.sent_at:
        return None
    return scan.uptime - math.ceil((replied - call.sent_at) * reaper.TICKS_PER_SECOND) - 1


def _script_unchecked(scan: reaper.KillScan, what: str) -> str | None:
    """The words for a kill script that did not run through, or None."""
    if scan.unanswered:
        return (f"the script that stops what {what} left running on the host gave no report: it could not "
                "start a process there (a limit on the account's processes, nproc?) or the account's login "
                "shell ended it (an 'exit' or 'exec' in ~/.bashrc ends every command sshd runs for the "
                f"account). Processes of {what} may still be running")
    if scan.failed:
        return (f"the script that stops what {what} left running could not start its helpers (grep, awk) on "
                "the host, most likely for a limit on the account's processes (nproc): processes of "
                f"{what} may still be running")
    return None


def _unchecked(scan: reaper.KillScan, since: int | None, what: str) -> str | None:
    """The words for what a kill could not check, or None."""
    if failed := _script_unchecked(scan, what):
        return failed
    if since is None:
        return (f"the host's clock since boot (/proc/uptime) could not be read, so processes of {what} that "
                "left its process tree and cleared or rewrote their environment could not be looked for")
    if scan.cgroup or not scan.strays:
        return None
    shown = ", ".join(f"{pid} ({name})" for pid, name in scan.strays[:10])
    more = f" and {len(scan.strays) - 10} more" if len(scan.strays) > 10 else ""
    return (f"{len(scan.strays)} process(es) of the same user started while {what} ran, outside its "
            f"process tree and without its tag, were left running: {shown}{more}. They may be daemons of "
            f"{what} that rewrote or cleared their environment, or another login's; this host keeps SSH "
            "logins in no cgroup of their own, so nothing tells which")


def _after_the_fact(message: str, event: str, host: str) -> str:
    """The words for a record that could not be written once its command had run."""
    message = message.replace("; the command was not run because it could not be audited", "")
    return (f"{message}; the command ran, but its {event} record is missing from the audit log "
            f"(check it with 'remote-bash audit verify {host}')")


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


class _Deadline:
    """A session's deadline timer, kept from call to call: a call arms it, and it is moved only
    when the new deadline comes sooner. Where it fires before the armed deadline (armed earlier
    for a longer one, or for a wait that ended), it sets itself again for what is left; a deadline
    reached resolves the waiter False, exactly when a timer of the call's own would have."""

    __slots__ = ("_at", "_handle", "_loop", "_waiter")

    def __init__(self) -> None:
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiter: asyncio.Future[bool] | None = None
        self._at = 0.0

    def arm(self, waiter: asyncio.Future[bool], timeout: float) -> asyncio.TimerHandle | None:
        """Resolve ``waiter`` False in ``timeout`` seconds unless it is done by then. Returns None,
        or, when another wait holds this timer, a timer of the wait's own for the caller to cancel."""
        loop = asyncio.get_running_loop()
        if self._waiter is not None and not self._waiter.done():
            return loop.call_later(timeout, _expire, waiter)
        self._at = at = loop.time() + timeout
        self._waiter = waiter
        handle = self._handle
        if handle is None or self._loop is not loop or handle.when() > at:
            if handle is not None:
                handle.cancel()
            self._loop = loop
            self._handle = loop.call_at(at, self._fire, at)
        return None

    def disarm(self, waiter: asyncio.Future[bool]) -> None:
        """The wait for ``waiter`` ended: the timer, should it fire, finds nothing to do."""
        if self._waiter is waiter:
            self._waiter = None

    def cancel(self) -> None:
        """The session closed: drop the timer (unless a wait still holds it)."""
        if self._waiter is not None and not self._waiter.done():
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._waiter = None

    def _fire(self, when: float) -> None:
        self._handle = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if when >= self._at:
            self._waiter = None
            waiter.set_result(False)
        else:
            assert self._loop is not None
            self._handle = self._loop.call_at(self._at, self._fire, self._at)


def _operator() -> str:
    from ._paths import account_name

    return sys.intern(account_name())


@functools.lru_cache(maxsize=64)
def _host_redactor(patterns: tuple[str, ...]) -> SupportsRedact:
    """The redactor of a host's own patterns, one for all the sessions on hosts that have the same
    ones: a Redactor holds no state between calls (a stream gets its own StreamRedactor)."""
    from .redact import Redactor

    return Redactor(patterns)


def off_by_name(value: object, name: str, what: str, fits: Callable[[object], bool]) -> None:
    """A safety switch is None (the safe default), False (off, by name) or the thing itself: any
    other value (``0``, ``""``, ``[]``) is a mistake, not a way to turn it off."""
    if value is None or value is False or fits(value):
        return
    raise TypeError(f"{name}= takes {what}, None (the default) or False (none, by name), not {value!r}")


async def _default_credentials(host: Host) -> Credentials:
    # What the command line offers too: the agent, the identity file, and the keyring's secret
    # (a passphrase or password) when the host's credential asks for one.
    from remote_bash.credentials import acredentials_for

    return await acredentials_for(host)


def _ulimits(host: Host) -> list[tuple[str, int]]:
    lim = host.limits
    pairs = [("-t", lim.cpu_seconds), ("-v", lim.virtual_memory_kb), ("-f", lim.file_size_kb),
             ("-u", lim.processes), ("-n", lim.open_files)]
    return [(flag, value) for flag, value in pairs if value is not None]
