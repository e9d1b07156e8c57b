"""The first hop's TCP connection sends the writes of one event-loop turn together, in order.

The batching transport is a byte pipe under asyncssh: these tests hold it to what a socket
transport promises (every byte, in order, before a close, an abort or an EOF) on a real socket
pair, and a real sshd session to running through it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from remote_bash._ssh import transport
from remote_bash.models import Host
from remote_bash.session import RemoteBashSession


class _Peer(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = bytearray()
        self.eof = asyncio.Event()
        self.more = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.data.extend(data)
        self.more.set()

    def eof_received(self) -> bool:
        self.eof.set()
        return True


class _Pair:
    """A real socket pair: the batched transport on one end (over a socket transport whose
    writes are counted), a plain protocol reading the other."""

    def __init__(self, batched: transport._BatchedTransport, writes: list[bytes], peer: _Peer) -> None:
        self.batched = batched
        self.writes = writes
        self.peer = peer

    async def received(self, size: int) -> bytes:
        async with asyncio.timeout(10):
            while len(self.peer.data) < size:
                self.peer.more.clear()
                await self.peer.more.wait()
        return bytes(self.peer.data)


@pytest.fixture
async def pair() -> AsyncIterator[_Pair]:
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    inner, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
    writes: list[bytes] = []
    real_write = inner.write

    def counted(data: bytes | bytearray | memoryview) -> None:
        writes.append(bytes(data))
        real_write(data)

    inner.write = counted  # type: ignore[method-assign]  # counts the socket transport's writes
    peer = _Peer()
    other, _ = await loop.create_connection(lambda: peer, sock=theirs)
    assert isinstance(inner, asyncio.Transport)
    yield _Pair(transport._BatchedTransport(loop, inner), writes, peer)
    inner.abort()
    other.abort()


async def test_the_writes_of_one_turn_go_as_one_in_their_order(pair: _Pair) -> None:
    for part in (b"one ", b"", b"two ", bytearray(b"three "), memoryview(b"four")):
        pair.batched.write(part)
    assert pair.writes == []
    assert pair.batched.get_write_buffer_size() == len(b"one two three four")
    assert await pair.received(18) == b"one two three four"
    assert pair.writes == [b"one two three four"]
    pair.batched.writelines([b" five", b" six"])
    assert await pair.received(27) == b"one two three four five six"
    assert pair.writes == [b"one two three four", b" five six"]


async def test_a_batch_past_its_bound_goes_at_once(pair: _Pair) -> None:
    pair.batched.write(b"head ")
    big = b"x" * transport.FLUSH_AT
    pair.batched.write(big)
    assert pair.writes == [b"head " + big]  # sent before the turn ends, the held bytes first
    pair.batched.write(b" tail")
    assert len(await pair.received(len(big) + 10)) == len(big) + 10
    assert pair.writes[1:] == [b" tail"]


@pytest.mark.parametrize("end", ["close", "abort", "write_eof"])
async def test_what_was_written_goes_before_the_end(pair: _Pair, end: str) -> None:
    pair.batched.write(b"last ")
    pair.batched.write(b"words")
    getattr(pair.batched, end)()
    assert pair.writes == [b"last words"]
    assert await pair.received(10) == b"last words"
    async with asyncio.timeout(10):
        await pair.peer.eof.wait()  # the far end reads the bytes, then the end of the stream
    assert bytes(pair.peer.data) == b"last words"


async def test_the_rest_is_the_socket_transports(pair: _Pair) -> None:
    batched = pair.batched
    assert batched.get_extra_info("socket") is not None
    assert batched.get_extra_info("no such thing", "default") == "default"
    assert batched.can_write_eof()
    batched.pause_reading()
    assert not batched.is_reading()
    batched.resume_reading()
    assert batched.is_reading()
    batched.set_write_buffer_limits(high=1024)
    assert batched.get_write_buffer_limits()[1] == 1024
    assert not batched.is_closing()
    with pytest.raises(NotImplementedError):
        batched.set_protocol(asyncio.Protocol())


async def test_a_session_runs_through_it(web1: Host) -> None:
    async with RemoteBashSession(web1, audit=False) as session:
        result = await session.run("printf '%s\\n' first; seq 1 20000 | tail -n 1; echo $((6 * 7))")
        assert result.output == "first\n20000\n42\n"
        conn = session._conn
        assert conn is not None
        assert isinstance(conn._conn._transport, transport._BatchedTransport)  # the first hop's
