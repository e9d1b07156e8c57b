"""``remote-bash mcp`` driven by the real ``mcp`` SDK client, as Claude Code or Claude Desktop drive it:
the server runs as a subprocess (stdio, or streamable HTTP with a bearer token) against real sshd hosts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from remote_bash.models import Host

from .sshd import TestHosts, processes_with
from .waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
ElicitFn = Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult]]


def _host_entry(host: Host, **extra: Any) -> dict[str, Any]:
    return {"hostname": host.hostname, "port": host.port, "user": host.user, "identity_file": str(host.identity_file),
            "known_hosts": str(host.known_hosts), "credential": "key", **extra}


@pytest.fixture(scope="module")
def lab(hosts: TestHosts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two real hosts (mcp-a, mcp-b labelled production) and a listener that must never be connected to."""
    a = hosts.start("mcp-a")
    b = hosts.start("mcp-b")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    root = tmp_path_factory.mktemp("mcp")
    inventory = root / "hosts.yaml"
    inventory.write_text(json.dumps({"hosts": {
        "mcp-a": _host_entry(a, redact=["tok-[0-9]+"]),
        "mcp-b": _host_entry(b, labels={"env": "production"}),
        "mcp-c": {"hostname": "127.0.0.1", "port": listener.getsockname()[1]},
        "mcp-w": _host_entry(a, approve=[{"writes_outside": ["/srv"]}]),
    }}))
    try:
        yield {"inventory": inventory, "root": root, "listener": listener}
    finally:
        listener.close()


@contextlib.asynccontextmanager
async def _client(lab: dict[str, Any], audit: Path, *args: str, elicit: ElicitFn | None = None,
                  mode: str = "legacy") -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "remote_bash.cli", "--inventory", str(lab["inventory"]), "--audit-dir", str(audit), "mcp", *args],
        cwd=str(ROOT), env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    async with Client(params, mode=mode, elicitation_callback=elicit,  # type: ignore[arg-type]
                      client_info=types.Implementation(name="test-client", version="1.0")) as client:
        yield client


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def _records(audit: Path, host: str) -> list[dict[str, Any]]:
    path = audit / f"{host}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_tools_and_schemas(lab: dict[str, Any], tmp_path: Path) -> None:
    async with _client(lab, tmp_path) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"bash", "edit", "hosts"}
        props = tools["bash"].input_schema["properties"]
        assert set(props) == {"command", "host", "restart", "timeout"}
        assert all(props[name].get("description") for name in props)
        assert "persistent" in (tools["bash"].description or "")
        listed = json.loads(_text(await client.call_tool("hosts", {})))
        assert [h["name"] for h in listed] == ["mcp-a", "mcp-b", "mcp-c", "mcp-w"]
        assert listed[1]["labels"] == {"env": "production"}
        narrowed = json.loads(_text(await client.call_tool("hosts", {"pattern": "env=production"})))
        assert [h["name"] for h in narrowed] == ["mcp-b"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_state_persists_per_host_and_audit_names_the_client(lab: dict[str, Any], tmp_path: Path,
                                                                  mode: str) -> None:
    async with _client(lab, tmp_path, "--allow", "mcp-a,mcp-b", mode=mode) as client:
        first = await client.call_tool("bash", {"host": "mcp-a", "command": "cd /tmp && export MARK=alpha"})
        assert not first.is_error
        again = await client.call_tool("bash", {"host": "mcp-a", "command": "echo $PWD $MARK"})
        assert _text(again).strip() == "/tmp alpha"
        other = await client.call_tool("bash", {"host": "mcp-b", "command": "echo \"[$MARK]\""})
        assert _text(other).strip() == "[]"
        failed = await client.call_tool("bash", {"host": "mcp-a", "command": "false"})
        assert failed.is_error and "Exit status 1" in _text(failed)
        masked = await client.call_tool("bash", {"host": "mcp-a", "command": "echo password=hunter22 tok-12345"})
        assert "hunter22" not in _text(masked) and "tok-12345" not in _text(masked)
    records = _records(tmp_path, "mcp-a")
    starts = [r for r in records if r["event"] == "exec.start"]
    assert len(starts) == 4 and all(r["client"] == "test-client 1.0" for r in starts)
    assert all(r["tool_use_id"].startswith("mcp-") for r in starts)
    assert "hunter22" not in (tmp_path / "mcp-a.jsonl").read_text()


async def test_progress_notifications_are_masked_before_carriage_returns_collapse(lab: dict[str, Any],
                                                                                   tmp_path: Path) -> None:
    seen: list[str] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(message or "")

    command = "printf 'password\\r=mcpleak1\\n'; sleep 0.5; printf 'token\\r: mcpleak2\\n'; sleep 0.5; echo end"
    async with _client(lab, tmp_path, "--allow", "mcp-a") as client:
        result = await client.call_tool("bash", {"host": "mcp-a", "command": command}, progress_callback=progress)
    assert "mcpleak" not in _text(result)
    assert any("[REDACTED:password]" in message for message in seen), seen
    assert not any("mcpleak" in message for message in seen), seen


async def test_host_outside_allow_is_refused_without_connecting(lab: dict[str, Any], tmp_path: Path) -> None:
    async with _client(lab, tmp_path, "--allow", "mcp-a") as client:
        refused = await client.call_tool("bash", {"host": "mcp-c", "command": "id"})
        assert refused.is_error and "outside" in _text(refused)
        unknown = await client.call_tool("bash", {"host": "mcp-aa", "command": "id"})
        assert unknown.is_error and "mcp-a" in _text(unknown)  # a suggestion
        unnamed = await client.call_tool("bash", {"command": "echo only-one"})
        assert _text(unnamed).strip() == "only-one"  # one selectable host: the name may be left out
        listed = json.loads(_text(await client.call_tool("hosts", {})))
        assert [h["name"] for h in listed] == ["mcp-a"]
    with pytest.raises(BlockingIOError):
        lab["listener"].accept()
    denied = [r for r in _records(tmp_path, "mcp-c") if r["event"] == "host.denied"]
    assert denied and denied[0]["client"] == "test-client 1.0"


async def test_timeout_kills_and_restart_resets(lab: dict[str, Any], tmp_path: Path) -> None:
    marker = f"mcp-timeout-{os.getpid()}"
    async with _client(lab, tmp_path) as client:
        await client.call_tool("bash", {"host": "mcp-a", "command": "X=kept"})
        slow = await client.call_tool("bash", {"host": "mcp-a", "command": f"bash -c 'sleep 300; : {marker}'",
                                                "timeout": 1})
        assert slow.is_error and "did not finish within 1 s and was killed" in _text(slow)
        assert not processes_with(marker, "rbtest")
        after = await client.call_tool("bash", {"host": "mcp-a", "command": "echo $X"})
        assert _text(after).strip() == "kept"
        restarted = await client.call_tool("bash", {"host": "mcp-a", "restart": True})
        assert not restarted.is_error and "restarted" in _text(restarted)
        fresh = await client.call_tool("bash", {"host": "mcp-a", "command": "echo \"[$X]\""})
        assert _text(fresh).strip() == "[]"


async def test_cancellation_kills_the_command_and_records_it(lab: dict[str, Any], tmp_path: Path) -> None:
    marker = f"mcp-cancel-{os.getpid()}"
    async with _client(lab, tmp_path) as client:
        with anyio.move_on_after(90):
            async with anyio.create_task_group() as tg:
                async def call() -> None:
                    await client.call_tool("bash", {"host": "mcp-a", "command": f"bash -c 'sleep 300; : {marker}'"})

                tg.start_soon(call)
                await wait_for(lambda: processes_with(marker, "rbtest"), within=60, what="the command to start")
                tg.cancel_scope.cancel()
        await wait_for(lambda: not processes_with(marker, "rbtest"),
                       within=60, what="the cancelled command to be killed")
        alive = await client.call_tool("bash", {"host": "mcp-a", "command": "echo still-here"})
        assert _text(alive).strip() == "still-here"
    ends = [r for r in _records(tmp_path, "mcp-a") if r["event"] == "exec.end" and marker in r["command"]]
    assert ends and ends[0].get("interrupted") is True and ends[0]["client"] == "test-client 1.0"


async def test_client_going_away_closes_sessions_and_their_processes(lab: dict[str, Any], tmp_path: Path) -> None:
    marker = f"mcp-left-{os.getpid()}"
    async with _client(lab, tmp_path) as client:
        await client.call_tool("bash", {"host": "mcp-a",
                                        "command": f"nohup bash -c 'sleep 300; : {marker}' >/dev/null 2>&1 &"})
        await wait_for(lambda: processes_with(marker, "rbtest"), within=60, what="the background job")
    await wait_for(lambda: any(r["event"] == "session.end" for r in _records(tmp_path, "mcp-a")),
                   within=60, what="the session to be closed")
    await wait_for(lambda: not processes_with(marker, "rbtest"), within=60, what="the background job to be stopped")


def _answer(decision: str, **extra: Any) -> ElicitFn:
    async def elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert "sudo id" in params.message and "mcp-b" in params.message
        if decision in ("decline", "cancel"):
            return types.ElicitResult(action=decision)  # type: ignore[arg-type]
        return types.ElicitResult(action="accept", content={"decision": decision, **extra})
    return elicit


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_approval_accepted_granted_declined(lab: dict[str, Any], tmp_path: Path, mode: str) -> None:
    asked: list[str] = []

    async def grant(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return await _answer("allow for minutes", minutes=5)(ctx, params)

    async with _client(lab, tmp_path, elicit=grant, mode=mode) as client:
        # not risky on a production host: no question
        plain = await client.call_tool("bash", {"host": "mcp-b", "command": "echo fine"})
        assert _text(plain).strip() == "fine" and not asked
        first = await client.call_tool("bash", {"host": "mcp-b", "command": "sudo id"})
        second = await client.call_tool("bash", {"host": "mcp-b", "command": "sudo id"})
        assert len(asked) == 1  # the grant covers the second call
        # it ran (sudo is not installed for the test user: bash says so)
        assert "sudo" in _text(first) and "approval" not in _text(second)
    async with _client(lab, tmp_path, elicit=_answer("refuse", reason="not on a Friday"), mode=mode) as client:
        refused = await client.call_tool("bash", {"host": "mcp-b", "command": "sudo id"})
        assert refused.is_error and "not on a Friday" in _text(refused)
    async with _client(lab, tmp_path, elicit=_answer("decline"), mode=mode) as client:
        declined = await client.call_tool("bash", {"host": "mcp-b", "command": "sudo id"})
        assert declined.is_error and "declined" in _text(declined)
    records = _records(tmp_path, "mcp-b")
    answers = [(r["how"], r["approved"]) for r in records if r["event"] == "approval.answered"]
    assert answers == [("grant", True), ("granted", True), ("refused", False), ("refused", False)]
    starts = [r for r in records if r["event"] == "exec.start" and r["command"] == "sudo id"]
    assert len(starts) == 2  # the refused ones were never sent
    asks = [r for r in records if r["event"] == "approval.asked"]
    assert len(asks) == 4 and all(r["client"] == "test-client 1.0" for r in asks)


async def test_approval_fails_closed(lab: dict[str, Any], tmp_path: Path) -> None:
    async with _client(lab, tmp_path) as client:  # a client that cannot ask a person
        refused = await client.call_tool("bash", {"host": "mcp-b", "command": "systemctl restart nginx"})
        assert refused.is_error and "elicitation" in _text(refused)

    async def never(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        await anyio.sleep(30)
        raise AssertionError("the server should have stopped waiting")

    async with _client(lab, tmp_path, "--approve-timeout", "1", elicit=never) as client:
        slow = await client.call_tool("bash", {"host": "mcp-b", "command": "rm -rf /tmp/nothing-here"})
        assert slow.is_error and "nobody answered within 1 s" in _text(slow)
    async with _client(lab, tmp_path, "--no-approve") as client:
        ran = await client.call_tool("bash", {"host": "mcp-b", "command": "rm -f /tmp/nothing-here; echo gone"})
        assert _text(ran).strip() == "gone"
    answers = [r["how"] for r in _records(tmp_path, "mcp-b") if r["event"] == "approval.answered"]
    assert answers == ["unavailable", "timeout", "all"]
    assert not [r for r in _records(tmp_path, "mcp-b") if r["event"] == "exec.start" and "nginx" in r["command"]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# The SDK's streamable HTTP client leaves its event-stream connection to the garbage collector when it
# closes; that is the client's socket, not the server's.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.2"])
async def test_http_transport_requires_the_token(lab: dict[str, Any], tmp_path: Path, address: str) -> None:
    port = _free_port()
    token = "t0ken-" + os.urandom(8).hex()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "remote_bash.cli", "--inventory", str(lab["inventory"]), "--audit-dir", str(tmp_path),
        "mcp", "--http", f"{address}:{port}",
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "REMOTE_BASH_MCP_TOKEN": token},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )
    url = f"http://{address}:{port}/mcp"
    try:
        def listening() -> bool:
            with socket.socket() as probe:
                return probe.connect_ex((address, port)) == 0 or proc.returncode is not None

        await wait_for(listening, within=20, what="the HTTP server to listen")
        assert proc.returncode is None, "the server exited before listening"
        async with httpx2.AsyncClient() as plain:
            denied = await plain.post(url, json={}, headers={"Authorization": "Bearer wrong"})
            assert denied.status_code == 401
            missing = await plain.post(url, json={})
            assert missing.status_code == 401
            # A name that is not the address served (DNS rebinding) is still refused.
            rebound = await plain.post(url, json={}, headers={"Authorization": f"Bearer {token}",
                                                              "Host": f"rebound.example:{port}"})
            assert rebound.status_code == 421
            other_port = await plain.post(url, json={}, headers={"Authorization": f"Bearer {token}",
                                                                 "Host": f"{address}:{port + 1}"})
            assert other_port.status_code == 421
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http, \
                Client(streamable_http_client(url, http_client=http),
                       client_info=types.Implementation(name="http-client", version="2")) as client:
            result = await client.call_tool("bash", {"host": "mcp-a", "command": "echo over-http"})
            assert _text(result).strip() == "over-http"
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 20)
    assert proc.stdout is not None and await proc.stdout.read() == b""  # stdout carries nothing over HTTP
    assert any(r.get("client") == "http-client 2" for r in _records(tmp_path, "mcp-a"))


def test_http_refuses_a_public_address_without_the_flag(lab: dict[str, Any], tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "remote_bash.cli", "--inventory", str(lab["inventory"]), "mcp",
                          "--http", "0.0.0.0:8765"], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 2 and "not a loopback address" in out.stderr and "--public" in out.stderr


async def test_idle_session_closes_and_comes_back(lab: dict[str, Any], tmp_path: Path) -> None:
    async with _client(lab, tmp_path, "--idle-timeout", "1") as client:
        await client.call_tool("bash", {"host": "mcp-a", "command": "export GONE=soon"})
        await wait_for(lambda: any(r["event"] == "session.end" for r in _records(tmp_path, "mcp-a")),
                       within=60, what="the idle session to be closed")
        back = await client.call_tool("bash", {"host": "mcp-a", "command": "echo \"[$GONE]\""})
        assert _text(back).strip() == "[]"  # a new session: the old shell's state went with it
    starts = [r for r in _records(tmp_path, "mcp-a") if r["event"] == "session.start"]
    assert len(starts) == 2


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_edit_then_run_and_writes_ask_for_approval(lab: dict[str, Any], tmp_path: Path, mode: str) -> None:
    asked: list[str] = []

    async def once(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"decision": "run once"})

    target = f"/tmp/mcp-edit-{os.getpid()}-{mode}.conf"
    async with _client(lab, tmp_path, elicit=once, mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert {"command", "path", "host", "old_str", "new_str", "view_range"} <= set(
            tools["edit"].input_schema["properties"])
        made = await client.call_tool("edit", {"host": "mcp-a", "command": "create", "path": target,
                                               "file_text": "port = 80\nname = web\n"})
        assert not made.is_error, _text(made)
        changed = await client.call_tool("edit", {"host": "mcp-a", "command": "str_replace", "path": target,
                                                  "old_str": "port = 80", "new_str": "port = 8080"})
        assert not changed.is_error and "8080" in _text(changed)
        ran = await client.call_tool("bash", {"host": "mcp-a", "command": f"grep port {target}; rm -f {target}"})
        assert _text(ran).strip() == "port = 8080"
        relative = await client.call_tool("edit", {"host": "mcp-a", "command": "view", "path": "etc/hosts"})
        assert relative.is_error and "absolute" in _text(relative)
        assert not asked  # mcp-a has no approval rules
        # mcp-w asks before a write outside /srv; a view never asks
        viewed = await client.call_tool("edit", {"host": "mcp-w", "command": "view", "path": "/etc/hostname"})
        assert not viewed.is_error and not asked
        again = await client.call_tool("edit", {"host": "mcp-w", "command": "create", "path": target,
                                                "file_text": "x\n"})
        assert not again.is_error, _text(again)
        assert len(asked) == 1 and target in asked[0] and "mcp-w" in asked[0]
        await client.call_tool("bash", {"host": "mcp-a", "command": f"rm -f {target}"})
    answered = [r for r in _records(tmp_path, "mcp-w") if r["event"] == "approval.answered"]
    assert [(r["how"], r["approved"]) for r in answered] == [("once", True)]
    starts = [r for r in _records(tmp_path, "mcp-a") if r["event"] == "edit.start"]
    assert [r["command"] for r in starts] == ["create", "str_replace"]
    assert all(r["client"] == "test-client 1.0" for r in starts)


# Characters a terminal acts on or hides: C0 controls but newline and tab, DEL, C1, bidi marks,
# overrides and isolates, zero-width characters.
_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_approval_question_shows_the_command_escaped(lab: dict[str, Any], tmp_path: Path,
                                                              mode: str) -> None:
    asked: list[str] = []

    async def decline(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="decline")

    victim = f"/tmp/mcp-victim-{os.getpid()}-{mode}"
    Path(victim).write_text("keep\n")
    Path(victim).chmod(0o666)
    # On a terminal, CR, "erase line" and "cursor up" would leave only "echo harmless" in sight.
    command = f"rm -f {victim}\r\x1b[2K\x1b[1Aecho harmless \u202e\x9b2K\u200b"
    try:
        async with _client(lab, tmp_path, elicit=decline, mode=mode) as client:
            refused = await client.call_tool("bash", {"host": "mcp-b", "command": command})
            assert refused.is_error and "declined" in _text(refused)
        assert len(asked) == 1
        question = asked[0]
        assert not _HIDDEN.search(question), repr(question)
        assert f"rm -f {victim}\\x0d\\x1b[2K\\x1b[1Aecho harmless \\u202e\\x9b2K\\u200b" in question
        assert Path(victim).read_text() == "keep\n"  # declined: never sent
    finally:
        Path(victim).unlink(missing_ok=True)


async def test_hosts_says_which_are_unreachable_and_why(lab: dict[str, Any], hosts: TestHosts,
                                                        tmp_path: Path) -> None:
    target = hosts.start("mcp-j")
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(json.dumps({"hosts": {
        "mcp-hop": {"hostname": "127.0.0.1", "port": lab["listener"].getsockname()[1]},
        "mcp-j": _host_entry(target, jump=["mcp-hop"]),
        "mcp-d": _host_entry(target),
    }}))
    async with _client({"inventory": inventory}, tmp_path / "audit", "--allow", "mcp-j,mcp-d") as client:
        listed = {h["name"]: h for h in json.loads(_text(await client.call_tool("hosts", {})))}
        assert set(listed) == {"mcp-j", "mcp-d"}
        assert listed["mcp-d"]["reachable"] is True and "not_reachable_because" not in listed["mcp-d"]
        assert listed["mcp-j"]["reachable"] is False
        assert "'mcp-hop'" in listed["mcp-j"]["not_reachable_because"]
        assert "outside" in listed["mcp-j"]["not_reachable_because"]
        refused = await client.call_tool("bash", {"host": "mcp-j", "command": "id"})
        assert refused.is_error
        assert _text(refused).startswith("Error: refused before connecting: ")
        assert _text(refused).count("refused before") == 1
    with pytest.raises(BlockingIOError):
        lab["listener"].accept()


async def test_commands_that_hid_a_deletion_are_asked_about(lab: dict[str, Any], tmp_path: Path) -> None:
    asked: list[str] = []

    async def decline(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="decline")

    victim = Path(f"/tmp/mcp-hidden-{os.getpid()}")
    victim.write_text("keep\n")
    victim.chmod(0o666)
    commands = [f'eval "rm -f {victim}"', f"builtin eval 'rm -f {victim}'", f"time eval rm -f {victim}",
                f"source /dev/stdin <<< 'rm -f {victim}'", f"git -c alias.z='!rm -f {victim}' z",
                f"sed -n '1e rm -f {victim}' /etc/hostname", f"sudo -u root rm -f {victim}"]
    try:
        async with _client(lab, tmp_path, elicit=decline) as client:
            for command in commands:
                refused = await client.call_tool("bash", {"host": "mcp-b", "command": command})
                assert refused.is_error and "declined" in _text(refused), command
        assert len(asked) == len(commands)
        assert victim.read_text() == "keep\n"
    finally:
        victim.unlink(missing_ok=True)
    assert not [r for r in _records(tmp_path, "mcp-b") if r["event"] == "exec.start"]
