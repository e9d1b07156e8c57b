"""The audit log, on real files: permissions, the hash chain, tampering, rotation,
concurrent writers in threads, tasks and processes, and a full disk."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import re
import stat
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remote_bash.audit import AuditLog, VerifyReport, default_audit_dir, format_records
from remote_bash.errors import AuditError
from remote_bash.models import KillReport
from remote_bash.redact import Redactor

from .waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
HOST = "web-1"


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def fill(log: AuditLog, count: int, host: str = HOST) -> list[dict[str, object]]:
    return [
        log.write(host, "exec.start", session_id="s1", tool_use_id=f"toolu_{i}", command=f"echo {i}")
        for i in range(count)
    ]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- where and how records are written ---------------------------------------------------


def test_default_audit_dir() -> None:
    assert default_audit_dir({"REMOTE_BASH_AUDIT_DIR": "/srv/audit", "HOME": "/h"}) == Path("/srv/audit")
    assert default_audit_dir({"XDG_STATE_HOME": "/state", "HOME": "/h"}) == Path("/state/remote-bash/audit")
    assert default_audit_dir({"XDG_STATE_HOME": "relative", "HOME": "/h"}) == Path(
        "/h/.local/state/remote-bash/audit"
    )
    assert default_audit_dir({"HOME": "/h"}) == Path("/h/.local/state/remote-bash/audit")


def test_file_names_are_safe_and_distinct(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    hosts = ["web-1", "db.internal", "user@host:22", "a/b", "../etc", ".hidden", "..", "a b", "a%20b"]
    hosts += ["日本", "x" * 300, "x" * 300 + "y", "\udcff"]
    names = [log.path(h).name for h in hosts]
    assert len(set(names)) == len(hosts)
    assert log.path("web-1").name == "web-1.jsonl"
    assert log.path("user@host:22").name == "user%40host%3A22.jsonl"
    for name in names:
        assert re.fullmatch(r"[A-Za-z0-9_%~-][A-Za-z0-9._%~-]*\.jsonl", name), name
        assert len(name) < 255
    with pytest.raises(ValueError, match="non-empty"):
        log.path("")


def test_owner_only_permissions_under_umask_000(tmp_path: Path, umask_000: None) -> None:
    directory = tmp_path / "state" / "remote-bash" / "audit"
    log = AuditLog(directory, max_bytes=400, keep=1)
    fill(log, 6)
    for created in (tmp_path / "state", tmp_path / "state" / "remote-bash", directory):
        assert mode(created) == 0o700, created
    files = sorted(directory.iterdir())
    assert {p.name for p in files} == {
        "web-1.jsonl",
        "web-1.jsonl.1",
        "web-1.jsonl.lock",
        "web-1.jsonl.anchor",
        "web-1.jsonl.head",
    }
    for path in files:
        assert mode(path) == 0o600, path


def test_records_chain_and_hash(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    returned = [
        log.write(HOST, "session.start", session_id="s1", address="10.0.0.5:22", user="deploy"),
        log.write(HOST, "exec.start", session_id="s1", tool_use_id="toolu_1", command="ls -la"),
        log.write(HOST, "exec.end", session_id="s1", tool_use_id="toolu_1", exit_code=0, duration=0.25),
    ]
    raw = lines(log.path(HOST))
    assert [json.loads(line) for line in raw] == returned
    previous = "0" * 64
    for seq, (line, record) in enumerate(zip(raw, returned, strict=True), 1):
        assert list(record)[:5] == ["ts", "event", "host", "seq", "prev"]
        assert list(record)[-1] == "hash"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", record["ts"])
        assert record["seq"] == seq
        assert record["prev"] == previous
        without_hash = line.rstrip(b"\n").replace(f',"hash":"{record["hash"]}"'.encode(), b"")
        assert hashlib.sha256(without_hash).hexdigest() == record["hash"]
        previous = hashlib.sha256(line.rstrip(b"\n")).hexdigest()
    assert log.verify(HOST) == VerifyReport(ok=True, records=3, files=[log.path(HOST)], problems=[],
                                            last_seq=3, last_ts=returned[-1]["ts"])


def test_field_values(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    record = log.write(
        HOST,
        "exec.kill",
        command="echo héllo 日本 \udcff",
        kill=KillReport(signals=["INT", "KILL"], survivors=0),
        path=Path("/tmp/x"),
        when=datetime(2024, 5, 1, tzinfo=UTC),
        args=("a", 1),
    )
    assert record["command"] == "echo héllo 日本 \ufffd"
    assert record["kill"] == {"signals": ["INT", "KILL"], "survivors": 0, "shell_replaced": False, "cgroup": False,
                              "unchecked": None}
    assert record["path"] == "/tmp/x"
    assert record["args"] == ["a", 1]
    assert "héllo 日本".encode() in log.path(HOST).read_bytes()
    assert log.verify(HOST).ok


def test_rejects_bad_events_and_fields(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    with pytest.raises(ValueError, match=r"unknown audit event 'exec\.begin'"):
        log.write(HOST, "exec.begin")
    with pytest.raises(ValueError, match="seq"):
        log.write(HOST, "exec.start", seq=5)
    with pytest.raises(TypeError, match="'blob'"):
        log.write(HOST, "exec.start", blob=b"bytes")
    with pytest.raises(ValueError, match="JSON cannot hold"):
        log.write(HOST, "exec.end", duration=float("nan"))
    assert not log.path(HOST).exists()


def test_redaction_of_command_output_and_error(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, redactor=Redactor(literals=["s3cr3t-value"]))
    log.write(HOST, "exec.start", command="mysql --password=hunter2 -e 'select 1'")
    log.write(
        HOST,
        "exec.end",
        output_head="AKIAIOSFODNN7EXAMPLE\n",
        output_tail="token=abc123",
        error="auth failed for s3cr3t-value",
        operator="password=kept-as-is",
    )
    text = log.path(HOST).read_text()
    for secret in ("hunter2", "AKIAIOSFODNN7EXAMPLE", "abc123", "s3cr3t-value"):
        assert secret not in text
    records = log.read(HOST)
    assert records[0]["command"] == "mysql --password=[REDACTED:password] -e 'select 1'"
    assert records[1]["output_head"] == "[REDACTED:aws-access-key-id]\n"
    assert records[1]["error"] == "auth failed for [REDACTED:known-secret]"
    assert records[1]["operator"] == "password=kept-as-is"
    assert log.verify(HOST).ok


async def test_awrite(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    record = await log.awrite(HOST, "session.start", session_id="s1")
    assert record["seq"] == 1
    assert await asyncio.to_thread(log.read, HOST) == [record]


async def test_awrite_never_writes_past_a_held_lock_nor_blocks_the_event_loop(tmp_path: Path) -> None:
    """``awrite`` writes at once only when no lock is held: a writer holding the log's lock (another
    process, another log object) makes it wait in a worker thread, and the chain stays whole."""
    import fcntl

    log = AuditLog(tmp_path)
    await log.awrite(HOST, "session.start", session_id="s1")  # directory checked: the next can go at once
    lock = log.path(HOST).with_name(f"{log.path(HOST).name}.lock")
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        pending = asyncio.ensure_future(log.awrite(HOST, "exec.start", command="true", session_id="s1"))
        for _ in range(20):  # turns of the event loop: it runs on while the write waits
            await asyncio.sleep(0)
        assert not pending.done()
        assert len(log.path(HOST).read_bytes().splitlines()) == 1
    finally:
        os.close(fd)  # releases the lock
    record = await pending
    assert record["seq"] == 2
    assert log.verify(HOST).ok
    assert await log.awrite(HOST, "exec.end", exit_code=0, session_id="s1") == log.read(HOST)[-1]


def test_two_logs_on_one_directory_keep_one_chain(tmp_path: Path) -> None:
    first, second = AuditLog(tmp_path), AuditLog(tmp_path)
    for i in range(10):
        (first if i % 3 else second).write(HOST, "exec.start", n=i)
    assert [r["seq"] for r in first.read(HOST)] == list(range(1, 11))
    assert first.verify(HOST).ok


# -- tampering ---------------------------------------------------------------------------


def edit_command(raw: list[bytes]) -> list[bytes]:
    raw[2] = raw[2].replace(b"echo 2", b"echo X")
    return raw


def edit_and_rehash(raw: list[bytes]) -> list[bytes]:
    record = json.loads(raw[2])
    record["command"] = "rm -rf /"
    del record["hash"]
    body = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    record["hash"] = hashlib.sha256(body.encode()).hexdigest()
    raw[2] = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    return raw


TAMPERS: dict[str, tuple[Callable[[list[bytes]], list[bytes]], str]] = {
    "edit a command": (edit_command, r":3: seq 3: the record was altered"),
    "edit and recompute its hash": (edit_and_rehash, r":4: seq 4: prev does not match"),
    "delete a middle line": (lambda raw: raw[:3] + raw[4:], r":4: seq 5: seq 5 where 4 was expected"),
    "insert a line": (lambda raw: [*raw[:5], raw[1], *raw[5:]], r":6: seq 2: seq 2 where 6 was expected"),
    "reorder two lines": (lambda raw: [*raw[:3], raw[4], raw[3], *raw[5:]], r":4: seq 5: seq 5 where 4"),
    "edit the last record": (
        lambda raw: [*raw[:-1], raw[-1].replace(b'"s1"', b'"s2"')],
        r":8: seq 8: the record was altered",
    ),
    "delete the first line": (lambda raw: raw[1:], r":1: seq 2: the chain starts at seq 2, not at seq 1"),
    "truncate the last line": (
        lambda raw: [*raw[:-1], raw[-1][:40]],
        r":8: seq \?: truncated line.*not a valid JSON",
    ),
    "garble a line": (
        lambda raw: [*raw[:4], b"\x00\xffgarbage\n", *raw[5:]],
        r":5: seq \?: not a valid JSON record",
    ),
    "rewrite a record with other key order and spacing": (
        lambda raw: [*raw[:2], json.dumps(dict(reversed(json.loads(raw[2]).items())), indent=None).encode()
                     + b"\n", *raw[3:]],
        r":3: seq 3: hash \(and mac\) are not the last fields",
    ),
    "rewrite a record with spaces only": (
        lambda raw: [*raw[:2], raw[2].replace(b'{"ts":', b'{ "ts" : ', 1), *raw[3:]],
        r":3: seq 3: the record was altered \(the hash of its bytes does not match\)",
    ),
    "repeat a key": (
        lambda raw: [*raw[:2], raw[2].replace(b'{"ts"', b'{"command":"ls","ts"', 1), *raw[3:]],
        r":3: seq \?: not a valid JSON record \(garbled, truncated, or a key repeated\)",
    ),
}


@pytest.mark.parametrize("kind", list(TAMPERS))
def test_tampering_is_detected(tmp_path: Path, kind: str) -> None:
    log = AuditLog(tmp_path)
    fill(log, 8)
    assert log.verify(HOST).ok
    tamper, expected = TAMPERS[kind]
    path = log.path(HOST)
    path.write_bytes(b"".join(tamper(lines(path))))
    report = log.verify(HOST)
    assert not report.ok
    assert any(re.search(re.escape(str(path)) + expected, p) for p in report.problems), report.problems


def test_damaged_last_line_stops_writes(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    fill(log, 3)
    path = log.path(HOST)
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(AuditError) as info:
        AuditLog(tmp_path).write(HOST, "exec.start", command="ls")
    assert str(path) in str(info.value)
    assert "not run" in str(info.value)
    assert info.value.host == HOST


def test_unwritable_directory_raises_audit_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    log = AuditLog(blocker / "audit")
    with pytest.raises(AuditError) as info:
        log.write(HOST, "exec.start", command="ls")
    message = str(info.value)
    assert message.startswith(f"{HOST}: ")
    assert f"refusing to use {blocker} for the audit log: it is not a directory" in message
    assert "the command was not run because it could not be audited" in message


# -- rotation ----------------------------------------------------------------------------


def test_rotation_keeps_one_chain(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, max_bytes=1000)
    written = fill(log, 30)
    files = log.files(HOST)
    assert len(files) > 3
    assert files[-1] == log.path(HOST)
    assert all(p.stat().st_size <= 1000 for p in files)
    assert log.read(HOST) == written
    report = log.verify(HOST)
    assert report.ok, report.problems
    assert report.records == 30
    assert report.files == files
    # The first record of each newer file points at the last line of the file before it.
    for older, newer in itertools.pairwise(files):
        last = lines(older)[-1].rstrip(b"\n")
        assert json.loads(lines(newer)[0])["prev"] == hashlib.sha256(last).hexdigest()


def test_rotation_prunes_beyond_keep_and_anchors_the_chain(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, max_bytes=700, keep=3)
    fill(log, 40)
    assert [p.name for p in log.files(HOST)] == [
        "web-1.jsonl.3",
        "web-1.jsonl.2",
        "web-1.jsonl.1",
        "web-1.jsonl",
    ]
    anchor = json.loads((tmp_path / "web-1.jsonl.anchor").read_text())
    records = log.read(HOST)
    assert records[0]["seq"] == anchor["seq"] + 1
    assert records[0]["prev"] == anchor["hash"]
    assert [r["seq"] for r in records] == list(range(anchor["seq"] + 1, 41))
    # Without a key, the anchor could have been written by whoever deleted the head: no verdict of intact.
    report = log.verify(HOST)
    assert not report.ok
    assert any("anyone who can delete records can write one" in p for p in report.problems), report.problems


@pytest.mark.parametrize(
    ("which", "expected"), [("middle", "missing rotated file"), ("oldest", "chain starts at")]
)
def test_deleted_rotated_file_is_detected(tmp_path: Path, which: str, expected: str) -> None:
    log = AuditLog(tmp_path, max_bytes=700)
    fill(log, 12)
    files = log.files(HOST)
    assert len(files) >= 4
    (files[1] if which == "middle" else files[0]).unlink()
    report = log.verify(HOST)
    assert not report.ok
    assert any(expected in p for p in report.problems), report.problems


# -- reading and showing -----------------------------------------------------------------


def test_read_filters(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    log.write(HOST, "session.start", session_id="a")
    log.write(HOST, "exec.start", session_id="a", tool_use_id="t1", command="ls")
    middle = log.write(HOST, "exec.start", session_id="b", tool_use_id="t2", command="pwd")
    log.write(HOST, "exec.end", session_id="b", tool_use_id="t2", exit_code=0)
    assert [r["seq"] for r in log.read(HOST, session_id="b")] == [3, 4]
    assert [r["seq"] for r in log.read(HOST, tool_use_id="t1")] == [2]
    ts = datetime.fromisoformat(middle["ts"])
    assert [r["seq"] for r in log.read(HOST, since=ts)] == [3, 4]
    assert [r["seq"] for r in log.read(HOST, until=ts)] == [1, 2, 3]
    naive = ts.replace(tzinfo=None)
    assert [r["seq"] for r in log.read(HOST, since=naive, until=naive)] == [3]
    assert log.read(HOST, since=ts + timedelta(days=1)) == []
    assert log.read("never-seen") == []
    assert not (tmp_path / "never-seen.jsonl.lock").exists()


def test_format_records() -> None:
    records: list[dict[str, object]] = [
        {
            "ts": "2024-05-01T12:00:00.123456Z",
            "event": "exec.end",
            "session_id": "3f2a9c1e-aaaa",
            "tool_use_id": "toolu_01",
            "exit_code": 2,
            "duration": 1.5,
            "command": "printf '\\x1b]0;pwned\\x07'\necho " + "x" * 200,
        },
        {
            "ts": "2024-05-01T12:00:01.000000Z",
            "event": "policy.denied",
            "rule": "deny:rm",
            "command": "rm -rf /",
        },
        {
            "ts": "2024-05-01T12:00:02.000000Z",
            "event": "exec.end",
            "timed_out": True,
            "command": "sleep 99\x1b[2J",
        },
        {"ts": "2024-05-01T12:00:03.000000Z", "event": "connect.error", "error": "connection refused"},
    ]
    out = format_records(records)
    assert len(out) == 4
    assert out[0].startswith("2024-05-01 12:00:00.123  exec.end       3f2a9c1e  toolu_01")
    assert "exit=2 1.50s" in out[0]
    assert "\\n" in out[0]
    assert out[0].endswith("…")
    assert "rule=deny:rm" in out[1]
    assert "timeout" in out[2]
    assert "\\x1b[2J" in out[2]
    assert out[3].endswith("connection refused")
    for line in out:
        assert not any(ord(c) < 32 for c in line)


# -- concurrency and a full disk ---------------------------------------------------------

WRITER = """
import pathlib, sys, time
from remote_bash.audit import AuditLog
directory, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
go = pathlib.Path(directory, "go")
pathlib.Path(directory, "ready-" + name).touch()
deadline = time.monotonic() + 60
while not go.exists():  # the start line, polled with a bound: the parent may never give it
    assert time.monotonic() < deadline, "never told to start"
    time.sleep(0.005)
log = AuditLog(directory)
for i in range(count):
    log.write("shared", "exec.start", operator=name, n=i, command="x" * (i % 97))
"""


def child_env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }


def test_concurrent_processes_and_tasks(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)

    async def task(k: int) -> None:
        for i in range(50):
            await log.awrite("shared", "exec.end", operator=f"task{k}", n=i, output_head="y" * (i % 89))

    async def tasks() -> None:
        await asyncio.gather(*(task(k) for k in range(8)))

    command = [sys.executable, "-c", WRITER, str(tmp_path)]
    processes = [subprocess.Popen([*command, f"proc{k}", "200"], env=child_env()) for k in range(4)]
    try:
        wait_until(lambda: len(list(tmp_path.glob("ready-*"))) >= 4, within=30, what="all four writers to be ready",
                   show=lambda: sorted(p.name for p in tmp_path.glob("ready-*")))
        (tmp_path / "go").touch()  # all writers start together
        asyncio.run(tasks())
        assert [p.wait(timeout=60) for p in processes] == [0, 0, 0, 0]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()

    raw = lines(log.path("shared"))
    records = [json.loads(line) for line in raw]  # every line is one whole record
    assert [r["seq"] for r in records] == list(range(1, 1201))
    assert Counter(r["operator"] for r in records) == {
        **{f"proc{k}": 200 for k in range(4)},
        **{f"task{k}": 50 for k in range(8)},
    }
    for writer in {r["operator"] for r in records}:
        assert [r["n"] for r in records if r["operator"] == writer] == sorted(
            r["n"] for r in records if r["operator"] == writer
        )
    report = log.verify("shared")
    assert report.ok, report.problems[:5]
    assert report.records == 1200


FULL_DISK = """
import json, resource, signal, sys
from remote_bash.audit import AuditLog
from remote_bash.errors import AuditError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
log = AuditLog(sys.argv[1])
path = log.path("web-1")
log.write("web-1", "session.start", session_id="s1")
before = path.stat().st_size
log.write("web-1", "exec.start", session_id="s1", command="y" * 300)
size = path.stat().st_size
record = size - before
# Room for one more record and half of the next one, which is cut mid-line.
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (size + record + record // 2, hard))
written, errors = 0, []
for i in range(4):
    if i == 3:
        # No room at all: the write fails with EFBIG before a byte is written.
        resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size, hard))
    try:
        log.write("web-1", "exec.start", session_id="s1", command="y" * 300)
        written += 1
    except AuditError as exc:
        errors.append({"message": str(exc), "host": exc.host})
print(json.dumps({"written": written, "errors": errors}))
"""


def test_file_size_limit_mid_write_leaves_no_half_line(tmp_path: Path) -> None:
    child = [sys.executable, "-c", FULL_DISK, str(tmp_path)]
    done = subprocess.run(child, env=child_env(), capture_output=True, timeout=60, check=True)
    result = json.loads(done.stdout)
    assert result["written"] == 1
    assert len(result["errors"]) == 3
    path = tmp_path / "web-1.jsonl"
    short, efbig = result["errors"][0], result["errors"][-1]
    assert short["host"] == efbig["host"] == "web-1"
    assert re.search(r"only \d+ of \d+ bytes could be written", short["message"])
    assert "File too large (the file size limit, RLIMIT_FSIZE, was reached)" in efbig["message"]
    for error in result["errors"]:
        assert str(path) in error["message"]
        assert "the command was not run because it could not be audited" in error["message"]
    assert path.read_bytes().endswith(b"\n")
    log = AuditLog(tmp_path)
    report = log.verify("web-1")
    assert report.ok, report.problems
    assert report.records == 3
    # Once there is room again, the chain simply continues.
    assert log.write("web-1", "session.end", session_id="s1")["seq"] == 4
    assert log.verify("web-1").ok


@pytest.mark.parametrize("fresh", [False, True])
def test_a_head_that_cannot_be_written_takes_its_record_back_and_is_named(tmp_path: Path, fresh: bool) -> None:
    """The record and its head are one write: when the head cannot be written, the record goes too
    (an exec.start left alone reads as a call whose end was removed), and the error names the head."""
    log = AuditLog(tmp_path)
    log.write("web-1", "exec.start", command="first")
    before = (tmp_path / "web-1.jsonl").read_bytes()
    head = tmp_path / "web-1.jsonl.head"
    head.unlink()
    head.mkdir()  # what an immutable or otherwise unwritable head does to a write
    writer = AuditLog(tmp_path) if fresh else log
    with pytest.raises(AuditError) as err:
        writer.write("web-1", "exec.start", command="second")
    assert str(head) in str(err.value) and "was not run" in str(err.value), err.value
    assert (tmp_path / "web-1.jsonl").read_bytes() == before
    head.rmdir()
    log.write("web-1", "exec.start", command="third")
    assert [r["command"] for r in map(json.loads, (tmp_path / "web-1.jsonl").read_text().splitlines())] == [
        "first", "third"]
    assert log.verify("web-1").ok, log.verify("web-1")
