"""The background process of a kept session: one host's session, served on a private unix socket.

Started by the first ``exec --keep`` on a host (``_keep``), detached from its terminal, with its
stdout and stderr going to a log file in the state directory. It builds its session exactly as
``exec`` does (:func:`_context._session`: the inventory, ``--allow``, the audit directory,
credentials, redaction, the gate and the command policy of the invocation that started it), runs
each client's command in it and streams the redacted output back, and exits (closing the session,
which stops what it left running) after its idle timeout, on ``sessions stop`` or on SIGTERM.

A call whose connection is lost leaves its shell and command running on the host: before the call
is answered, the session reconnects to stop them. When it cannot, the answer says so and the process
stays (the session ``orphaned``), so that its next call, ``sessions stop`` or its idle end tries again.

It must never: serve a connection from another user (the peer's uid is checked with
``SO_PEERCRED``, on top of the socket's 0600 mode in a 0700 directory), serve a request made under
other options than its own, write a command, its output or a secret to its log, or run a request
twice.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_bash._paths import open_private, private_dir

from ._context import _Context, _pick_host, _session
from ._exec import _Echo, _status_line
from ._keep import BEAT, PROTOCOL, _short, _ssh_config_files, keep_dir
from ._output import EXIT_ERROR, EXIT_INTERRUPTED, PROG, _exit_code, _json, _one_line

if TYPE_CHECKING:
    from remote_bash.inventory import Inventory
    from remote_bash.models import CommandResult
    from remote_bash.redact import Redactor
    from remote_bash.session import RemoteBashSession

Send = Callable[[dict[str, Any]], None]

REQUEST_LIMIT = 64 << 20
"""The largest request line read (bytes): far above any command line (the kernel's argument limit
is a few megabytes, 6 bytes a character once escaped), so any command plain ``exec`` takes is taken."""


def _log(message: str) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    sys.stderr.write(f"{stamp} {PROG} keep[{os.getpid()}]: {message}\n")
    sys.stderr.flush()


def _frame(kind: bytes, text: str) -> bytes:
    data = text.encode()
    return kind + str(len(data)).encode() + b":" + data


def _frames(message: dict[str, Any], terminal: bool) -> bytes:
    """A reply to a ``run`` request as the client reads it (``_keepc``): frames of text escaped here
    as ``exec`` escapes what it prints (output on a ``terminal`` only, every line for stderr), so that
    the client prints them as they are and needs no pattern of its own."""
    from remote_bash._escape import escape

    out = []
    if "beat" in message:
        out.append(_frame(b"b", ""))
    if "stale" in message:
        out.append(_frame(b"s", f"{int(message.get('pid') or 0)} {message['stale']}"))
    if message.get("o"):
        text = str(message["o"])
        out.append(_frame(b"o", escape(text) if terminal else text))
    line = escape(str(message["e"])) if "e" in message else None
    if line is not None and not line.endswith("\n"):
        line += "\n"
    if "x" in message:
        out.append(_frame(b"x", f"{int(message['x'])}" + (f" {line}" if line is not None else "")))
    elif line is not None:
        out.append(_frame(b"e", line))
    return b"".join(out)


class _SocketEcho(_Echo):
    """The output of a call, redacted as ``exec`` does, sent to the client instead of stdout."""

    def __init__(self, redactor: Redactor, send: Send) -> None:
        super().__init__(redactor)
        self.send = send

    def _write(self, text: str) -> None:
        if text:
            self.send({"o": text})
            self.count += len(text)
            self.tail = (self.tail + text)[-200:]


def _keeps_session(exc: BaseException) -> bool:
    """Whether the session is still worth keeping after a call failed with ``exc``."""
    from remote_bash.errors import AuditError, PolicyDenied

    return isinstance(exc, PolicyDenied | AuditError)


class _Daemon:
    def __init__(self, key: dict[str, Any], idle: float, path: Path) -> None:
        self.key = key
        self.idle = idle
        self.path = path
        self.ctx: _Context | None = None
        self.inventory: Inventory | None = None
        self.host: str = key["host"]
        self.failure: BaseException | None = None
        self.session: RemoteBashSession | None = None
        self.redactor: Redactor | None = None
        self.started = time.time()
        self.last = time.time()
        self.last_mono = time.monotonic()
        self.busy = 0
        self.quiet = asyncio.Event()  # set while no call runs
        self.quiet.set()
        self.done: asyncio.Event | None = None
        self.draining = False
        self.stopping: str | None = None
        """Why the session is being closed under a running call (which then says so, not "interrupted")."""
        self.hurry = asyncio.Event()  # a stop that does not wait for running calls
        self.opening = asyncio.Lock()
        self.inventory_file: Path | None = None
        self.inode = 0
        self.fingerprint: bytes | None = None

    def _rules(self) -> dict[str, str]:
        """What tells this session from another one on the same host: where its rules and its audit
        log come from."""
        if self.ctx is None:
            return {"inventory": self.key["inventory"] or "", "audit_dir": self.key["audit_dir"] or ""}
        return {"inventory": str(self.inventory_file) if self.inventory_file is not None else "",
                "audit_dir": str(self.ctx.audit_dir)}

    def stop(self, why: str, *, drain: bool = False) -> None:
        """End the process. ``drain``: once the calls running now are done (an inventory edit: they
        finish under the rules they started under; no new call is served); otherwise now, killing them."""
        if not drain:
            self.stopping = self.stopping or why
            self.hurry.set()
        if self.done is not None and not self.done.is_set():
            _log(why)
            self.draining = drain
            self.done.set()

    async def serve(self, sock: socket.socket) -> None:
        self.done = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.stop, "stopping on SIGTERM")
        # Ignored until here (it has no terminal to lose: it runs in a session of its own), so a
        # HUP now is someone's, and it stops the process as TERM does.
        loop.add_signal_handler(signal.SIGHUP, self.stop, "stopping on SIGHUP")
        server = await asyncio.start_unix_server(self._client, sock=sock, limit=REQUEST_LIMIT)
        idle = asyncio.create_task(self._idle())
        try:
            await self.done.wait()
        finally:
            # No new client can find it; those already queued get "closing" (nothing run) and go
            # on to a fresh process, rather than a reset connection.
            _unlink(self.path, self.inode)
            await asyncio.sleep(0.2)
            server.close()
            idle.cancel()
            if self.draining and not self.quiet.is_set():
                _log("waiting for the running calls to end")
                waits = {asyncio.create_task(self.quiet.wait()), asyncio.create_task(self.hurry.wait())}
                _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for task in pending:
                    task.cancel()
            await self._close()  # stops what the session's commands left running

    async def _close(self) -> str | None:
        """Close the session; the words for what it could not stop (a lost call's leftovers on a host
        it could not reach again), or None."""
        from remote_bash.errors import RemoteBashError

        if self.session is None:
            return None
        try:
            await self.session.close()
        except RemoteBashError as exc:
            _log(f"closing the session: {type(exc).__name__}: what a lost call left running on "
                 f"{self.host or 'the host'} may still be running (see the audit log)")
            return str(exc)
        return None

    async def _idle(self) -> None:
        while True:
            remaining = self.last_mono + self.idle - time.monotonic()
            if not self.busy and remaining <= 0:
                self.stop(f"unused for {self.idle:g} s: closing the session")
                return
            await asyncio.sleep(min(max(remaining, 0.05), 1.0))

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        def send(message: dict[str, Any]) -> None:
            if not writer.is_closing():
                writer.write(json.dumps(message, ensure_ascii=False).encode() + b"\n")

        def send_frames(message: dict[str, Any]) -> None:
            if not writer.is_closing():
                writer.write(_frames(message, terminal))

        terminal = True

        try:
            raw = writer.get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                             struct.calcsize("3i"))
            pid, uid, _gid = struct.unpack("3i", raw)
            if uid != os.geteuid():
                _log(f"refused a connection from uid {uid} (pid {pid}): not the owner")
                send({"e": f"{PROG}: refused: this kept session belongs to another user", "x": EXIT_ERROR})
                # Closing with their request unread would reset the connection before they read why.
                await writer.drain()
                writer.write_eof()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(reader.read(1 << 16), 1.0)
                return
            try:
                line = await reader.readline()
                request = json.loads(line) if line else {}
            except (ValueError, asyncio.LimitOverrunError) as exc:
                # Not the process ending: say so, with what was wrong; nothing was run.
                _log(f"refused a request it could not read ({type(exc).__name__})")
                send({"e": f"{PROG}: the kept session could not read the request (larger than "
                           f"{REQUEST_LIMIT >> 20} MiB, or not one JSON line); nothing was run", "x": EXIT_ERROR})
                await writer.drain()
                return
            # info and stop are the same in every version (so any client can list and stop this process)
            if request.get("v") != PROTOCOL and not (request.get("v") == 1 and request.get("op") in ("info", "stop")):
                send({"e": f"{PROG}: this kept session speaks another protocol: stop it with "
                           f"'{PROG} sessions stop --all'", "x": EXIT_ERROR})
            elif request.get("op") == "info":
                send({"info": {"host": self.host or "(default)", "pid": os.getpid(), "started": self.started,
                               "last": self.last, "busy": bool(self.busy), "idle_timeout": self.idle,
                               "allow": self.key["allow"], **self._rules()}})
            elif request.get("op") == "stop":
                self.stopping = "stopped by 'sessions stop'"
                unstopped = await self._close()
                send({"stopped": True, **({"e": f"{PROG}: {_one_line(unstopped)}"} if unstopped else {})})
                self.stop("stopped on request")
            elif request.get("op") == "run":
                terminal = bool(request.get("terminal"))
                await self._run(request, reader, send_frames)
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _run(self, request: dict[str, Any], reader: asyncio.StreamReader, send: Send) -> None:
        if self.done is not None and self.done.is_set():
            send({"stale": "this kept session is closing", "pid": os.getpid()})
            return
        if request.get("key") != self.key:
            send({"e": f"{PROG}: this kept session was made under other options; nothing was run", "x": EXIT_ERROR})
            return
        if self.failure is not None:
            self._fail(send, self.failure)
            return
        if await asyncio.to_thread(_fingerprint, self.inventory_file) != self.fingerprint:  # reads files
            # Its rules may have changed: a session made under the old ones must not serve the call.
            send({"stale": "the inventory changed since this kept session started", "pid": os.getpid()})
            self.stop("the inventory changed: closing the session once the running calls end", drain=True)
            return
        self.idle = float(request.get("idle") or self.idle)
        self.busy += 1
        self.quiet.clear()
        beat = asyncio.create_task(_beat(send))
        try:
            await self._call(request, reader, send)
        finally:
            beat.cancel()
            self.busy -= 1
            if not self.busy:
                self.quiet.set()
            self.last, self.last_mono = time.time(), time.monotonic()

    def _fail(self, send: Send, exc: BaseException) -> None:
        from remote_bash.errors import RemoteBashError

        from ._output import _NoApiKey, _UsageError

        known = isinstance(exc, RemoteBashError | _UsageError | _NoApiKey)
        message = str(exc) if known else f"internal error: {type(exc).__name__}: {exc}"
        orphaned = self.session is not None and self.session.orphaned
        if orphaned:
            message += ("; the kept session tries again to stop what the lost call left running at its next "
                        f"call, at '{PROG} sessions stop' and when it ends")
        send({"e": f"{PROG}: {_one_line(message)}", "x": _exit_code(exc)})
        if orphaned:
            # Not done with the host while a lost call's shell may run there: a fresh process would
            # know nothing of it.
            _log(f"the call failed ({type(exc).__name__}); what a lost call left running is not stopped yet: "
                 "keeping the session to try again")
        elif not _keeps_session(exc):
            self.stop(f"the call failed ({type(exc).__name__}): closing the session")

    async def _call(self, request: dict[str, Any], reader: asyncio.StreamReader, send: Send) -> None:
        from remote_bash.errors import SessionClosed

        assert self.ctx is not None and self.inventory is not None
        if self.session is not None:
            try:
                # A key revoked, changed or unpinned since the connection was made: refused as a new
                # connection would be, and the session (made under the old trust) closed.
                await self.session.recheck_host_keys()
            except Exception as exc:
                self._fail(send, exc)
                return
        async with self.opening:  # calls that arrive together share the one session the first opens
            if self.session is None:
                try:
                    self.session, self.redactor = await _session(self.ctx, self.inventory, self.host)
                except Exception as exc:
                    self._fail(send, exc)
                    return
        assert self.redactor is not None
        as_json = bool(request.get("json"))
        echo = _SocketEcho(self.redactor, send)
        run = asyncio.create_task(self.session.run(str(request["command"]), request.get("timeout"),
                                                   on_output=None if as_json else echo.feed))
        # A line ("cancel": Ctrl-C) or the end of the connection (the client is gone) stops the call.
        watch = asyncio.create_task(reader.readline())
        result: CommandResult | None = None
        try:
            await asyncio.wait({run, watch}, return_when=asyncio.FIRST_COMPLETED)
            by_client = not run.done()
            if by_client:
                run.cancel()
            try:
                result = await run
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
                echo.finish(None)
                send({"e": f"{PROG}: interrupted", "x": EXIT_INTERRUPTED})
                return
            except Exception as exc:
                echo.finish(None)
                if isinstance(exc, SessionClosed) and self.stopping is not None:
                    # Nobody pressed Ctrl-C: the session was closed under the call; say by what, and
                    # what was done to the command (the session's words).
                    send({"e": f"{PROG}: {self.host}: the kept session was closed during the call "
                               f"({self.stopping}): {_one_line(exc.message)}", "x": EXIT_ERROR})
                else:
                    self._fail(send, await self._after_loss(exc))
                return
        finally:
            watch.cancel()
        if as_json:  # as exec's _out_json: JSON escapes, on a terminal or not
            send({"o": _json({"host": self.host, **result.model_dump(mode="json")})})
        else:
            echo.finish(result)
        status, line = _status_line(self.host, result)
        send({"e": line, "x": status} if line is not None else {"x": status})


    async def _after_loss(self, exc: Exception) -> Exception:
        """After a call failed: when its connection was lost, stop what it left running on the host
        now, before it is answered (this process may not be asked again for a long time). The error
        to answer with: ``exc``, or the one saying that the command may still be running."""
        from remote_bash.errors import ConnectionLost, SessionClosed

        if self.session is None or not self.session.orphaned:
            return exc
        try:
            await self.session.stop_orphans()
        except ConnectionLost as failed:
            return failed
        except SessionClosed:
            pass  # closed meanwhile ('sessions stop', SIGTERM): the close tried
        return exc


async def _beat(send: Send) -> None:
    """Tell the client, while its call runs (quiet, or being killed), that this process still answers:
    one that stops answering (stopped, hung) is then said within seconds instead of waited on forever."""
    while True:
        await asyncio.sleep(BEAT)
        send({"beat": 1})


def _bind(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    previous = os.umask(0o177)  # owner-only from the moment it exists
    try:
        with _short(path) as address:
            sock.bind(address)
    finally:
        os.umask(previous)
    os.chmod(path, 0o600)  # in our 0700 directory: nobody else can have put a link there
    sock.listen(64)
    return sock


def _unlink(path: Path, inode: int) -> None:
    """Remove the socket at ``path`` if it is still this process's."""
    with contextlib.suppress(OSError):
        if os.stat(path).st_ino == inode:
            path.unlink()


def _take(lock_path: Path, path: Path) -> int | None:
    """Take the key's lock (its open descriptor); None when another process holds it and serves. A
    holder that does not serve is starting or exiting (closing its session): wait for it, within a
    bound. The last holder removes the lock file as it exits, still holding it, so a lock taken on
    a file no longer at ``lock_path`` is let go and the file now there is taken instead."""
    from ._keep import connect

    deadline = time.monotonic() + 30.0
    while True:
        lock = open_private(lock_path, os.O_RDWR | os.O_CREAT, what="a kept session lock")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock)
        else:
            if _is_at(lock, lock_path):
                return lock
            os.close(lock)
            continue
        sock = connect(path, 5.0)
        if sock is not None:
            sock.close()
            return None
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def _is_at(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is the one at ``path`` now."""
    try:
        there = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _release(lock: int, lock_path: Path) -> None:
    """Remove the lock file (while still holding it: whoever waits on it then sees it gone), then let go."""
    try:
        if _is_at(lock, lock_path):
            lock_path.unlink()
    except OSError as exc:
        _log(f"could not remove {lock_path.name}: {exc.strerror}")
    finally:
        os.close(lock)


def _fingerprint(path: Path | None) -> bytes | None:
    """What the session's rules were read from: the inventory and the ssh config its hosts may name,
    by content (an edit in place that restores the size and modification time is still seen; a
    hash of a few kilobytes costs microseconds)."""
    if path is None:
        return None
    digest = hashlib.sha256()
    for source in (path, *_ssh_config_files(Path("~/.ssh/config").expanduser())):
        try:
            data = source.read_bytes()
        except OSError as exc:
            data = f"unreadable: {exc.errno}".encode()
        digest.update(hashlib.sha256(str(source).encode()).digest() + hashlib.sha256(data).digest())
    return digest.digest()


def main() -> None:
    """The background process's entry point; its one argument is the JSON the client passed."""
    from ._app import _setup_logging

    config = json.loads(sys.argv[1])
    key: dict[str, Any] = config["key"]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if hasattr(signal, "SIGXFSZ"):
        # As main() does: a file-size limit on the audit directory is an AuditError, not a dead process.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _setup_logging(False)  # never debug: the log must not hold commands or what they print
    directory = private_dir(keep_dir(os.environ), what="kept sessions")
    lock_path = directory / f"{config['name']}.lock"
    path = directory / f"{config['name']}.sock"
    lock = _take(lock_path, path)
    if lock is None:
        sys.exit(0)  # another process serves this key: the client reaches that one
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # stale: whoever made it no longer holds the lock
    sock = _bind(path)
    inode = os.stat(path).st_ino
    daemon = _Daemon(key, float(config["idle"]), path)
    daemon.inode = inode
    _log(f"serving {key['host'] or 'the default host'} on {path}")
    args = argparse.Namespace(inventory=key["inventory"] or None, allow=key["allow"],
                              audit_dir=key["audit_dir"] or None, debug=bool(config.get("debug")),
                              host=key["host"] or None, json=False, timeout=None, words=None,
                              backend=key.get("backend"), image=key.get("image"))
    try:
        with contextlib.ExitStack() as stack:
            try:
                daemon.ctx = _Context(args)
                daemon.inventory_file = daemon.ctx.inventory_path()
                daemon.fingerprint = _fingerprint(daemon.inventory_file)
                daemon.inventory = stack.enter_context(daemon.ctx.inventory())
                daemon.host = _pick_host(daemon.inventory, args.host)
            except Exception as exc:
                daemon.failure = exc  # told to the client that asks, then the process ends
            asyncio.run(daemon.serve(sock))
    finally:
        _unlink(path, inode)
        _release(lock, lock_path)
        _log("exited")
