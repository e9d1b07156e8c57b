"""The client side of kept sessions: ``exec --keep`` and ``sessions``, talking to a background process.

A kept session is a host's session held by a small per-user background process (``_keepd``) that
listens on a private unix socket in the runtime directory, so the next ``exec --keep`` on that
host reuses the same remote shell: cwd, variables and functions persist across invocations.

This module is the part every ``exec --keep`` loads, so it must stay light: the standard library,
``_output``, ``_paths`` and ``errors`` only. It must never import asyncssh, pydantic or the models;
a call on a running kept session costs Python's start, one connect and one JSON line each way.
It never re-sends a request: a background process that dies mid-call is an error, not a retry.

Protocol: one JSON line from the client (``{"op": "run" | "info" | "stop" | "cancel", ...}``);
replies are JSON lines: ``{"o": text}`` for stdout, ``{"e": line}`` for stderr, ``{"x": status}``
last, or ``{"info": {...}}``.

A kept session is keyed by the host and by every option that decides how its session is built
(the inventory, ``--allow``, the audit directory, with the defaults they resolve to): an
invocation under other rules gets its own background process, never another one's shell.
"""

from __future__ import annotations

import _socket
import contextlib
import json
import os
import re  # loaded by json already
import signal
import sys
import time
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from remote_bash._paths import config_dir, open_private, private_dir, runtime_dir, state_dir
from remote_bash.errors import RemoteBashError, SessionError

from ._output import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    PROG,
    _err,
    _exit_code,
    _NoApiKey,
    _one_line,
    _out,
    _table,
    _UsageError,
)

TYPE_CHECKING = False  # not typing's: importing typing would cost a kept call more than its round trip
if TYPE_CHECKING:
    import subprocess
    from typing import Any, Protocol

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

PROTOCOL = 2
"""The version of a ``run`` request. ``info`` and ``stop`` are sent as version 1, which every
background process answers: a client lists and stops the processes of an older version too."""
ANY_VERSION = 1
BEAT = 1.0
"""Seconds between a background process's signs of life (``{"beat": 1}``) while it serves a call."""
SILENCE = 10.0
"""Seconds without a word from the background process after which a client says it does not answer
(stopped, hung): ten beats missed, never a quiet command's silence."""
DEFAULT_IDLE = 600.0
"""Seconds a kept session waits unused before its process closes it (``--keep-idle``, ``REMOTE_BASH_KEEP``)."""
START_WAIT = 30.0
"""How long a client waits for a background process it started to listen."""
SETTING = "REMOTE_BASH_KEEP"


class KeptSessionError(SessionError):
    """A kept session's background process could not be started, reached or trusted."""


# -- where, and under which key --------------------------------------------------------------------


def keep_dir(env: Mapping[str, str]) -> Path:
    """The owner-only directory of the sockets (and locks) of kept sessions."""
    return runtime_dir(env) / "keep"


def log_dir(env: Mapping[str, str]) -> Path:
    return state_dir(env) / "keep"


def _absolute(value: str | None) -> str:
    return os.path.abspath(os.path.expanduser(value)) if value else ""


def session_key(args: KeepArgs, env: Mapping[str, str]) -> dict[str, str | None]:
    """What decides how a kept session is built: the same key means the same rules."""
    return {
        "host": args.host or "",
        # `~` in the inventory (identity files, known_hosts) and ~/.ssh/config follow HOME.
        "home": env.get("HOME", ""),
        "inventory": _absolute(args.inventory or env.get("REMOTE_BASH_INVENTORY")),
        "default_inventory": str(config_dir(env)),
        "allow": args.allow,
        "audit_dir": _absolute(args.audit_dir or env.get("REMOTE_BASH_AUDIT_DIR")),
        "default_audit_dir": str(state_dir(env)),
        # With no inventory, the built-in sandbox host: how it runs is part of the rules too.
        "backend": getattr(args, "backend", None),
        "image": getattr(args, "image", None),
        "sandbox_setting": env.get("REMOTE_BASH_SANDBOX"),
        "engine_setting": env.get("REMOTE_BASH_ENGINE"),
        "ssh_config_env": _ssh_config_env(env),
    }


_INCLUDE = re.compile(r"\s*include(?:\s*=\s*|\s+)(.*)", re.IGNORECASE)
_VARIABLE = re.compile(r"\$\{(\w+)\}")


def _ssh_configs(config: Path, home: Path, depth: int = 0) -> list[tuple[Path, str]]:
    """``config`` and every file its ``Include`` lines name, whether or not their block applies, with
    their text ("" when unreadable): more than the session reads is fine, never too few."""
    try:
        text = config.read_text(errors="replace")
    except OSError:
        return [(config, "")]
    found = [(config, text)]
    if depth >= 16 or "nclude" not in text.lower():
        return found
    import glob
    import shlex

    for line in text.splitlines():
        match = _INCLUDE.match(line)
        if match is None:
            continue
        try:
            patterns = shlex.split(match.group(1), comments=True)
        except ValueError:
            patterns = match.group(1).split()
        for pattern in patterns:
            expanded = str(home) + pattern[1:] if pattern.startswith("~/") else pattern
            full = expanded if os.path.isabs(expanded) else str(home / ".ssh" / expanded)
            for name in sorted(glob.glob(full)):
                found += _ssh_configs(Path(name), home, depth + 1)
    return found


def _ssh_config_files(config: Path) -> list[Path]:
    """The files of :func:`_ssh_configs` (in this process's home)."""
    return [path for path, _ in _ssh_configs(config, Path("~").expanduser())]


def _ssh_config_env(env: Mapping[str, str]) -> str | None:
    """The environment variables ``~/.ssh/config`` (and what it includes) names as ``${NAME}`` (an
    ``IdentityFile ${KEY}``), with their values: they decide how a session connects, so they are part
    of its key. None when it names none."""
    home = Path(env["HOME"]) if env.get("HOME") else Path("~").expanduser()
    names = sorted({name for _, text in _ssh_configs(home / ".ssh" / "config", home)
                    for name in _VARIABLE.findall(text)})
    return json.dumps({name: env.get(name) for name in names}) if names else None


def key_name(key: Mapping[str, str | None]) -> str:
    """The key's file name. Two checksums, not hashlib: loading OpenSSL would cost more than the rest
    of the client; a collision could only get a refusal, since the process compares the whole key."""
    data = json.dumps(key, sort_keys=True).encode()
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"


def idle_timeout(args: KeepArgs, env: Mapping[str, str]) -> float:
    if args.keep_idle is not None:
        return float(args.keep_idle)
    return _setting(env) or DEFAULT_IDLE


def _setting(env: Mapping[str, str]) -> float | None:
    value = env.get(SETTING, "").strip()
    if not value:
        return None
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


# -- the socket ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def _short(path: Path) -> Iterator[str]:
    """A name for ``path`` that fits a unix socket address (108 bytes): through the directory's
    descriptor under /proc when the path is long."""
    if len(os.fsencode(path)) < 100 or not os.path.isdir("/proc/self/fd"):
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def connect(path: Path, timeout: float | None = None) -> _socket.socket | None:
    """A connection to the socket at ``path``, or None when nothing listens there.

    ``_socket`` rather than ``socket``: the wrapper module turns its constants into enums at import,
    which costs a kept call more than its round trip."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    sock.settimeout(timeout)
    try:
        with _short(path) as name:
            sock.connect(name)
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    except BaseException:
        sock.close()
        raise
    return sock


def _send(sock: _socket.socket, message: Mapping[str, Any]) -> None:
    # Not ASCII-escaped (a multibyte character stays 2-4 bytes, not 6 or 12), unless the text holds
    # an undecodable byte of argv (a lone surrogate), which only the escaped form carries as is.
    try:
        data = json.dumps(message, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        data = json.dumps(message).encode()
    sock.sendall(data + b"\n")


def _replies(sock: _socket.socket) -> Iterator[dict[str, Any]]:
    pending = b""
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            return
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield json.loads(line)


# -- starting the background process ---------------------------------------------------------------------


def _start(key: dict[str, str | None], name: str, idle: float, env: Mapping[str, str], debug: bool,
           ) -> subprocess.Popen[bytes]:
    import subprocess

    logs = private_dir(log_dir(env), what="kept session logs")
    log = open_private(logs / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, what="a kept session log")
    # The process runs this very package (not whatever a cwd or an install would find first).
    root = str(Path(__file__).resolve().parents[2])
    code = f"import sys; sys.path.insert(0, {root!r}); from remote_bash.cli._keepd import main; main()"
    config = json.dumps({"key": key, "name": name, "idle": idle, "debug": debug})
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
    directory = private_dir(keep_dir(env), what="kept sessions")
    path = directory / f"{name}.sock"
    sock = connect(path)
    if sock is not None:
        return sock
    _check_host(key, debug)
    proc = _start(key, name, idle, env, debug)
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
            raise KeptSessionError(f"the kept session's background process exited at start (status {status}); "
                                   f"see {log_dir(env) / (name + '.log')}", host=key["host"] or None)
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
    raise KeptSessionError(f"the kept session's background process did not listen on {path} within "
                           f"{START_WAIT:g} s; see {log_dir(env) / (name + '.log')}", host=key["host"] or None)


# -- exec --keep ----------------------------------------------------------------------------------------


def exec_kept(args: KeepArgs, env: Mapping[str, str] = os.environ) -> int:
    """``exec --keep``: run the command in the host's kept session; the exit status as plain ``exec``."""
    words: list[str] | None = args.words
    if not words or not " ".join(words).strip():
        raise _UsageError(f"no command: put it after '--', e.g. {PROG} exec --keep web-1 -- uptime")
    if args.allow is not None and not args.allow.strip():
        raise _UsageError("--allow: the allowlist pattern is empty; use 'all' to allow every host")
    from ._input import has_input

    if not getattr(args, "no_stdin", False) and has_input():
        raise _UsageError("exec --keep does not pass stdin on to the command: use a session of its own "
                          "(--no-keep) to send it, or -n (or </dev/null) to send none")
    key = session_key(args, env)
    name = key_name(key)
    idle = idle_timeout(args, env)
    host = key["host"] or "the default host"
    sock = _reach(key, name, idle, env, args.debug)
    sock.settimeout(SILENCE)
    interrupted: list[bool] = []

    def interrupt(signum: int, frame: object) -> None:
        if interrupted:  # a second Ctrl-C: leave; the closed socket tells the process to kill it too
            raise KeyboardInterrupt
        interrupted.append(True)
        with contextlib.suppress(OSError):
            _send(sock, {"op": "cancel"})

    previous = signal.signal(signal.SIGINT, interrupt)
    request = {"v": PROTOCOL, "op": "run", "key": key, "command": " ".join(words), "timeout": args.timeout,
               "json": bool(args.json), "idle": idle}
    restarts = 0
    try:
        replies = _request(sock, request, host, env, name)
        while True:
            try:
                reply = next(replies, None)
            except TimeoutError:
                return _no_answer(host, key, _peer_pid(sock), bool(interrupted))
            except (OSError, ValueError) as exc:
                raise _died(host, env, name, f"({exc})") from exc
            if reply is None:
                raise _died(host, env, name, "")
            if "stale" in reply and not interrupted and restarts < 3:
                restarts += 1
                # Nothing was run: the process is closing its session; a fresh one serves the call.
                sock.close()
                pid = int(reply.get("pid") or 0)
                if not _wait_exit(pid):
                    raise KeptSessionError(
                        f"{host}: the kept session (pid {pid}) is closing ({reply['stale']}) and still "
                        f"finishing a call after {START_WAIT:g} s; nothing was run: try again once it ends "
                        f"('{PROG} sessions')", host=key["host"] or None)
                sock = _reach(key, name, idle, env, args.debug)
                sock.settimeout(SILENCE)
                replies = _request(sock, request, host, env, name)
                continue
            if "beat" in reply:
                continue
            if "o" in reply:
                _out(reply["o"])
            if "e" in reply and not (interrupted and reply.get("x") == EXIT_INTERRUPTED and _signalled()):
                _err(reply["e"])  # (a SIGTERM that took Ctrl-C's path is said by main, naming it)
            if "x" in reply:
                status: int = reply["x"]
                return status
    except KeyboardInterrupt:
        from ._signals import interrupted as said

        return said()
    finally:
        signal.signal(signal.SIGINT, previous)
        sock.close()


def _peer_pid(sock: _socket.socket) -> int:
    """The pid of the process listening at the other end (the kernel's record; it needs no answer)."""
    try:
        raw = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    except (OSError, AttributeError):
        return 0
    return int.from_bytes(raw[:4], sys.byteorder)


def _no_answer(host: str, key: Mapping[str, str | None], pid: int, interrupted: bool) -> int:
    """The background process said nothing for SILENCE seconds: say so (its pid, what to do), never
    that the command was killed or ran; the status of an error, or of the interrupt that was asked."""
    process = f"the kept session's background process{f' (pid {pid})' if pid else ''}"
    todo = (f"stop it with '{PROG} sessions stop {key['host'] or '--all'}'" + (f" or kill {pid}" if pid else ""))
    if not interrupted:
        raise KeptSessionError(f"{host}: {process} did not answer for {SILENCE:g} s (stopped or hung); the "
                               f"command's outcome is unknown and it may still run: {todo}", host=key["host"] or None)
    from . import _signals

    signum = _signals.received()
    by = f"stopped by {_signals.name(signum)}" if signum is not None else "interrupted"
    _err(f"{PROG}: {host}: {by}, but {process} did not answer for {SILENCE:g} s (stopped or hung): whether the "
         f"command was killed is unknown, and it may still run: {todo}")
    if signum is not None and _signals._finished:
        _signals._finished[0].set()  # said here, truthfully: not main's "killed and audited"
    return EXIT_INTERRUPTED


def _signalled() -> bool:
    from ._signals import received

    return received() is not None


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


def _request(sock: _socket.socket, request: Mapping[str, Any], host: str, env: Mapping[str, str],
             name: str) -> Iterator[dict[str, Any]]:
    try:
        _send(sock, request)
    except TimeoutError:
        raise KeptSessionError(f"{host}: the kept session's background process (pid {_peer_pid(sock)}) did not "
                               f"take the request within {SILENCE:g} s (stopped or hung); nothing was run: stop "
                               f"it with '{PROG} sessions stop {request['key']['host'] or '--all'}'") from None
    except OSError as exc:
        raise _died(host, env, name, f"({exc.strerror or exc})") from exc
    return _replies(sock)


def _died(host: str, env: Mapping[str, str], name: str, detail: str) -> KeptSessionError:
    return KeptSessionError(
        f"{host}: the kept session's background process ended during the call{' ' + detail if detail else ''}; "
        "the command's outcome is unknown and it was not run again (the next call starts a fresh session; "
        f"see {log_dir(env) / (name + '.log')})")


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
    except _UsageError:
        return None  # the parser path says what is wrong with the setting, as it always has
    if hasattr(signal, "SIGXFSZ"):
        # As in main(): a file-size limit must become an error, in a background process started here too.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        return exec_kept(args, env)
    except BaseException as exc:
        return failed(exc, args.debug)


def failed(exc: BaseException, debug: bool) -> int:
    """The exit status of a command that raised ``exc``, after its one-line message: as ``main()``."""
    if isinstance(exc, KeyboardInterrupt):
        from ._signals import interrupted

        return interrupted()
    if isinstance(exc, BrokenPipeError):
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    if not isinstance(exc, Exception):
        raise exc
    if debug:
        import traceback

        _err(traceback.format_exc())
    known = isinstance(exc, RemoteBashError | _UsageError | _NoApiKey)
    message = str(exc) if known else f"internal error: {type(exc).__name__}: {exc} (--debug shows where)"
    _err(f"{PROG}: {_one_line(message)}")
    return _exit_code(exc)


# -- sessions ----------------------------------------------------------------------------------------


ASK_WAIT = 5.0
"""How long ``sessions`` waits for a background process's answer (it answers in milliseconds)."""
STOP_WAIT = 30.0
"""How long ``sessions stop`` waits for a process that did not answer to exit on SIGTERM (closing its
session kills what runs in it: three rounds of at most 10 s) before it sends SIGKILL."""


def _ask(path: Path, message: Mapping[str, Any], timeout: float) -> tuple[dict[str, Any] | None, int]:
    """The first reply of the process at ``path`` (None: none, or nothing listens) and its pid (0: unknown)."""
    try:
        sock = connect(path, timeout)
    except OSError:  # its queue of connections full: it has not accepted one for a while
        return None, 0
    if sock is None:
        return None, 0
    pid = _peer_pid(sock)
    try:
        _send(sock, message)
        return next(_replies(sock), None), pid
    except (OSError, ValueError):
        return None, pid
    finally:
        sock.close()


def _keepd_key(pid: int) -> dict[str, Any] | None:
    """The key of the kept session's background process ``pid`` (from its command line), or None when
    ``pid`` is not one (gone, or the pid reused by another program)."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if len(words) < 4 or b"remote_bash.cli._keepd" not in words[2]:
        return None
    try:
        key: dict[str, Any] = json.loads(words[3])["key"]
    except (ValueError, KeyError, TypeError):
        return None
    return key


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat[stat.rfind(b")") + 2 :][:1] != b"Z"


def _unanswering(path: Path, pid: int) -> dict[str, Any] | None:
    """What ``sessions`` shows of a live background process that did not answer: its command line
    says under which key it was started."""
    key = _keepd_key(pid) if pid else None
    if key is None:
        return None
    try:
        started = os.stat(path).st_mtime
    except OSError:
        started = time.time()
    return {"host": key.get("host") or "(default)", "pid": pid, "started": started, "last": None, "busy": None,
            "answering": False, "allow": key.get("allow"), "inventory": key.get("inventory") or "",
            "audit_dir": key.get("audit_dir") or ""}


def _stale(path: Path) -> bool:
    """Whether no process holds the lock of the socket at ``path`` (it died without cleaning up)."""
    import fcntl

    try:
        fd = os.open(path.with_suffix(".lock"), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def kept_sessions(env: Mapping[str, str]) -> list[dict[str, Any]]:
    """The kept sessions on this user's sockets: those answering, and live processes that do not
    (``"answering": false``); a stale socket (its process gone) is removed."""
    directory = keep_dir(env)
    if not directory.is_dir():
        return []
    private_dir(directory, what="kept sessions", create=False)
    found = []
    for path in sorted(directory.glob("*.sock")):
        try:
            inode = os.stat(path).st_ino
        except FileNotFoundError:
            continue
        reply, pid = _ask(path, {"v": ANY_VERSION, "op": "info"}, ASK_WAIT)
        silent = _unanswering(path, pid) if reply is None else None
        if reply is not None and "info" in reply:
            found.append({**reply["info"], "answering": True, "socket": str(path)})
        elif silent is not None and not _stale(path):
            found.append({**silent, "socket": str(path)})
        elif _stale(path):
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == inode:  # not a fresh process's socket, bound meanwhile
                    path.unlink()
    return found


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _cmd_sessions(ctx: Any) -> int:
    args, env = ctx.args, ctx.env
    if args.action == "stop":
        if (args.host is None) == (not args.all):
            raise _UsageError(f"name a host or give --all, e.g. {PROG} sessions stop web-1")
        return _stop(env, None if args.all else args.host)
    if args.host is not None or args.all:
        raise _UsageError(f"'{PROG} sessions' lists every kept session; to stop some: {PROG} sessions stop HOST")
    found = kept_sessions(env)
    now = time.time()
    if args.json:
        for info in found:
            _out(json.dumps(info) + "\n")
        return 0
    if not found:
        _err("no kept sessions")
        return 0
    # Sessions on one host differ by the rules they were made under: show those, not the socket.
    rows = [["HOST", "AGE", "IDLE", "PID", "ALLOW", "INVENTORY", "AUDIT"]]
    rows += [[i["host"], _age(now - i["started"]),
              "not answering" if i.get("answering") is False else "busy" if i["busy"] else _age(now - i["last"]),
              str(i["pid"]),
              _shown(i.get("allow") or "-"), _shown(i.get("inventory") or "-"),
              _shown(i.get("audit_dir") or "-")] for i in found]
    _out(_table(rows))
    return 0


def _shown(text: str) -> str:
    """``text`` on one line of a table: a control character or a space shown escaped."""
    if text.isprintable() and " " not in text:
        return text
    return json.dumps(text, ensure_ascii=False)


def _stop(env: Mapping[str, str], host: str | None) -> int:
    chosen = [i for i in kept_sessions(env) if host is None or i["host"] == host]
    if host is not None and not chosen:
        _err(f"{PROG}: no kept session for {host} (see '{PROG} sessions')")
        return EXIT_FAILED
    status = 0
    for info in chosen:
        reply = None
        if info.get("answering") is not False:
            reply, _ = _ask(Path(info["socket"]), {"v": ANY_VERSION, "op": "stop"}, 60.0)
        if reply is not None and reply.get("stopped"):
            _out(f"stopped {info['host']} (pid {info['pid']})\n")
            if reply.get("e"):  # what a lost call left running could not be stopped: said, not hidden
                _err(str(reply["e"]))
                status = max(status, EXIT_FAILED)
        else:
            status = max(status, _terminate(info))
    return status


def _terminate(info: Mapping[str, Any]) -> int:
    """Stop a background process that did not answer (or confirm): SIGTERM (and SIGCONT, should it be
    stopped), which closes its session as on ``sessions stop``; SIGKILL after STOP_WAIT. Says what was done."""
    pid, host, path = int(info["pid"]), info["host"], Path(info["socket"])
    try:
        inode = os.stat(path).st_ino
    except OSError:
        inode = 0
    if _keepd_key(pid) is None:
        _err(f"{PROG}: {host}: the kept session (pid {pid}) did not confirm it stopped, and it is gone")
        return EXIT_FAILED
    os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + STOP_WAIT
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not _alive(pid):
        _out(f"stopped {host} (pid {pid}): it did not answer; it exited on SIGTERM, closing its session\n")
        return 0
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _stale(path):
        _remove_stale(path, inode)
    _err(f"{PROG}: {host}: the kept session (pid {pid}) did not answer, nor exit within {STOP_WAIT:g} s of "
         "SIGTERM: killed it (SIGKILL); what its session left running on the host may still run, and its "
         "audit log has no session.end")
    return EXIT_FAILED


def _remove_stale(path: Path, inode: int) -> None:
    """Remove what a killed process left: its socket, and its lock file (taken first, as a process
    that exits removes it: whoever opened it meanwhile sees it gone and takes the new one)."""
    import fcntl

    with contextlib.suppress(FileNotFoundError):
        if os.stat(path).st_ino == inode:  # not a fresh process's socket, bound meanwhile
            path.unlink()
    lock_path = path.with_suffix(".lock")
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        there = os.stat(lock_path, follow_symlinks=False)
        if (there.st_dev, there.st_ino) == (os.fstat(fd).st_dev, os.fstat(fd).st_ino):
            lock_path.unlink()
    except OSError:
        pass
    finally:
        os.close(fd)
