"""The audit log: one append-only JSON Lines file per host, chained by SHA-256.

Every record says what was done to a host (a session opened, a command started or
ended, a refusal, ...). A command is only run once its ``exec.start`` record is on disk:
when a record cannot be written, :class:`~remote_bash.errors.AuditError` says so and the
caller must not run the command. This module never runs anything itself, never drops a
record silently, and never writes a secret the redactor recognises into the
``command``, ``output_head``, ``output_tail`` and ``error`` fields.

Layout, in ``directory``:

* ``<host>.jsonl``: the current file. The host name keeps ``[A-Za-z0-9._-]``; every
  other byte of its UTF-8 form (and a leading dot) is written ``%XX``, so two hosts never
  share a file. Directory 0700, files 0600, whatever the umask.
* ``<host>.jsonl.1`` ... ``.<keep>``: rotated files, ``.1`` the newest. A file is rotated
  when the next record would take it past ``max_bytes``. Beyond ``keep`` (20 by default)
  the oldest file is deleted, and the seq and hash of its last record are saved in
  ``<host>.jsonl.anchor`` so :meth:`AuditLog.verify` can still check where the kept chain
  starts. Nothing else is ever deleted.
* ``<host>.jsonl.lock``: the lock every writer takes (it is never renamed).

A record is one JSON object on one line: ``ts`` (UTC, microseconds, ``Z``), ``event``,
``host``, ``seq`` (1, 2, 3, ... per host, across rotations), ``prev`` (SHA-256 of the
previous record's line, without its newline; 64 zeros for the first), the caller's
fields, and last ``hash``: SHA-256 of the line as it would read without ``hash``. So an
edit of any record, the last one included, breaks its own hash, and a removed, inserted
or reordered record breaks ``seq`` and ``prev``.

Writers in several threads, tasks and processes may share a host's file: each record is
written under an exclusive ``flock`` on the lock file (and a thread lock), with a single
``os.write`` on an ``O_APPEND`` descriptor. A short write (disk full, file size limit) is
cut back with ``ftruncate`` before the error is raised, so no half line is left behind.

When a write would pass ``RLIMIT_FSIZE`` the kernel sends SIGXFSZ, which by default ends
the process. Programs using this module should ignore it
(``signal.signal(signal.SIGXFSZ, signal.SIG_IGN)``) so the write fails with EFBIG and
becomes an :class:`~remote_bash.errors.AuditError` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import json
import math
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path, PurePath
from typing import Any

from remote_bash.errors import AuditError
from remote_bash.redact import Redactor

__all__ = [
    "EVENTS",
    "AuditLog",
    "VerifyReport",
    "default_audit_dir",
    "format_records",
]

EVENTS = frozenset(
    {
        "approval.asked",
        "approval.answered",
        "session.start",
        "exec.start",
        "exec.end",
        "exec.kill",
        "session.end",
        "host.denied",
        "policy.denied",
        "connect.error",
    }
)
"""The events a record may carry."""

_RESERVED = ("ts", "event", "host", "seq", "prev", "hash")
_REDACTED_FIELDS = frozenset({"command", "output_head", "output_tail", "error"})
_GENESIS = "0" * 64
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_MAX_NAME = 200
_SURROGATES = re.compile("[\ud800-\udfff]")


def default_audit_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$REMOTE_BASH_AUDIT_DIR``, else ``$XDG_STATE_HOME/remote-bash/audit``.

    ``XDG_STATE_HOME`` defaults to ``~/.local/state`` (and is ignored unless absolute,
    as the XDG spec says).
    """
    env = os.environ if env is None else env
    if explicit := env.get("REMOTE_BASH_AUDIT_DIR"):
        return Path(explicit).expanduser()
    state = env.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        home = env.get("HOME") or str(Path.home())
        state = os.path.join(home, ".local", "state")
    return Path(state) / "remote-bash" / "audit"


def _file_name(host: str) -> str:
    """The file name of a host's log: readable, and different for every host."""
    out = []
    for index, char in enumerate(host):
        if char in _SAFE and not (index == 0 and char == "."):
            out.append(char)
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
    name = "".join(out)
    if len(name) > _MAX_NAME:
        # '~' never appears in an encoded name, so a shortened one cannot collide with one.
        digest = hashlib.sha256(host.encode("utf-8", "surrogatepass")).hexdigest()
        name = f"{name[: _MAX_NAME - 17]}~{digest[:16]}"
    return f"{name}.jsonl"


@dataclass
class VerifyReport:
    """What :meth:`AuditLog.verify` found."""

    ok: bool
    """True when every record is intact and the chain has no gap."""
    records: int
    """Records read (garbled lines are not counted)."""
    files: list[Path] = field(default_factory=list)
    """The files checked, oldest first."""
    problems: list[str] = field(default_factory=list)
    """One line per problem: ``file:line: what is wrong``."""


class AuditLog:
    """Per-host append-only audit log in ``directory`` (see the module docstring).

    ``fsync`` forces every record to stable storage before :meth:`write` returns (slower;
    without it a record survives a crash of the process but not of the machine).
    ``redactor`` masks secrets in ``command``, ``output_head``, ``output_tail`` and
    ``error``. ``keep`` is how many rotated files are kept per host.
    """

    def __init__(
        self,
        directory: Path | str,
        *,
        fsync: bool = False,
        max_bytes: int = 50 * 2**20,
        redactor: Redactor | None = None,
        keep: int = 20,
    ) -> None:
        if max_bytes < 1 or keep < 1:
            raise ValueError("max_bytes and keep must be positive")
        self.directory = Path(directory)
        self.fsync = fsync
        self.max_bytes = max_bytes
        self.redactor = redactor
        self.keep = keep
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        # host -> (st_dev, st_ino, st_size, seq, hash) of the current file after our last write,
        # so the common case does not read the file back.
        self._last: dict[str, tuple[int, int, int, int, str]] = {}

    # -- paths ------------------------------------------------------------------------------

    def path(self, host: str) -> Path:
        """The current file of ``host``."""
        if not host:
            raise ValueError("host must be a non-empty name")
        return self.directory / _file_name(host)

    def files(self, host: str) -> list[Path]:
        """The files holding ``host``'s records, oldest first (rotated ones, then the current)."""
        current = self.path(host)
        numbers = self._rotated_numbers(current)
        paths = [_rotated(current, n) for n in sorted(numbers, reverse=True)]
        return [*paths, current] if current.exists() else paths

    @staticmethod
    def _rotated_numbers(current: Path) -> list[int]:
        prefix = f"{current.name}."
        try:
            names = os.listdir(current.parent)
        except FileNotFoundError:
            return []
        return [int(n[len(prefix) :]) for n in names if n.startswith(prefix) and n[len(prefix) :].isdigit()]

    # -- writing ----------------------------------------------------------------------------

    def write(self, host: str, event: str, /, **fields: Any) -> dict[str, Any]:
        """Append one record for ``host`` and return it.

        Raises ``ValueError`` for an unknown event or a reserved field name, ``TypeError``
        for a value JSON cannot hold, and :class:`~remote_bash.errors.AuditError` when the
        record could not be written.
        """
        if event not in EVENTS:
            raise ValueError(f"unknown audit event {event!r}; expected one of {', '.join(sorted(EVENTS))}")
        if clash := sorted(set(fields) & set(_RESERVED)):
            raise ValueError(f"audit fields {', '.join(clash)} are set by the log itself")
        path = self.path(host)
        extra = {str(key): _plain(value, key) for key, value in fields.items()}
        if self.redactor is not None:
            for key in _REDACTED_FIELDS & extra.keys():
                if isinstance(extra[key], str):
                    extra[key] = self.redactor.redact(extra[key])
        with self._thread_lock(host):
            try:
                _make_dirs(self.directory)
                with _flocked(path.with_name(f"{path.name}.lock"), fcntl.LOCK_EX, create=True):
                    return self._append(host, event, path, extra)
            except AuditError:
                raise
            except OSError as exc:
                raise _audit_error(host, path, exc) from exc

    async def awrite(self, host: str, event: str, /, **fields: Any) -> dict[str, Any]:
        """:meth:`write` in a worker thread, for callers in async code."""
        return await asyncio.to_thread(self.write, host, event, **fields)

    def _thread_lock(self, host: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(host, threading.Lock())

    def _append(self, host: str, event: str, path: Path, extra: dict[str, Any]) -> dict[str, Any]:
        fd = _open_log(path)
        try:
            stat = os.fstat(fd)
            seq, prev = self._previous(host, path, fd, stat)
            # Stamped under the lock, so time order and seq order agree.
            head = {"ts": _now(), "event": event, "host": _plain(host, "host"), "seq": seq + 1, "prev": prev}
            record = {**head, **extra}
            body = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            record["hash"] = _sha256(body.encode())
            data = f'{body[:-1]},"hash":"{record["hash"]}"}}'.encode()
            if stat.st_size > 0 and stat.st_size + len(data) + 1 > self.max_bytes:
                os.close(fd)
                fd = -1
                self._rotate(host, path)
                fd = _open_log(path)
                stat = os.fstat(fd)
            _write_line(fd, data + b"\n", stat.st_size, host, path)
            if self.fsync:
                os.fsync(fd)
            self._last[host] = (
                stat.st_dev,
                stat.st_ino,
                stat.st_size + len(data) + 1,
                seq + 1,
                _sha256(data),
            )
            return record
        finally:
            if fd >= 0:
                os.close(fd)

    def _previous(self, host: str, path: Path, fd: int, stat: os.stat_result) -> tuple[int, str]:
        """The seq and line hash of the last record written for ``host``."""
        cached = self._last.get(host)
        if cached is not None and cached[:3] == (stat.st_dev, stat.st_ino, stat.st_size):
            return cached[3], cached[4]
        if stat.st_size > 0:
            return _last_record(host, path, fd, stat.st_size)
        newest = _rotated(path, 1)
        if newest.exists():
            rfd = os.open(newest, os.O_RDONLY | os.O_CLOEXEC)
            try:
                return _last_record(host, newest, rfd, os.fstat(rfd).st_size)
            finally:
                os.close(rfd)
        try:
            anchor = _read_anchor(_anchor_path(path))
        except ValueError as exc:
            raise AuditError(
                f"{_anchor_path(path)}: {exc}; the command was not run because it could not be audited",
                host=host,
            ) from exc
        return anchor if anchor is not None else (0, _GENESIS)

    def _rotate(self, host: str, path: Path) -> None:
        numbers = sorted(self._rotated_numbers(path), reverse=True)
        for number in numbers:
            if number < self.keep:
                break
            # Oldest first, so the anchor ends up at the last record of the newest pruned file.
            old = _rotated(path, number)
            rfd = os.open(old, os.O_RDONLY | os.O_CLOEXEC)
            try:
                seq, digest = _last_record(host, old, rfd, os.fstat(rfd).st_size)
            finally:
                os.close(rfd)
            _write_anchor(_anchor_path(path), seq, digest, old.name)
            os.unlink(old)
        for number in numbers:
            if number < self.keep:
                os.replace(_rotated(path, number), _rotated(path, number + 1))
        os.replace(path, _rotated(path, 1))
        if self.fsync:
            _fsync_dir(path.parent)

    # -- reading ----------------------------------------------------------------------------

    def read(
        self,
        host: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        session_id: str | None = None,
        tool_use_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """``host``'s records, oldest first, optionally filtered (``since <= ts <= until``).

        Naive datetimes are taken as UTC. Lines that do not parse are skipped
        (:meth:`verify` reports them).
        """
        since, until = _utc(since), _utc(until)
        out = []
        for _path, _line, record in self._records(host):
            if record is None:
                continue
            if session_id is not None and record.get("session_id") != session_id:
                continue
            if tool_use_id is not None and record.get("tool_use_id") != tool_use_id:
                continue
            if since is not None or until is not None:
                ts = _parse_ts(record.get("ts"))
                if ts is None or (since is not None and ts < since) or (until is not None and ts > until):
                    continue
            out.append(record)
        return out

    def verify(self, host: str) -> VerifyReport:
        """Check every record's hash, and that seq and prev chain without a gap."""
        current = self.path(host)
        numbers = self._rotated_numbers(current)
        problems = [
            f"{_rotated(current, n)}: missing rotated file"
            for n in range(1, max(numbers, default=0))
            if n not in numbers
        ]
        anchor_path = _anchor_path(current)
        try:
            anchor = _read_anchor(anchor_path)
        except ValueError as exc:
            problems.append(f"{anchor_path}: {exc}")
            anchor = None
        expected_seq: int | None = 1
        expected_prev = _GENESIS
        if anchor is not None:
            expected_seq, expected_prev = anchor[0] + 1, anchor[1]
        count = 0
        first = True
        for path, (lineno, raw), record in self._records(host):
            reasons = []
            if not raw.endswith(b"\n"):
                reasons.append("truncated line (no newline at the end of the file)")
            line = raw.rstrip(b"\n")
            if record is None:
                reasons.append("not a valid JSON record (garbled or truncated)")
                expected_seq = None
            else:
                count += 1
                reasons += _check_record(record, host, expected_seq, expected_prev, first)
                seq = record.get("seq")
                expected_seq = seq + 1 if isinstance(seq, int) else None
            expected_prev = _sha256(line)
            first = False
            if reasons:
                problems.append(f"{path}:{lineno}: {'; '.join(reasons)}")
        return VerifyReport(ok=not problems, records=count, files=self.files(host), problems=problems)

    def _records(self, host: str) -> Iterator[tuple[Path, tuple[int, bytes], dict[str, Any] | None]]:
        """Every line of ``host``'s files, with its record (``None`` when it does not parse)."""
        current = self.path(host)
        lock = current.with_name(f"{current.name}.lock")
        with _flocked(lock, fcntl.LOCK_SH, create=False):
            files = self.files(host)
            contents = []
            for path in files:
                try:
                    contents.append((path, path.read_bytes()))
                except FileNotFoundError:
                    continue
        for path, data in contents:
            # Only "\n" ends a record (JSON escapes every other line break).
            raws = [part + b"\n" for part in data.split(b"\n")]
            raws[-1] = raws[-1][:-1]
            for lineno, raw in enumerate(filter(None, raws), 1):
                yield path, (lineno, raw), _parse(raw)


# -- helpers ------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _rotated(current: Path, number: int) -> Path:
    return current.with_name(f"{current.name}.{number}")


def _anchor_path(current: Path) -> Path:
    return current.with_name(f"{current.name}.anchor")


def _plain(value: Any, name: str) -> Any:
    """``value`` as plain JSON data, with lone surrogates replaced so it encodes as UTF-8."""
    # Subclasses (enums, ...) become the plain type, so verify re-serialises them the same way.
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        value = str.__str__(value)
        return value if value.isascii() else _SURROGATES.sub("\ufffd", value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"audit field {name!r} is {value}, which JSON cannot hold")
        return float(value)
    if isinstance(value, Mapping):
        return {_plain(str(k), name): _plain(v, name) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, name) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, PurePath):
        return _plain(str(value), name)
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump(mode="json"), name)
    raise TypeError(f"audit field {name!r} holds a {type(value).__name__}, which is not JSON-serialisable")


def _make_dirs(directory: Path) -> None:
    """Create ``directory`` and missing parents as 0700 (mkdir's mode is cut by the umask)."""
    missing = []
    path = directory
    while not path.exists():
        missing.append(path)
        path = path.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        os.chmod(path, 0o700)


def _open_owner_only(path: Path, flags: int) -> int:
    """Open ``path``, creating it as 0600 whatever the umask."""
    try:
        return os.open(path, flags | os.O_CLOEXEC)
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return os.open(path, flags | os.O_CLOEXEC)
    os.fchmod(fd, 0o600)
    return fd


def _open_log(path: Path) -> int:
    return _open_owner_only(path, os.O_RDWR | os.O_APPEND)


@contextlib.contextmanager
def _flocked(path: Path, operation: int, *, create: bool) -> Iterator[None]:
    """Hold ``flock(operation)`` on ``path``; without ``create``, a missing file means no lock."""
    try:
        fd = _open_owner_only(path, os.O_RDWR) if create else os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        if create:
            raise
        yield
        return
    try:
        fcntl.flock(fd, operation)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


def _write_line(fd: int, data: bytes, size_before: int, host: str, path: Path) -> None:
    """One ``os.write`` of a whole line; on failure, cut the file back to ``size_before``."""
    try:
        written = os.write(fd, data)
    except OSError as exc:
        _cut_back(fd, size_before)
        raise _audit_error(host, path, exc) from exc
    if written != len(data):
        note = _cut_back(fd, size_before)
        short = OSError(errno.EIO, f"only {written} of {len(data)} bytes could be written{note}")
        raise _audit_error(host, path, short)


def _cut_back(fd: int, size: int) -> str:
    try:
        if os.fstat(fd).st_size != size:
            os.ftruncate(fd, size)
    except OSError as exc:
        return f", and the partial line could not be removed ({exc.strerror})"
    return ""


def _audit_error(host: str, path: Path, exc: OSError) -> AuditError:
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EFBIG:
        reason += " (the file size limit, RLIMIT_FSIZE, was reached)"
    return AuditError(
        f"cannot write the audit log {path}: {reason}; "
        "the command was not run because it could not be audited",
        host=host,
    )


def _last_record(host: str, path: Path, fd: int, size: int) -> tuple[int, str]:
    """The seq and line hash of the last line of an open log file."""
    block = 64 * 1024
    data = b""
    offset = size
    while True:
        start = max(0, offset - block)
        data = os.pread(fd, offset - start, start) + data
        offset = start
        cut = data.rfind(b"\n", 0, len(data) - 1)
        if cut >= 0 or offset == 0:
            break
        block *= 2
    line = data[cut + 1 :]
    record = _parse(line) if line.endswith(b"\n") else None
    seq = record.get("seq") if record is not None else None
    if not isinstance(seq, int):
        raise AuditError(
            f"the audit log {path} ends with a damaged record, so the chain cannot be continued; "
            "check it with `verify`, then move the damaged file aside; "
            "the command was not run because it could not be audited",
            host=host,
        )
    return seq, _sha256(line[:-1])


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _check_record(
    record: dict[str, Any], host: str, expected_seq: int | None, expected_prev: str, first: bool
) -> list[str]:
    reasons = []
    seq, prev, digest = record.get("seq"), record.get("prev"), record.get("hash")
    if not isinstance(seq, int) or not isinstance(prev, str) or not isinstance(digest, str):
        return ["seq, prev or hash is missing"]
    body = {k: v for k, v in record.items() if k != "hash"}
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if _sha256(text.encode()) != digest:
        reasons.append(f"record seq {seq} was altered (its hash does not match its content)")
    if first and (seq != expected_seq or prev != expected_prev):
        reasons.append(
            f"the chain starts at seq {seq}, not at seq {expected_seq}: "
            "earlier records or rotated files are missing"
        )
    elif not first:
        if expected_seq is not None and seq != expected_seq:
            reasons.append(
                f"seq {seq} where {expected_seq} was expected (records removed, inserted or moved)"
            )
        if prev != expected_prev:
            reasons.append(
                "prev does not match the line before (a record before it was altered, removed or moved)"
            )
    if record.get("host") != _plain(host, "host"):
        reasons.append(f"the record is for host {record.get('host')!r}")
    if record.get("event") not in EVENTS:
        reasons.append(f"unknown event {record.get('event')!r}")
    return reasons


def _read_anchor(path: Path) -> tuple[int, str] | None:
    """The seq and hash saved when the oldest rotated file was deleted, if ever."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ValueError(f"the anchor file is damaged ({exc})") from exc
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("seq"), int)
        or not isinstance(data.get("hash"), str)
    ):
        raise ValueError("the anchor file is damaged (seq or hash missing)")
    return data["seq"], data["hash"]


def _write_anchor(path: Path, seq: int, digest: str, pruned: str) -> None:
    tmp = path.with_name(f"{path.name}.tmp")
    fd = _open_owner_only(tmp, os.O_WRONLY | os.O_TRUNC)
    try:
        payload = {"seq": seq, "hash": digest, "pruned": pruned, "ts": _now()}
        os.write(fd, json.dumps(payload).encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _utc(moment: datetime | None) -> datetime | None:
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


def _parse_ts(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return _utc(datetime.fromisoformat(value))
    except ValueError:
        return None


# -- display ------------------------------------------------------------------------------

# C0/C1 controls and bidi overrides could move the cursor or reorder what a terminal shows.
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(32), *range(127, 160)]} | {9: "\\t", 10: "\\n", 13: "\\r"}
_CONTROL |= {c: f"\\u{c:04x}" for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]}


def _one_line(value: Any, limit: int) -> str:
    """Printable on one terminal line: control characters escaped, cut at ``limit``."""
    text = str(value).translate(_CONTROL)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def format_records(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """One readable line per record: time, event, session, tool_use_id, outcome, command."""
    lines = []
    for record in records:
        ts = str(record.get("ts", "?")).replace("T", " ").rstrip("Z")[:23]
        session = _one_line(str(record.get("session_id") or "-")[:8], 8)
        tool = _one_line(record.get("tool_use_id") or "-", 24)
        outcome = _outcome(record)
        subject = record.get("command")
        if subject is None:
            subject = record.get("error") or record.get("address") or ""
        text = _one_line(subject, 120)
        event = str(record.get("event", "?"))
        lines.append(f"{ts}  {event:<13}  {session:<8}  {tool:<24}  {outcome:<16}  {text}".rstrip())
    return lines


def _outcome(record: Mapping[str, Any]) -> str:
    parts = []
    if record.get("timed_out"):
        parts.append("timeout")
    elif record.get("exit_code") is not None:
        parts.append(f"exit={record['exit_code']}")
    elif record.get("event") == "exec.end":
        parts.append("exit=?")
    if isinstance(record.get("duration"), int | float):
        parts.append(f"{record['duration']:.2f}s")
    if record.get("rule"):
        parts.append(f"rule={_one_line(record['rule'], 24)}")
    return " ".join(parts) or "-"
