"""The audit log attacked by someone who can edit, delete and plant files but lacks the audit key:
delete the tail, delete the head and plant an anchor, edit and recompute the chain, strip the MACs,
reorder, truncate mid-line. Unkeyed, an edit recomputed by the editor passes and the report says
the chain is unkeyed; keyed, it fails and names the first bad record (file, line, seq)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from remote_bash.audit import KEY_PLACES, AuditLog, load_key_file, write_key_file
from remote_bash.errors import AuditError
from remote_bash.models import Host

pytestmark = pytest.mark.reliability

HOST = "web-1"
KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
CLI = [sys.executable, "-m", "remote_bash.cli"]


def fill(log: AuditLog, count: int) -> None:
    for i in range(count):
        log.write(HOST, "exec.start", session_id="s1", tool_use_id=f"toolu_{i}", command=f"echo {i}")


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def reseal(record: dict[str, Any], key: bytes | None) -> bytes:
    """What an editor writes: the record re-serialized the log's way, hash (and MAC, with a key) redone."""
    body = {k: v for k, v in record.items() if k not in ("hash", "mac")}
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    line = data[:-1] + b',"hash":"' + hashlib.sha256(data).hexdigest().encode() + b'"}'
    if key is not None:
        mac = hmac.new(key, line, hashlib.sha256).hexdigest().encode()
        line = line[:-1] + b',"mac":"' + mac + b'"}'
    return line + b"\n"


def recompute(raw: list[bytes], start: int, edit: Callable[[dict[str, Any]], None], key: bytes | None,
              *, strip_mac: bool = False) -> list[bytes]:
    """Edit record ``start``, then redo hash, MAC and prev of it and every record after it."""
    out = raw[:start]
    prev = hashlib.sha256(raw[start - 1].rstrip(b"\n")).hexdigest() if start else "0" * 64
    for index in range(start, len(raw)):
        record = json.loads(raw[index])
        if index == start:
            edit(record)
        record["prev"] = prev
        line = reseal(record, None if strip_mac else key)
        out.append(line)
        prev = hashlib.sha256(line.rstrip(b"\n")).hexdigest()
    return out


def tamper(log: AuditLog, change: Callable[[list[bytes]], list[bytes]], *, keep_head: bool = False) -> Path:
    """Rewrite the log's lines; the editor deletes the head file too (which cannot say anything
    then), unless ``keep_head``."""
    path = log.path(HOST)
    path.write_bytes(b"".join(change(lines(path))))
    if not keep_head:
        head(log).unlink()
    return path


def head(log: AuditLog) -> Path:
    return log.path(HOST).with_name(f"{HOST}.jsonl.head")


def evil(record: dict[str, Any]) -> None:
    record["command"] = "rm -rf /var/lib/important"


# -- keyed records --------------------------------------------------------------------------------


def test_keyed_records_carry_an_hmac_of_their_line(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, key=KEY)
    fill(log, 3)
    for line in lines(log.path(HOST)):
        record = json.loads(line)
        signed = line.rstrip(b"\n").replace(f',"mac":"{record["mac"]}"'.encode(), b"")
        assert record["mac"] == hmac.new(KEY, signed, hashlib.sha256).hexdigest()
        assert list(record)[-2:] == ["hash", "mac"]
    report = log.verify(HOST)
    assert (report.ok, report.keyed, report.records, report.problems) == (True, True, 3, [])
    # Read without the key: a log with MACs is not called intact, and the key is asked for.
    unkeyed = AuditLog(tmp_path).verify(HOST)
    assert (unkeyed.ok, unkeyed.keyed, unkeyed.needs_key) == (False, False, True)
    assert unkeyed.problems == [f"{log.path(HOST)}: 3 record(s) carry a MAC but no audit key was found to check "
                                f"them: a keyed log is verified only with its key; make it available ({KEY_PLACES})"]


def test_a_keyed_log_is_never_continued_without_the_key(tmp_path: Path) -> None:
    fill(AuditLog(tmp_path, key=KEY), 2)
    with pytest.raises(AuditError, match=r"is keyed .* no audit key was found.*the command was not run"):
        AuditLog(tmp_path).write(HOST, "exec.start", command="ls")
    assert len(lines(AuditLog(tmp_path).path(HOST))) == 2


def test_a_key_added_later_vouches_for_the_records_before_it(tmp_path: Path) -> None:
    fill(AuditLog(tmp_path), 2)
    fill(AuditLog(tmp_path, key=KEY), 2)
    report = AuditLog(tmp_path, key=KEY).verify(HOST)
    assert report.ok and report.keyed
    assert "the first 2 record(s) were written before the key" in report.notes[0]
    # The unkeyed head is pinned by the keyed records' prev: editing it, even recomputed, fails.
    log = AuditLog(tmp_path, key=KEY)
    path = tamper(log, lambda raw: [*recompute(raw[:2], 0, evil, None), *raw[2:]])
    report = log.verify(HOST)
    assert not report.ok
    assert report.problems[0].startswith(f"{path}:3: seq 3: prev does not match")


# -- the attacks ------------------------------------------------------------------------------------


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_edit_and_recompute_the_chain(tmp_path: Path, keyed: bool) -> None:
    log = AuditLog(tmp_path, key=KEY if keyed else None)
    fill(log, 6)
    # The editor lacks the key: with a keyed log, the best they can do is a MAC under a key of theirs.
    path = tamper(log, lambda raw: recompute(raw, 2, evil, OTHER_KEY if keyed else None))
    report = log.verify(HOST)
    if not keyed:
        # Without a key nothing tells a recomputed chain from the original: the report says so.
        assert (report.ok, report.keyed) == (True, False)
        return
    assert not report.ok
    assert report.problems[0] == (
        f"{path}:3: seq 3: its MAC does not match: it was written or rewritten without the audit key")
    assert len(report.problems) == 4  # every recomputed record after it too


def test_strip_the_macs_and_recompute(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, key=KEY)
    fill(log, 5)
    everything = tamper(log, lambda raw: recompute(raw, 0, evil, None, strip_mac=True))
    report = log.verify(HOST)
    assert not report.ok
    assert report.problems == [
        f"{everything}: no record carries a MAC although an audit key is set: the log was written before "
        "the key existed, or rewritten by someone without it"]

    log = AuditLog(tmp_path / "b", key=KEY)
    fill(log, 5)
    path = tamper(log, lambda raw: recompute(raw, 3, evil, None, strip_mac=True))
    report = log.verify(HOST)
    assert not report.ok
    assert report.problems[0] == (f"{path}:4: seq 4: it carries no MAC although records before it do "
                                  "(the chain was rewritten from here without the key)")


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_delete_the_head_and_plant_an_anchor(tmp_path: Path, keyed: bool) -> None:
    log = AuditLog(tmp_path, key=KEY if keyed else None)
    fill(log, 6)
    raw = lines(log.path(HOST))
    anchor = tmp_path / "web-1.jsonl.anchor"
    # What rotation would have written had it pruned records 1-3, hash of line 3 included.
    digest = hashlib.sha256(raw[2].rstrip(b"\n")).hexdigest()
    planted = {"host": HOST, "seq": 3, "hash": digest, "pruned": "web-1.jsonl.20", "ts": "2026-01-01T00:00:00Z"}
    data = json.dumps(planted, separators=(",", ":")).encode()
    if keyed:  # the best a planter can do: a MAC under a key of theirs
        mac = hmac.new(OTHER_KEY, b"remote-bash audit anchor\n" + data, hashlib.sha256).hexdigest()
        data = data[:-1] + f',"mac":"{mac}"}}'.encode()
    anchor.write_bytes(data + b"\n")
    log.path(HOST).write_bytes(b"".join(raw[3:]))
    report = log.verify(HOST)
    assert not report.ok
    assert report.problems[0].startswith(f"{anchor}: records before seq 4 are gone, and ")
    if keyed:
        assert "the anchor's MAC does not match" in report.problems[0]
    else:
        assert "anyone who can delete records can write one" in report.problems[0]


def test_rotation_with_a_key_anchors_a_chain_that_verifies(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, max_bytes=800, keep=2, key=KEY)
    fill(log, 30)
    assert (tmp_path / "web-1.jsonl.anchor").exists()
    report = log.verify(HOST)
    assert report.ok and report.keyed, report.problems
    assert report.last_seq == 30
    # The same anchor with the head it vouches for removed too: the chain no longer starts there.
    log.files(HOST)[0].unlink()
    assert not log.verify(HOST).ok


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_delete_the_tail(tmp_path: Path, keyed: bool) -> None:
    log = AuditLog(tmp_path, key=KEY if keyed else None)
    fill(log, 6)
    path = tamper(log, lambda raw: raw[:4], keep_head=True)
    report = log.verify(HOST)
    assert not report.ok and report.last_seq == 4
    assert report.problems == [f"{head(log)}: the last record written was seq 6, but the log ends at seq 4: "
                               "records were removed from its end"]
    # The next write says so in the log itself, and goes on from seq 6: no seq is used twice.
    fill(log, 1)
    gap, record = (json.loads(line) for line in lines(path)[-2:])
    assert (gap["event"], gap["seq"], gap["lost_from"], gap["lost_to"], gap["log_ends_at"]) == ("audit.gap", 7, 5, 6, 4)
    assert record["seq"] == 8
    report = log.verify(HOST)
    assert not report.ok and report.last_seq == 8
    assert report.problems == [f"{path}:5: seq 7: records seq 5 to 6 were removed from the end of the log (it ended "
                               "at seq 4 when this record was written, and its head file named a later one)"]
    # An emptied log too.
    path.write_bytes(b"")
    assert "but the log ends at seq 0" in log.verify(HOST).problems[0]


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_delete_the_tail_and_the_head(tmp_path: Path, keyed: bool) -> None:
    log = AuditLog(tmp_path, key=KEY if keyed else None)
    fill(log, 6)
    tamper(log, lambda raw: raw[:4])
    report = log.verify(HOST)
    # With the head file gone, whole records removed from the end leave a valid chain, keyed or not:
    # the report gives the newest seq to compare with a copy kept elsewhere (the README says so).
    assert report.ok
    assert report.last_seq == 4


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_replace_the_last_record(tmp_path: Path, keyed: bool) -> None:
    log = AuditLog(tmp_path, key=KEY if keyed else None)
    fill(log, 3)
    # The editor recomputes the last record (with a MAC under a key of theirs, the only one they have).
    path = tamper(log, lambda raw: recompute(raw, 2, evil, OTHER_KEY if keyed else None), keep_head=True)
    report = log.verify(HOST)
    assert not report.ok
    assert f"{head(log)}: seq 3 at the log's end is not the record written as seq 3: it was replaced" in report.problems
    # Then writes the head that matches it.
    last = lines(path)[-1].rstrip(b"\n")
    forged = {"host": HOST, "seq": 3, "hash": hashlib.sha256(last).hexdigest()}
    data = json.dumps(forged, separators=(",", ":")).encode()
    if keyed:
        mac = hmac.new(OTHER_KEY, b"remote-bash audit head\n" + data, hashlib.sha256).hexdigest().encode()
        data = data[:-1] + b',"mac":"' + mac + b'"}'
    head(log).write_bytes(data + b"\n")
    report = log.verify(HOST)
    if not keyed:
        assert report.ok and not report.keyed  # unkeyed: nothing tells a consistent forgery (said as UNKEYED)
        return
    assert not report.ok
    assert f"{head(log)}: its MAC does not match: it was not written with this audit key (planted or edited)" \
        in report.problems


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
@pytest.mark.parametrize("attack", ["reorder", "truncate mid-line"])
def test_reorder_and_truncate(tmp_path: Path, keyed: bool, attack: str) -> None:
    log = AuditLog(tmp_path, key=KEY if keyed else None)
    fill(log, 6)
    if attack == "reorder":
        path = tamper(log, lambda raw: [*raw[:2], raw[3], raw[2], *raw[4:]])
        expected = f"{path}:3: seq 4: seq 4 where 3 was expected"
    else:
        path = tamper(log, lambda raw: [*raw[:-1], raw[-1][: len(raw[-1]) // 2]])
        expected = f"{path}:6: seq ?: truncated line"
    report = log.verify(HOST)
    assert not report.ok
    assert report.problems[0].startswith(expected), report.problems


# -- key files --------------------------------------------------------------------------------------


def test_key_files(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        write_key_file(tmp_path / "keys" / "audit.key")
    finally:
        os.umask(old)
    path = tmp_path / "keys" / "audit.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    key = load_key_file(path)
    assert len(key) == 32
    with pytest.raises(AuditError, match="already exists; an audit key is never overwritten"):
        write_key_file(path)
    assert load_key_file(path) == key
    path.chmod(0o644)
    with pytest.raises(AuditError, match=r"readable or writable by others; run 'chmod 600"):
        load_key_file(path)
    path.chmod(0o600)
    path.write_text("not a key\n")
    with pytest.raises(AuditError, match="does not hold an audit key"):
        load_key_file(path)


# -- through the CLI --------------------------------------------------------------------------------


def cli_env(tmp_path: Path, inventory: dict[str, Any]) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump(inventory))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "REMOTE_BASH_", "XDG_", "PYTHON_KEYRING"))}
    env.update(HOME=str(home), XDG_STATE_HOME=str(home / ".state"), XDG_DATA_HOME=str(home / ".data"),
               REMOTE_BASH_INVENTORY=str(tmp_path / "hosts.yaml"), REMOTE_BASH_AUDIT_DIR=str(tmp_path / "audit"),
               PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring")
    return env


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def entry(host: Host, **extra: Any) -> dict[str, Any]:
    return {"hostname": host.hostname, "port": host.port, "user": host.user, "credential": "key",
            "identity_file": str(host.identity_file), "known_hosts": str(host.known_hosts), **extra}


def test_cli_unkeyed_verify_says_so(web1: Host, tmp_path: Path) -> None:
    env = cli_env(tmp_path, {"hosts": {"web-1": entry(web1)}})
    assert cli(env, "exec", "web-1", "--", "true").returncode == 0
    out = cli(env, "audit", "verify", "web-1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "intact" in out.stdout
    assert "UNKEYED chain: this shows edits, not forgery by someone who can recompute the hashes" in out.stdout
    assert "records removed from the end are seen only while the head file is kept" in out.stdout


def test_cli_keyring_key_keys_the_chain_and_catches_a_recomputed_edit(web1: Host, tmp_path: Path) -> None:
    env = cli_env(tmp_path, {"hosts": {"web-1": entry(web1)}})
    # The tests' keyring is keyrings.alt's plaintext file: refused unless the operator says so.
    refused = cli(env, "audit", "key", "init")
    assert refused.returncode != 0
    assert "does not encrypt" in refused.stderr or "unencrypted" in refused.stderr, refused.stderr
    made = cli(env, "audit", "key", "init", "--store-readable")
    assert made.returncode == 0, made.stderr
    assert "stored a new audit key in the keyring backend" in made.stdout
    assert "NOT encrypted" in made.stdout
    again = cli(env, "audit", "key", "init")
    assert again.returncode != 0
    assert "already kept in the OS keyring (commands use it); it is never replaced" in again.stderr
    for word in ("one", "two"):
        assert cli(env, "exec", "web-1", "--", f"echo {word}").returncode == 0
    path = tmp_path / "audit" / "web-1.jsonl"
    assert all("mac" in json.loads(line) for line in lines(path))
    out = cli(env, "audit", "verify", "web-1")
    assert out.returncode == 0, out.stdout
    assert "keyed chain: every record's HMAC-SHA256 was checked" in out.stdout

    # The marker that makes commands read the keyring removed: a keyed log is not continued unkeyed,
    # and verify still finds the key.
    marker = tmp_path / "home" / ".config" / "remote-bash" / "audit-key-in-keyring"
    marker.unlink()
    refused = cli(env, "exec", "web-1", "--", f"touch {tmp_path}/ran")
    assert refused.returncode != 0
    assert "is keyed (its last record carries a MAC) but no audit key was found" in refused.stderr
    assert not (tmp_path / "ran").exists()
    assert "keyed chain" in cli(env, "audit", "verify", "web-1").stdout
    assert cli(env, "audit", "key", "init").returncode != 0  # the key stays; the marker is back
    assert marker.exists()

    raw = lines(path)
    index = next(i for i, line in enumerate(raw) if b"echo two" in line)
    path.write_bytes(b"".join(recompute(raw, index, evil, OTHER_KEY)))
    out = cli(env, "audit", "verify", "web-1")
    assert out.returncode == 1
    seq = json.loads(raw[index])["seq"]
    assert out.stdout.splitlines()[0] == (
        f"{path}:{index + 1}: seq {seq}: its MAC does not match: it was written or rewritten without the audit key")
    assert "TAMPERED" in out.stdout


def test_cli_key_file_named_in_the_inventory(web1: Host, tmp_path: Path) -> None:
    key = tmp_path / "keys" / "audit.key"
    env = cli_env(tmp_path, {"defaults": {"audit_key_file": str(key)}, "hosts": {"web-1": entry(web1)}})
    made = cli(env, "audit", "key", "init", "--file", str(key))
    assert made.returncode == 0, made.stderr
    assert f"audit_key_file: {key}" in made.stdout
    assert cli(env, "exec", "web-1", "--", "true").returncode == 0
    record = json.loads(lines(tmp_path / "audit" / "web-1.jsonl")[-1])
    signed = lines(tmp_path / "audit" / "web-1.jsonl")[-1].rstrip(b"\n").replace(
        f',"mac":"{record["mac"]}"'.encode(), b"")
    assert record["mac"] == hmac.new(load_key_file(key), signed, hashlib.sha256).hexdigest()
    out = cli(env, "audit", "verify", "web-1")
    assert out.returncode == 0 and "keyed chain" in out.stdout, out.stdout + out.stderr
    # The key gone: nothing runs unaudited, and the log says why.
    key.unlink()
    out = cli(env, "exec", "web-1", "--", f"touch {tmp_path}/ran")
    assert out.returncode != 0
    assert f"cannot read the audit key file {key}" in out.stderr
    assert not (tmp_path / "ran").exists()


def test_cli_verify_of_a_keyed_log_without_its_key_fails_and_says_where_the_key_is_looked_for(
        web1: Host, tmp_path: Path) -> None:
    key = tmp_path / "keys" / "audit.key"
    env = cli_env(tmp_path, {"defaults": {"audit_key_file": str(key)}, "hosts": {"web-1": entry(web1)}})
    assert cli(env, "audit", "key", "init", "--file", str(key)).returncode == 0
    for word in ("one", "two"):
        assert cli(env, "exec", "web-1", "--", f"echo {word}").returncode == 0
    # The same log read with an inventory that names no key (and an empty keyring).
    cli_env(tmp_path, {"hosts": {"web-1": entry(web1)}})
    out = cli(env, "audit", "verify", "web-1")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "intact" not in out.stdout
    assert "NOT VERIFIED: the log is keyed and its audit key was not found" in out.stdout
    assert "no audit key was found to check them: a keyed log is verified only with its key" in out.stdout
    assert "audit_key_file in the inventory, or the OS keyring" in out.stdout
    assert "UNKEYED chain" not in out.stdout


def test_a_keyed_log_is_never_continued_under_another_key(tmp_path: Path) -> None:
    AuditLog(tmp_path, key=KEY).write(HOST, "exec.start", command="echo 1")
    other = AuditLog(tmp_path, key=OTHER_KEY)  # the key file replaced by a new one, say
    with pytest.raises(AuditError, match=r"written with another key .*the command was not run"):
        other.write(HOST, "exec.start", command="echo 2")
    assert len(lines(tmp_path / "web-1.jsonl")) == 1
    assert AuditLog(tmp_path, key=KEY).verify(HOST).ok
