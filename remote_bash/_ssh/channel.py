"""The shell channel: one exec channel running a long-lived process, its bytes delivered by callback.

No buffering between asyncssh and the session: each chunk goes to ``on_data`` as it arrives.
Also the input channel, a process fed through its stdin with backpressure (a command's input).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import asyncssh

from remote_bash.errors import ConnectionLost

__all__ = ["Flag", "InputChannel", "ShellChannel", "ShellSession"]


class Flag:
    """A flag that is set once and can be waited for: what an ``asyncio.Event`` does here, without
    the deque every Event allocates up front (two per open session, a fleet holds hundreds)."""

    __slots__ = ("_set", "_waiter")

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self) -> None:
        if self._set:
            return
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
        # Shielded: one cancelled waiter must not cancel the future the others wait on.
        await asyncio.shield(self._waiter)


class ShellSession(asyncssh.SSHClientSession[bytes]):
    """Delivers channel bytes to a callback as they arrive: no stream buffering in between."""

    def __init__(self, owner: ShellChannel) -> None:
        self._owner = owner

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self._owner.on_data(data)  # straight to the session: called for every packet

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner._on_closed()  # the connection's own loss is reported by SshConnection

    # The shell's exit is reported before the channel closes: the channel stays open while a
    # child of the dead shell still holds its stdout, so waiting for the close could take long.
    def exit_status_received(self, status: int) -> None:
        self._owner._on_exited()

    def exit_signal_received(self, signal: str, core_dumped: bool, msg: str, lang: str) -> None:
        self._owner._on_exited()


def _ignore_data(_data: bytes) -> None:
    pass


def _ignore() -> None:
    pass


class ShellChannel:
    """One exec channel running a long-lived process, read through a data callback."""

    __slots__ = ("_chan", "closed", "exited", "host", "on_closed", "on_data")  # one per open session

    def __init__(self, host: str) -> None:
        self.host = host
        self.closed = Flag()
        self.exited = False
        self.on_data: Callable[[bytes], None] = _ignore_data
        self.on_closed: Callable[[], None] = _ignore
        self._chan: asyncssh.SSHClientChannel[bytes] | None = None

    def _on_closed(self) -> None:
        self.closed.set()
        self.on_closed()

    def _on_exited(self) -> None:
        self.exited = True
        self.on_closed()

    def write(self, data: bytes) -> None:
        """Send bytes to the process's stdin; raises ConnectionLost when the channel is gone."""
        if self._chan is None or self.closed.is_set():
            raise ConnectionLost("the shell channel is closed", host=self.host)
        try:
            self._chan.write(data)
        except (asyncssh.Error, OSError, BrokenPipeError) as exc:
            raise ConnectionLost(f"writing to the shell failed: {exc}", host=self.host) from exc

    @property
    def exit_status(self) -> int | None:
        """The process's exit status; None when it died of a signal or is still running."""
        if self._chan is None:
            return None
        status = self._chan.get_exit_status()
        return None if status is None or status < 0 else status

    @property
    def exit_signal(self) -> str | None:
        if self._chan is None:
            return None
        sig = self._chan.get_exit_signal()
        return None if sig is None else sig[0]

    def close(self) -> None:
        if self._chan is not None:
            self._chan.close()


class InputChannel:
    """A process on an exec channel that is fed through its stdin: ``write`` waits while the host
    is not taking the data (asyncssh's send buffer stays under its high-water mark), so what is
    held locally stays bounded. Its stdout and stderr are read together, as lines."""

    def __init__(self, host: str, process: asyncssh.SSHClientProcess[bytes]) -> None:
        self.host = host
        self._process = process

    async def readline(self) -> bytes:
        """One line of the process's output; ``b""`` once it closed its output."""
        try:
            return await self._process.stdout.readline()
        except (asyncssh.Error, OSError) as exc:
            raise ConnectionLost(f"reading from an input channel failed: {exc}", host=self.host) from exc

    async def write(self, data: bytes) -> bool:
        """Send ``data``; False when the process takes no more input (it exited or closed its stdin)."""
        try:
            self._process.stdin.write(data)
            await self._process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            return False
        except (asyncssh.Error, OSError) as exc:
            raise ConnectionLost(f"writing to an input channel failed: {exc}", host=self.host) from exc
        return True

    def write_eof(self) -> None:
        with contextlib.suppress(asyncssh.Error, OSError):
            self._process.stdin.write_eof()

    def close(self) -> None:
        self._process.close()

    async def wait_closed(self, timeout: float) -> bool:
        """Wait for the channel to close; False when it did not within ``timeout``."""
        try:
            await asyncio.wait_for(self._process.wait_closed(), timeout)
        except TimeoutError:
            return False
        except (asyncssh.Error, OSError):
            pass
        return True
