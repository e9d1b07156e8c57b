"""A session's end skips the costly scan for leftovers only when nothing can be left.

End to end: every way a command can leave something running (a job, ``nohup``, ``disown``,
``setsid``, a double fork, a daemon that cleared its environment) is still found at close and
stopped, or reported when nothing tells whose it is. Then the check itself, run in a local
process of the test user that stands for the shell: it passes when nothing was started, and fails
for each way something could have been left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_bash import Host, RemoteBashSession, reaper

from .sshd import TestHosts, processes_with, reaped


def _marker() -> str:
    return f"rbleft{uuid.uuid4().hex[:10]}"


def _pids(mark: str, user: str) -> list[int]:
    return [int(line.split()[0]) for line in processes_with(mark, user)]


def _until(predicate: object, what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


# Each leaves `sh -c 'sleep 300; : MARK'` running after the call returns (sh stays, so its command
# line keeps the marker).
TAGGED = {
    "job": "{cmd} &",
    "nohup": "nohup {cmd} >/dev/null 2>&1 &",
    "disown": "{cmd} & disown",
    "setsid": "setsid {cmd} >/dev/null 2>&1 < /dev/null &",
    "setsid -f": "setsid -f {cmd} >/dev/null 2>&1 < /dev/null",
    "double fork": "( ( exec setsid {cmd} >/dev/null 2>&1 < /dev/null & ) & )",
}


async def _close_stops(web1: Host, hosts: TestHosts, how: str, then: str = "") -> None:
    """A command leaves a ``how`` process running, ``then`` (a later call) changes the shell: the
    session's end stops the process."""
    mark = _marker()
    with reaped(mark, hosts.user):
        session = RemoteBashSession(web1, kill_grace=0.5, audit=False)
        await session.start()
        r = await session.run(TAGGED[how].format(cmd=f"sh -c 'sleep 300; : {mark}'") + "\necho started")
        assert "started" in r.output
        _until(lambda: _pids(mark, hosts.user), f"the {how} process to start")
        if then:
            await session.run(then)
        report = await session.close()
        assert report is not None and report.signals == ["KILL"], report
        _until(lambda: not _pids(mark, hosts.user), f"close to stop the {how} process")


@pytest.mark.parametrize("how", sorted(TAGGED))
async def test_close_stops_what_a_command_left_running(web1: Host, hosts: TestHosts, how: str) -> None:
    await _close_stops(web1, hosts, how)


LEFT_STATE = {
    "set -x": "set -x",
    "set -v": "set -v",
    "set -xv": "set -xv",
    "PATH": "PATH=/nowhere",
    "functions": "awk() { return 0; }; sh() { return 0; }; grep() { return 0; }",
    "GLOBIGNORE": "GLOBIGNORE='/proc/[0-9]*'",
    "traps and options": "trap 'true' DEBUG EXIT ERR RETURN; set -euf -o pipefail; set -a",
}


@pytest.mark.parametrize("state", sorted(LEFT_STATE))
async def test_close_stops_a_job_whatever_the_shell_was_left_with(web1: Host, hosts: TestHosts, state: str) -> None:
    """The shell runs the end's check itself: no option, variable, function or trap a command left
    makes it miss a job (nor the full scan, which inherits the shell's PATH). Traced or echoed,
    the end's script text holds the report's words: they are not the report. The job left the
    shell's tree: it is found by its tag, which takes grep and sed."""
    await _close_stops(web1, hosts, "double fork", LEFT_STATE[state])


def test_only_a_report_line_of_its_own_ends_the_wait() -> None:
    assert reaper.reported(b"RBUP 12.5\nRBKILL 0\n")
    assert reaper.reported(b"RBKILL 3\n")
    assert not reaper.reported(b"RBKILL 3")  # not whole yet
    assert not reaper.reported(b"+ builtin exec /bin/sh -c 'echo \"RBKILL 0\"'\n")
    assert not reaper.reported(b"then echo RBKILL 0\n")
    assert not reaper.reported(b'echo "RBKILL $#"\n')


@pytest.mark.parametrize("end", ["exit 0", "kill -9 $$"])
async def test_close_stops_what_an_earlier_shell_of_the_session_left_running(web1: Host, hosts: TestHosts,
                                                                              end: str) -> None:
    """A job of a shell that died (its state lost) outlives it, adopted by init; the session's next
    shell started after it, so close must not take that shell's clean state for the session's."""
    mark = _marker()
    with reaped(mark, hosts.user):
        session = RemoteBashSession(web1, kill_grace=0.5, audit=False)
        await session.start()
        await session.run(f"sh -c 'sleep 300; : {mark}' &")
        _until(lambda: _pids(mark, hosts.user), "the job to start")
        assert (await session.run(end)).shell_lost
        assert (await session.run("echo fresh")).output == "fresh\n"
        report = await session.close()
        assert report is not None and report.signals == ["KILL"], report
        _until(lambda: not _pids(mark, hosts.user), "close to stop the earlier shell's job")


async def _shell_died_after(host: Host, hosts: TestHosts, mark: str, command: str) -> RemoteBashSession:
    """A session whose shell ran ``command`` (which leaves ``mark`` running), then died."""
    session = RemoteBashSession(host, kill_grace=0.5, audit=False)
    await session.start()
    await session.run(command)
    _until(lambda: _pids(mark, hosts.user), "what the command left to start")
    assert (await session.run("exit 3")).shell_lost
    return session


@pytest.mark.parametrize("then", ["close", "restart"])
async def test_close_or_restart_right_after_a_shell_died_stops_its_jobs(web1: Host, hosts: TestHosts,
                                                                         then: str) -> None:
    """No shell is left to end, yet the dead one's job runs on, adopted by init: it is stopped."""
    mark = _marker()
    with reaped(mark, hosts.user):
        session = await _shell_died_after(web1, hosts, mark, f"nohup sh -c 'sleep 300; : {mark}' >/dev/null 2>&1 &")
        if then == "restart":
            await session.restart()
            _until(lambda: not _pids(mark, hosts.user), "restart to stop the dead shell's job")
            assert session.last_kill is not None and session.last_kill.signals == ["KILL"]
        report = await session.close()
        if then == "close":
            assert report is not None and report.signals == ["KILL"], report
        _until(lambda: not _pids(mark, hosts.user), "close to stop the dead shell's job")


@pytest.mark.parametrize("how", ["env -i setsid", "env -i double fork", "env -i, a newline in its name",
                                 "its session tag rewritten", "its session tag removed", "the shell's tag unset"])
async def test_close_reports_a_daemon_that_cleared_its_environment(web1: Host, hosts: TestHosts, how: str) -> None:
    mark = _marker()
    command = {
        "env -i setsid": "(env -i setsid sh -c 'sleep 300; : {mark}' &)",
        "env -i double fork": "( ( exec env -i setsid sh -c 'sleep 300; : {mark}' & ) & )",
        # The name's newline cuts its line of /proc/PID/stat in two.
        "env -i, a newline in its name":
            "(env -i setsid sh -c 'printf \"rb\\nx\" >/proc/$$/comm; sleep 300; : {mark}' &)",
        # Still carrying the call's tag, not the session's: no other session's, so named all the same.
        "its session tag rewritten": "(REMOTE_BASH_SESSION=zz setsid sh -c 'sleep 300; : {mark}' &)",
        "its session tag removed": "(env -u REMOTE_BASH_SESSION setsid sh -c 'sleep 300; : {mark}' &)",
        "the shell's tag unset": "unset REMOTE_BASH_SESSION; (setsid sh -c 'sleep 300; : {mark}' &)",
    }[how].format(mark=mark)
    with reaped(mark, hosts.user):
        session = RemoteBashSession(web1, kill_grace=0.5, audit=False)
        await session.start()
        await session.run(command)
        _until(lambda: _pids(mark, hosts.user), "the daemon to start")
        report = await session.close()
        pids = _pids(mark, hosts.user)
        # No login cgroup here: the full scan ran, and says what it could not tell apart.
        assert report is not None and report.unchecked is not None, report
        assert pids and str(pids[0]) in report.unchecked


@pytest.mark.parametrize("then", ["close", "restart"])
async def test_a_daemon_a_dead_shell_left_is_named_at_close_or_restart(web1: Host, hosts: TestHosts,
                                                                       then: str) -> None:
    """The shell that started it is gone, so nothing is below it: the daemon is looked for from
    another channel of the same login, and named (no login cgroup here to stop it by)."""
    mark = _marker()
    with reaped(mark, hosts.user):
        session = await _shell_died_after(web1, hosts, mark, f"(env -i setsid sh -c 'sleep 300; : {mark}' &)")
        if then == "restart":
            await session.restart()
            report = session.last_kill
        else:
            report = await session.close()
        pids = _pids(mark, hosts.user)
        assert report is not None and report.unchecked is not None, report
        assert pids and str(pids[0]) in report.unchecked
        await session.close()


async def test_a_clean_session_ends_without_a_report(web1: Host) -> None:
    async with RemoteBashSession(web1, audit=False) as session:
        await session.run("uname -a; ls / >/dev/null")
    assert session.last_kill is not None
    assert session.last_kill.signals == [] and session.last_kill.unchecked is None


# -- the check itself, in a local process that stands for the shell --------------------------------


# Stands between the test and the shell as a child subreaper (as a container's init or a service
# manager can): what leaves the shell's tree is adopted by it, not by init. It prints the shell's pid,
# then reaps every child until the shell has ended.
_SUBREAPER = """
import ctypes, os, subprocess, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
shell = subprocess.Popen(["bash", "--noprofile", "--norc", "-c", sys.argv[2]], user=sys.argv[1], group=sys.argv[1],
                         extra_groups=[],
                         stderr=subprocess.DEVNULL)
print(shell.pid, file=sys.stderr, flush=True)
shell.wait()
"""


SESSION_ID = "0123456789ab"


def _run_close(user: str, before: str = "", *, wait_for: str | None = None, subreaper: bool = False,
               env_tag: bool = True) -> str:
    """Start ``bash`` as ``user``, run ``before`` in it, then the end-of-session script in that
    bash, the shell (``$$``). The tag is exported by the shell, as the session's start-up script
    does: it is not in the environment the shell started with. The user's own group, not root's:
    with another group, the user's processes' environments could not be read, as they can in a
    login."""
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as fh:
        path = Path(fh.name)
    os.chmod(path, 0o644)
    tag = f"export REMOTE_BASH_SESSION={SESSION_ID}\n" if env_tag else ""
    command = f"{tag}{before}\nread -r script; . \"$script\""
    env = {k: v for k, v in os.environ.items() if k != "REMOTE_BASH_SESSION"}
    if subreaper:
        proc = subprocess.Popen([sys.executable, "-c", _SUBREAPER, user, command], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert proc.stderr is not None
        shell_pid = int(proc.stderr.readline())
    else:
        proc = subprocess.Popen(["bash", "--noprofile", "--norc", "-c", command], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, user=user, group=user, extra_groups=[],
                                env=env)
        shell_pid = proc.pid
    try:
        stat = Path(f"/proc/{shell_pid}/stat").read_text()
        start = int(stat.rsplit(")", 1)[1].split()[19])
        if wait_for is not None:
            _until(lambda: processes_with(wait_for, user), f"{wait_for} to start")
        path.write_text(reaper.end_script(f"REMOTE_BASH_SESSION={SESSION_ID}", shell_pid, start - 1))
        out, _ = proc.communicate(f"{path}\n", timeout=60)
        return out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
        path.unlink()


@pytest.fixture
def local_user(hosts: TestHosts) -> str:
    if os.geteuid() != 0:
        pytest.skip("runs the check as the test user (needs root to switch to it)")
    return hosts.user


@pytest.fixture
def split_marker(hosts: TestHosts) -> Iterator[tuple[str, str]]:
    """A marker in two halves: the shell's command line holds each half, only the process it
    leaves holds them joined."""
    mark = _marker()
    with reaped(mark, hosts.user):
        yield mark[:8], mark[8:]


@pytest.mark.parametrize("subreaper", [False, True], ids=["init", "subreaper"])
def test_the_check_passes_when_nothing_was_started(local_user: str, subreaper: bool) -> None:
    out = _run_close(local_user, "ls / >/dev/null; true", subreaper=subreaper)
    assert "RBCLEAN" in out and "RBKILL 0" in out, out


def test_the_check_fails_for_a_job_still_running(local_user: str, split_marker: tuple[str, str]) -> None:
    a, b = split_marker
    out = _run_close(local_user, f"p={a} q={b}; sh -c \"sleep 300; : $p$q\" >/dev/null 2>&1 &", wait_for=a + b)
    assert "RBCLEAN" not in out and "RBKILL" in out, out


LEFT_THE_TREE = {
    "setsid": "( setsid {cmd} >/dev/null 2>&1 </dev/null & )",
    "nohup": "( nohup {cmd} >/dev/null 2>&1 & )",
    "disown": "export p q; ( bash -c '{cmd} >/dev/null 2>&1 & disown' )",
    "double fork": "( ( {cmd} >/dev/null 2>&1 </dev/null & ) & ); wait",
    "env -i double fork": "( ( exec env -i setsid {cmd} </dev/null >/dev/null 2>&1 & ) & ); wait",
}


@pytest.mark.parametrize("subreaper", [False, True], ids=["init", "subreaper"])
@pytest.mark.parametrize("how", sorted(LEFT_THE_TREE))
def test_the_check_fails_for_a_process_that_left_the_tree(local_user: str, split_marker: tuple[str, str],
                                                          how: str, subreaper: bool) -> None:
    """Adopted by init (a child of init of the user) or by a subreaper above the shell (a child of
    one of the shell's ancestors): each is looked for on its own."""
    a, b = split_marker
    start = f"p={a} q={b}; " + LEFT_THE_TREE[how].format(cmd="sh -c \"sleep 300; : $p$q\"")
    out = _run_close(local_user, start, wait_for=a + b, subreaper=subreaper)
    assert "RBCLEAN" not in out and "RBKILL" in out, out


def test_the_check_fails_for_a_process_whose_name_holds_a_newline(local_user: str,
                                                                  split_marker: tuple[str, str]) -> None:
    """Its line of /proc/PID/stat is cut in two: the check cannot read it, so it proves nothing. The
    process waits on a FIFO (no child to give it away)."""
    a, b = split_marker
    directory = Path(tempfile.mkdtemp(prefix="rb-fifo-"))
    try:
        directory.chmod(0o755)
        fifo = directory / "fifo"
        os.mkfifo(fifo, 0o666)
        fifo.chmod(0o666)
        start = (f"p={a} q={b}; ( setsid sh -c \"printf 'rb\\nx' >/proc/\\$\\$/comm; read x <>{fifo}; : $p$q\" "
                 ">/dev/null 2>&1 </dev/null & )")
        out = _run_close(local_user, start, wait_for=a + b)
        assert "RBCLEAN" not in out and "RBKILL" in out, out
    finally:
        fifo.unlink(missing_ok=True)
        directory.rmdir()


def test_the_check_fails_for_a_process_an_older_daemon_started(local_user: str,
                                                               split_marker: tuple[str, str]) -> None:
    """A process of the user started since the shell by a daemon of the user older than the shell:
    the full scan reports it as a stray, so the check must leave the scan to run."""
    a, b = split_marker
    daemon = f"p={a} q={b}; sleep 1; sh -c \"sleep 300; : $p$q\" & sleep 20"
    starter = subprocess.Popen(
        ["/bin/sh", "-c", f"( ( exec setsid sh -c '{daemon}' </dev/null >/dev/null 2>&1 & ) & )"],
        user=local_user, group=local_user, extra_groups=[], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    starter.wait(timeout=10)
    _until(lambda: processes_with(f"p={a} q={b}", local_user), "the daemon to start")
    # The shell starts well after the daemon (start times are in ticks of 10 ms), its child later.
    time.sleep(0.2)
    out = _run_close(local_user, "true", wait_for=a + b)
    assert "RBCLEAN" not in out and "RBKILL" in out, out


def test_the_check_fails_for_a_tagged_process_below_another_users_daemon(local_user: str,
                                                                         split_marker: tuple[str, str]) -> None:
    """As ``atd`` runs a job: a root daemon older than the shell starts a process of the user with
    the session's tag. Not a stray (its parent is root's), but the scan finds it by its tag."""
    a, b = split_marker
    job = f"p={a} q={b}; sleep 1; runuser -u {local_user} -- env REMOTE_BASH_SESSION={SESSION_ID} " \
          f"sh -c \"sleep 300; : $p$q\" & sleep 20"
    # A process group of its own: the cleanup stops runuser and what it started too, not only the sh.
    daemon = subprocess.Popen(["/bin/sh", "-c", job], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        _until(lambda: processes_with(f"p={a} q={b}", "root"), "the daemon to start")
        time.sleep(0.2)
        out = _run_close(local_user, "true", wait_for=a + b)
        assert "RBCLEAN" not in out and "RBKILL" in out, out
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait(timeout=10)


def test_the_check_fails_when_the_shell_lost_its_tag(local_user: str) -> None:
    """The shell's own environment is the check's proof that environments can be read: without the
    tag there (a command unset it), the scan runs."""
    out = _run_close(local_user, "true", env_tag=False)
    assert "RBCLEAN" not in out and "RBKILL" in out, out


def test_the_awk_programs_hold_no_quote_that_would_end_them() -> None:
    # Each is passed to awk inside single quotes: an apostrophe, even in a comment, ends it there.
    for program in (reaper._STRAY_AWK, reaper._CLEAN_AWK):
        assert "'" not in program
