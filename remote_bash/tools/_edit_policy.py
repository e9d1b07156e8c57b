"""Remote paths for the text editor: absolute-path checks and the per-host ``edit`` policy, pure.

This module must never touch a file or a connection: it decides on strings, before anything
is sent to the host.
"""

from __future__ import annotations

import fnmatch
import functools
import posixpath
import re
from dataclasses import dataclass

from remote_bash.models import EditPolicy

__all__ = ["PathDecision", "check_path", "normalize", "path_problem"]

MAX_PATH_CHARS = 4096
WRITES = frozenset({"create", "str_replace", "insert"})


def path_problem(path: object) -> str | None:
    """Why ``path`` cannot be used at all, or None."""
    if not isinstance(path, str):
        return f"'path' must be a string, got {type(path).__name__}"
    if not path:
        return "'path' is empty; give an absolute path such as /etc/app.conf"
    if "\x00" in path:
        return "'path' contains a NUL byte"
    if len(path) > MAX_PATH_CHARS:
        return f"'path' is {len(path):,} characters; the limit is {MAX_PATH_CHARS:,}"
    if not path.startswith("/"):
        suggestion = "/" + path.lstrip("./")
        return (f"'path' must be absolute (start with /), got {path!r}; the editor has no working directory. "
                f"Did you mean {suggestion!r}? (find the full path with bash: readlink -f, pwd)")
    return None


def normalize(path: str) -> str:
    """``path`` with ``.``, ``..`` and repeated slashes resolved lexically (links are not followed)."""
    out = posixpath.normpath(path)
    return "/" + out.lstrip("/") if out.startswith("//") else out


@functools.lru_cache(maxsize=512)
def _glob(pattern: str) -> re.Pattern[str]:
    """A path glob as a regular expression: ``*`` and ``?`` stop at ``/``, ``**`` crosses it
    (``**/`` is any number of directories, none included), ``[...]`` is one character but ``/``."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            j = pattern.find("]", j)
            if j < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:j]
                negate = body.startswith("!")
                body = body[1:] if negate else body
                chars = body.replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[")
                out.append(f"(?![/])[{'^' if negate else ''}{chars}]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))


def _matches(path: str, pattern: str, *, across: bool = False) -> bool:
    """``path`` is ``pattern``'s match or below one (a directory covers what is below it).
    ``across``: ``*`` may also match across ``/``, as deny patterns did before ``*`` stopped at
    ``/`` (a deny never covers less than it did)."""
    folder = pattern.rstrip("/") or "/"
    glob = _glob(folder)
    here = path
    while True:
        if glob.fullmatch(here):
            return True
        if here == "/":
            break
        here = posixpath.dirname(here)
    return across and any(c in folder for c in "*?[") and (
        fnmatch.fnmatchcase(path, folder) or fnmatch.fnmatchcase(path, folder + "/*"))


@dataclass(frozen=True)
class PathDecision:
    allowed: bool
    reason: str = ""
    rule: str = ""


def check_path(path: str, command: str, policy: EditPolicy) -> PathDecision:
    """Whether ``command`` may work on ``path`` (absolute, normalized) under ``policy``."""
    if policy.read_only and command in WRITES:
        return PathDecision(False, f"this host's edit policy is read-only: {command} is refused; only view is "
                                   "allowed", "read_only")
    for pattern in policy.deny:
        if _matches(path, pattern, across=True):
            return PathDecision(False, f"{path} is denied by this host's edit policy (deny: {pattern})",
                                f"deny:{pattern}")
    if policy.allow is not None and not any(_matches(path, p) for p in policy.allow):
        allowed = ", ".join(policy.allow) or "nothing"
        return PathDecision(False, f"{path} is outside the paths this host's edit policy allows ({allowed})",
                            "allow")
    return PathDecision(True)
