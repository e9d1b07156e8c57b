"""Whether the CLI's stdin holds input for a remote command, as ``ssh`` decides: a terminal,
/dev/null or a closed descriptor hold none; a pipe, a file or a socket do.

Standard library only: ``exec --keep`` loads it before anything else. It never reads stdin.
"""

from __future__ import annotations

import io
import os
import stat

__all__ = ["has_input", "open_input"]


def has_input(fd: int = 0) -> bool:
    """True when ``fd`` is input to forward: not a terminal, not /dev/null, not closed."""
    try:
        info = os.fstat(fd)
    except OSError:
        return False
    if os.isatty(fd):
        return False
    if stat.S_ISCHR(info.st_mode):
        try:
            null = os.stat(os.devnull)
        except OSError:
            return True
        return info.st_rdev != null.st_rdev
    return True


def open_input(no_stdin: bool, fd: int = 0) -> io.FileIO | None:
    """The command's input for ``exec``: a raw reader of ``fd`` (left open at the end), or None
    when there is none to send (``-n``, or see :func:`has_input`)."""
    if no_stdin or not has_input(fd):
        return None
    return io.FileIO(fd, "rb", closefd=False)
