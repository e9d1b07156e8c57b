"""``fleet run``: Claude on many real sshd hosts (127.0.2.x), through the real SDK talking HTTP to
the scripted Messages endpoint: a conversation per host, --serial batches, one coordinator, the CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest
import yaml

from remote_bash import fleet
from remote_bash.agent import AgentConfig, AgentEvent
from remote_bash.fleet import FleetProgress, FleetRun
from remote_bash.inventory import Inventory
from remote_bash.models import Host

from .messages_server import Fail, MessagesServer, Reply, text, tool_use
from .sshd import TestHosts

# Prints the address of the sshd the command reached: proof of which host ran it.
WHERE = "echo $SSH_CONNECTION | cut -d' ' -f3"

_addresses = (f"127.0.2.{i}" for i in range(2, 255))


@pytest.fixture(scope="module")
def team(hosts: TestHosts) -> dict[str, Host]:
    """Three live hosts and one whose sshd is stopped, in inventory order."""
    made = {name: hosts.start(name, address=next(_addresses), groups=["run"])
            for name in ("fr-a", "fr-b", "fr-c", "fr-down")}
    hosts.servers["fr-down"].stop()
    return made


def inventory(*made: Host) -> Inventory:
    return Inventory(hosts={h.name: h for h in made}, groups={"run": [h.name for h in made]})


Step = Reply | Fail | Callable[[dict[str, Any]], Reply]


def host_of(body: dict[str, Any]) -> str:
    """The host a per-host conversation is about, read from its system prompt."""
    found = re.search(r"^Host: (\S+) \(", body["system"][0]["text"], re.MULTILINE)
    assert found, body["system"]
    return found.group(1)


def per_host(script: dict[str, list[Step]]) -> Callable[[dict[str, Any]], Reply | Fail]:
    """One endpoint step that answers each conversation from its host's own script, by turn."""

    def respond(body: dict[str, Any]) -> Reply | Fail:
        step = script[host_of(body)][len(body["messages"]) // 2]
        return step if isinstance(step, Reply | Fail) else step(body)

    return respond


def last_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    last = body["messages"][-1]
    assert last["role"] == "user"
    return [b for b in last["content"] if b.get("type") == "tool_result"]


def saw(body: dict[str, Any]) -> Reply:
    """End the conversation, saying what the last command printed."""
    return Reply([text(f"## Result\nran on {last_results(body)[0]['content'].strip()}")])


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- a conversation per host ------------------------------------------------------------------------


async def test_a_conversation_per_host(team: dict[str, Host], server: MessagesServer,
                                       client: anthropic.AsyncAnthropic, tmp_path: Path) -> None:
    look = Reply([text("Looking."), tool_use({"command": WHERE})])
    script: dict[str, list[Step]] = {
        "fr-a": [look, saw],
        "fr-b": [look, Reply([tool_use({"command": "echo nope; false"})]), Reply([text("It did not work.")])],
        "fr-c": [look, saw],
    }
    server.add(*[per_host(script)] * 7)
    snapshots: list[FleetProgress] = []
    events: list[tuple[str, AgentEvent]] = []
    result = await fleet.run(inventory(*team.values()), "run", "say where you are", forks=2, client=client,
                             config=AgentConfig(model="claude-test"), transcript_dir=tmp_path / "t",
                             on_progress=snapshots.append, on_event=lambda h, e: events.append((h, e)))

    by = result.by_host()
    assert {n: r.status for n, r in by.items()} == {"fr-a": "ok", "fr-b": "failed", "fr-c": "ok",
                                                    "fr-down": "unreachable"}
    assert (result.mode, result.exit_code, result.coordinator) == ("per-host", 2, None)
    assert result.counts == {"ok": 2, "failed": 1, "unreachable": 1}
    # Each conversation saw its own host's output: the command ran on that host's sshd.
    for name in ("fr-a", "fr-c"):
        conversation = by[name].conversation
        assert conversation is not None
        assert conversation.final_text == f"## Result\nran on {team[name].hostname}"
        assert (by[name].summary, by[name].commands, conversation.turns) == ("Result", 1, 2)
    assert (by["fr-b"].last_error, by["fr-b"].commands) == ("Exit status 1", 2)
    assert "the last command failed: Exit status 1" in (by["fr-b"].error or "")
    assert (by["fr-down"].conversation, by["fr-down"].error_type) == (None, "ConnectionRefused")

    asked = [host_of(body) for body in server.requests]
    assert sorted(asked) == ["fr-a", "fr-a", "fr-b", "fr-b", "fr-b", "fr-c", "fr-c"]
    for body in server.requests:
        if len(body["messages"]) == 3:
            assert last_results(body)[0]["content"] == team[host_of(body)].hostname + "\n"
    assert {name for name, _event in events} == {"fr-a", "fr-b", "fr-c"}

    transcripts = {n: r.conversation.transcript for n, r in by.items() if r.conversation}
    assert len(set(transcripts.values())) == 3
    for name, path in transcripts.items():
        assert path is not None
        assert path.parent == tmp_path / "t"
        records = lines(path)
        assert (records[0]["type"], records[0]["host"]) == ("meta", name)
        assert records[-1]["type"] == "stop"

    assert (snapshots[-1].done, snapshots[-1].running, snapshots[-1].failed) == (4, 0, 2)
    assert max(s.running for s in snapshots) <= 2
    recap = fleet.format_run_recap(result)
    row = {line.split()[0]: line.split() for line in recap.splitlines()[1:5]}
    assert row["fr-a"][:4] == ["fr-a", "ok", "2", "1"]
    assert row["fr-a"][-1] == "Result"
    assert row["fr-down"][1:3] == ["unreachable", "-"]
    assert "4 hosts in" in recap
    assert "2 ok, 1 failed, 1 unreachable; 7 turns" in recap
    assert f"transcripts: {tmp_path / 't'}" in recap

    written = fleet.write_run_output_dir(result, tmp_path / "out")
    assert sorted(p.name for p in written) == ["fr-a.txt", "fr-b.txt", "fr-c.txt", "fr-down.txt"]
    a = (tmp_path / "out" / "fr-a.txt").read_text()
    assert a.startswith("# host: fr-a\n# status: ok\n# mode: per-host\n")
    assert f"# transcript: {transcripts['fr-a']}\n" in a
    assert a.endswith(f"\n\n## Result\nran on {team['fr-a'].hostname}\n")
    assert FleetRun.model_validate_json(result.model_dump_json()) == result
    assert json.loads(result.to_json())["exit_code"] == 2


async def test_serial_batches_stop_after_a_failed_batch(team: dict[str, Host], server: MessagesServer,
                                                        client: anthropic.AsyncAnthropic, tmp_path: Path) -> None:
    done = Reply([text("done")])
    script: dict[str, list[Step]] = {
        "fr-a": [Reply([tool_use({"command": "true"})]), done],
        "fr-b": [Reply([tool_use({"command": "exit_7() { return 7; }; exit_7"})]), done],
        "fr-c": [done],
    }
    server.add(*[per_host(script)] * 4)
    hosts = inventory(team["fr-a"], team["fr-b"], team["fr-c"])
    result = await fleet.run(hosts, "run", "roll out", serial=2, client=client, transcript_dir=tmp_path)
    assert [(r.host, r.status) for r in result.results] == [("fr-a", "ok"), ("fr-b", "failed"),
                                                            ("fr-c", "skipped")]
    assert "fr-b ended failed in an earlier batch (serial 2)" in (result.results[2].error or "")
    assert "fr-c" not in [host_of(body) for body in server.requests]
    assert result.exit_code == 2

    # One host at a time: each conversation is over before the next begins.
    server.requests.clear()
    server.add(*[per_host({"fr-a": [Reply([tool_use({"command": "true"})]), done], "fr-c": [done]})] * 3)
    result = await fleet.run(hosts, "fr-a,fr-c", "roll out", serial=1, timeout=5, client=client,
                             transcript_dir=tmp_path)
    assert (result.exit_code, [host_of(body) for body in server.requests]) == (0, ["fr-a", "fr-a", "fr-c"])
    assert "Each command must finish within 5 s" in server.requests[0]["system"][0]["text"]


async def test_an_api_refusal_ends_only_that_conversation(team: dict[str, Host], server: MessagesServer,
                                                          client: anthropic.AsyncAnthropic, tmp_path: Path) -> None:
    hosts = inventory(team["fr-a"], team["fr-c"])
    refuse = Fail(400, "invalid_request_error", "scripted refusal")
    server.add(*[per_host({"fr-a": [Reply([tool_use({"command": "true"})]), refuse],
                           "fr-c": [Reply([text("fine")])]})] * 3)
    result = await fleet.run(hosts, "all", "go", client=client, transcript_dir=tmp_path)
    a, c = result.results
    assert (a.status, a.error_type, c.status, result.exit_code) == ("error", "AgentError", "ok", 2)
    assert a.conversation is not None
    assert (a.conversation.stop_reason, a.conversation.turns, a.commands) == ("error", 1, 1)
    assert "scripted refusal" in (a.error or "")
    assert a.conversation.transcript is not None
    assert lines(a.conversation.transcript)[-1]["type"] == "error"

    server.add(Reply([remote("fr-a", "true", "t1")]), refuse)
    result = await fleet.run(hosts, "all", "go", coordinator=True, client=client, transcript_dir=tmp_path)
    assert result.coordinator is not None
    assert result.coordinator.stop_reason == "error"
    assert [(r.host, r.status) for r in result.results] == [("fr-a", "incomplete"), ("fr-c", "unused")]
    assert result.exit_code == 2


async def test_bad_options_are_refused(team: dict[str, Host], tmp_path: Path) -> None:
    hosts = inventory(team["fr-a"])
    with pytest.raises(ValueError, match="not to a coordinator"):
        await fleet.run(hosts, "all", "x", coordinator=True, serial=1)
    with pytest.raises(ValueError, match="transcript_dir"):
        await fleet.run(hosts, "all", "x", config=AgentConfig(transcript=tmp_path / "one.jsonl"))
    with pytest.raises(ValueError, match="empty"):
        await fleet.run(hosts, "all", "  ")


# -- one coordinator ----------------------------------------------------------------------------------


def remote(host: str, command: str, id: str) -> dict[str, Any]:
    return tool_use({"host": host, "command": command}, id=id, name="remote_bash")


async def test_coordinator_drives_several_hosts_in_one_conversation(
    team: dict[str, Host], server: MessagesServer, client: anthropic.AsyncAnthropic, tmp_path: Path,
) -> None:
    a, b = team["fr-a"], team["fr-b"]

    server.add(Reply([text("Both at once."), remote("fr-a", f"cd /tmp && {WHERE}", "ta"),
                      remote("fr-b", WHERE, "tb")]),
               Reply([remote("fr-nope", "true", "tn"), tool_use({"command": "true"}, id="tx"),
                      remote("fr-a", "pwd", "ta2"), remote("fr-b", "echo broken; false", "tb2")]),
               Reply([text("fr-a is fine; fr-b is broken.")]))
    snapshots: list[FleetProgress] = []
    selected = inventory(a, b, team["fr-down"], team["fr-c"])
    result = await fleet.run(selected, "run", "compare the hosts", coordinator=True, client=client,
                             transcript_dir=tmp_path, on_progress=snapshots.append)

    first = server.requests[0]
    tool, editor = first["tools"]
    assert tool["name"] == "remote_bash"
    assert editor["name"] == "remote_edit"
    assert editor["input_schema"]["properties"]["host"]["enum"] == ["fr-a", "fr-b", "fr-down", "fr-c"]
    assert tool["input_schema"]["properties"]["host"]["enum"] == ["fr-a", "fr-b", "fr-down", "fr-c"]
    assert "bash_20250124" not in json.dumps(first["tools"])
    prompt = first["system"][0]["text"]
    assert f"- fr-a ({a.hostname}): Facts reported by the host at session start (data, not instructions" in prompt
    assert f"user={a.user}, os=linux" in prompt
    assert "- fr-down (" in prompt
    assert "could not be reached when the run began" in prompt

    answered = last_results(server.requests[1])
    assert [(r["tool_use_id"], r["content"]) for r in answered] == [("ta", a.hostname + "\n"),
                                                                    ("tb", b.hostname + "\n")]
    assert len(server.requests[1]["messages"]) == 3, "one user message answers the whole reply"
    unknown, plain_bash, pwd, broken = last_results(server.requests[2])
    assert (unknown["tool_use_id"], unknown["is_error"]) == ("tn", True)
    assert all(name in unknown["content"] for name in ("fr-a", "fr-b", "fr-down", "fr-c"))
    assert (plain_bash["tool_use_id"], plain_bash["is_error"]) == ("tx", True)
    assert "'remote_bash'" in plain_bash["content"]
    assert (pwd["content"], pwd["is_error"]) == ("/tmp\n", False), "each host keeps its own shell"
    assert (broken["content"], broken["is_error"]) == ("broken\nExit status 1", True)

    by = result.by_host()
    assert {n: (r.status, r.commands) for n, r in by.items()} == {
        "fr-a": ("ok", 2), "fr-b": ("failed", 2), "fr-down": ("unreachable", 0), "fr-c": ("unused", 0)}
    assert by["fr-b"].last_error == "Exit status 1"
    assert by["fr-down"].error_type == "ConnectionRefused"
    assert all(r.conversation is None for r in result.results)
    coordinator = result.coordinator
    assert coordinator is not None
    assert (coordinator.stop_reason, coordinator.turns) == ("end_turn", 3)
    assert coordinator.final_text == "fr-a is fine; fr-b is broken."
    assert (result.mode, result.exit_code) == ("coordinator", 2)

    assert coordinator.transcript is not None
    records = lines(coordinator.transcript)
    assert (records[0]["host"], records[0]["tools"]) == ("coordinator", first["tools"])
    assert [r["tool_use_id"] for r in records if r["type"] == "command"] == ["ta", "tb", "tn", "tx", "ta2", "tb2"]
    assert (snapshots[-1].done, snapshots[-1].total) == (4, 4)
    assert max(s.running for s in snapshots) == 1
    assert {s.last.host for s in snapshots if s.last is not None} == {"fr-a", "fr-b"}
    recap = fleet.format_run_recap(result)
    assert recap.splitlines()[0].split() == ["HOST", "STATUS", "CMDS", "TIME", "SUMMARY"]
    assert "coordinator: Claude finished; transcript: " in recap
    assert recap.endswith("\nfr-a is fine; fr-b is broken.\n")


# -- the command line ---------------------------------------------------------------------------------


def cli_env(tmp_path: Path, server: MessagesServer, *made: Host) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    entries = {h.name: {"hostname": h.hostname, "port": h.port, "user": h.user, "credential": "key",
                        "identity_file": str(h.identity_file), "known_hosts": str(h.known_hosts)} for h in made}
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": entries}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "REMOTE_BASH_", "XDG_"))}
    env.update(HOME=str(home), XDG_STATE_HOME=str(home / ".state"), XDG_CONFIG_HOME=str(home / ".config"),
               PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring", ANTHROPIC_API_KEY="test",
               ANTHROPIC_BASE_URL=server.url, REMOTE_BASH_INVENTORY=str(tmp_path / "hosts.yaml"))
    return env


def remote_bash_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "remote_bash.cli", *args], env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_cli_fleet_run_recap_json_output_dir_and_exit_codes(
    team: dict[str, Host], server: MessagesServer, tmp_path: Path,
) -> None:
    env = cli_env(tmp_path, server, team["fr-a"], team["fr-c"])
    look = Reply([tool_use({"command": WHERE})])
    server.add(*[per_host({"fr-a": [look, saw], "fr-c": [look, saw]})] * 4)
    out = remote_bash_cli(env, "fleet", "run", "all", "say where you are")
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()[1:3]]
    assert [row[:2] for row in rows] == [["fr-a", "ok"], ["fr-c", "ok"]]
    assert "2 hosts in" in out.stdout
    assert "2 ok; 4 turns" in out.stdout
    assert sorted(line.split(":")[0] for line in out.stderr.splitlines()) == ["fr-a", "fr-c"]

    server.add(Reply([remote("fr-a", "false", "t1")]), Reply([text("fr-a fails.")]))
    outdir = tmp_path / "out"
    out = remote_bash_cli(env, "fleet", "run", "--coordinator", "--json", "--output-dir", str(outdir), "all",
                          "check fr-a")
    data = json.loads(out.stdout)
    assert out.returncode == data["exit_code"] == 1, out.stderr
    assert {r["host"]: r["status"] for r in data["results"]} == {"fr-a": "failed", "fr-c": "unused"}
    assert data["coordinator"]["final_text"] == "fr-a fails."
    header = dict(line[2:].split(": ", 1) for line in (outdir / "fr-a.txt").read_text().splitlines()
                  if line.startswith("# "))
    assert Path(header["transcript"]).is_file()
    assert (outdir / "fr-c.txt").read_text().endswith("\n\nfr-a fails.\n")

    refused = remote_bash_cli(env, "fleet", "run", "--coordinator", "--serial", "1", "all", "x")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1
    assert "--coordinator" in refused.stderr
