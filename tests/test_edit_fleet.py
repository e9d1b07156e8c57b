"""The text editor in fleet runs (per host, and the coordinator's remote_edit) and on the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import pytest

from remote_bash import fleet
from remote_bash.inventory import Inventory
from remote_bash.models import Host

from .messages_server import MessagesServer, Reply, text, tool_use
from .sshd import TestHosts
from .test_cli import base_env, cli, host_entry, write_inventory
from .test_edit import put


@pytest.fixture(scope="module")
def pair(hosts: TestHosts) -> tuple[Host, Host]:
    return hosts.start("ed-a"), hosts.start("ed-b")


async def test_coordinator_edits_a_named_host(pair: tuple[Host, Host], server: MessagesServer,
                                              client: anthropic.AsyncAnthropic, work: Path, tmp_path: Path) -> None:
    a, b = pair
    conf = put(work / "app.conf", "mode = old\n")
    edit = tool_use({"host": "ed-b", "command": "str_replace", "path": str(conf), "old_str": "old",
                     "new_str": "new"}, id="te1", name="remote_edit")
    stray = tool_use({"host": "ed-z", "command": "view", "path": str(conf)}, id="te2", name="remote_edit")
    server.add(Reply([edit, stray]), Reply([text("done")]))
    inventory = Inventory(hosts={"ed-a": a, "ed-b": b}, groups={"both": ["ed-a", "ed-b"]})
    result = await fleet.run(inventory, "both", "switch the mode", coordinator=True, client=client,
                             transcript_dir=tmp_path)
    assert result.coordinator is not None and result.coordinator.stop_reason == "end_turn"
    names = [t["name"] for t in server.requests[0]["tools"]]
    assert names == ["remote_bash", "remote_edit"]
    assert "remote_edit" in server.requests[0]["system"][0]["text"]
    done, unknown = server.tool_results(1)
    assert done["tool_use_id"] == "te1" and done["is_error"] is False and "mode = new" in done["content"]
    assert unknown["is_error"] is True and "unknown host 'ed-z'" in unknown["content"]
    assert conf.read_text() == "mode = new\n"


async def test_each_host_conversation_gets_both_tools(pair: tuple[Host, Host], server: MessagesServer,
                                                      client: anthropic.AsyncAnthropic, tmp_path: Path) -> None:
    a, _b = pair
    server.add(Reply([tool_use({"command": "view", "path": "/etc/hostname"},
                               name="str_replace_based_edit_tool")]), Reply([text("seen")]))
    inventory = Inventory(hosts={"ed-a": a}, groups={})
    result = await fleet.run(inventory, "ed-a", "look", client=client, transcript_dir=tmp_path)
    assert [r.status for r in result.results] == ["ok"]
    assert [t["name"] for t in server.requests[0]["tools"]] == ["bash", "str_replace_based_edit_tool"]
    (seen,) = server.tool_results(1)
    assert seen["is_error"] is False and "/etc/hostname with line numbers" in seen["content"]


def test_cli_run_tools_edit_policy_and_audit_show(pair: tuple[Host, Host], work: Path, tmp_path: Path) -> None:
    a, _b = pair
    keep = put(work / "keep.txt", "k\n")
    inventory = write_inventory(tmp_path / "hosts.yaml", {
        "ed-a": host_entry(a, edit={"deny": [str(keep)]}),
    })
    env = {**base_env(tmp_path), "REMOTE_BASH_INVENTORY": str(inventory)}
    made = work / "made.txt"
    script = [
        Reply([tool_use({"command": "create", "path": str(made), "file_text": "hello\n"}, id="toolu_c1",
                        name="str_replace_based_edit_tool"),
               tool_use({"command": "view", "path": str(keep)}, id="toolu_c2", name="str_replace_based_edit_tool")]),
        Reply([text("made it")]),
    ]
    with MessagesServer(script) as server:
        run_env = {**env, "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test-key"}
        out = cli(run_env, "run", "--host", "ed-a", "--tools", "edit", "make a file")
        requests = server.requests
    assert out.returncode == 0, out.stderr
    assert [t["name"] for t in requests[0]["tools"]] == ["str_replace_based_edit_tool"]
    assert f"edit: create {made}" in out.stdout and f"edit: view {keep}" in out.stdout
    assert f"  File created successfully at {made}" in out.stdout and "  [done, " in out.stdout
    assert made.read_text() == "hello\n"
    results: list[dict[str, Any]] = requests[1]["messages"][-1]["content"]
    assert results[1]["is_error"] is True and "denied by this host's edit policy" in results[1]["content"]
    shown = cli(env, "audit", "show", "ed-a")
    assert shown.returncode == 0, shown.stderr
    assert f"create {made}" in shown.stdout and "wrote=6" in shown.stdout and "policy.denied" in shown.stdout
    as_json = [json.loads(line) for line in cli(env, "audit", "show", "--json", "ed-a").stdout.splitlines()]
    end = next(r for r in as_json if r["event"] == "edit.end")
    assert end["tool_use_id"] == "toolu_c1" and end["bytes_written"] == 6 and "+hello" in end["diff"]
    bad = cli(env, "run", "--tools", "bash,vim", "x")
    assert bad.returncode == 2 and "the tools are bash and edit" in bad.stderr
