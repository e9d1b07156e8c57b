"""The bytes of an audit record, the keyed chain and the audit key.

A record's line is its compact JSON, then ``"hash"``: the SHA-256 of the line's bytes before it,
then, in a keyed chain, ``"mac"``: the HMAC-SHA256, under the audit key, of the line's bytes
before it. Checks are made on the bytes as written, never on a re-serialization, and a record with
a key repeated is refused (JSON parsers disagree on which one wins). An anchor and a head (see
:mod:`remote_bash.audit`) carry a MAC over their own bytes, each with a context prefix of its own so
that neither can pass for a record's, nor one for the other.

Keys are 32 random bytes, kept as 64 hex digits in the OS keyring or in a 0600 file. This module
never logs or prints a key, and never overwrites a key file.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._paths import config_dir, open_private, private_dir, write_private
from ._plain import Record
from .errors import AuditError, UnsafePath

__all__ = [
    "Anchor",
    "anchor_bytes",
    "anchor_problem",
    "check_key",
    "head_bytes",
    "keyring_marker",
    "load_key_file",
    "mark_keyring_key",
    "new_key",
    "parse_anchor",
    "parse_head",
    "parse_key",
    "seal",
    "sha256",
    "strict",
    "unseal",
    "write_key_file",
]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()



_SEALED = re.compile(rb'(\{.*),"hash":"([0-9a-f]{64})"(?:,"mac":"([0-9a-f]{64})")?\}', re.DOTALL)
_ANCHOR_MAC = re.compile(rb'(\{.*),"mac":"([0-9a-f]{64})"\}', re.DOTALL)
_ANCHOR_CONTEXT = b"remote-bash audit anchor\n"  # an anchor's MAC can never pass for a record's
_HEAD_CONTEXT = b"remote-bash audit head\n"  # nor a head's for an anchor's
_KEY_BYTES = 32


def _mac(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def seal(body: bytes, key: bytes | None, digest: str | None = None) -> bytes:
    """The line of a record: its compact JSON ``body``, then ``hash`` of those bytes (``digest``,
    when the caller has it already), then with a key ``mac``, the HMAC-SHA256 of everything before
    it (the line with ``hash``)."""
    line = body[:-1] + b',"hash":"' + (digest or sha256(body)).encode() + b'"}'
    if key is None:
        return line
    return line[:-1] + b',"mac":"' + _mac(key, line).encode() + b'"}'


def strict(data: bytes) -> dict[str, Any] | None:
    """A JSON object with no key repeated at any depth (parsers disagree on which one wins)."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(items)
        if len(out) != len(items):
            raise ValueError("repeated key")
        return out

    try:
        value = json.loads(data, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def unseal(line: bytes, key: bytes | None) -> tuple[dict[str, Any] | None, str, list[str]]:
    """Check a line's bytes as written: the record, the state of its MAC
    (``ok``/``bad``/``absent``/``unchecked``) and what is wrong."""
    sealed = _SEALED.fullmatch(line)
    body = strict(sealed[1] + b"}") if sealed else None
    if sealed is None or not body or "hash" in body or "mac" in body:
        # Not as the log writes it: parse the whole line only to say how it is wrong.
        record = strict(line)
        if record is None:
            return None, "absent", ["not a valid JSON record (garbled, truncated, or a key repeated)"]
        return record, "absent", ["hash (and mac) are not the last fields of the line, as the log writes them"]
    # The line is the body with these fields appended, so this is what parsing the line gives.
    record = {**body, "hash": sealed[2].decode()} | ({"mac": sealed[3].decode()} if sealed[3] else {})
    reasons = []
    if sha256(sealed[1] + b"}") != sealed[2].decode():
        reasons.append("the record was altered (the hash of its bytes does not match)")
    if sealed[3] is None:
        return record, "absent", reasons
    if key is None:
        return record, "unchecked", reasons
    signed = sealed[1] + b',"hash":"' + sealed[2] + b'"}'
    if hmac.compare_digest(_mac(key, signed).encode(), sealed[3]):
        return record, "ok", reasons
    reasons.append("its MAC does not match: it was written or rewritten without the audit key")
    return record, "bad", reasons


class Anchor(Record):
    seq: int
    digest: str
    mac: str
    """``ok``, ``bad``, ``absent`` or ``unchecked`` (no key to check it with)."""


def anchor_problem(anchor: Anchor, key: bytes | None) -> str | None:
    """Why the anchor cannot vouch that the missing records were pruned by rotation, if it cannot."""
    if anchor.mac == "ok":
        return None
    if anchor.mac == "bad":
        return "the anchor's MAC does not match: it was not written with this audit key (planted or edited)"
    if anchor.mac == "unchecked":
        return "the anchor carries a MAC but no audit key was found to check it"
    return (
        "the anchor that says rotation pruned them carries no MAC: anyone who can delete records can "
        "write one, so pruning cannot be told from deletion"
        + ("" if key is not None else " (keep an audit key, `remote-bash audit key init`, to tell them apart)")
    )


def parse_anchor(raw: bytes, host: str, key: bytes | None) -> Anchor:
    """Read an anchor file's bytes; ValueError when it is damaged. ``host`` as written in records."""
    return _parse_mark(raw, host, key, _ANCHOR_CONTEXT, "anchor")


def anchor_bytes(host: str, seq: int, digest: str, pruned: str, ts: str, key: bytes | None) -> bytes:
    """The anchor file's content (without its newline), with a MAC when there is a key."""
    return _mark_bytes({"host": host, "seq": seq, "hash": digest, "pruned": pruned, "ts": ts}, key, _ANCHOR_CONTEXT)


def parse_head(raw: bytes, host: str, key: bytes | None) -> Anchor:
    """Read a head file's bytes (the last record written: its seq and line hash); ValueError when
    it is damaged."""
    return _parse_mark(raw, host, key, _HEAD_CONTEXT, "head")


def head_bytes(host: str, seq: int, digest: str, key: bytes | None) -> bytes:
    """The head file's content (without its newline), with a MAC when there is a key."""
    return _mark_bytes({"host": host, "seq": seq, "hash": digest}, key, _HEAD_CONTEXT)


def _mark_bytes(payload: dict[str, Any], key: bytes | None, context: bytes) -> bytes:
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    if key is None:
        return data
    return data[:-1] + b',"mac":"' + _mac(key, context + data).encode() + b'"}'


def _parse_mark(raw: bytes, host: str, key: bytes | None, context: bytes, what: str) -> Anchor:
    raw = raw.rstrip(b"\n")
    signed = _ANCHOR_MAC.fullmatch(raw)
    data = strict(signed[1] + b"}" if signed else raw)
    if data is None:
        raise ValueError(f"the {what} file is damaged (not a JSON object)")
    seq, digest = data.get("seq"), data.get("hash")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0 or not isinstance(digest, str):
        raise ValueError(f"the {what} file is damaged (seq or hash missing)")
    if signed is None:
        mac = "absent"
    elif key is None:
        mac = "unchecked"
    else:
        good = hmac.compare_digest(_mac(key, context + signed[1] + b"}").encode(), signed[2])
        mac = "ok" if good and data.get("host") == host else "bad"
    return Anchor(seq, digest, mac)


# -- audit keys -------------------------------------------------------------------------------


def check_key(key: bytes) -> None:
    if not isinstance(key, bytes) or len(key) < 16:
        raise ValueError("an audit key must be at least 16 bytes")


def new_key() -> str:
    """A fresh audit key, as the 64 hex digits kept in a key file or the keyring."""
    return os.urandom(_KEY_BYTES).hex()


def parse_key(text: str, where: str) -> bytes:
    """The key written as hex digits (surrounding white space ignored); ValueError naming ``where``."""
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        key = b""
    if len(key) < 16:
        raise ValueError(f"{where} does not hold an audit key (at least 32 hex digits, as "
                         "`remote-bash audit key init` writes)")
    return key


def load_key_file(path: Path) -> bytes:
    """Read an audit key file; AuditError when it is missing, readable by others, or not a key."""
    what = "the audit key"
    try:
        private_dir(path.parent, what=what, create=False)
        fd = open_private(path, os.O_RDONLY, what=what)
        try:
            if os.fstat(fd).st_mode & 0o077:
                raise AuditError(f"the audit key file {path} is readable or writable by others; "
                                 f"run 'chmod 600 {path}'")
            text = os.read(fd, 4096).decode("ascii", "replace")
        finally:
            os.close(fd)
        return parse_key(text, f"the audit key file {path}")
    except (UnsafePath, ValueError) as exc:
        raise AuditError(str(exc)) from exc
    except OSError as exc:
        raise AuditError(f"cannot read the audit key file {path}: {exc.strerror or exc}") from exc


def keyring_marker(env: Mapping[str, str] | None = None) -> Path:
    """The file saying the audit key is kept in the OS keyring (it holds no secret), so that only
    then is the keyring read. Deleting it cannot turn keying off: a keyed log then refuses writes."""
    return config_dir(env) / "audit-key-in-keyring"


def mark_keyring_key(env: Mapping[str, str] | None = None) -> Path:
    """Write :func:`keyring_marker` (owner-only, in a checked directory)."""
    path = keyring_marker(env)
    private_dir(path.parent, what="the audit key marker")
    text = "The audit key is kept in the OS keyring (service remote-bash, user audit:key).\n"
    write_private(path, text.encode(), what="the audit key marker")
    return path


def write_key_file(path: Path) -> None:
    """Create ``path`` (0600, in a checked directory) holding a fresh key; never overwrites one."""
    path = Path(os.path.abspath(path.expanduser()))
    private_dir(path.parent, what="the audit key")
    try:
        fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, what="the audit key")
    except FileExistsError as exc:
        raise AuditError(f"{path} already exists; an audit key is never overwritten, since verifying the "
                         "records it keyed needs it (choose another file)") from exc
    try:
        os.write(fd, (new_key() + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
