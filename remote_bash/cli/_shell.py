"""``shell``: an interactive line-by-line prompt on a host, through the same audited session Claude gets.

The terminal belongs to the main thread: it reads the lines (on a terminal with readline's line
editing, and a history kept owner-only in the state directory, secrets masked), and a Ctrl-C there
is Python's ``KeyboardInterrupt``: at the prompt it drops the line and draws a fresh prompt; while
a command runs it kills that command on the host. The session lives on an event loop in a thread of
its own, so the connection keeps being served while the prompt waits for the operator.

Commands run without a terminal (their stdin is /dev/null, their output a pipe): a full-screen
program (``vi``, ``top``, ``watch`` ...) would wait there until its deadline, so it is refused by
name before anything is sent (:func:`needs_terminal`), with a message saying what to do instead.

What this module must never do: leave a command running on the host after a Ctrl-C, write the
history file anywhere but through :mod:`remote_bash._paths`, or write a secret the host's
redactor knows into it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import re
import shlex
import sys
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ._context import _address, _Context, _pick_host, _session
from ._exec import _Echo, _run_one
from ._output import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_REFUSED, EXIT_TIMEOUT, _err, _exit_code, _one_line
from ._signals import received

if TYPE_CHECKING:
    from remote_bash.inventory import Inventory
    from remote_bash.redact import Redactor
    from remote_bash.session import RemoteBashSession

T = TypeVar("T")

HELP = """meta-commands:
  :help                   this list
  :restart                a fresh shell (the working directory and variables start over)
  :exit, :quit, Ctrl-D    leave
Ctrl-C kills the running command, or clears the line at the prompt. Up and down arrows recall
earlier lines. Commands run without a terminal: full-screen programs (vi, top, watch, ...) are
refused; use sed or a here-document to edit a file, 'top -b -n 1' for a snapshot, or ssh -t."""

TERMINAL_PROGRAMS = frozenset({
    "vi", "vim", "nvim", "view", "vimdiff", "gvim", "ex", "nano", "pico", "emacs", "jed", "joe", "mcedit", "micro",
    "ne", "mc", "top", "htop", "atop", "btop", "iotop", "iftop", "nmtui", "watch", "tmux", "screen", "byobu",
    "ncdu", "tig", "alsamixer", "cfdisk", "dialog", "whiptail", "visudo", "vipw", "vigr",
})
"""Programs that draw on a terminal and wait for keys: without one they hang until the deadline."""

_BATCH_FLAGS = {
    "top": re.compile(r"-[a-zA-Z]*b\w*"),  # top -b, -bn1: batch mode, prints and exits
    "emacs": re.compile(r"--batch|--script"),
    "vim": re.compile(r"-[eE]s?|-s"), "vi": re.compile(r"-[eE]s?|-s"), "ex": re.compile(r"-s"),
}
_WRAPPERS = {"sudo": {"-u", "-g", "-C", "-h", "-p", "-r", "-t", "-U", "-D"}, "doas": {"-u", "-C"},
             "env": {"-u", "-C", "-S"}, "nice": {"-n"}, "ionice": {"-c", "-n", "-p"}, "nohup": set(),
             "time": set(), "command": set(), "exec": {"-a"}, "builtin": set(), "stdbuf": {"-i", "-o", "-e"}}
_PUNCTUATION = frozenset(";&|()")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def needs_terminal(command: str) -> str | None:
    """The full-screen program ``command`` would start (``"vi"``), or None.

    A heuristic over the words of each simple command: environment assignments and wrappers such
    as ``sudo`` or ``env`` are skipped, and a program's batch mode (``top -b``, ``emacs --batch``,
    ``vim -es``) is let through. A command it cannot split is let through: the deadline still holds.
    """
    try:
        lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return None
    for simple in _simple_commands(words):
        program = _program(simple)
        if program is None:
            continue
        name, args = program
        base = os.path.basename(name)
        if base == "crontab" and "-e" in args:
            return "crontab -e"
        if base not in TERMINAL_PROGRAMS:
            continue
        batch = _BATCH_FLAGS.get(base)
        if batch is not None and any(batch.fullmatch(a) for a in args):
            continue
        return base
    return None


def _simple_commands(words: list[str]) -> Iterator[list[str]]:
    current: list[str] = []
    for word in words:
        if set(word) <= _PUNCTUATION:
            if current:
                yield current
            current = []
        else:
            current.append(word)
    if current:
        yield current


def _program(words: list[str]) -> tuple[str, list[str]] | None:
    """The program a simple command runs and its arguments, past assignments and wrappers."""
    i = 0
    while i < len(words):
        word = words[i]
        if _ASSIGNMENT.match(word):
            i += 1
            continue
        base = os.path.basename(word)
        if base in _WRAPPERS:
            i += 1
            while i < len(words) and (words[i].startswith("-") or _ASSIGNMENT.match(words[i])):
                takes_value = words[i] in _WRAPPERS[base]
                i += 2 if takes_value else 1
            if base == "nice" and i < len(words) and words[i].lstrip("-").isdigit():
                i += 1
            continue
        return word, words[i + 1 :]
    return None


class _LoopThread:
    """An event loop running in a thread of its own, so the main thread can own the terminal."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="remote-bash-shell", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` there and wait for it; a Ctrl-C cancels it and waits for it to wind up
        (the session kills the command on the host), then raises ``KeyboardInterrupt``."""
        tasks: list[asyncio.Task[T]] = []
        stop = threading.Event()

        async def hold() -> T:
            task = asyncio.current_task()
            assert task is not None
            tasks.append(task)
            if stop.is_set():  # the Ctrl-C came before the task had started
                coro.close()
                raise asyncio.CancelledError
            return await coro

        def cancel() -> None:
            for task in tasks:
                task.cancel()

        future = asyncio.run_coroutine_threadsafe(hold(), self.loop)
        interrupted = False
        while True:
            try:
                result = future.result()
            except KeyboardInterrupt:
                # A second Ctrl-C while the kill runs asks for the same kill: the wait goes on.
                interrupted = True
                stop.set()
                self.loop.call_soon_threadsafe(cancel)
                continue
            except (concurrent.futures.CancelledError, asyncio.CancelledError):
                raise KeyboardInterrupt from None
            if interrupted:
                raise KeyboardInterrupt  # the command finished before the cancel reached it
            return result

    def close(self) -> None:
        for ending in (self.loop.shutdown_asyncgens(), self.loop.shutdown_default_executor()):
            with contextlib.suppress(TimeoutError, RuntimeError, KeyboardInterrupt):  # ending anyway
                asyncio.run_coroutine_threadsafe(ending, self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        if not self.thread.is_alive():
            self.loop.close()


class _History:
    """readline's line editing and history, on a terminal: the history file is owner-only, in the
    state directory, and keeps each line as the host's redactor masks it."""

    LIMIT = 1000

    def __init__(self, path: Path, redactor: Redactor) -> None:
        import readline

        self.readline = readline
        self.path = path
        self.redactor = redactor
        readline.set_history_length(self.LIMIT)
        readline.clear_history()
        try:
            from remote_bash._paths import open_private

            fd = open_private(path, os.O_RDONLY, what="the shell history")
        except FileNotFoundError:
            return
        except OSError as exc:
            _err(f"[history not read: {_one_line(str(exc))}]")
            return
        with os.fdopen(fd, encoding="utf-8", errors="replace") as fh:
            for line in fh.read().splitlines()[-self.LIMIT :]:
                readline.add_history(line)

    def forget_last(self) -> None:
        """Leave the line just read out of the history (``:exit``: recalling it would only leave)."""
        length = self.readline.get_current_history_length()
        if length:
            self.readline.remove_history_item(length - 1)

    def save(self) -> None:
        from remote_bash._paths import private_dir, write_private
        from remote_bash.errors import RemoteBashError

        r = self.readline
        lines = [r.get_history_item(i) for i in range(1, r.get_current_history_length() + 1)]
        text = "".join(" ".join(self.redactor.redact(line).splitlines()) + "\n" for line in lines if line)
        try:
            private_dir(self.path.parent, what="the state directory")
            write_private(self.path, text.encode(), what="the shell history")
        except (OSError, RemoteBashError) as exc:
            _err(f"[history not saved: {_one_line(str(exc))}]")


def history_path(env: Any) -> Path:
    from remote_bash._paths import state_dir

    return state_dir(env) / "shell_history"


def _cmd_shell(ctx: _Context) -> int:
    with ctx.inventory() as inventory:
        name = _pick_host(inventory, ctx.args.host)
        return _Shell(ctx, inventory, name).run()


class _Shell:
    def __init__(self, ctx: _Context, inventory: Inventory, name: str) -> None:
        self.ctx, self.inventory, self.name = ctx, inventory, name
        self.tty = sys.stdin.isatty()
        self.status = 0

    def run(self) -> int:
        from remote_bash.terminal import escape

        loop = _LoopThread()
        session: RemoteBashSession | None = None
        history: _History | None = None
        try:
            session, redactor = loop.run(_session(self.ctx, self.inventory, self.name))
            loop.run(session.start())
            info = session.info
            if info is not None:
                _err(f"connected to {self.name} ({info.user}@{_address(session)}, {info.os}, bash "
                     f"{info.bash_version}). :help lists the meta-commands; :exit or Ctrl-D leaves")
            if self.tty:
                history = _History(history_path(self.ctx.env), redactor)
            prompt = f"{escape(self.name)}$ "
            while True:
                try:
                    line = self._read(prompt)
                except KeyboardInterrupt:
                    if received() is not None:
                        raise  # SIGTERM or SIGHUP (a closed terminal): the shell ends
                    _err("")  # a fresh prompt on a fresh line; the line typed so far is dropped
                    continue
                if line is None:
                    break
                word = line.strip()
                if word in (":exit", ":quit"):
                    if history is not None:
                        history.forget_last()
                    break
                if not word:
                    continue
                if re.fullmatch(r":[a-z]+", word):
                    self._meta(loop, session, word)
                    continue
                program = needs_terminal(line)
                if program is not None:
                    _err(f"[not run: {program} waits for a terminal, and commands here have none; :help says "
                         "what to use instead]")
                    self.status = EXIT_REFUSED
                    continue
                self._command(loop, session, redactor, line)
        except KeyboardInterrupt:
            if received() is None:
                _err("[interrupted]")  # (a signal's line is main()'s)
            self.status = EXIT_INTERRUPTED
        finally:
            if history is not None:
                history.save()
            if session is not None:
                with contextlib.suppress(KeyboardInterrupt):
                    loop.run(session.close())
            loop.close()
        return self.status

    def _read(self, prompt: str) -> str | None:
        """One line; None at end of input (Ctrl-D)."""
        if self.tty:
            try:
                return input(prompt)
            except EOFError:
                _err("")
                return None
        line = sys.stdin.readline()
        return line.rstrip("\n") if line else None

    def _meta(self, loop: _LoopThread, session: RemoteBashSession, word: str) -> None:
        from remote_bash.errors import RemoteBashError

        if word == ":help":
            _err(HELP)
            return
        if word != ":restart":
            _err(f"[unknown meta-command {word}; :help lists them]")
            return
        try:
            restarted = loop.run(session.restart())
        except RemoteBashError as exc:
            _err(f"[error: {_one_line(str(exc))}]")
            self.status = _exit_code(exc)
        except KeyboardInterrupt:
            if received() is None:
                _err("[interrupted]")  # (a signal's line is main()'s)
            self.status = EXIT_INTERRUPTED
        else:
            _err(f"restarted: a fresh shell (pid {restarted.shell_pid})")
            if session.last_kill is not None and session.last_kill.unchecked:
                _err(f"not checked: {session.last_kill.unchecked}")

    def _command(self, loop: _LoopThread, session: RemoteBashSession, redactor: Redactor, line: str) -> None:
        from remote_bash.errors import AccessDenied, RemoteBashError

        echo = _Echo(redactor)
        try:
            result = loop.run(_run_one(session, line, self.ctx.args.timeout, echo.feed))
        except KeyboardInterrupt:
            echo.finish(None)
            if received() is not None:
                raise  # SIGTERM or SIGHUP: the command was killed, and the whole shell ends
            _err("[interrupted: the command was killed]")
            self.status = EXIT_INTERRUPTED
            return
        except AccessDenied as exc:
            echo.finish(None)
            _err(f"[refused: {exc.message}]")
            self.status = _exit_code(exc)
            return
        except RemoteBashError as exc:
            echo.finish(None)
            _err(f"[error: {_one_line(str(exc))}]")
            self.status = _exit_code(exc)
            return
        echo.finish(result)
        if result.timed_out:
            _err(f"[timed out after {result.timeout:g} s: the command was killed]")
            self.status = EXIT_TIMEOUT
        elif result.shell_lost:
            _err(f"[the shell exited (status {result.exit_code}); the next command gets a fresh one]")
            self.status = result.exit_code if result.exit_code is not None else EXIT_ERROR
        else:
            self.status = result.exit_code if result.exit_code is not None else EXIT_ERROR
            if self.status:
                _err(f"[exit {self.status}]")
