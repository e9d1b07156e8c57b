"""Reliability: faults, load, hostile input and security, against real OpenSSH sshd on loopback.

Every test here is marked ``reliability`` (``pytest -m reliability`` runs them alone). The remote
side is local, so the tests look at remote processes directly: by a marker in their command line
(``processes_with``) and by the tag every process of a command carries in its environment
(``REMOTE_BASH_CALL=<call_id>``, the id of the command's ``exec.start`` audit record).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import resource
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from remote_bash import (
    BashTool,
    CommandResult,
    ConnectionLost,
    ConnectionRefused,
    Host,
    HostKeyChanged,
    HostNotAllowed,
    InventoryError,
    RemoteBashError,
    RemoteBashSession,
)
from remote_bash.access import Gate
from remote_bash.audit import AuditLog
from remote_bash.framing import clean_text, shell_quote
from remote_bash.inventory import MAX_FILE_BYTES, load_inventory
from remote_bash.redact import Redactor
from remote_bash.sandbox import SshdServer, generate_keypair
from remote_bash.tool import MAX_COMMAND_CHARS, format_result

from .sshd import TestHosts, processes_with
from .waiting import wait_for

pytestmark = pytest.mark.reliability

StartHost = Callable[..., Host]


# -- helpers ----------------------------------------------------------------------------------------


def marker() -> str:
    return f"rbrel{uuid.uuid4().hex[:10]}"


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie is dead: nothing here reaps orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def connection_pids(server: SshdServer) -> list[int]:
    """The sshd processes serving the connections of the listener ``server`` (not the shells)."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,comm="], capture_output=True, text=True,
                         check=True).stdout
    rows = [line.split(None, 2) for line in out.splitlines()]
    tree = {server.pid}
    for _ in range(5):
        tree |= {int(pid) for pid, ppid, _comm in rows if int(ppid) in tree}
    return [int(pid) for pid, _ppid, comm in rows
            if int(pid) in tree and int(pid) != server.pid and comm.startswith("sshd")]


def call_processes(call_id: str) -> list[int]:
    """Live processes whose environment carries the command's tag."""
    tag = f"REMOTE_BASH_CALL={call_id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if tag in environ.split(b"\0") and alive(int(entry)):
            found.append(int(entry))
    return found


def start_command(session: RemoteBashSession, command: str,
                  timeout: float = 30.0) -> tuple[asyncio.Task[CommandResult], list[str]]:
    """Run ``command`` in a task; the list collects the output streamed so far."""
    seen: list[str] = []
    return asyncio.create_task(session.run(command, timeout, on_output=seen.append)), seen


async def until_running(mark: str, user: str, seen: list[str] | None = None) -> None:
    """Wait until the process marked ``mark`` runs (and, for a chatty one, its ticks arrive)."""
    await wait_for(lambda: processes_with(mark, user), within=10, what=f"{mark} to start")
    if seen is not None:
        await wait_for(lambda: "tick" in "".join(seen), within=10, what="its output", show=lambda: seen)


def chatty(mark: str) -> str:
    """A command that keeps printing, run by a child bash whose command line holds ``mark``.

    The marker comes first: ``processes_with`` reads ``ps`` output, which is cut at 80 columns
    when ps has no terminal (as under pytest).
    """
    return f"bash -c ': {mark}; echo begun; while :; do echo tick; sleep 0.05; done'"


def exec_records(audit: AuditLog, host: str, command: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The exec.start record of ``command`` (there must be exactly one) and its exec.end, if any."""
    records = audit.read(host)
    starts = [r for r in records if r["event"] == "exec.start" and r["command"] == command]
    assert len(starts) == 1, f"{len(starts)} exec.start records for {command!r}"
    ends = [r for r in records if r["event"] == "exec.end" and r.get("call_id") == starts[0]["call_id"]]
    assert len(ends) <= 1
    return starts[0], ends[0] if ends else None


def assert_names_host(exc: RemoteBashError, host: Host) -> None:
    assert exc.host == host.name
    assert str(exc).startswith(f"{host.name}: "), str(exc)


async def assert_nothing_left(mark: str, call_id: str, user: str) -> None:
    """No process of the command is left on the host (a few seconds allowed for it to die)."""
    await wait_for(lambda: not processes_with(mark, user) and not call_processes(call_id), within=5,
                   what="the command's processes to end",
                   show=lambda: f"left behind: {processes_with(mark, user)} / tagged pids {call_processes(call_id)}")


def kill_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# -- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_host(hosts: TestHosts) -> Host:
    """One sshd for the tests that do not break their server."""
    return hosts.start(f"rel-shared-{uuid.uuid4().hex[:6]}")


@pytest.fixture
def audit(tmp_path: Path) -> AuditLog:
    return AuditLog(tmp_path / "audit")


# -- faults -----------------------------------------------------------------------------------------


async def test_sshd_serving_the_session_killed_mid_command(start_host: StartHost, hosts: TestHosts,
                                                           audit: AuditLog) -> None:
    host = start_host("kill")
    server = hosts.servers[host.name]
    async with RemoteBashSession(host, audit=audit, kill_grace=0.3) as session:
        mark = marker()
        task, seen = start_command(session, chatty(mark))
        await until_running(mark, hosts.user, seen)
        started = time.monotonic()
        kill_all(connection_pids(server), signal.SIGKILL)
        with pytest.raises(ConnectionLost) as err:
            await asyncio.wait_for(task, 15)
        elapsed = time.monotonic() - started
        assert elapsed < 5, f"the loss was reported after {elapsed:.1f} s"
        assert_names_host(err.value, host)
        assert "lost while the command ran" in str(err.value)
        assert "not re-run" in str(err.value)
        assert err.value.partial_output.startswith("begun\n")
        start, end = exec_records(audit, host.name, chatty(mark))
        assert end is not None
        assert "lost" in end["error"]
        await assert_nothing_left(mark, start["call_id"], hosts.user)
        assert (await asyncio.wait_for(session.run("echo next"), 15)).output == "next\n"


async def test_sshd_stopped_and_restarted_mid_command(start_host: StartHost, hosts: TestHosts,
                                                      audit: AuditLog) -> None:
    host = start_host("restart")
    server = hosts.servers[host.name]
    async with RemoteBashSession(host, audit=audit, kill_grace=0.3) as session:
        mark = marker()
        task, seen = start_command(session, chatty(mark))
        await until_running(mark, hosts.user, seen)
        pids = connection_pids(server)
        started = time.monotonic()
        server.stop(connections=True)
        # stop() signals the listener's process group, but sshd gives every connection a session
        # of its own (setsid), so they outlive it (test_sshd_stop_ends_the_connections_it_serves).
        # End them as a service manager stopping sshd would.
        kill_all(pids, signal.SIGTERM)
        with pytest.raises(ConnectionLost) as err:
            await asyncio.wait_for(task, 15)
        elapsed = time.monotonic() - started
        assert elapsed < 5, f"the loss was reported after {elapsed:.1f} s"
        assert_names_host(err.value, host)
        assert "not re-run" in str(err.value)
        start, _end = exec_records(audit, host.name, chatty(mark))
        await assert_nothing_left(mark, start["call_id"], hosts.user)

        # While sshd is down, a call fails at once and says why.
        started = time.monotonic()
        with pytest.raises(ConnectionRefused) as refused:
            await asyncio.wait_for(session.run("echo during"), 15)
        assert time.monotonic() - started < 5
        assert_names_host(refused.value, host)
        assert "refused" in str(refused.value)

        hosts.restart(host.name)
        result = await asyncio.wait_for(session.run("echo after the restart"), 15)
        assert result.output == "after the restart\n"
    events = [r["event"] for r in audit.read(host.name)]
    assert events.count("session.start") == 2
    assert "connect.error" in events


async def test_silent_connection_is_noticed_by_keepalive(start_host: StartHost, hosts: TestHosts,
                                                         audit: AuditLog) -> None:
    interval = 0.5
    host = start_host("silent", keepalive_interval=interval)
    server = hosts.servers[host.name]
    async with RemoteBashSession(host, audit=audit, kill_grace=0.3) as session:
        mark = marker()
        task, seen = start_command(session, chatty(mark))
        await until_running(mark, hosts.user, seen)
        # The processes serving this connection stop answering; the listener still accepts.
        pids = connection_pids(server)
        assert pids
        started = time.monotonic()
        kill_all(pids, signal.SIGSTOP)
        try:
            with pytest.raises(ConnectionLost) as err:
                await asyncio.wait_for(task, 15)
            elapsed = time.monotonic() - started
        finally:
            kill_all(pids, signal.SIGCONT)
        bound = interval * 3 + 2.5
        assert interval * 2 < elapsed < bound, f"noticed after {elapsed:.1f} s, expected {interval * 3} s"
        assert_names_host(err.value, host)
        assert "keepalive" in str(err.value)
        assert err.value.partial_output.startswith("begun\n")
        start, end = exec_records(audit, host.name, chatty(mark))
        assert end is not None
        assert "keepalive" in end["error"]
        await assert_nothing_left(mark, start["call_id"], hosts.user)
        assert (await asyncio.wait_for(session.run("echo next"), 15)).output == "next\n"


_AUDIT_FULL_SCRIPT = r"""
import asyncio, json, os, resource, signal, sys

# Set by the child itself, first thing: the limit must hold for this process only, and
# preexec_fn is unsafe in a parent that has threads (the audit log's workers, sshd log readers).
LIMIT = int(sys.argv[4])
resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

from remote_bash import AuditError, Host, RemoteBashSession
from remote_bash.audit import AuditLog


async def refused(session, command):
    try:
        await session.run(command)
    except AuditError as exc:
        return {"message": str(exc), "host": exc.host}
    return None


async def main() -> dict:
    host = Host.model_validate_json(sys.argv[1])
    audit_dir, marker = sys.argv[2], sys.argv[3]
    log = AuditLog(audit_dir)
    out = {}
    async with RemoteBashSession(host, audit=log, kill_grace=0.3) as session:
        out["first"] = (await session.run("echo first")).output
        # A record that does not fit in the room left: half written, then cut back.
        out["partial"] = await refused(session, f"touch {marker}.partial # {'x' * LIMIT}")
        # No room at all: the file is exactly at the limit (the soft one, so it can be raised again).
        resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(log.path(host.name)), LIMIT))
        out["full"] = await refused(session, f"touch {marker}.full")
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))
        out["after"] = (await session.run(f"touch {marker}.control && echo after")).output
    return out


print(json.dumps(asyncio.run(main())))
"""


def test_full_audit_disk_refuses_to_run_the_command(shared_host: Host, hosts: TestHosts,
                                                    tmp_path: Path) -> None:
    """The audit file cannot grow (RLIMIT_FSIZE in a child process): the command is not run."""
    audit_dir = tmp_path / "audit"
    home = Path(pwd.getpwnam(hosts.user).pw_dir)
    base = home / marker()
    partial, full, control = (base.with_name(f"{base.name}.{end}") for end in ("partial", "full", "control"))
    limit = 8192  # room for a few small records, not for one carrying an 8 KiB command
    try:
        child = subprocess.run(
            [sys.executable, "-c", _AUDIT_FULL_SCRIPT, shared_host.model_dump_json(), str(audit_dir),
             str(base), str(limit)],
            capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
            # The package under test, not whichever one is installed.
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
        )
        assert child.returncode == 0, child.stderr[-3000:]
        out = json.loads(child.stdout.strip().splitlines()[-1])
        assert out["first"] == "first\n"
        for what in ("partial", "full"):
            refusal = out[what]
            assert refusal is not None, f"{what}: the command ran although it could not be audited"
            assert refusal["host"] == shared_host.name
            assert refusal["message"].startswith(f"{shared_host.name}: cannot write the audit log")
            assert refusal["message"].endswith("the command was not run because it could not be audited")
        assert "bytes could be written" in out["partial"]["message"]
        assert "RLIMIT_FSIZE" in out["full"]["message"]
        assert not partial.exists(), "the refused command ran on the host"
        assert not full.exists(), "the refused command ran on the host"
        # Once there is room again the next command runs: the half-written record was cut back.
        assert out["after"] == "after\n"
        assert control.exists()
        log = AuditLog(audit_dir)
        report = log.verify(shared_host.name)
        assert report.ok, report.problems
        commands = [r["command"] for r in log.read(shared_host.name) if r["event"] == "exec.start"]
        assert commands == ["echo first", f"touch {control} && echo after"]
    finally:
        for path in (partial, full, control):
            path.unlink(missing_ok=True)


async def test_remote_shell_killed_while_idle(shared_host: Host, audit: AuditLog) -> None:
    async with RemoteBashSession(shared_host, audit=audit, kill_grace=0.3) as session:
        await session.run("export STATE=old")
        assert session.info is not None
        old = session.info.shell_pid
        os.kill(old, signal.SIGKILL)
        await wait_for(lambda: not alive(old), within=5, what="the shell to die")
        shell = session._shell
        assert shell is not None
        await wait_for(lambda: shell.closed.is_set() or shell.exited, within=10, what="sshd to report the shell's end")
        started = time.monotonic()
        result = await asyncio.wait_for(session.run('echo "state=${STATE-gone}"'), 15)
        assert time.monotonic() - started < 5
        # The dead shell is noticed before the command is sent: it runs in a fresh shell.
        assert result.output == "state=gone\n"
        assert result.ok
        assert not result.shell_lost
        assert session.info.shell_pid != old
    events = [r["event"] for r in audit.read(shared_host.name)]
    assert events.count("session.start") == 2


async def test_remote_shell_killed_while_a_command_runs(shared_host: Host, hosts: TestHosts,
                                                        audit: AuditLog) -> None:
    command = "echo begun; while :; do echo tick; sleep 0.05; done"
    async with RemoteBashSession(shared_host, audit=audit, kill_grace=0.3) as session:
        await session.run("export STATE=old")
        assert session.info is not None
        old = session.info.shell_pid
        task, seen = start_command(session, command)
        await wait_for(lambda: "tick" in "".join(seen), within=10, what="the command's output", show=lambda: seen)
        os.kill(old, signal.SIGKILL)
        result = await asyncio.wait_for(task, 15)
        assert result.duration < 5
        assert result.shell_lost
        assert not result.timed_out
        assert result.exit_code is None
        assert result.output.startswith("begun\n")
        text, is_error = format_result(result)
        assert is_error
        assert "the shell exited abnormally" in text
        assert "a new one will be started" in text
        start, end = exec_records(audit, shared_host.name, command)
        assert end is not None
        assert end["shell_lost"] is True
        assert end["exit_signal"] == "KILL"
        assert call_processes(start["call_id"]) == []
        after = await asyncio.wait_for(session.run('echo "state=${STATE-gone}"'), 15)
        assert after.output == "state=gone\n"
        assert session.info.shell_pid != old


async def test_remote_shell_killed_under_a_silent_command_ends_by_the_deadline(
        shared_host: Host, hosts: TestHosts, audit: AuditLog) -> None:
    """``sleep`` keeps the dead shell's output open, so the call only ends at its deadline, when
    the kill finds the tagged ``sleep``. Bounded, clear, and nothing is left behind."""
    mark = marker()
    command = f"echo begun; bash -c 'exec -a {mark} sleep 30'"
    async with RemoteBashSession(shared_host, audit=audit, kill_grace=0.3) as session:
        assert session.info is not None
        old = session.info.shell_pid
        task, _seen = start_command(session, command, timeout=3)
        await until_running(mark, hosts.user)
        os.kill(old, signal.SIGKILL)
        result = await asyncio.wait_for(task, 15)
        assert result.duration < 3 + 5
        assert result.shell_lost
        assert result.exit_code is None
        start, end = exec_records(audit, shared_host.name, command)
        assert end is not None
        assert end["exit_signal"] == "KILL"
        await assert_nothing_left(mark, start["call_id"], hosts.user)
        assert (await session.run("echo next")).output == "next\n"
        assert session.info.shell_pid != old


async def test_remote_shell_killed_under_a_silent_command_is_noticed_at_once(shared_host: Host,
                                                                             hosts: TestHosts) -> None:
    mark = marker()
    async with RemoteBashSession(shared_host, kill_grace=0.3) as session:
        assert session.info is not None
        task, _seen = start_command(session, f"echo begun; bash -c 'exec -a {mark} sleep 30'", timeout=8)
        await until_running(mark, hosts.user)
        killed = time.monotonic()
        os.kill(session.info.shell_pid, signal.SIGKILL)
        result = await asyncio.wait_for(task, 15)
        # Counted from the kill (the command's start may wait on a loaded machine); not noticed,
        # the call would end at its deadline, 8 s after it started.
        noticed = time.monotonic() - killed
        assert result.shell_lost
        assert noticed < 4 and result.duration < 8, f"the shell's death was noticed after {noticed:.1f} s"
        assert not result.timed_out


async def test_connection_loss_leaves_no_silent_command_running(start_host: StartHost,
                                                                hosts: TestHosts) -> None:
    host = start_host("orphan")
    server = hosts.servers[host.name]
    mark = marker()
    try:
        async with RemoteBashSession(host, kill_grace=0.3) as session:
            task, _seen = start_command(session, f"echo begun; bash -c 'exec -a {mark} sleep 30'")
            await until_running(mark, hosts.user)
            kill_all(connection_pids(server), signal.SIGKILL)
            with pytest.raises(ConnectionLost):
                await asyncio.wait_for(task, 15)
            assert (await asyncio.wait_for(session.run("echo next"), 15)).output == "next\n"
            await wait_for(lambda: not processes_with(mark, hosts.user), within=3, what="the orphan to be stopped",
                           show=lambda: processes_with(mark, hosts.user))
    finally:
        kill_all([int(line.split()[0]) for line in processes_with(mark, hosts.user)], signal.SIGKILL)


async def test_sshd_stop_ends_the_connections_it_serves(start_host: StartHost, hosts: TestHosts) -> None:
    host = start_host("stop")
    server = hosts.servers[host.name]
    session = RemoteBashSession(host)
    try:
        await session.run("true")
        pids = connection_pids(server)
        assert pids
        try:
            server.stop(connections=True)
            await wait_for(lambda: not any(alive(pid) for pid in pids), within=3, what="stop() to end the connections",
                           show=lambda: [p for p in pids if alive(p)])
        finally:
            kill_all(pids, signal.SIGTERM)
    finally:
        # Once the session has seen its connection go (a race with the close), close reconnects to
        # stop what the shell may have left and says it could not: the server is gone.
        with contextlib.suppress(ConnectionLost):
            await session.close()


# -- load -------------------------------------------------------------------------------------------

LOAD_HOSTS = 5
LOAD_SESSIONS = 50
LOAD_COMMANDS = 200
BIG_OUTPUT = 3_000_000


def _load_command(session: int, i: int) -> tuple[str, float | None]:
    """The i-th command of a session in the load test, and its timeout."""
    if i % 100 == 25:
        return f"sleep 5 # s{session}-{i}", 0.5
    if i % 100 == 60:
        big = f"head -c {BIG_OUTPUT} /dev/zero | tr '\\0' y"
        return f"echo s{session}-{i}; {big}; echo; echo e{session}-{i}", None
    return f"echo s{session}-{i}", None


async def _load_worker(session: RemoteBashSession, k: int) -> list[str]:
    """Run a session's commands; returns the problems seen."""
    problems: list[str] = []
    for i in range(LOAD_COMMANDS):
        command, timeout = _load_command(k, i)
        result = await session.run(command, timeout)
        if timeout is not None:
            if not result.timed_out or result.output != "":
                problems.append(f"{command}: {result!r}")
        elif i % 100 == 60:
            head, tail = f"s{k}-{i}\n", f"e{k}-{i}\n"
            if not (result.truncated and result.output.startswith(head) and result.output.endswith(tail)
                    and result.output_bytes == BIG_OUTPUT + len(head) + len(tail) + 1):
                problems.append(f"{command}: {result.output[:80]!r}...{result.output[-80:]!r}")
        elif result.output != f"s{k}-{i}\n" or result.exit_code != 0:
            problems.append(f"{command}: got {result.output!r}")
    return problems


async def test_many_sessions_many_commands(start_host: StartHost, tmp_path: Path) -> None:
    servers = [start_host(f"load{n}") for n in range(LOAD_HOSTS)]
    audit = AuditLog(tmp_path / "audit")
    sessions = [RemoteBashSession(servers[k % LOAD_HOSTS], audit=audit, kill_grace=0.2)
                for k in range(LOAD_SESSIONS)]
    rss_before, peak_before = rss_mb(), peak_rss_mb()
    try:
        started = time.monotonic()
        await asyncio.gather(*(s.start() for s in sessions))
        connected = time.monotonic() - started
        started = time.monotonic()
        problems = await asyncio.gather(*(_load_worker(s, k) for k, s in enumerate(sessions)))
        elapsed = time.monotonic() - started
    finally:
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
    rss_after, peak_after = rss_mb(), peak_rss_mb()
    total = LOAD_SESSIONS * LOAD_COMMANDS
    timeouts = LOAD_SESSIONS * sum(1 for i in range(LOAD_COMMANDS) if i % 100 == 25)
    bigs = LOAD_SESSIONS * sum(1 for i in range(LOAD_COMMANDS) if i % 100 == 60)
    figures = (
        f"load: {LOAD_SESSIONS} sessions on {LOAD_HOSTS} hosts, {total} commands "
        f"({timeouts} timeouts, {bigs} outputs of {BIG_OUTPUT / 1e6:g} MB) in {elapsed:.1f} s = "
        f"{total / elapsed:.0f} commands/s (connect {connected:.1f} s); client RSS {rss_before:.0f} MB "
        f"before, {rss_after:.0f} MB after, peak {peak_after:.0f} MB (was {peak_before:.0f} MB)"
    )
    print(f"\n{figures}")
    flat = [p for ps in problems for p in ps]
    assert not flat, f"{len(flat)} wrong results, first: {flat[:3]}; {figures}"
    assert rss_after - rss_before < 500, figures
    assert peak_after - max(rss_before, peak_before) < 500, figures

    for n, host in enumerate(servers):
        records = audit.read(host.name)
        mine = [k for k in range(LOAD_SESSIONS) if k % LOAD_HOSTS == n]
        starts = [r for r in records if r["event"] == "exec.start"]
        ends = [r for r in records if r["event"] == "exec.end"]
        assert len(starts) == len(ends) == len(mine) * LOAD_COMMANDS, (host.name, len(starts), len(ends))
        assert {r["call_id"] for r in starts} == {r["call_id"] for r in ends}
        assert len({r["call_id"] for r in starts}) == len(starts), "a call_id was reused"
        expected = Counter(_load_command(k, i)[0] for k in mine for i in range(LOAD_COMMANDS))
        assert Counter(r["command"] for r in starts) == expected
        assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
        report = audit.verify(host.name)
        assert report.ok, report.problems[:5]
        by_call = {r["call_id"]: r for r in ends}
        for start in starts:
            end = by_call[start["call_id"]]
            assert end["command"] == start["command"]
            assert end["session_id"] == start["session_id"]
            assert end["timed_out"] is start["command"].startswith("sleep 5")


# -- hostile input ----------------------------------------------------------------------------------

_HEX = "0123456789abcdef"
_fake_sentinels = st.one_of(
    st.text(_HEX, min_size=32, max_size=32).map(lambda h: f"\x1eRB{h}:0\x1e"),
    st.text(_HEX, min_size=0, max_size=40).map(lambda h: f"\x1eRB{h}:"),
    st.sampled_from(["\x1e", "\x1eRB", "\x1e\x1e", "RBINFO 1|2|3|4\n", "RBERR x\n", "__CLAUDE_BASH_DONE__"]),
)
_controls = st.sampled_from(["\x1b[31m", "\x1b[0m", "\x1b]0;title\x07", "\x1bP1;2|x\x1b\\", "\r", "\r\n",
                             "\x9b2J", "\x7f", "\x08", "\x07", "\x0c", "\t", "\x1b", "\u202e", "\ufeff"])
_long_lines = st.builds(lambda n, c: c * n, st.integers(1_000, 8_000),
                        st.sampled_from(["x", "é", "日", "\t"]))
_any_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=200)
# At most 8,000 characters (24 KB): below the output limit, so nothing is cut.
_hostile_text = st.lists(st.one_of(_any_text, _fake_sentinels, _controls, _long_lines), max_size=8).map(
    lambda parts: "".join(parts)[:8_000])
_hostile_bytes = st.one_of(
    st.binary(max_size=3000),
    st.lists(st.one_of(st.binary(max_size=200), _fake_sentinels.map(str.encode), _controls.map(str.encode),
                       st.sampled_from([b"\xff\xfe", b"\xc3", b"\xe2\x82", b"\x00", b"\xf0\x9f\x98"])),
             max_size=12).map(b"".join),
)
_HYPOTHESIS = settings(max_examples=30, deadline=timedelta(seconds=10), database=None,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                              HealthCheck.large_base_example])


def _expected(data: bytes, redactor: Redactor) -> str:
    """What the session returns for output ``data``: decoded, cleaned, then redacted."""
    return redactor.redact(clean_text(data.decode("utf-8", "replace")))


def test_hostile_output_is_returned_exactly(shared_host: Host) -> None:
    redactor = Redactor(shared_host.redact)
    with asyncio.Runner() as runner:
        session = RemoteBashSession(shared_host, kill_grace=0.3)
        runner.run(session.start())

        def run(command: str) -> CommandResult:
            # Never a hang: a stuck call fails the example here.
            return runner.run(asyncio.wait_for(session.run(command, timeout=10), 20))

        @_HYPOTHESIS
        @given(data=_hostile_bytes)
        def printf_bytes(data: bytes) -> None:
            result = run("printf '" + "".join(f"\\{byte:03o}" for byte in data) + "'")
            assert result.output == _expected(data, redactor)
            assert result.exit_code == 0
            assert not result.shell_lost
            assert result.output_bytes == len(data)

        @_HYPOTHESIS
        @given(text=_hostile_text)
        def printf_text(text: str) -> None:
            expected = _expected(text.encode(), redactor)
            # A line with a carriage return is laid out as a terminal shows it, tabs as spaces: `\r`,
            # 8,000 tabs and an `x` are 64,001 characters, past the output limit, and cut.
            assume(len(expected) <= shared_host.output_limit)
            result = run(f"printf '%s' {shell_quote(text)}")
            assert result.output == expected
            assert result.exit_code == 0
            assert not result.shell_lost
            assert result.output_bytes == len(text.encode())

        try:
            printf_bytes()
            printf_text()
            assert run("echo still framed").output == "still framed\n"
        finally:
            runner.run(session.close())


def _write(tmp: Path, text: str) -> Path:
    path = tmp / f"inv-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(text)
    return path


_YAML_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefg", "bcdefgh", strict=True))


@pytest.mark.parametrize(("text", "says"), [
    pytest.param("hosts: [web-1, web-2]\n", "expected a mapping of host names", id="hosts-a-list"),
    pytest.param("hosts:\n  web-1: {port: twenty-two}\n", "port", id="port-a-word"),
    pytest.param("hosts:\n  web-1: {port: 70000}\n", "port", id="port-too-big"),
    pytest.param("hosts:\n  web-1: {labels: [a, b]}\n", "labels", id="labels-a-list"),
    pytest.param("hosts:\n  web-1: {keepalive_interval: -1}\n", "keepalive_interval", id="negative"),
    pytest.param("hosts:\n  web-1: {jump: 7}\n", "jump", id="jump-a-number"),
    pytest.param("hosts:\n  web-1: {env: {'1BAD': x}}\n", "not a valid shell name", id="env-name"),
    pytest.param("hosts:\n  web-1: {prot: 22}\n", "unknown field 'prot'", id="unknown-host-key"),
    pytest.param("hostz:\n  web-1: {}\n", "unknown field 'hostz'", id="unknown-top-key"),
    pytest.param("hosts:\n  web-1: {}\ngroups:\n  g: {hosts: [web-1], colour: red}\n",
                 "unknown field 'colour'", id="unknown-group-key"),
    pytest.param("hosts:\n  a: {jump: [b]}\n  b: {jump: [c]}\n  c: {jump: [a]}\n", "jump hosts form a cycle",
                 id="jump-cycle"),
    pytest.param("hosts:\n  a: {jump: [a]}\n", "cycle", id="jump-to-itself"),
    pytest.param("hosts:\n  a: {}\ngroups:\n  g1: {children: [g2]}\n  g2: {children: [g1]}\n",
                 "groups contain each other", id="group-cycle"),
    pytest.param("hosts:\n  a: {jump: [nowhere]}\n", "'nowhere' is not a host", id="unknown-jump"),
    pytest.param("hosts: {a: {}\n", "YAML syntax error", id="unclosed"),
    pytest.param("\tbad: [\n", "YAML syntax error", id="tab"),
    pytest.param("", "empty", id="empty"),
    pytest.param("- just\n- a list\n", "expected a mapping", id="top-a-list"),
    pytest.param(_YAML_BOMB, "YAML nodes", id="alias-bomb"),
])
def test_bad_inventory_is_a_clear_inventory_error(tmp_path: Path, text: str, says: str) -> None:
    path = _write(tmp_path, text)
    started = time.monotonic()
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert time.monotonic() - started < 5
    assert str(err.value).startswith(str(path)), str(err.value)
    assert says in str(err.value)


def test_huge_inventory_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    line = "# " + "x" * 1022 + "\n"
    with path.open("w") as fh:
        fh.write("hosts:\n  web-1: {}\n")
        for _ in range(MAX_FILE_BYTES // len(line) + 2):
            fh.write(line)
    assert path.stat().st_size > MAX_FILE_BYTES
    started = time.monotonic()
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert time.monotonic() - started < 2
    assert "files over 10 MiB are refused" in str(err.value)
    assert str(path) in str(err.value)


_host_keys = st.sampled_from(["hostname", "port", "user", "jump", "labels", "env", "policy", "limits",
                              "redact", "command_timeout", "keepalive_interval", "groups", "name", "x"])
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 70_000), st.floats(allow_nan=True),
                     st.text(max_size=12))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.one_of(_host_keys, st.text(max_size=6)), inner, max_size=3),
), max_leaves=10)
_names = st.sampled_from(["a", "b", "web-1", "g", "all", "-x", ".h", "h h"])
_inventories = st.one_of(
    st.fixed_dictionaries({
        "hosts": st.dictionaries(_names, st.one_of(st.dictionaries(_host_keys, _values, max_size=4), _values),
                                 max_size=3),
    }, optional={
        "groups": st.dictionaries(_names, st.dictionaries(
            st.sampled_from(["hosts", "children", "vars", "forks", "y"]), _values, max_size=3), max_size=3),
        "defaults": st.dictionaries(_host_keys, _values, max_size=3),
    }),
    _values,
)


def test_random_inventories_load_or_raise_inventory_error(tmp_path: Path) -> None:
    @_HYPOTHESIS
    @given(doc=_inventories, raw=st.one_of(st.none(), st.text(max_size=300)))
    def load(doc: Any, raw: str | None) -> None:
        path = _write(tmp_path, raw if raw is not None else yaml.safe_dump(doc, allow_unicode=True))
        message = ""
        try:
            load_inventory(path)
        except InventoryError as exc:
            message = str(exc)
        finally:
            path.unlink()
        assert not message or message.startswith(str(path)), message

    load()


_not_a_mapping = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
                           st.lists(st.text(max_size=5), max_size=3))
_bad_tool_inputs = st.one_of(
    _not_a_mapping,
    # an unknown field next to a good command
    st.dictionaries(st.text(min_size=1, max_size=10).filter(lambda k: k not in ("command", "restart")),
                    _values, min_size=1, max_size=3).map(
        lambda extra: {"command": "touch /tmp/never", **extra}),
    st.builds(lambda v: {"command": v}, st.one_of(
        _not_a_mapping.filter(lambda v: not isinstance(v, str)),
        st.dictionaries(st.text(max_size=3), _scalars, max_size=2),
    )),
    st.builds(lambda v: {"restart": v}, st.one_of(st.none(), st.integers(), st.text(max_size=5))),
    st.builds(lambda v: {"restart": False, "command": v}, st.sampled_from(["", "   ", "\n\t"])),
    st.integers(1, 3).map(lambda n: {"command": "x" * (MAX_COMMAND_CHARS + n)}),
    st.text(max_size=5).map(lambda t: {"command": f"echo {t}\x00"}),
)


def test_bad_tool_inputs_become_error_results(shared_host: Host, tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "audit")
    with asyncio.Runner() as runner:
        session = RemoteBashSession(shared_host, audit=audit, kill_grace=0.3)
        tool = BashTool(session)
        runner.run(session.start())

        @_HYPOTHESIS
        @given(tool_input=_bad_tool_inputs, extra=st.dictionaries(st.sampled_from(["cache_control", "x"]),
                                                                   _scalars, max_size=2))
        def handle(tool_input: Any, extra: dict[str, Any]) -> None:
            block = {"type": "tool_use", "id": "toolu_hostile", "name": "bash", "input": tool_input, **extra}
            result = runner.run(asyncio.wait_for(tool.handle(block), 20))
            assert result["type"] == "tool_result"
            assert result["tool_use_id"] == "toolu_hostile"
            assert result["is_error"] is True
            assert isinstance(result["content"], str)
            assert result["content"].startswith("Error: ")
            assert len(result["content"]) < 1000

        try:
            handle()
            good = {"id": "toolu_ok", "name": "bash", "input": {"command": "echo fine"}}
            ok = runner.run(tool.handle(good))
            assert ok["content"] == "fine\n"
        finally:
            runner.run(session.close())
    # Nothing bad was sent: the only command run is the good one.
    assert [r["command"] for r in audit.read(shared_host.name) if r["event"] == "exec.start"] == ["echo fine"]


async def test_lone_surrogate_in_a_command_is_an_error_result(shared_host: Host) -> None:
    async with RemoteBashSession(shared_host) as session:
        # json.loads('"\\ud800"') gives this string: a tool_use input can carry it.
        result = await BashTool(session).handle({"id": "toolu_s", "name": "bash",
                                                 "input": {"command": "echo '\ud800'"}})
        assert result["type"] == "tool_result"


# -- security ---------------------------------------------------------------------------------------


def _inventory(tmp_path: Path, template: Host, hosts: dict[str, dict[str, Any]]) -> Path:
    creds = {"user": template.user, "identity_file": str(template.identity_file),
             "known_hosts": str(template.known_hosts), "credential": "key", "connect_timeout": 5}
    return _write(tmp_path, yaml.safe_dump({"defaults": creds, "hosts": hosts}))


async def test_host_outside_the_allowlist_is_never_connected(shared_host: Host, tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "audit")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        inventory = load_inventory(_inventory(tmp_path, shared_host, {
            "inside": {"hostname": shared_host.hostname, "port": shared_host.port},
            "outside": {"hostname": "127.0.0.1", "port": port},
            "behind": {"hostname": shared_host.hostname, "port": shared_host.port, "jump": ["outside"]},
        }))

        def open_session(name: str, allow: str) -> RemoteBashSession:
            return RemoteBashSession(inventory.hosts[name], gate=Gate(inventory, allow, audit), audit=audit)

        session = open_session("outside", allow="inside")
        with pytest.raises(HostNotAllowed) as err:
            await asyncio.wait_for(session.run("touch /tmp/never"), 10)
        assert_names_host(err.value, session.host)
        assert "outside this session's allowlist 'inside'" in str(err.value)
        assert "refused before connecting" in str(err.value)

        # A jump host outside the allowlist is refused the same way, before any hop is dialled.
        behind = open_session("behind", allow="behind")
        with pytest.raises(HostNotAllowed) as err:
            await asyncio.wait_for(behind.run("true"), 10)
        assert "jump host" in str(err.value)
        assert "'outside'" in str(err.value)

        # Through the tool: an error result, never an exception.
        tool = BashTool(open_session("outside", allow="inside"))
        result = await tool.handle({"id": "toolu_out", "name": "bash", "input": {"command": "id"}})
        assert result["is_error"] is True
        assert result["content"].startswith("Error: refused before connecting: ")

        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected

    denied = [r for r in audit.read("outside") if r["event"] == "host.denied"]
    assert len(denied) >= 2
    assert denied[0]["denied"] == "outside"
    assert "allowlist" in denied[0]["error"]
    assert next(r for r in audit.read("behind") if r["event"] == "host.denied")["denied"] == "outside"
    assert not [r for r in audit.read("outside") if r["event"] in ("exec.start", "session.start")]


def _fingerprint(public_key: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(public_key)], capture_output=True,
                         text=True, check=True, timeout=30)
    return out.stdout.split()[1]


async def test_changed_host_key_is_refused(shared_host: Host, hosts: TestHosts, tmp_path: Path) -> None:
    server = hosts.servers[shared_host.name]
    real = _fingerprint(server.workdir / "ssh_host_ed25519_key.pub")
    impostor = generate_keypair(tmp_path / "impostor")
    recorded = _fingerprint(impostor.with_suffix(".pub"))
    known = tmp_path / "known_hosts"
    key_type, key_data = impostor.with_suffix(".pub").read_text().split()[:2]
    known.write_text(f"[{shared_host.hostname}]:{shared_host.port} {key_type} {key_data}\n")
    audit = AuditLog(tmp_path / "audit")
    host = shared_host.model_copy(update={"known_hosts": known, "host_key_policy": "accept-new"})
    with pytest.raises(HostKeyChanged) as err:
        await asyncio.wait_for(RemoteBashSession(host, audit=audit).run("touch /tmp/never"), 15)
    assert_names_host(err.value, host)
    assert err.value.seen == real
    assert err.value.expected == recorded
    assert real in str(err.value)
    assert recorded in str(err.value)
    assert "CHANGED" in str(err.value)
    # accept-new never overwrites a recorded key
    assert known.read_text().count("\n") == 1
    events = [r["event"] for r in audit.read(host.name)]
    assert events == ["connect.error"]


AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
CORP_TOKEN = "corp-0123456789ab"
PASSWORD = "hunter2-Secr3t"
SECRETS = (AWS_KEY, CORP_TOKEN, PASSWORD)


async def test_secrets_never_reach_claude_or_the_audit_log(shared_host: Host, tmp_path: Path) -> None:
    host = shared_host.model_copy(update={"redact": [r"corp-[0-9a-f]{12}"]})
    # Wired as the CLI wires it: one redactor for the session's output and the audit log.
    redactor = Redactor(host.redact)
    audit_dir = tmp_path / "audit"
    audit = AuditLog(audit_dir, redactor=redactor)
    says = f"echo {AWS_KEY}; echo {CORP_TOKEN}; echo password={PASSWORD}"
    commands = [
        says,
        f"{says}; exit_status=3; (exit $exit_status)",
        f"{says}; seq 20000; {says}",  # truncated: the secrets are in the head and the tail
        f"{says}; sleep 5",  # timed out
        f"{says} >&2; echo api_key={PASSWORD}",
    ]
    contents: list[str] = []
    async with RemoteBashSession(host, audit=audit, redactor=redactor, kill_grace=0.2) as session:
        tool = BashTool(session, timeout=2)
        for n, command in enumerate(commands):
            result = await tool.handle({"id": f"toolu_{n}", "name": "bash", "input": {"command": command}})
            contents.append(result["content"])
    for content in contents:
        assert "[REDACTED:" in content
        for secret in SECRETS:
            assert secret not in content, content
    files = [p for p in audit_dir.rglob("*") if p.is_file()]
    assert files
    for path in files:
        raw = path.read_bytes()
        for secret in SECRETS:
            assert secret.encode() not in raw, f"{secret} is in {path.name}"
    assert AuditLog(audit_dir).verify(host.name).ok


async def test_secrets_in_commands_stay_out_of_the_audit_log_by_default(shared_host: Host,
                                                                         tmp_path: Path) -> None:
    audit_dir = tmp_path / "audit"
    async with RemoteBashSession(shared_host, audit=AuditLog(audit_dir)) as session:
        result = await session.run(f"echo {AWS_KEY}")
    assert AWS_KEY not in result.output
    raw = b"".join(p.read_bytes() for p in audit_dir.iterdir())
    assert AWS_KEY.encode() not in raw


async def test_audit_files_are_owner_only_whatever_the_umask(shared_host: Host, tmp_path: Path) -> None:
    audit_dir = tmp_path / "deep" / "audit"
    old = os.umask(0)
    try:
        # Small files, so rotation and the anchor of pruned files are covered too; keyed, since an
        # unkeyed anchor cannot vouch for pruned records and would not verify.
        audit = AuditLog(audit_dir, max_bytes=1500, keep=2, key=bytes(range(32)))
        async with RemoteBashSession(shared_host, audit=audit) as session:
            for n in range(8):
                await session.run(f"echo {n}")
    finally:
        os.umask(old)
    names = sorted(p.name for p in audit_dir.iterdir())
    stem = audit.path(shared_host.name).name
    assert {stem, f"{stem}.1", f"{stem}.2", f"{stem}.lock", f"{stem}.anchor"} <= set(names), names
    for directory in (audit_dir, audit_dir.parent):
        assert directory.stat().st_mode & 0o777 == 0o700, directory
    for path in audit_dir.iterdir():
        assert path.stat().st_mode & 0o777 == 0o600, f"{path.name}: {oct(path.stat().st_mode)}"
    assert audit.verify(shared_host.name).ok
