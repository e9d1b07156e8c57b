"""Remote paths for the text editor: absolute-path checks and the per-host ``edit`` policy, pure.

This module must never touch a file or a connection: it decides on strings, before anything
is sent to the host.
"""

from __future__ import annotations

import fnmatch
import posixpath
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


def _matches(path: str, pattern: str) -> bool:
    folder = pattern.rstrip("/")
    return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, folder) or (
        path.startswith(folder + "/") if folder and not any(c in folder for c in "*?[") else
        fnmatch.fnmatchcase(path, folder + "/*"))


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
        if _matches(path, pattern):
            return PathDecision(False, f"{path} is denied by this host's edit policy (deny: {pattern})",
                                f"deny:{pattern}")
    if policy.allow is not None and not any(_matches(path, p) for p in policy.allow):
        allowed = ", ".join(policy.allow) or "nothing"
        return PathDecision(False, f"{path} is outside the paths this host's edit policy allows ({allowed})",
                            "allow")
    return PathDecision(True)
