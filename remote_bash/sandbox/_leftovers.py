"""What a removed sandbox user leaves in the machine's shared places, found and removed.

``userdel --remove`` takes the user's home and mail spool; the user could also write to every
world-writable directory (/tmp, /var/tmp, /dev/shm, /run/lock, /var/crash and any other the machine
has, found at stop), leave a crontab or an at job (in /var/spool/cron, owned by the user), ask for
lingering (/var/lib/systemd/linger/USER) and create System V IPC objects and POSIX message queues,
all of which outlive the user and would belong to the next user given the same UID. This module
removes exactly those, by owner UID, once none of the user's processes runs. POSIX message queues
are looked for in /dev/mqueue, or, when it is not mounted, in an mqueue file system mounted for
the purpose in a private directory.

It must never follow a symbolic link, cross into another file system, or remove anything another
UID owns; every walk is bounded in entries and time, and what it could not remove is reported.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["SHARED_DIRS", "TEMP_DIRS", "remove_leftovers", "shared_places"]

_log = logging.getLogger(__name__)

TEMP_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))  # noqa: S108
# Shared places on a Debian or Ubuntu system a user can leave things in, beside TEMP_DIRS; those
# that do not exist are skipped. Crontabs and at jobs are owned by their user, but written by
# setgid programs into directories the user cannot enter: each is a place of its own.
SHARED_DIRS = (Path("/run/lock"), Path("/var/lock"), Path("/var/crash"), Path("/var/spool/cron/crontabs"),
               Path("/var/spool/cron/atjobs"), Path("/var/spool/cron/atspool"), Path("/var/lib/php/sessions"),
               Path("/var/mail"))
# Other world-writable directories are looked for one level below these (a package's own spool
# or socket directory); deeper ones are rare enough that a whole-disk walk per stop is not worth it.
_SEARCHED = (Path("/"), Path("/var"), Path("/run"), Path("/dev"), Path("/var/lib"), Path("/var/spool"),
             Path("/var/cache"), Path("/srv"), Path("/opt"))
_LINGER = Path("/var/lib/systemd/linger")
_MQUEUE = Path("/dev/mqueue")
_SYSVIPC = {"shm": ("/proc/sysvipc/shm", "-m"), "msg": ("/proc/sysvipc/msg", "-q"), "sem": ("/proc/sysvipc/sem", "-s")}
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _Walk:
    """One bounded, fd-relative walk removing ``uid``'s entries bottom-up."""

    def __init__(self, uid: int, gid: int, *, max_entries: int, deadline: float) -> None:
        self.uid, self.gid = uid, gid
        self.left = max_entries
        self.end = time.monotonic() + deadline
        self.kept: list[str] = []
        self.incomplete = False

    def reachable(self, st: os.stat_result) -> bool:
        # Only where the user could enter can its files be; this skips other users' private trees.
        if st.st_uid == self.uid:
            return True
        if st.st_gid == self.gid:
            return bool(st.st_mode & stat.S_IXGRP)
        return bool(st.st_mode & stat.S_IXOTH)

    def directory(self, fd: int, path: str, dev: int, depth: int) -> None:
        try:
            with os.scandir(fd) as entries:
                names = list(entries)
        except OSError:
            self.kept.append(f"what is in {path} (it could not be listed)")
            return
        for entry in names:
            self.left -= 1
            if self.left < 0 or time.monotonic() > self.end or depth > 64:
                self.incomplete = True
                return
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_dev != dev:
                continue  # a mount point: another file system
            where = f"{path}/{entry.name}"
            if stat.S_ISDIR(st.st_mode):
                if self.reachable(st):
                    self.subdirectory(fd, entry.name, where, st, depth)
                if st.st_uid == self.uid:
                    self.remove(fd, entry.name, where, directory=True)
            elif st.st_uid == self.uid:
                self.remove(fd, entry.name, where, directory=False)

    def subdirectory(self, parent: int, name: str, where: str, st: os.stat_result, depth: int) -> None:
        try:
            fd = os.open(name, _OPEN_DIR, dir_fd=parent)
        except OSError:
            return
        try:
            opened = os.fstat(fd)
            if (opened.st_dev, opened.st_ino) == (st.st_dev, st.st_ino):  # not swapped meanwhile
                self.directory(fd, where, st.st_dev, depth + 1)
        finally:
            os.close(fd)

    def remove(self, parent: int, name: str, where: str, *, directory: bool) -> None:
        try:
            if directory:
                os.rmdir(name, dir_fd=parent)
            else:
                os.unlink(name, dir_fd=parent)
        except FileNotFoundError:
            pass
        except OSError:
            self.kept.append(where)


def _remove_temp_files(uid: int, gid: int, roots: tuple[Path, ...], *, max_entries: int,
                       deadline: float) -> list[str]:
    walk = _Walk(uid, gid, max_entries=max_entries, deadline=deadline)
    for root in roots:
        try:
            fd = os.open(root, _OPEN_DIR)
        except OSError:
            continue
        try:
            walk.directory(fd, str(root).rstrip("/"), os.fstat(fd).st_dev, 0)
        finally:
            os.close(fd)
    problems = [f"could not remove {path}" for path in walk.kept]
    if walk.incomplete:
        problems.append(f"stopped looking through {', '.join(map(str, roots))} after {max_entries} entries "
                        f"or {deadline:g} s")
    return problems


def _remove_sysv_ipc(uid: int) -> list[str]:
    problems = []
    for kind, (table, flag) in _SYSVIPC.items():
        try:
            header, *rows = Path(table).read_text().splitlines()
        except (OSError, ValueError):
            continue
        # The id is the second column in every table; an object the user created and then gave
        # to another owner (IPC_SET) is still its own: match the creator too.
        columns = header.split()
        owners = [columns.index(name) for name in ("uid", "cuid") if name in columns]
        for row in rows:
            fields = row.split()
            with contextlib.suppress(IndexError, ValueError):
                if any(int(fields[col]) == uid for col in owners):
                    done = subprocess.run(["ipcrm", flag, fields[1]], capture_output=True, text=True,
                                          timeout=10, check=False, stdin=subprocess.DEVNULL)
                    if done.returncode != 0:
                        problems.append(f"could not remove System V {kind} {fields[1]}: {done.stderr.strip()}")
    return problems


def shared_places(roots: tuple[Path, ...] = TEMP_DIRS + SHARED_DIRS) -> tuple[Path, ...]:
    """``roots`` that exist, and every other world-writable directory one level below :data:`_SEARCHED`,
    each once (symbolic links resolved: /var/lock is /run/lock)."""
    found: dict[Path, None] = {}
    for root in roots:
        with contextlib.suppress(OSError):
            if root.is_dir():
                found[root.resolve()] = None
    for parent in _SEARCHED:
        try:
            entries = list(os.scandir(parent))
        except OSError:
            continue
        for entry in entries[:10_000]:
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH and entry.name not in ("proc", "sys"):
                    found[Path(entry.path).resolve()] = None
    # A place inside another stays a place of its own: the walk enters only directories the user
    # could enter, and a crontab directory is not one of them.
    return tuple(found)


def _remove_message_queues(uid: int, gid: int, *, max_entries: int, deadline: float) -> list[str]:
    """POSIX message queues of ``uid``: in /dev/mqueue, or an mqueue file system mounted for this."""
    if os.path.ismount(_MQUEUE):
        return _remove_temp_files(uid, gid, (_MQUEUE,), max_entries=max_entries, deadline=deadline)
    where = Path(tempfile.mkdtemp(prefix="remote-bash-mqueue-"))
    try:
        done = subprocess.run(["mount", "-t", "mqueue", "mqueue", str(where)], capture_output=True, text=True,
                              timeout=10, check=False, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            _log.warning("could not look for POSIX message queues left by UID %d: /dev/mqueue is not mounted and "
                         "mounting one failed (%s)", uid, done.stderr.strip())
            return []
        try:
            problems = _remove_temp_files(uid, gid, (where,), max_entries=max_entries, deadline=deadline)
            return [p.replace(str(where), "POSIX message queue ") for p in problems]
        finally:
            subprocess.run(["umount", str(where)], capture_output=True, timeout=10, check=False,
                           stdin=subprocess.DEVNULL)
    finally:
        with contextlib.suppress(OSError):
            where.rmdir()


def _remove_linger(name: str | None) -> list[str]:
    if not name:
        return []
    try:
        (_LINGER / name).unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        return [f"could not remove {_LINGER / name} ({exc.strerror})"]
    return []


def remove_leftovers(uid: int, gid: int, *, roots: tuple[Path, ...] | None = None, name: str | None = None,
                     max_entries: int = 200_000, deadline: float = 20.0) -> list[str]:
    """Remove what ``uid`` owns in the shared places (default: :func:`shared_places`), its crontab
    and at jobs, the lingering of user ``name``, its SysV IPC objects and POSIX message queues.

    Call it only once no process of ``uid`` runs. Returns what could not be removed, as sentences.
    """
    places = shared_places() if roots is None else roots
    return [*_remove_temp_files(uid, gid, places, max_entries=max_entries, deadline=deadline),
            *_remove_message_queues(uid, gid, max_entries=max_entries, deadline=deadline),
            *_remove_linger(name), *_remove_sysv_ipc(uid)]
