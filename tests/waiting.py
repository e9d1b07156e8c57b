"""Waiting in tests: poll a condition with a bound, and fail loudly naming what never came.

Tests synchronise on these, never on fixed sleeps: a fixed sleep is either too short on a loaded
machine (a test that fails by chance) or too long everywhere (a slow suite). A wait that runs out
raises AssertionError saying what was awaited, for how long, and what was last seen, so a red test
reads as the broken promise it is rather than as a later, stranger assertion.

Never use these to wait for something that should NOT happen: a condition that never comes only
shows that it did not come within the bound.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# First polls come quickly (most conditions hold within milliseconds); later ones back off so a long
# wait does not busy the 2 cores the suite shares.
_FIRST_POLL = 0.01
_MAX_POLL = 0.2


def _timed_out(what: str, within: float, seen: object, show: Callable[[], object] | None) -> AssertionError:
    detail = show() if show is not None else seen
    return AssertionError(f"timed out after {within:g} s waiting for {what}; last seen: {detail!r}")


def wait_until(predicate: Callable[[], T], *, within: float, what: str,
               show: Callable[[], object] | None = None) -> T:
    """Poll ``predicate`` until it returns something true, and return that; at most ``within`` s.

    ``what`` names the awaited event ("the agent socket to appear"); ``show``, if given, describes
    the state for the failure message (default: the predicate's last value). The predicate is
    asked once more at the deadline, so a slow poll never costs a condition that came in time.
    """
    deadline = time.monotonic() + within
    pause = _FIRST_POLL
    while True:
        seen = predicate()
        if seen:
            return seen
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timed_out(what, within, seen, show)
        time.sleep(min(pause, left))
        pause = min(pause * 2, _MAX_POLL)


async def wait_for(predicate: Callable[[], T], *, within: float, what: str,
                   show: Callable[[], object] | None = None) -> T:
    """:func:`wait_until` for async tests: the event loop runs between polls."""
    deadline = time.monotonic() + within
    pause = _FIRST_POLL
    while True:
        seen = predicate()
        if seen:
            return seen
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timed_out(what, within, seen, show)
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, _MAX_POLL)
