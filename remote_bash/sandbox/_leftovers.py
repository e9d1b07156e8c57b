"""What a removed sandbox user leaves in the machine's shared places, found and removed.

``userdel --remove`` takes the user's home and mail spool; the user could also write to the
world-writable temp directories (/tmp, /var/tmp, /dev/shm) and create System V IPC objects and
POSIX message queues, all of which outlive the user and would belong to the next user given the
same UID. This module removes exactly those, by owner UID, once none of the user's processes runs.

It must never follow a symbolic link, cross into another file system, or remove anything another
UID owns; every walk is bounded in entries and time, and what it could not remove is reported.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import time
from pathlib import Path

__all__ = ["TEMP_DIRS", "remove_leftovers"]

TEMP_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))  # noqa: S108
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


def remove_leftovers(uid: int, gid: int, *, roots: tuple[Path, ...] = TEMP_DIRS, max_entries: int = 200_000,
                     deadline: float = 20.0) -> list[str]:
    """Remove what ``uid`` owns in the temp directories, its SysV IPC objects and POSIX queues.

    Call it only once no process of ``uid`` runs. Returns what could not be removed, as sentences.
    """
    queues = (_MQUEUE,) if os.path.ismount(_MQUEUE) else ()
    return [*_remove_temp_files(uid, gid, roots + queues, max_entries=max_entries, deadline=deadline),
            *_remove_sysv_ipc(uid)]
