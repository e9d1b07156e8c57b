"""How a stopped command ends and is told: SIGTERM and SIGHUP as Ctrl-C, strays named, against real sshd.

``timeout``, CI cancels, systemd and a closed terminal send these: the remote command must be
killed on the host and the kill audited, the process must exit 128 + the signal with one line
naming it. The same for the kept session's background process and the MCP server over stdio.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from remote_bash.models import Host

from .messages_server import MessagesServer, Reply, text, tool_use
from .sshd import TestHosts, processes_with, reaped
from .test_cli import CLI, audit_records, base_env, cli, host_entry, write_inventory
from .test_keep import daemon_pids
from .waiting import wait_until


@pytest.fixture(scope="module")
def target(hosts: TestHosts) -> Host:
    return hosts.start("sig-a")


@pytest.fixture
def env(tmp_path: Path, target: Host) -> Iterator[dict[str, str]]:
    inventory = write_inventory(tmp_path / "hosts.yaml", {"sig-a": host_entry(target)})
    env = {**base_env(tmp_path), "REMOTE_BASH_INVENTORY": str(inventory)}
    yield env
    cli(env, "sessions", "stop", "--all")
    for pid in daemon_pids(env):
        os.kill(pid, signal.SIGKILL)


def _start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, *args], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _stopped(proc: subprocess.Popen[str], sig: signal.Signals, hosts: TestHosts, marker: str) -> str:
    """Send ``sig`` once the marked command runs on the host; the process's stderr once it exited."""
    try:
        wait_until(lambda: processes_with(marker, hosts.user), within=30, what=f"{marker} to run on the host")
        proc.send_signal(sig)
        assert proc.wait(40) == 128 + sig, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        _, stderr = proc.communicate()
    wait_until(lambda: not processes_with(marker, hosts.user), within=20,
               what=f"{marker} to be gone from the host", show=lambda: processes_with(marker, hosts.user))
    return stderr


def _ended(records: list[dict[str, Any]], marker: str) -> dict[str, Any]:
    ends = [r for r in records if r["event"] == "exec.end" and marker in r.get("command", "")]
    assert len(ends) == 1, records[-3:]
    return ends[0]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_exec_killed_by_a_signal_kills_the_remote_command_and_audits(env: dict[str, str], hosts: TestHosts,
                                                                     sig: signal.Signals) -> None:
    marker = f"sleep 300.{str(uuid.uuid4().int)[:9]}"
    stderr = _stopped(_start(env, "exec", "sig-a", "--", f"echo started; {marker}"), sig, hosts, marker)
    assert stderr.strip().splitlines() == [stderr.strip()], stderr
    assert sig.name in stderr and "killed" in stderr
    records = audit_records(env, "sig-a")
    end = _ended(records, marker)
    assert end["interrupted"] is True and end["kill"] is not None
    # What it printed before it was stopped is recorded as for any other end.
    assert end["output_head"] == "started\n" and end["output_bytes"] == 8 and len(end["output_sha256"]) == 64
    assert any(r["event"] == "exec.kill" for r in records)
    assert records[-1]["event"] == "session.end"


def test_fleet_exec_killed_by_sigterm_kills_on_the_host(env: dict[str, str], hosts: TestHosts) -> None:
    marker = f"sleep 300.{str(uuid.uuid4().int)[:9]}"
    stderr = _stopped(_start(env, "fleet", "exec", "sig-a", "--", marker), signal.SIGTERM, hosts, marker)
    assert "SIGTERM" in stderr
    assert _ended(audit_records(env, "sig-a"), marker)["interrupted"] is True


def test_run_killed_by_sigterm_kills_claudes_command(env: dict[str, str], hosts: TestHosts) -> None:
    marker = f"sleep 300.{str(uuid.uuid4().int)[:9]}"
    with MessagesServer([Reply([tool_use({"command": marker}, id="toolu_sig1")]), Reply([text("done")])]) as server:
        run_env = {**env, "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test-key"}
        stderr = _stopped(_start(run_env, "run", "--host", "sig-a", "wait"), signal.SIGTERM, hosts, marker)
    assert "stopped by SIGTERM" in stderr
    assert _ended(audit_records(env, "sig-a"), marker)["interrupted"] is True


def test_kept_exec_killed_by_sigterm_kills_the_call_and_keeps_the_session(env: dict[str, str],
                                                                          hosts: TestHosts) -> None:
    assert cli(env, "exec", "--keep", "sig-a", "--", "export STAY=3").returncode == 0
    marker = f"sleep 300.{str(uuid.uuid4().int)[:9]}"
    stderr = _stopped(_start(env, "exec", "--keep", "sig-a", "--", marker), signal.SIGTERM, hosts, marker)
    assert stderr.strip().splitlines() == [stderr.strip()] and "SIGTERM" in stderr, stderr
    assert _ended(audit_records(env, "sig-a"), marker)["interrupted"] is True
    assert cli(env, "exec", "--keep", "sig-a", "--", "echo $STAY").stdout == "3\n"


def test_sigterm_to_the_kept_session_process_kills_its_running_call(env: dict[str, str], hosts: TestHosts) -> None:
    marker = f"sleep 300.{str(uuid.uuid4().int)[:9]}"
    client = _start(env, "exec", "--keep", "sig-a", "--", marker)
    try:
        wait_until(lambda: processes_with(marker, hosts.user), within=30, what="the kept call to run")
        pids = daemon_pids(env)
        assert len(pids) == 1
        os.kill(pids[0], signal.SIGTERM)
        client.wait(40)
    finally:
        client.kill()
        client.communicate()
    wait_until(lambda: not daemon_pids(env), within=40, what="the kept session's process to exit")
    assert processes_with(marker, hosts.user) == []
    records = audit_records(env, "sig-a")
    assert _ended(records, marker)["interrupted"] is True
    assert records[-1]["event"] == "session.end"


def _rpc(proc: subprocess.Popen[str], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()


def test_sigterm_to_the_mcp_server_kills_the_running_call_and_closes_sessions(env: dict[str, str],
                                                                              hosts: TestHosts) -> None:
    marker = f"sleep 300.{str(uuid.uuid4().int)[:9]}"
    proc = subprocess.Popen([*CLI, "mcp"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["id"] == 1
        _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "bash", "arguments": {"host": "sig-a", "command": marker}}})
        stderr = _stopped(proc, signal.SIGTERM, hosts, marker)
    finally:
        proc.kill()
    assert "SIGTERM" in stderr
    records = audit_records(env, "sig-a")
    assert _ended(records, marker)["interrupted"] is True
    assert records[-1]["event"] == "session.end"


def _delivered(pid: int, sig: signal.Signals) -> bool:
    """Whether ``sig`` is no longer pending for ``pid`` (its handler ran or is about to)."""
    status = Path(f"/proc/{pid}/status").read_text()
    masks = [int(line.split()[1], 16) for line in status.splitlines() if line.startswith(("SigPnd:", "ShdPnd:"))]
    return not any(mask & (1 << (sig - 1)) for mask in masks)


@pytest.mark.parametrize(("first", "second"), [
    (signal.SIGTERM, signal.SIGTERM), (signal.SIGTERM, signal.SIGINT), (signal.SIGINT, signal.SIGTERM),
])
def test_a_second_signal_does_not_cut_the_kill_short_and_says_so(env: dict[str, str], hosts: TestHosts,
                                                                 first: signal.Signals, second: signal.Signals) -> None:
    marker = f"sleep 300.{str(uuid.uuid4().int)[:9]}"
    # A command that ignores INT and TERM: stopping it takes every round of the kill, long enough
    # for a second signal to arrive while it is under way.
    proc = _start(env, "exec", "sig-a", "--", f"trap '' INT TERM; {marker}")
    try:
        wait_until(lambda: processes_with(marker, hosts.user), within=30, what=f"{marker} to run on the host")
        proc.send_signal(first)
        wait_until(lambda: _delivered(proc.pid, first), within=10, what=f"the first {first.name} to arrive")
        proc.send_signal(second)
        status = proc.wait(40)
    finally:
        proc.kill()
        _, stderr = proc.communicate()
    # Two signals pending at once are handled lowest number first (Python's order): a TERM not yet
    # handled when the INT comes then stops the command as the second, after Ctrl-C.
    assert status in (128 + first, 130), stderr
    assert "already stopping" in stderr, stderr
    if status != 130:
        assert f"stopped by {first.name}" in stderr, stderr
    assert processes_with(marker, hosts.user) == []
    end = _ended(audit_records(env, "sig-a"), marker)
    assert end["interrupted"] is True and "KILL" in end["kill"]["signals"]


def test_a_timeout_that_left_strays_says_so_in_its_one_line(env: dict[str, str], hosts: TestHosts) -> None:
    mark = str(uuid.uuid4().int)[:12]
    # A daemon that cleared its environment and left the process tree: on a host without a cgroup
    # per login it cannot be found for sure, and that must reach the terminal, not only --json.
    with reaped(mark, hosts.user):
        out = cli(env, "exec", "--timeout", "1.5", "sig-a", "--",
                  f"(env -i setsid sh -c 'sleep 300; : {mark}' &); echo started; sleep 100")
        assert out.returncode == 124, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "was killed;" in lines[0] and "; not checked:" in lines[0], out.stderr
        pids = [line.split()[0] for line in processes_with(mark, hosts.user)]
        assert pids and any(pid in lines[0] for pid in pids), (pids, lines)


def test_the_http_server_names_an_ipv6_url_in_brackets_and_stops_on_sigterm(env: dict[str, str]) -> None:
    probe = socket.socket(socket.AF_INET6)
    probe.bind(("::1", 0))
    port = probe.getsockname()[1]
    probe.close()
    proc = subprocess.Popen([*CLI, "mcp", "--http", f"[::1]:{port}"], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline()
        assert f"bearer token for http://[::1]:{port}/mcp: " in banner, banner
        wait_until(lambda: _listening(port), within=30, what="the HTTP server to listen")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 143
    finally:
        proc.kill()
        _, stderr = proc.communicate()
    assert "stopped by SIGTERM" in stderr


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET6) as sock:
        return sock.connect_ex(("::1", port)) == 0


def test_sighup_to_an_idle_shell_closes_its_session_at_once(env: dict[str, str]) -> None:
    # A closed terminal: the prompt waits for a line that never comes; that read must not hold the exit.
    proc = subprocess.Popen([*CLI, "shell", "sig-a"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().startswith("connected to sig-a")
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(25) == 129  # within the 30 s after which stopping gives up
    finally:
        proc.kill()
        _, stderr = proc.communicate()
    assert "stopped by SIGHUP" in stderr and "did not finish" not in stderr, stderr
    assert audit_records(env, "sig-a")[-1]["event"] == "session.end"


STUCK = """
import os, signal, sys, threading
from remote_bash.cli import _signals
_signals.CLEANUP_DEADLINE = 0.5
_signals.install()
stuck = threading.Event()
try:
    os.kill(os.getpid(), signal.SIGTERM)
    stuck.wait(5)
except KeyboardInterrupt:
    print("cleaning up", flush=True)
    stuck.wait(60)  # a cleanup that never ends
sys.exit(0)
"""


def test_stopping_that_does_not_finish_gives_up_at_its_deadline_and_says_so() -> None:
    out = subprocess.run([sys.executable, "-c", STUCK], capture_output=True, text=True, timeout=30,
                         cwd=Path(__file__).resolve().parents[1], check=False)
    assert out.returncode == 143, out
    assert out.stdout == "cleaning up\n"
    assert "stopped by SIGTERM, but stopping did not finish within 0.5 s" in out.stderr, out.stderr
