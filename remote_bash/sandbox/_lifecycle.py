"""The built-in ``sandbox`` host's lifecycle: choose a backend, start, find, stop.

Backends, in the order they are chosen when the operator names none:

- ``container``: a container of the project's image, when Docker or Podman answers;
- ``local``: sshd for a throwaway unprivileged user (needs root), refused otherwise with the ways out;
- ``unisolated``: sshd for the operator's own account; only ever used when named.

A sandbox started by :func:`start` runs until :func:`stop` and is described by a state file in
the sandbox directory (owner-only); :func:`sandbox_for_command` reuses it, or runs one for the
duration of a block. A stop that cannot remove everything (a throwaway user's processes or files)
never forgets the sandbox: the state file stays, marked half-stopped with what is left, and the
next stop or start retries. A one-off sandbox (:func:`sandbox_for_command` with none started) is
recorded while it runs in its own run directory (owner-only), with the owning process's pid and
start time: one whose owner is gone (killed before it could remove it) is abandoned, and the next
stop, start or one-off removes it; one whose owner still runs is never touched. Nothing here
prints: progress goes to the caller's callback.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast, get_args

from remote_bash._paths import open_private, private_dir, state_dir, write_private
from remote_bash.errors import ConfigError
from remote_bash.models import Host

from ._container import ensure_image, start_container
from ._engine import Engine, engine_named, find_engine
from ._local import create_user, exposed_paths, local_refusal, remove_user, start_local_sshd
from ._sshd import SshdServer, find_sshd, generate_keypair, start_sshd

__all__ = ["SANDBOX", "Backend", "SandboxInfo", "abandoned", "choose_backend", "half_stopped", "recorded", "running",
           "sandbox_dir", "sandbox_for_command", "start", "stop", "stop_abandoned"]

SANDBOX = "sandbox"
Backend = Literal["container", "local", "unisolated"]
BACKENDS: tuple[str, ...] = get_args(Backend)
Progress = Callable[[str], None]

_SERVERS: dict[int, SshdServer] = {}
"""The sshd this process started and has not stopped yet, by pid: stopped through their handle,
which also reaps them (a sandbox started by another process is stopped through its pid)."""


@dataclass(frozen=True)
class SandboxInfo:
    """A running sandbox: how to reach it, and what to remove when it stops."""

    backend: str
    address: str
    port: int
    user: str
    identity_file: str
    known_hosts: str
    pid: int = 0
    """The local sshd's process (local and unisolated backends)."""
    workdir: str = ""
    """The local sshd's files, removed on stop."""
    throwaway_user: str = ""
    """The user created for the local backend, removed on stop."""
    engine: str = ""
    container: str = ""
    image: str = ""
    isolation: str = ""
    """How the local backend isolates: a throwaway user, or bubblewrap (as a non-root operator)."""
    stopping: str = ""
    """Why the last stop did not finish (what is left): the sandbox is half-stopped until a stop succeeds."""

    def host(self) -> Host:
        return Host(name=SANDBOX, hostname=self.address, port=self.port, user=self.user,
                    identity_file=Path(self.identity_file), known_hosts=Path(self.known_hosts),
                    credential="key", labels={"sandbox": self.backend})

    def inventory_snippet(self) -> str:
        """An inventory entry for this sandbox, valid while it runs."""
        return (f"hosts:\n  {SANDBOX}:\n    hostname: {self.address}\n    port: {self.port}\n"
                f"    user: {self.user}\n    credential: key\n    identity_file: {self.identity_file}\n"
                f"    known_hosts: {self.known_hosts}\n    labels: {{sandbox: {self.backend}}}\n")

    def where(self) -> str:
        if self.backend == "container":
            return f"{self.engine} container {self.container[:12]} ({self.image})"
        if self.backend == "local" and self.throwaway_user:
            return f"sshd pid {self.pid}, throwaway user {self.throwaway_user}"
        if self.backend == "local":
            return f"sshd pid {self.pid} in a bubblewrap namespace, your home and state hidden"
        return f"sshd pid {self.pid}, your own account (unisolated)"


def sandbox_dir(env: Mapping[str, str]) -> Path:
    return state_dir(env) / "sandbox"


def choose_backend(requested: str | None, env: Mapping[str, str]) -> tuple[Backend, Engine | None]:
    """The backend to run (named, else $REMOTE_BASH_SANDBOX, else container when an engine answers)."""
    name = requested or env.get("REMOTE_BASH_SANDBOX") or None
    if name is not None and name not in BACKENDS:
        raise ConfigError(f"unknown sandbox backend {name!r}: choose one of {', '.join(BACKENDS)}")
    if name in (None, "container"):
        engine = find_engine()
        if engine is not None:
            return "container", engine
        if name == "container":
            raise ConfigError("the container sandbox needs Docker or Podman, and neither answers: install one "
                              "(Debian: apt-get install docker.io) and start it, or use --backend local")
    return cast(Backend, name or "local"), None


def _client_key(directory: Path) -> Path:
    key = directory / "client_ed25519"
    if not key.exists() or not key.with_suffix(".pub").exists():
        key.unlink(missing_ok=True)
        generate_keypair(key, "remote-bash-sandbox-client")
    return key


def _make_private(directory: Path) -> None:
    private_dir(directory, what="the sandbox")


def _write(path: Path, text: str) -> None:
    write_private(path, text.encode(), what="the sandbox")


def _launch(backend: Backend, engine: Engine | None, key: Path, known_hosts: Path, *, image: str | None,
            progress: Progress | None, private_paths: Iterable[Path], workdir: Path) -> SandboxInfo:
    """Start one sandbox and write its known_hosts; whatever was made is undone if this fails."""
    public = key.with_suffix(".pub").read_text()
    if backend == "container":
        assert engine is not None
        box = start_container(engine, ensure_image(engine, image, progress=progress), public)
        _write(known_hosts, f"[127.0.0.1]:{box.port} {box.host_key}\n")
        return SandboxInfo(backend=backend, address="127.0.0.1", port=box.port, user=box.user,
                           identity_file=str(key), known_hosts=str(known_hosts), engine=engine.name,
                           container=box.container, image=box.image)
    if image is not None:
        raise ConfigError(f"--image needs the container backend, not {backend}")
    if backend == "unisolated":
        me = pwd.getpwuid(os.getuid()).pw_name
        shutil.rmtree(workdir, ignore_errors=True)
        server = start_sshd(workdir, address="127.0.0.1", users=[me], authorized_keys=[public])
        _SERVERS[server.pid] = server
        _write(known_hosts, server.known_hosts_line + "\n")
        return SandboxInfo(backend=backend, address=server.address, port=server.port, user=me,
                           identity_file=str(key), known_hosts=str(known_hosts), pid=server.pid,
                           workdir=str(workdir))
    bwrap = shutil.which("bwrap")
    refusal = local_refusal(os.geteuid(), find_sshd(), bwrap)
    if refusal is not None:
        raise ConfigError(refusal)
    if os.geteuid() != 0:
        assert bwrap is not None
        account = pwd.getpwuid(os.getuid())
        hidden = [*private_paths, Path(account.pw_dir)]
        server = start_local_sshd(account.pw_name, public, bwrap=bwrap, hidden=hidden)
        _SERVERS[server.pid] = server
        _write(known_hosts, server.known_hosts_line + "\n")
        return SandboxInfo(backend=backend, address=server.address, port=server.port, user=account.pw_name,
                           identity_file=str(key), known_hosts=str(known_hosts), pid=server.pid,
                           workdir=str(server.workdir), isolation="bubblewrap")
    user = create_user()
    try:
        exposed = exposed_paths(user, private_paths)
        if exposed:
            raise ConfigError(f"the sandbox user could read {', '.join(map(str, exposed))}: make it private to "
                              f"you (chmod 700), or use the container backend")
        server = start_local_sshd(user, public)
    except BaseException:
        remove_user(user)
        raise
    _SERVERS[server.pid] = server
    _write(known_hosts, server.known_hosts_line + "\n")
    return SandboxInfo(backend=backend, address=server.address, port=server.port, user=user,
                       identity_file=str(key), known_hosts=str(known_hosts), pid=server.pid,
                       workdir=str(server.workdir), throwaway_user=user, isolation="throwaway user")


def _shutdown(info: SandboxInfo) -> None:
    """Stop a sandbox and remove what it made: container, sshd, throwaway user, files."""
    if info.container:
        engine = engine_named(info.engine)
        if engine is None:
            raise ConfigError(f"cannot remove sandbox container {info.container[:12]}: {info.engine} is not installed")
        engine.remove(info.container)
    server = _SERVERS.pop(info.pid, None)
    if server is not None:
        server.stop()
    elif _is_sshd(info.pid):  # a half-stopped sandbox's sshd is gone, and its pid may be another's
        _stop_pid(info.pid)
    try:
        if info.throwaway_user:
            remove_user(info.throwaway_user)
    finally:
        if info.workdir:
            shutil.rmtree(info.workdir, ignore_errors=True)


def start(env: Mapping[str, str], backend: str | None = None, *, image: str | None = None,
          progress: Progress | None = None, private_paths: Iterable[Path] = ()) -> SandboxInfo:
    """Start the sandbox that runs until :func:`stop` (the running one, if there is one already)."""
    directory = sandbox_dir(env)
    current = running(env)
    if current is not None:
        return current
    _finish_stopping(env)
    chosen, engine = choose_backend(backend, env)
    _make_private(directory)
    key = _client_key(directory)
    info = _launch(chosen, engine, key, directory / "known_hosts", image=image, progress=progress,
                   private_paths=[*private_paths, directory], workdir=directory / "sshd")
    tmp = directory / "sandbox.json.tmp"
    _write(tmp, json.dumps(asdict(info), indent=2) + "\n")
    tmp.replace(directory / "sandbox.json")
    return info


def recorded(env: Mapping[str, str]) -> SandboxInfo | None:
    """The sandbox the state file describes, running, half-stopped or gone; None without one."""
    directory = sandbox_dir(env)
    try:
        # A state file someone else could write would point connections at their host and key.
        private_dir(directory, what="the sandbox", create=False)
        with os.fdopen(open_private(directory / "sandbox.json", os.O_RDONLY, what="the sandbox"), "rb") as file:
            data: dict[str, Any] = json.loads(file.read(1 << 20))
        info = SandboxInfo(**data)
    except (OSError, ValueError, TypeError):
        return None
    return info


def running(env: Mapping[str, str]) -> SandboxInfo | None:
    """The sandbox :func:`start` left running, or None (also when it is half-stopped)."""
    info = recorded(env)
    if info is None or info.stopping:
        return None
    if info.container:
        engine = engine_named(info.engine)  # asking the container is enough: no separate engine probe
        return info if engine is not None and engine.running(info.container) else None
    return info if _is_sshd(info.pid) else None


def half_stopped(env: Mapping[str, str]) -> SandboxInfo | None:
    """The sandbox whose last stop did not finish (its ``stopping`` says what is left), or None."""
    info = recorded(env)
    if info is None or info.stopping:
        return info
    if info.throwaway_user and _user_exists(info.throwaway_user) and running(env) is None:
        return replace(info, stopping=f"its sshd ended, but its throwaway user {info.throwaway_user} and what "
                                      f"that user left are still there")
    return None


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def stop(env: Mapping[str, str]) -> SandboxInfo | None:
    """Stop the running or half-stopped sandbox (None when there was none) and forget it.

    A stop that does not finish keeps the state, marked half-stopped with what is left, so that
    the next stop retries; it raises :class:`ConfigError` saying what is left and what to do.
    """
    state = sandbox_dir(env) / "sandbox.json"
    stop_abandoned(env)
    info = running(env) or half_stopped(env)
    if info is not None:
        _shutdown_or_record(info, sandbox_dir(env), over_any=True)
    state.unlink(missing_ok=True)
    return info


def _shutdown_or_record(info: SandboxInfo, directory: Path, *, over_any: bool) -> None:
    """:func:`_shutdown`, and when it fails, the state file marked half-stopped (``over_any``: over any
    state there is; otherwise only where there is none) before the error goes on."""
    try:
        _shutdown(info)
    except ConfigError as exc:
        state = directory / "sandbox.json"
        if over_any or not state.exists():
            tmp = directory / "sandbox.json.tmp"
            _write(tmp, json.dumps({**asdict(info), "stopping": str(exc)}, indent=2) + "\n")
            tmp.replace(state)
        raise ConfigError(f"{exc} (the sandbox is half-stopped: 'remote-bash sandbox status' shows what is "
                          f"left)") from exc


def _finish_stopping(env: Mapping[str, str]) -> None:
    """Before a new sandbox: remove abandoned one-offs, finish the stop of a half-stopped sandbox
    (its user, files), or refuse."""
    stop_abandoned(env)
    if half_stopped(env) is not None:
        stop(env)


@contextlib.contextmanager
def sandbox_for_command(env: Mapping[str, str], backend: str | None = None, *, image: str | None = None,
                        progress: Progress | None = None, private_paths: Iterable[Path] = ()) -> Iterator[Host]:
    """The running sandbox's host, or one started now and removed when the block ends."""
    current = running(env)
    if current is not None:
        if backend is not None and backend != current.backend:
            raise ConfigError(f"a {current.backend} sandbox is running; stop it first ('sandbox stop') to use "
                              f"the {backend} backend")
        yield current.host()
        return
    _finish_stopping(env)
    chosen, engine = choose_backend(backend, env)
    directory = sandbox_dir(env)
    _make_private(directory)
    key = _client_key(directory)
    rundir = Path(tempfile.mkdtemp(prefix="run-", dir=directory))
    try:
        info = _launch(chosen, engine, key, rundir / "known_hosts", image=image, progress=progress,
                       private_paths=[*private_paths, directory], workdir=rundir / "sshd")
        try:
            # Recorded while it runs: if this process is killed, the next stop, start or one-off removes it.
            _write(rundir / _ONE_OFF, json.dumps({**asdict(info), "owner_pid": os.getpid(),
                                                  "owner_start": _start_time(os.getpid())}, indent=2) + "\n")
            yield info.host()
        finally:
            # Where it fails, the state file keeps what is left for 'sandbox stop' to retry.
            _shutdown_or_record(info, directory, over_any=False)
    finally:
        shutil.rmtree(rundir, ignore_errors=True)


_ONE_OFF = "one-off.json"


def _start_time(pid: int) -> str:
    """When ``pid`` started (clock ticks since boot, /proc/PID/stat's 22nd field); "" when it does not run.

    A pid and its start time name one process: a later process given the same pid started later.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[19]
    except (OSError, ValueError, IndexError):
        return ""


@dataclass(frozen=True)
class _OneOff:
    info: SandboxInfo
    rundir: Path
    owner_pid: int
    owner_start: str

    def owner_alive(self) -> bool:
        if self.owner_start:
            return _start_time(self.owner_pid) == self.owner_start
        # Recorded without /proc: the pid alone, so a reused pid keeps the sandbox, never the reverse.
        try:
            os.kill(self.owner_pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return self.owner_pid > 0


def _one_offs(env: Mapping[str, str]) -> list[_OneOff]:
    """The one-off sandboxes recorded in the sandbox directory, their owners alive or not."""
    directory = sandbox_dir(env)
    try:
        private_dir(directory, what="the sandbox", create=False)
        names = sorted(os.listdir(directory))
    except (OSError, ValueError):
        return []
    found = []
    for name in names:
        if not name.startswith("run-"):
            continue
        rundir = directory / name
        try:
            # As the state file: a record someone else could write would point the stop at their processes.
            private_dir(rundir, what="the sandbox", create=False)
            with os.fdopen(open_private(rundir / _ONE_OFF, os.O_RDONLY, what="the sandbox"), "rb") as file:
                data: dict[str, Any] = json.loads(file.read(1 << 20))
            owner_pid, owner_start = int(data.pop("owner_pid")), str(data.pop("owner_start"))
            found.append(_OneOff(SandboxInfo(**data), rundir, owner_pid, owner_start))
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return found


def abandoned(env: Mapping[str, str]) -> list[SandboxInfo]:
    """The one-off sandboxes whose owning process is gone without removing them (``stopping`` says
    what a failed removal left)."""
    return [one.info for one in _one_offs(env) if not one.owner_alive()]


def stop_abandoned(env: Mapping[str, str]) -> list[SandboxInfo]:
    """Remove every abandoned one-off sandbox (never one whose owner runs); those removed.

    One that cannot be removed keeps its record, with what is left, and :class:`ConfigError` says so
    once the others were tried.
    """
    removed: list[SandboxInfo] = []
    failures: list[str] = []
    for one in _one_offs(env):
        if one.owner_alive():
            continue
        record = one.rundir / _ONE_OFF
        try:
            fd = open_private(record, os.O_RDONLY, what="the sandbox")
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # another process is removing it now
            if not record.exists():
                continue  # removed by the process that held the lock before
            try:
                _shutdown(one.info)
            except ConfigError as exc:
                failures.append(str(exc))
                tmp = one.rundir / (_ONE_OFF + ".tmp")
                _write(tmp, json.dumps({**asdict(one.info), "stopping": str(exc), "owner_pid": one.owner_pid,
                                        "owner_start": one.owner_start}, indent=2) + "\n")
                tmp.replace(record)
                continue
            shutil.rmtree(one.rundir, ignore_errors=True)
            removed.append(one.info)
        finally:
            os.close(fd)
    if failures:
        raise ConfigError(f"an abandoned one-off sandbox could not be removed: {'; '.join(failures)}")
    return removed


def _is_sshd(pid: int) -> bool:
    """Whether ``pid`` runs and is still an sshd (or the asyncssh fallback): pids get reused."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes() if Path("/proc").is_dir() else b"sshd"
    except (ProcessLookupError, PermissionError, FileNotFoundError):
        return False
    return b"sshd" in cmdline or b"remote_bash._ssh" in cmdline


def _stop_pid(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        # The sshd and every connection it serves (each in a session of its own).
        os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + 5
        while time.monotonic() < end:
            if not _alive(pid):
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which has no command line left, does not)."""
    try:
        os.kill(pid, 0)
        return not Path("/proc").is_dir() or bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except (ProcessLookupError, PermissionError, FileNotFoundError):
        return False
