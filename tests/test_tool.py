"""BashTool.handle: every input Claude can send becomes a tool_result, never an exception."""

from __future__ import annotations

import json
import pwd
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from anthropic.types import ToolUseBlock

from remote_bash import BashTool, Host, RemoteBashSession
from remote_bash.tool import MAX_COMMAND_CHARS

from .readme import checked, matches, python_snippets
from .sshd import TestHosts
from .test_cli import base_env, host_entry, write_inventory


@pytest.fixture
def marker(hosts: TestHosts) -> Iterator[Path]:
    """A file in the remote user's home that a command would create if it ran."""
    path = Path(pwd.getpwnam(hosts.user).pw_dir) / f"rbtool{uuid.uuid4().hex[:10]}"
    yield path
    path.unlink(missing_ok=True)


def exists(path: Path) -> bool:
    return path.exists()


def block(tool_input: Any, *, id: str = "toolu_test1", name: str = "bash") -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": tool_input}


@pytest.mark.parametrize(("tool_input", "says"), [
    ({}, "the input has no 'command' (and 'restart' is not true)"),
    ({"restart": False}, "the input has no 'command' (and 'restart' is not true)"),
    ({"command": 42}, "'command' must be a string, got int"),
    ({"command": ["ls", "-l"]}, "'command' must be a string, got list"),
    ({"command": None}, "'command' must be a string, got NoneType"),
    ({"restart": "yes"}, "'restart' must be true or false, got str"),
    ({"restart": 1}, "'restart' must be true or false, got int"),
    ({"command": ""}, "'command' is empty"),
    ({"command": " \n\t "}, "'command' is empty"),
    ({"command": "echo a\x00b"}, "'command' contains a NUL byte"),
    ({"command": "x" * (MAX_COMMAND_CHARS + 1)}, f"the limit is {MAX_COMMAND_CHARS:,}"),
    ("ls -l", "the tool input must be an object with 'command' or 'restart', got str"),
    (["ls"], "the tool input must be an object with 'command' or 'restart', got list"),
    (None, "the tool input must be an object with 'command' or 'restart', got NoneType"),
])
async def test_bad_input_is_an_error_result(session: RemoteBashSession, tool_input: Any, says: str) -> None:
    result = await BashTool(session).handle(block(tool_input))
    assert result["type"] == "tool_result"
    assert result["tool_use_id"] == "toolu_test1"
    assert result["is_error"] is True
    assert result["content"].startswith("Error: ")
    assert says in result["content"]
    assert len(result["content"]) < 300


@pytest.mark.parametrize("extra", [{"timeout": 5}, {"cwd": "/tmp", "env": {}}, {"Command": "x"}])
async def test_extra_fields_are_refused_and_nothing_runs(
    session: RemoteBashSession, marker: Path, extra: dict[str, Any],
) -> None:
    result = await BashTool(session).handle(block({"command": f"touch {marker}", **extra}))
    assert result["is_error"] is True
    assert "unknown input field(s)" in result["content"]
    for name in extra:
        assert repr(name) in result["content"]
    assert not exists(marker)


async def test_huge_command_is_refused_before_sending(session: RemoteBashSession, marker: Path) -> None:
    command = f"touch {marker} # " + "x" * MAX_COMMAND_CHARS
    result = await BashTool(session).handle(block({"command": command}))
    assert result["is_error"] is True
    assert f"{len(command):,} characters" in result["content"]
    assert "Write long scripts to a file in steps" in result["content"]
    assert not exists(marker)


async def test_restart_true_and_false(session: RemoteBashSession, marker: Path) -> None:
    tool = BashTool(session)
    await tool.handle(block({"command": "export RB_TOOL_VAR=1; cd /tmp"}))
    assert session.info is not None
    old_pid = session.info.shell_pid
    restarted = await tool.handle(block({"restart": True}, id="toolu_r"))
    assert restarted["is_error"] is False
    assert restarted["tool_use_id"] == "toolu_r"
    assert "restarted" in restarted["content"]
    assert str(session.info.shell_pid) in restarted["content"]
    assert session.info.shell_pid != old_pid
    # restart: false with a command just runs the command, in the clean shell.
    command = f'echo "[$RB_TOOL_VAR]"; pwd; touch {marker}'
    ran = await tool.handle(block({"command": command, "restart": False}))
    assert ran == {"type": "tool_result", "tool_use_id": "toolu_test1",
                   "content": f"[]\n{marker.parent}\n", "is_error": False}
    assert exists(marker)


async def test_restart_true_wins_over_a_command(session: RemoteBashSession, marker: Path) -> None:
    result = await BashTool(session).handle(block({"restart": True, "command": f"touch {marker}"}))
    assert result["is_error"] is False
    assert "restarted" in result["content"]
    assert not exists(marker)


async def test_unknown_tool_name(session: RemoteBashSession, marker: Path) -> None:
    result = await BashTool(session).handle(block({"command": f"touch {marker}"}, name="str_replace_editor"))
    assert result["is_error"] is True
    assert "unknown tool 'str_replace_editor'" in result["content"]
    assert not exists(marker)


async def test_sdk_block_output_streaming_and_status(session: RemoteBashSession) -> None:
    chunks: list[str] = []
    tool = BashTool(session, on_output=chunks.append)
    sdk_block = ToolUseBlock(type="tool_use", id="toolu_sdk", name="bash",
                             input={"command": "echo out; echo err >&2; exit_3() { return 3; }; exit_3"})
    result = await tool.handle(sdk_block)
    assert result == {"type": "tool_result", "tool_use_id": "toolu_sdk", "content": "out\nerr\nExit status 3",
                      "is_error": True}
    assert "".join(chunks) == "out\nerr\n"


async def test_a_block_without_id_is_a_programming_error(session: RemoteBashSession) -> None:
    with pytest.raises(ValueError, match="non-empty string id"):
        await BashTool(session).handle({"type": "tool_use", "name": "bash", "input": {"command": "true"}})


async def test_call_for_the_sdk_runner(session: RemoteBashSession) -> None:
    tool = BashTool(session)
    assert tool.to_dict() == {"type": "bash_20250124", "name": "bash"}
    assert tool.name == "bash"
    assert await tool.call({"command": "echo hi"}) == "hi\n"
    assert await tool.call({"command": "true"}) == "(no output)"
    with pytest.raises(ToolError) as info:
        await tool.call({"command": 7})
    assert info.value.content == "Error: 'command' must be a string, got int"
    with pytest.raises(ToolError) as info:
        await tool.call({"command": "echo out; echo err >&2; (exit 3)"})
    assert info.value.content == "out\nerr\nExit status 3"


# -- the README's "Using it from Python", run as a user runs it -------------------------------------


_STATED = "import json\ndef _stated(value):\n    print('stated:', json.dumps(value))\n"


def test_the_readmes_python_example_runs_as_shown(web1: Host, tmp_path: Path) -> None:
    (snippet,) = python_snippets("Using it from Python")
    code, stated = checked(snippet, "_stated")
    assert len(stated) == 1
    write_inventory(tmp_path / "hosts.yaml", {"web-1": host_entry(web1)})
    listed = Path("/srv") / f"rbreadme-{uuid.uuid4().hex[:8]}"  # what `cd /srv && ls` finds
    listed.touch()
    try:
        env = {**base_env(tmp_path), "PYTHONPATH": str(Path(__file__).parents[1])}
        out = subprocess.run([sys.executable, "-c", _STATED + code], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    finally:
        listed.unlink()
    assert out.returncode == 0, out.stderr
    first, block_line = out.stdout.rstrip("\n").rsplit("\n", 1)
    assert listed.name in first.split()
    assert first.split()[-3:] == ["0", "False", "False"]  # exit_code, timed_out, truncated
    block = json.loads(block_line.removeprefix("stated: "))
    assert matches(stated[0], block), block
    assert "load average" in block["content"]  # uptime's output
    # The session wrote the host's audit log in the CLI's default directory, as the text says.
    assert list((tmp_path / "home" / ".state" / "remote-bash" / "audit").glob("web-1*"))


async def test_the_sdk_free_handler_answers_as_the_sdk_tool_does(session: RemoteBashSession) -> None:
    from remote_bash.tool import BashHandler

    for tool_input in ({"command": "echo same"}, {"command": "(exit 4)"}, {"cmd": "x"}):
        use = block(tool_input)
        assert await BashHandler(session, timeout=5).handle(use) == await BashTool(session, timeout=5).handle(use)
