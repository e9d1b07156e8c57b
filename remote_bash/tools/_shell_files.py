"""The text editor's file operations for hosts without an SFTP subsystem: short POSIX ``sh``
scripts on exec channels of the session's own connection, file bytes on stdin and stdout.

Same contract as :class:`remote_bash._ssh.SftpFiles` (inspect, read, write, listing), same
atomic write: a temporary file beside the target (``mktemp``), then ``mv`` (or ``ln`` for a
file that must not exist yet). Paths travel as single-quoted words; nothing here runs in the
session's own shell, so its state (cwd, variables) is never touched.
"""

from __future__ import annotations

from remote_bash._ssh import FileInfo, SshConnection
from remote_bash.errors import RemoteFileError
from remote_bash.framing import shell_quote

__all__ = ["ShellFiles"]

# Exit statuses the scripts use for what the editor must tell apart.
_MISSING, _DENIED, _EXISTS, _NOT_DIR = 3, 4, 5, 6
_REASONS = {_MISSING: "missing", _DENIED: "denied", _EXISTS: "exists", _NOT_DIR: "not_dir"}
_INLINE_BYTES = 256 * 1024

_INSPECT = r"""p=$1 l=0
[ -L "$p" ] && l=1
r=$(readlink -f -- "$p" 2>/dev/null) && [ -n "$r" ] || r=$p
if [ ! -e "$r" ]; then printf 'missing %s\n%s' "$l" "$r"; exit 0; fi
s=$(stat -L -c '%f %s %u %g' -- "$r" 2>&1) || { printf '%s\n' "$s" >&2; exit 4; }
set -- "$@" $s
if [ -f "$r" ] && [ -r "$r" ] && [ "$4" -le "$2" ]; then
  printf 'found %s %s 1\n%s\0' "$l" "$s" "$r"; head -c "$(($2 + 1))" -- "$r"
else
  printf 'found %s %s 0\n%s\0' "$l" "$s" "$r"
fi
"""

_READ = r"""[ -r "$1" ] || { [ -e "$1" ] || exit 3; exit 4; }
head -c "$2" -- "$1"
"""

_WRITE = r"""target=$1 mode=$2 owner=$3 create=$4
dir=$(dirname -- "$target") base=$(basename -- "$target")
[ -d "$dir" ] || exit 6
t=$(mktemp "$dir/.$base.rb-XXXXXX" 2>/dev/null) || { echo "cannot create a temporary file in $dir" >&2; exit 4; }
trap 'rm -f -- "$t"' EXIT HUP INT TERM
cat > "$t" || exit 1
sync -- "$t" 2>/dev/null || :
kept=1
if [ -n "$owner" ]; then chown "$owner" "$t" 2>/dev/null || kept=0; fi
chmod "$mode" "$t" || exit 1
if [ "$create" = 1 ]; then
  ln -- "$t" "$target" 2>/dev/null || { [ -e "$target" ] && exit 5; echo "cannot create $target" >&2; exit 4; }
else
  mv -f -- "$t" "$target" || exit 4
fi
echo "ok $kept"
"""

_LIST = r"""cd -- "$1" 2>/dev/null || { [ -e "$1" ] || exit 3; exit 4; }
n=0
for a in *; do
  [ -e "$a" ] || [ -L "$a" ] || continue
  n=$((n+1)); [ "$n" -gt "$2" ] && exit 0
  if [ -d "$a" ] && [ -L "$a" ]; then
    printf 'd%s\0' "$a"
  elif [ -d "$a" ]; then
    printf 'd%s\0' "$a"
    for b in "$a"/*; do
      [ -e "$b" ] || [ -L "$b" ] || continue
      n=$((n+1)); [ "$n" -gt "$2" ] && exit 0
      if [ -d "$b" ]; then printf 'd%s\0' "$b"; else printf 'f%s\0' "$b"; fi
    done
  else
    printf 'f%s\0' "$a"
  fi
done
"""


def _script(body: str, *args: str) -> str:
    return f"sh -c {shell_quote(body)} sh " + " ".join(shell_quote(a) for a in args)


class ShellFiles:
    """File operations through ``sh`` scripts on exec channels."""

    def __init__(self, conn: SshConnection, *, timeout: float) -> None:
        self.host = conn.host
        self._conn = conn
        self._timeout = timeout
        self._held: tuple[str, bytes] | None = None

    async def _run(self, what: str, path: str, body: str, *args: str, stdin: bytes = b"") -> bytes:
        status, out, err = await self._conn.exec_bytes(_script(body, *args), stdin, timeout=self._timeout)
        if status == 0:
            return out
        said = err.decode("utf-8", "replace").strip().splitlines()
        detail = said[-1] if said else f"exit status {status}"
        raise RemoteFileError(f"{what} {path} failed: {detail}", host=self.host.name,
                              reason=_REASONS.get(status or 0, "failure"))

    async def inspect(self, path: str) -> FileInfo:
        # A small regular file comes with its content, kept for the read that follows: one
        # channel fewer per edit.
        self._held = None
        out = await self._run("looking at", path, _INSPECT, path, str(_INLINE_BYTES))
        first, _, rest = out.partition(b"\n")
        named, _, content = rest.partition(b"\0")
        head, resolved = first.decode(), named.decode("utf-8", "surrogateescape")
        words = head.split()
        link = len(words) > 1 and words[1] == "1"
        if not words or words[0] == "missing":
            return FileInfo(path=resolved or path, kind="missing", link=link)
        raw_mode, size, uid, gid = int(words[2], 16), int(words[3]), int(words[4]), int(words[5])
        if len(words) > 6 and words[6] == "1":
            self._held = (resolved, content)
        fmt = raw_mode & 0o170000
        kind = "file" if fmt == 0o100000 else "dir" if fmt == 0o040000 else "other"
        return FileInfo(path=resolved or path, kind=kind, size=size, mode=raw_mode & 0o7777, uid=uid, gid=gid,
                        link=link)

    async def read(self, path: str, limit: int) -> bytes:
        held, self._held = self._held, None
        if held is not None and held[0] == path and len(held[1]) <= limit:
            return held[1]
        return await self._run("reading", path, _READ, path, str(limit + 1))

    async def write(self, path: str, data: bytes, *, mode: int, owner: tuple[int, int] | None,
                    create: bool) -> bool:
        own = f"{owner[0]}:{owner[1]}" if owner is not None else ""
        out = await self._run("creating" if create else "replacing", path, _WRITE, path, f"{mode:o}", own,
                              "1" if create else "0", stdin=data)
        return out.strip().endswith(b"1")

    async def listing(self, path: str, *, depth: int, limit: int) -> list[tuple[str, bool]]:
        out = await self._run("listing", path, _LIST, path, str(limit))
        entries = []
        for item in out.split(b"\0"):
            if item:
                name = item[1:].decode("utf-8", "surrogateescape")
                if name.count("/") < depth:
                    entries.append((name, item[:1] == b"d"))
        return sorted(entries, key=lambda e: e[0].split("/"))
