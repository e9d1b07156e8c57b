"""File operations over a connection's SFTP channel: inspect, read, atomic write, listing.

Writes never leave a half-written target: a temporary file beside it replaces it by rename,
and the temporary file is removed on failure or cancellation.
"""

from __future__ import annotations

import contextlib
import posixpath
import secrets
import stat as stat_mod

import asyncssh

from remote_bash._plain import Record
from remote_bash.errors import RemoteBashError, RemoteFileError
from remote_bash.models import Host

from .mapping import map_error

__all__ = ["FileInfo", "SftpFiles"]


class FileInfo(Record):
    """What a path is on the host, symbolic links followed."""

    path: str
    """The path with every symbolic link resolved (the path itself when it does not exist)."""
    kind: str
    """``file``, ``dir``, ``other`` (device, fifo, socket) or ``missing``."""
    size: int = 0
    mode: int = 0
    """Permission bits, set-id and sticky bits included."""
    uid: int = -1
    gid: int = -1
    link: bool = False
    """The path given was a symbolic link."""


_SFTP_REASONS = {
    asyncssh.FX_NO_SUCH_FILE: "missing",
    asyncssh.FX_NO_SUCH_PATH: "missing",
    asyncssh.FX_PERMISSION_DENIED: "denied",
    asyncssh.FX_WRITE_PROTECT: "denied",
    asyncssh.FX_FILE_ALREADY_EXISTS: "exists",
    asyncssh.FX_NOT_A_DIRECTORY: "not_dir",
}


class SftpFiles:
    """File operations over one connection's SFTP channel.

    Writes go to a temporary file in the same directory, which then replaces the target by a
    rename, so a reader sees the old file or the new one, never a part."""

    def __init__(self, host: Host, client: asyncssh.SFTPClient) -> None:
        self.host = host
        self._client = client
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self._client.exit()

    def _error(self, exc: asyncssh.Error | OSError, what: str, path: str) -> RemoteBashError:
        if isinstance(exc, asyncssh.SFTPError):
            reason = _SFTP_REASONS.get(exc.code, "failure")
            if exc.code == asyncssh.FX_FAILURE and "exist" in str(exc.reason).lower():
                reason = "exists"
            return RemoteFileError(f"{what} {path} failed: {exc.reason}", host=self.host.name, reason=reason)
        self.closed = True
        return map_error(exc, self.host, during=f"{what} {path}")

    async def inspect(self, path: str) -> FileInfo:
        """What ``path`` is, every symbolic link on the way resolved (a missing file's path is
        resolved through its directory; a dangling link's through the path it names)."""
        try:
            link = False
            try:
                first = await self._client.lstat(path)
                link = first.type == asyncssh.FILEXFER_TYPE_SYMLINK or stat_mod.S_ISLNK(first.permissions or 0)
                resolved = str(await self._client.realpath(path))
                attrs = await self._client.stat(resolved)
            except asyncssh.SFTPNoSuchFile:
                target = path
                if link:
                    target = posixpath.join(posixpath.dirname(path), str(await self._client.readlink(path)))
                folder, name = posixpath.split(posixpath.normpath(target))
                with contextlib.suppress(asyncssh.SFTPNoSuchFile):
                    folder = str(await self._client.realpath(folder))
                return FileInfo(path=posixpath.join(folder, name), kind="missing", link=link)
        except (asyncssh.Error, OSError) as exc:
            raise self._error(exc, "looking at", path) from exc
        perms = attrs.permissions or 0
        kind = "file" if stat_mod.S_ISREG(perms) else "dir" if stat_mod.S_ISDIR(perms) else "other"
        return FileInfo(path=resolved, kind=kind, size=attrs.size or 0, mode=stat_mod.S_IMODE(perms),
                        uid=attrs.uid if attrs.uid is not None else -1,
                        gid=attrs.gid if attrs.gid is not None else -1, link=link)

    async def read(self, path: str, limit: int) -> bytes:
        """Up to ``limit`` + 1 bytes of the file (one more than allowed tells the caller it is longer)."""
        try:
            async with self._client.open(path, "rb", encoding=None) as fh:
                data = await fh.read(limit + 1)
        except (asyncssh.Error, OSError) as exc:
            raise self._error(exc, "reading", path) from exc
        return data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape")

    async def write(self, path: str, data: bytes, *, mode: int, owner: tuple[int, int] | None,
                    create: bool) -> bool:
        """Write ``data`` as ``path`` atomically: a temporary file beside it, then a rename.

        ``create`` never replaces an existing file. Returns False when ``owner`` (uid, gid) could
        not be given to the new file (the user may not hand files to others)."""
        folder, name = posixpath.split(path)
        temp = posixpath.join(folder, f".{name}.rb-{secrets.token_hex(4)}")
        flags = asyncssh.FXF_WRITE | asyncssh.FXF_CREAT | asyncssh.FXF_EXCL
        owner_kept = True
        try:
            async with self._client.open(temp, flags, asyncssh.SFTPAttrs(permissions=0o600),
                                         encoding=None) as fh:
                await fh.write(data)
                with contextlib.suppress(asyncssh.SFTPOpUnsupported):
                    await fh.fsync()
        except (asyncssh.Error, OSError) as exc:
            await self._discard(temp)
            raise self._error(exc, "writing a temporary file for", path) from exc
        except BaseException:
            await self._discard(temp)  # cancelled: leave nothing behind, then stop
            raise
        try:
            if owner is not None:  # before chmod: a chown clears the set-id bits
                try:
                    await self._client.chown(temp, uid=owner[0], gid=owner[1])
                except asyncssh.SFTPError:
                    owner_kept = False
            await self._client.chmod(temp, mode)
            if create:
                await self._client.rename(temp, path)  # OpenSSH's plain rename never replaces
            else:
                await self._client.posix_rename(temp, path)
        except (asyncssh.Error, OSError) as exc:
            await self._discard(temp)
            raise self._error(exc, "replacing" if not create else "creating", path) from exc
        except BaseException:
            await self._discard(temp)
            raise
        return owner_kept

    async def _discard(self, temp: str) -> None:
        with contextlib.suppress(asyncssh.Error, OSError):
            await self._client.remove(temp)

    async def listing(self, path: str, *, depth: int, limit: int) -> list[tuple[str, bool]]:
        """Entries under ``path`` up to ``depth`` levels, hidden ones left out, as (relative
        path, is a directory), sorted; at most ``limit`` entries. A link to a directory is listed
        as one, never entered (it may lead anywhere)."""
        found: list[tuple[str, bool]] = []

        async def walk(rel: str, level: int) -> None:
            here = posixpath.join(path, rel) if rel else path
            try:
                names = await self._client.readdir(here)
            except asyncssh.SFTPError:
                if not rel:
                    raise
                return  # unreadable below the top: listed, not entered
            for entry in sorted(names, key=lambda n: str(n.filename)):
                name = str(entry.filename)
                if name.startswith(".") or len(found) >= limit:
                    continue
                child = posixpath.join(rel, name) if rel else name
                perms = entry.attrs.permissions or 0
                is_dir = stat_mod.S_ISDIR(perms)
                link = stat_mod.S_ISLNK(perms)
                if link:
                    with contextlib.suppress(asyncssh.SFTPError):
                        is_dir = stat_mod.S_ISDIR((await self._client.stat(posixpath.join(here, name))).permissions
                                                  or 0)
                found.append((child, is_dir))
                if is_dir and not link and level < depth:  # a link is listed, not entered
                    await walk(child, level + 1)

        try:
            await walk("", 1)
        except (asyncssh.Error, OSError) as exc:
            raise self._error(exc, "listing", path) from exc
        return found
