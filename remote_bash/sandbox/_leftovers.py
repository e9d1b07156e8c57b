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
UID owns; every walk is iterative (no depth is too deep), bounded in entries and time, and what
it could not remove is reported.
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


class _Frame:
    """A directory being emptied: its identity, its entries still to look at, and how to reach it."""

    __slots__ = ("fd", "ident", "name", "pending")

    def __init__(self, fd: int | None, ident: tuple[int, int], name: str, pending: list[str]) -> None:
        self.fd, self.ident, self.name, self.pending = fd, ident, name, pending


# Directories deeper than this are left closed while their descendants are emptied and reopened
# through ".." (checked to be the same directory) on the way back up: a tree of any depth costs
# this many descriptors, not one per level.
_OPEN_FRAMES = 32


class _Walk:
    """One bounded, fd-relative, iterative walk removing ``uid``'s entries bottom-up.

    Iterative, so no depth is too deep for it: a tree nested thousands of levels deep (deeper than
    PATH_MAX and any recursion limit) is emptied like a flat one, within the same entry and time bounds.
    """

    def __init__(self, uid: int, gid: int, *, max_entries: int, deadline: float) -> None:
        self.uid, self.gid = uid, gid
        self.left = max_entries
        self.end = time.monotonic() + deadline
        self.kept: list[str] = []
        self.kept_count = 0
        self.incomplete = False

    def reachable(self, st: os.stat_result) -> bool:
        # Only where the user could enter can its files be; this skips other users' private trees.
        if st.st_uid == self.uid:
            return True
        if st.st_gid == self.gid:
            return bool(st.st_mode & stat.S_IXGRP)
        return bool(st.st_mode & stat.S_IXOTH)

    def keep(self, stack: list[_Frame], root: str, last: str, note: str = "") -> None:
        self.kept_count += 1
        if len(self.kept) < 20:
            self.kept.append(_shown(root, [f.name for f in stack[1:]] + [last]) + note)

    def walk(self, root_fd: int, root: str) -> None:
        """Empty ``root`` (an open directory) of ``uid``'s entries; ``root`` itself stays."""
        dev = os.fstat(root_fd).st_dev
        first = self.listing(root_fd)
        if first is None:
            self.keep([], root, "", " (it could not be listed)")
            return
        stack = [_Frame(root_fd, (dev, os.fstat(root_fd).st_ino), "", first)]
        try:
            while stack:
                top = stack[-1]
                if not top.pending:
                    stack.pop()
                    if stack and not self.climb(stack, top, root):
                        return
                    continue
                name = top.pending.pop()
                self.left -= 1
                if self.left < 0 or time.monotonic() > self.end:
                    self.incomplete = True
                    return
                self.step(stack, name, dev, root)
        finally:
            for frame in stack[1:]:
                if frame.fd is not None:
                    os.close(frame.fd)

    def step(self, stack: list[_Frame], name: str, dev: int, root: str) -> None:
        top = stack[-1]
        assert top.fd is not None
        try:
            # By name from the directory's current descriptor: the one it was listed through may
            # have been closed and its number reused since.
            st = os.stat(name, dir_fd=top.fd, follow_symlinks=False)
        except OSError:
            return
        if st.st_dev != dev:
            return  # a mount point: another file system
        if not stat.S_ISDIR(st.st_mode):
            if st.st_uid == self.uid:
                self.remove(stack, name, root, directory=False)
            return
        if self.reachable(st):
            fd = self.enter(top.fd, name, st)
            if fd is not None:
                listing = self.listing(fd)
                if listing is None:
                    os.close(fd)
                    self.keep(stack, root, name, " (it could not be listed)")
                    return
                # The directory itself is removed when its frame is done (see climb).
                stack.append(_Frame(fd, (st.st_dev, st.st_ino), name, listing))
                far = stack[-_OPEN_FRAMES - 1] if len(stack) > _OPEN_FRAMES + 1 else None  # never the root
                if far is not None and far.fd is not None:
                    os.close(far.fd)
                    far.fd = None
                return
        if st.st_uid == self.uid:
            self.remove(stack, name, root, directory=True)

    def climb(self, stack: list[_Frame], done: _Frame, root: str) -> bool:
        """Back in ``stack[-1]`` from its emptied child ``done``: reopen it if closed, remove the child."""
        parent = stack[-1]
        assert done.fd is not None
        try:
            if parent.fd is None:
                try:
                    fd = os.open("..", _OPEN_DIR, dir_fd=done.fd)
                except OSError:
                    fd = -1
                if fd < 0 or (os.fstat(fd).st_dev, os.fstat(fd).st_ino) != parent.ident:
                    if fd >= 0:
                        os.close(fd)
                    # Moved meanwhile (no process of the user runs, so someone else moved it): stop here.
                    self.keep(stack, root, done.name, " and what is above it (it moved while being removed)")
                    self.incomplete = True
                    return False
                parent.fd = fd
        finally:
            os.close(done.fd)
        with contextlib.suppress(OSError):
            if os.stat(done.name, dir_fd=parent.fd, follow_symlinks=False).st_uid == self.uid:
                self.remove(stack, done.name, root, directory=True)
        return True

    def enter(self, parent: int, name: str, st: os.stat_result) -> int | None:
        try:
            fd = os.open(name, _OPEN_DIR, dir_fd=parent)
        except OSError:
            return None
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):  # swapped meanwhile
            os.close(fd)
            return None
        return fd

    @staticmethod
    def listing(fd: int) -> list[str] | None:
        try:
            return os.listdir(fd)
        except OSError:
            return None

    def remove(self, stack: list[_Frame], name: str, root: str, *, directory: bool) -> None:
        parent = stack[-1].fd
        try:
            if directory:
                os.rmdir(name, dir_fd=parent)
            else:
                os.unlink(name, dir_fd=parent)
        except FileNotFoundError:
            pass
        except OSError:
            self.keep(stack, root, name)


def _shown(root: str, names: list[str]) -> str:
    """A path for a message: a deep one shortened to its first and last levels, with its depth."""
    names = [n for n in names if n]
    if len(names) <= 8:
        return "/".join([root, *names])
    return "/".join([root, *names[:3], "...", *names[-2:]]) + f" ({len(names)} levels down)"


def _remove_temp_files(uid: int, gid: int, roots: tuple[Path, ...], *, max_entries: int,
                       deadline: float) -> list[str]:
    walk = _Walk(uid, gid, max_entries=max_entries, deadline=deadline)
    for root in roots:
        try:
            fd = os.open(root, _OPEN_DIR)
        except OSError:
            continue
        try:
            walk.walk(fd, str(root).rstrip("/"))
        finally:
            os.close(fd)
        if walk.incomplete:
            break
    problems = [f"could not remove {path}" for path in walk.kept]
    if walk.kept_count > len(walk.kept):
        problems.append(f"and {walk.kept_count - len(walk.kept)} more")
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
                     also: tuple[Path, ...] = (), max_entries: int = 200_000, deadline: float = 20.0) -> list[str]:
    """Remove what ``uid`` owns in the shared places (default: :func:`shared_places`), its crontab
    and at jobs, the lingering of user ``name``, its SysV IPC objects and POSIX message queues; and
    what it owns in the directories ``also`` (its home).

    Call it only once no process of ``uid`` runs. Returns what could not be removed, as sentences.
    """
    places = (*(shared_places() if roots is None else roots), *also)
    return [*_remove_temp_files(uid, gid, places, max_entries=max_entries, deadline=deadline),
            *_remove_message_queues(uid, gid, max_entries=max_entries, deadline=deadline),
            *_remove_linger(name), *_remove_sysv_ipc(uid)]
