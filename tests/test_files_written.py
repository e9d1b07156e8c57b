"""Files remote_bash writes, attacked: a symbolic link planted by another user, a world-writable
directory, a directory owned by another user. The audit log, transcripts, ``--output-dir``,
sandbox state and known_hosts appends must refuse each (naming the path and what to do) and never
write through it; what they create is owner-only (0700 directories, 0600 files) whatever the umask.

The tests run as root; the other user is the unprivileged ``rbtest`` of tests/sshd.py.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest
import yaml

from remote_bash import _paths, fleet
from remote_bash._paths import UnsafePath, config_dir, open_private, private_dir
from remote_bash.agent import AgentConfig, run_agent
from remote_bash.audit import AuditLog
from remote_bash.errors import AuditError
from remote_bash.fleet import FleetResult, HostResult
from remote_bash.inventory import default_inventory_path
from remote_bash.models import Host
from remote_bash.session import RemoteBashSession

from .messages_server import MessagesServer
from .sshd import TestHosts, ensure_test_user

pytestmark = pytest.mark.reliability

CLI = [sys.executable, "-m", "remote_bash.cli"]
SECRET = "the file an attacker wants overwritten\n"


@pytest.fixture(scope="module")
def other() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("needs root to make files owned by another user")
    return pwd.getpwnam(ensure_test_user())


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# The three attacks on a directory, each returning the directory remote_bash is pointed at and
# the words its refusal must contain.


def planted_link(base: Path, other: pwd.struct_passwd, name: str = "dir") -> tuple[Path, str, Path]:
    """``base/name`` is a link another user planted, to a directory of the victim's."""
    victim = base / "victim"
    victim.mkdir(mode=0o700)
    link = base / name
    os.symlink(victim, link)
    os.lchown(link, other.pw_uid, other.pw_gid)
    return link, "a symbolic link owned by uid", victim


def world_writable(base: Path, other: pwd.struct_passwd, name: str = "dir") -> tuple[Path, str, Path]:
    directory = base / name
    directory.mkdir()
    directory.chmod(0o777)
    return directory, "world-writable (mode 0777)", directory


def foreign_owned(base: Path, other: pwd.struct_passwd, name: str = "dir") -> tuple[Path, str, Path]:
    directory = base / name
    directory.mkdir(mode=0o700)
    os.chown(directory, other.pw_uid, other.pw_gid)
    return directory, f"owned by uid {other.pw_uid}, another user", directory


ATTACKS: dict[str, Callable[..., tuple[Path, str, Path]]] = {
    "planted symlink": planted_link,
    "0777 directory": world_writable,
    "directory of another user": foreign_owned,
}


def untouched(directory: Path) -> None:
    assert os.listdir(directory) == [], "something was written through the attacked path"


# -- the paths module ----------------------------------------------------------------------------


def test_xdg_directories_ignore_relative_values() -> None:
    env = {"HOME": "/h", "XDG_CONFIG_HOME": "/c", "XDG_STATE_HOME": "/s", "XDG_CACHE_HOME": "/k",
           "XDG_RUNTIME_DIR": "/r"}
    assert (_paths.config_dir(env), _paths.state_dir(env), _paths.cache_dir(env), _paths.runtime_dir(env)) == (
        Path("/c/remote-bash"), Path("/s/remote-bash"), Path("/k/remote-bash"), Path("/r/remote-bash"))
    relative = {"HOME": "/h", "XDG_CONFIG_HOME": "c", "XDG_STATE_HOME": "./s", "XDG_CACHE_HOME": "k",
                "XDG_RUNTIME_DIR": "r"}
    assert (_paths.config_dir(relative), _paths.state_dir(relative), _paths.cache_dir(relative),
            _paths.runtime_dir(relative)) == (
        Path("/h/.config/remote-bash"), Path("/h/.local/state/remote-bash"), Path("/h/.cache/remote-bash"),
        Path("/h/.local/state/remote-bash/run"))
    # A relative HOME is ignored the same way: the account's home from the password database.
    assert _paths.state_dir({"HOME": "home"}) == Path(pwd.getpwuid(os.getuid()).pw_dir) / ".local/state/remote-bash"


def test_every_user_of_the_directories_agrees(tmp_path: Path) -> None:
    from remote_bash.agent import default_transcript_dir
    from remote_bash.audit import default_audit_dir
    from remote_bash.sandbox import sandbox_dir

    env = {"HOME": str(tmp_path), "XDG_STATE_HOME": "relative", "XDG_CONFIG_HOME": "relative"}
    state = tmp_path / ".local" / "state" / "remote-bash"
    assert default_audit_dir(env) == state / "audit"
    assert sandbox_dir(env) == state / "sandbox"
    (tmp_path / ".config" / "remote-bash").mkdir(parents=True)
    (tmp_path / ".config" / "remote-bash" / "hosts.yaml").write_text("hosts: {}\n")
    assert default_inventory_path(None, env) == config_dir(env) / "hosts.yaml"
    old = dict(os.environ)
    try:
        os.environ.update(env)
        assert default_transcript_dir() == state / "transcripts"
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_private_dir_creates_owner_only_and_accepts_sticky_and_own_links(tmp_path: Path, umask_000: None) -> None:
    made = private_dir(tmp_path / "a" / "b" / "c", what="tests")
    for path in (tmp_path / "a", tmp_path / "a" / "b", made):
        assert mode(path) == 0o700
    sticky = tmp_path / "shared"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp: others cannot rename what they do not own
    assert mode(private_dir(sticky / "mine", what="tests")) == 0o700
    os.symlink(made, tmp_path / "own-link")  # the user's own link is theirs to make
    assert private_dir(tmp_path / "own-link", what="tests") == tmp_path / "own-link"
    fd = open_private(made / "f", os.O_WRONLY | os.O_CREAT, what="tests")
    os.close(fd)
    assert mode(made / "f") == 0o600


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_private_dir_refuses(tmp_path: Path, other: pwd.struct_passwd, attack: str) -> None:
    directory, why, _target = ATTACKS[attack](tmp_path, other)
    with pytest.raises(UnsafePath) as info:
        private_dir(directory / "below", what="tests")
    assert why in str(info.value)
    assert "refusing to use" in str(info.value)


def test_group_or_world_writable_parent_without_sticky_is_refused(tmp_path: Path) -> None:
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o775)
    with pytest.raises(UnsafePath, match=rf"{parent} for tests: it is group-writable .*chmod go-w"):
        private_dir(parent / "mine", what="tests")
    assert not (parent / "mine").exists()


def test_a_sticky_world_writable_directory_is_fine_above_but_refused_as_the_directory_itself(
        tmp_path: Path) -> None:
    shared = tmp_path / "tmp-like"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(UnsafePath, match=rf"{shared} for tests: it is world-writable \(mode 1777\).*chmod go-w"):
        private_dir(shared, what="tests")
    assert private_dir(shared / "mine", what="tests") == shared / "mine"


def test_open_private_never_follows_a_link_nor_writes_a_file_of_another_user(
    tmp_path: Path, other: pwd.struct_passwd
) -> None:
    victim = tmp_path / "victim"
    victim.write_text(SECRET)
    os.symlink(victim, tmp_path / "link")
    with pytest.raises(UnsafePath, match="it is a symbolic link"):
        open_private(tmp_path / "link", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, what="tests")
    theirs = tmp_path / "theirs"
    theirs.write_text(SECRET)
    os.chown(theirs, other.pw_uid, other.pw_gid)
    with pytest.raises(UnsafePath, match=f"owned by uid {other.pw_uid}"):
        open_private(theirs, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, what="tests")
    assert victim.read_text() == theirs.read_text() == SECRET  # O_TRUNC was never applied



@pytest.mark.parametrize("flags", [os.O_WRONLY | os.O_APPEND | os.O_CREAT, os.O_RDWR | os.O_APPEND])
def test_open_private_makes_an_existing_file_others_can_read_owner_only(tmp_path: Path, flags: int) -> None:
    loose = tmp_path / "history"
    loose.write_text("echo password=[REDACTED]\n")
    loose.chmod(0o644)
    os.close(open_private(loose, os.O_RDONLY, what="tests"))
    assert mode(loose) == 0o644  # a reader decides itself (the audit key's refuses such a file)
    os.close(open_private(loose, flags, what="tests"))
    assert mode(loose) == 0o600
    loose.chmod(0o751)  # an owner's bits are left as they are
    os.close(open_private(loose, flags, what="tests"))
    assert mode(loose) == 0o700
    assert loose.read_text() == "echo password=[REDACTED]\n"


# -- the audit log -------------------------------------------------------------------------------


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_audit_log_refuses_an_attacked_directory(tmp_path: Path, other: pwd.struct_passwd, attack: str) -> None:
    directory, why, target = ATTACKS[attack](tmp_path, other)
    with pytest.raises(AuditError) as info:
        AuditLog(directory / "audit").write("web-1", "exec.start", command="ls")
    assert why in str(info.value)
    assert "the command was not run" in str(info.value)
    untouched(target)


def test_audit_log_never_writes_through_a_planted_file_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text(SECRET)
    (tmp_path / "audit").mkdir(mode=0o700)
    os.symlink(victim, tmp_path / "audit" / "web-1.jsonl")
    with pytest.raises(AuditError, match=r"web-1\.jsonl for the audit log: it is a symbolic link"):
        AuditLog(tmp_path / "audit").write("web-1", "exec.start", command="ls")
    assert victim.read_text() == SECRET


def test_audit_through_the_cli_refuses_a_world_writable_directory(web1: Host, tmp_path: Path) -> None:
    directory = tmp_path / "audit"
    directory.mkdir()
    directory.chmod(0o777)
    out = run_cli(tmp_path, {"web-1": entry(web1)}, "--audit-dir", str(directory), "exec", "web-1", "--",
                  f"touch {tmp_path}/ran")
    assert out.returncode != 0
    assert f"refusing to use {directory} for the audit log: it is world-writable" in out.stderr
    assert not (tmp_path / "ran").exists()  # nothing ran unaudited
    untouched(directory)


def test_an_existing_audit_log_others_can_read_is_made_owner_only(web1: Host, tmp_path: Path) -> None:
    directory = tmp_path / "audit"
    assert run_cli(tmp_path, {"web-1": entry(web1)}, "--audit-dir", str(directory), "exec", "web-1", "--",
                   "true").returncode == 0
    directory.chmod(0o755)
    (log,) = directory.glob("web-1*.jsonl")
    log.chmod(0o644)
    out = run_cli(tmp_path, {"web-1": entry(web1)}, "--audit-dir", str(directory), "exec", "web-1", "--", "true")
    assert out.returncode == 0, out.stderr
    assert mode(log) == 0o600


# -- transcripts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_transcript_refuses_an_attacked_directory(
    tmp_path: Path, other: pwd.struct_passwd, attack: str, session: RemoteBashSession, server: MessagesServer
) -> None:
    directory, why, target = ATTACKS[attack](tmp_path, other)
    async with anthropic.AsyncAnthropic(base_url=server.url, api_key="test", max_retries=0) as client:
        with pytest.raises(UnsafePath, match=re.escape(why)):
            await run_agent("hello", session, AgentConfig(transcript=directory / "t.jsonl"), client=client)
    untouched(target)


async def test_transcript_never_follows_a_planted_link(
    tmp_path: Path, session: RemoteBashSession, server: MessagesServer
) -> None:
    victim = tmp_path / "victim"
    victim.write_text(SECRET)
    os.symlink(victim, tmp_path / "t.jsonl")
    async with anthropic.AsyncAnthropic(base_url=server.url, api_key="test", max_retries=0) as client:
        with pytest.raises(UnsafePath, match="it is a symbolic link"):
            await run_agent("hello", session, AgentConfig(transcript=tmp_path / "t.jsonl"), client=client)
    assert victim.read_text() == SECRET


# -- --output-dir --------------------------------------------------------------------------------


def result() -> FleetResult:
    return FleetResult(command="uptime", pattern="all",
                       results=[HostResult(host="web-1", status="ok", output="up\n", exit_code=0)])


def test_output_dir_is_owner_only(tmp_path: Path, umask_000: None) -> None:
    (path,) = fleet.write_output_dir(result(), tmp_path / "out" / "run")
    assert mode(tmp_path / "out") == mode(tmp_path / "out" / "run") == 0o700
    assert mode(path) == 0o600
    assert "up" in path.read_text()


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_output_dir_refuses_an_attacked_directory(tmp_path: Path, other: pwd.struct_passwd, attack: str) -> None:
    directory, why, target = ATTACKS[attack](tmp_path, other)
    with pytest.raises(UnsafePath, match=re.escape(why)):
        fleet.write_output_dir(result(), directory)
    untouched(target)


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_fleet_run_output_dir_refuses_an_attacked_directory(
    tmp_path: Path, other: pwd.struct_passwd, attack: str
) -> None:
    from remote_bash.fleet import FleetRun, HostRun

    directory, why, target = ATTACKS[attack](tmp_path, other)
    run = FleetRun(task="t", pattern="all", mode="per-host", results=[HostRun(host="web-1", status="ok")])
    with pytest.raises(UnsafePath, match=re.escape(why)):
        fleet.write_run_output_dir(run, directory)
    untouched(target)
    (path,) = fleet.write_run_output_dir(run, tmp_path / "fine")
    assert (mode(tmp_path / "fine"), mode(path)) == (0o700, 0o600)


def test_output_dir_never_writes_through_a_planted_file_link(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text(SECRET)
    os.symlink(victim, out / "web-1.txt")
    with pytest.raises(UnsafePath, match=r"web-1\.txt for --output-dir: it is a symbolic link"):
        fleet.write_output_dir(result(), out)
    assert victim.read_text() == SECRET


def test_fleet_exec_output_dir_through_the_cli(web1: Host, tmp_path: Path, other: pwd.struct_passwd) -> None:
    directory, why, target = world_writable(tmp_path, other)
    out = run_cli(tmp_path, {"web-1": entry(web1)}, "fleet", "exec", "all", "--output-dir", str(directory),
                  "--", f"touch {tmp_path}/ran")
    assert out.returncode != 0
    assert why in out.stderr
    assert not (tmp_path / "ran").exists()  # refused before any host was worked on: no output lost
    untouched(target)


# -- sandbox state -------------------------------------------------------------------------------


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_sandbox_state_in_an_attacked_directory_is_refused(
    tmp_path: Path, other: pwd.struct_passwd, attack: str
) -> None:
    state = tmp_path / "state"
    (state / "remote-bash").mkdir(parents=True)
    directory, why, _target = ATTACKS[attack](state / "remote-bash", other, "sandbox")
    # A state file someone else could write would point `exec` at their sshd and key (this pid is
    # a live python process, not an sshd, so the file would be ignored anyway; the directory is
    # what must be refused).
    planted = {"pid": os.getpid(), "address": "127.0.0.1", "port": 1, "user": "x",
               "identity_file": "/x", "known_hosts": "/x"}
    (directory / "sandbox.json").write_text(json.dumps(planted))
    env = clean_env(tmp_path)
    env.pop("REMOTE_BASH_INVENTORY")
    env["XDG_STATE_HOME"] = str(state)
    out = subprocess.run([*CLI, "sandbox", "status"], env=env, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert out.returncode not in (0, 3), out.stdout
    assert why in out.stderr
    assert "running" not in out.stdout


# -- known_hosts appends (accept-new) -------------------------------------------------------------


@pytest.fixture(scope="module")
def fresh_host(hosts: TestHosts) -> Host:
    return hosts.start("files-written")


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_accept_new_never_appends_through_an_attacked_directory(
    fresh_host: Host, tmp_path: Path, other: pwd.struct_passwd, attack: str
) -> None:
    directory, why, target = ATTACKS[attack](tmp_path, other)
    known = directory / "known_hosts"
    out = run_cli(tmp_path, {"fw": entry(fresh_host, known_hosts=str(known), host_key_policy="accept-new")},
                  "exec", "fw", "--", f"touch {tmp_path}/ran")
    assert out.returncode != 0
    assert why in out.stderr, out.stderr
    assert not (tmp_path / "ran").exists()
    untouched(target)


def test_accept_new_never_appends_through_a_planted_file_link(fresh_host: Host, tmp_path: Path) -> None:
    ssh = tmp_path / "ssh"
    ssh.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text(SECRET)
    os.symlink(victim, ssh / "known_hosts")
    out = run_cli(tmp_path, {"fw": entry(fresh_host, known_hosts=str(ssh / "known_hosts"),
                                         host_key_policy="accept-new")}, "exec", "fw", "--", "true")
    assert out.returncode != 0
    assert "known_hosts for known_hosts: it is a symbolic link" in out.stderr, out.stderr
    assert victim.read_text() == SECRET


def test_accept_new_creates_an_owner_only_file(fresh_host: Host, tmp_path: Path) -> None:
    known = tmp_path / "new" / "known_hosts"
    out = run_cli(tmp_path, {"fw": entry(fresh_host, known_hosts=str(known), host_key_policy="accept-new")},
                  "exec", "fw", "--", "echo ok")
    assert (out.returncode, out.stdout) == (0, "ok\n"), out.stderr
    assert (mode(known.parent), mode(known)) == (0o700, 0o600)


# -- helpers -------------------------------------------------------------------------------------


def clean_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True, mode=0o700)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "REMOTE_BASH_", "XDG_", "PYTHON_KEYRING"))}
    env.update(HOME=str(home), XDG_STATE_HOME=str(home / ".state"), XDG_DATA_HOME=str(home / ".data"),
               REMOTE_BASH_INVENTORY=str(tmp_path / "hosts.yaml"), REMOTE_BASH_AUDIT_DIR=str(tmp_path / "audit"),
               PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring")
    return env


def run_cli(tmp_path: Path, inventory: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": inventory}))
    return subprocess.run([*CLI, *args], env=clean_env(tmp_path), capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def entry(host: Host, **extra: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"hostname": host.hostname, "port": host.port, "user": host.user,
                              "identity_file": str(host.identity_file), "known_hosts": str(host.known_hosts),
                              "credential": "key"}
    fields.update(extra)
    return fields
