"""SHA-256 of a stream, with large streams hashed in batches on a worker thread.

hashlib lets go of the GIL while it hashes a buffer of more than a few KB, so a batch hashed on
a worker thread runs on another core while the event loop's thread decrypts what comes next: a
large output costs the loop's thread a list append per chunk and one copy per batch, not its
hashing. A stream shorter than one batch (most outputs) never touches a thread: it is hashed
where its digest is asked for.

The digest is exactly ``hashlib.sha256`` of every byte in order: batches of one stream are hashed
one after another (one batch in flight at a time), and what is left is hashed last. Memory stays
bounded: at most ``BATCH`` bytes wait, one batch is in flight and, should the worker fall behind,
at most ``BACKLOG`` bytes wait before the stream waits for its batch in flight. Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported on first use: a short command line never needs the threads
    import concurrent.futures

__all__ = ["EMPTY_SHA256", "StreamDigest"]

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

BATCH = 256 * 1024
"""Bytes gathered before a batch goes to the worker: big enough that the hand-over (a copy, a
queue put, a thread wake-up) costs a small part of the hashing it saves."""
BACKLOG = 1024 * 1024
"""Bytes that may wait while a batch is still in flight; past that the stream waits for the
batch in flight, so memory stays bounded when the worker falls behind."""

_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    if _pool is None:
        from concurrent.futures import ThreadPoolExecutor

        # Two threads: one stream's batch never waits long behind another stream's. Two event
        # loops on two threads racing here would make two pools, each finishing what it was given.
        _pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="remote-bash-sha256")
    return _pool


def _forget_pool() -> None:
    # A forked child has none of its parent's threads: it starts a pool of its own if it hashes.
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


class StreamDigest:
    """``hashlib.sha256`` over chunks fed one by one; see the module docstring."""

    __slots__ = ("_flight", "_pending", "_sha", "_size")

    def __init__(self) -> None:
        self._sha: hashlib._Hash | None = None
        self._pending: list[bytes] = []
        self._size = 0
        self._flight: concurrent.futures.Future[None] | None = None

    def update(self, data: bytes) -> None:
        self._pending.append(data)
        self._size += len(data)
        if self._size >= BATCH:
            flight = self._flight
            if flight is None or flight.done():
                self._send()
            elif self._size >= BACKLOG:
                flight.result()  # the worker fell far behind: wait for it rather than hold more
                self._send()

    def _send(self) -> None:
        if self._flight is not None:
            self._flight.result()  # done: raises if hashing failed (it does not)
        data = b"".join(self._pending)
        self._pending.clear()
        self._size = 0
        if self._sha is None:
            self._sha = hashlib.sha256()
        try:
            self._flight = _executor().submit(self._sha.update, data)
        except RuntimeError:  # the interpreter is shutting down: no new threads, hash it here
            self._flight = None
            self._sha.update(data)

    def in_flight(self) -> concurrent.futures.Future[None] | None:
        """The batch being hashed, if one is: await it (``asyncio.wrap_future``) before
        :meth:`hexdigest` so that reading the digest does not wait on the loop's thread."""
        flight = self._flight
        return None if flight is None or flight.done() else flight

    def hexdigest(self) -> str:
        """The digest of every byte fed so far; feeding may go on after."""
        if self._flight is not None:
            self._flight.result()
            self._flight = None
        if self._sha is None:
            if not self._pending:
                return EMPTY_SHA256
            self._sha = hashlib.sha256()
        for data in self._pending:
            self._sha.update(data)
        self._pending.clear()
        self._size = 0
        return self._sha.hexdigest()
