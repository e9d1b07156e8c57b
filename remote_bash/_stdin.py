"""Forwarding a caller's input to one command of a session, as ``ssh`` forwards its stdin.

The session's shell reads its framed protocol on its own stdin, so a command's input comes
another way: a FIFO in a fresh owner-only directory (``mktemp -d``, mode 0700) on the host,
read by the command (the frame redirects the ``eval`` from it, see
:func:`remote_bash.framing.frame_command`) and written by ``cat`` on a second exec channel of
the same connection, which this module feeds chunk by chunk. The writer opens the FIFO only when
told that the command was sent, and removes the directory as soon as both ends are open, so
nothing is left on the host once the command has its input. A writer never told (a refused call,
a lost connection) removes the directory itself when its channel ends; should one end of the FIFO
still wait for the other when the call is over, :meth:`StdinFeed.close` opens it to release that
end and removes the directory.

Memory stays bounded whatever the input's size: a few chunks wait between the local reader and
the channel, whose send buffer asyncssh keeps under its high-water mark (``write`` waits).
When the command ends, its input ends with it: the writer is stopped and reading stops, as
``ssh`` stops when the remote command exits (a writer into a command that stopped reading gets
SIGPIPE, as a local pipe would).

This module never records or logs the input's content: it counts and hashes what it sent.
It never imports asyncssh (the channel comes from :mod:`remote_bash._ssh`), and never runs the
command itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import select
import threading
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from . import reaper
from .errors import RemoteBashError, SessionError
from .framing import shell_quote

if TYPE_CHECKING:
    from ._ssh import InputChannel, SshConnection

__all__ = ["CHUNK", "Readable", "StdinFeed", "StdinSource", "check_source", "chunks", "writer_script"]

CHUNK = 1 << 20
"""Bytes read from the source at a time."""
QUEUED = 2
"""Chunks a reading thread may hold ahead of the channel."""
OPEN_TIMEOUT = 15.0
"""How long the host has to create the FIFO and say where it is."""
_READY = re.compile(r"RBFIFO \d+ (/[^\n]*/remote-bash-stdin\.[A-Za-z0-9]{10})")
STDIN_ENV = "REMOTE_BASH_STDIN"
"""Set on the writer, with a nonce of its own, so that a kill by pid cannot hit another process."""


class Readable(Protocol):
    """A binary file object: ``read(n)`` returns at most ``n`` bytes, ``b""`` at its end."""

    def read(self, size: int = -1, /) -> bytes | None: ...


StdinSource = bytes | bytearray | memoryview | Readable | AsyncIterable[bytes]
"""What a command's input may come from: bytes, a binary file object (read in a thread, so a pipe
that waits never blocks the event loop), or an async iterable of bytes."""


def writer_script(session_id: str, nonce: str) -> str:
    """The POSIX sh script of the input channel: make the FIFO in a fresh owner-only directory,
    report ``RBFIFO <pid> <dir>``, wait for the line ``go`` (sent once the command is), open the
    FIFO for writing (which waits for the command to open it for reading), remove the
    directory, report ``RBOPEN``, then copy the rest of the channel's input into the FIFO. The
    session's tag lets a reconnecting session stop a writer a lost connection left behind."""
    body = (
        "umask 077; "
        'd=$(mktemp -d "${TMPDIR:-/tmp}/remote-bash-stdin.XXXXXXXXXX") || exit 1; '
        'mkfifo "$d/in" || { rm -rf "$d"; exit 1; }; '
        "printf 'RBFIFO %s %s\\n' \"$$\" \"$d\"; "
        # Only once told that the command is on its way; the channel's end (a refused call, a
        # lost connection) ends the wait instead, and the directory goes.
        'IFS= read -r go; [ "$go" = go ] || { rm -rf "$d"; exit 1; }; '
        'exec 3>"$d/in"; rm -rf "$d"; '
        "printf 'RBOPEN\\n'; "
        "exec cat >&3 3>&-"
    )
    # Assignments before ``exec`` go into the new program's environment (POSIX sh, bash, zsh).
    return f"{reaper.SESSION_ENV}={session_id} {STDIN_ENV}={nonce} exec /bin/sh -c {shell_quote(body)}"


def _cleanup_script(directory: str | None, pid: int | None, nonce: str) -> str:
    """Release a FIFO end that waits for its partner (opening it read-write never blocks on
    Linux), remove the directory, and kill the writer if it is still there (checked by its
    nonce, so a reused pid is left alone)."""
    parts = []
    if directory:
        path = shell_quote(directory)
        parts.append(f"{{ :; }} 3<>{path}/in 2>/dev/null; rm -rf -- {path}")
    if pid:
        parts.append(f"grep -qsxz {shell_quote(f'{STDIN_ENV}={nonce}')} /proc/{pid}/environ "
                     f"&& kill -KILL {pid} 2>/dev/null")
    parts.append("true")
    return "; ".join(parts)


def check_source(source: object) -> None:
    """Raise TypeError unless ``source`` is something :func:`chunks` can read."""
    if isinstance(source, str):
        raise TypeError("stdin must be bytes, not str: encode the text (for example text.encode())")
    if isinstance(source, bytes | bytearray | memoryview | AsyncIterable):
        return
    if not callable(getattr(source, "read", None)):
        raise TypeError(f"stdin must be bytes, a binary file object or an async iterable of bytes, "
                        f"not {type(source).__name__}")


async def chunks(source: StdinSource) -> AsyncGenerator[bytes, None]:
    """The source's bytes, chunk by chunk, never more than a few chunks held."""
    if isinstance(source, bytes | bytearray | memoryview):
        view = memoryview(source).cast("B")
        for at in range(0, len(view), CHUNK):
            yield bytes(view[at : at + CHUNK])
        return
    if isinstance(source, AsyncIterable):
        async for item in source:
            if not isinstance(item, bytes | bytearray | memoryview):
                raise TypeError(f"stdin yielded {type(item).__name__}, not bytes")
            if item:
                yield bytes(item)
        return
    check_source(source)
    read = getattr(source, "read1", None) or source.read
    async with contextlib.aclosing(_threaded(read, getattr(source, "fileno", None))) as threaded:
        async for data in threaded:
            yield data


async def _threaded(read: Callable[[int], Any], fileno: Callable[[], int] | None) -> AsyncGenerator[bytes, None]:
    """Chunks from ``read`` called in a daemon thread: a pipe that waits for its writer blocks that
    thread only, and a thread still waiting when the command has ended never delays the exit."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | BaseException] = asyncio.Queue(QUEUED)
    stop = threading.Event()

    def hand(item: bytes | BaseException) -> bool:
        try:
            asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()
        except (RuntimeError, asyncio.CancelledError):  # the loop is gone
            return False
        return not stop.is_set()

    def work() -> None:
        try:
            while not stop.is_set():
                try:
                    data = read(CHUNK)
                except BlockingIOError:
                    data = None
                if data is None:  # a non-blocking descriptor with nothing yet
                    _wait_readable(fileno)
                    continue
                if not isinstance(data, bytes | bytearray):
                    raise TypeError(f"stdin's read() returned {type(data).__name__}, not bytes")
                if not hand(bytes(data)) or not data:
                    return
        except BaseException as exc:  # handed to the reader, which raises it there
            hand(exc)

    threading.Thread(target=work, name="remote-bash-stdin", daemon=True).start()
    try:
        while True:
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            if not item:
                return
            yield item
    finally:
        stop.set()
        while not queue.empty():  # a put that waits for room completes, and the thread sees stop
            queue.get_nowait()


def _wait_readable(fileno: Callable[[], int] | None) -> None:
    if fileno is None:
        threading.Event().wait(0.01)
        return
    with contextlib.suppress(OSError, ValueError):
        select.select([fileno()], [], [], 1.0)


class StdinFeed:
    """One command's input: the FIFO on the host, the channel that fills it, and what was sent.

    ``open`` (before the command is framed) makes the FIFO; ``start`` (once the frame is sent)
    lets the writer open it and starts feeding it; ``close`` (after the command ended, however
    it ended) stops the feeding and leaves nothing behind on the host."""

    def __init__(self, source: StdinSource, *, host: str, session_id: str) -> None:
        check_source(source)
        self.source = source
        self.host = host
        self.session_id = session_id
        self.path: str | None = None
        """The FIFO the command reads, once open."""
        self.sent = 0
        self.complete = False
        """True once the whole source was sent, end of input included."""
        self.error: str | None = None
        self._nonce = secrets.token_hex(8)
        self._dir: str | None = None
        self._pid: int | None = None
        self._opened = False
        self._channel: InputChannel | None = None
        self._conn: SshConnection | None = None
        self._pump: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._closed = False

    def audit_fields(self, event: str) -> dict[str, Any]:
        """What the audit log records of the input (never its content)."""
        if event == "exec.start":
            return {"stdin": "forwarded"}
        if event == "exec.end":
            # No digest of the input: a hash of a piped password falls to a dictionary search.
            return {"stdin_bytes": self.sent,
                    "stdin_complete": self.complete, "stdin_error": self.error}
        return {}

    async def open(self, conn: SshConnection) -> str:
        """Make the FIFO on the host; returns its path. Raises SessionError (nothing left on the
        host) when the host cannot make it."""
        self._conn = conn
        channel = await conn.open_input(writer_script(self.session_id, self._nonce), timeout=OPEN_TIMEOUT)
        self._channel = channel
        try:
            line = await asyncio.wait_for(channel.readline(), OPEN_TIMEOUT)
        except TimeoutError:
            await self.close()
            raise SessionError(f"the host did not create the FIFO for the command's input within "
                               f"{OPEN_TIMEOUT:g} s; the command was not run", host=self.host) from None
        except BaseException:
            await self.close()
            raise
        text = line.decode("utf-8", "replace").rstrip("\n")
        found = _READY.fullmatch(text)
        pid = re.match(r"RBFIFO (\d+) ", text)
        self._pid = int(pid.group(1)) if pid else None  # so that close can stop the writer
        if found is None:
            # Never a path that is not exactly mktemp's: close removes the directory it names.
            await self.close()
            reason = text.strip() or "no answer"
            raise SessionError(f"the host could not create a FIFO for the command's input ({reason[:200]}); "
                               "it needs mktemp, mkfifo and a writable $TMPDIR or /tmp. The command was not run",
                               host=self.host)
        self._dir = found.group(1)
        self.path = f"{self._dir}/in"
        return self.path

    def start(self) -> None:
        """The command was sent: let the writer open the FIFO, and start feeding it."""
        channel = self._channel
        if channel is None or self._pump is not None or self._closed:
            return
        self._watch = asyncio.ensure_future(self._watch_open(channel))
        self._pump = asyncio.ensure_future(self._feed(channel))

    async def _watch_open(self, channel: InputChannel) -> None:
        with contextlib.suppress(RemoteBashError):
            if (await channel.readline()).startswith(b"RBOPEN"):
                self._opened = True

    async def _feed(self, channel: InputChannel) -> None:
        try:
            if not await channel.write(b"go\n"):
                return
            # Closed at once when the feeding stops, so that a reading thread stops too.
            async with contextlib.aclosing(chunks(self.source)) as source:
                async for data in source:
                    if not await channel.write(data):
                        return  # the command stopped reading: its input ends here, as with ssh
                    self.sent += len(data)
            channel.write_eof()
            self.complete = True
        except RemoteBashError as exc:
            self.error = exc.message
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            task = asyncio.current_task()
            if isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling():
                raise  # the feeding is being stopped (the call ended or was interrupted)
            # The local input failed (any exception of the caller's source: an OSError of a file,
            # a RuntimeError or a stray CancelledError of a generator): the command sees its input
            # end, and the audit log says why, rather than the command waiting until its deadline.
            self.error = f"reading the input failed: {type(exc).__name__}: {exc}"
            with contextlib.suppress(RemoteBashError):
                channel.write_eof()

    async def close(self) -> None:
        """Stop feeding, close the channel, and leave nothing on the host. Never raises: on a lost
        connection the writer ends by itself (its channel's input ends), and a writer stuck
        behind a command that left the FIFO open is stopped by the session's next reconnect."""
        if self._closed:
            return
        self._closed = True
        for task in (self._pump, self._watch):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        channel, conn = self._channel, self._conn
        if channel is None or conn is None:
            return
        channel.close()
        gone = await channel.wait_closed(1.0)
        # A writer never told to go removed the directory itself when its channel closed.
        if conn.is_closed or (gone and (self._opened or self._pump is None)):
            return
        with contextlib.suppress(RemoteBashError):
            await conn.run_side(_cleanup_script(None if self._opened else self._dir,
                                                None if gone else self._pid, self._nonce), timeout=5)
