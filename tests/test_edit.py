"""EditTool against real sshd, with the SFTP subsystem and without it (shell fallback).

The remote side is this machine, so each test sets files up and checks them with plain
Python as root, and the tool works on them as the unprivileged test user.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import pwd
import stat
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from remote_bash import EditTool, RemoteBashSession
from remote_bash.audit import AuditLog, format_records
from remote_bash.models import EditPolicy, Host
from remote_bash.tools.edit import MAX_FILE_BYTES, MAX_TEXT_CHARS, VIEW_LIMIT

from .readme import checked, matches, python_snippets
from .sshd import TestHosts
from .waiting import wait_for


def _without_sftp(config: str) -> str:
    return "".join(line for line in config.splitlines(keepends=True) if not line.startswith("Subsystem sftp"))


@pytest.fixture(scope="session")
def nosftp(hosts: TestHosts) -> Host:
    """An sshd whose config has no ``Subsystem sftp`` line (start_sshd always adds one)."""
    import sys

    from remote_bash.sandbox import start_sshd

    module = sys.modules[start_sshd.__module__]  # where start_sshd looks the config up
    original = module.shared_sshd_config
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, "shared_sshd_config", lambda: _without_sftp(original()))
        return hosts.start("edit-nosftp")


@pytest.fixture(scope="session")
def withsftp(hosts: TestHosts) -> Host:
    return hosts.start("edit-sftp")


@pytest.fixture(params=["sftp", "shell"])
def via(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def host(via: str, withsftp: Host, nosftp: Host) -> Host:
    return withsftp if via == "sftp" else nosftp


@pytest.fixture
def audit(tmp_path: Path) -> AuditLog:
    return AuditLog(tmp_path / "audit")


@pytest.fixture
async def session(host: Host, audit: AuditLog) -> AsyncIterator[RemoteBashSession]:
    async with RemoteBashSession(host, audit=audit, kill_grace=0.5) as s:
        yield s


def put(path: Path, data: bytes | str, mode: int = 0o644) -> Path:
    """A file owned by the remote user."""
    missing = [p for p in [path.parent, *path.parent.parents] if not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    for folder in missing:
        owner = folder.parent.stat()
        os.chown(folder, owner.st_uid, owner.st_gid)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    owner = path.parent.stat()
    os.chown(path, owner.st_uid, owner.st_gid)
    path.chmod(mode)  # after chown, which clears set-id bits
    return path


_ids = iter(range(1, 1_000_000))


def use(tool_input: dict[str, Any], *, id: str | None = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": id or f"toolu_e{next(_ids)}", "name": "str_replace_based_edit_tool",
            "input": tool_input}


async def edit(session: RemoteBashSession, **tool_input: Any) -> dict[str, Any]:
    return await EditTool(session).handle(use(tool_input))


def events(audit: AuditLog, host: Host) -> list[dict[str, Any]]:
    return list(audit.read(host.name))


# -- view ---------------------------------------------------------------------------------


async def test_view_numbers_lines(session: RemoteBashSession, work: Path) -> None:
    f = put(work / "a.txt", "one\ntwo\n\tthree\n")
    result = await edit(session, command="view", path=str(f))
    assert result["is_error"] is False
    assert result["content"] == (f"Here's the content of {f} with line numbers:\n"
                                 "     1\tone\n     2\ttwo\n     3\t\tthree")


@pytest.mark.parametrize(("view_range", "shown"), [
    ([2, 3], ["     2\tl2", "     3\tl3"]),
    ([4, -1], ["     4\tl4", "     5\tl5"]),
    ([5, 5], ["     5\tl5"]),
    ([3, 99], ["     3\tl3", "     4\tl4", "     5\tl5"]),
])
async def test_view_range(session: RemoteBashSession, work: Path, view_range: list[int], shown: list[str]) -> None:
    f = put(work / "r.txt", "".join(f"l{i}\n" for i in range(1, 6)))
    result = await edit(session, command="view", path=str(f), view_range=view_range)
    assert result["is_error"] is False
    assert result["content"].splitlines()[1:] == shown
    assert "of 5)" in result["content"].splitlines()[0]


@pytest.mark.parametrize(("view_range", "says"), [
    ([0, 2], "outside the file"), ([6, 7], "has 5 line(s)"), ([3, 2], "before its start"),
    ([1], "two integers"), (["1", "2"], "two integers"), ([True, 2], "two integers"),
])
async def test_view_range_errors(session: RemoteBashSession, work: Path, view_range: Any, says: str) -> None:
    f = put(work / "r.txt", "".join(f"l{i}\n" for i in range(1, 6)))
    result = await edit(session, command="view", path=str(f), view_range=view_range)
    assert result["is_error"] is True
    assert says in result["content"]


async def test_view_directory_two_levels_without_hidden(session: RemoteBashSession, work: Path) -> None:
    put(work / "top.txt", "x")
    put(work / "sub" / "inner.txt", "x")
    put(work / "sub" / "deeper" / "too-deep.txt", "x")
    put(work / ".hidden" / "secret.txt", "x")
    put(work / "sub" / ".dot", "x")
    result = await edit(session, command="view", path=str(work) + "/")
    assert result["is_error"] is False
    lines = result["content"].splitlines()
    assert "up to 2 levels deep" in lines[0]
    assert lines[1:] == [str(work), f"{work}/sub/", f"{work}/sub/deeper/", f"{work}/sub/inner.txt",
                         f"{work}/top.txt"]


@pytest.mark.parametrize(("setup", "says"), [
    ("missing", "does not exist"),
    ("binary", "looks binary"),
    ("big", "view part of it with view_range"),
    ("fifo", "neither a regular file nor a directory"),
])
async def test_view_errors_say_what_to_do(session: RemoteBashSession, work: Path, setup: str, says: str) -> None:
    f = work / "thing"
    if setup == "binary":
        put(f, b"\x7fELF\x00\x01\x02")
    elif setup == "big":
        put(f, ("x" * 99 + "\n") * (VIEW_LIMIT // 100 + 10))
    elif setup == "fifo":
        os.mkfifo(f)
    result = await edit(session, command="view", path=str(f))
    assert result["is_error"] is True
    assert says in result["content"]


async def test_a_big_file_can_be_viewed_in_part(session: RemoteBashSession, work: Path) -> None:
    f = put(work / "big.log", "".join(f"line {i:07d} {'.' * 40}\n" for i in range(1, VIEW_LIMIT // 40)))
    result = await edit(session, command="view", path=str(f), view_range=[100, 101])
    assert result["is_error"] is False
    assert result["content"].splitlines()[1:] == [f"   100\tline 0000100 {'.' * 40}",
                                                  f"   101\tline 0000101 {'.' * 40}"]


async def test_a_file_over_the_read_cap_is_refused(session: RemoteBashSession, work: Path) -> None:
    f = put(work / "huge.log", b"")
    with f.open("wb") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)  # sparse: the size is what counts
    result = await edit(session, command="view", path=str(f), view_range=[1, 2])
    assert result["is_error"] is True and "reads files up to" in result["content"]


async def test_nothing_is_done_when_it_cannot_be_audited(host: Host, work: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    async with RemoteBashSession(host, audit=AuditLog(blocker / "audit")) as s:
        result = await edit(s, command="create", path=str(work / "never.txt"), file_text="x")
    assert result["is_error"] is True and "could not be audited" in result["content"]
    assert not (work / "never.txt").exists()


async def test_relative_path_is_refused_before_anything(session: RemoteBashSession, audit: AuditLog,
                                                       host: Host) -> None:
    result = await edit(session, command="view", path="etc/hosts")
    assert result["is_error"] is True
    assert "must be absolute" in result["content"] and "'/etc/hosts'" in result["content"]
    assert not [r for r in events(audit, host) if r["event"].startswith("edit.")]


# -- str_replace ----------------------------------------------------------------------------


async def test_str_replace_once_returns_a_snippet(session: RemoteBashSession, work: Path) -> None:
    f = put(work / "app.conf", "".join(f"key{i} = {i}\n" for i in range(1, 21)))
    result = await edit(session, command="str_replace", path=str(f), old_str="key10 = 10\n",
                        new_str="key10 = ten\nkey10b = more\n")
    assert result["is_error"] is False
    assert "     6\tkey6 = 6" in result["content"] and "    10\tkey10 = ten" in result["content"]
    assert "    11\tkey10b = more" in result["content"] and "    15\tkey14 = 14" in result["content"]
    assert "     5\t" not in result["content"] and "    16\t" not in result["content"]
    assert "key10 = ten\nkey10b = more\nkey11 = 11\n" in f.read_text()


async def test_str_replace_no_match_and_several(session: RemoteBashSession, work: Path) -> None:
    text = "a = 1\nb = 2\na = 1\nc = 3\na = 1\n"
    f = put(work / "dup.conf", text)
    none = await edit(session, command="str_replace", path=str(f), old_str="z = 9", new_str="x")
    assert none["is_error"] is True and "does not occur" in none["content"]
    several = await edit(session, command="str_replace", path=str(f), old_str="a = 1", new_str="a = 2")
    assert several["is_error"] is True
    assert "occurs 3 times" in several["content"] and "line(s) 1, 3, 5" in several["content"]
    overlapping = await edit(session, command="str_replace", path=str(put(work / "o", "aaa\n")), old_str="aa",
                             new_str="b")
    assert overlapping["is_error"] is True and "2 times (overlapping)" in overlapping["content"]
    assert f.read_text() == text


async def test_str_replace_keeps_crlf_final_newline_mode_and_invalid_bytes(session: RemoteBashSession,
                                                                           work: Path) -> None:
    crlf = put(work / "win.ini", b"[a]\r\nx=1\r\ny=2\r\n", 0o640)
    result = await edit(session, command="str_replace", path=str(crlf), old_str="x=1\ny=2", new_str="x=5\ny=2")
    assert result["is_error"] is False, result
    assert crlf.read_bytes() == b"[a]\r\nx=5\r\ny=2\r\n"
    assert stat.S_IMODE(crlf.stat().st_mode) == 0o640
    bare = put(work / "bare.sh", "#!/bin/sh\necho hi", 0o4750)
    await edit(session, command="str_replace", path=str(bare), old_str="echo hi", new_str="echo bye")
    assert bare.read_bytes() == b"#!/bin/sh\necho bye"
    assert stat.S_IMODE(bare.stat().st_mode) == 0o4750  # set-id bits too
    latin = put(work / "latin1.txt", b"caf\xe9 = 1\nname = x\n")
    view = await edit(session, command="view", path=str(latin))
    assert "caf\ufffd" in view["content"] and "not valid UTF-8" in view["content"]
    done = await edit(session, command="str_replace", path=str(latin), old_str="name = x", new_str="name = y")
    assert done["is_error"] is False
    assert latin.read_bytes() == b"caf\xe9 = 1\nname = y\n"


async def test_write_is_atomic_and_keeps_owner(session: RemoteBashSession, work: Path, hosts: TestHosts) -> None:
    f = put(work / "atomic.txt", "old\n")
    inode = f.stat().st_ino
    result = await edit(session, command="str_replace", path=str(f), old_str="old", new_str="new")
    assert result["is_error"] is False
    assert f.stat().st_ino != inode  # replaced by a rename, not rewritten in place
    assert f.stat().st_uid == pwd.getpwnam(hosts.user).pw_uid
    assert sorted(p.name for p in work.iterdir()) == ["atomic.txt"]  # no temporary file left


async def test_an_owner_the_user_may_not_keep_is_said(session: RemoteBashSession, work: Path) -> None:
    f = put(work / "grouped.conf", "a = 1\n", 0o664)
    os.chown(f, f.stat().st_uid, 0)  # group root: the remote user is not a member and cannot give it back
    result = await edit(session, command="str_replace", path=str(f), old_str="a = 1", new_str="a = 2")
    assert result["is_error"] is False
    assert "belonged to uid" in result["content"] and "gid 0" in result["content"]
    assert f.read_text() == "a = 2\n" and stat.S_IMODE(f.stat().st_mode) == 0o664


async def test_undecodable_bytes_cannot_be_matched_and_are_kept(session: RemoteBashSession, work: Path) -> None:
    f = put(work / "latin.txt", b"caf\xe9\n")
    result = await edit(session, command="str_replace", path=str(f), old_str="caf\ufffd", new_str="cafe")
    assert result["is_error"] is True and "not UTF-8" in result["content"]
    assert f.read_bytes() == b"caf\xe9\n"


async def test_a_symlink_edits_its_target(session: RemoteBashSession, work: Path) -> None:
    target = put(work / "real" / "conf", "port = 80\n")
    link = work / "link"
    link.symlink_to(target)
    os.lchown(link, target.stat().st_uid, target.stat().st_gid)
    result = await edit(session, command="str_replace", path=str(link), old_str="80", new_str="8080")
    assert result["is_error"] is False
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "port = 8080\n"


# -- insert ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("before", "line", "text", "after"), [
    ("a\nb\n", 0, "x", "x\na\nb\n"),
    ("a\nb\n", 1, "x\ny\n", "a\nx\ny\nb\n"),
    ("a\nb\n", 2, "x", "a\nb\nx\n"),
    ("a\nb", 2, "x", "a\nb\nx"),
    ("", 0, "x\n", "x\n"),
])
async def test_insert(session: RemoteBashSession, work: Path, before: str, line: int, text: str,
                      after: str) -> None:
    f = put(work / "ins.txt", before)
    result = await edit(session, command="insert", path=str(f), insert_line=line, insert_text=text)
    assert result["is_error"] is False, result
    assert f.read_text() == after


async def test_insert_accepts_new_str_as_documented(session: RemoteBashSession, work: Path) -> None:
    f = put(work / "ins.txt", "a\n")
    result = await edit(session, command="insert", path=str(f), insert_line=1, new_str="b")
    assert result["is_error"] is False
    assert f.read_text() == "a\nb\n"


@pytest.mark.parametrize("line", [-1, 4, 100])
async def test_insert_outside_names_the_line_count(session: RemoteBashSession, work: Path, line: int) -> None:
    f = put(work / "ins.txt", "a\nb\nc\n")
    result = await edit(session, command="insert", path=str(f), insert_line=line, insert_text="x")
    assert result["is_error"] is True
    assert "has 3 line(s)" in result["content"] and "from 0 (before the first line) to 3" in result["content"]
    assert f.read_text() == "a\nb\nc\n"


# -- create ----------------------------------------------------------------------------------


async def test_create_then_refuse_to_overwrite(session: RemoteBashSession, work: Path) -> None:
    f = work / "new.service"
    made = await edit(session, command="create", path=str(f), file_text="[Unit]\nDescription=x\n")
    assert made["is_error"] is False and "created" in made["content"]
    assert f.read_text() == "[Unit]\nDescription=x\n"
    assert stat.S_IMODE(f.stat().st_mode) == 0o644
    again = await edit(session, command="create", path=str(f), file_text="other")
    assert again["is_error"] is True and "create never overwrites" in again["content"]
    assert f.read_text() == "[Unit]\nDescription=x\n"
    nodir = await edit(session, command="create", path=str(work / "no" / "such" / "f"), file_text="x")
    assert nodir["is_error"] is True and "does not exist" in nodir["content"]


async def test_permission_denied_is_an_error(session: RemoteBashSession, work: Path) -> None:
    f = work / "root-only"
    f.write_text("secret\n")
    f.chmod(0o600)  # owned by root
    result = await edit(session, command="view", path=str(f))
    assert result["is_error"] is True
    result = await edit(session, command="str_replace", path=str(f), old_str="secret", new_str="x")
    assert result["is_error"] is True
    assert f.read_text() == "secret\n"


# -- inputs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("tool_input", "says"), [
    ({"command": "view"}, "'path' must be a string"),
    ({"command": "delete", "path": "/x"}, "'command' must be one of"),
    ({"command": "undo_edit", "path": "/x"}, "undo_edit is not part of text_editor_20250728"),
    ({"command": "create", "path": "/x"}, "create needs 'file_text'"),
    ({"command": "str_replace", "path": "/x"}, "str_replace needs 'old_str'"),
    ({"command": "insert", "path": "/x", "insert_line": 1}, "insert needs 'insert_text'"),
    ({"command": "view", "path": "/x", "mode": 1}, "unknown input field(s) 'mode'"),
    ({"command": "create", "path": "/x", "file_text": 3}, "'file_text' must be a string"),
    ({"command": "create", "path": "/x", "file_text": "a\x00b"}, "NUL byte"),
    ({"command": "create", "path": "/x", "file_text": "x" * (MAX_TEXT_CHARS + 1)}, "the limit is"),
    ("view /x", "must be an object"),
])
async def test_bad_inputs(session: RemoteBashSession, tool_input: Any, says: str) -> None:
    result = await EditTool(session).handle(use(tool_input))
    assert result["is_error"] is True
    assert says in result["content"]


# -- policy, audit, redaction, bounds --------------------------------------------------------


async def test_policy_refuses_before_sending(hosts: TestHosts, host: Host, audit: AuditLog, work: Path) -> None:
    secret = put(work / "secret" / "key", "k\n")
    open_file = put(work / "open.txt", "o\n")
    link = work / "sneaky"
    link.symlink_to(secret)
    policy = EditPolicy(allow=[str(work)], deny=[str(work / "secret")])
    gated = host.model_copy(update={"edit": policy})
    async with RemoteBashSession(gated, audit=audit) as s:
        denied = await edit(s, command="view", path=str(secret))
        assert denied["is_error"] is True and "refused before anything was sent" in denied["content"]
        outside = await edit(s, command="view", path="/etc/hostname")
        assert outside["is_error"] is True and "outside the paths" in outside["content"]
        through = await edit(s, command="str_replace", path=str(link), old_str="k", new_str="z")
        assert through["is_error"] is True and "link" in through["content"]
        ok = await edit(s, command="view", path=str(open_file))
        assert ok["is_error"] is False
    records = events(audit, gated)
    refusals = [r for r in records if r["event"] == "policy.denied"]
    assert [r["path"] for r in refusals] == [str(secret), "/etc/hostname", str(secret)]
    starts = [r["path"] for r in records if r["event"] == "edit.start"]
    assert starts == [str(link), str(open_file)]  # the refused ones never started
    assert secret.read_text() == "k\n"
    read_only = host.model_copy(update={"edit": EditPolicy(read_only=True)})
    async with RemoteBashSession(read_only, audit=audit) as s:
        assert (await edit(s, command="view", path=str(open_file)))["is_error"] is False
        refused = await edit(s, command="insert", path=str(open_file), insert_line=0, insert_text="x")
        assert refused["is_error"] is True and "read-only" in refused["content"]
    assert open_file.read_text() == "o\n"


async def test_audit_records_and_show(session: RemoteBashSession, audit: AuditLog, host: Host, work: Path,
                                      via: str) -> None:
    f = put(work / "db.conf", "user = app\npassword = hunter22\n")
    before = hashlib.sha256(f.read_bytes()).hexdigest()
    tool = EditTool(session)
    result = await tool.handle(use({"command": "str_replace", "path": str(f), "old_str": "user = app",
                                    "new_str": "user = web"}, id="toolu_audit1"))
    assert result["is_error"] is False
    assert "hunter22" not in result["content"] and "[REDACTED" in result["content"]
    records = [r for r in events(audit, host) if r.get("tool_use_id") == "toolu_audit1"]
    assert [r["event"] for r in records] == ["edit.start", "edit.end"]
    end = records[1]
    assert end["path"] == str(f) and end["command"] == "str_replace" and end["via"] == via
    assert end["sha256_before"] == before
    assert end["sha256_after"] == hashlib.sha256(f.read_bytes()).hexdigest()
    assert end["bytes_written"] == len(f.read_bytes())
    assert "-user = app" in end["diff"] and "+user = web" in end["diff"]
    assert "hunter22" not in str(records)
    shown = "\n".join(format_records(records))
    assert f"str_replace {f}" in shown and f"wrote={end['bytes_written']}" in shown


async def test_result_is_redacted_and_bounded(hosts: TestHosts, host: Host, work: Path) -> None:
    f = put(work / "long.txt", "token: ghp_" + "A" * 36 + "\n" + "".join(f"{i}\n" for i in range(5000)))
    small = host.model_copy(update={"output_limit": 400})
    async with RemoteBashSession(small) as s:
        result = await edit(s, command="view", path=str(f))
    assert result["is_error"] is False
    assert "ghp_" not in result["content"]
    assert "characters cut" in result["content"] and len(result["content"]) < 600


async def test_max_characters(session: RemoteBashSession, work: Path) -> None:
    f = put(work / "m.txt", "".join(f"{i}\n" for i in range(100)))
    tool = EditTool(session, max_characters=50)
    assert tool.to_dict() == {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool",
                              "max_characters": 50}
    assert EditTool(session).to_dict() == {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}
    result = await tool.handle(use({"command": "view", "path": str(f)}))
    assert "cut at 50 characters" in result["content"]
    assert "    99\t" not in result["content"]


# -- ordering --------------------------------------------------------------------------------


async def test_concurrent_edits_of_one_file_all_land(session: RemoteBashSession, work: Path) -> None:
    f = put(work / "list.txt", "start\n")
    tool = EditTool(session)
    results = await asyncio.gather(*[
        tool.handle(use({"command": "str_replace", "path": str(f), "old_str": "start\n",
                         "new_str": f"start\nitem{i}\n"})) for i in range(8)])
    assert all(r["is_error"] is False for r in results)
    assert sorted(f.read_text().splitlines()) == sorted(["start", *[f"item{i}" for i in range(8)]])


async def test_an_edit_waits_for_the_running_command(session: RemoteBashSession, work: Path) -> None:
    f = put(work / "race.txt", "a\n")
    marker = work / "started"
    command = asyncio.ensure_future(session.run(
        f"touch {marker}; sleep 1; echo b >> {f}", timeout=30))
    await wait_for(marker.exists, within=10, what="the command to start")
    result = await edit(session, command="insert", path=str(f), insert_line=0, insert_text="first")
    await command
    assert result["is_error"] is False
    assert f.read_text() == "first\na\nb\n"  # the edit saw the command's line: it ran after it


async def test_call_for_the_sdk_runner(session: RemoteBashSession, work: Path) -> None:
    from anthropic.lib.tools import BetaAsyncBuiltinFunctionTool, ToolError

    tool = EditTool(session)
    assert isinstance(tool, BetaAsyncBuiltinFunctionTool)
    assert tool.name == "str_replace_based_edit_tool"
    f = put(work / "c.txt", "x\n")
    assert (await tool.call({"command": "view", "path": str(f)})).endswith("     1\tx")
    with pytest.raises(ToolError) as info:
        await tool.call({"command": "view", "path": "x"})
    assert info.value.content.startswith("Error: 'path' must be absolute")


async def test_writes_follow_the_hosts_approval_rules(host: Host, audit: AuditLog, work: Path) -> None:
    from remote_bash.approval import Approval, Need
    from remote_bash.models import WritesOutsideRule

    asked: list[str] = []

    async def yes(_host: Host, command: str, need: Need) -> Approval:
        asked.append(command)
        return Approval(True, "once", by="tester")

    inside = work / "inside.txt"
    outside = Path("/tmp") / f"rbedit-outside-{uuid.uuid4().hex[:8]}"
    ruled = host.model_copy(update={"approve": [WritesOutsideRule(writes_outside=[str(work)])]})
    async with RemoteBashSession(ruled, audit=audit) as s:
        assert (await edit(s, command="create", path=str(inside), file_text="x\n"))["is_error"] is False
        refused = await edit(s, command="create", path=str(outside), file_text="x\n")
        assert refused["is_error"] is True and "needs a person's approval" in refused["content"]
        assert not outside.exists()
        assert (await edit(s, command="view", path=str(inside)))["is_error"] is False  # reading asks nothing
        approved = await EditTool(s, approver=yes).handle(use({"command": "create", "path": str(outside),
                                                                "file_text": "y\n"}))
    try:
        assert approved["is_error"] is False and outside.read_text() == "y\n"
        assert asked == [f"# text editor: create '{outside}'\ncat > '{outside}'"]
        answers = [r for r in audit.read(ruled.name) if r["event"] == "approval.answered"]
        assert [r["approved"] for r in answers] == [False, True]
    finally:
        outside.unlink(missing_ok=True)


async def test_the_readmes_editor_example_runs_as_shown(session: RemoteBashSession, work: Path) -> None:
    (snippet,) = python_snippets("The text editor tool")
    conf = put(work / "app.conf", "[server]\nworkers = 2\nport = 8080\n")
    code, stated = checked(snippet.replace("/etc/app.conf", str(conf)), "seen.append")
    body = "".join(f"    {line}\n" for line in code.splitlines())
    namespace: dict[str, Any] = {}
    # The README's own text, run as the body of a user's async function: exec is the point here.
    exec(f"async def example(session, seen):\n{body}", namespace)  # noqa: S102
    seen: list[Any] = []
    await namespace["example"](session, seen)
    assert len(seen) == len(stated) == 1
    assert matches(stated[0], seen[0]), seen[0]
    assert conf.read_text() == "[server]\nworkers = 4\nport = 8080\n"


# -- what is shown and recorded is cleaned as bash output is ------------------------------------


async def test_view_and_edits_are_stripped_and_masked_as_bash_output(session: RemoteBashSession, audit: AuditLog,
                                                                      host: Host, work: Path) -> None:
    raw = b"pass\x1b[0mword=hunter22\nc1 \x1b]52;c;cHduZWQ=\x07\nXXXXXXXX=hunter23\rpassword\nplain\n"
    f = put(work / "e.txt", raw)
    bash = await session.run(f"cat {f}")
    assert "hunter22" not in bash.output and "hunter23" not in bash.output
    view = await edit(session, command="view", path=str(f))
    assert view["is_error"] is False
    shown = view["content"]
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown
    assert "hunter22" not in shown and "hunter23" not in shown and "cHduZWQ" not in shown
    assert "     4\tplain" in shown and "line(s) 1, 2, 3 hold terminal control characters" in shown
    done = await edit(session, command="str_replace", path=str(f), old_str="plain", new_str="plain2")
    assert done["is_error"] is False
    assert "\x1b" not in done["content"] and "hunter2" not in done["content"]
    assert f.read_bytes() == raw.replace(b"plain", b"plain2")  # the file itself is edited byte for byte
    made = await edit(session, command="create", path=str(work / "n.txt"), file_text=raw.decode())
    assert made["is_error"] is False and (work / "n.txt").read_bytes() == raw
    diffs = [r["diff"] for r in events(audit, host) if r["event"] == "edit.end" and "diff" in r]
    assert len(diffs) == 2
    for diff in diffs:
        assert "\x1b" not in diff and "\r" not in diff and "hunter2" not in diff and "cHduZWQ" not in diff


async def test_the_audit_diff_is_masked_before_it_is_cut(session: RemoteBashSession, audit: AuditLog, host: Host,
                                                         work: Path) -> None:
    f = put(work / "t.txt", "a\nb\n")
    token = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    done = await edit(session, command="str_replace", path=str(f), old_str="b", new_str="y" * 1928 + " " + token)
    assert done["is_error"] is False
    (diff,) = [r["diff"] for r in events(audit, host) if r["event"] == "edit.end"]
    assert "ghp_" not in diff and "A1b2C3" not in diff
    assert diff.endswith("[... diff cut at 2,000 characters]") and "\n+yyy" not in diff


MULTI_LINE_SECRETS = (
    "db:\n  password:\n\n    YamlS3cretV\n"
    "- name: DB_PASSWORD\n  value: K8sS3cretV\n"
    "<password>\n\nXmlS3cretV\n</password>\n"
    "<password\n  id=\"1\">XmlAttrS3cretV</password>\n"
)


async def test_views_snippets_and_diffs_mask_values_on_a_later_line(session: RemoteBashSession, audit: AuditLog,
                                                                    host: Host, work: Path) -> None:
    """Masked before the lines are numbered or prefixed: a number or a diff's +/- before a line
    would hide a value on the line after its key."""
    f = put(work / "m.yaml", MULTI_LINE_SECRETS)
    secrets = ("YamlS3cretV", "K8sS3cretV", "XmlS3cretV", "XmlAttrS3cretV")
    bash = await session.run(f"cat {f}")
    assert not any(s in bash.output for s in secrets), bash.output
    view = await edit(session, command="view", path=str(f))
    assert not any(s in view["content"] for s in secrets), view["content"]
    assert "     4\t    [REDACTED:password]" in view["content"]  # every line keeps its number
    for first in range(1, 12):
        part = await edit(session, command="view", path=str(f), view_range=[first, -1])
        assert not any(s in part["content"] for s in secrets), (first, part["content"])
    done = await edit(session, command="str_replace", path=str(f), old_str="K8sS3cretV", new_str="K8sN3wV")
    assert done["is_error"] is False and "K8sN3wV" not in done["content"] and "K8sS3cretV" not in done["content"]
    await edit(session, command="str_replace", path=str(f), old_str="YamlS3cretV", new_str="YamlN3wV")
    await edit(session, command="str_replace", path=str(f), old_str="XmlS3cretV", new_str="XmlN3wV")
    diffs = [r["diff"] for r in events(audit, host) if r["event"] == "edit.end" and "diff" in r]
    assert len(diffs) == 3
    for diff in diffs:
        assert not any(s in diff for s in (*secrets, "K8sN3wV", "YamlN3wV", "XmlN3wV")), diff
        assert "\n-" in diff and "\n+" in diff and "[REDACTED:password]" in diff
    assert "+  value: [REDACTED:password]" in diffs[0]
    assert "\n-[REDACTED:password]\n+[REDACTED:password]\n" in diffs[2]  # XML text: its -/+ kept


async def test_a_view_keeps_the_lines_after_a_key_with_no_value(session: RemoteBashSession, work: Path) -> None:
    """Lines are masked once, before they are numbered: a line's number and indentation are not a
    value of the key on the line before."""
    f = put(work / "k.yaml", "password:\nother: visible1\n<password>\n</password>\nsecret:\n\n  s3cretV\n")
    for view in (await edit(session, command="view", path=str(f)),
                 await edit(session, command="view", path=str(f), view_range=[1, -1])):
        shown = view["content"]
        assert "     2\tother: visible1\n" in shown and "     4\t</password>" in shown, shown
        assert "     6\t\n" in shown and "     7\t  [REDACTED:secret]" in shown and "s3cretV" not in shown
    done = await edit(session, command="insert", path=str(f), insert_line=1, insert_text="added: 1\n")
    assert "     2\tadded: 1\n     3\tother: visible1\n" in done["content"], done["content"]


async def test_a_range_inside_a_private_key_block_is_masked(session: RemoteBashSession, work: Path) -> None:
    key = work / "key.pem"
    await asyncio.to_thread(subprocess.run, ["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", "",
                                             "-f", str(key)], check=True, capture_output=True, timeout=60)
    os.chmod(key, 0o644)
    body = key.read_text().splitlines()[2:5]
    assert all(len(line) > 40 for line in body)
    for view_range in ([3, 4], [2, 2], [5, -1], [1, 3]):
        part = await edit(session, command="view", path=str(key), view_range=view_range)
        assert part["is_error"] is False
        assert not any(line in part["content"] or line[:20] in part["content"] for line in body), part["content"]
        assert "[REDACTED:private-key]" in part["content"]
    whole = await edit(session, command="view", path=str(key))
    count = len(key.read_text().splitlines())
    assert whole["content"].count("[REDACTED:private-key]") == count  # a mask on each line, numbers kept
    assert f"{count:>6}\t[REDACTED:private-key]" in whole["content"]


async def test_file_names_are_masked(session: RemoteBashSession, audit: AuditLog, host: Host, work: Path) -> None:
    folder = work / "names"
    folder.mkdir()
    os.chown(folder, work.stat().st_uid, work.stat().st_gid)
    made = await edit(session, command="create", path=str(folder / "password=hunter33"), file_text="x\n")
    assert made["is_error"] is False and (folder / "password=hunter33").read_text() == "x\n"
    assert "hunter33" not in made["content"]
    listing = await edit(session, command="view", path=str(folder))
    assert "hunter33" not in listing["content"] and f"{folder}/password=[REDACTED" in listing["content"]
    viewed = await edit(session, command="view", path=str(folder / "password=hunter33"))
    assert viewed["is_error"] is False and "hunter33" not in viewed["content"]
    assert "hunter33" not in str(events(audit, host))


async def test_a_listing_shows_only_what_the_policy_lets_view(host: Host, audit: AuditLog, work: Path) -> None:
    ok = work / "ok"
    put(ok / "a.txt", "a\n")
    put(ok / "secret" / "key.pem", "k\n")
    put(work / "notok" / "n.txt", "n\n")
    (ok / "etclink").symlink_to("/etc")
    (ok / "dl").symlink_to(work / "notok")
    gated = host.model_copy(update={"edit": EditPolicy(allow=[str(ok)], deny=[str(ok / "secret")])})
    async with RemoteBashSession(gated, audit=audit) as s:
        listing = await edit(s, command="view", path=str(ok))
        assert listing["is_error"] is False
        lines = listing["content"].splitlines()
        assert lines[1:-1] == [str(ok), f"{ok}/a.txt", f"{ok}/dl/", f"{ok}/etclink/"]
        assert "(2 entries this host's edit policy refuses to view left out)" in lines[-1]
        through = await edit(s, command="view", path=str(ok / "dl"))
        assert through["is_error"] is True and "outside the paths" in through["content"]


async def test_a_write_through_a_link_is_put_to_the_approval_rules_as_its_target(host: Host, audit: AuditLog,
                                                                                 work: Path) -> None:
    from remote_bash.approval import Approval, Need
    from remote_bash.models import WritesOutsideRule

    asked: list[str] = []

    async def yes(_host: Host, command: str, need: Need) -> Approval:
        asked.append(command)
        return Approval(True, "once", by="tester")

    ok = work / "ok"
    put(ok / "in.txt", "i\n")
    target = put(work / "notok" / "t", "old\n")
    (ok / "fl").symlink_to(target)
    ruled = host.model_copy(update={"approve": [WritesOutsideRule(writes_outside=[str(ok)])]})
    async with RemoteBashSession(ruled, audit=audit) as s:
        refused = await edit(s, command="str_replace", path=str(ok / "fl"), old_str="old", new_str="new")
        assert refused["is_error"] is True and "needs a person's approval" in refused["content"]
        assert target.read_text() == "old\n"
        inside = await edit(s, command="str_replace", path=str(ok / "in.txt"), old_str="i", new_str="j")
        assert inside["is_error"] is False  # a write inside asks nothing
        approved = await EditTool(s, approver=yes).handle(use({"command": "str_replace", "path": str(ok / "fl"),
                                                                "old_str": "old", "new_str": "new"}))
    assert approved["is_error"] is False and target.read_text() == "new\n"
    assert asked == [f"# text editor: str_replace '{ok}/fl' (a link to '{target}')\ncat > '{target}'"]


async def test_a_star_in_the_edit_policy_stops_at_a_slash(host: Host, audit: AuditLog, work: Path) -> None:
    top = put(work / "x.conf", "top\n")
    deep = put(work / "sub" / "deep" / "x.conf", "deep\n")
    gated = host.model_copy(update={"edit": EditPolicy(allow=[f"{work}/*.conf", f"{work}/any/**/*.conf"],
                                                       deny=[f"{work}/*.key"])})
    put(work / "any" / "a" / "b" / "y.conf", "y\n")
    put(work / "sub" / "z.key", "k\n")
    async with RemoteBashSession(gated, audit=audit) as s:
        assert (await edit(s, command="view", path=str(top)))["is_error"] is False
        refused = await edit(s, command="view", path=str(deep))
        assert refused["is_error"] is True and "outside the paths" in refused["content"]
        assert (await edit(s, command="view", path=f"{work}/any/a/b/y.conf"))["is_error"] is False
        denied = await edit(s, command="view", path=f"{work}/sub/z.key")  # a deny covers no less than it did
        assert denied["is_error"] is True and "outside the paths" not in denied["content"]
