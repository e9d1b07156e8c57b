"""Asking the operator at the terminal before a command the host's ``approve`` rules name is sent.

The question goes to the controlling terminal (``/dev/tty``), never to stdout, so ``--json`` and
pipes stay clean; with no terminal, or no answer in time, the answer is no. One question at a time,
whatever the number of hosts asking.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from remote_bash.approval import Approval, Need
    from remote_bash.models import Host

Mode = Literal["rules", "all", "none"]
_MAX_LINE = 4096


def _visible(text: str) -> str:
    """The command as it will run, with anything a terminal would interpret shown escaped."""
    from remote_bash.terminal import escape

    return escape(text)


class TerminalApprover:
    """An approver (see :data:`remote_bash.tool.Approver`) that asks at the terminal.

    ``mode``: ``rules`` asks where the host's rules say so, ``all`` asks for every command
    (``--approve``), ``none`` asks nothing (``--no-approve``: the operator's decision, audited).
    """

    def __init__(self, operator: str, *, mode: Mode = "rules", timeout: float = 300.0,
                 tty: str = "/dev/tty") -> None:
        from remote_bash.approval import Grants

        self.operator = operator
        self.mode = mode
        self.timeout = timeout
        self.tty = tty
        self.grants = Grants()
        self._one_at_a_time = asyncio.Lock()

    async def __call__(self, host: Host, command: str, need: Need) -> Approval:
        from remote_bash.approval import Approval

        if self.mode == "none":
            return Approval(True, "all", by=f"{self.operator} (--no-approve)")
        if self.grants.covers(host.name, command):
            return Approval(True, "granted", by=self.operator)
        async with self._one_at_a_time:
            try:
                fd = os.open(self.tty, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
            except OSError:
                return Approval(False, "unavailable", reason="there is no terminal to ask a person at "
                                                             "(--no-approve runs without asking)")
            try:
                return await self._ask(fd, host, command, need)
            finally:
                os.close(fd)

    async def _ask(self, fd: int, host: Host, command: str, need: Need) -> Approval:
        from remote_bash.approval import Approval

        question = (f"\n[approval] {host.name} ({host.address}): {_visible(need.reason)}\n"
                    f"  $ {_visible(command)}\n"
                    "  run it? [y] once  [a] allow this exact command here for 15 min (a 60: 60 min)  "
                    "[n] refuse (n REASON)  > ")
        os.write(fd, question.encode("utf-8", "replace"))
        try:
            line = await asyncio.wait_for(_read_line(fd), self.timeout)
        except TimeoutError:
            os.write(fd, b"\n[approval] no answer in time: refused\n")
            return Approval(False, "timeout", by=self.operator, reason=f"nobody answered within {self.timeout:g} s")
        word, _, rest = line.strip().partition(" ")
        word = word.lower()
        if word in ("y", "yes"):
            return Approval(True, "once", by=self.operator)
        if word in ("a", "allow"):
            minutes = float(rest) if rest.strip().replace(".", "", 1).isdigit() and float(rest) > 0 else 15.0
            self.grants.add(host.name, command, minutes)
            return Approval(True, "grant", by=self.operator, minutes=minutes)
        reason = rest.strip() if word in ("n", "no") else ""
        return Approval(False, "refused", by=self.operator, reason=reason or "the operator said no")


async def _read_line(fd: int) -> str:
    """One line from the terminal without blocking the event loop (the descriptor is non-blocking)."""
    loop = asyncio.get_running_loop()
    buf = bytearray()
    for _ in range(_MAX_LINE):  # one byte or more per round: bounded by the line's length
        if b"\n" in buf or len(buf) >= _MAX_LINE:
            break
        ready: asyncio.Future[None] = loop.create_future()

        def wake(future: asyncio.Future[None] = ready) -> None:
            if not future.done():
                future.set_result(None)

        loop.add_reader(fd, wake)
        try:
            await ready
        finally:
            loop.remove_reader(fd)
        with contextlib.suppress(BlockingIOError):
            chunk = os.read(fd, 1024)
            if not chunk:
                break
            buf += chunk
    return buf.split(b"\n", 1)[0].decode("utf-8", "replace")
