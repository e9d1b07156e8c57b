"""The built-in sandbox host: backends, isolation from the operator, lifecycle at the command line.

The isolation checks run from inside the sandbox, through the CLI exactly as the README's first
command runs it, for every backend this machine can run (the container one when an engine answers).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_bash import ConfigError, Host, RemoteBashSession
from remote_bash.sandbox import _sshd, choose_backend, find_engine, find_sshd, generate_keypair, start_sshd
from remote_bash.sandbox._local import local_refusal

from .docker_env import HOW_TO_RUN
from .messages_server import MessagesServer, Reply, text, tool_use
from .waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "remote_bash.cli"]
SECRET = f"sk-ant-api03-{uuid.uuid4().hex}"
IS_ROOT = os.geteuid() == 0
ENGINE = find_engine()


def cli(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=ROOT)


def backends() -> list[object]:
    """Every isolating backend, skipped (with the reason) where this machine cannot run it."""
    return [
        pytest.param("local", marks=pytest.mark.skipif(not IS_ROOT or find_sshd() is None,
                                                       reason="the local backend needs root and OpenSSH's sshd")),
        pytest.param("container", marks=[pytest.mark.docker, pytest.mark.skipif(ENGINE is None, reason=HOW_TO_RUN)]),
    ]


@pytest.fixture
def operator(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """An operator's environment: an API key, a home with SSH keys, audit logs and a transcript."""
    if request.node.name.endswith("[container]"):
        request.getfixturevalue("sandbox_image")  # the base image too, where no registry answers
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(f"PRIVATE KEY {SECRET}\n")
    state = home / ".local" / "state"
    (state / "remote-bash" / "transcripts").mkdir(parents=True)
    (state / "remote-bash" / "transcripts" / "t.jsonl").write_text(f'{{"secret": "{SECRET}"}}\n')
    env = {k: v for k, v in os.environ.items()
           if k == "REMOTE_BASH_ENGINE" or not k.startswith(("ANTHROPIC_", "REMOTE_BASH_", "XDG_"))}
    env.update(HOME=str(home), XDG_STATE_HOME=str(state), ANTHROPIC_API_KEY=SECRET,
               PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring")
    yield env
    cli(env, "sandbox", "stop")


# -- the sshd every backend but the container runs ----------------------------------------------------


@pytest.mark.parametrize("server", ["openssh", "asyncssh"])
async def test_sshd_serves_a_persistent_session_with_a_clean_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: str) -> None:
    if server == "asyncssh":
        monkeypatch.setattr(_sshd, "find_sshd", lambda: None)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    key = generate_keypair(tmp_path / "client")
    user = getpass.getuser()
    sshd = start_sshd(tmp_path / "srv", users=[user], authorized_keys=[key.with_suffix(".pub").read_text()])
    try:
        assert SECRET.encode() not in Path(f"/proc/{sshd.pid}/environ").read_bytes()
        known = tmp_path / "known_hosts"
        known.write_text(sshd.known_hosts_line + "\n")
        host = Host(name="sandbox", hostname="127.0.0.1", port=sshd.port, user=user, identity_file=key,
                    known_hosts=known, credential="key")
        async with RemoteBashSession(host, kill_grace=0.3) as s:
            assert (await s.run("cd /tmp; echo hi")).output == "hi\n"
            assert (await s.run("pwd")).output == "/tmp\n"
            assert "ANTHROPIC" not in (await s.run("env")).output
            r = await s.run("sleep 100", timeout=1)
            assert r.timed_out and r.kill is not None and r.kill.survivors == 0
            r = await s.run("exit 4")
            assert r.shell_lost and r.exit_code == 4
            assert (await s.run("echo back")).output == "back\n"
    finally:
        sshd.stop()


def test_sshd_refuses_non_loopback(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="loopback"):
        start_sshd(tmp_path, address="10.1.2.3", users=["x"], authorized_keys=[])


# -- choosing a backend ------------------------------------------------------------------------------


def test_an_unknown_backend_or_a_missing_engine_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"unknown sandbox backend 'vm'.*container, local, unisolated"):
        choose_backend("vm", {})
    monkeypatch.setenv("REMOTE_BASH_ENGINE", "no-such-engine")
    with pytest.raises(ConfigError, match=r"needs Docker or Podman.*apt-get install docker.io.*--backend local"):
        choose_backend("container", {})
    assert choose_backend(None, {}) == ("local", None)  # no engine: local, never unisolated
    assert choose_backend(None, {"REMOTE_BASH_SANDBOX": "unisolated"}) == ("unisolated", None)


def test_without_root_or_sshd_the_local_backend_refuses_and_names_the_ways_out() -> None:
    as_user = local_refusal(1000, "/usr/sbin/sshd", None)
    assert as_user is not None
    for way_out in ("docker.io", "Podman", "bubblewrap", "as root", "--backend unisolated"):
        assert way_out in as_user
    without_sshd = local_refusal(0, None, None)
    assert without_sshd is not None
    assert "openssh-server" in without_sshd
    assert local_refusal(0, "/usr/sbin/sshd", None) is None
    assert local_refusal(1000, "/usr/sbin/sshd", "/usr/bin/bwrap") is None


@pytest.mark.skipif(not IS_ROOT, reason="the throwaway user needs root")
def test_local_backend_as_root_without_openssh_is_refused(operator: dict[str, str]) -> None:
    without_sshd = ("import sys; import remote_bash.sandbox._lifecycle as l; l.find_sshd = lambda: None; "
                    "from remote_bash.cli import main; sys.exit(main(sys.argv[1:]))")
    out = subprocess.run([sys.executable, "-c", without_sshd, "exec", "--backend", "local", "--", "id"],
                         env=operator, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, cwd=ROOT)
    assert out.returncode == 125
    assert "openssh-server" in out.stderr


def test_unisolated_is_the_operator_and_only_when_named(operator: dict[str, str]) -> None:
    out = cli(operator, "exec", "--backend", "unisolated", "--", "whoami")
    assert (out.returncode, out.stdout) == (0, f"{getpass.getuser()}\n"), out.stderr


def test_unisolated_without_openssh_uses_the_asyncssh_server(operator: dict[str, str]) -> None:
    without_sshd = ("import sys, remote_bash.sandbox._sshd as s; s.find_sshd = lambda: None; "
                    "from remote_bash.cli import main; sys.exit(main(sys.argv[1:]))")
    out = subprocess.run([sys.executable, "-c", without_sshd, "exec", "--backend", "unisolated", "--",
                          "echo hi; exit 4"], env=operator, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL, cwd=ROOT)
    assert (out.returncode, out.stdout) == (4, "hi\n"), out.stderr


# -- isolation, checked from inside the sandbox -------------------------------------------------------


@pytest.mark.parametrize("backend", backends())
def test_a_sandboxed_command_cannot_read_the_operators_secrets(operator: dict[str, str], backend: str) -> None:
    home = operator["HOME"]
    audit = Path(operator["XDG_STATE_HOME"]) / "remote-bash" / "audit"
    probe = f"""
        whoami
        env | grep -c '{SECRET}' || true
        cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c '{SECRET}' || true
        for p in '{home}' '{home}/.ssh/id_ed25519' '{home}/.local/state/remote-bash/transcripts/t.jsonl' \
                 '{audit}' /root/.ssh; do
            if cat "$p" >/dev/null 2>&1 || ls "$p" >/dev/null 2>&1; then echo "READABLE $p"; fi
        done
        grep -rl '{SECRET}' /tmp /home /var/tmp 2>/dev/null | head -3
    """
    env = {**operator, "REMOTE_BASH_SANDBOX": backend}
    first = cli(env, "exec", "--", "echo first")  # makes the audit log exist before the probe
    assert first.returncode == 0, first.stderr
    assert audit.is_dir()
    out = cli(env, "exec", "--", probe)
    assert out.returncode == 0, out.stderr
    user, in_env, in_proc, *rest = out.stdout.splitlines()
    assert user not in (getpass.getuser(), "root")
    assert (in_env, in_proc) == ("0", "0")
    assert rest == [], rest
    # And nothing of the sandbox is left: no container, no throwaway user.
    assert cli(env, "sandbox", "status").returncode == 3
    assert user not in Path("/etc/passwd").read_text()


def test_the_readmes_first_command_runs_claudes_commands_in_the_sandbox(operator: dict[str, str]) -> None:
    """``remote-bash run "..."`` with no inventory, the model played by the scripted endpoint: the
    commands ran as the sandbox's user, in a container where an engine answers."""
    expected = "container" if ENGINE is not None else "local"
    script = [Reply([tool_use({"command": "whoami; cat /proc/1/comm; echo ${ANTHROPIC_API_KEY:-no key}"},
                              id="toolu_sbx1")]),
              Reply([text("Done.")])]
    with MessagesServer(script) as server:
        out = cli({**operator, "ANTHROPIC_BASE_URL": server.url}, "run",
                  "Which OS is this machine, and how much disk is free?")
        result = server.tool_results()[0]
    assert out.returncode == 0, out.stderr
    user, init, key = str(result["content"]).split()[:3]
    assert user not in ("root", getpass.getuser())
    if expected == "container":
        assert (user, init) in {("agent", "docker-init"), ("agent", "catatonit")}, (user, init)
    else:
        assert user.startswith("rb-sandbox-")
    assert key == "no"
    assert SECRET not in out.stdout + str(server.requests)


def _sandbox_users() -> set[str]:
    return {line.split(":", 1)[0] for line in Path("/etc/passwd").read_text().splitlines()
            if line.startswith("rb-sandbox-")}


LOCAL_AS_ROOT = pytest.mark.skipif(not IS_ROOT or find_sshd() is None, reason="the local backend needs root and sshd")


@LOCAL_AS_ROOT
def test_local_backend_refuses_when_the_operators_home_is_open_to_others(operator: dict[str, str],
                                                                         tmp_path: Path) -> None:
    import tempfile

    open_home = Path(tempfile.mkdtemp(prefix="rb-open-home-"))
    try:
        open_home.chmod(0o755)
        env = {**operator, "HOME": str(open_home)}
        before = _sandbox_users()
        out = cli(env, "exec", "--backend", "local", "--", "id")
        assert out.returncode == 125
        assert f"the sandbox user could read {open_home}" in out.stderr
        assert "chmod 700" in out.stderr
        # the refused sandbox's user is gone again (sandboxes started elsewhere meanwhile are not ours)
        assert not _sandbox_users() - before
    finally:
        open_home.rmdir()


# -- lifecycle at the command line ---------------------------------------------------------------------


@pytest.mark.parametrize("backend", backends())
def test_sandbox_start_status_exec_stop(operator: dict[str, str], backend: str, tmp_path: Path) -> None:
    env = operator
    started = cli(env, "sandbox", "start", "--backend", backend)
    assert started.returncode == 0, started.stderr
    assert f"backend {backend}" in started.stdout
    status = cli(env, "sandbox", "status", "--json")
    assert status.returncode == 0
    state = json.loads(status.stdout)
    assert (state["running"], state["backend"], state["address"]) == (True, backend, "127.0.0.1")
    state_dir = Path(env["XDG_STATE_HOME"]) / "remote-bash" / "sandbox"
    assert Path(state["known_hosts"]).parent == state_dir
    assert (state_dir.stat().st_mode & 0o777) == 0o700
    readable = cli(env, "sandbox", "status")
    assert f"backend {backend}" in readable.stdout

    out = cli(env, "exec", "--", "echo hi; whoami")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["hi", state["user"]]
    # The inventory snippet reaches the same sandbox while it runs.
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(state["inventory"])
    via = cli(env, "--inventory", str(inventory), "exec", "sandbox", "--", "cat /tmp/marker 2>/dev/null; "
              "echo kept > /tmp/marker; whoami")
    assert via.returncode == 0, via.stderr
    assert via.stdout.splitlines()[-1] == state["user"]
    again = cli(env, "exec", "--", "cat /tmp/marker")
    assert again.stdout == "kept\n"  # the same host: the running sandbox was reused

    stopped = cli(env, "sandbox", "stop")
    assert stopped.returncode == 0
    assert cli(env, "sandbox", "status").returncode == 3
    if backend == "container":
        assert ENGINE is not None
        gone = subprocess.run([ENGINE.command, "inspect", state["container"]], capture_output=True, check=False)
        assert gone.returncode != 0
    else:
        assert state["user"] not in Path("/etc/passwd").read_text()
        assert not Path(state["workdir"]).exists()
        wait_until(lambda: not Path(f"/proc/{state['pid']}/cmdline").exists()
                   or not Path(f"/proc/{state['pid']}/cmdline").read_bytes(), within=10, what="the sandbox sshd to end")


@contextlib.contextmanager
def _message_queues() -> Iterator[str]:
    """The POSIX message queue file system, mounted for the test when /dev/mqueue is not."""
    if os.path.ismount("/dev/mqueue"):
        yield "/dev/mqueue"
        return
    where = tempfile.mkdtemp(prefix="rb-test-mqueue-")
    try:
        subprocess.run(["mount", "-t", "mqueue", "mqueue", where], check=True, capture_output=True, timeout=10)
        try:
            yield where
        finally:
            subprocess.run(["umount", where], check=False, capture_output=True, timeout=10)
    finally:
        os.rmdir(where)


def _owned_by(uid: int) -> list[str]:
    """What ``uid`` owns directly in the temp directories, /run/lock, the POSIX message queues or as
    System V IPC objects."""
    found = []
    with _message_queues() as queues:
        for root in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", queues):
            for path in Path(root).iterdir():
                with contextlib.suppress(FileNotFoundError):  # other tests' files come and go meanwhile
                    if path.lstat().st_uid == uid:
                        found.append(f"mqueue:{path.name}" if root == queues else str(path))
    for table in ("shm", "msg", "sem"):
        header, *rows = Path(f"/proc/sysvipc/{table}").read_text().splitlines()
        column = header.split().index("uid")
        found += [f"{table} {row.split()[1]}" for row in rows if int(row.split()[column]) == uid]
    return found


@LOCAL_AS_ROOT
def test_local_sandbox_stop_removes_what_the_user_left_in_shared_places_and_ipc(operator: dict[str, str]) -> None:
    env = operator
    started = cli(env, "sandbox", "start", "--backend", "local")
    assert started.returncode == 0, started.stderr
    state = json.loads(cli(env, "sandbox", "status", "--json").stdout)
    tag = uuid.uuid4().hex[:8]
    made = [f"/tmp/rb-left-{tag}", f"/var/tmp/rb-left-{tag}", f"/dev/shm/rb-left-{tag}", f"/run/lock/rb-left-{tag}",
            f"/tmp/rb-leftdir-{tag}", f"/tmp/rb-fifo-{tag}"]
    # A POSIX message queue (O_CREAT | O_RDWR), made as the sandbox user does it: through librt.
    mq_open = (f"import ctypes; rt = ctypes.CDLL('librt.so.1'); "
               f"assert rt.mq_open(b'/rb-left-{tag}', 0o102, 0o600, None) >= 0")
    try:
        out = cli(env, "exec", "--", f"id -u; for f in {' '.join(made[:4])}; do echo secret > $f; done; "
                  f"mkdir -m 700 {made[4]} && echo inner > {made[4]}/f; mkfifo {made[5]}; "
                  f'python3 -c "{mq_open}" && '
                  "ipcmk -M 4096 >/dev/null && ipcmk -Q >/dev/null && ipcmk -S 1 >/dev/null && echo made")
        assert out.returncode == 0, out.stderr
        uid = int(out.stdout.splitlines()[0])
        assert out.stdout.splitlines()[-1] == "made"
        assert uid >= 3_000_000  # a UID useradd does not hand out on its own, so not reused soon
        assert len(_owned_by(uid)) == len(made) + 1 + 3, _owned_by(uid)
        assert f"mqueue:rb-left-{tag}" in _owned_by(uid)
        stopped = cli(env, "sandbox", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert state["user"] not in _sandbox_users()
        assert not [p for p in made if os.path.lexists(p)]
        assert _owned_by(uid) == []
    finally:
        cli(env, "sandbox", "stop")
        for path in made:
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else Path(path).unlink(missing_ok=True)
        with _message_queues() as queues:
            Path(queues, f"rb-left-{tag}").unlink(missing_ok=True)


# -- the pytest plugin users enable (remote_bash.testing) --------------------------------------------------


async def test_remote_session_fixture_is_a_throwaway_host(remote_host: Host,
                                                         remote_session: RemoteBashSession) -> None:
    from remote_bash.testing import default_backend

    assert remote_host.labels == {"sandbox": default_backend()}
    r = await remote_session.run("cd /tmp && X=1; echo $X; whoami")
    user = r.output.split()[1]
    assert r.output.split()[0] == "1"
    assert user != "root" and user == remote_host.user
    assert (await remote_session.run("pwd")).output == "/tmp\n"


DEPLOY_TEST = '''
from pathlib import Path

import pytest

@pytest.mark.asyncio
async def test_deploy_script_installs_the_app(remote_session):
    script = Path(__file__).with_name("deploy.sh").read_text()
    result = await remote_session.run(script, timeout=120)
    assert result.exit_code == 0, result.output
    assert (await remote_session.run("cat ~/app/VERSION")).output == "1.2.3\\n"

@pytest.mark.asyncio
async def test_each_test_gets_a_fresh_shell_on_the_same_host(remote_session, remote_host):
    assert (await remote_session.run("echo ${DEPLOYED:-unset}; cat ~/app/VERSION")).output == "unset\\n1.2.3\\n"
'''


def test_users_enable_the_plugin_and_test_their_deploy_script(pytester: pytest.Pytester,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's example, run as a user runs it: a deploy script tested on the throwaway host."""
    pytester.makefile(".sh", deploy="set -e\nmkdir -p ~/app\necho 1.2.3 > ~/app/VERSION\nexport DEPLOYED=yes\n")
    pytester.makepyfile(test_deploy=DEPLOY_TEST)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess("-p", "remote_bash.testing", "-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(passed=2)


# -- the local backend of a non-root operator: sshd inside bubblewrap -----------------------------------


BWRAP = shutil.which("bwrap")


@pytest.mark.skipif(not IS_ROOT or BWRAP is None or find_sshd() is None or shutil.which("setpriv") is None,
                    reason="needs root (to act as the unprivileged test user), bubblewrap, sshd and setpriv")
async def test_bubblewrap_hides_the_operators_files_processes_and_environment(tmp_path: Path) -> None:
    """What a non-root operator gets from the local backend, run here as the unprivileged ``rbtest``:
    sshd in bubblewrap as the operator's own uid, yet nothing of the operator's in reach."""
    import pwd
    import tempfile

    from remote_bash.sandbox._local import bwrap_wrapper

    from .sshd import ensure_test_user

    assert BWRAP is not None
    account = pwd.getpwnam(ensure_test_user())
    as_operator = ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--clear-groups", "--"]

    def owned(path: Path, mode: int) -> Path:
        os.chown(path, account.pw_uid, account.pw_gid)
        path.chmod(mode)
        return path

    home = owned(Path(tempfile.mkdtemp(prefix="rb-operator-home-")), 0o700)
    (home / "id_ed25519").write_text(SECRET)
    secret_file = owned(home / "id_ed25519", 0o600)
    visible_tmp = owned(Path(tempfile.mkdtemp(prefix="rb-operator-tmp-")), 0o700)
    workdir = owned(Path(tempfile.mkdtemp(prefix="rb-bwrap-sshd-")), 0o711)
    host_key = generate_keypair(workdir / "host_key")
    owned(host_key, 0o600)
    client = generate_keypair(tmp_path / "client")
    # An operator's process holding the API key in its environment, as the CLI would.
    holder = await asyncio.create_subprocess_exec(*as_operator, "sleep", "120",
                                                  env={"ANTHROPIC_API_KEY": SECRET, "PATH": "/usr/bin:/bin"})
    sshd = None
    try:
        sshd = start_sshd(workdir, users=[account.pw_name], authorized_keys=[client.with_suffix(".pub").read_text()],
                          host_key=host_key, wrapper=[*as_operator, *bwrap_wrapper(BWRAP, [home], workdir)])
        known = tmp_path / "known_hosts"
        known.write_text(sshd.known_hosts_line + "\n")
        host = Host(name="sandbox", hostname="127.0.0.1", port=sshd.port, user=account.pw_name, identity_file=client,
                    known_hosts=known, credential="key")
        async with RemoteBashSession(host) as s:
            r = await s.run(f"""
                id -u
                cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c '{SECRET}' || true
                ls /proc | grep -c '^{holder.pid}$' || true
                ls -A '{home}' | wc -l
                cat '{secret_file}' 2>&1 | grep -c '{SECRET}' || true
                ls '{visible_tmp}' >/dev/null 2>&1 && echo tmp-visible || echo tmp-hidden
                env | grep -c '{SECRET}' || true
            """)
            assert r.output.split() == [str(account.pw_uid), "0", "0", "0", "0", "tmp-hidden", "0"], r.output
    finally:
        if sshd is not None:
            sshd.stop()
        holder.kill()
        await asyncio.wait_for(holder.wait(), 10)
        for path in (home, visible_tmp, workdir):
            shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(not IS_ROOT, reason="makes a world-writable directory in /opt")
def test_every_world_writable_place_is_among_those_cleaned(tmp_path: Path) -> None:
    from remote_bash.sandbox._leftovers import shared_places

    extra = Path("/opt") / f"rb-shared-{uuid.uuid4().hex[:8]}"
    extra.mkdir(mode=0o700)
    try:
        extra.chmod(0o1777)
        places = shared_places()
        assert extra in places
        assert Path("/tmp") in places and Path("/run/lock") in places
        assert len(places) == len(set(places)) and Path("/var/lock") not in places  # the same as /run/lock
    finally:
        extra.rmdir()


@pytest.mark.skipif(not IS_ROOT, reason="writes in /var/spool/cron and /var/lib/systemd as another UID")
def test_a_crontab_an_at_job_and_lingering_of_the_uid_are_removed() -> None:
    from remote_bash.sandbox._leftovers import remove_leftovers

    uid = 3_999_000 + int(uuid.uuid4().int % 900)
    name = f"rb-sandbox-{uuid.uuid4().hex[:6]}"
    made_dirs: list[Path] = []  # what this test creates, parents first, to remove afterwards
    for directory in (Path("/var/spool/cron/crontabs"), Path("/var/spool/cron/atjobs"),
                      Path("/var/lib/systemd/linger")):
        missing = [d for d in (*reversed(directory.parents), directory) if not d.exists()]
        for d in missing:
            d.mkdir()
        made_dirs += missing
    for directory, mode in ((Path("/var/spool/cron/crontabs"), 0o1730), (Path("/var/spool/cron/atjobs"), 0o1770)):
        if directory in made_dirs:
            directory.chmod(mode)  # as Debian's cron and at make them: the user cannot enter them
    crontab, at_job = Path("/var/spool/cron/crontabs") / name, Path("/var/spool/cron/atjobs") / f"a0001{uid}"
    linger, other = Path("/var/lib/systemd/linger") / name, Path("/var/spool/cron/crontabs") / f"{name}-other"
    try:
        for path in (crontab, at_job, other):
            path.write_text("* * * * * true\n")
        os.chown(crontab, uid, uid)
        os.chown(at_job, uid, uid)
        os.chown(other, uid + 1, uid + 1)  # another UID's: left alone
        linger.touch()  # root's file, named after the user
        assert remove_leftovers(uid, uid, name=name) == []
        assert not crontab.exists() and not at_job.exists() and not linger.exists()
        assert other.exists()
    finally:
        for path in (crontab, at_job, linger, other):
            path.unlink(missing_ok=True)
        for directory in reversed(made_dirs):
            with contextlib.suppress(OSError):
                directory.rmdir()


# -- stopping against a user that fights back ------------------------------------------------------------

# Forks, and the parent exits, in a loop (bounded to 120 s): no pid lives long enough to be
# killed by pid. It marks /tmp as it goes, as something left behind.
HOPPER = """import os, time
end = time.time() + 120
while time.time() < end:
    try:
        if os.fork():
            os._exit(0)
    except OSError:
        time.sleep(0.01)
    if int(time.time() * 10) % 5 == 0:
        with open("/tmp/rb-hopper-%d" % os.getuid(), "a") as f:
            f.write("alive\\n")
"""
# A directory nested deeper than PATH_MAX allows to name it, in /tmp and in the home.
DEEP = """import os
for top in ("/tmp/rb-deep-%d" % os.getuid(), os.path.expanduser("~/deep")):
    fd = os.open(os.path.dirname(top), os.O_RDONLY)
    name = os.path.basename(top)
    for level in range(1700):
        os.mkdir(name, dir_fd=fd)
        inner = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd, name = inner, "d"
        if level % 500 == 0:
            os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
print("deep")
"""


def _live_processes_of(uid: int) -> list[str]:
    from remote_bash.sandbox._local import _processes_of

    return [f"{pid} ({state})" for pid, state in _processes_of(uid)]


@LOCAL_AS_ROOT
def test_local_stop_wins_against_a_fork_loop_and_removes_a_very_deep_tree(operator: dict[str, str]) -> None:
    env = operator
    started = cli(env, "sandbox", "start", "--backend", "local")
    assert started.returncode == 0, started.stderr
    state = json.loads(cli(env, "sandbox", "status", "--json").stdout)
    user = state["user"]
    home = Path(f"~{user}").expanduser()
    out = cli(env, "exec", "--", f"id -u; python3 -c '{DEEP}' && cat > /tmp/hop.py <<'EOF'\n{HOPPER}EOF\n"
              "setsid -f env -i python3 /tmp/hop.py; echo started")
    assert out.returncode == 0, out.stderr
    uid = int(out.stdout.splitlines()[0])
    assert out.stdout.splitlines()[1:] == ["deep", "started"]
    hopped = Path(f"/tmp/rb-hopper-{uid}")
    try:
        wait_until(hopped.exists, within=30, what="the fork loop to run")
        stopped = cli(env, "sandbox", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert user not in _sandbox_users()
        assert _live_processes_of(uid) == []
        assert not hopped.exists() and not Path(f"/tmp/rb-deep-{uid}").exists() and not home.exists()
        assert cli(env, "sandbox", "status").stdout == "sandbox: not running\n"
    finally:
        from remote_bash.sandbox._local import end_processes

        end_processes(uid, uid)
        hopped.unlink(missing_ok=True)
        subprocess.run(["rm", "-rf", "--one-file-system", f"/tmp/rb-deep-{uid}", "/tmp/hop.py"], check=False,
                       timeout=60)


@LOCAL_AS_ROOT
def test_a_local_stop_that_cannot_remove_everything_keeps_the_user_and_the_state_to_retry(
        operator: dict[str, str]) -> None:
    env = operator
    started = cli(env, "sandbox", "start", "--backend", "local")
    assert started.returncode == 0, started.stderr
    user = json.loads(cli(env, "sandbox", "status", "--json").stdout)["user"]
    out = cli(env, "exec", "--", "id -u; mkdir /tmp/rb-kept-$(id -u) && echo made")
    assert out.returncode == 0, out.stderr
    uid = int(out.stdout.splitlines()[0])
    kept = Path(f"/tmp/rb-kept-{uid}")
    blocker = kept / "roots"  # root's, in the user's directory: the directory cannot go, so the user stays
    blocker.mkdir()
    try:
        failed = cli(env, "sandbox", "stop")
        assert failed.returncode != 0
        assert f"kept the sandbox user {user} (UID {uid})" in failed.stderr
        assert f"could not remove {kept}" in failed.stderr and "sandbox stop' again" in failed.stderr
        assert user in _sandbox_users() and kept.exists()
        status = cli(env, "sandbox", "status")
        assert status.stdout.startswith("sandbox: half-stopped, backend local: kept the sandbox user"), status.stdout
        assert f"could not remove {kept}" in status.stdout
        assert json.loads(cli(env, "sandbox", "status", "--json").stdout)["half_stopped"]
        # A start finishes the stop first, and here cannot either: nothing new starts over it.
        retried = cli(env, "sandbox", "start", "--backend", "local")
        assert retried.returncode != 0 and f"kept the sandbox user {user}" in retried.stderr
        assert _sandbox_users() & {user} == {user} and cli(env, "sandbox", "status").stdout.startswith(
            "sandbox: half-stopped")
        blocker.rmdir()
        again = cli(env, "sandbox", "stop")
        assert again.returncode == 0, again.stderr
        assert user not in _sandbox_users() and not kept.exists()
        assert cli(env, "sandbox", "status").stdout == "sandbox: not running\n"
    finally:
        with contextlib.suppress(FileNotFoundError):
            blocker.rmdir()
        cli(env, "sandbox", "stop")


@pytest.mark.skipif(not IS_ROOT, reason="makes a tree as another UID")
def test_the_leftover_walk_empties_a_tree_deeper_than_the_descriptor_limit() -> None:
    uid = 3_999_000 + int(uuid.uuid4().int % 900)
    root = Path(tempfile.mkdtemp(prefix="rb-shared-"))  # where the UID can reach (tmp_path is root's alone)
    try:
        root.chmod(0o1777)
        _deep_walk(uid, root)
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False, timeout=60)


def _deep_walk(uid: int, root: Path) -> None:
    import resource

    from remote_bash.sandbox._leftovers import remove_leftovers

    other = root / "others"
    other.mkdir()  # root's: stays, and so does what is in it that the UID does not own
    (other / "file").write_text("root's\n")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgid(uid)
            os.setuid(uid)
            fd = os.open(root, os.O_RDONLY)
            for _ in range(3000):
                os.mkdir("d", dir_fd=fd)
                inner = os.open("d", os.O_RDONLY, dir_fd=fd)
                os.close(fd)
                fd = inner
            os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
            code = 0
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))  # far fewer than the tree's depth
    try:
        assert remove_leftovers(uid, uid, roots=(root,)) == []
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert sorted(p.name for p in root.iterdir()) == ["others"]
    assert (other / "file").exists()


@LOCAL_AS_ROOT
def test_a_local_sandbox_whose_sshd_died_is_half_stopped_and_stop_removes_its_user(operator: dict[str, str]) -> None:
    env = operator
    started = cli(env, "sandbox", "start", "--backend", "local")
    assert started.returncode == 0, started.stderr
    state = json.loads(cli(env, "sandbox", "status", "--json").stdout)
    try:
        os.kill(state["pid"], 9)
        wait_until(lambda: cli(env, "sandbox", "status").stdout.startswith("sandbox: half-stopped"), within=30,
                   what="status to show the sandbox half-stopped once its sshd is gone")
        assert state["user"] in _sandbox_users()
        stopped = cli(env, "sandbox", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert state["user"] not in _sandbox_users()
        assert cli(env, "sandbox", "status").stdout == "sandbox: not running\n"
    finally:
        cli(env, "sandbox", "stop")


def _one_off(env: dict[str, str], tag: str) -> tuple[subprocess.Popen[bytes], str, int]:
    """A one-off ``exec`` of a sleeping command, started through the CLI and waited for until the
    command runs in its sandbox: the process, the throwaway user and its UID."""
    marker = Path(f"/tmp/rb-one-off-{tag}")
    proc = subprocess.Popen([*CLI, "exec", "--backend", "local", "--", f"touch {marker}; sleep 100"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    wait_until(lambda: marker.exists() or proc.poll() is not None, within=60, what="the one-off's command to run")
    assert proc.poll() is None, "the one-off exec ended before its command ran"
    uid = marker.stat().st_uid  # the sandbox user's own file: removed with the user
    return proc, pwd.getpwuid(uid).pw_name, uid


def _sshd_of(user: str) -> list[int]:
    """The sshd listening for ``user`` (its config names the user), by pid."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            # sshd rewrites its command line: "sshd: /usr/sbin/sshd -D -e -f CONFIG [listener] ...".
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").split()
            if argv and b"sshd" in argv[0] and b"-f" in argv:
                config = Path(argv[argv.index(b"-f") + 1].decode())
                if f"AllowUsers {user}" in config.read_text():
                    found.append(int(proc.name))
    return found


@LOCAL_AS_ROOT
def test_a_killed_one_off_sandbox_is_abandoned_and_stop_removes_it_but_not_a_live_one(
        operator: dict[str, str]) -> None:
    env = operator
    live, live_user, live_uid = _one_off(env, uuid.uuid4().hex[:8])
    killed, user, uid = _one_off(env, uuid.uuid4().hex[:8])
    try:
        _sshd_pid, = _sshd_of(user)
        assert _live_processes_of(uid)
        killed.kill()
        killed.wait(timeout=30)
        status = cli(env, "sandbox", "status")
        assert "sandbox: abandoned one-off, backend local: sshd pid" in status.stdout, status.stdout
        assert f"throwaway user {user}" in status.stdout
        assert live_user not in status.stdout  # its owner runs: not abandoned
        assert json.loads(cli(env, "sandbox", "status", "--json").stdout)["abandoned"][0]["user"] == user
        stopped = cli(env, "sandbox", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert f"removed an abandoned one-off (local: sshd pid {_sshd_pid}" in stopped.stdout
        assert user not in _sandbox_users()
        assert _live_processes_of(uid) == []
        wait_until(lambda: not _sshd_of(user), within=10, what="the abandoned sandbox's sshd to end")
        assert cli(env, "sandbox", "status").stdout == "sandbox: not running\n"
        # The live one-off, stopped concurrently, was left alone: its user, command and sshd run on.
        assert live.poll() is None and live_user in _sandbox_users()
        assert _live_processes_of(live_uid) and _sshd_of(live_user)
        live.terminate()  # as Ctrl-C: the one-off removes its own sandbox
        assert live.wait(timeout=60) != 0
        assert live_user not in _sandbox_users() and not _sshd_of(live_user)
    finally:
        for proc in (live, killed):
            proc.kill()
            proc.wait(timeout=30)
        cli(env, "sandbox", "stop")
        from remote_bash.sandbox._local import end_processes, remove_user

        for name, number in ((user, uid), (live_user, live_uid)):
            for pid in _sshd_of(name):
                os.kill(pid, 9)
            end_processes(number, number)
            with contextlib.suppress(ConfigError):
                remove_user(name)


@pytest.mark.skipif(not IS_ROOT, reason="plants a record owned by another UID")
@pytest.mark.parametrize("attack", ["shared directory", "foreign file"])
def test_a_one_off_record_someone_else_could_write_is_refused(operator: dict[str, str], attack: str) -> None:
    env = operator
    directory = Path(env["XDG_STATE_HOME"]) / "remote-bash" / "sandbox"
    directory.mkdir(parents=True, mode=0o700)
    # A dead owner, and a "sandbox" that is this test's own process: removing it would kill pytest.
    planted = {"backend": "unisolated", "address": "127.0.0.1", "port": 1, "user": "x", "identity_file": "/x",
               "known_hosts": "/x", "pid": os.getpid(), "owner_pid": 2 ** 22 + 1, "owner_start": "1"}
    rundir = directory / "run-planted"
    rundir.mkdir(mode=0o700)
    record = rundir / "one-off.json"
    record.write_text(json.dumps(planted))
    if attack == "shared directory":
        rundir.chmod(0o777)  # anyone could have replaced the record
    else:
        os.chown(record, 65534, 65534)  # not the operator's file
    for action in (["status"], ["stop"], ["start", "--backend", "unisolated"]):
        out = cli(env, "sandbox", *action)
        assert out.returncode not in (0, 3), out.stdout
        assert f"refusing to use {rundir}" in out.stderr, out.stderr
    assert record.exists()
    rundir.chmod(0o700)
    os.chown(record, 0, 0)
    record.unlink()
