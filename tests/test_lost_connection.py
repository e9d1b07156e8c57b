"""What a call lost with its connection left running is stopped before the session is done with the host.

The sshd process serving a session is killed mid-command, as root would kill ``sshd: USER@notty``:
the remote ``bash`` and the command it runs are adopted by init and would run on, past the
call's deadline. Each test runs ``sleep N.MARK; touch FILE`` (the shell itself runs the ``touch``
once the ``sleep`` ends, so the shell must be stopped too) and checks that, once the session is
done (``close()``, the CLI's exit, a kept session's next call or ``sessions stop``), nothing of the
command runs and the file never appears. Where the host cannot be reached again, the error says
so, naming the host, and the audit log has a record with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remote_bash import ConnectionLost, Host, RemoteBashSession
from remote_bash.audit import AuditLog

from .sshd import TestHosts, processes_with
from .test_cli import CLI, audit_records, base_env, cli, host_entry, write_inventory
from .test_reliability import alive, connection_pids, kill_all
from .waiting import wait_for, wait_until

pytestmark = pytest.mark.reliability

StartHost = Callable[..., Host]


class Command:
    """``{ sleep 30.MARK; touch FILE; } 2>/dev/null``: the marker finds the sleep, the file says whether it ran on."""

    def __init__(self, user: str) -> None:
        self.user = user
        self.mark = str(uuid.uuid4().int)[:9]
        self.sleep = f"sleep 30.{self.mark}"
        self.file = Path(f"/tmp/rb-lost-{uuid.uuid4().hex}")
        # Its own errors silenced, as a script's often are: bash's report of the killed sleep then
        # goes nowhere, rather than to the dead connection (a write there would end the shell).
        self.text = f"echo go; {{ {self.sleep}; touch {self.file}; }} 2>/dev/null"
        self.shells: list[int] = []
        """The pids of the shells that run it (the parent of the sleep), once seen."""

    def running(self) -> list[str]:
        return processes_with(self.sleep, self.user)

    def note_shell(self) -> None:
        for line in self.running():
            pid = int(line.split()[0])
            with contextlib.suppress(OSError, IndexError, ValueError):
                self.shells.append(int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]))

    def gone(self) -> bool:
        """Neither the sleep nor the shell that would run the ``touch`` after it is left."""
        return not self.running() and not any(alive(pid) for pid in self.shells)

    def left(self) -> str:
        return f"sleep: {self.running()}, shells alive: {[p for p in self.shells if alive(p)]}"

    def cleanup(self) -> None:
        kill_all([*self.shells, *(int(line.split()[0]) for line in self.running())], signal.SIGKILL)
        self.file.unlink(missing_ok=True)


@pytest.fixture
def command(hosts: TestHosts) -> Iterator[Command]:
    made = Command(hosts.user)
    yield made
    made.cleanup()


async def _lose_mid_command(session: RemoteBashSession, server_pids: Callable[[], list[int]],
                            command: Command, timeout: float = 20) -> ConnectionLost:
    """Run the command, kill the sshd processes serving the connection once it runs; the error."""
    task = asyncio.create_task(session.run(command.text, timeout))
    await wait_for(command.running, within=10, what="the command to start")
    command.note_shell()
    kill_all(server_pids(), signal.SIGKILL)
    with pytest.raises(ConnectionLost) as err:
        await asyncio.wait_for(task, 15)
    assert command.running(), "the command must outlive its connection for this test to mean anything"
    return err.value


# -- the Python API ---------------------------------------------------------------------------------


async def test_close_stops_what_a_call_lost_with_its_connection_left(start_host: StartHost, hosts: TestHosts,
                                                                     command: Command, tmp_path: Path) -> None:
    host = start_host("close")
    server = hosts.servers[host.name]
    audit = AuditLog(tmp_path / "audit")
    session = RemoteBashSession(host, audit=audit, kill_grace=0.3)
    await session.start()
    err = await _lose_mid_command(session, lambda: connection_pids(server), command)
    assert "not re-run" in str(err)
    await asyncio.wait_for(session.close(), 30)
    await wait_for(command.gone, within=5, what="close() to stop what the lost call left", show=command.left)
    assert not command.file.exists()
    kills = [r for r in audit.read(host.name) if r["event"] == "exec.kill"]
    assert [r["reason"] for r in kills] == ["left running by a lost connection"]
    assert kills[0]["processes"] >= 2  # the sleep and the shell that would have run the touch


async def test_close_after_a_loss_between_calls_stops_what_earlier_calls_left(
        start_host: StartHost, hosts: TestHosts, command: Command) -> None:
    """No call was running when the connection went: a job an earlier call left in the background
    runs on in the lost shell's place, and close() stops it as after a loss mid-command."""
    host = start_host("idle")
    server = hosts.servers[host.name]
    session = RemoteBashSession(host, audit=False, kill_grace=0.3)
    await session.start()
    # A program the job runs (sh here) carries the session's tag; a bare ( subshell ) that outlived its
    # shell does not (see the README's limits).
    await session.run(f"sh -c '{command.text}' >/dev/null 2>&1 &")
    await wait_for(command.running, within=10, what="the background job to start")
    command.note_shell()
    kill_all(connection_pids(server), signal.SIGKILL)
    await wait_for(lambda: session._conn is None or session._conn.is_closed, within=10,
                   what="the session to see its connection lost")
    assert command.running(), "the job must outlive its connection for this test to mean anything"
    await asyncio.wait_for(session.close(), 30)
    await wait_for(command.gone, within=5, what="close() to stop what an earlier call left", show=command.left)
    assert not command.file.exists()


async def test_the_next_call_stops_the_lost_shell_too(start_host: StartHost, hosts: TestHosts,
                                                      command: Command) -> None:
    """The next call's reconnect stops the old shell, not only its tagged children: else it goes on
    to the ``touch`` as soon as its ``sleep`` is killed."""
    host = start_host("next")
    server = hosts.servers[host.name]
    async with RemoteBashSession(host, audit=False, kill_grace=0.3) as session:
        await _lose_mid_command(session, lambda: connection_pids(server), command)
        assert (await asyncio.wait_for(session.run("echo next"), 30)).output == "next\n"
        await wait_for(command.gone, within=5, what="the next call to stop what the lost call left",
                       show=command.left)
        assert not command.file.exists()


async def test_close_that_cannot_reconnect_says_so_without_hanging(start_host: StartHost, hosts: TestHosts,
                                                                   command: Command, tmp_path: Path) -> None:
    host = start_host("unreachable", connect_timeout=2)
    server = hosts.servers[host.name]
    audit = AuditLog(tmp_path / "audit")
    session = RemoteBashSession(host, audit=audit, kill_grace=0.3)
    await session.start()
    pids = connection_pids(server)
    # The listener frozen: a new connection is accepted by the kernel and never answered.
    server.pause()
    try:
        await _lose_mid_command(session, lambda: pids, command)
        with pytest.raises(ConnectionLost) as err:
            await asyncio.wait_for(session.close(), 30)
    finally:
        server.resume()
    message = str(err.value)
    assert message.startswith(f"{host.name}: ")
    assert f"may still be running on {host.hostname}" in message, message
    kills = [r for r in audit.read(host.name) if r["event"] == "exec.kill"]
    assert len(kills) == 1 and kills[0]["reason"] == "left running by a lost connection", kills
    assert "may still be running" in kills[0]["error"]
    assert await session.close() is None  # closed all the same
    assert command.running()  # as said: nothing could stop it


# -- the command line -------------------------------------------------------------------------------


def _env(tmp_path: Path, host: Host) -> dict[str, str]:
    inventory = write_inventory(tmp_path / "hosts.yaml", {host.name: host_entry(host)})
    return {**base_env(tmp_path), "REMOTE_BASH_INVENTORY": str(inventory)}


def _exec(env: dict[str, str], *words: str) -> subprocess.Popen[str]:
    """An ``exec`` started in the background, once it printed its first line ("go")."""
    proc = subprocess.Popen([*CLI, "exec", *words], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "go\n"
    return proc


def _lose_cli(proc: subprocess.Popen[str], pids: Callable[[], list[int]], command: Command) -> tuple[int, str]:
    """Kill the sshd processes serving the running call; the exit status and stderr of the CLI."""
    try:
        wait_until(command.running, within=10, what="the command to start")
        command.note_shell()
        kill_all(pids(), signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, err


def test_exec_stops_what_the_lost_call_left_before_it_exits(start_host: StartHost, hosts: TestHosts,
                                                            command: Command, tmp_path: Path) -> None:
    host = start_host("exec")
    server = hosts.servers[host.name]
    env = _env(tmp_path, host)
    status, err = _lose_cli(_exec(env, "--timeout", "3", host.name, "--", command.text),
                            lambda: connection_pids(server), command)
    assert status == 125, err
    assert "lost while the command ran" in err
    assert command.gone(), command.left()  # already when the CLI exited
    assert not command.file.exists()
    kills = [r for r in audit_records(env, host.name) if r["event"] == "exec.kill"]
    assert [r["reason"] for r in kills] == ["left running by a lost connection"]


def test_exec_that_cannot_reconnect_says_the_command_may_still_run(start_host: StartHost, hosts: TestHosts,
                                                                   command: Command, tmp_path: Path) -> None:
    host = start_host("exec-down")
    server = hosts.servers[host.name]
    env = _env(tmp_path, host)
    proc = _exec(env, "--timeout", "3", host.name, "--", command.text)
    pids = connection_pids(server)
    server.stop(connections=False)  # nothing listens any more: the reconnect is refused
    status, err = _lose_cli(proc, lambda: pids, command)
    assert status == 125, err
    assert err.startswith(f"remote-bash: {host.name}: ") and len(err.splitlines()) == 1, err
    assert f"may still be running on {host.hostname}" in err
    kills = [r for r in audit_records(env, host.name) if r["event"] == "exec.kill"]
    assert len(kills) == 1 and "refused" in kills[0]["error"], kills


# -- kept sessions ----------------------------------------------------------------------------------


@pytest.fixture
def kept(tmp_path: Path) -> Iterator[Callable[[Host], dict[str, str]]]:
    """The environment of kept calls on a host; every kept session is stopped at the end."""
    made: list[dict[str, str]] = []

    def make(host: Host) -> dict[str, str]:
        made.append(_env(tmp_path, host))
        return made[-1]

    yield make
    for env in made:
        cli(env, "sessions", "stop", "--all")


def test_a_kept_call_lost_stops_what_it_left_before_it_exits(start_host: StartHost, hosts: TestHosts,
                                                             command: Command, kept: Callable[[Host], dict[str, str]]
                                                             ) -> None:
    host = start_host("keep")
    server = hosts.servers[host.name]
    env = kept(host)
    status, err = _lose_cli(_exec(env, "--keep", "--timeout", "3", host.name, "--", command.text),
                            lambda: connection_pids(server), command)
    assert status == 125, err
    assert "lost while the command ran" in err
    assert command.gone(), command.left()
    assert not command.file.exists()
    after = cli(env, "exec", "--keep", host.name, "--", "echo next")
    assert (after.returncode, after.stdout) == (0, "next\n"), after.stderr
    assert command.gone(), command.left()


@pytest.mark.parametrize("then", ["the next call", "sessions stop"])
def test_a_kept_session_that_cannot_reconnect_stops_what_was_lost_later(
        start_host: StartHost, hosts: TestHosts, command: Command, kept: Callable[[Host], dict[str, str]],
        then: str) -> None:
    """The reconnect fails (sshd down): the call says so, and the kept session stays to try again at
    its next call or at ``sessions stop``, once sshd is back."""
    host = start_host("keep-down")
    server = hosts.servers[host.name]
    env = kept(host)
    proc = _exec(env, "--keep", "--timeout", "3", host.name, "--", command.text)
    pids = connection_pids(server)
    server.stop(connections=False)
    status, err = _lose_cli(proc, lambda: pids, command)
    assert status == 125, err
    assert f"may still be running on {host.hostname}" in err and host.name in err, err
    assert command.running()
    hosts.restart(host.name)
    if then == "the next call":
        after = cli(env, "exec", "--keep", host.name, "--", "echo next")
        assert (after.returncode, after.stdout) == (0, "next\n"), after.stderr
    else:
        stopped = cli(env, "sessions", "stop", host.name)
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stderr == ""
    wait_until(command.gone, within=5, what=f"{then} to stop what the lost call left", show=command.left)
    assert not command.file.exists()
    records = audit_records(env, host.name)
    kills = [r for r in records if r["event"] == "exec.kill"]
    assert [("error" in r) for r in kills] == [True, False], kills
    assert json.dumps(kills[1]["reason"]) == '"left running by a lost connection"'
