"""A command's input: ``remote-bash exec`` forwards a stdin that is not a terminal, as ``ssh`` does,
and ``session.run(cmd, stdin=...)`` takes bytes, a file or an async iterable, against real sshd.

Every test also checks that nothing is left on the host: no FIFO directory, no writer process.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import pty
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from remote_bash import framing
from remote_bash._stdin import CHUNK, STDIN_ENV, StdinFeed, chunks, writer_script
from remote_bash.audit import AuditLog
from remote_bash.errors import ConnectionLost, PolicyDenied, SessionError
from remote_bash.models import CommandPolicy, Host
from remote_bash.session import RemoteBashSession

from .sshd import TestHosts
from .test_cli import CLI, base_env, host_entry, write_inventory
from .test_session import _session_sshd_pids
from .waiting import wait_for, wait_until

TMP = Path("/tmp")


def fifo_dirs() -> set[str]:
    return {p.name for p in TMP.glob("remote-bash-stdin.*")}


def writers() -> list[int]:
    """Processes that are the input channel's writer (they carry its nonce variable)."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"\0{STDIN_ENV}=".encode() in b"\0" + environ.read_bytes():
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


@pytest.fixture
def clean() -> Iterator[None]:
    """Fails the test if it left a FIFO directory or a writer behind (waiting a little for the
    writer's channel to close, which may trail the result)."""
    before = fifo_dirs()
    yield
    wait_until(lambda: not (fifo_dirs() - before) and not writers(), within=10,
               what="no FIFO directory and no writer left",
               show=lambda: f"directories {fifo_dirs() - before}, writers {writers()}")


@pytest.fixture(scope="module")
def stdin_host(hosts: TestHosts) -> Host:
    return hosts.start("stdin-a")


@pytest.fixture
def env(tmp_path: Path, stdin_host: Host) -> dict[str, str]:
    inventory = write_inventory(tmp_path / "hosts.yaml", {
        "stdin-a": host_entry(stdin_host),
        "guarded": host_entry(stdin_host, policy={"deny": [r"\bcat\b"]}),
    })
    return {**base_env(tmp_path), "REMOTE_BASH_INVENTORY": str(inventory),
            "REMOTE_BASH_AUDIT_DIR": str(tmp_path / "audit")}


def run(env: dict[str, str], *args: str, stdin: bytes, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    """The CLI with ``stdin`` on a pipe."""
    return subprocess.run([*CLI, *args], env=env, input=stdin, capture_output=True, timeout=timeout)


def finish(proc: subprocess.Popen[bytes]) -> None:
    """Kill ``proc`` if it still runs and close its pipes."""
    proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def records(env: dict[str, str], host: str) -> list[dict[str, object]]:
    out = subprocess.run([*CLI, "audit", "show", "--json", host], env=env, capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


# -- the command line ----------------------------------------------------------------------------------


def test_a_pipe_reaches_the_command_and_the_audit_log_counts_it(env: dict[str, str], clean: None) -> None:
    out = run(env, "exec", "stdin-a", "--", "cat; echo; echo done", stdin=b"hi from a pipe secret-4711")
    assert (out.returncode, out.stdout, out.stderr) == (0, b"hi from a pipe secret-4711\ndone\n", b"")

    start, end = [r for r in records(env, "stdin-a") if str(r["event"]).startswith("exec.")][-2:]
    assert start["event"] == "exec.start" and start["stdin"] == "forwarded"
    assert end["stdin_bytes"] == 26 and end["stdin_complete"] is True
    # Neither its content nor a digest of it is recorded: a digest of a piped password gives the
    # password back to a dictionary search. (The output is, as always: the command printed it.)
    assert not any(key.startswith("stdin_") and "sha" in key for key in end)
    run(env, "exec", "stdin-a", "--", "wc -c", stdin=b"never-in-the-log-0815")
    logs = b"".join(p.read_bytes() for p in (Path(env["REMOTE_BASH_AUDIT_DIR"])).rglob("*") if p.is_file())
    assert b"never-in-the-log-0815" not in logs and b"21" in logs
    assert hashlib.sha256(b"never-in-the-log-0815").hexdigest().encode() not in logs


def test_a_file_of_random_bytes_arrives_exactly(env: dict[str, str], tmp_path: Path, clean: None) -> None:
    data = os.urandom(4 * 1024 * 1024 + 17)
    source = tmp_path / "blob"
    source.write_bytes(data)
    with source.open("rb") as fh:
        out = subprocess.run([*CLI, "exec", "stdin-a", "--", "tee >(wc -c >&2) | sha256sum | cut -c1-64"],
                             env=env, stdin=fh, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = sorted(out.stdout.decode().split())
    assert lines == sorted([hashlib.sha256(data).hexdigest(), str(len(data))])


def test_empty_input_and_dev_null_give_end_of_file_at_once(env: dict[str, str], clean: None) -> None:
    assert run(env, "exec", "stdin-a", "--", "cat; echo end", stdin=b"").stdout == b"end\n"
    before = len(records(env, "stdin-a"))
    out = subprocess.run([*CLI, "exec", "stdin-a", "--", "cat; echo end"], env=env, stdin=subprocess.DEVNULL,
                         capture_output=True, timeout=60)
    assert (out.returncode, out.stdout) == (0, b"end\n")
    # /dev/null is not forwarded at all: the command reads the session's own /dev/null, as before.
    assert "stdin" not in next(r for r in records(env, "stdin-a")[before:] if r["event"] == "exec.start")


def test_a_terminal_is_not_forwarded(env: dict[str, str], clean: None) -> None:
    controller, terminal = pty.openpty()
    try:
        out = subprocess.run([*CLI, "exec", "stdin-a", "--", "cat; echo end"], env=env, stdin=terminal,
                             capture_output=True, timeout=60)
    finally:
        os.close(terminal)
        os.close(controller)
    assert (out.returncode, out.stdout) == (0, b"end\n")


def test_no_stdin_option_sends_nothing(env: dict[str, str], clean: None) -> None:
    out = run(env, "exec", "-n", "stdin-a", "--", "cat; echo end", stdin=b"not sent")
    assert (out.returncode, out.stdout) == (0, b"end\n")


def test_a_loop_over_a_file_needs_no_stdin_as_with_ssh(env: dict[str, str], tmp_path: Path,
                                                        clean: None) -> None:
    hosts_file = tmp_path / "hosts.txt"
    hosts_file.write_text("a\nb\nc\n")
    cli = " ".join(shlex.quote(word) for word in CLI)
    loop = 'while read -r h; do {cli} exec {opt} stdin-a -- "echo $h"; done < {file}'
    for opt, expected in (("", "a\n"), ("-n", "a\nb\nc\n")):
        out = subprocess.run(["bash", "-c", loop.format(cli=cli, opt=opt, file=shlex.quote(str(hosts_file)))],
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.stdout == expected, (opt, out.stderr)


def test_a_command_that_reads_nothing_does_not_wait_for_the_input(env: dict[str, str], clean: None) -> None:
    # The local writer never writes nor closes: the call ends with the command, as with ssh.
    proc = subprocess.Popen([*CLI, "exec", "stdin-a", "--", "echo no input needed; exit 3"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        out = proc.stdout.read()  # until the client exits, with its stdin still open
        assert proc.wait(timeout=60) == 3
        assert out == b"no input needed\n"
    finally:
        finish(proc)


def test_a_command_that_stops_reading_ends_the_writer_with_sigpipe(env: dict[str, str], clean: None) -> None:
    producer = subprocess.Popen(["yes", "line"], stdout=subprocess.PIPE)
    try:
        out = subprocess.run([*CLI, "exec", "stdin-a", "--", "head -n 3"], env=env, stdin=producer.stdout,
                             capture_output=True, timeout=60)
        assert producer.stdout is not None
        producer.stdout.close()
        assert (out.returncode, out.stdout) == (0, b"line\nline\nline\n")
        assert producer.wait(timeout=20) == -signal.SIGPIPE
    finally:
        finish(producer)


def test_timeout_while_waiting_for_input_kills_and_cleans_up(env: dict[str, str], clean: None) -> None:
    proc = subprocess.Popen([*CLI, "exec", "--timeout", "1", "stdin-a", "--", "cat"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(b"partial\n")
        proc.stdin.flush()
        out = proc.stdout.read()  # the input stays open: only the deadline ends the command
        assert proc.wait(timeout=60) == 124
        assert b"did not finish within 1 s" in proc.stderr.read()
    finally:
        finish(proc)
    assert out == b"partial\n"


def test_ctrl_c_while_feeding_kills_the_command(env: dict[str, str], clean: None) -> None:
    proc = subprocess.Popen([*CLI, "exec", "stdin-a", "--", "cat"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(b"first\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == b"first\n"  # the command runs and reads
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    finally:
        finish(proc)


def test_policy_refusal_reads_and_sends_nothing(env: dict[str, str], clean: None) -> None:
    out = run(env, "exec", "guarded", "--", "cat", stdin=b"x" * 100)
    assert out.returncode == 126, out.stderr
    assert b"deny rule" in out.stderr


def test_kept_sessions_refuse_stdin_clearly(env: dict[str, str]) -> None:
    out = run(env, "exec", "--keep", "stdin-a", "--", "cat", stdin=b"data")
    assert out.returncode == 2
    assert b"does not pass stdin" in out.stderr and b"--no-keep" in out.stderr


def test_fleet_exec_refuses_piped_input_runs_nothing_and_leaves_it_unread(env: dict[str, str]) -> None:
    """Run with /dev/null instead, `fleet exec web -- bash < fix.sh` would do nothing on every host
    and say it succeeded. Refused, nothing runs; the input is still there for the next reader."""
    mark = f"/tmp/rb-fleet-stdin-{os.getpid()}-{id(env)}"
    line = f"{shlex.join([*CLI, 'fleet', 'exec', 'stdin-a', '--', f'touch {mark}; cat'])}; cat"
    out = subprocess.run(["sh", "-c", line], env=env, input=b"left for the next reader", capture_output=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr  # the status of the last cat: the CLI's is below
    assert b"fleet exec does not send stdin" in out.stderr and b"-n" in out.stderr, out.stderr
    assert out.stdout == b"left for the next reader"
    assert not Path(mark).exists()
    refused = run(env, "fleet", "exec", "stdin-a", "--", "true", stdin=b"data")
    assert refused.returncode == 2 and refused.stderr.count(b"\n") == 1, refused.stderr
    ran = run(env, "fleet", "exec", "-n", "stdin-a", "--", "cat; echo ran", stdin=b"not sent")
    assert ran.returncode == 0 and b"ran" in ran.stdout and b"not sent" not in ran.stdout, ran


def test_200_mb_stream_keeps_the_client_small(env: dict[str, str], clean: None) -> None:
    """Peak RSS of the client with 200 MB of input, against the same call with 1 KB."""
    probe = ("import resource, subprocess, sys\n"
             "size = int(sys.argv[1])\n"
             "src = subprocess.Popen(['head', '-c', str(size), '/dev/zero'], stdout=subprocess.PIPE)\n"
             "out = subprocess.run(sys.argv[2:], stdin=src.stdout, capture_output=True)\n"
             "src.wait()\n"
             "print(out.returncode, out.stdout.decode().strip(), resource.getrusage(resource.RUSAGE_CHILDREN)"
             ".ru_maxrss)\n")
    peaks = {}
    for size in (1024, 200_000_000):
        out = subprocess.run([sys.executable, "-c", probe, str(size), *CLI, "exec", "--timeout", "600", "stdin-a",
                              "--", "wc -c"], env=env, capture_output=True, text=True, timeout=900)
        status, count, peak = out.stdout.split()
        assert (status, count) == ("0", str(size)), out
        peaks[size] = int(peak)
    print(f"peak RSS of the client: {peaks[1024] / 1024:.1f} MB with 1 KB, {peaks[200_000_000] / 1024:.1f} MB "
          "with 200 MB of input")
    assert peaks[200_000_000] - peaks[1024] < 32 * 1024, peaks


# -- the Python API ------------------------------------------------------------------------------------


@pytest.fixture
async def api(stdin_host: Host, tmp_path: Path) -> AsyncIterator[RemoteBashSession]:
    async with RemoteBashSession(stdin_host, audit=AuditLog(tmp_path / "audit"), kill_grace=0.5) as s:
        yield s


async def test_bytes_files_and_async_iterables(api: RemoteBashSession, tmp_path: Path, clean: None) -> None:
    data = os.urandom(1_500_000)
    digest = hashlib.sha256(data).hexdigest()
    r = await api.run("sha256sum | cut -c1-64", stdin=data, timeout=60)
    assert r.output == digest + "\n"
    r = await api.run("sha256sum | cut -c1-64", stdin=io.BytesIO(data), timeout=60)
    assert r.output == digest + "\n"
    (tmp_path / "f").write_bytes(data)
    with (tmp_path / "f").open("rb") as fh:
        r = await api.run("sha256sum | cut -c1-64", stdin=fh, timeout=60)
    assert r.output == digest + "\n"

    async def parts() -> AsyncIterator[bytes]:
        for at in range(0, len(data), 100_000):
            yield data[at : at + 100_000]

    r = await api.run("sha256sum | cut -c1-64", stdin=parts(), timeout=60)
    assert r.output == digest + "\n"
    with pytest.raises(TypeError, match="not str"):
        await api.run("cat", stdin="text")  # type: ignore[arg-type]


@pytest.mark.parametrize("raised", [RuntimeError, asyncio.CancelledError])
async def test_a_source_that_raises_ends_the_input_and_is_recorded(api: RemoteBashSession, tmp_path: Path,
                                                                   clean: None, raised: type[BaseException]) -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"abc"
        raise raised("the source broke")

    r = await api.run("wc -c", stdin=broken(), timeout=60)
    assert (r.output.strip(), r.timed_out) == ("3", False)  # its input ended there: no wait for the deadline
    (end,) = [rec for rec in AuditLog(tmp_path / "audit").read(api.host.name) if rec["event"] == "exec.end"]
    assert end["stdin_complete"] is False and f"{raised.__name__}: the source broke" in end["stdin_error"]


async def test_the_command_runs_in_the_session_and_reads_as_input_comes(api: RemoteBashSession,
                                                                        clean: None) -> None:
    r = await api.run("read -r first; cd /tmp", stdin=b"kept value\nrest\n")
    assert r.exit_code == 0
    r = await api.run('echo "$first"; pwd')
    assert r.output == "kept value\n/tmp\n"

    seen: list[str] = []
    answered = asyncio.Event()

    async def conversation() -> AsyncIterator[bytes]:
        yield b"one\n"
        await asyncio.wait_for(answered.wait(), 30)  # the next line only after the first was read
        yield b"two\n"

    def on_output(text: str) -> None:
        seen.append(text)
        if "got one" in "".join(seen):
            answered.set()

    r = await api.run("while read -r x; do echo got $x; done", stdin=conversation(), on_output=on_output,
                      timeout=60)
    assert r.output == "got one\ngot two\n"


async def test_an_endless_source_ends_with_the_command(api: RemoteBashSession, clean: None) -> None:
    async def endless() -> AsyncIterator[bytes]:
        while True:
            yield b"y" * 65536
            await asyncio.sleep(0)

    r = await api.run("head -c 10 >/dev/null; echo read enough", stdin=endless(), timeout=60)
    assert (r.output, r.exit_code) == ("read enough\n", 0)

    async def silent() -> AsyncIterator[bytes]:
        await asyncio.sleep(3600)
        yield b""

    r = await api.run("echo never reads", stdin=silent(), timeout=60)
    assert r.output == "never reads\n"
    r = await api.run("cat", stdin=silent(), timeout=1)
    assert r.timed_out
    assert (await api.run("echo still fine")).output == "still fine\n"


async def test_a_command_that_ends_the_shell_still_gets_its_input(api: RemoteBashSession, clean: None) -> None:
    r = await api.run("head -c 3; exit 7", stdin=b"abcdef")
    assert (r.output, r.exit_code, r.shell_lost) == ("abc", 7, True)
    r = await api.run("exec cat", stdin=b"the shell became cat\n")
    assert (r.output, r.exit_code) == ("the shell became cat\n", 0)
    assert (await api.run("echo fresh shell")).output == "fresh shell\n"


async def test_a_pipe_that_never_ends_leaves_no_reading_thread(api: RemoteBashSession, clean: None) -> None:
    import threading

    read_end, write_end = os.pipe()
    try:
        with os.fdopen(read_end, "rb", buffering=0, closefd=False) as pipe:
            r = await api.run("echo done", stdin=pipe, timeout=30)
            assert r.output == "done\n"
            os.write(write_end, b"wake the reader\n")  # its read returns; it sees it must stop
            # The loop must run meanwhile: the thread hands its chunk over through it.
            await wait_for(lambda: not any(t.name == "remote-bash-stdin" for t in threading.enumerate()),
                           within=20, what="the reading thread to end")
    finally:
        os.close(read_end)
        os.close(write_end)


async def test_cancel_and_policy(stdin_host: Host, clean: None) -> None:
    host = stdin_host.model_copy(update={"policy": CommandPolicy(deny=[r"\bdd\b"])})
    async with RemoteBashSession(host, audit=False, kill_grace=0.5) as s:
        source = io.BytesIO(b"abc")
        with pytest.raises(PolicyDenied):
            await s.run("dd of=/dev/null", stdin=source)
        assert source.tell() == 0  # refused before anything was read

        async def slow() -> AsyncIterator[bytes]:
            yield b"start\n"
            await asyncio.sleep(3600)
            yield b""

        seen = asyncio.Event()
        task = asyncio.create_task(s.run("cat", stdin=slow(), on_output=lambda _t: seen.set(), timeout=60))
        await asyncio.wait_for(seen.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await s.run("echo after")).output == "after\n"


async def test_a_host_that_cannot_make_the_fifo_runs_nothing(hosts: TestHosts, tmp_path: Path,
                                                             clean: None) -> None:
    host = hosts.start("stdin-notmp", extra_config=("SetEnv TMPDIR=/nonexistent-rb-tmp",))
    mark = tmp_path / "ran"
    async with RemoteBashSession(host, audit=AuditLog(tmp_path / "audit")) as s:
        with pytest.raises(SessionError, match=r"could not create a FIFO.*not run"):
            await s.run(f"touch {mark}", stdin=b"data")
        assert not mark.exists()
        assert (await s.run("echo usable")).output == "usable\n"


async def test_connection_loss_while_feeding(hosts: TestHosts, clean: None) -> None:
    host = hosts.start("stdin-lossy")
    server = hosts.servers["stdin-lossy"]
    async with RemoteBashSession(host, audit=False) as s:
        seen = asyncio.Event()

        async def slow() -> AsyncIterator[bytes]:
            yield b"start\n"
            await asyncio.sleep(3600)
            yield b""

        task = asyncio.create_task(s.run("cat", stdin=slow(), on_output=lambda _t: seen.set(), timeout=60))
        await asyncio.wait_for(seen.wait(), 30)
        for pid in _session_sshd_pids(server.pid):
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(task, 30)
        assert (await s.run("echo reconnected")).output == "reconnected\n"


async def test_a_fifo_never_used_goes_away_even_with_the_connection(hosts: TestHosts, clean: None) -> None:
    host = hosts.start("stdin-unused")
    async with RemoteBashSession(host, audit=False) as s:
        async with s.exclusive() as conn:
            feed = StdinFeed(b"never sent", host=host.name, session_id=s.session_id)
            path = Path(await feed.open(conn))
            assert path.is_fifo() and oct(path.parent.stat().st_mode & 0o777) == "0o700"
            await feed.close()  # the command was never sent (a refused or failed call)
        assert not path.parent.exists()
        async with s.exclusive() as conn:
            feed = StdinFeed(b"never sent", host=host.name, session_id=s.session_id)
            path = Path(await feed.open(conn))
            for pid in _session_sshd_pids(hosts.servers["stdin-unused"].pid):
                os.kill(pid, signal.SIGKILL)  # the connection dies before the command was sent
            await wait_for(lambda: not path.parent.exists() and not writers(), within=20,
                           what="the writer to remove its directory and exit")
            await feed.close()


# -- the pieces ------------------------------------------------------------------------------------------


def test_the_frame_reads_the_fifo_only_when_asked() -> None:
    token, names = framing.CallToken.new(), framing.ShellNames.new()
    size = framing.HEADER_SIZE
    plain = framing.frame_command("cat", token, names)
    assert plain[size - 1:size] == b"-" and plain[size:] == b"cat"  # the driver's eval reads /dev/null
    framed = framing.frame_command("cat", token, names, stdin="/tmp/remote-bash-stdin.x y/in")
    assert framed[size - 1:size] == b"f" and framed[size:] == b"/tmp/remote-bash-stdin.x y/in\ncat"
    assert b'<"$_rbi"' in framing.driver(names) and f"<&{framing.NULL_FD}".encode() in framing.driver(names)


def test_writer_script_is_posix_sh_and_tags_the_writer() -> None:
    script = writer_script("abc123", "n0nce")
    assert script.startswith("REMOTE_BASH_SESSION=abc123 REMOTE_BASH_STDIN=n0nce exec /bin/sh -c ")
    body = shlex.split(script)[-1]
    assert subprocess.run(["sh", "-n", "-c", body], check=False).returncode == 0


async def test_chunks_are_bounded() -> None:
    got = [c async for c in chunks(b"x" * (3 * CHUNK + 5))]
    assert [len(c) for c in got] == [CHUNK, CHUNK, CHUNK, 5]
    with pytest.raises(TypeError):
        StdinFeed(42, host="h", session_id="s")  # type: ignore[arg-type]
