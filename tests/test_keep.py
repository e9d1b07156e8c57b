"""Kept sessions (``exec --keep``, ``sessions``), run as a user runs them against real sshd hosts.

Each test has its own HOME and XDG directories (so its own runtime directory, sockets and
background processes); every background process a test starts is stopped at its end.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_bash.cli._app import _parser
from remote_bash.cli._keep import connect, fast_args, keep_dir
from remote_bash.cli._keepc import dumps, encode, frames, key_name
from remote_bash.models import Host

from .sshd import TestHosts, processes_with
from .test_cli import CLI, audit_records, base_env, cli, host_entry, write_inventory
from .waiting import wait_until


@pytest.fixture(scope="module")
def pair(hosts: TestHosts) -> tuple[Host, Host]:
    return hosts.start("keep-a"), hosts.start("keep-b")


@pytest.fixture
def env(tmp_path: Path, pair: tuple[Host, Host]) -> Iterator[dict[str, str]]:
    a, b = pair
    inventory = write_inventory(tmp_path / "hosts.yaml", {
        "keep-a": host_entry(a, redact=[r"token=\S+"]),
        "keep-b": host_entry(b),
        "guarded": host_entry(a, policy={"deny": [r"\btouch\b"]}),
    })
    env = {**base_env(tmp_path), "REMOTE_BASH_INVENTORY": str(inventory)}
    yield env
    cli(env, "sessions", "stop", "--all")
    for pid in daemon_pids(env):
        os.kill(pid, signal.SIGKILL)


def daemon_pids(env: dict[str, str]) -> list[int]:
    """Pids of this test's background processes (their command line names its state directory)."""
    state = str(Path(env["XDG_STATE_HOME"]) / "remote-bash").encode()
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
        except OSError:
            continue
        if b"remote_bash.cli._keepd" in cmdline and state in cmdline:
            pids.append(int(proc.name))
    return pids


def sessions(env: dict[str, str]) -> list[dict[str, object]]:
    out = cli(env, "sessions", "--json")
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


# -- state, output, status -------------------------------------------------------------------------------


def test_state_persists_across_invocations(env: dict[str, str]) -> None:
    first = cli(env, "exec", "--keep", "keep-a", "--", "cd /tmp && export KEPT=yes && f() { echo fn-$1; }; echo $$")
    assert first.returncode == 0, first.stderr
    second = cli(env, "exec", "--keep", "keep-a", "--", "pwd; echo $KEPT; f 7; echo $$")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == ["/tmp", "yes", "fn-7", first.stdout.strip()]
    plain = cli(env, "exec", "keep-a", "--", "echo ${KEPT:-unset}")
    assert plain.stdout == "unset\n"  # plain exec still gets a session of its own
    commands = [r["command"] for r in audit_records(env, "keep-a") if r["event"] == "exec.start"]
    assert commands[:2] == ["cd /tmp && export KEPT=yes && f() { echo fn-$1; }; echo $$",
                            "pwd; echo $KEPT; f 7; echo $$"]


def test_output_status_redaction_and_json_behave_as_exec(env: dict[str, str], tmp_path: Path) -> None:
    out = cli(env, "exec", "--keep", "keep-a", "--", "echo out; echo token=s3cr3t-value >&2; exit 3")
    assert out.returncode == 3
    assert "s3cr3t-value" not in out.stdout
    assert out.stderr == ""
    as_json = cli(env, "exec", "--keep", "--json", "keep-a", "--", "printf 'a\\nb\\n'; false")
    assert as_json.returncode == 1
    record = json.loads(as_json.stdout)
    assert (record["host"], record["output"], record["exit_code"]) == ("keep-a", "a\nb\n", 1)
    refused = cli(env, "exec", "--keep", "guarded", "--", f"touch /tmp/rb-keep-{uuid.uuid4().hex}")
    assert refused.returncode == 126
    assert len(refused.stderr.splitlines()) == 1
    logs = list((Path(env["XDG_STATE_HOME"]) / "remote-bash" / "keep").glob("*.log"))
    assert logs
    for log in logs:
        text = log.read_text()
        assert "s3cr3t" not in text and "token" not in text and "touch" not in text
        assert log.stat().st_mode & 0o777 == 0o600


def test_unknown_host_is_refused_and_nothing_is_kept(env: dict[str, str]) -> None:
    out = cli(env, "exec", "--keep", "no-such-host", "--", "true")
    assert out.returncode == 127
    assert len(out.stderr.splitlines()) == 1
    assert "no-such-host" in out.stderr
    # Refused before a background process was started: none has made its log.
    assert not list((Path(env["XDG_STATE_HOME"]) / "remote-bash" / "keep").glob("*.log"))
    assert daemon_pids(env) == []
    assert sessions(env) == []


def test_timeout_exits_124_and_the_session_is_kept(env: dict[str, str], hosts: TestHosts) -> None:
    marker = str(uuid.uuid4().int)[:9]
    assert cli(env, "exec", "--keep", "keep-a", "--", "export STAY=1").returncode == 0
    out = cli(env, "exec", "--keep", "--timeout", "1", "keep-a", "--", f"echo begun; sleep 77.{marker}")
    assert out.returncode == 124
    assert out.stdout == "begun\n"
    assert len(out.stderr.splitlines()) == 1
    assert "keep-a" in out.stderr and "did not finish within 1 s" in out.stderr
    assert processes_with(f"sleep 77.{marker}", hosts.user) == []
    assert cli(env, "exec", "--keep", "keep-a", "--", "echo $STAY").stdout == "1\n"


def test_ctrl_c_kills_the_remote_command_and_exits_130(env: dict[str, str], hosts: TestHosts) -> None:
    marker = str(uuid.uuid4().int)[:9]
    assert cli(env, "exec", "--keep", "keep-a", "--", "export STAY=2").returncode == 0
    command = f"echo started; echo {'.' * 80}; sleep 88.{marker}"
    proc = subprocess.Popen([*CLI, "exec", "--keep", "keep-a", "--", command], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "started\n"
        wait_until(lambda: processes_with(f"sleep 88.{marker}", hosts.user), within=20, what="the command to start")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 130
    finally:
        proc.kill()
        _, stderr = proc.communicate()
    assert stderr.strip() == "remote-bash: interrupted"
    assert processes_with(f"sleep 88.{marker}", hosts.user) == []
    ends = [r for r in audit_records(env, "keep-a") if r["event"] == "exec.end" and marker in r["command"]]
    assert len(ends) == 1 and ends[0]["interrupted"] is True
    assert cli(env, "exec", "--keep", "keep-a", "--", "echo $STAY").stdout == "2\n"


# -- the rules it was made under --------------------------------------------------------------------


def test_other_allow_or_audit_dir_never_reuses_the_session(env: dict[str, str], tmp_path: Path) -> None:
    assert cli(env, "--allow", "keep-a", "exec", "--keep", "keep-a", "--", "export MINE=1").returncode == 0
    refused = cli(env, "--allow", "keep-b", "exec", "--keep", "keep-a", "--", "echo ${MINE:-fresh}")
    assert refused.returncode == 127
    assert "allowlist" in refused.stderr and refused.stdout == ""
    other = cli(env, "--allow", "all", "exec", "--keep", "keep-a", "--", "echo ${MINE:-fresh}")
    assert other.stdout == "fresh\n"
    elsewhere = cli(env, "--audit-dir", str(tmp_path / "audit2"), "exec", "--keep", "keep-a", "--",
                    "echo ${MINE:-fresh}")
    assert elsewhere.stdout == "fresh\n"
    assert list((tmp_path / "audit2").glob("keep-a*"))
    same = cli(env, "--allow", "keep-a", "exec", "--keep", "keep-a", "--", "echo ${MINE:-fresh}")
    assert same.stdout == "1\n"
    assert len({s["pid"] for s in sessions(env)}) == 3


def test_a_changed_inventory_gets_a_fresh_session_under_its_rules(env: dict[str, str], pair: tuple[Host, Host],
                                                                   tmp_path: Path) -> None:
    assert cli(env, "exec", "--keep", "keep-a", "--", "export OLD=1").returncode == 0
    guarded = host_entry(pair[0], policy={"deny": [r"\btouch\b"]})
    write_inventory(Path(env["REMOTE_BASH_INVENTORY"]), {"keep-a": guarded})
    marker = Path(f"/tmp/rb-keep-policy-{uuid.uuid4().hex}")
    refused = cli(env, "exec", "--keep", "keep-a", "--", f"touch {marker}")
    assert refused.returncode == 126, refused.stderr
    assert not marker.exists()
    assert cli(env, "exec", "--keep", "keep-a", "--", "echo ${OLD:-fresh}").stdout == "fresh\n"
    assert len(sessions(env)) == 1


# -- listing, stopping, idling ----------------------------------------------------------------------


def test_sessions_lists_and_stop_stops(env: dict[str, str], hosts: TestHosts) -> None:
    marker = str(uuid.uuid4().int)[:9]
    assert cli(env, "exec", "--keep", "keep-a", "--", f"sleep 66.{marker} &").returncode == 0
    assert cli(env, "exec", "--keep", "keep-b", "--", "true").returncode == 0
    listed = sessions(env)
    assert sorted(s["host"] for s in listed) == ["keep-a", "keep-b"]
    table = cli(env, "sessions")
    assert table.stdout.splitlines()[0].split() == ["HOST", "AGE", "IDLE", "PID", "ALLOW", "INVENTORY", "AUDIT"]
    for s in listed:
        mode = os.stat(str(s["socket"])).st_mode & 0o777
        assert mode == 0o600
        assert os.stat(Path(str(s["socket"])).parent).st_mode & 0o777 == 0o700
    stopped = cli(env, "sessions", "stop", "keep-a")
    assert stopped.returncode == 0 and "keep-a" in stopped.stdout
    assert [s["host"] for s in sessions(env)] == ["keep-b"]
    wait_until(lambda: not processes_with(f"sleep 66.{marker}", hosts.user),
               within=20, what="the kept session's leftovers to stop")
    assert cli(env, "sessions", "stop", "keep-a").returncode == 1
    assert cli(env, "sessions", "stop").returncode == 2  # neither a host nor --all
    helped = cli(env, "sessions", "--help")
    assert helped.returncode == 0 and "example:" in helped.stdout and "sessions stop --all" in helped.stdout
    assert cli(env, "sessions", "stop", "--all").returncode == 0
    assert sessions(env) == []
    wait_until(lambda: not daemon_pids(env), within=20, what="the background processes to exit")


def test_idle_timeout_ends_the_process_and_what_it_left_running(env: dict[str, str], hosts: TestHosts) -> None:
    marker = str(uuid.uuid4().int)[:9]
    out = cli(env, "exec", "--keep-idle", "1", "keep-a", "--", f"sleep 55.{marker} & echo ok")
    assert out.stdout == "ok\n", out.stderr
    wait_until(lambda: not daemon_pids(env), within=20, what="the idle background process to exit")
    wait_until(lambda: not processes_with(f"sleep 55.{marker}", hosts.user),
               within=20, what="the idle session's leftovers to stop")
    assert sessions(env) == []


def test_a_shape_left_to_the_parser_reaches_the_same_kept_session(env: dict[str, str]) -> None:
    assert cli(env, "exec", "--keep", "keep-a", "--", "export VIA=fast").returncode == 0
    # "--timeout=30" (one word) is a shape the fast path leaves to the parser.
    slow = cli(env, "exec", "--keep", "--timeout=30", "keep-a", "--", "echo $VIA")
    assert slow.returncode == 0 and slow.stdout == "fast\n", slow.stderr
    assert len(daemon_pids(env)) == 1


def test_the_setting_keeps_every_exec_and_no_keep_overrides(env: dict[str, str]) -> None:
    kept = {**env, "REMOTE_BASH_KEEP": "60"}
    assert cli(kept, "exec", "keep-a", "--", "export S=1").returncode == 0
    assert cli(kept, "exec", "keep-a", "--", "echo ${S:-none}").stdout == "1\n"
    assert cli(kept, "exec", "--no-keep", "keep-a", "--", "echo ${S:-none}").stdout == "none\n"
    bad = cli({**env, "REMOTE_BASH_KEEP": "soon"}, "exec", "keep-a", "--", "true")
    assert bad.returncode == 2 and "REMOTE_BASH_KEEP" in bad.stderr


# -- the client stays small; failures are clear ------------------------------------------------------


def test_a_kept_call_imports_no_ssh_stack_nor_models(env: dict[str, str]) -> None:
    assert cli(env, "exec", "--keep", "keep-a", "--", "true").returncode == 0
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "remote_bash.cli", "exec", "--keep", "keep-a",
                          "--", "echo light"], env=env, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert out.stdout == "light\n"
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    assert "remote_bash.cli._keepc" in imported
    # Nor what only `sessions` and the background process need (pathlib, json).
    assert "remote_bash.cli._keep" not in imported
    heavy = {name for name in imported if name.split(".")[0] in ("asyncssh", "pydantic", "yaml", "anthropic")}
    assert not heavy
    assert not {"remote_bash.models", "remote_bash.session", "remote_bash.inventory"} & imported
    # Nor the terminal scanner's patterns: printing needs only the escaping.
    assert "remote_bash.terminal" not in imported
    # The plain shape never loads the parser either (the fast path of cli.main).
    assert not {"argparse", "remote_bash.cli._app"} & imported


def _loaded(env: dict[str, str], *args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-X", "importtime", *args], env=env, capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr[-2000:]
    return {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}


def test_a_kept_call_loads_its_client_and_built_in_modules_only(env: dict[str, str]) -> None:
    assert cli(env, "exec", "--keep", "keep-a", "--", "true").returncode == 0
    code = "import sys; from remote_bash.cli import main; sys.exit(main(sys.argv[1:]))"
    loaded = _loaded(env, "-c", code, "exec", "--keep", "keep-a", "--", "true") - _loaded(env, "-c", "pass")
    ours = {"remote_bash", "remote_bash.cli", "remote_bash.cli._signals", "remote_bash.cli._keepc",
            "remote_bash.cli._input", "remote_bash._paths"}
    # Beyond the interpreter's start: our few modules, the interpreter's built-in ones (no file to
    # load), `_socket`, and `__future__` (each module's `from __future__ import annotations`). No
    # pathlib, json, contextlib, signal, re, typing, the error classes (remote_bash.errors), nor
    # _output and its escaping pattern (the background process escapes what it sends).
    assert loaded - set(sys.builtin_module_names) - {"_socket", "__future__"} == ours


def test_a_kept_call_that_ends_its_process_itself_leaves_no_output_behind(env: dict[str, str]) -> None:
    # The console script's main() ends the process once the output is flushed (no interpreter teardown):
    # all of it arrives, on stdout and stderr, with the command's status.
    command = "seq 1 200000; echo last-line >&2; exit 5"
    out = subprocess.run([*CLI, "exec", "--keep", "keep-a", "--", command], env=env, capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 5
    assert out.stdout.splitlines() == [str(n) for n in range(1, 200001)] + ["last-line"]
    assert out.stderr == ""


def test_the_client_writes_json_as_json_does() -> None:
    text = "".join(map(chr, range(0x80))) + "é€😀\u202e\udc80"
    value = {"v": 3, "s": text, "n": None, "t": True, "f": False, "x": 2.5, "inf": float("inf"), "k": {"a": text}}
    assert dumps(value) == json.dumps(value, ensure_ascii=False)
    assert json.loads(encode(value)) == value  # the lone surrogate (an undecodable byte of argv) escaped
    long = "x\n" * 40_000  # json's own encoder, past a size
    assert dumps(long) == json.dumps(long, ensure_ascii=False)
    key = {"host": "a", "allow": None, "home": "/h"}
    assert key_name(key) == key_name(dict(reversed(key.items()))) != key_name({**key, "allow": "b"})


def test_frames_are_read_across_reads_and_a_json_line_as_frames() -> None:
    import _socket

    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    data = "é".encode()
    stream = (b"b0:" + b"o" + str(len(data)).encode() + b":" + data + b'{"o": "\\u001b[2J", "beat": 1}\n'
              + b"x15:3 exit\xe2\x80\xa6 line\n")
    try:
        for byte in stream:  # one byte at a time: a frame split anywhere
            theirs.sendall(bytes([byte]))
        theirs.close()
        assert list(frames(ours)) == [("b", ""), ("o", "é"), ("b", ""), ("o", "\\x1b[2J"), ("x", "3 exit… line\n")]
    finally:
        ours.close()


def test_a_kept_call_prints_exactly_what_plain_exec_prints(env: dict[str, str]) -> None:
    # Text a terminal would act on, bidi controls, an undecodable byte, stderr merged, a status line.
    command = r"printf 'a\033[2Jb\007c\342\200\256d\377e\302\205f\n'; echo tail >&2; exit 4"
    kept = cli(env, "exec", "--keep", "keep-a", "--", command)
    plain = cli(env, "exec", "--no-keep", "keep-a", "--", command)
    assert (kept.returncode, kept.stdout, kept.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert kept.returncode == 4 and "\u202e" in kept.stdout  # to a pipe as it is, as exec does
    # On a terminal, escaped as exec escapes it.
    shown = subprocess.run(["script", "-qec", shlex.join([*CLI, "exec", "--keep", "keep-a", "--", command]),
                            "/dev/null"], env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert "\\u202e" in shown.stdout and "\u202e" not in shown.stdout, shown.stdout
    late = cli(env, "exec", "--keep", "--timeout", "1", "keep-a", "--", "echo start; sleep 30")
    plain_late = cli(env, "exec", "--no-keep", "--timeout", "1", "keep-a", "--", "echo start; sleep 30")
    assert (late.returncode, late.stdout) == (plain_late.returncode, plain_late.stdout) == (124, "start\n")
    said = "remote-bash: keep-a: the command did not finish within 1 s and was killed"
    assert late.stderr.startswith(said) and plain_late.stderr.startswith(said)
    as_json = json.loads(cli(env, "exec", "--keep", "--json", "keep-a", "--", command).stdout)
    plain_json = json.loads(cli(env, "exec", "--no-keep", "--json", "keep-a", "--", command).stdout)
    assert {k: v for k, v in as_json.items() if k != "duration"} == {k: v for k, v in plain_json.items()
                                                                     if k != "duration"}


# What the fast path reads must be what the parser reads; anything it does not read goes to the parser.
_FIELDS = ("host", "inventory", "allow", "audit_dir", "debug", "keep", "keep_idle", "no_keep", "timeout", "json",
           "words")


def _parsed(words: list[str]) -> dict[str, object]:
    cut = words.index("--")
    args = _parser().parse_args(words[:cut])
    args.words = words[cut + 1 :]
    return {name: getattr(args, name) for name in _FIELDS}


@pytest.mark.parametrize("line", [
    "exec --keep web-1 -- true",
    "exec web-1 --keep -- echo a b",
    "exec --keep -- uptime",
    "exec --no-keep web-1 -- true",
    "exec web-1 -- true",
    "--inventory /x.yaml --allow web exec --keep web-1 -- true",
    "--inventory=/x.yaml exec --keep --audit-dir=/a --allow db --debug web-1 -- true",
    "--allow web exec --allow db --keep web-1 -- true",
    "exec --keep --keep-idle 30 --timeout 2.5 --json web-1 -- sleep 1 -- two",
    "exec --keep --timeout 1e3 web-1 -- true",
    "exec --keep --timeout inf exec -- true",
    "--allow= exec --keep web-1 --",
])
def test_the_fast_path_reads_exec_exactly_as_the_parser(line: str) -> None:
    words = line.split(" ")
    fast = fast_args(words)
    assert fast is not None, line
    assert {name: getattr(fast, name) for name in _FIELDS} == _parsed(words)


@pytest.mark.parametrize("line", [
    "exec --keep web-1",  # no separator
    "exec --keep web-1 db-1 -- true",  # a second host
    "exec --help --keep web-1 -- true",
    "exec --kee web-1 -- true",  # an abbreviation the parser would expand
    "exec --keep --timeout 0 web-1 -- true",
    "exec --keep --timeout nan web-1 -- true",
    "exec --keep --timeout=5 web-1 -- true",
    "exec --keep --timeout -- true",
    "exec --keep --allow -- true",
    "exec --keep --backend local -- true",
    "exec --keep -x web-1 -- true",
    "--debug=1 exec --keep web-1 -- true",
    "shell web-1 -- exec",
    "fleet exec web -- true",
    "--inventory exec --keep -- true",  # exec is the value: no command
])
def test_the_fast_path_leaves_every_other_shape_to_the_parser(line: str) -> None:
    assert fast_args(line.split(" ")) is None


def test_death_mid_call_is_a_clear_error_and_nothing_is_run_again(env: dict[str, str], tmp_path: Path) -> None:
    assert cli(env, "exec", "--keep", "keep-a", "--", "true").returncode == 0
    (pid,) = daemon_pids(env)
    counter = f"/tmp/rb-keep-count-{uuid.uuid4().hex}"
    proc = subprocess.Popen([*CLI, "exec", "--keep", "keep-a", "--", f"echo x >> {counter}; echo go; sleep 30"],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "go\n"
        os.kill(pid, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 125
    assert len(stderr.splitlines()) == 1
    assert "keep-a" in stderr and "ended during the call" in stderr and "not run again" in stderr
    assert Path(counter).read_text() == "x\n"
    assert sessions(env) == []  # the dead process's socket is found stale and removed
    # The stale socket is replaced: the next call works (in a fresh session).
    again = cli(env, "exec", "--keep", "keep-a", "--", "echo back")
    assert (again.returncode, again.stdout) == (0, "back\n")
    os.unlink(counter)


# The other user cannot run an interpreter under /root: the system's, with the standard library only.
OTHER_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"


def test_a_broken_inventory_is_one_line_and_nothing_is_kept(env: dict[str, str], tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("hosts: [unclosed\n")
    out = cli({**env, "REMOTE_BASH_INVENTORY": str(broken)}, "exec", "--keep", "keep-a", "--", "true")
    assert out.returncode == 125, out.stderr
    assert len(out.stderr.splitlines()) == 1 and "broken.yaml" in out.stderr
    wait_until(lambda: not daemon_pids(env), within=20, what="the background process to exit")


def test_another_user_cannot_use_the_socket(env: dict[str, str], hosts: TestHosts) -> None:
    assert cli(env, "exec", "--keep", "keep-a", "--", "export OWN=1").returncode == 0
    (info,) = sessions(env)
    socket_path = str(info["socket"])
    probe = ("import json, socket, sys\n"
             "s = socket.socket(socket.AF_UNIX)\n"
             "try:\n"
             "    s.connect(sys.argv[1])\n"
             "except OSError as e:\n"
             "    print('connect:', type(e).__name__); sys.exit(0)\n"
             "s.sendall(json.dumps({'v': 1, 'op': 'run', 'command': 'echo $OWN'}).encode() + b'\\n')\n"
             "print('reply:', s.makefile().read())\n")
    # Through a path the other user can reach: the socket's own mode (0600) keeps them out, and with
    # it opened up, the process refuses them by the peer's uid.
    public = Path(tempfile.mkdtemp(prefix="rb-keep-link-"))
    try:
        public.chmod(0o755)
        os.link(socket_path, public / "s")
        as_other = subprocess.run([OTHER_PYTHON, "-I", "-c", probe, str(public / "s")], user=hosts.user,
                                  capture_output=True, text=True, timeout=30, cwd="/")
        assert as_other.stdout == "connect: PermissionError\n", as_other
        os.chmod(public / "s", 0o666)  # noqa: S103 -- the misconfiguration the uid check must survive
        as_other = subprocess.run([OTHER_PYTHON, "-I", "-c", probe, str(public / "s")], user=hosts.user,
                                  capture_output=True, text=True, timeout=30, cwd="/")
    finally:
        os.chmod(socket_path, 0o600)
        shutil.rmtree(public)
    assert as_other.stdout.startswith("reply:"), as_other
    assert "refused" in as_other.stdout and "OWN" not in as_other.stdout and '"o"' not in as_other.stdout
    assert cli(env, "exec", "--keep", "keep-a", "--", "echo $OWN").stdout == "1\n"


# -- trust is checked again before every call -----------------------------------------------------------


def _pinned_line(known_hosts: Path, host: Host) -> str:
    pattern = f"[{host.hostname}]:{host.port}"
    (line,) = [x for x in known_hosts.read_text().splitlines() if x.split(" ")[0] == pattern]
    return line


def _rewrite_keeping_mtime(path: Path, text: str) -> None:
    """Rewrite ``path`` in place and put its modification time back, as an editor (or an attacker) can."""
    before = path.stat()
    with path.open("r+") as fh:
        fh.write(text)
        fh.truncate()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.mark.parametrize("through", ["host", "jump host"])
def test_a_host_key_no_longer_trusted_closes_the_kept_session(env: dict[str, str], pair: tuple[Host, Host],
                                                              tmp_path: Path, through: str) -> None:
    a, b = pair
    pinned = tmp_path / "known_hosts"
    shutil.copy(a.known_hosts or "", pinned)
    original = pinned.read_text()
    write_inventory(Path(env["REMOTE_BASH_INVENTORY"]), {
        "hop": host_entry(b, known_hosts=str(pinned)),
        "inner": host_entry(a, jump=["hop"], known_hosts=str(pinned)),
    })
    assert cli(env, "exec", "--keep", "inner", "--", "export KEPT=1").returncode == 0
    marker = Path(f"/tmp/rb-keep-revoked-{uuid.uuid4().hex}")
    revoked = _pinned_line(pinned, a if through == "host" else b)
    # Revoked, then the pin commented out (the same size); the modification time is kept both times.
    for edit in (f"{revoked}\n@revoked {revoked}", "#" * len(revoked)):
        _rewrite_keeping_mtime(pinned, original.replace(revoked, edit))
        plain = cli(env, "exec", "inner", "--", "true")
        assert plain.returncode == 125, plain.stderr
        kept = cli(env, "exec", "--keep", "inner", "--", f"touch {marker}; echo $KEPT")
        assert (kept.returncode, kept.stdout) == (plain.returncode, ""), kept.stderr
        assert kept.stderr == plain.stderr
        assert not marker.exists()
        wait_until(lambda: not daemon_pids(env), within=20, what="the untrusted session's process to exit")
        assert cli(env, "exec", "--keep", "inner", "--", "true").returncode == 125  # and no fresh one either
        wait_until(lambda: not daemon_pids(env), within=20, what="the refused process to exit")
        _rewrite_keeping_mtime(pinned, original)
        assert cli(env, "exec", "--keep", "inner", "--", "export KEPT=1").returncode == 0
    records = audit_records(env, "inner")
    assert [r["event"] for r in records].count("connect.error") >= 4
    ends = [i for i, r in enumerate(records) if r["event"] == "session.end"]
    assert len(ends) >= 2  # each untrusted session was closed, and said so


def test_an_inventory_edit_that_keeps_size_and_mtime_is_seen(env: dict[str, str], pair: tuple[Host, Host]) -> None:
    inventory = Path(env["REMOTE_BASH_INVENTORY"])
    write_inventory(inventory, {"guarded": host_entry(pair[0], policy={"deny": ["forbidden"]})})
    assert cli(env, "exec", "--keep", "guarded", "--", "export OLD=1").returncode == 0
    assert cli(env, "exec", "--keep", "guarded", "--", "echo forbidden").returncode == 126
    _rewrite_keeping_mtime(inventory, inventory.read_text().replace("forbidden", "okokokoko"))
    refused = cli(env, "exec", "--keep", "guarded", "--", "echo okokokoko; echo $OLD")
    assert refused.returncode == 126, refused.stdout
    assert cli(env, "exec", "--keep", "guarded", "--", "echo ${OLD:-fresh}").stdout == "fresh\n"


# -- what is left behind, and telling sessions apart ------------------------------------------------------


def test_sessions_on_one_host_show_what_sets_them_apart(env: dict[str, str], tmp_path: Path) -> None:
    assert cli(env, "exec", "--keep", "keep-a", "--", "true").returncode == 0
    assert cli(env, "--allow", "keep-*", "exec", "--keep", "keep-a", "--", "true").returncode == 0
    assert cli(env, "--audit-dir", str(tmp_path / "audit 2"), "exec", "--keep", "keep-a", "--", "true").returncode == 0
    rows = cli(env, "sessions").stdout.splitlines()[1:]
    assert len(rows) == 3 and len(set(rows)) == 3
    assert all(row.split()[0] == "keep-a" for row in rows)
    assert sum("keep-*" in row for row in rows) == 1
    assert sum(f'"{tmp_path / "audit 2"}"' in row for row in rows) == 1  # a space is shown quoted
    assert all(env["REMOTE_BASH_INVENTORY"] in row for row in rows)
    listed = sessions(env)
    default = Path(env["XDG_STATE_HOME"]) / "remote-bash" / "audit"
    assert {s["audit_dir"] for s in listed} == {str(tmp_path / "audit 2"), str(default)}


def test_nothing_is_left_in_the_keep_directory_once_sessions_end(env: dict[str, str]) -> None:
    directory = keep_dir(env)
    for _round in range(2):  # the second round takes locks whose files the first removed
        procs = [subprocess.Popen([*CLI, "exec", "--keep", "keep-a", "--", "echo $$"], env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(4)]
        outs = [p.communicate(timeout=60) for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, outs
        assert len({out for out, _err in outs}) == 1  # one shell served them all
        # Four clients at once may start more than one background process: all but the one serving them exit.
        wait_until(lambda: len(daemon_pids(env)) == 1, within=10, what="one background process, the others gone",
                   show=lambda: daemon_pids(env))
        assert cli(env, "sessions", "stop", "--all").returncode == 0
        wait_until(lambda: not daemon_pids(env), within=20, what="the background process to exit")
        assert sorted(p.name for p in directory.iterdir()) == []


def test_an_ssh_config_edit_that_keeps_size_and_mtime_gets_a_fresh_session(env: dict[str, str]) -> None:
    config = Path(env["HOME"]) / ".ssh" / "config"
    config.parent.mkdir(mode=0o700, exist_ok=True)
    config.write_text("# nothing here\n")
    assert cli(env, "exec", "--keep", "keep-a", "--", "export OLD=1").returncode == 0
    assert cli(env, "exec", "--keep", "keep-a", "--", "echo ${OLD:-fresh}").stdout == "1\n"
    _rewrite_keeping_mtime(config, "# nothing HERE\n")
    assert cli(env, "exec", "--keep", "keep-a", "--", "echo ${OLD:-fresh}").stdout == "fresh\n"


def test_an_edit_to_a_file_ssh_config_includes_gets_a_fresh_session(env: dict[str, str]) -> None:
    ssh = Path(env["HOME"]) / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    (ssh / "config").write_text("Include conf.d/*.conf\n")
    (ssh / "conf.d").mkdir(exist_ok=True)
    included = ssh / "conf.d" / "hosts.conf"
    included.write_text("# nothing here\n")
    assert cli(env, "exec", "--keep", "keep-a", "--", "export OLD=1").returncode == 0
    assert cli(env, "exec", "--keep", "keep-a", "--", "echo ${OLD:-fresh}").stdout == "1\n"
    _rewrite_keeping_mtime(included, "# nothing HERE\n")
    assert cli(env, "exec", "--keep", "keep-a", "--", "echo ${OLD:-fresh}").stdout == "fresh\n"


def test_another_home_never_reuses_the_session(env: dict[str, str], tmp_path: Path) -> None:
    """``~`` in the inventory and ~/.ssh/config follow HOME: a session made under one is not used
    under another, even with the same runtime and state directories."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    env = {**env, "XDG_RUNTIME_DIR": str(run)}
    assert cli(env, "exec", "--keep", "keep-a", "--", "export MINE=1").returncode == 0
    assert cli(env, "exec", "--keep", "keep-a", "--", "echo ${MINE:-fresh}").stdout == "1\n"
    other = tmp_path / "home2"
    shutil.copytree(env["HOME"], other, symlinks=True)
    moved = cli({**env, "HOME": str(other)}, "exec", "--keep", "keep-a", "--", "echo ${MINE:-fresh}")
    assert moved.stdout == "fresh\n", moved.stderr
    cli({**env, "HOME": str(other)}, "sessions", "stop", "--all")
    cli(env, "sessions", "stop", "--all")


def test_a_command_as_large_as_plain_exec_takes_runs_kept(env: dict[str, str]) -> None:
    # Each word under the kernel's 128 KiB limit on one argument; 200 KB in all, and multibyte text.
    words = [":", "x" * 100_000, "x" * 100_000, "é€" * 20_000, "; echo big"]
    out = cli(env, "exec", "--keep", "keep-a", "--", *words)
    assert (out.returncode, out.stdout, out.stderr) == (0, "big\n", "")
    again = cli(env, "exec", "--keep", "keep-a", "--", "echo still")
    assert (again.returncode, again.stdout) == (0, "still\n")
    assert len(daemon_pids(env)) == 1
    # A request it cannot read gets a clear error, not a closed connection ("the process ended").
    (socket_path,) = keep_dir(env).glob("*.sock")
    sock = connect(socket_path, 10.0)
    assert sock is not None
    try:
        sock.sendall(b"not json\n")
        reply = json.loads(sock.recv(1 << 16))
    finally:
        sock.close()
    assert reply["x"] == 125 and "could not read the request" in reply["e"] and "nothing was run" in reply["e"]


def _running(env: dict[str, str], command: str) -> subprocess.Popen[str]:
    """A kept call started in the background, once it has printed its first line ("go")."""
    proc = subprocess.Popen([*CLI, "exec", "--keep", "keep-a", "--", f"echo go; {command}"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "go\n"
    return proc


def test_an_inventory_edit_lets_the_running_call_finish_then_closes_the_session(env: dict[str, str]) -> None:
    first = cli(env, "exec", "--keep", "keep-a", "--", "echo $$")
    gate = Path(f"/tmp/rb-keep-gate-{uuid.uuid4().hex}")
    proc = _running(env, f"while [ ! -e {gate} ]; do sleep 0.1; done; echo done $$")
    try:
        inventory = Path(env["REMOTE_BASH_INVENTORY"])
        inventory.write_text(inventory.read_text() + "# a comment\n")
        # The next call waits for the old session to close, and runs in a fresh one.
        nxt = subprocess.Popen([*CLI, "exec", "--keep", "keep-a", "--", "echo next $$"], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        logs = Path(env["XDG_STATE_HOME"]) / "remote-bash" / "keep"
        wait_until(lambda: any("inventory changed" in log.read_text() for log in logs.glob("*.log")),
                   within=30, what="the next call to find the session stale")
        gate.touch()
        out, err = proc.communicate(timeout=60)
        next_out, next_err = nxt.communicate(timeout=60)
    finally:
        proc.kill()
        gate.unlink(missing_ok=True)
    assert (proc.returncode, out, err) == (0, f"done {first.stdout}", "")
    assert nxt.returncode == 0, next_err
    assert next_out.startswith("next ") and next_out != f"next {first.stdout}"


def test_sessions_stop_during_a_call_ends_it_saying_so(env: dict[str, str], hosts: TestHosts) -> None:
    marker = f"sleep 300.{str(uuid.uuid4().int)[:9]}"
    proc = _running(env, marker)
    try:
        stopped = cli(env, "sessions", "stop", "keep-a")
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert stopped.returncode == 0, stopped.stderr
    assert proc.returncode == 125, err
    assert "interrupted" not in err
    assert err.splitlines() == [
        "remote-bash: keep-a: the kept session was closed during the call (stopped by 'sessions stop'): the "
        "session was closed while the command ran; it was stopped (signals sent: INT). It is not run again"
    ], err
    assert processes_with(marker, hosts.user) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_background_process_ends_its_call_saying_so(env: dict[str, str], hosts: TestHosts,
                                                                    sig: signal.Signals) -> None:
    marker = f"sleep 300.{str(uuid.uuid4().int)[:9]}"
    proc = _running(env, marker)
    try:
        (pid,) = daemon_pids(env)
        os.kill(pid, sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 125, err
    assert f"the kept session was closed during the call (stopping on {sig.name}): the session was closed while " \
           "the command ran; it was stopped" in err, err
    assert processes_with(marker, hosts.user) == []
    wait_until(lambda: not daemon_pids(env), within=30, what="the background process to exit")


def _waiting_on_a_socket(pid: int) -> bool:
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    sockets = False
    for fd in fds:
        with contextlib.suppress(OSError):  # a descriptor closed since the listing
            sockets = sockets or os.readlink(fd).startswith("socket:")
    if not sockets:
        return False
    # And waiting for the reply (polling, with its timeout), not only holding a socket it has just made:
    # a signal before the request is sent ends the client before there is any call.
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return True
    return "poll" in wchan or wchan in ("", "0")


def test_a_process_that_stops_answering_is_said_listed_and_stopped(env: dict[str, str]) -> None:
    assert cli(env, "exec", "--keep", "keep-a", "--", "true").returncode == 0
    (pid,) = daemon_pids(env)
    os.kill(pid, signal.SIGSTOP)
    try:
        out = cli(env, "exec", "--keep", "--timeout", "2", "keep-a", "--", "echo hi")
        assert out.returncode == 125, out.stderr
        assert len(out.stderr.splitlines()) == 1
        assert f"(pid {pid}) did not answer" in out.stderr and "sessions stop keep-a" in out.stderr
        # A signal while waiting ends the client, saying what it does not know. The client also polls
        # a socket while it reaches the process, before the request goes: a signal then ends it before
        # there is any call (the plain Ctrl-C message), so that outcome is tried again, a few times.
        for _attempt in range(5):
            client = subprocess.Popen([*CLI, "exec", "--keep", "keep-a", "--", "echo hi"], env=env,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
            try:
                wait_until(functools.partial(_waiting_on_a_socket, client.pid), within=30,
                           what="the client to connect")
                client.send_signal(signal.SIGTERM)
                _, err = client.communicate(timeout=60)
            finally:
                client.kill()
            if "did not answer" in err or "killed and audited" not in err:
                break
        assert client.returncode == 143, err
        assert len(err.splitlines()) == 1, err
        assert "SIGTERM" in err and f"(pid {pid}) did not answer" in err and "killed and audited" not in err
        listed = sessions(env)
        assert [(s["host"], s["pid"], s["answering"]) for s in listed] == [("keep-a", pid, False)]
        table = cli(env, "sessions")
        assert "not answering" in table.stdout and str(pid) in table.stdout
        stopped = cli(env, "sessions", "stop", "keep-a")
    finally:
        os.kill(pid, signal.SIGCONT)
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped keep-a (pid {pid})" in stopped.stdout and "SIGTERM" in stopped.stdout
    wait_until(lambda: not daemon_pids(env), within=30, what="the process to exit")
    assert sessions(env) == []


def test_a_variable_the_ssh_config_names_is_part_of_the_key(env: dict[str, str]) -> None:
    ssh = Path(env["HOME"]) / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    (ssh / "config").write_text("Include conf.d/*.conf\n")
    (ssh / "conf.d").mkdir(exist_ok=True)
    (ssh / "conf.d" / "hosts.conf").write_text("Host elsewhere\n  IdentityFile ${RBKEY}\n")
    first = {**env, "RBKEY": "/keys/one"}
    assert cli(first, "exec", "--keep", "keep-a", "--", "export OLD=1").returncode == 0
    assert cli(first, "exec", "--keep", "keep-a", "--", "echo ${OLD:-fresh}").stdout == "1\n"
    other = cli({**env, "RBKEY": "/keys/two"}, "exec", "--keep", "keep-a", "--", "echo ${OLD:-fresh}")
    assert other.stdout == "fresh\n"
    assert cli(env, "exec", "--keep", "keep-a", "--", "echo ${OLD:-fresh}").stdout == "fresh\n"  # unset
    assert len(daemon_pids(env)) == 3
