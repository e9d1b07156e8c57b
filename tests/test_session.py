"""The core session against a real OpenSSH sshd on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_bash import (
    AuthenticationFailed,
    CommandResult,
    ConnectionLost,
    ConnectionRefused,
    ConnectTimeout,
    Host,
    KnownHostsMissing,
    RemoteBashSession,
    SessionClosed,
    SessionError,
    UnknownHostKey,
)

from .sshd import TestHosts, processes_with, reaped
from .waiting import wait_for


def marker() -> str:
    return f"rbmark{uuid.uuid4().hex[:10]}"


# -- state and framing ---------------------------------------------------------------------


async def test_state_persists_between_calls(session: RemoteBashSession) -> None:
    await session.run("cd /tmp && export GREETING='hello world' && greet() { echo \"hi $1\"; }")
    r = await session.run('pwd; echo "$GREETING"; greet you')
    assert r.output == "/tmp\nhello world\nhi you\n"
    assert r.exit_code == 0 and r.ok


async def test_declare_inside_command_stays_global(session: RemoteBashSession) -> None:
    await session.run("declare -A colours=([sky]=blue); declare -i n=41")
    r = await session.run('n+=1; echo "${colours[sky]} $n"')
    assert r.output == "blue 42\n"


@pytest.mark.parametrize(
    "command",
    ["cat", "read x; echo \"got[$x]\"", "head -c 10", "python3 -c 'import sys; print(len(sys.stdin.read()))'"],
)
async def test_commands_reading_stdin_get_eof(session: RemoteBashSession, command: str) -> None:
    r = await session.run(command, timeout=10)
    assert not r.timed_out
    after = await session.run("echo still-here")
    assert after.output == "still-here\n"


async def test_read_gets_eof_not_the_next_command(session: RemoteBashSession) -> None:
    r = await session.run("read x; echo \"status=$? x=[$x]\"")
    assert r.output == "status=1 x=[]\n"


async def test_output_that_looks_like_sentinels(session: RemoteBashSession) -> None:
    fake = ("printf '\\036RB%s:0\\036\\n' 0123456789abcdef0123456789abcdef; "
            "echo __CLAUDE_BASH_DONE_1234__; echo 'RBINFO 1|2|3|4'")
    r = await session.run(fake)
    assert "__CLAUDE_BASH_DONE_1234__" in r.output
    assert "RB0123456789abcdef0123456789abcdef:0" in r.output
    assert r.exit_code == 0
    assert (await session.run("echo ok")).output == "ok\n"


async def test_output_without_trailing_newline(session: RemoteBashSession) -> None:
    r = await session.run("printf 'no newline'")
    assert r.output == "no newline"
    assert (await session.run("echo next")).output == "next\n"


async def test_binary_invalid_utf8_and_nul(session: RemoteBashSession) -> None:
    r = await session.run("printf 'a\\0b\\377\\376c\\n'; head -c 3000 /dev/urandom")
    assert r.output.startswith("ab\ufffd\ufffdc\n")
    assert "\x00" not in r.output
    assert r.exit_code == 0
    assert r.output_bytes >= 3006


async def test_carriage_return_progress_and_colours(session: RemoteBashSession) -> None:
    r = await session.run("printf '10%%\\r50%%\\r100%%\\n'; printf '\\033[1;31mred\\033[0m plain\\n'; printf 'a\\r\\n'")
    assert r.output == "100%\nred plain\na\n"


async def test_multibyte_characters_split_across_reads(session: RemoteBashSession) -> None:
    r = await session.run("for i in $(seq 4000); do printf 'é€😀'; done; echo")
    assert "\ufffd" not in r.output
    assert r.output.count("é€😀") == 4000 or r.truncated


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("echo hi # trailing comment", "hi\n"),
        ("echo 'single \"double\"' \"it's\"", "single \"double\" it's\n"),
        ("cat <<'EOF'\nline $HOME\nEOF", "line $HOME\n"),
        ("cat <<EOF\nx\nEOF\n", "x\n"),
        ("echo 'ünïcødé ✓ 日本'", "ünïcødé ✓ 日本\n"),
        ("echo a; echo b;", "a\nb\n"),
        ("echo $'tab\\there'", "tab\there\n"),
    ],
)
async def test_command_text_reaches_bash_intact(session: RemoteBashSession, command: str, expected: str) -> None:
    r = await session.run(command)
    assert r.output == expected
    assert r.exit_code == 0


async def test_trailing_ampersand(session: RemoteBashSession) -> None:
    r = await session.run("sleep 0.2 &")
    assert r.exit_code == 0
    r = await session.run("wait; echo waited")
    assert r.output == "waited\n"


async def test_huge_command_text(session: RemoteBashSession) -> None:
    payload = "x" * 200_000
    r = await session.run(f"s='{payload}'; echo ${{#s}}", timeout=60)
    assert r.output == "200000\n"


@pytest.mark.parametrize("command", ["echo 'unclosed", "if then fi", "echo $((1 +))", "( echo"])
async def test_syntax_errors_fail_at_once_and_keep_state(session: RemoteBashSession, command: str) -> None:
    await session.run("export KEEP=kept; cd /tmp")
    r = await session.run(command, timeout=10)
    assert r.exit_code in (1, 2)
    assert "syntax error" in r.output or "unexpected" in r.output
    assert not r.shell_lost and not r.timed_out
    assert r.duration < 5
    after = await session.run("echo $KEEP; pwd")
    assert after.output == "kept\n/tmp\n"


@pytest.mark.parametrize(
    ("command", "exit_code"),
    [("exit 3", 3), ("exec true", 0), ("kill -9 $$", None), ("set -e; false", 1),
     ("set -u; echo $rb_never_set", 1), ("echo ${rb_never_set:?none}", 1),
     ("set -o posix; readonly rb_q=1; rb_q=2", 1)],
)
async def test_shell_death_is_detected_and_replaced(session: RemoteBashSession, command: str,
                                                     exit_code: int | None) -> None:
    await session.run("export STATE=old")
    r = await session.run(command, timeout=60)
    assert r.shell_lost
    assert not r.timed_out
    assert r.duration < 10
    assert r.exit_code == exit_code
    if "rb_never_set" in command:  # bash's last words are the dead shell's call's, never the next one's
        assert "rb_never_set" in r.output
    after = await session.run("echo \"state=${STATE-gone}\"")
    assert after.output == "state=gone\n"
    assert not after.shell_lost


@pytest.mark.parametrize(
    "setup",
    [
        "set -u",
        "set -o pipefail -u",
        "IFS=:",
        "IFS=",
        "PATH=",
        "printf() { echo HIJACK; }; echo() { command echo HIJACK; }",
        "eval() { :; }",
        "builtin() { :; }",
        "export() { :; }; unset() { :; }; set() { :; }",
        "shopt -s nullglob extglob failglob",
        "trap 'true' ERR",
    ],
)
async def test_shell_settings_do_not_break_framing(session: RemoteBashSession, setup: str) -> None:
    r = await session.run(setup)
    assert not r.shell_lost
    r = await session.run("X=1; builtin echo \"v=$X\"")
    assert r.output == "v=1\n"
    assert r.exit_code == 0
    r = await session.run("false")
    assert r.exit_code == 1 and r.output == ""


async def test_set_x_and_set_v_add_no_framing_noise(session: RemoteBashSession) -> None:
    await session.run("set -x")
    r = await session.run("echo traced")
    assert r.output == "++ echo traced\ntraced\n"
    await session.run("set +x; set -v")
    r = await session.run("echo verbose")
    assert "_rb" not in r.output and "RB" not in r.output
    assert r.output.endswith("verbose\n")


async def test_concurrent_runs_do_not_interleave(session: RemoteBashSession) -> None:
    slow = session.run("echo a1; sleep 0.3; echo a2")
    fast = session.run("echo b1; echo b2")
    r1, r2 = await asyncio.gather(slow, fast)
    assert r1.output == "a1\na2\n"
    assert r2.output == "b1\nb2\n"


# -- timeouts and the remote kill ----------------------------------------------------------


async def test_timeout_kills_the_command_tree_and_keeps_the_shell(session: RemoteBashSession, hosts: TestHosts) -> None:
    mark = marker()
    await session.run("export KEEP=1; cd /tmp")
    started = time.monotonic()
    r = await session.run(
        f"echo started; bash -c 'sleep 1000 # {mark}-child & bash -c \"sleep 1000; : {mark}-grandchild\" & wait'",
        timeout=1,
    )
    elapsed = time.monotonic() - started
    assert r.timed_out and r.exit_code is None
    assert r.output.startswith("started\n")
    assert elapsed < 6
    assert r.kill is not None and r.kill.survivors == 0 and not r.kill.shell_replaced
    assert processes_with(mark, hosts.user) == []
    after = await session.run("echo $KEEP; pwd")
    assert after.output == "1\n/tmp\n"


@pytest.mark.parametrize("ifs", ["0123456789abcdef", "0123456789"])
async def test_an_ifs_of_digits_keeps_the_call_tag_and_the_kill(session: RemoteBashSession, hosts: TestHosts,
                                                                ifs: str) -> None:
    """The framing's words are quoted: an IFS of hex digits (the tag's, the shell's pid's) cuts
    neither the process tag nor the abort, so a timeout still stops what left the shell's tree."""
    await session.run(f"IFS={ifs}")
    r = await session.run("sh -c 'printf %s \"$REMOTE_BASH_CALL\"'")
    assert len(r.output) == 12 and all(c in "0123456789abcdef" for c in r.output), r.output
    mark = marker()
    r = await session.run(f"setsid -f sh -c 'sleep 300; : {mark}' >/dev/null 2>&1 </dev/null; sh -c 'sleep 300'",
                          timeout=1)
    assert r.timed_out and r.kill is not None and r.kill.survivors == 0, r.kill
    assert processes_with(mark, hosts.user) == []
    assert (await session.run("echo still")).output == "still\n"


@contextlib.contextmanager
def _rc_lines(user: str, text: str) -> Iterator[Path]:
    """``text`` at the top of the user's ~/.bashrc (which bash reads for a command sshd runs), as a
    command could have put it there; the file as it was afterwards. Yields the home directory."""
    home = Path(pwd.getpwnam(user).pw_dir)
    rc = home / ".bashrc"
    before = rc.read_bytes() if rc.exists() else None
    try:
        rc.write_bytes(text.encode() + (before or b""))
        yield home
    finally:
        if before is None:
            rc.unlink(missing_ok=True)
        else:
            rc.write_bytes(before)


async def test_rc_lines_a_command_wrote_shape_neither_the_shell_nor_the_kill(web1: Host, hosts: TestHosts) -> None:
    """The session's shell reads no rc file, not even through a BASH_ENV one exported; the kill
    runs in /bin/sh, which the login shell's rc state (``set -f``, a ``kill`` function) does not reach.
    What the rc file exports does reach the session (the README says so): SHELLOPTS sets noglob."""
    env_file = Path(pwd.getpwnam(hosts.user).pw_dir) / ".rb-test-env"
    env_file.write_text("rbfunc() { :; }\n")
    env_file.chmod(0o644)
    mark = marker()
    try:
        with reaped(mark, hosts.user), _rc_lines(hosts.user, f"set -f\nexport SHELLOPTS\nkill() {{ :; }}\n"
                                                             f"export BASH_ENV={env_file}\n"):
            async with RemoteBashSession(web1, kill_grace=0.5, audit=False) as session:
                assert (await session.run("type -t rbfunc || echo none")).output == "none\n"
                assert "f" in (await session.run("echo $-")).output
                r = await session.run(f"setsid -f sh -c 'sleep 300; : {mark}' >/dev/null 2>&1 </dev/null; sleep 300",
                                      timeout=1)
                assert r.timed_out and r.kill is not None and r.kill.survivors == 0, r.kill
                assert processes_with(mark, hosts.user) == []
    finally:
        env_file.unlink(missing_ok=True)


async def test_a_timeout_names_a_process_whose_call_tag_was_taken_away(session: RemoteBashSession,
                                                                       hosts: TestHosts) -> None:
    """It still carries the session's tag, but no call's: not another call's, so it is named as a
    process the kill could not tell apart (no login cgroup here), and the session's end stops it."""
    mark = marker()
    with reaped(mark, hosts.user):
        r = await session.run(f"unset REMOTE_BASH_CALL; setsid -f sh -c 'sleep 300; : {mark}' >/dev/null 2>&1 "
                              "</dev/null; sleep 300", timeout=1)
        assert r.timed_out and r.kill is not None
        pids = [line.split()[0] for line in processes_with(mark, hosts.user)]
        assert pids and r.kill.unchecked is not None and pids[0] in r.kill.unchecked, r.kill
        await session.close()
        await wait_for(lambda: not processes_with(mark, hosts.user), within=10, what="the session's end to stop it")


async def test_a_kill_the_login_shell_never_runs_is_said_to_have_checked_nothing(web1: Host, hosts: TestHosts) -> None:
    """An rc line that ends every command but the session's own bash: the kill scripts never run,
    and the reports say so rather than that nothing was left."""
    mark = marker()
    with reaped(mark, hosts.user), _rc_lines(hosts.user, "case $BASH_EXECUTION_STRING in *--norc*) ;; *) exit 0;; "
                                                        "esac\n"):
        session = RemoteBashSession(web1, kill_grace=0.2, audit=False)
        # One process each, named by the mark (they outlive the test's session: it cleans up).
        r = await session.run(f"setsid -f bash -c 'exec -a {mark} sleep 300' >/dev/null 2>&1 </dev/null; "
                              f"bash -c 'exec -a {mark}-fg sleep 300'", timeout=1)
        assert r.timed_out and r.kill is not None, r
        assert r.kill.unchecked is not None and "gave no report" in r.kill.unchecked, r.kill
        report = await session.close()
        assert report is not None and report.unchecked is not None and "gave no report" in report.unchecked


def _processes_of(user: str) -> int:
    uid = pwd.getpwnam(user).pw_uid
    count = 0
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                count += 1
    return count


async def test_a_kill_that_cannot_start_a_process_is_said_to_have_checked_nothing(web1: Host,
                                                                                  hosts: TestHosts) -> None:
    """A limit on the account's processes (here from ~/.bashrc, as PAM's nproc would set it for
    every login) that the command's daemons use up: the session's end says that nothing (or not
    everything) was checked, unless the slots that short-lived processes freed since let its scan
    run and stop them all. Never a report of nothing left while something is."""
    mark = marker()
    limit = _processes_of(hosts.user) + 12
    with reaped(mark, hosts.user), _rc_lines(hosts.user, f"ulimit -S -u {limit}\n"):
        session = RemoteBashSession(web1, audit=False)
        r = await session.run(f"for i in $(seq 40); do setsid -f bash -c 'exec -a {mark} sleep 300' "
                              ">/dev/null 2>&1 </dev/null || break; done; echo $i")
        assert 1 < int(r.output) < 40, r.output
        report = await session.close()
        assert report is not None, report
        if report.unchecked is None:
            assert report.signals == ["KILL"], report
            await wait_for(lambda: not processes_with(mark, hosts.user), within=10, what="the daemons to go")
        else:
            assert "may still be running" in report.unchecked, report


async def test_each_call_keeps_its_own_deadline(session: RemoteBashSession) -> None:
    # The session's deadline timer is kept from call to call: a sooner deadline after a later one
    # must still come, and a later one after a sooner one must not come early.
    assert not (await session.run("true", timeout=500)).timed_out
    assert (await session.run("sleep 30", timeout=0.5)).timed_out
    assert not (await session.run("true", timeout=0.3)).timed_out
    r = await session.run("sleep 1; echo slept", timeout=20)
    assert not r.timed_out and r.output == "slept\n"


async def test_a_result_is_what_validating_its_fields_gives(session: RemoteBashSession) -> None:
    # The session builds its results without validation (its fields are its own): nothing may tell.
    for r in [await session.run("echo hi; exit 3"), await session.run("sleep 30", timeout=0.5)]:
        again = CommandResult.model_validate(r.model_dump())
        assert again == r and again.model_dump() == r.model_dump()
        assert again.model_dump_json() == r.model_dump_json() and repr(again) == repr(r)


async def test_command_ignoring_int_and_term_is_killed(session: RemoteBashSession, hosts: TestHosts) -> None:
    mark = marker()
    r = await session.run(f"bash -c \"trap '' INT TERM; sleep 1000; : {mark}\"", timeout=1)
    assert r.timed_out
    assert r.kill is not None and "KILL" in r.kill.signals and r.kill.survivors == 0
    assert not r.kill.shell_replaced
    assert processes_with(mark, hosts.user) == []
    assert (await session.run("echo alive")).output == "alive\n"


async def test_what_ignores_int_gets_term_at_the_deadline_not_a_grace_later(web1: Host, hosts: TestHosts) -> None:
    """A background job of a non-interactive shell ignores INT, and so does a command that asked
    to: INT would do nothing to them, and with a long grace before TERM the job would write its
    file well after the deadline. They get TERM in INT's round instead."""
    mark = marker()
    job = f"sh -c 'sleep 5; echo late > /tmp/{mark}; : job' &"
    stubborn = f"bash -c \"trap '' INT; sleep 31; : {mark}\""
    async with RemoteBashSession(web1, kill_grace=8) as s:
        r = await s.run(f"{job} {stubborn}", timeout=1)
        assert r.timed_out and r.kill is not None
        # TERM first, never a round of INT alone (a process slow to die under load may get KILL after).
        assert r.kill.signals[0] == "TERM" and "INT" not in r.kill.signals and not r.kill.shell_replaced, r.kill
        # Both are gone at the result (their command lines hold the mark), before the job's sleep
        # could end: nothing of them can write the file any more.
        assert processes_with(mark, hosts.user) == []
        assert r.duration < 5 and not Path(f"/tmp/{mark}").exists()
        assert (await s.run("echo alive")).output == "alive\n"


async def test_a_process_that_keeps_forking_is_stopped(session: RemoteBashSession, hosts: TestHosts) -> None:
    """Each generation ignores INT, TERM and HUP, starts the next and exits: signalled one by one,
    the chain outran the kill. Frozen first, it cannot."""
    mark = marker()
    script = (f"trap '' INT TERM HUP; n=$1; [ \"$n\" -ge 400 ] && {{ touch /tmp/{mark}.done; exit; }}; "
              f"sleep 0.02; bash /tmp/{mark}.sh $((n+1)) &")
    await session.run(f"cat > /tmp/{mark}.sh <<'EOF'\n{script}\nEOF")
    r = await session.run(f"bash /tmp/{mark}.sh 0; sleep 30", timeout=1.5)
    assert r.timed_out and r.kill is not None and "KILL" in r.kill.signals, r.kill
    # A generation is always alive while the chain runs (each starts the next before it exits).
    assert processes_with(f"{mark}.sh", hosts.user) == []
    assert not Path(f"/tmp/{mark}.done").exists()
    await session.run(f"rm -f /tmp/{mark}.sh")


async def test_background_job_of_earlier_command_survives_a_timeout(session: RemoteBashSession,
                                                                     hosts: TestHosts) -> None:
    mark = marker()
    await session.run(f"sleep 1000 & # {mark}\nBG=$!")
    # sleep's own argv has no marker: find it through the recorded pid instead
    pid = int((await session.run("echo $BG")).output)
    r = await session.run("sleep 1000", timeout=1)
    assert r.timed_out
    assert (await session.run(f"kill -0 {pid} && echo running")).output == "running\n"
    await session.run(f"kill {pid}")


async def test_builtin_loop_in_the_shell_is_aborted_and_the_shell_kept(session: RemoteBashSession) -> None:
    await session.run("export STATE=old")
    r = await session.run("while :; do :; done", timeout=1)
    assert r.timed_out and r.kill is not None and not r.kill.shell_replaced
    after = await session.run("echo \"${STATE-gone}\"")
    assert after.output == "old\n"


async def test_shell_that_ignores_the_abort_is_replaced(session: RemoteBashSession) -> None:
    await session.run("export STATE=old")
    r = await session.run("trap '' USR2; while :; do :; done", timeout=1)
    assert r.timed_out and r.kill is not None and r.kill.shell_replaced
    after = await session.run("echo \"${STATE-gone}\"")
    assert after.output == "gone\n"


@pytest.mark.parametrize("shadow", ["break() { :; }", "shopt -s expand_aliases; alias break='echo ABR'",
                                    "builtin() { :; }; break() { :; }"])
async def test_a_command_s_own_break_does_not_stop_the_abort(session: RemoteBashSession, shadow: str) -> None:
    """The abort trap's text is parsed when it runs: a function or an alias named ``break`` (or
    ``builtin``) that the session defined does not keep the rest of a timed-out command running."""
    mark = marker()
    await session.run(f"{shadow}\nKEEP={mark}")
    r = await session.run(f"sleep 30; touch /tmp/{mark}; echo REST", timeout=1)
    assert r.timed_out and "REST" not in r.output and "ABR" not in r.output
    assert not Path(f"/tmp/{mark}").exists()
    assert (await session.run("echo $KEEP")).output == f"{mark}\n"


@pytest.mark.parametrize("call", ["f", "g", "if true; then f; fi", "set -e; f"])
async def test_rest_of_a_command_timed_out_inside_a_function_does_not_run(session: RemoteBashSession,
                                                                           call: str) -> None:
    """``break`` cannot leave a function's caller: the shell stops itself and is replaced."""
    mark = marker()
    await session.run("f() { sleep 30; echo in-f; }; g() { f; echo in-g; }")
    r = await session.run(f"{call}; touch /tmp/{mark}; echo REST", timeout=1)
    assert r.timed_out and r.shell_lost
    assert "REST" not in r.output and "in-f" not in r.output and "in-g" not in r.output
    assert not Path(f"/tmp/{mark}").exists()
    assert (await session.run("echo fresh")).output == "fresh\n"


@pytest.mark.parametrize("sep", ["; ", "\n", " || "])
async def test_rest_of_a_timed_out_command_does_not_run(session: RemoteBashSession, sep: str) -> None:
    mark = marker()
    r = await session.run(f"sleep 30{sep}touch /tmp/{mark}", timeout=1)
    assert r.timed_out
    assert not Path(f"/tmp/{mark}").exists()
    loop = await session.run(f"for i in 1 2 3; do sleep 30; done; touch /tmp/{mark}", timeout=1)
    assert loop.timed_out
    assert (await session.run(f"ls /tmp/{mark} 2>/dev/null; echo done")).output == "done\n"


async def test_timeout_is_clamped_to_the_host_maximum(hosts: TestHosts, web1: Host) -> None:
    host = web1.model_copy(update={"max_timeout": 1.0})
    async with RemoteBashSession(host, kill_grace=0.3) as s:
        r = await s.run("sleep 30", timeout=500)
        assert r.timed_out and r.timeout == 1.0


async def test_cancelling_a_run_kills_the_remote_command(session: RemoteBashSession, hosts: TestHosts) -> None:
    mark = marker()
    task = asyncio.create_task(session.run(f"bash -c 'sleep 1000; : {mark}'"))
    await wait_for(lambda: processes_with(mark, hosts.user), within=10, what="the command to start")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert processes_with(mark, hosts.user) == []
    assert (await session.run("echo ok")).output == "ok\n"


# -- output bounds --------------------------------------------------------------------------


async def test_huge_output_is_bounded_with_head_and_tail(session: RemoteBashSession) -> None:
    r = await session.run("echo FIRST; head -c 50000000 /dev/zero | tr '\\0' y; echo; echo LAST", timeout=120)
    assert r.truncated
    assert r.output.startswith("FIRST\n") and r.output.endswith("LAST\n")
    assert "bytes cut" in r.output
    assert len(r.output) < session.host.output_limit + 200
    assert r.output_bytes == 50_000_000 + len("FIRST\n\nLAST\n")


async def test_one_huge_line(session: RemoteBashSession) -> None:
    r = await session.run("head -c 20000000 /dev/zero | tr '\\0' a", timeout=120)
    assert r.truncated and r.output_bytes == 20_000_000
    assert len(r.output) < session.host.output_limit + 200


async def test_output_limit_is_configurable(web1: Host) -> None:
    async with RemoteBashSession(web1.model_copy(update={"output_limit": 1000})) as s:
        r = await s.run("seq 100000")
        assert r.truncated and len(r.output) < 1200
        assert r.output.startswith("1\n2\n") and r.output.endswith("99999\n100000\n")


@pytest.mark.parametrize("limit", [200, 1000, 1001, 4096, 30_000])
async def test_the_kept_head_and_tail_are_whole_lines(web1: Host, limit: int) -> None:
    # The cut falls where it falls in characters; what is shown of either side is whole lines,
    # whether the capture cut the output (cut in bytes) or only the rendering did.
    async with RemoteBashSession(web1.model_copy(update={"output_limit": limit})) as s:
        for command, lines in (("seq 1 20000", [str(i) for i in range(1, 20001)]),
                               ("seq 1 400", [str(i) for i in range(1, 401)]),
                               ("for i in $(seq 400); do echo \"line $i\"; done",
                                [f"line {i}" for i in range(1, 401)])):
            r = await s.run(command)
            if not r.truncated:
                assert r.output.splitlines() == lines
                continue
            assert len(r.output) < limit + 200
            head, marker, tail = r.output.partition("[... ")
            assert head.endswith("\n") or head == ""
            assert marker and tail.endswith("\n")
            shown_head = head.splitlines()
            shown_tail = tail.split(" ...]\n", 1)[1].splitlines()
            assert shown_head == lines[:len(shown_head)]
            assert shown_tail == (lines[-len(shown_tail):] if shown_tail else [])
            assert len(shown_head) + len(shown_tail) > 0


# -- ciphers ----------------------------------------------------------------------------------


def _negotiated(session: RemoteBashSession) -> str:
    assert session._conn is not None
    return str(session._conn._conn.get_extra_info("recv_cipher"))


async def test_aes_gcm_goes_first_where_the_cpu_has_aes(session: RemoteBashSession) -> None:
    from remote_bash._ssh.connection import _cpu_has_aes

    # sshd offers all of these; which one the session gets is the client's first choice.
    expected = {"aes256-gcm@openssh.com"} if _cpu_has_aes() else {"chacha20-poly1305@openssh.com"}
    assert _negotiated(session) in expected


@pytest.mark.parametrize("cipher", ["chacha20-poly1305@openssh.com", "aes128-gcm@openssh.com", "aes256-gcm@openssh.com",
                                    "aes128-ctr", "aes192-ctr", "aes256-ctr"])
async def test_a_server_offering_one_cipher_is_reached(hosts: TestHosts, cipher: str) -> None:
    # Every cipher OpenSSH offers by default stays in the list: a server that offers only one is reached.
    host = hosts.start(f"only-{cipher.partition('@')[0]}", extra_config=(f"Ciphers {cipher}",))
    async with RemoteBashSession(host, audit=False) as s:
        assert (await s.run("echo ok")).output == "ok\n"
        assert _negotiated(s) == cipher


# -- restart, close, connection loss, connect errors ----------------------------------------


async def test_restart_gives_a_clean_shell_and_stops_old_processes(session: RemoteBashSession,
                                                                   hosts: TestHosts) -> None:
    mark = marker()
    await session.run(f"cd /tmp; export OLD=1; bash -c 'sleep 1000; : {mark}' &")
    await wait_for(lambda: processes_with(mark, hosts.user), within=10, what="the background job to start")
    old_pid = session.info.shell_pid if session.info else 0
    info = await session.restart()
    assert info.shell_pid != old_pid
    r = await session.run("echo \"${OLD-unset}\"; pwd")
    assert r.output.startswith("unset\n")
    assert r.output != "unset\n/tmp\n"
    assert processes_with(mark, hosts.user) == []


async def test_closed_session_cannot_be_reused(web1: Host) -> None:
    s = RemoteBashSession(web1)
    await s.start()
    await s.close()
    with pytest.raises(SessionClosed):
        await s.run("true")


def _session_sshd_pids(server_pid: int) -> list[int]:
    """The sshd processes serving connections of the listener ``server_pid`` (not the shells)."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,comm="], capture_output=True, text=True, check=True).stdout
    rows = [line.split(None, 2) for line in out.splitlines()]
    tree = {server_pid}
    for _ in range(5):
        tree |= {int(p) for p, pp, _c in rows if int(pp) in tree}
    return [int(p) for p, _pp, comm in rows if int(p) in tree and int(p) != server_pid and comm.startswith("sshd")]


async def test_connection_loss_mid_command_is_reported_not_retried(hosts: TestHosts) -> None:
    host = hosts.start("lossy")
    server = hosts.servers["lossy"]
    async with RemoteBashSession(host) as s:
        mark = marker()
        task = asyncio.create_task(s.run(f"echo begun; touch /tmp/{mark}; sleep 30", timeout=60))
        await wait_for(Path(f"/tmp/{mark}").exists, within=10, what="the command to start")
        started = time.monotonic()
        for pid in _session_sshd_pids(server.pid):
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(ConnectionLost) as err:
            await task
        assert time.monotonic() - started < 5
        assert err.value.host == "lossy"
        assert "not re-run" in str(err.value)
        Path(f"/tmp/{mark}").unlink()
        r = await s.run(f"ls /tmp/{mark} 2>&1; echo reconnected")
        assert r.output.endswith("reconnected\n")
        assert "No such file" in r.output  # the command was not run again


async def test_connection_refused_is_clear(web1: Host) -> None:
    with socket.socket() as sock:
        sock.bind((web1.hostname, 0))
        port = sock.getsockname()[1]
    host = web1.model_copy(update={"port": port, "connect_timeout": 5})
    with pytest.raises(ConnectionRefused) as err:
        await RemoteBashSession(host).start()
    assert "refused" in str(err.value) and err.value.host == "web-1"


async def test_silent_server_times_out(web1: Host) -> None:
    with socket.socket() as sock:
        sock.bind((web1.hostname, 0))
        sock.listen(1)
        host = web1.model_copy(update={"port": sock.getsockname()[1], "connect_timeout": 1})
        started = time.monotonic()
        with pytest.raises(ConnectTimeout):
            await RemoteBashSession(host).start()
        assert time.monotonic() - started < 5


async def test_authentication_failure_is_clear(web1: Host, tmp_path: Path) -> None:
    from remote_bash.sandbox import generate_keypair

    other = generate_keypair(tmp_path / "other")
    host = web1.model_copy(update={"identity_file": other})
    with pytest.raises(AuthenticationFailed) as err:
        await RemoteBashSession(host).start()
    assert "authentication" in str(err.value)


async def test_unknown_host_key_and_missing_known_hosts(web1: Host, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.touch()
    with pytest.raises(UnknownHostKey) as err:
        await RemoteBashSession(web1.model_copy(update={"known_hosts": empty})).start()
    assert "SHA256:" in str(err.value)
    with pytest.raises(KnownHostsMissing):
        await RemoteBashSession(web1.model_copy(update={"known_hosts": tmp_path / "nope"})).start()


async def test_streamed_output_is_masked_and_complete(session: RemoteBashSession) -> None:
    seen: list[str] = []
    r = await session.run("echo start; echo 'password=hunter22'; printf 'AKIAIOSFODNN7EX'; printf 'AMPLE tail'",
                          on_output=seen.append)
    streamed = "".join(seen)
    assert "hunter22" not in streamed and "AKIAIOSFODNN7EXAMPLE" not in streamed
    assert streamed == r.output
    assert streamed.startswith("start\n") and streamed.endswith(" tail")


@pytest.mark.parametrize("form", ["({sleep}); {act}", "({sleep}) > /dev/null; {act}", "time ({sleep}); {act}",
                                  "( ({sleep}) ); {act}", "x=1; ({sleep}); {act}; {act}2",
                                  "({sleep}) || {act}"])
async def test_the_rest_after_a_subshell_that_timed_out_does_not_run(session: RemoteBashSession, form: str) -> None:
    """After a subshell in the foreground, bash starts one more command before the abort's trap
    runs: a command that may run one has its shell stopped at the deadline instead, and replaced."""
    mark = marker()
    r = await session.run(form.format(sleep="sleep 30", act=f"touch /tmp/{mark}"), timeout=1)
    assert r.timed_out and r.shell_lost
    assert not Path(f"/tmp/{mark}").exists() and not Path(f"/tmp/{mark}2").exists()
    assert (await session.run("echo fresh")).output == "fresh\n"


async def test_timeout_in_a_command_substitution_keeps_the_shell(session: RemoteBashSession) -> None:
    await session.run("export KEEP=1; cd /tmp")
    r = await session.run("x=$(sleep 1000); echo after", timeout=1)
    assert r.timed_out and not r.shell_lost
    assert "after" not in r.output
    assert (await session.run("echo $KEEP; pwd")).output == "1\n/tmp\n"


async def test_a_second_cancel_does_not_leak_into_the_next_call(session: RemoteBashSession,
                                                                 hosts: TestHosts) -> None:
    mark = marker()
    # It outlives INT (noting that the kill began) and TERM: only the last round, KILL, ends it.
    command = f"bash -c \"trap 'touch /tmp/{mark}.int' INT; trap '' TERM; while :; do sleep 0.05; done; : {mark}\""
    task = asyncio.create_task(session.run(command, timeout=30))
    await wait_for(lambda: processes_with(mark, hosts.user), within=10, what="the command to start")
    task.cancel()
    await wait_for(Path(f"/tmp/{mark}.int").exists, within=10, what="the kill to begin")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    r = await session.run("echo after-double")
    assert r.output == "after-double\n"
    assert processes_with(mark, hosts.user) == []
    Path(f"/tmp/{mark}.int").unlink()


async def test_close_interrupts_a_running_command(web1: Host, hosts: TestHosts) -> None:
    mark = marker()
    s = RemoteBashSession(web1, kill_grace=0.3)
    await s.start()
    task = asyncio.create_task(s.run(f"bash -c 'sleep 1000; : {mark}'", timeout=60))
    await wait_for(lambda: processes_with(mark, hosts.user), within=10, what="the command to start")
    started = time.monotonic()
    report = await s.close()
    assert time.monotonic() - started < 10
    # The caller is told what happened to its command, not cancelled: nobody cancelled its task.
    with pytest.raises(SessionClosed, match=r"^web-1: the session was closed while the command ran; it was "
                                            r"stopped \(signals sent: INT[^)]*\)\. It is not run again$"):
        await task
    assert not task.cancelled()
    assert processes_with(mark, hosts.user) == []
    # close() reports the stop of the command it interrupted.
    assert report is not None and report.signals[:1] == ["INT"] and report.survivors == 0


async def test_close_after_the_command_ended_lets_its_result_and_record_through(web1: Host) -> None:
    """A close that comes while the ended command's result is made (its exec.end being written)
    waits for it: the caller gets the result, the log the record; nothing is cut half-way."""

    class SlowEnd:
        def __init__(self) -> None:
            self.events: list[str] = []
            self.writing_end = asyncio.Event()
            self.release = asyncio.Event()

        async def awrite(self, host: str, event: str, /, **fields: object) -> dict[str, object]:
            if event == "exec.end":
                self.writing_end.set()
                await self.release.wait()
            self.events.append(event)
            return {"event": event}

    sink = SlowEnd()
    s = RemoteBashSession(web1, audit=sink)
    await s.start()
    task = asyncio.create_task(s.run("echo done"))
    await asyncio.wait_for(sink.writing_end.wait(), 30)
    closing = asyncio.create_task(s.close())
    await wait_for(lambda: s.state.value == "closed", within=10, what="the close to begin")
    assert not task.done()
    sink.release.set()
    result = await task
    assert result.output == "done\n" and result.exit_code == 0
    await asyncio.wait_for(closing, 30)
    assert sink.events.count("exec.end") == 1 and sink.events[-1] == "session.end"


async def test_a_close_while_another_is_under_way_waits_for_it_even_once_that_caller_gave_up(
    web1: Host, hosts: TestHosts
) -> None:
    mark = marker()
    s = RemoteBashSession(web1, kill_grace=0.3)
    await s.start()
    task = asyncio.create_task(s.run(f"trap '' INT TERM; bash -c 'trap \"\" INT TERM; sleep 1000; : {mark}'",
                                     timeout=60))
    await wait_for(lambda: processes_with(mark, hosts.user), within=10, what="the command to start")
    first = asyncio.create_task(s.close())
    await wait_for(lambda: s.state.value == "closed", within=10, what="the first close to begin")
    first.cancel()  # its caller gives up: the close goes on
    report = await s.close()
    assert report is not None and "KILL" in report.signals, report
    assert processes_with(mark, hosts.user) == []
    with pytest.raises(SessionClosed, match="while the command ran; it was stopped"):
        await task
    assert await s.close() is None  # done: idempotent


async def test_two_restarts_at_once_still_tell_the_caller_and_do_not_cancel_it(web1: Host,
                                                                                hosts: TestHosts) -> None:
    mark = marker()
    async with RemoteBashSession(web1, kill_grace=0.3) as s:
        task = asyncio.create_task(s.run(f"bash -c 'sleep 1000; : {mark}'", timeout=60))
        await wait_for(lambda: processes_with(mark, hosts.user), within=10, what="the command to start")
        await asyncio.gather(s.restart(), s.restart())
        with pytest.raises(SessionError, match="the shell was restarted while the command ran"):
            await task
        assert not task.cancelled()
        assert processes_with(mark, hosts.user) == []
        assert (await s.run("echo ok")).output == "ok\n"


async def test_a_close_while_the_session_connects_leaves_it_closed(web1: Host, tmp_path: Path) -> None:
    from remote_bash.audit import AuditLog

    audit = AuditLog(tmp_path / "audit")
    s = RemoteBashSession(web1, audit=audit)
    starting = asyncio.create_task(s.start())
    await asyncio.sleep(0)  # a turn of the loop: the start has begun connecting
    await s.close()
    with pytest.raises(SessionClosed, match="closed while it started"):
        await starting
    with pytest.raises(SessionClosed):
        await s.run("echo ran")
    events = [r["event"] for r in audit.read("web-1")]
    assert "exec.start" not in events and events.count("session.start") <= 1


async def test_an_interrupted_calls_record_that_cannot_be_written_is_said(web1: Host, hosts: TestHosts) -> None:
    class FullOnEnd:
        async def awrite(self, host: str, event: str, /, **fields: object) -> dict[str, object]:
            if event == "exec.end":
                raise OSError(28, "No space left on device")
            return {"event": event}

    mark = marker()
    s = RemoteBashSession(web1, audit=FullOnEnd(), kill_grace=0.3)
    await s.start()
    task = asyncio.create_task(s.run(f"bash -c 'sleep 1000; : {mark}'", timeout=60))
    await wait_for(lambda: processes_with(mark, hosts.user), within=10, what="the command to start")
    await s.close()
    with pytest.raises(SessionClosed, match=r"it was stopped .*It is not run again\. Its exec\.end audit record "
                                            r"could not be written: .*No space left on device"):
        await task


class _Odd(BaseException):
    """Not an Exception: asyncssh would end the connection on it."""


@pytest.mark.parametrize("raised", [RuntimeError, asyncio.CancelledError, _Odd])
async def test_an_output_callback_that_raises_stops_the_command_and_is_said(web1: Host, hosts: TestHosts,
                                                                           raised: type[BaseException]) -> None:
    mark = marker()
    seen: list[str] = []

    def boom(text: str) -> None:
        seen.append(text)
        raise raised("the caller's bug")

    async with RemoteBashSession(web1, kill_grace=0.3) as s:
        said = rf"^web-1: the on_output callback raised {raised.__name__}: the caller's bug while the command ran; "
        with pytest.raises(SessionError, match=said + r"it was stopped \(signals sent: INT") as err:
            await s.run(f"echo go; bash -c 'sleep 1000; : {mark}'; echo never", timeout=60, on_output=boom)
        assert isinstance(err.value.__cause__, raised)
        assert not isinstance(err.value, SessionClosed)
        assert seen == ["go\n"]  # not called again
        assert processes_with(mark, hosts.user) == []
        assert (await s.run("echo still here")).output == "still here\n"


async def test_an_output_callback_that_raises_on_the_last_output_is_said_with_the_result(web1: Host) -> None:
    def boom(text: str) -> None:
        if "LAST" in text:
            raise ValueError("on the last")

    async with RemoteBashSession(web1) as s:
        with pytest.raises(SessionError, match=r"raised ValueError: on the last on the command's last output, after "
                                               r"the command ended \(exit status 3\)") as err:
            await s.run("printf 'first\\nLAST'; exit_with() { return 3; }; exit_with", on_output=boom)
        result = err.value.result  # type: ignore[attr-defined]
        assert (result.output, result.exit_code) == ("first\nLAST", 3)
        assert (await s.run("echo still here")).output == "still here\n"


async def test_restart_interrupts_a_running_command_and_says_so(web1: Host, hosts: TestHosts) -> None:
    mark = marker()
    async with RemoteBashSession(web1, kill_grace=0.3) as s:
        await s.run("export KEPT=1")
        task = asyncio.create_task(s.run(f"bash -c 'sleep 1000; : {mark}'", timeout=60))
        await wait_for(lambda: processes_with(mark, hosts.user), within=10, what="the command to start")
        await s.restart()
        with pytest.raises(SessionError, match=r"the shell was restarted while the command ran; it was stopped") \
                as err:
            await task
        assert not isinstance(err.value, SessionClosed)
        assert processes_with(mark, hosts.user) == []
        assert (await s.run("echo ${KEPT:-reset}")).output == "reset\n"


async def test_a_cancel_of_the_callers_own_is_still_a_cancel_when_close_comes_too(web1: Host,
                                                                                  hosts: TestHosts) -> None:
    mark = marker()
    s = RemoteBashSession(web1, kill_grace=0.3)
    await s.start()
    task = asyncio.create_task(s.run(f"bash -c 'sleep 1000; : {mark}'", timeout=60))
    await wait_for(lambda: processes_with(mark, hosts.user), within=10, what="the command to start")
    task.cancel()  # the caller's own cancel (Ctrl-C), then the close
    await s.close()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert processes_with(mark, hosts.user) == []


async def test_processes_that_clear_their_environment_are_killed_too(session: RemoteBashSession,
                                                                     hosts: TestHosts) -> None:
    mark = marker()
    await session.run("export KEEP=1")
    r = await session.run(f"env -i /bin/sh -c 'sleep 1000; echo {mark}'", timeout=1)
    assert r.timed_out and r.kill is not None
    assert r.kill.survivors == 0 and not r.kill.shell_replaced
    assert processes_with(mark, hosts.user) == []
    assert (await session.run("echo $KEEP")).output == "1\n"


async def test_a_policy_refusal_is_audited_once_and_never_sent(web1: Host, tmp_path: Path) -> None:
    from remote_bash import BashTool, CommandPolicy, PolicyDenied
    from remote_bash.audit import AuditLog

    audit = AuditLog(tmp_path / "audit")
    host = web1.model_copy(update={"policy": CommandPolicy(deny=[r"\brm\b"])})
    mark = tmp_path / "never"
    async with RemoteBashSession(host, audit=audit) as s:
        with pytest.raises(PolicyDenied):
            await s.run(f"rm -f {mark}; touch {mark}")
        block = await BashTool(s).handle({"id": "toolu_x", "name": "bash", "input": {"command": "rm -rf /tmp/x"}})
        assert block["is_error"] and "deny rule" in block["content"]
    events = [r["event"] for r in audit.read("web-1")]
    assert events.count("policy.denied") == 2
    assert "exec.start" not in events
    assert not mark.exists()


async def test_a_command_check_policy_allowed_skips_only_that_commands_second_check(web1: Host, tmp_path: Path) -> None:
    from remote_bash import CommandPolicy, PolicyDenied

    host = web1.model_copy(update={"policy": CommandPolicy(deny=[r"\brm\b"])})
    s = RemoteBashSession(host, audit=False)
    try:
        decision = s.check_policy("echo ok")
        assert decision is not None and decision.allowed
        # Another command than the one just allowed is checked as ever, and refused before connecting.
        with pytest.raises(PolicyDenied):
            await s.run("rm -f /tmp/never")
        denied = s.check_policy("rm -f /tmp/never")
        assert denied is not None and not denied.allowed
        with pytest.raises(PolicyDenied):
            await s.run("rm -f /tmp/never")
        assert s.state.value == "new"  # nothing was connected
        assert RemoteBashSession(web1, audit=False).check_policy("rm -rf /") is None  # no rules
    finally:
        await s.close()


async def test_a_private_key_cut_in_half_by_truncation_is_still_masked(session: RemoteBashSession) -> None:
    key = Path(f"/tmp/{marker()}")  # readable by the remote user, unlike tmp_path
    keygen = ["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(key)]
    await asyncio.to_thread(subprocess.run, keygen, check=True)
    os.chmod(key, 0o644)
    body = key.read_text().splitlines()[5]
    # 70 KB before and 14 KB after: the kept end (15,000 characters) starts inside the key.
    r = await session.run(
        f"head -c 70000 /dev/zero | tr '\\0' f; echo; cat {key}; head -c 14000 /dev/zero | tr '\\0' g"
    )
    assert r.truncated
    assert "[REDACTED:private-key]" in r.output  # the key was printed, and masked
    assert body not in r.output
    assert "PRIVATE KEY-----" not in r.output.replace("[REDACTED:private-key]", "")
    key.unlink()
    key.with_suffix(".pub").unlink()


async def test_background_output_after_a_call_opens_the_next_one(session: RemoteBashSession) -> None:
    await session.run("(head -c 1000000 /dev/zero | tr '\\0' a; echo; echo BGTAIL) &")
    expected = 1_000_000 + len("\nBGTAIL\n")
    # The job prints between calls: all of it must have arrived before the next call.
    await wait_for(lambda: session._between is not None and session._between.total >= expected, within=30,
                   what="the background job's output", show=lambda: session._between and session._between.total)
    r = await session.run("echo next")
    assert r.truncated
    assert r.output_bytes == 1_000_000 + len("\nBGTAIL\nnext\n")
    assert r.output.endswith("BGTAIL\nnext\n")


async def test_the_abort_signal_at_an_idle_shell_loses_nothing(session: RemoteBashSession) -> None:
    """A timeout's abort signal (USR2) that reaches the shell just after its call ended, while it
    waits for the next one, must neither leave the call loop nor swallow the next call."""
    await session.run("KEEP=1")
    assert session.info is not None
    for _ in range(3):
        os.kill(session.info.shell_pid, signal.SIGUSR2)
        r = await session.run("echo $KEEP")
        assert (r.output, r.exit_code, r.shell_lost) == ("1\n", 0, False)


@pytest.mark.parametrize("bad", [float("nan"), 0.0, -1.0])
async def test_a_timeout_that_is_not_a_positive_number_is_refused_before_anything(web1: Host, tmp_path: Path,
                                                                                   bad: float) -> None:
    from remote_bash.audit import AuditLog

    audit = AuditLog(tmp_path)
    session = RemoteBashSession(web1, audit=audit)
    with pytest.raises(ValueError, match=f"timeout must be a positive number of seconds, got {bad}"):
        await session.run("echo hi", timeout=bad)
    assert session.info is None  # never connected
    assert audit.read(web1.name) == []
    await session.close()


async def test_a_line_longer_than_what_is_kept_is_not_shown_in_part(session: RemoteBashSession) -> None:
    """The kept start and end of a long output end at line ends (a secret could straddle the cut),
    as the README says: the lines around a 100 KB line are shown, the long line is not."""
    r = await session.run("echo start; head -c 100000 /dev/zero | tr '\\0' a; echo; echo end")
    assert r.truncated and r.output_bytes == 100_011
    assert r.output.startswith("start\n") and r.output.endswith("end\n")
    assert "a" * 100 not in r.output
