"""SIGTERM and SIGHUP end a command as Ctrl-C does: what runs on a host is killed and audited.

``timeout``, a CI cancel, systemd and a closed terminal send SIGTERM or SIGHUP, not SIGINT. Left
to Python's default, either ends the process at once: the remote command runs on unattended and
its audit log stops at ``exec.start``. Here the first such signal takes the path of Ctrl-C (the
asyncio runner's SIGINT handler cancels the command, which kills it on the host and audits it),
and the process then exits with 128 + the signal's number and one line naming the signal.

Stopping is bounded: a second signal does not cut the kill short (it says that stopping goes on,
and for how long at most), and when cleanup has not finished within :data:`CLEANUP_DEADLINE` the
process says what may be left and exits anyway. It must never exit silently with cleanup
half-done, nor print anything for a command that was not signalled.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # not typing's: a kept call's client loads this module, and typing costs it
if TYPE_CHECKING:
    import signal as _signal
    import threading
    from types import FrameType
    from typing import Any
else:
    import _signal  # not signal: its enums cost a kept call's client more than its call

CLEANUP_DEADLINE = 30.0  # killing a command takes three rounds of at most 10 s each (session._kill_call)
EXIT_GRACE = 5.0  # after cleanup: a thread stuck in a blocking read (shell's input()) must not hold the exit

_received: list[int] = []
_finished: list[threading.Event] = []  # made with the first signal (threading loads only then)
_started = 0.0


def install() -> dict[int, Any]:
    """Route SIGTERM and SIGHUP to the Ctrl-C path; returns the handlers they had (for restore).

    Only the main thread can set handlers: called from another (main() used as a library), it
    changes nothing."""
    previous: dict[int, Any] = {}
    try:
        for sig in (_signal.SIGTERM, _signal.SIGHUP):
            previous[sig] = _signal.signal(sig, _on_signal)
    except ValueError:  # not the main thread (the first call refuses, so nothing was changed)
        restore(previous)
        return {}
    return previous


def restore(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        _signal.signal(sig, handler)


def received() -> int | None:
    """The first terminating signal received, if any."""
    return _received[0] if _received else None


def name(signum: int) -> str:
    import signal

    return signal.Signals(signum).name


def status(code: int) -> int:
    """The exit status to return: ``code``, or 128 + the signal when one ended the command (then
    with its one line on stderr, said once)."""
    signum = received()
    if signum is None:
        return code
    if not _finished[0].is_set():
        _finished[0].set()
        from ._output import PROG, _err

        _err(f"{PROG}: stopped by {name(signum)}: as on Ctrl-C, what was running on a host was killed and "
             "audited, and the sessions closed")
    return 128 + signum


def interrupted() -> int:
    """For ``except KeyboardInterrupt``: Ctrl-C's line and status, or those of the signal that
    took Ctrl-C's path."""
    from ._output import EXIT_INTERRUPTED, PROG, _err

    if received() is None:
        _err(f"{PROG}: interrupted")
        return EXIT_INTERRUPTED
    return status(EXIT_INTERRUPTED)


def _runner_interrupted(handler: Any) -> bool:
    """Whether ``handler`` is an asyncio runner's SIGINT handler that already cancelled the main
    task (Ctrl-C came first): calling it again would raise KeyboardInterrupt mid-kill."""
    owner = getattr(getattr(handler, "func", None), "__self__", None)
    count = getattr(owner, "_interrupt_count", 0)
    return isinstance(count, int) and count >= 1


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _started
    handler = _signal.getsignal(_signal.SIGINT)
    if _received or _runner_interrupted(handler):
        import contextlib

        from ._output import PROG, _err

        left = (f"; giving up in at most {max(0.0, CLEANUP_DEADLINE - (time.monotonic() - _started)):.0f} s"
                if _received else "")
        with contextlib.suppress(RuntimeError):  # a write interrupted by this very handler
            _err(f"{PROG}: {name(signum)}: already stopping (killing what runs on the host and auditing it){left}")
        return
    import threading

    _finished.append(threading.Event())
    _received.append(signum)
    _started = time.monotonic()
    # From now on Ctrl-C too is a second signal: it says that stopping goes on, and does not reach
    # the asyncio runner, whose second SIGINT raises KeyboardInterrupt in the middle of the kill.
    # Swapped before anything else: a Ctrl-C whose handler ran since the check above has already
    # cancelled the command, and the runner's handler must then not be called a second time.
    handler = _signal.signal(_signal.SIGINT, _on_signal)
    threading.Thread(target=_watchdog, args=(signum,), name="remote-bash-stop", daemon=True).start()
    if _runner_interrupted(handler):
        return
    if callable(handler) and getattr(handler, "__module__", "") != "asyncio.unix_events":
        # The asyncio runner's handler (cancel the main task), Python's default (KeyboardInterrupt;
        # the shell asks received() whether to end rather than draw a fresh prompt) or a command's
        # own Ctrl-C handler (exec --keep: ask the kept session to kill the call).
        handler(_signal.SIGINT, frame)
        return
    # Ignored, or routed to an event loop callback that may only interrupt a single command: a
    # terminating signal ends the whole command, which unwinds through the same cancellation.
    raise KeyboardInterrupt


def _watchdog(signum: int) -> None:
    from ._output import PROG, _err

    if _finished[0].wait(CLEANUP_DEADLINE):
        # Cleaned up and said so: the interpreter exits on its own, unless a thread blocked in a
        # read (shell's input()) holds it; then it must not wait for a line that never comes.
        time.sleep(EXIT_GRACE)
    else:
        _err(f"{PROG}: stopped by {name(signum)}, but stopping did not finish within {CLEANUP_DEADLINE:g} s: "
             "what was running on the host may still run; its audit log says what was recorded")
    _flush()
    os._exit(128 + signum)


def _flush() -> None:
    import contextlib

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            stream.flush()
