"""The client of a kept call: what ``exec --keep`` loads to run a command in a host's kept session.

A kept session is a host's session held by a small per-user background process (``_keepd``) that
listens on a private unix socket in the runtime directory, so the next ``exec --keep`` on that
host reuses the same remote shell. This module is all a call on a running kept session loads
beyond ``_signals``, ``_input`` and ``_paths``: the interpreter's built-in modules (``posix``,
``_signal``, ``time``) and ``_socket``; no ``pathlib``, ``json``, ``contextlib``, ``signal``, nor the
error classes or ``_output``, which would cost a call more than its round trip (``tests/test_keep.py``
holds the module set). Starting the background process, and every error, loads what it needs when it happens.
It never re-sends a request: a background process that dies mid-call is an error, not a retry.

Protocol (version 3): one JSON line from the client, ``{"v": 3, "op": "run", "key": {...},
"command": ..., "timeout": ..., "json": ..., "idle": ..., "terminal": ...}`` (a second line, any,
asks to kill the call: Ctrl-C; the connection closed does too). The replies are frames: a kind
byte, the payload's length in bytes in decimal, ``:``, then the payload (UTF-8 text, escaped by
the background process as ``exec`` escapes what it prints, the output only when the client's
stdout is a ``terminal``): ``o`` text for stdout, ``e`` a line for
stderr, ``b`` a sign of life (empty), ``s`` ``PID REASON`` (the process is closing, nothing was run:
a fresh one serves the call), ``x`` the exit status, then a space and a line for stderr if there is
one (the last frame). A JSON line (``{"e": ..., "x": ...}``) instead is an answer given before the
request was read (another user refused, a request it could not read) or by a process of another
version. ``info`` and ``stop`` (``_keep``) are JSON lines both ways, in every version.

A kept session is keyed by the host and by every option that decides how its session is built
(the inventory, ``--allow``, the audit directory, with the defaults they resolve to, ``HOME``, and
the environment variables ``~/.ssh/config`` names): an invocation under other rules gets its own
background process, never another one's shell.
"""

from __future__ import annotations

import _socket  # not socket: the wrapper turns its constants into enums at import
import os
import sys
import time

from remote_bash._paths import config_path, open_private, private_path, runtime_path, state_path

TYPE_CHECKING = False  # not typing's: importing typing would cost a kept call more than its round trip
if TYPE_CHECKING:
    import signal as _signal
    import subprocess
    from collections.abc import Iterator, Mapping
    from typing import Protocol

    from remote_bash.errors import SessionError

    class KeepArgs(Protocol):
        """What ``exec --keep`` reads of its options: an ``argparse.Namespace`` of ``exec``, or the fast
        path's (:func:`fast_exec`), which has the same names and values."""

        host: str | None
        inventory: str | None
        allow: str | None
        audit_dir: str | None
        debug: bool
        keep: bool
        keep_idle: float | None
        no_keep: bool
        timeout: float | None
        json: bool
        words: list[str] | None
else:
    import _signal  # not signal: its enums cost a kept call more than its round trip

PROTOCOL = 3
"""The version of a ``run`` request. ``info`` and ``stop`` are sent as version 1, which every
background process answers: a client lists and stops the processes of an older version too."""
ANY_VERSION = 1
BEAT = 1.0
"""Seconds between a background process's signs of life while it serves a call."""
SILENCE = 10.0
"""Seconds without a word from the background process after which a client says it does not answer
(stopped, hung): ten beats missed, never a quiet command's silence."""
DEFAULT_IDLE = 600.0
"""Seconds a kept session waits unused before its process closes it (``--keep-idle``, ``REMOTE_BASH_KEEP``)."""
START_WAIT = 30.0
"""How long a client waits for a background process it started to listen."""
SETTING = "REMOTE_BASH_KEEP"
CANCEL = b'{"op": "cancel"}\n'
"""What a client sends during a call to have it killed (Ctrl-C): any line does."""


# -- where, and under which key --------------------------------------------------------------------


def keep_path(env: Mapping[str, str]) -> str:
    """The owner-only directory of the sockets (and locks) of kept sessions."""
    return os.path.join(runtime_path(env), "keep")


def log_path(env: Mapping[str, str]) -> str:
    """The directory of the background processes' logs."""
    return os.path.join(state_path(env), "keep")


def _absolute(value: str | None) -> str:
    return os.path.abspath(os.path.expanduser(value)) if value else ""


def session_key(args: KeepArgs, env: Mapping[str, str]) -> dict[str, str | None]:
    """What decides how a kept session is built: the same key means the same rules."""
    return {
        "host": args.host or "",
        # `~` in the inventory (identity files, known_hosts) and ~/.ssh/config follow HOME.
        "home": env.get("HOME", ""),
        "inventory": _absolute(args.inventory or env.get("REMOTE_BASH_INVENTORY")),
        "default_inventory": config_path(env),
        "allow": args.allow,
        "audit_dir": _absolute(args.audit_dir or env.get("REMOTE_BASH_AUDIT_DIR")),
        "default_audit_dir": state_path(env),
        # With no inventory, the built-in sandbox host: how it runs is part of the rules too.
        "backend": getattr(args, "backend", None),
        "image": getattr(args, "image", None),
        "sandbox_setting": env.get("REMOTE_BASH_SANDBOX"),
        "engine_setting": env.get("REMOTE_BASH_ENGINE"),
        "ssh_config_env": _ssh_config_env(env),
    }


def ssh_configs(config: str, home: str, depth: int = 0) -> list[tuple[str, str]]:
    """``config`` and every file its ``Include`` lines name, whether or not their block applies, with
    their text ("" when unreadable): more than the session reads is fine, never too few."""
    try:
        with open(config, errors="replace") as file:
            text = file.read()
    except OSError:
        return [(config, "")]
    found = [(config, text)]
    if depth >= 16 or "nclude" not in text.lower():
        return found
    import glob
    import re
    import shlex

    for line in text.splitlines():
        match = re.match(r"\s*include(?:\s*=\s*|\s+)(.*)", line, re.IGNORECASE)
        if match is None:
            continue
        try:
            patterns = shlex.split(match.group(1), comments=True)
        except ValueError:
            patterns = match.group(1).split()
        for pattern in patterns:
            expanded = home + pattern[1:] if pattern.startswith("~/") else pattern
            full = expanded if os.path.isabs(expanded) else os.path.join(home, ".ssh", expanded)
            for name in sorted(glob.glob(full)):
                found += ssh_configs(name, home, depth + 1)
    return found


def _ssh_config_env(env: Mapping[str, str]) -> str | None:
    """The environment variables ``~/.ssh/config`` (and what it includes) names as ``${NAME}`` (an
    ``IdentityFile ${KEY}``), with their values, as a JSON object: they decide how a session connects,
    so they are part of its key. None when it names none."""
    home = env.get("HOME") or os.path.expanduser("~")
    names: set[str] = set()
    for _, text in ssh_configs(os.path.join(home, ".ssh", "config"), home):
        if "${" in text:
            import re

            names.update(re.findall(r"\$\{(\w+)\}", text))
    return dumps({name: env.get(name) for name in sorted(names)}) if names else None


_ESCAPES = {**{code: f"\\u{code:04x}" for code in range(32)}, **{ord(c): e for c, e in (
    ('"', '\\"'), ("\\", "\\\\"), ("\b", "\\b"), ("\f", "\\f"), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"))}}
"""What ``json`` escapes in a string, as it escapes it."""
_LONG = 1 << 16
"""A string longer than this is encoded by ``json`` (C), which is worth its import there."""


def dumps(value: object) -> str:
    """JSON text of ``value`` (None, a bool, a number, a string, or a dict of those with string keys),
    as ``json.dumps(value, ensure_ascii=False)`` writes it, without loading ``json``: the same text,
    which ``json.loads`` reads back to an equal value (tests/test_keep.py holds the two together). A
    lone surrogate (an undecodable byte of argv) stays in the text: :func:`encode` escapes it."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        if len(value) > _LONG:
            import json

            return json.dumps(value, ensure_ascii=False)
        if value.isprintable() and '"' not in value and "\\" not in value:  # nothing to escape: the usual case
            return '"' + value + '"'
        return '"' + value.translate(_ESCAPES) + '"'
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{dumps(str(k))}: {dumps(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not encoded: {type(value).__name__}")


def encode(value: object) -> bytes:
    """:func:`dumps` as UTF-8, a lone surrogate written as its ``\\uXXXX`` escape (which ``json``
    reads back to the same code point): a multibyte character stays 2-4 bytes."""
    return dumps(value).encode("utf-8", "backslashreplace")


def key_name(key: Mapping[str, str | None]) -> str:
    """The key's file name: a checksum of the key, not hashlib (loading OpenSSL would cost more than
    the rest of the client); a collision could only get a refusal, since the process compares the
    whole key."""
    return _name_of(encode(dict(sorted(key.items()))))


def _name_of(data: bytes) -> str:
    return f"{int.from_bytes(data, 'big') % 0xFFFFFFFFFFFFFFC5:016x}{len(data) & 0xFFFF:04x}"


def idle_timeout(args: KeepArgs, env: Mapping[str, str]) -> float:
    if args.keep_idle is not None:
        return float(args.keep_idle)
    return _setting(env) or DEFAULT_IDLE


def _setting(env: Mapping[str, str]) -> float | None:
    value = env.get(SETTING, "").strip()
    if not value:
        return None
    from ._output import _UsageError

    try:
        seconds = float(value)
    except ValueError:
        raise _UsageError(f"{SETTING}={value!r} is not a number of seconds (the idle timeout of kept "
                          "sessions; unset it to keep none)") from None
    if not seconds > 0:
        raise _UsageError(f"{SETTING}: the idle timeout must be positive, not {value!r}")
    return seconds


def wanted(args: KeepArgs, env: Mapping[str, str]) -> bool:
    """Whether this ``exec`` goes through a kept session (``--keep``, ``--keep-idle`` or the setting)."""
    if args.no_keep:
        return False
    return bool(args.keep or args.keep_idle is not None or _setting(env) is not None)


def _error(message: str, host: str | None = None) -> SessionError:
    """The error of a kept session that could not be started, reached or trusted (exit 125)."""
    from remote_bash.errors import SessionError

    return SessionError(message, host=host)


# -- the socket ----------------------------------------------------------------------------------------


def short_name(path: str) -> tuple[str, int]:
    """A name for ``path`` that fits a unix socket address (108 bytes), and the descriptor to close
    after using it (-1: none): through the directory's descriptor under /proc when the path is long."""
    if len(os.fsencode(path)) < 100 or not os.path.isdir("/proc/self/fd"):
        return path, -1
    fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return f"/proc/self/fd/{fd}/{os.path.basename(path)}", fd


def connect(path: str | os.PathLike[str], timeout: float | None = None) -> _socket.socket | None:
    """A connection to the socket at ``path``, or None when nothing listens there."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    sock.settimeout(timeout)
    fd = -1
    try:
        name, fd = short_name(os.fspath(path))
        sock.connect(name)
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    except BaseException:
        sock.close()
        raise
    finally:
        if fd >= 0:
            os.close(fd)
    return sock


def peer_pid(sock: _socket.socket) -> int:
    """The pid of the process listening at the other end (the kernel's record; it needs no answer)."""
    try:
        raw = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    except (OSError, AttributeError):
        return 0
    return int.from_bytes(raw[:4], sys.byteorder)


def frames(sock: _socket.socket) -> Iterator[tuple[str, str]]:
    """The replies to a ``run`` request, as (kind, text); a JSON line as the frames it stands for."""
    pending = b""
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            return
        pending += chunk
        at = 0
        while at < len(pending):
            if pending[at] == 0x7B:  # "{"
                end = pending.find(b"\n", at)
                if end < 0:
                    break
                yield from _from_json(pending[at:end])
                at = end + 1
                continue
            colon = pending.find(b":", at, at + 24)
            if colon < 0:
                if len(pending) - at >= 24:
                    raise ValueError("a reply that is not a frame")
                break
            end = colon + 1 + int(pending[at + 1 : colon])
            if end > len(pending):
                break
            yield chr(pending[at]), pending[colon + 1 : end].decode()
            at = end
        pending = pending[at:]


def _from_json(line: bytes) -> Iterator[tuple[str, str]]:
    import json

    from remote_bash._escape import escape

    reply = json.loads(line)
    if "beat" in reply:
        yield "b", ""
    if "stale" in reply:
        yield "s", f"{int(reply.get('pid') or 0)} {reply['stale']}"
    if "o" in reply:
        yield "o", escape(str(reply["o"]))
    line_ = escape(str(reply["e"])) if "e" in reply else None
    if line_ is not None and not line_.endswith("\n"):
        line_ += "\n"
    if "x" in reply:
        yield "x", f"{int(reply['x'])}" + (f" {line_}" if line_ is not None else "")
    elif line_ is not None:
        yield "e", line_


# -- starting the background process ---------------------------------------------------------------------


def _start(key: dict[str, str | None], name: str, idle: float, env: Mapping[str, str], debug: bool,
           ) -> subprocess.Popen[bytes]:
    import subprocess

    logs = private_path(log_path(env), what="kept session logs")
    log = open_private(os.path.join(logs, f"{name}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                       what="a kept session log")
    # The process runs this very package (not whatever a cwd or an install would find first).
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    code = f"import sys; sys.path.insert(0, {root!r}); from remote_bash.cli._keepd import main; main()"
    config = encode({"key": key, "name": name, "idle": idle, "debug": debug}).decode()
    try:
        return subprocess.Popen([sys.executable, "-c", code, config], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=log, cwd="/", start_new_session=True, close_fds=True)
    finally:
        os.close(log)


def _check_host(key: Mapping[str, str | None], debug: bool) -> None:
    """Refuse a host the inventory does not know (or a broken inventory) before a background process is
    started, with the error plain ``exec`` gives. Only when none serves the key: the warm path stays light."""
    import argparse

    from ._context import _Context, _pick_host

    args = argparse.Namespace(inventory=key["inventory"] or None, allow=key["allow"],
                              audit_dir=key["audit_dir"] or None, debug=debug, host=key["host"] or None,
                              backend=key.get("backend"), image=key.get("image"))
    ctx = _Context(args)
    inventory = ctx.load()
    if inventory is not None:
        _pick_host(inventory, args.host)
        return
    from remote_bash.sandbox import SANDBOX

    if args.host and args.host != SANDBOX:
        with ctx.inventory():  # raises the unknown host's error before any sandbox is started
            pass


def _reach(key: dict[str, str | None], name: str, idle: float, env: Mapping[str, str], debug: bool,
           ) -> _socket.socket:
    """A connection to the kept session of ``key``, starting its background process if none listens."""
    path = os.path.join(private_path(keep_path(env), what="kept sessions"), f"{name}.sock")
    sock = connect(path)
    if sock is not None:
        return sock
    _check_host(key, debug)
    proc = _start(key, name, idle, env, debug)
    log = os.path.join(log_path(env), name + ".log")
    deadline = time.monotonic() + START_WAIT
    pause = 0.005
    while time.monotonic() < deadline:
        sock = connect(path)
        if sock is not None:
            return sock
        status = proc.poll()
        if status == 0:  # another process held the key; if it has gone since, start one again
            proc = _start(key, name, idle, env, debug)
        elif status is not None:
            raise _error(f"the kept session's background process exited at start (status {status}); see {log}",
                         host=key["host"] or None)
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
    raise _error(f"the kept session's background process did not listen on {path} within {START_WAIT:g} s; "
                 f"see {log}", host=key["host"] or None)


# -- exec --keep ----------------------------------------------------------------------------------------


def exec_kept(args: KeepArgs, env: Mapping[str, str] = os.environ) -> int:
    """``exec --keep``: run the command in the host's kept session; the exit status as plain ``exec``."""
    words: list[str] | None = args.words
    from ._input import has_input

    stdin = not getattr(args, "no_stdin", False) and has_input()
    if not words or not " ".join(words).strip() or (args.allow is not None and not args.allow.strip()) or stdin:
        from ._output import PROG, _UsageError

        if not words or not " ".join(words).strip():
            raise _UsageError(f"no command: put it after '--', e.g. {PROG} exec --keep web-1 -- uptime")
        if args.allow is not None and not args.allow.strip():
            raise _UsageError("--allow: the allowlist pattern is empty; use 'all' to allow every host")
        raise _UsageError("exec --keep does not pass stdin on to the command: use a session of its own "
                          "(--no-keep) to send it, or -n (or </dev/null) to send none")
    key = session_key(args, env)
    key_text = encode(dict(sorted(key.items())))
    name = _name_of(key_text)  # key_name(key)
    idle = idle_timeout(args, env)
    host = key["host"] or "the default host"
    sock = _reach(key, name, idle, env, args.debug)
    sock.settimeout(SILENCE)
    interrupted: list[bool] = []

    def interrupt(signum: int, frame: object) -> None:
        if interrupted:  # a second Ctrl-C: leave; the closed socket tells the process to kill it too
            raise KeyboardInterrupt
        interrupted.append(True)
        try:  # noqa: SIM105 (not contextlib: this module loads only what a call needs)
            sock.sendall(CANCEL)
        except OSError:
            pass

    previous = _signal.signal(_signal.SIGINT, interrupt)
    # "terminal": the output is escaped as exec escapes it on a terminal, and goes as it is to a pipe or file.
    rest = encode({"command": " ".join(words), "timeout": args.timeout, "json": bool(args.json), "idle": idle,
                   "terminal": sys.stdout.isatty()})
    request = b'{"v": %d, "op": "run", "key": %s, %s\n' % (PROTOCOL, key_text, rest[1:])
    restarts = 0
    try:
        replies = _request(sock, request, key, env, name)
        while True:
            try:
                kind, text = next(replies, ("", ""))
            except TimeoutError:
                return _no_answer(host, key, peer_pid(sock), bool(interrupted))
            except (OSError, ValueError) as exc:
                raise _died(host, env, name, f"({exc})") from exc
            if kind == "x":
                code, _, line = text.partition(" ")
                status = int(code)
                # (a SIGTERM that took Ctrl-C's path is said by main, naming it)
                if line and not (interrupted and _said_by_main(status)):
                    sys.stderr.write(line)
                    sys.stderr.flush()
                return status
            if kind == "o":
                sys.stdout.write(text)
                sys.stdout.flush()
            elif kind == "e":
                sys.stderr.write(text)
                sys.stderr.flush()
            elif kind == "s" and not interrupted and restarts < 3:
                restarts += 1
                # Nothing was run: the process is closing its session; a fresh one serves the call.
                sock.close()
                pid_text, _, why = text.partition(" ")
                pid = int(pid_text)
                if not _wait_exit(pid):
                    from ._output import PROG

                    raise _error(f"{host}: the kept session (pid {pid}) is closing ({why}) and still finishing a "
                                 f"call after {START_WAIT:g} s; nothing was run: try again once it ends "
                                 f"('{PROG} sessions')", host=key["host"] or None)
                sock = _reach(key, name, idle, env, args.debug)
                sock.settimeout(SILENCE)
                replies = _request(sock, request, key, env, name)
            elif kind == "":
                raise _died(host, env, name, "")
    except KeyboardInterrupt:
        from ._signals import interrupted as said

        return said()
    finally:
        _signal.signal(_signal.SIGINT, previous)
        sock.close()


def _no_answer(host: str, key: Mapping[str, str | None], pid: int, interrupted: bool) -> int:
    """The background process said nothing for SILENCE seconds: say so (its pid, what to do), never
    that the command was killed or ran; the status of an error, or of the interrupt that was asked."""
    from ._output import EXIT_INTERRUPTED, PROG, _err

    process = f"the kept session's background process{f' (pid {pid})' if pid else ''}"
    todo = (f"stop it with '{PROG} sessions stop {key['host'] or '--all'}'" + (f" or kill {pid}" if pid else ""))
    if not interrupted:
        raise _error(f"{host}: {process} did not answer for {SILENCE:g} s (stopped or hung); the command's "
                     f"outcome is unknown and it may still run: {todo}", host=key["host"] or None)
    from . import _signals

    signum = _signals.received()
    by = f"stopped by {_signals.name(signum)}" if signum is not None else "interrupted"
    _err(f"{PROG}: {host}: {by}, but {process} did not answer for {SILENCE:g} s (stopped or hung): whether the "
         f"command was killed is unknown, and it may still run: {todo}")
    if signum is not None and _signals._finished:
        _signals._finished[0].set()  # said here, truthfully: not main's "killed and audited"
    return EXIT_INTERRUPTED


def _said_by_main(status: int) -> bool:
    """Whether ``status`` is Ctrl-C's after a SIGTERM that took Ctrl-C's path: main says that, naming it."""
    from ._output import EXIT_INTERRUPTED
    from ._signals import received

    return status == EXIT_INTERRUPTED and received() is not None


def _wait_exit(pid: int) -> bool:
    """Wait (within START_WAIT) for the process ``pid`` to end: it still holds the key's lock. Whether
    it did (a process closing after a running call may take longer)."""
    deadline = time.monotonic() + START_WAIT
    while pid > 0 and time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return pid <= 0


def _request(sock: _socket.socket, request: bytes, key: Mapping[str, str | None], env: Mapping[str, str],
             name: str) -> Iterator[tuple[str, str]]:
    host = key["host"] or "the default host"
    try:
        sock.sendall(request)
    except TimeoutError:
        from ._output import PROG

        raise _error(f"{host}: the kept session's background process (pid {peer_pid(sock)}) did not take the "
                     f"request within {SILENCE:g} s (stopped or hung); nothing was run: stop it with "
                     f"'{PROG} sessions stop {key['host'] or '--all'}'") from None
    except OSError as exc:
        raise _died(host, env, name, f"({exc.strerror or exc})") from exc
    return frames(sock)


def _died(host: str, env: Mapping[str, str], name: str, detail: str) -> SessionError:
    return _error(
        f"{host}: the kept session's background process ended during the call{' ' + detail if detail else ''}; "
        "the command's outcome is unknown and it was not run again (the next call starts a fresh session; "
        f"see {os.path.join(log_path(env), name + '.log')})")


# -- the fast path ----------------------------------------------------------------------------------------

_VALUED = {"--inventory": "inventory", "--allow": "allow", "--audit-dir": "audit_dir"}
"""The global options that take a value, allowed before and after ``exec`` (``--debug`` is the fourth)."""


class _FastArgs:
    """The options of ``exec`` as the parser would give them, for the names :class:`KeepArgs` reads."""

    def __init__(self) -> None:
        self.host: str | None = None
        self.inventory: str | None = None
        self.allow: str | None = None
        self.audit_dir: str | None = None
        self.debug = False
        self.keep = False
        self.keep_idle: float | None = None
        self.no_keep = False
        self.timeout: float | None = None
        self.json = False
        self.words: list[str] | None = None


def _seconds(value: str) -> float | None:
    """``--timeout``/``--keep-idle``: the parser's rule (a positive number), None where it would refuse."""
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds > 0 else None


def fast_args(words: list[str]) -> _FastArgs | None:
    """``[GLOBAL...] exec [--keep] [--keep-idle S] [--timeout S] [--json] [GLOBAL...] [HOST] -- COMMAND...``
    read without argparse, or None for anything else (an unknown or abbreviated option, ``--help``,
    a second host, a value the parser would refuse): the full parser then reads the words and says
    what is wrong. What is read here is read exactly as the parser reads it."""
    if "--" not in words:
        return None
    cut = words.index("--")
    head = words[:cut]
    args = _FastArgs()
    args.words = words[cut + 1 :]
    i, command = 0, False
    while i < len(head):
        word = head[i]
        name, equals, value = word.partition("=")
        if name in _VALUED:
            if not equals:
                if i + 1 == len(head) or head[i + 1].startswith("-"):
                    return None
                i += 1
                value = head[i]
            setattr(args, _VALUED[name], value)
        elif equals:
            return None
        elif word == "--debug":
            args.debug = True
        elif not command:
            if word != "exec":
                return None
            command = True
        elif word in ("--keep", "--no-keep", "--json"):
            setattr(args, word[2:].replace("-", "_"), True)
        elif word in ("--timeout", "--keep-idle"):
            seconds = _seconds(head[i + 1]) if i + 1 < len(head) and not head[i + 1].startswith("-") else None
            if seconds is None:
                return None
            setattr(args, word[2:].replace("-", "_"), seconds)
            i += 1
        elif word.startswith("-") or args.host is not None:
            return None
        else:
            args.host = word
        i += 1
    return args if command else None


def fast_exec(words: list[str], env: Mapping[str, str] = os.environ) -> int | None:
    """``exec --keep`` (or ``exec`` under ``$REMOTE_BASH_KEEP``) without loading the parser: the exit
    status, or None when the words are not that plain shape or the call does not keep its session.

    Only the client side is skipped: the background process builds the session, and applies every
    gate, policy, audit and redaction rule, exactly as for a call through the parser."""
    args = fast_args(words)
    if args is None:
        return None
    try:
        if not wanted(args, env):
            return None
    except Exception as exc:
        from ._output import _UsageError

        if isinstance(exc, _UsageError):
            return None  # the parser path says what is wrong with the setting, as it always has
        raise
    if hasattr(_signal, "SIGXFSZ"):
        # As in main(): a file-size limit must become an error, in a background process started here too.
        _signal.signal(_signal.SIGXFSZ, _signal.SIG_IGN)
    try:
        return exec_kept(args, env)
    except BaseException as exc:
        return failed(exc, args.debug)


def failed(exc: BaseException, debug: bool) -> int:
    """The exit status of a command that raised ``exc``, after its one-line message: as ``main()``."""
    from ._output import EXIT_FAILED, PROG, _err, _exit_code, _NoApiKey, _one_line, _UsageError

    if isinstance(exc, KeyboardInterrupt):
        from ._signals import interrupted

        return interrupted()
    if isinstance(exc, BrokenPipeError):
        try:  # noqa: SIM105 (not contextlib: this module loads only what a call needs)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return EXIT_FAILED
    if not isinstance(exc, Exception):
        raise exc
    if debug:
        import traceback

        _err(traceback.format_exc())
    from remote_bash.errors import RemoteBashError

    known = isinstance(exc, RemoteBashError | _UsageError | _NoApiKey)
    message = str(exc) if known else f"internal error: {type(exc).__name__}: {exc} (--debug shows where)"
    _err(f"{PROG}: {_one_line(message)}")
    return _exit_code(exc)
