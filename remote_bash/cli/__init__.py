"""The ``remote-bash`` command line: the only package that prints or reads argv.

Commands: ``exec``, ``shell``, ``run``, ``hosts``, ``check``, ``credentials``, ``audit``,
``sandbox`` and ``fleet`` (``remote-bash COMMAND --help`` shows each, with an example).

Imports are lazy: ``--help`` and ``exec`` never load the anthropic SDK, which only ``run`` and
``fleet run`` need. An error is one line on stderr and a documented exit status, never a
traceback unless ``--debug`` is given. With no inventory configured, the built-in ``sandbox``
host is used: a throwaway host in a container, or as a throwaway user (``remote-bash sandbox``).

The package's modules, lowest layer first: ``_output`` (printing, exit statuses), ``_context`` (what
the global options give every command, the built-in sandbox host included), the commands in
``_exec``, ``_shell``, ``_run``, ``_admin``, ``_fleet``, ``_sandbox`` and ``_mcp``, ``_grammar`` (the parser:
argv in, options or a one-line usage error out), and ``_app`` (:func:`main`), which imports a
command's module only when that command runs.

``exec --keep HOST -- COMMAND`` in its plain shape skips even the parser: :func:`main` hands it to
``_keepc``, the kept call's client, which loads ``_output``, ``_signals``, ``_paths`` and the
interpreter's built-in modules (and ``_socket``) only; anything else (or anything unusual in it)
goes through the parser in ``_grammar``.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: a kept call's client loads this module, and typing costs it
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._output import (
        EXIT_ERROR,
        EXIT_FAILED,
        EXIT_INTERRUPTED,
        EXIT_NOT_ALLOWED,
        EXIT_REFUSED,
        EXIT_TIMEOUT,
        EXIT_USAGE,
    )

__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_ALLOWED",
    "EXIT_REFUSED",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "main",
]


def __getattr__(name: str) -> int:
    # The exit statuses, from _output on first use: a kept call's client prints through it only on error.
    if name.startswith("EXIT_") and name in __all__:
        from . import _output

        value: int = getattr(_output, name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """The ``remote-bash`` entry point; returns the exit status.

    Called without ``argv`` (the console script, ``python -m remote_bash.cli``), it is the process's
    entry point: a kept call that went the fast path then ends the process itself once its output is
    flushed (:func:`_end`). With ``argv``, it always returns."""
    from . import _signals

    previous = _signals.install()
    kept: list[bool] = []
    try:
        status = _signals.status(_main(list(sys.argv[1:] if argv is None else argv), kept))
    finally:
        _signals.restore(previous)
    if kept and argv is None:
        _end(status)
    return status


def _end(status: int) -> None:
    """Exit now with ``status``, skipping the interpreter's teardown: freeing every object of every
    module (about 10 M instructions, more than the rest of a kept call's client) for a process that
    holds nothing left to close, write or wait for (no thread but the signal watchdog, a daemon; no
    exit handler of ours). When the output cannot be flushed, the interpreter's own exit says so."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # a closed pipe, no stdout at all: the interpreter's exit reports it
        return
    os._exit(status)


def _main(words: list[str], kept: list[bool]) -> int:
    if "--" in words and "exec" in words[: words.index("--")]:
        from ._keepc import fast_exec

        status = fast_exec(words, os.environ)
        if status is not None:
            kept.append(True)
            return status
    # pydantic looks for plugins through every installed distribution's entry points when it builds
    # its first model (an inventory read from its file rather than the cache, a validated setting):
    # about 100 ms, for plugins this command never uses. Only this process (and what it starts) is
    # affected; a value the user set is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from ._app import main as parse_and_run

    return parse_and_run(words)
