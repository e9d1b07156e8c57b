"""What real shells and real daemons do to a session, against a real OpenSSH sshd on loopback:
redirections of the shell itself, the user's traps, ``kill 0``, daemons that leave the process tree
and rewrite their environment (with and without a per-login cgroup), kill noise, and history."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from remote_bash import Host, RemoteBashSession
from remote_bash.tool import format_result

from .cgroup_sshd import cgroup_sshd, cgroup_support, members
from .sshd import TestHosts, processes_with
from .waiting import wait_for


def marker() -> str:
    return f"rbmark{uuid.uuid4().hex[:10]}"


def _pids(mark: str, user: str) -> list[int]:
    return [int(line.split()[0]) for line in processes_with(mark, user)]


@contextlib.contextmanager
def _reaped(mark: str, user: str) -> Iterator[None]:
    """Whatever a test left running under ``mark`` is stopped at its end (by pid)."""
    try:
        yield
    finally:
        for pid in _pids(mark, user):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# -- the shell's own stdout and stderr ------------------------------------------------------


@pytest.mark.parametrize(
    "redirect",
    ["exec >{log} 2>&1", "exec 2>/dev/null", "exec 1>&-", "exec 1>&- 2>&-", "exec >/dev/null"],
)
async def test_redirecting_the_shell_does_not_blind_the_next_call(session: RemoteBashSession, tmp_path: Path,
                                                                  redirect: str) -> None:
    log = f"/tmp/rb-redirect-{uuid.uuid4().hex[:8]}.log"
    try:
        r = await session.run(f"{redirect.format(log=log)}; echo in-the-same-call; ls /nonexistent-rb")
        assert "rb-redirect" not in r.output
        after = await session.run("echo visible; ls /nonexistent-rb")
        assert after.output.startswith("visible\n")
        assert "nonexistent-rb" in after.output
        assert after.exit_code == 2
    finally:
        await session.run(f"rm -f {log}")


async def test_a_redirection_lasts_for_the_rest_of_its_call(session: RemoteBashSession) -> None:
    log = f"/tmp/rb-redirect-{uuid.uuid4().hex[:8]}.log"
    r = await session.run(f"exec >{log} 2>&1; echo hidden; echo err >&2")
    assert r.output == ""
    after = await session.run(f"cat {log}; rm -f {log}")
    assert after.output == "hidden\nerr\n"


# -- the user's traps -----------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "set -x; ", "set -e; set +e; "])
async def test_err_trap_runs_once_for_the_failing_command(session: RemoteBashSession, prefix: str) -> None:
    await session.run(prefix + """trap 'echo "ERR line=$LINENO cmd=$BASH_COMMAND" >&2' ERR""")
    r = await session.run('echo "at $LINENO"; false')
    lines = [line for line in r.output.splitlines() if line.startswith("ERR ")]
    assert lines and len(lines) == 1, r.output
    at = re.search(r"at (\d+)", r.output)
    assert at is not None
    assert lines[0] == f"ERR line={at.group(1)} cmd=false"
    assert r.exit_code == 1
    await session.run("set +x; trap - ERR")


async def test_err_trap_in_a_multi_line_command_names_the_users_line(session: RemoteBashSession) -> None:
    await session.run("""trap 'echo "ERR $BASH_COMMAND"' ERR""")
    r = await session.run("echo one\nls /nonexistent-rb 2>/dev/null\necho two")
    assert r.output == "one\nERR ls /nonexistent-rb 2> /dev/null\ntwo\n"
    r = await session.run("cat <<EOF\nbody\nEOF\nfalse")
    assert r.output.count("ERR") == 1 and "ERR false" in r.output
    await session.run("trap - ERR")


async def test_err_trap_and_set_e_still_end_the_shell(session: RemoteBashSession) -> None:
    r = await session.run("""trap 'echo "ERR $BASH_COMMAND"' ERR; set -e; false; echo not-reached""")
    assert r.shell_lost
    assert r.output == "ERR false\n"


# -- kill 0 --------------------------------------------------------------------------------


@pytest.mark.parametrize("kill", ["kill 0", "kill -TERM 0", "kill -HUP 0", "kill -s TERM 0"])
async def test_kill_0_keeps_the_shell_and_its_state(session: RemoteBashSession, kill: str) -> None:
    await session.run("cd /tmp && export KEEP=kept && kept_fn() { echo fn-ok; }")
    r = await session.run(f"{kill}; echo after")
    assert not r.shell_lost
    assert r.output.endswith("after\n")
    after = await session.run("pwd; echo $KEEP; kept_fn")
    assert after.output == "/tmp\nkept\nfn-ok\n"


async def test_kill_0_in_a_script_stops_that_scripts_processes(session: RemoteBashSession,
                                                               hosts: TestHosts) -> None:
    mark = marker()
    with _reaped(mark, hosts.user):
        await session.run("cd /tmp && export KEEP=kept")
        r = await session.run(f"bash -c 'trap \"kill 0\" EXIT; (sleep 300; : {mark}) & sleep 0.2'; echo status=$?",
                              timeout=20)
        assert not r.shell_lost and not r.timed_out
        assert "status=143" in r.output
        await wait_for(lambda: not processes_with(mark, hosts.user),
                       within=10, what="the script's worker to be stopped")
        assert (await session.run("pwd; echo $KEEP")).output == "/tmp\nkept\n"


# -- kill noise ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", [
    "echo started; sleep 100",
    "echo started; bash -c 'trap \"\" INT TERM; exec sleep 100'",
    "echo started; sleep 100 | cat",
])
async def test_a_timeout_leaves_no_job_reports_in_the_output(session: RemoteBashSession, command: str) -> None:
    r = await session.run(command, timeout=1)
    assert r.timed_out
    assert r.output == "started\n", r.output
    after = await session.run("echo next")
    assert after.output == "next\n"


def test_format_result_of_a_timeout_has_no_job_report() -> None:
    from remote_bash.framing import KillNoiseFilter

    noise = KillNoiseFilter()
    out = noise.feed(b"keep\nbash: line 24: 1778 Killed                  sleep 100\nTermin")
    out += noise.feed(b"ated\n[1]+  Killed                  sleep 5\nKilled by the user\nlast")
    assert out + noise.flush() == b"keep\nKilled by the user\nlast"


# -- history and what a command can read ------------------------------------------------------


async def test_history_lists_the_users_commands_only(session: RemoteBashSession) -> None:
    await session.run("set -o history")
    await session.run("echo one")
    await session.run("echo two\necho three")
    r = await session.run("history")
    entries = [re.sub(r"^\s*\d+\s+", "", line) for line in r.output.splitlines()]
    assert entries == ["echo one", "echo two", "echo three", "history"]
    fc = await session.run("fc -l -3")
    assert "_rb" not in fc.output and "REMOTE_BASH" not in fc.output
    assert not re.search(r"[0-9a-f]{12}", r.output + fc.output)
    await session.run("set +o history")


async def test_history_with_tracing_and_verbose_shows_no_framing(session: RemoteBashSession) -> None:
    await session.run("set -o history; set -x")
    r = await session.run("echo traced")
    assert "_rb" not in r.output and "REMOTE_BASH" not in r.output
    await session.run("set +x; set -v")
    r = await session.run("history 3; echo shown")
    await session.run("set +v; set +o history")
    assert "_rb" not in r.output and "REMOTE_BASH" not in r.output
    assert not re.search(r"[0-9a-f]{12}", r.output)


# -- daemons that leave the process tree --------------------------------------------------------

ESCAPES = {
    "env -i setsid": "(env -i setsid sh -c 'sleep 300; : {mark}' &)",
    "double fork": "( ( exec env -i setsid sh -c 'sleep 300; : {mark}' & ) & )",
    "perl $0": "(exec env -i perl -e '$0 = \"{mark} \" . (\"x\" x 4000); sleep 300' &)",
}


async def test_without_a_login_cgroup_a_stray_daemon_is_reported_not_claimed_stopped(
        session: RemoteBashSession, hosts: TestHosts) -> None:
    mark = marker()
    with _reaped(mark, hosts.user):
        r = await session.run(ESCAPES["env -i setsid"].format(mark=mark) + "; echo started; sleep 100", timeout=1.5)
        assert r.timed_out and r.kill is not None
        pids = _pids(mark, hosts.user)
        assert pids, "the daemon was expected to survive without a cgroup"
        assert r.kill.unchecked is not None and not r.kill.cgroup
        assert f"{pids[0]} (sh)" in r.kill.unchecked
        text, is_error = format_result(r)
        assert is_error and "not checked:" in text and str(pids[0]) in text


async def test_without_a_login_cgroup_restart_and_close_say_what_they_left(web1: Host, hosts: TestHosts) -> None:
    mark = marker()
    with _reaped(mark, hosts.user):
        session = RemoteBashSession(web1, kill_grace=0.5)
        await session.start()
        await session.run(ESCAPES["env -i setsid"].format(mark=mark))
        await session.restart()
        pids = _pids(mark, hosts.user)
        assert pids and session.last_kill is not None
        assert session.last_kill.unchecked is not None and str(pids[0]) in session.last_kill.unchecked
        from remote_bash import BashTool

        tool = BashTool(session)
        await session.run(ESCAPES["perl $0"].format(mark=mark + "b"))
        result = await tool.run({"restart": True}, tool_use_id="toolu_1")
        assert "not all could be checked" in str(result["content"])
        await session.run(ESCAPES["double fork"].format(mark=mark + "c"))
        # The grandchild is started after the call returns: close looks for it once it exists.
        await wait_for(lambda: _pids(mark + "c", hosts.user), within=10, what="the double-forked daemon to start")
        report = await session.close()
        assert report is not None and report.unchecked is not None


@pytest.fixture(scope="module")
def cgroup_host(hosts: TestHosts) -> Iterator[tuple[Host, Path]]:
    why = cgroup_support()
    if why is not None:
        pytest.skip(f"no per-login cgroup sshd here: {why}")
    with cgroup_sshd(hosts, "cg-1") as pair:
        yield pair


@pytest.fixture
async def cg_session(cgroup_host: tuple[Host, Path]) -> AsyncIterator[RemoteBashSession]:
    async with RemoteBashSession(cgroup_host[0], kill_grace=0.5) as s:
        yield s


async def test_the_cgroup_sshd_puts_each_login_in_its_own_scope(cg_session: RemoteBashSession,
                                                              cgroup_host: tuple[Host, Path]) -> None:
    r = await cg_session.run("cat /proc/$$/cgroup")
    assert re.search(r"/remote-bash-test-[0-9a-f]+/session-\d+\.scope", r.output), r.output
    assert cg_session.info is not None and cg_session.info.shell_pid in members(cgroup_host[1])


@pytest.mark.parametrize("escape", sorted(ESCAPES))
async def test_in_a_login_cgroup_a_timeout_stops_daemons_that_rewrote_their_environment(
        cg_session: RemoteBashSession, hosts: TestHosts, escape: str) -> None:
    mark = marker()
    with _reaped(mark, hosts.user):
        await cg_session.run("sleep 300 &")  # an earlier call's job: not this call's, left alone
        earlier = await cg_session.run("echo $!")
        r = await cg_session.run(ESCAPES[escape].format(mark=mark) + "; echo started; sleep 100", timeout=1.5)
        assert r.timed_out and r.kill is not None
        assert r.kill.cgroup and r.kill.unchecked is None and r.kill.survivors == 0
        await wait_for(lambda: not processes_with(mark, hosts.user),
                       within=10, what=f"the {escape} daemon to be stopped")
        alive = await cg_session.run(f"kill -0 {earlier.output.strip()} && echo earlier-job-alive; kill %1")
        assert "earlier-job-alive" in alive.output


async def test_in_a_login_cgroup_restart_and_close_stop_every_daemon(cgroup_host: tuple[Host, Path],
                                                                     hosts: TestHosts) -> None:
    mark = marker()
    with _reaped(mark, hosts.user):
        session = RemoteBashSession(cgroup_host[0], kill_grace=0.5)
        await session.start()
        await session.run(ESCAPES["double fork"].format(mark=mark + "a"))
        await wait_for(lambda: processes_with(mark + "a", hosts.user), within=10, what="the first daemon to start")
        await session.restart()
        assert session.last_kill is not None and session.last_kill.cgroup and session.last_kill.unchecked is None
        await wait_for(lambda: not processes_with(mark + "a", hosts.user), within=10, what="restart to stop the daemon")
        await session.run(ESCAPES["env -i setsid"].format(mark=mark + "b"))
        await wait_for(lambda: processes_with(mark + "b", hosts.user), within=10, what="the second daemon to start")
        report = await session.close()
        assert report is not None and report.cgroup and report.unchecked is None
        await wait_for(lambda: not processes_with(mark + "b", hosts.user), within=10, what="close to stop the daemon")


async def test_a_deep_break_and_tmout_leave_the_shell_and_its_state(session: RemoteBashSession) -> None:
    """``break 5`` leaves the loop that runs calls (the next call brings it back); ``TMOUT`` would
    give that loop's read a timeout while it waits between calls (it is put aside instead)."""
    await session.run("cd /tmp; KEEP=1")
    r = await session.run("echo before; break 5; echo not-reached")
    assert (r.output, r.exit_code, r.shell_lost) == ("before\n", 0, False)
    assert (await session.run("echo $KEEP $PWD")).output == "1 /tmp\n"
    await session.run("TMOUT=0.2")
    # Not a synchronisation: idle time between calls, longer than TMOUT, is the condition under test.
    await asyncio.sleep(0.6)
    r = await session.run("echo $TMOUT; read -r x; echo read=$?")
    assert (r.output, r.shell_lost) == ("0.2\nread=1\n", False)
    r = await session.run("printf '%s\\n' 'ünï ✓' '\\c'")
    assert r.output == "ünï ✓\n\\c\n"


async def test_allexport_lasts_and_exports_nothing_of_the_framing(session: RemoteBashSession) -> None:
    """``set -a`` stays on for later calls as in bash alone, but the framing's own variables (the
    header with the call's nonce, the command's text) never reach a later command's environment."""
    await session.run("set -a; RB_ALL=1")
    r = await session.run("echo $-; env | grep -c '^_rb'; env | grep '^RB_ALL='; RB_NEXT=2; env | grep '^RB_NEXT='")
    assert r.output.split("\n")[1:] == ["0", "RB_ALL=1", "RB_NEXT=2", ""], r.output
    assert "a" in r.output.split("\n")[0]
    r = await session.run("set +a; env | grep -c '^_rb'; echo $-")
    assert r.output.split("\n")[0] == "0" and "a" not in r.output.split("\n")[1]
