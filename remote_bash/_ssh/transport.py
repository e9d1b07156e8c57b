"""The TCP connection under a first hop, with the writes of one event-loop turn sent together.

asyncssh writes every SSH packet to the transport on its own, and before each packet of the
connection protocol it writes an SSH_MSG_IGNORE packet of its own. An asyncio socket transport
sends each write at once (TCP_NODELAY), so a packet costs two ``send`` calls, and on loopback or a
busy host each of them wakes the peer's sshd. Here the writes made during one turn of the event
loop go out in one ``send``, in the order they were made, at the end of that turn; nothing is
reordered, dropped or held past the turn. A batch that grows past ``FLUSH_AT`` goes at once, so
bulk output is never held in memory here.

asyncssh reaches the connection through its public ``tunnel`` option: an object whose
``create_connection(factory, host, port)`` opens the stream and returns the protocol made by
``factory``. Jump hops already travel inside the first hop's connection, so only the first hop
uses this. Nothing here reads or writes SSH: it is a byte pipe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["FLUSH_AT", "DirectTCP"]

FLUSH_AT = 256 * 1024
"""Bytes held for the end of the turn before they are sent at once."""


class _BatchedTransport(asyncio.Transport):
    """Holds the writes of the current loop turn and sends them as one, at its end."""

    def __init__(self, loop: asyncio.AbstractEventLoop, inner: asyncio.Transport) -> None:
        super().__init__()
        self._loop = loop
        self._inner = inner
        self._pending: list[bytes] = []
        self._size = 0
        self._handle: asyncio.Handle | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        self._pending.append(bytes(data))
        self._size += len(data)
        if self._size >= FLUSH_AT:
            self.flush()
        elif self._handle is None:
            self._handle = self._loop.call_soon(self.flush)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        """Send what the turn wrote, in order, as one write to the socket transport."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        self._size = 0
        self._inner.write(data)

    def write_eof(self) -> None:
        self.flush()
        self._inner.write_eof()

    def can_write_eof(self) -> bool:
        return self._inner.can_write_eof()

    def close(self) -> None:
        self.flush()
        self._inner.close()

    def abort(self) -> None:
        # What was written before the abort goes first, as it did when each write was sent at
        # once (asyncssh writes its DISCONNECT and then aborts).
        self.flush()
        self._inner.abort()

    def is_closing(self) -> bool:
        return self._inner.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._inner.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._inner.pause_reading()

    def resume_reading(self) -> None:
        self._inner.resume_reading()

    def is_reading(self) -> bool:
        return self._inner.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._inner.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._inner.get_write_buffer_size() + self._size

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._inner.get_write_buffer_limits()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        raise NotImplementedError("the protocol of a batched SSH transport is fixed")

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._inner.get_protocol()


class _Batching(asyncio.Protocol):
    """The socket's protocol: hands asyncssh's connection the batched transport, and the rest through."""

    def __init__(self, inner: asyncio.Protocol) -> None:
        self.inner = inner
        self.transport: _BatchedTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = _BatchedTransport(asyncio.get_running_loop(), transport)
        self.inner.connection_made(self.transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class DirectTCP:
    """asyncssh's ``tunnel`` for a first hop: a plain TCP connection with batched writes."""

    __slots__ = ()

    async def create_connection(self, session_factory: Callable[[], asyncio.Protocol], host: str,
                                port: int) -> tuple[asyncio.Transport, asyncio.Protocol]:
        loop = asyncio.get_running_loop()
        _, outer = await loop.create_connection(lambda: _Batching(session_factory()), host, port)
        assert outer.transport is not None
        return outer.transport, outer.inner
