"""Kept sessions: ``sessions`` (list, stop), and what the rest of the CLI uses of the client.

A kept session is a host's session held by a small per-user background process (``_keepd``) that
listens on a private unix socket in the runtime directory, so the next ``exec --keep`` on that
host reuses the same remote shell: cwd, variables and functions persist across invocations. The
client of a call is ``_keepc`` (re-exported here), which loads as little as it can; this module
holds what only ``sessions`` and the background process need (``pathlib``, ``json``, ``contextlib``).

``info`` and ``stop`` are one JSON line each way (``{"v": 1, "op": "info" | "stop"}``): every
version of the background process answers them, so a client lists and stops any.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from remote_bash._paths import private_dir

from ._keepc import (
    ANY_VERSION,
    BEAT,
    PROTOCOL,
    connect,
    exec_kept,
    fast_args,
    fast_exec,
    keep_path,
    key_name,
    log_path,
    session_key,
    short_name,
    ssh_configs,
    wanted,
)
from ._output import EXIT_FAILED, PROG, _err, _out, _table, _UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket
    from typing import Any

__all__ = ["ANY_VERSION", "BEAT", "PROTOCOL", "connect", "exec_kept", "fast_args", "fast_exec", "keep_dir", "key_name",
           "log_dir", "session_key", "wanted"]


def keep_dir(env: Mapping[str, str]) -> Path:
    """The owner-only directory of the sockets (and locks) of kept sessions."""
    return Path(keep_path(env))


def log_dir(env: Mapping[str, str]) -> Path:
    return Path(log_path(env))


@contextlib.contextmanager
def _short(path: Path) -> Iterator[str]:
    """A name for ``path`` that fits a unix socket address (108 bytes): through the directory's
    descriptor under /proc when the path is long."""
    name, fd = short_name(str(path))
    try:
        yield name
    finally:
        if fd >= 0:
            os.close(fd)


def _ssh_config_files(config: Path) -> list[Path]:
    """``config`` and every file its ``Include`` lines name (in this process's home)."""
    return [Path(path) for path, _ in ssh_configs(str(config), os.path.expanduser("~"))]


def _peer_pid(sock: _socket.socket) -> int:
    from ._keepc import peer_pid

    return peer_pid(sock)


def _send(sock: _socket.socket, message: Mapping[str, Any]) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


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
