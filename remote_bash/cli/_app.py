""":func:`main`: argv in (through :func:`._grammar.parse`), logging set up, the command run, an exit status out.

Each command's module is imported only when that command runs, so ``--help`` loads none of them.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import _signals
from ._grammar import _parser as _parser  # the parser itself, for whoever compares with it
from ._grammar import parse
from ._output import (
    EXIT_FAILED,
    PROG,
    _err,
    _exit_code,
    _NoApiKey,
    _one_line,
    _UsageError,
)


def _command(handler: str) -> Callable[[Any], int]:
    """The function named by ``"module:function"``, a module of this package imported only now."""
    module, _, name = handler.partition(":")
    found: Callable[[Any], int] = getattr(importlib.import_module(f".{module}", __package__), name)
    return found


def _setup_logging(debug: bool) -> None:
    import logging

    from remote_bash.terminal import escape

    class _Escaped(logging.Formatter):
        """Log messages may quote a host's words: shown escaped, like every other message."""

        def format(self, record: logging.LogRecord) -> str:
            return escape(super().format(record))

    handler = logging.StreamHandler(sys.stderr)
    shape = f"{PROG}: %(name)s: %(levelname)s: %(message)s" if debug else f"{PROG}: warning: %(message)s"
    handler.setFormatter(_Escaped(shape))
    logger = logging.getLogger("remote_bash")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.WARNING)
    logger.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    """The ``remote-bash`` entry point; returns the exit status."""
    if hasattr(signal, "SIGXFSZ"):
        # A file-size limit on the audit directory must become an AuditError, not a crash.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
    except _UsageError as exc:
        _err(_one_line(str(exc)))  # the line names the command already
        return _exit_code(exc)
    try:
        if args.handler == "_exec:_cmd_exec":
            # A kept session answers without the SSH stack, pydantic, the models or logging loaded here.
            from . import _keep

            if _keep.wanted(args, os.environ):
                return _keep.exec_kept(args)
        _setup_logging(args.debug)
        from ._context import _Context

        ctx = _Context(args)
        code: int = _command(args.handler)(ctx)
        return code
    except KeyboardInterrupt:
        return _signals.interrupted()  # Ctrl-C, or SIGTERM/SIGHUP routed to its path
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as exc:
        if args.debug:
            import traceback

            _err(traceback.format_exc())
        from remote_bash.errors import RemoteBashError

        if isinstance(exc, _UsageError):
            # A mistake a command found in its options: named and hinted as the parser's are.
            _err(_one_line(f"{args.prog}: {exc}; usage: {args.usage_hint}"))
            return _exit_code(exc)
        known = isinstance(exc, RemoteBashError | _NoApiKey)
        message = str(exc) if known else f"internal error: {type(exc).__name__}: {exc} (--debug shows where)"
        _err(f"{PROG}: {_one_line(message)}")
        return _exit_code(exc)
