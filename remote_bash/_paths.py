"""Where remote_bash keeps its files, and how it creates and opens what it writes.

Directories follow the XDG Base Directory spec on every POSIX system: ``$XDG_CONFIG_HOME``,
``$XDG_STATE_HOME``, ``$XDG_CACHE_HOME`` and ``$XDG_RUNTIME_DIR`` are used only when they hold an
absolute path (the spec says a relative value is invalid and must be ignored), else
``~/.config``, ``~/.local/state``, ``~/.cache``, with ``remote-bash`` below. A relative ``HOME``
is ignored the same way (the account's home from the password database is used).

Everything remote_bash writes (audit logs, transcripts, ``--output-dir`` files, sandbox state,
known_hosts appends, audit keys) goes through :func:`private_dir` and :func:`open_private`:

* a directory is used only when it and every directory above it are owned by root or by the
  current user and are writable by no one else (a world-writable directory such as ``/tmp`` is
  accepted only with the sticky bit, which stops others renaming what is in it), and when no
  component is a symbolic link owned by someone else; so nobody else can swap a path component
  between the check and the use;
* missing directories are created 0700, files 0600, whatever the umask;
* a file is opened with ``O_NOFOLLOW``: a symbolic link in its place is refused, never followed;
  an existing file must be a regular file owned by the current user, and one opened for writing
  is made owner-only (its group and other bits cleared) when it was not.

This module imports nothing from the package but its errors, and never follows a link it did not
check, loosens a mode, or deletes anything.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat

# Not at module level: pathlib, the errors (and collections.abc) would cost a kept call's client more than its call,
# and it needs only the string forms (``*_path``, :func:`private_path`).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from .errors import UnsafePath

__all__ = [
    "APP",
    "UnsafePath",
    "account_name",
    "cache_dir",
    "config_dir",
    "config_path",
    "home_dir",
    "open_private",
    "private_dir",
    "private_path",
    "runtime_dir",
    "runtime_path",
    "state_dir",
    "state_path",
    "write_private",
]

APP = "remote-bash"
_MAX_LINKS = 40


def __getattr__(name: str) -> object:
    if name == "UnsafePath":
        from .errors import UnsafePath

        return UnsafePath
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _path(text: str) -> Path:
    from pathlib import Path

    return Path(text)


def _home(env: Mapping[str, str] | None) -> str:
    env = os.environ if env is None else env
    home = env.get("HOME", "")
    if os.path.isabs(home):
        return home
    return pwd.getpwuid(os.getuid()).pw_dir


def home_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$HOME`` when absolute, else the current user's home from the password database."""
    return _path(_home(env))


def _xdg(env: Mapping[str, str] | None, name: str, default: str) -> str:
    env = os.environ if env is None else env
    value = env.get(name, "")
    base = value if os.path.isabs(value) else os.path.join(_home(env), default)
    return os.path.join(base, APP)


def config_path(env: Mapping[str, str] | None = None) -> str:
    """:func:`config_dir` as a string (which ``Path`` of it is)."""
    return _xdg(env, "XDG_CONFIG_HOME", ".config")


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/remote-bash``, else ``~/.config/remote-bash`` (the inventory lives here)."""
    return _path(config_path(env))


def state_path(env: Mapping[str, str] | None = None) -> str:
    """:func:`state_dir` as a string."""
    return _xdg(env, "XDG_STATE_HOME", ".local/state")


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/remote-bash``, else ``~/.local/state/remote-bash`` (audit, transcripts, sandbox)."""
    return _path(state_path(env))


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/remote-bash``, else ``~/.cache/remote-bash``."""
    return _path(_xdg(env, "XDG_CACHE_HOME", ".cache"))


def runtime_path(env: Mapping[str, str] | None = None) -> str:
    """:func:`runtime_dir` as a string."""
    env = os.environ if env is None else env
    value = env.get("XDG_RUNTIME_DIR", "")
    return os.path.join(value, APP) if os.path.isabs(value) else os.path.join(state_path(env), "run")


def runtime_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_RUNTIME_DIR/remote-bash``, else ``run`` in the state directory (never a shared /tmp)."""
    return _path(runtime_path(env))


# -- checks ---------------------------------------------------------------------------------


def _trusted_owner(uid: int) -> bool:
    return uid in (0, os.geteuid())


def _unsafe(path: Path | str, why: str, what: str, advice: str) -> UnsafePath:
    from .errors import UnsafePath

    return UnsafePath(f"refusing to use {path} for {what}: {why}; {advice}")


def _check_dir(path: str, info: os.stat_result, what: str, *, final: bool) -> None:
    if not stat.S_ISDIR(info.st_mode):
        raise _unsafe(path, "it is not a directory", what, "remove it or choose another path")
    if not _trusted_owner(info.st_uid):
        raise _unsafe(path, f"it is owned by uid {info.st_uid}, another user", what,
                      "choose a directory owned by you (or root)")
    shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    # Above the directory, a shared one is safe with the sticky bit (/tmp): others cannot rename
    # or replace what they do not own. The directory written into must be private to its owner.
    if shared and (final or not info.st_mode & stat.S_ISVTX):
        kind = "group" if not info.st_mode & stat.S_IWOTH else "world"
        raise _unsafe(path, f"it is {kind}-writable (mode {stat.S_IMODE(info.st_mode):04o})", what,
                      f"run 'chmod go-w {path}' or choose another directory")


def _parts(path: str) -> list[str]:
    """The names in ``path``, as ``Path(path).parts`` has them after its anchor ("" and "." left out)."""
    return [name for name in path.split("/") if name not in ("", ".")]


def _anchor(path: str) -> str:
    """``Path(path).anchor`` of an absolute POSIX path: "//" for exactly two leading slashes, else "/"."""
    return "//" if path.startswith("//") and not path.startswith("///") else "/"


def _walk(path: str, what: str, create: bool) -> str:
    """Check (and, with ``create``, make) every component of absolute ``path``; the real path."""
    current = _anchor(path)
    _check_dir(current, os.lstat(current), what, final=False)
    pending = list(reversed(_parts(path)))
    links = 0
    while pending:
        name = pending.pop()
        if name == "..":
            current = os.path.dirname(current)
            continue
        entry = os.path.join(current, name)
        try:
            info = os.lstat(entry)
        except FileNotFoundError:
            if not create:
                raise
            try:
                os.mkdir(entry, 0o700)
            except FileExistsError:
                pass  # made by a concurrent writer: checked below like any other
            else:
                os.chmod(entry, 0o700)  # mkdir's mode is cut by the umask
            info = os.lstat(entry)
        if stat.S_ISLNK(info.st_mode):
            if not _trusted_owner(info.st_uid):
                raise _unsafe(entry, f"it is a symbolic link owned by uid {info.st_uid}, another user", what,
                              "remove the link or choose another path")
            links += 1
            if links > _MAX_LINKS:
                raise _unsafe(entry, "too many symbolic links", what, "choose another path")
            target = os.readlink(entry)
            if target.startswith("/"):
                current = _anchor(target)
            pending.extend(reversed(_parts(target)))
            continue
        _check_dir(entry, info, what, final=not pending)
        current = entry
    return current


def private_path(path: str, *, what: str, create: bool = True) -> str:
    """:func:`private_dir` of a string, returning one (absolute): the same checks, without ``pathlib``."""
    absolute = os.path.abspath(os.path.expanduser(path))
    _walk(absolute, what, create)
    return absolute


def private_dir(path: Path | str, *, what: str, create: bool = True) -> Path:
    """Make sure ``path`` is a directory only its owner can change, creating it (0700) if missing.

    Returns ``path`` (absolute). Raises :class:`UnsafePath` naming the component at fault and what
    to do, or ``OSError`` when the file system refuses (``FileNotFoundError`` without ``create``).
    ``what`` names the use in the message ("the audit log", "transcripts", ...).
    """
    return _path(private_path(os.fspath(path), what=what, create=create))


def open_private(path: Path | str, flags: int, *, what: str) -> int:
    """Open the file ``path`` (its directory already checked), creating it 0600 with ``O_CREAT``.

    A symbolic link in its place is refused (``O_NOFOLLOW``), as is anything but a regular file
    owned by the current user; an existing one opened for writing that others could read or
    write is made owner-only. ``O_TRUNC`` is applied only once the file is known to be safe.
    """
    truncate = flags & os.O_TRUNC
    flags = (flags & ~os.O_TRUNC) | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
    create = flags & os.O_CREAT
    exclusive = flags & os.O_EXCL
    flags &= ~(os.O_CREAT | os.O_EXCL)
    created = False
    try:
        if exclusive:  # FileExistsError for anything already there, a link included
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
            created = True
        else:
            fd = os.open(path, flags)
    except FileNotFoundError:
        if not create:
            raise
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
            created = True
        except FileExistsError:
            fd = os.open(path, flags)  # made by a concurrent writer: checked below
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _unsafe(path, "it is a symbolic link", what, "remove the link; remote_bash never follows one "
                          "in place of a file it writes") from exc
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _unsafe(path, "it is not a regular file", what, "remove it or choose another path")
        if info.st_uid != os.geteuid():
            raise _unsafe(path, f"it is owned by uid {info.st_uid}, another user", what,
                          "remove it or choose another path")
        if created:
            os.fchmod(fd, 0o600)  # the mode given to open is cut by the umask
        elif flags & (os.O_WRONLY | os.O_RDWR) and stat.S_IMODE(info.st_mode) & 0o077:
            # Made by hand, or under another tool's umask: others could read what is written to it.
            # (Only when writing: a reader, such as the audit key's, refuses a file others could
            # already read, since what it holds may have leaked.)
            os.fchmod(fd, stat.S_IMODE(info.st_mode) & 0o700)
        if truncate:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private(path: Path, data: bytes, *, what: str) -> None:
    """Replace the content of ``path`` (its directory already checked) with ``data``, as 0600."""
    fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, what=what)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def account_name() -> str:
    """The name of the account the process runs as (its uid's, never ``$USER`` or ``$LOGNAME``,
    which anyone can set): who the audit log says ran or approved a command. Looked up once per uid
    (every session of a fleet asks)."""
    uid = os.getuid()
    name = _ACCOUNTS.get(uid)
    if name is None:
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = f"uid {uid}"
        _ACCOUNTS[uid] = name
    return name


_ACCOUNTS: dict[int, str] = {}
