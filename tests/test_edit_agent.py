"""Claude edits a file with the text editor tool and runs it with the bash tool, on the same host:
the real SDK against the scripted Messages endpoint, the real sshd behind the session."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic

from remote_bash import EditTool, RemoteBashSession
from remote_bash.agent import AgentConfig, AgentEvent, run_agent
from remote_bash.audit import AuditLog
from remote_bash.models import Host

from .messages_server import MessagesServer, Reply, text, tool_use
from .test_edit import put

EDITOR = "str_replace_based_edit_tool"


async def test_edit_then_run_through_the_real_sdk(web1: Host, server: MessagesServer,
                                                  client: anthropic.AsyncAnthropic, work: Path,
                                                  tmp_path: Path) -> None:
    script = work / "greet.sh"
    audit = AuditLog(tmp_path / "audit")
    create = tool_use({"command": "create", "path": str(script), "file_text": "#!/bin/sh\necho hello\n"},
                      name=EDITOR)
    chmod = tool_use({"command": f"chmod +x {script} && {script}"})
    fix = tool_use({"command": "str_replace", "path": str(script), "old_str": "echo hello",
                    "new_str": "echo \"hello, $1\""}, name=EDITOR)
    rerun = tool_use({"command": f"{script} world"})
    server.add(Reply([text("I'll write the script."), create]), Reply([chmod]), Reply([fix]), Reply([rerun]),
               Reply([text("Done: greet.sh says hello, world.")]))
    events: list[AgentEvent] = []
    config = AgentConfig(model="claude-test", transcript=tmp_path / "t.jsonl")
    async with RemoteBashSession(web1, audit=audit) as session:
        outcome = await run_agent("write greet.sh and run it", session, config, client=client,
                                  on_event=events.append)
    assert outcome.stop_reason == "end_turn"
    first = server.requests[0]
    assert first["tools"] == [{"type": "bash_20250124", "name": "bash"},
                              {"type": "text_editor_20250728", "name": EDITOR}]
    assert "text editor tool" in first["system"][0]["text"]
    (created,) = server.tool_results(1)
    assert created["is_error"] is False and "created" in created["content"]
    (ran,) = server.tool_results(2)
    assert ran["content"] == "hello\n"
    (fixed,) = server.tool_results(3)
    assert fixed["is_error"] is False and 'echo "hello, $1"' in fixed["content"]
    (again,) = server.tool_results(4)
    assert again["content"] == "hello, world\n"
    assert script.read_text() == '#!/bin/sh\necho "hello, $1"\n'
    shown = [(e.tool, e.command) for e in events if e.kind == "command"]
    assert shown[0] == (EDITOR, f"create {script}") and shown[2] == (EDITOR, f"str_replace {script}")
    records = [r for r in audit.read(web1.name) if r["event"] in ("edit.end", "exec.end")]
    assert [r["event"] for r in records] == ["edit.end", "exec.end", "edit.end", "exec.end"]
    assert records[0]["tool_use_id"] == create["id"] and records[2]["tool_use_id"] == fix["id"]
    transcript = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert transcript[0]["tools"] == first["tools"]


async def test_tools_can_be_chosen(web1: Host, server: MessagesServer, client: anthropic.AsyncAnthropic,
                                   tmp_path: Path) -> None:
    server.add(Reply([tool_use({"command": "view", "path": "/etc"}, name=EDITOR)]), Reply([text("ok")]))
    config = AgentConfig(model="claude-test", transcript=tmp_path / "t.jsonl", tools=["bash"])
    async with RemoteBashSession(web1) as session:
        await run_agent("look", session, config, client=client)
    assert server.requests[0]["tools"] == [{"type": "bash_20250124", "name": "bash"}]
    (refused,) = server.tool_results(1)
    assert refused["is_error"] is True and "unknown tool" in refused["content"]


async def test_edit_tool_in_the_sdk_tool_runner(web1: Host, server: MessagesServer,
                                                client: anthropic.AsyncAnthropic, work: Path) -> None:
    f = put(work / "notes.txt", "a\n")
    good = tool_use({"command": "insert", "path": str(f), "insert_line": 1, "insert_text": "b\n"}, name=EDITOR)
    bad = tool_use({"command": "view", "path": "notes.txt"}, name=EDITOR)
    server.add(Reply([good, bad]), Reply([text("done")]))
    async with RemoteBashSession(web1) as session:
        runner = client.beta.messages.tool_runner(
            model="claude-test", max_tokens=1024, tools=[EditTool(session, max_characters=5000)], thread=False,
            messages=[{"role": "user", "content": "add a line"}],
        )
        replies = [message async for message in runner]
    assert replies[-1].content[0].type == "text"
    assert server.requests[0]["tools"] == [{"type": "text_editor_20250728", "name": EDITOR,
                                            "max_characters": 5000}]
    ok, failed = server.tool_results(1)
    assert "     2\tb" in str(ok["content"])
    assert failed["is_error"] is True and "must be absolute" in str(failed["content"])
    assert f.read_text() == "a\nb\n"
