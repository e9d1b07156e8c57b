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
  starts. Only a keyed anchor (with a MAC) can vouch for that: an unkeyed one could have been
  written by whoever deleted the head, and does not verify. Nothing else is ever deleted.
* ``<host>.jsonl.lock``: the lock every writer takes (it is never renamed).
* ``<host>.jsonl.head``: the seq and line hash of the last record written (with a MAC in a
  keyed chain), rewritten after every record. A log whose end no longer holds that record lost
  records from its end: the next write records an ``audit.gap`` naming the seqs that are gone
  (the seq goes on from the head's, never reused), and :meth:`AuditLog.verify` fails.

A record is one JSON object on one line: ``ts`` (UTC, microseconds, ``Z``), ``event``,
``host``, ``seq`` (1, 2, 3, ... per host, across rotations), ``prev`` (SHA-256 of the
previous record's line, without its newline; 64 zeros for the first), the caller's
fields, then ``hash``: SHA-256 of the line's bytes before it, and in a keyed chain last
``mac``: HMAC-SHA256 of the line's bytes before it under the audit key (the format is in
:mod:`remote_bash._audit_chain`). So an edit of any record, the last one included, breaks its
own hash, a removed, inserted or reordered record breaks ``seq`` and ``prev``, and with a key an
edit recomputed without it breaks the MAC. :meth:`AuditLog.verify` checks the bytes as written.
Records removed from the end are seen through the head file, as long as it is there: deleted with
them, or put back from an older copy, it hides them (keyed, it cannot be forged).

Writers in several threads, tasks and processes may share a host's file: each record is
written under an exclusive ``flock`` on the lock file (and a thread lock), with a single
``os.write`` on an ``O_APPEND`` descriptor. A short write (disk full, file size limit) is
cut back with ``ftruncate`` before the error is raised, so no half line is left behind.
:meth:`AuditLog.awrite` writes in the event loop's own thread when that cannot block (both
locks free at once, no ``fsync``, the host's key and the directory already checked), else in a
worker thread.

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
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, date, datetime
from pathlib import Path, PurePath
from typing import Any

from remote_bash._audit_chain import (
    Anchor,
    anchor_bytes,
    anchor_problem,
    check_key,
    head_bytes,
    keyring_marker,
    load_key_file,
    mark_keyring_key,
    new_key,
    parse_anchor,
    parse_head,
    parse_key,
    seal,
    sha256,
    unseal,
    write_key_file,
)
from remote_bash._paths import UnsafePath, open_private, private_dir, state_dir
from remote_bash._plain import Record, factory
from remote_bash.errors import AuditError, RemoteBashError
from remote_bash.redact import Redactor

__all__ = [
    "EVENTS",
    "KEY_PLACES",
    "AuditLog",
    "VerifyReport",
    "default_audit_dir",
    "format_records",
    "keyring_marker",
    "load_key_file",
    "mark_keyring_key",
    "new_key",
    "parse_key",
    "write_key_file",
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
        "edit.start",
        "edit.end",
        "audit.gap",
    }
)
"""The events a record may carry."""

_RESERVED = ("ts", "event", "host", "seq", "prev", "hash", "mac")
_REDACTED_FIELDS = frozenset({"command", "output_head", "output_tail", "error", "diff"})
_GENESIS = "0" * 64
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_MAX_NAME = 200
_SURROGATES = re.compile("[\ud800-\udfff]")


def default_audit_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$REMOTE_BASH_AUDIT_DIR``, else ``audit`` in the state directory.

    That is ``$XDG_STATE_HOME/remote-bash/audit``; ``XDG_STATE_HOME`` defaults to
    ``~/.local/state`` and is ignored unless absolute, as the XDG spec says.
    """
    env = os.environ if env is None else env
    if explicit := env.get("REMOTE_BASH_AUDIT_DIR"):
        return Path(explicit).expanduser()
    return state_dir(env) / "audit"


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


KeySource = Callable[[str], bytes | None]
"""Gives the audit key of a host (``None``: that host's log is unkeyed)."""


KEY_PLACES = ("the host's audit_key_file in the inventory, or the OS keyring: `remote-bash audit key init` "
              "marks a key kept there as in use")
"""Where the audit key of a host is looked for, for messages."""


class VerifyReport(Record, frozen=False):
    """What :meth:`AuditLog.verify` found."""

    ok: bool
    """True when every record is intact and the chain has no gap."""
    records: int
    """Records read (garbled lines are not counted)."""
    files: list[Path] = factory(list)
    """The files checked, oldest first."""
    problems: list[str] = factory(list)
    """One line per problem, the first bad record first: ``file:line: seq N: what is wrong``."""
    keyed: bool = False
    """True when an audit key checked the MAC of the records: an edit recomputed without the key
    fails. False means only the hash chain was checked, which shows edits but not forgery by
    someone who can recompute the hashes."""
    last_seq: int | None = None
    """The seq of the newest record (records removed from the end are seen only while the head file is kept)."""
    last_ts: str | None = None
    """The time of the newest record."""
    notes: list[str] = factory(list)
    """What the check could not establish, in sentences."""
    needs_key: bool = False
    """True when records carry a MAC and no key was given to check them (``ok`` is then False)."""


class AuditLog:
    """Per-host append-only audit log in ``directory`` (see the module docstring).

    ``fsync`` forces every record to stable storage before :meth:`write` returns (slower;
    without it a record survives a crash of the process but not of the machine).
    ``redactor`` masks secrets in ``command``, ``output_head``, ``output_tail`` and
    ``error``. ``keep`` is how many rotated files are kept per host.

    ``key`` keys the chain: a secret (bytes, at least 16), or a function giving each host's key
    (``None`` for an unkeyed host; called once per host). Each record then carries ``mac``, an
    HMAC-SHA256 of its line, so that a chain edited and recomputed without the key fails
    :meth:`verify`. A log whose last record carries a MAC is never continued without one.
    """

    def __init__(
        self,
        directory: Path | str,
        *,
        fsync: bool = False,
        max_bytes: int = 50 * 2**20,
        redactor: Redactor | None = None,
        keep: int = 20,
        key: bytes | KeySource | None = None,
    ) -> None:
        if max_bytes < 1 or keep < 1:
            raise ValueError("max_bytes and keep must be positive")
        if isinstance(key, bytes):
            check_key(key)
        self.directory = Path(directory)
        self.fsync = fsync
        self.max_bytes = max_bytes
        self.redactor = redactor
        self.keep = keep
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._key = key
        self._keys: dict[str, bytes | None] = {}
        self._dir_ready = False
        # host -> (st_dev, st_ino, st_size, seq, hash, keyed) of the current file after our last
        # write, so the common case does not read the file back.
        self._last: dict[str, tuple[int, int, int, int, str, bool]] = {}
        self._paths: dict[str, tuple[Path, Path]] = {}
        """host -> its current file and its lock file (both names never change)."""

    def key_for(self, host: str) -> bytes | None:
        """The audit key of ``host``, or ``None`` (raises AuditError when the key cannot be loaded)."""
        if host in self._keys:
            return self._keys[host]
        key = self._key
        if callable(key):
            try:
                key = key(host)
            except AuditError:
                raise
            except RemoteBashError as exc:
                raise AuditError(f"cannot load the audit key: {exc.message}", host=host) from exc
            except ValueError as exc:
                raise AuditError(f"cannot load the audit key: {exc}", host=host) from exc
            if key is not None:
                check_key(key)
        self._keys[host] = key
        return key

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
        return self._write(host, event, fields, wait=True)

    def _write(self, host: str, event: str, fields: Mapping[str, Any], *, wait: bool) -> dict[str, Any]:
        """:meth:`write`; without ``wait``, raises _WouldBlock before anything is written when a
        lock is held."""
        if event not in EVENTS:
            raise ValueError(f"unknown audit event {event!r}; expected one of {', '.join(sorted(EVENTS))}")
        if clash := sorted(set(fields) & set(_RESERVED)):
            raise ValueError(f"audit fields {', '.join(clash)} are set by the log itself")
        paths = self._paths.get(host)
        if paths is None:
            path = self.path(host)
            paths = self._paths[host] = (path, path.with_name(f"{path.name}.lock"))
        path, lock = paths
        # Plain ASCII text, numbers and None are what most fields hold: they go as they are.
        extra: dict[str, Any] = {
            str(key): value if value is None or type(value) is int or (type(value) is str and value.isascii())
            or (type(value) is float and math.isfinite(value)) else _plain(value, key)
            for key, value in fields.items()
        }
        if self.redactor is not None:
            for name in _REDACTED_FIELDS & extra.keys():
                if isinstance(extra[name], str):
                    extra[name] = self.redactor.redact(extra[name])
        key = self.key_for(host)
        thread_lock = self._thread_lock(host)
        if not thread_lock.acquire(blocking=wait):
            raise _WouldBlock
        try:
            if not self._dir_ready:
                private_dir(self.directory, what="the audit log")
                self._dir_ready = True
            with _flocked(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB, create=True):
                return self._append(host, event, path, extra, key)
        except (AuditError, _WouldBlock):
            raise
        except UnsafePath as exc:
            raise AuditError(f"{exc.message}; the command was not run because it could not be audited",
                             host=host) from exc
        except BlockingIOError as exc:
            if not wait and exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                raise _WouldBlock from exc
            self._dir_ready = False
            raise _audit_error(host, path, exc) from exc
        except OSError as exc:
            self._dir_ready = False  # the directory may have gone: check it again next time
            raise _audit_error(host, path, exc) from exc
        finally:
            thread_lock.release()

    async def awrite(self, host: str, event: str, /, **fields: Any) -> dict[str, Any]:
        """:meth:`write`, for callers in async code: at once when nothing can make it wait (both
        locks free, no ``fsync``, the host's key loaded and the directory checked: a few system
        calls on the page cache, cheaper than a worker thread's round trip), else in a worker
        thread."""
        if not self.fsync and self._dir_ready and (host in self._keys or not callable(self._key)):
            try:
                return self._write(host, event, fields, wait=False)
            except _WouldBlock:
                pass
        return await asyncio.to_thread(self.write, host, event, **fields)

    def _thread_lock(self, host: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(host, threading.Lock())

    def _append(
        self, host: str, event: str, path: Path, extra: dict[str, Any], key: bytes | None
    ) -> dict[str, Any]:
        fd = _open_log(path)
        try:
            stat = os.fstat(fd)
            cached = self._last.get(host)
            mine = cached is not None and cached[:3] == (stat.st_dev, stat.st_ino, stat.st_size)
            seq, prev, keyed = self._previous(host, path, fd, stat, key)
            if keyed and key is None:
                raise AuditError(
                    f"the audit log {path} is keyed (its last record carries a MAC) but no audit key was "
                    f"found, and a keyed log is never continued without one; make the key available ({KEY_PLACES}); "
                    "the command was not run because it could not be audited",
                    host=host,
                )
            name = host if type(host) is str and host.isascii() else _plain(host, "host")
            if not mine:
                # Written by another process since, or never by this one: the end must still be the
                # last record written, or records were removed from it.
                last = _read_head(_head_path(path), name, key)
                if last is not None and last.mac != "bad" and (
                        last.seq > seq or (last.seq == seq and last.digest != prev)):
                    # From the first seq whose record is gone (or, at the same seq, is not the one written).
                    lost = {"lost_from": seq + 1 if last.seq > seq else seq, "lost_to": last.seq,
                            "lost_hash": last.digest, "log_ends_at": seq}
                    fd, _record, prev = self._line(host, name, "audit.gap", path, fd, last.seq, prev, lost, key)
                    seq = last.seq + 1
            fd, record, _digest = self._line(host, name, event, path, fd, seq, prev, extra, key)
            return record
        finally:
            if fd >= 0:
                os.close(fd)

    def _line(self, host: str, name: str, event: str, path: Path, fd: int, seq: int, prev: str,
              extra: dict[str, Any], key: bytes | None) -> tuple[int, dict[str, Any], str]:
        """Write the record after ``seq``/``prev`` (rotating first when it would not fit), then the
        head; the descriptor of the current file (another one after a rotation), the record and
        its line's hash."""
        # Stamped under the lock, so time order and seq order agree.
        head = {"ts": _now(), "event": event, "host": name, "seq": seq + 1, "prev": prev}
        record = {**head, **extra}
        body = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        record["hash"] = digest = sha256(body)
        data = seal(body, key, digest)
        if key is not None:
            record["mac"] = data[-66:-2].decode()
        stat = os.fstat(fd)
        if stat.st_size > 0 and stat.st_size + len(data) + 1 > self.max_bytes:
            os.close(fd)
            fd = -1
            self._rotate(host, path, key)
            fd = _open_log(path)
            stat = os.fstat(fd)
        _write_line(fd, data + b"\n", stat.st_size, host, path)
        if self.fsync:
            os.fsync(fd)
        line_hash = sha256(data)
        try:
            _write_head(_head_path(path), host, head_bytes(name, seq + 1, line_hash, key), self.fsync)
        except _HeadUnchanged as exc:
            # Not written whole, so not written: the record goes too, and the log and its head agree
            # as before (an exec.start left behind would read as a call whose end was removed).
            raise AuditError(exc.message + _cut_back(fd, stat.st_size), host=host) from exc
        self._last[host] = (stat.st_dev, stat.st_ino, stat.st_size + len(data) + 1, seq + 1, line_hash,
                            key is not None)
        return fd, record, line_hash

    def _previous(self, host: str, path: Path, fd: int, stat: os.stat_result,
                  key: bytes | None = None) -> tuple[int, str, bool]:
        """The seq and line hash of the last record written for ``host``, and whether it was keyed
        (read from the file: under ``key``, if it carries a MAC; see _last_record)."""
        cached = self._last.get(host)
        if cached is not None and cached[:3] == (stat.st_dev, stat.st_ino, stat.st_size):
            return cached[3], cached[4], cached[5]
        if stat.st_size > 0:
            return _last_record(host, path, fd, stat.st_size, key)
        newest = _rotated(path, 1)
        if newest.exists():
            rfd = _open_read(newest)
            try:
                return _last_record(host, newest, rfd, os.fstat(rfd).st_size, key)
            finally:
                os.close(rfd)
        try:
            anchor = _read_anchor(_anchor_path(path), host, None)
        except ValueError as exc:
            raise AuditError(
                f"{_anchor_path(path)}: {exc}; the command was not run because it could not be audited",
                host=host,
            ) from exc
        if anchor is None:
            return 0, _GENESIS, False
        return anchor.seq, anchor.digest, anchor.mac != "absent"

    def _rotate(self, host: str, path: Path, key: bytes | None) -> None:
        numbers = sorted(self._rotated_numbers(path), reverse=True)
        for number in numbers:
            if number < self.keep:
                break
            # Oldest first, so the anchor ends up at the last record of the newest pruned file.
            old = _rotated(path, number)
            rfd = _open_read(old)
            try:
                seq, digest, _keyed = _last_record(host, old, rfd, os.fstat(rfd).st_size)
            finally:
                os.close(rfd)
            _write_anchor(_anchor_path(path), host, seq, digest, old.name, key)
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
        """Check the bytes of every record as written: its hash, its MAC when the log is keyed
        (see ``key``), and that seq and prev chain without a gap from seq 1 or a keyed anchor."""
        key = self.key_for(host)
        current = self.path(host)
        numbers = self._rotated_numbers(current)
        problems = [
            f"{_rotated(current, n)}: missing rotated file"
            for n in range(1, max(numbers, default=0))
            if n not in numbers
        ]
        notes: list[str] = []
        expected_seq: int | None = 1
        expected_prev = _GENESIS
        anchor_path = _anchor_path(current)
        try:
            anchor = _read_anchor(anchor_path, host, key)
        except ValueError as exc:
            problems.append(f"{anchor_path}: {exc}")
            anchor = None
        if anchor is not None:
            expected_seq, expected_prev = anchor.seq + 1, anchor.digest
            if why := anchor_problem(anchor, key):
                problems.append(f"{anchor_path}: records before seq {anchor.seq + 1} are gone, and {why}")
        count = keyed = unkeyed_prefix = unchecked = 0
        first = True
        last: dict[str, Any] | None = None
        last_line = b""
        calls = _Calls()
        for path, (lineno, raw), _record in self._records(host):
            reasons = []
            if not raw.endswith(b"\n"):
                reasons.append("truncated line (no newline at the end of the file)")
            line = raw[:-1] if raw.endswith(b"\n") else raw
            record, mac, seal_reasons = unseal(line, key)
            reasons += seal_reasons
            if record is None:
                expected_seq = None
            else:
                count += 1
                last = record
                last_line = line
                if record.get("event") == "audit.gap" and expected_seq is not None:
                    reasons.append(_gap(record))
                    if record.get("log_ends_at") == expected_seq - 1 and isinstance(record.get("seq"), int):
                        expected_seq = record["seq"]  # the gap is said once, not again as a seq mismatch
                reasons += _check_record(record, host, expected_seq, expected_prev, first)
                problems += calls.see(record, f"{path}:{lineno}")
                seq = record.get("seq")
                expected_seq = seq + 1 if isinstance(seq, int) and not isinstance(seq, bool) else None
                if mac == "ok":
                    keyed += 1
                elif mac == "unchecked":
                    unchecked += 1
                elif mac == "absent" and key is not None:
                    if keyed:
                        reasons.append("it carries no MAC although records before it do "
                                       "(the chain was rewritten from here without the key)")
                    else:
                        unkeyed_prefix += 1
            expected_prev = sha256(line)
            first = False
            if reasons:
                where = f"seq {record.get('seq')}" if record is not None else "seq ?"
                problems.append(f"{path}:{lineno}: {where}: {'; '.join(reasons)}")
        problems += _head_problems(_head_path(current), _plain(host, "host"), key, last, last_line)
        if key is not None and count and not keyed:
            problems.append(
                f"{current}: no record carries a MAC although an audit key is set: the log was written "
                "before the key existed, or rewritten by someone without it"
            )
        elif key is not None and unkeyed_prefix:
            notes.append(f"the first {unkeyed_prefix} record(s) were written before the key; "
                         "the keyed records after them vouch for them through the chain")
        if unchecked:
            # Without the key the chain proves nothing against someone who recomputes it, and the
            # MACs that would are unread: such a log is not called intact.
            problems.append(
                f"{current}: {unchecked} record(s) carry a MAC but no audit key was found to check them: "
                f"a keyed log is verified only with its key; make it available ({KEY_PLACES})"
            )
        return VerifyReport(
            ok=not problems,
            records=count,
            files=self.files(host),
            problems=problems,
            keyed=key is not None and keyed > 0,
            last_seq=last.get("seq") if last is not None else None,
            last_ts=str(last.get("ts")) if last is not None else None,
            notes=notes,
            needs_key=unchecked > 0,
        )

    def _records(self, host: str) -> Iterator[tuple[Path, tuple[int, bytes], dict[str, Any] | None]]:
        """Every line of ``host``'s files, with its record (``None`` when it does not parse)."""
        try:
            private_dir(self.directory, what="the audit log", create=False)
        except FileNotFoundError:
            return
        current = self.path(host)
        lock = current.with_name(f"{current.name}.lock")
        with _flocked(lock, fcntl.LOCK_SH, create=False):
            files = self.files(host)
            contents = []
            for path in files:
                try:
                    contents.append((path, _read_all(path)))
                except FileNotFoundError:
                    continue
        for path, data in contents:
            # Only "\n" ends a record (JSON escapes every other line break).
            raws = [part + b"\n" for part in data.split(b"\n")]
            raws[-1] = raws[-1][:-1]
            for lineno, raw in enumerate(raws, 1):
                if raw:
                    yield path, (lineno, raw), _parse(raw)


# -- helpers ------------------------------------------------------------------------------


def _now() -> str:
    """UTC with microseconds and a ``Z``: ``2026-01-02T03:04:05.000006Z``."""
    return datetime.now(UTC).isoformat(timespec="microseconds")[:-6] + "Z"


def _rotated(current: Path, number: int) -> Path:
    return current.with_name(f"{current.name}.{number}")


class _Calls:
    """Each session's call in flight, as the records tell it: a session that goes on (another
    call, its end) after an ``exec.start`` without that call's ``exec.end`` lost that record."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[str, Any, str]] = {}

    def see(self, record: Mapping[str, Any], where: str) -> list[str]:
        session, event = record.get("session_id"), record.get("event")
        if not isinstance(session, str) or event not in ("exec.start", "exec.end", "session.end"):
            return []
        if event == "exec.end":
            if self._open.get(session, ("",))[0] == record.get("call_id"):
                del self._open[session]
            return []
        problems = []
        if session in self._open:
            call, seq, start = self._open.pop(session)
            problems.append(f"{start}: seq {seq}: call {call} has no exec.end, although its session went on "
                            f"(seq {record.get('seq')}): the record of its end was not written, or was removed")
        if event == "exec.start" and isinstance(record.get("call_id"), str):
            self._open[session] = (record["call_id"], record.get("seq"), where)
        return problems


def _gap(record: Mapping[str, Any]) -> str:
    return (f"records seq {record.get('lost_from')} to {record.get('lost_to')} were removed from the end of the "
            f"log (it ended at seq {record.get('log_ends_at')} when this record was written, and its head "
            "file named a later one)")


def _head_problems(path: Path, name: str, key: bytes | None, last: Mapping[str, Any] | None,
                   last_line: bytes) -> list[str]:
    """What the head file (the last record written) says against the log's end."""
    try:
        head = parse_head(_read_all(path), name, key)
    except FileNotFoundError:
        return []
    except ValueError as exc:
        return [f"{path}: {exc}"]
    if head.mac == "bad":
        return [f"{path}: its MAC does not match: it was not written with this audit key (planted or edited)"]
    if head.mac == "unchecked":
        return []  # the records' MACs are unchecked too, and said so
    seq = last.get("seq") if last is not None else 0
    if not isinstance(seq, int) or head.seq < seq:
        return []  # an older writer that keeps no head went on after it
    if head.seq > seq:
        return [f"{path}: the last record written was seq {head.seq}, but the log ends at seq {seq}: "
                "records were removed from its end"]
    if last is not None and sha256(last_line) != head.digest:
        return [f"{path}: seq {seq} at the log's end is not the record written as seq {seq}: it was replaced"]
    return []


def _head_path(current: Path) -> Path:
    return current.with_name(f"{current.name}.head")


def _read_head(path: Path, name: str, key: bytes | None) -> Anchor | None:
    """The head file (see the module docstring), or None when there is none or it is damaged (a
    crash while it was rewritten): ``verify`` says which."""
    try:
        return parse_head(_read_all(path), name, key)
    except (FileNotFoundError, ValueError):
        return None


class _WouldBlock(Exception):
    """A lock of the log is held elsewhere: the write must wait for it (in a worker thread)."""


class _HeadUnchanged(AuditError):
    """The head could not be written, and was left as it was."""


def _write_head(path: Path, host: str, data: bytes, fsync: bool) -> None:
    """Rewrite the head in place (one write; a record is on disk before its head). Raises
    :class:`_HeadUnchanged` when it failed before changing the file."""
    try:
        fd = open_private(path, os.O_WRONLY | os.O_CREAT, what="the audit log")
    except UnsafePath as exc:
        raise _HeadUnchanged(f"{exc.message}; the command was not run because it could not be audited",
                             host=host) from exc
    except OSError as exc:
        raise _HeadUnchanged(_audit_error(host, path, exc).message, host=host) from exc
    try:
        line = data + b"\n"
        try:
            os.pwrite(fd, line, 0)
        except OSError as exc:
            raise _HeadUnchanged(_audit_error(host, path, exc).message, host=host) from exc
        os.ftruncate(fd, len(line))
        if fsync:
            os.fsync(fd)
    except OSError as exc:
        raise _audit_error(host, path, exc) from exc
    finally:
        os.close(fd)


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


def _open_log(path: Path) -> int:
    return open_private(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, what="the audit log")


def _open_read(path: Path) -> int:
    return open_private(path, os.O_RDONLY, what="the audit log")


def _read_all(path: Path) -> bytes:
    fd = _open_read(path)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _flocked(path: Path, operation: int, *, create: bool) -> Iterator[None]:
    """Hold ``flock(operation)`` on ``path``; without ``create``, a missing file means no lock."""
    try:
        flags = os.O_RDWR | os.O_CREAT if create else os.O_RDONLY
        fd = open_private(path, flags, what="the audit log")
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


def _last_record(host: str, path: Path, fd: int, size: int, key: bytes | None = None) -> tuple[int, str, bool]:
    """The seq and line hash of the last line of an open log file, and whether it carries a MAC
    (with ``key``: a MAC that key does not match is an AuditError, so that a log is never
    continued under another key)."""
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
    if record is None or not isinstance(seq, int):
        raise AuditError(
            f"the audit log {path} ends with a damaged record, so the chain cannot be continued; "
            "check it with `verify`, then move the damaged file aside; "
            "the command was not run because it could not be audited",
            host=host,
        )
    if key is not None and "mac" in record and unseal(line[:-1], key)[1] == "bad":
        raise AuditError(
            f"the last record of the audit log {path} carries a MAC that the audit key found does not match: "
            "it was written with another key (was the key replaced?), and a keyed log is never continued under "
            f"another one; put back the key it was written with ({KEY_PLACES}), or move the log aside to start a "
            "new one; the command was not run because it could not be audited",
            host=host,
        )
    return seq, sha256(line[:-1]), "mac" in record


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


def _read_anchor(path: Path, host: str, key: bytes | None) -> Anchor | None:
    """The seq and hash saved when the oldest rotated file was deleted, if ever."""
    try:
        raw = _read_all(path)
    except FileNotFoundError:
        return None
    return parse_anchor(raw, _plain(host, "host"), key)


def _write_anchor(path: Path, host: str, seq: int, digest: str, pruned: str, key: bytes | None) -> None:
    data = anchor_bytes(_plain(host, "host"), seq, digest, pruned, _now(), key)
    tmp = path.with_name(f"{path.name}.tmp")
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, what="the audit log")
    try:
        os.write(fd, data + b"\n")
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
        if str(record.get("event", "")).startswith("edit.") and record.get("path"):
            subject = f"{subject or 'edit'} {record['path']}"
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
    if record.get("event") == "edit.end":
        if record.get("error"):
            parts.insert(0, "error")
        elif isinstance(record.get("bytes_written"), int):
            parts.insert(0, f"wrote={record['bytes_written']}")
    return " ".join(parts) or "-"
