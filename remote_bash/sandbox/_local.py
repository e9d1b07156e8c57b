"""The local sandbox backend: OpenSSH's sshd on 127.0.0.1, isolated with what the machine offers.

Run as root, it creates a user that exists only while the sandbox runs (no password, a home and a
random UID of its own, removed on stop with everything it started and everything it left in the
shared places: /tmp, /var/tmp, /dev/shm, /run/lock, every other world-writable directory, crontab
and at jobs, System V IPC and POSIX message queues; kept, and said so, while any of that remains)
and checks, as that user, that the operator's home, audit logs and state are out of its reach
before a command is served. Run as anyone else, it
runs sshd inside a bubblewrap namespace: a process tree of its own, an empty environment, the
file system read-only, and empty directories over the operator's home, audit logs, state, /tmp
and /run (where agent and engine sockets live). Without either it refuses. The operator's own
account with its environment is the explicit ``unisolated`` backend, which this module never picks.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from remote_bash.errors import ConfigError

from ._leftovers import remove_leftovers
from ._sshd import SshdServer, clean_environment, find_sshd, start_sshd

__all__ = ["USER_PREFIX", "bwrap_wrapper", "create_user", "end_processes", "exposed_paths", "local_refusal",
           "remove_user", "start_local_sshd"]

USER_PREFIX = "rb-sandbox-"
ENGINE_HINT = ("install Docker or Podman (Debian: apt-get install docker.io) and the sandbox runs in a container")


def local_refusal(euid: int, sshd: str | None, bwrap: str | None) -> str | None:
    """Why the local backend cannot isolate on this machine, with the ways out; None when it can."""
    if euid != 0 and bwrap is None:
        return ("the local sandbox isolates Claude's commands from your account with a throwaway user (which "
                "needs root) or bubblewrap (not installed); "
                f"{ENGINE_HINT}, install bubblewrap (apt-get install bubblewrap), run remote-bash as root, "
                "or accept that the commands run as you, with your files, keys and environment: "
                "--backend unisolated")
    if sshd is None:
        return (f"the local sandbox needs OpenSSH's sshd: apt-get install openssh-server, or {ENGINE_HINT}")
    return None


def bwrap_wrapper(bwrap: str, hidden: Iterable[Path], workdir: Path) -> list[str]:
    """bubblewrap's command line for sshd: own pid namespace, clean environment, ``hidden`` emptied."""
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            # Empty inside the namespace: the operator's sockets and files there stay out of reach.
            "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run",  # noqa: S108
            "--unshare-pid", "--unshare-ipc", "--new-session", "--die-with-parent"]
    for path in dict.fromkeys(p.resolve() for p in hidden):
        if path.is_dir():
            argv += ["--tmpfs", str(path)]
        elif path.exists():
            argv += ["--ro-bind", "/dev/null", str(path)]
    # sshd's own files, bound last so that a hidden directory above them does not hide them.
    argv += ["--bind", str(workdir), str(workdir), "--clearenv"]
    for key, value in clean_environment().items():
        argv += ["--setenv", key, value]
    return [*argv, "--"]


# Sandbox users get random UIDs far above the ones useradd hands out (login.defs' UID_MAX is 60000
# by default), so a later user, sandbox or not, does not get the UID of an earlier sandbox and with
# it anything of that sandbox that might have escaped removal.
UID_RANGE = (3_000_000, 3_999_999)


def _free_uid() -> int:
    for _ in range(100):
        uid = UID_RANGE[0] + secrets.randbelow(UID_RANGE[1] - UID_RANGE[0] + 1)
        if not _uid_in_use(uid):
            return uid
    raise ConfigError(f"cannot find a free UID for the sandbox user in {UID_RANGE[0]}-{UID_RANGE[1]}")


def _uid_in_use(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        pass
    with contextlib.suppress(KeyError):
        grp.getgrgid(uid)
        return True
    # Subordinate ranges (/etc/subuid, /etc/subgid) belong to other users' containers.
    for table in ("/etc/subuid", "/etc/subgid"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines():
                with contextlib.suppress(ValueError):
                    _, start, count = line.strip().split(":")
                    if int(start) <= uid < int(start) + int(count):
                        return True
    return False


def create_user() -> str:
    """A new unprivileged user with a home of its own, a UID of its own and no usable password."""
    name = USER_PREFIX + secrets.token_hex(3)
    uid = _free_uid()
    # --no-log-init: no lastlog/faillog entry (those files are indexed by UID and would grow sparse).
    for argv in (["groupadd", "--gid", str(uid), name],
                 ["useradd", "--create-home", "--no-log-init", "--uid", str(uid), "--gid", str(uid),
                  "--shell", "/bin/bash", "--comment", "remote-bash sandbox (removed on stop)", name],
                 ["usermod", "--password", "*", name]):  # '*': no password, yet not locked for sshd
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False,
                              stdin=subprocess.DEVNULL, env=clean_environment())
        if done.returncode != 0:
            remove_user(name)
            raise ConfigError(f"cannot create the sandbox user {name}: {done.stderr.strip()}")
    home = Path(pwd.getpwnam(name).pw_dir)
    home.chmod(0o700)
    return name


def remove_user(name: str, *, deadline: float = 15.0) -> None:
    """End every process of the throwaway user, remove its files, then delete the user and its home.

    The user is deleted only once none of its processes runs and none of its files is left: a user
    kept keeps its UID taken, so what could not be removed never passes to a later user. Raises
    :class:`ConfigError` saying what is left and what to do when either is not the case.
    """
    if not name.startswith(USER_PREFIX):
        raise ConfigError(f"refusing to remove {name!r}: not a sandbox user")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        _remove_group(name)
        return
    uid, gid, home = entry.pw_uid, entry.pw_gid, Path(entry.pw_dir)
    left = end_processes(uid, gid, deadline=deadline)
    if left:
        shown = ", ".join(f"{pid} ({state})" for pid, state in left[:20]) + (" ..." if len(left) > 20 else "")
        raise ConfigError(f"kept the sandbox user {name} (UID {uid}): {len(left)} of its processes still run after "
                          f"{deadline:g} s of SIGKILL: {shown}; a process in state D waits on the kernel (a hung "
                          f"mount or device) and ends when that returns; run 'remote-bash sandbox stop' again")
    # With no process left, nothing new appears: what the user wrote outside its home goes too, and
    # its home is emptied here rather than by userdel, whose removal fails on very deep trees.
    problems = remove_leftovers(uid, gid, name=name, also=(home,) if home.is_dir() else ())
    if problems:
        raise ConfigError(f"kept the sandbox user {name} (UID {uid}) and its home {home}: not all it left "
                          f"behind could be removed: {'; '.join(problems)}; remove those (as root: "
                          f"find PATH -xdev -user {uid} -delete) and run 'remote-bash sandbox stop' again")
    # --force: zombies of the user (already killed, waiting for their parent to reap them) would
    # otherwise count as the user being logged in; no live process of it is left.
    done = subprocess.run(["userdel", "--force", "--remove", name], capture_output=True, text=True, timeout=30,
                          check=False, stdin=subprocess.DEVNULL, env=clean_environment())
    # userdel complains about a missing mail spool, which useradd never made: only a user still
    # present is a failure.
    with contextlib.suppress(KeyError):
        pwd.getpwnam(name)
        raise ConfigError(f"cannot remove the sandbox user {name}: {done.stderr.strip()}; "
                          f"run 'remote-bash sandbox stop' again")
    _remove_group(name)
    if os.path.lexists(home):
        raise ConfigError(f"removed the sandbox user {name} (UID {uid}) but not its home {home}: "
                          f"{done.stderr.strip()}; remove it by hand (rm -rf --one-file-system {home})")


def end_processes(uid: int, gid: int, *, deadline: float = 15.0, rounds: int = 200) -> list[tuple[int, str]]:
    """SIGKILL every process of ``uid`` until none runs (zombies do not: they only wait to be reaped).

    Returns the (pid, state) of those still running after ``deadline`` s or ``rounds`` rounds. Each
    round signals all of them at once from a process running as ``uid`` (kill(-1) reaches every
    process the caller may signal in one pass the kernel does not let a fork slip through), so a
    process that forks and exits in a loop cannot outrun it; then each one seen, by pid. A look
    through /proc does not see such a process (it is gone before its pid is read, its child came
    after the listing): only a look after a round that signalled them all is believed.
    """
    end = time.monotonic() + deadline
    pause = 0.01
    left = _processes_of(uid)
    for _ in range(rounds):
        signalled = _kill_all_as(uid, gid, until=end)
        for pid, _state in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(pause)
        pause = min(pause * 2, 0.2)
        left = _processes_of(uid)
        if (signalled and not left) or time.monotonic() > end:
            return left
    return left


def _kill_all_as(uid: int, gid: int, *, until: float) -> bool:
    """kill(-1, SIGKILL) as ``uid``: every process of it but the one sending, in one kernel pass.

    True when the signal went out (or there was no process to send it to).
    """
    # A forked child that never execs: an exec as a user past its process limit (a fork bomb's)
    # would fail, a fork from root does not; the child only makes system calls and exits.
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            with contextlib.suppress(ProcessLookupError):  # none to signal
                os.kill(-1, signal.SIGKILL)
            code = 0
        finally:
            os._exit(code)
    while time.monotonic() < until:
        with contextlib.suppress(ChildProcessError):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                # The user's own processes may kill this one first: then the round did not happen.
                return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        time.sleep(0.005)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    return False


def _remove_group(name: str) -> None:
    # userdel removes the user's own group only when it was made by useradd: this one was not.
    with contextlib.suppress(KeyError):
        grp.getgrnam(name)
        subprocess.run(["groupdel", name], capture_output=True, timeout=30, check=False,
                       stdin=subprocess.DEVNULL, env=clean_environment())


def _processes_of(uid: int) -> list[tuple[int, str]]:
    """(pid, state) of every live process whose real, effective or saved UID is ``uid``."""
    found = []
    # Listed by name, each read on its own: a process that ends meanwhile is skipped (a glob's
    # stat of it raised ESRCH).
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError, KeyError):
            text = Path(f"/proc/{name}/status").read_text()
            fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
            state = fields["State"].split()[0]
            if state not in ("Z", "X") and uid in [int(u) for u in fields["Uid"].split()[:3]]:
                found.append((int(name), state))
    return found


def exposed_paths(user: str, paths: Iterable[Path]) -> list[Path]:
    """Those of ``paths`` that ``user`` can read or enter (checked as that user, by the kernel)."""
    existing = [str(p) for p in paths if p.exists()]
    if not existing:
        return []
    entry = pwd.getpwnam(user)
    script = 'for p; do if [ -r "$p" ] || { [ -d "$p" ] && [ -x "$p" ]; }; then printf "%s\\n" "$p"; fi; done'
    done = subprocess.run(["/bin/sh", "-c", script, "sh", *existing], capture_output=True, text=True, timeout=30,
                          check=False, user=entry.pw_uid, group=entry.pw_gid, extra_groups=[], cwd="/",
                          env=clean_environment(), stdin=subprocess.DEVNULL)
    return [Path(line) for line in done.stdout.splitlines() if line]


def start_local_sshd(user: str, public_key: str, *, bwrap: str | None = None,
                     hidden: Iterable[Path] = (), workdir: Path | None = None) -> SshdServer:
    """sshd on 127.0.0.1 letting only ``user`` in, inside bubblewrap when ``bwrap`` is given.

    Its files live in a private directory of /tmp: sshd reads authorized_keys as the user logging
    in, so the directory is enterable (not listable) by others; the host's private key in it stays
    its owner's alone.
    """
    if find_sshd() is None:
        raise ConfigError(local_refusal(0, None, bwrap) or "sshd is not installed")
    workdir = workdir or Path(tempfile.mkdtemp(prefix="remote-bash-sandbox-"))
    workdir.chmod(0o711)
    wrapper = bwrap_wrapper(bwrap, hidden, workdir) if bwrap else []
    try:
        return start_sshd(workdir, address="127.0.0.1", users=[user], authorized_keys=[public_key], wrapper=wrapper)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
