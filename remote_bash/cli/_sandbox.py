"""The built-in ``sandbox`` host: a throwaway sshd on 127.0.0.1 for the current user.

Used when no inventory is configured, either for the duration of one command or, after
``remote-bash sandbox start``, until ``sandbox stop``. It never listens beyond loopback and never
lets anyone but the current user in.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._output import PROG, _out

if TYPE_CHECKING:
    from remote_bash.inventory import Inventory
    from remote_bash.models import Host
    from remote_bash.sandbox import SshdServer

    from ._context import _Context

SANDBOX = "sandbox"


def _sandbox_dir(env: Mapping[str, str]) -> Path:
    from remote_bash._paths import state_dir

    return state_dir(env) / "sandbox"


def _local_user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _client_key(directory: Path) -> Path:
    from remote_bash.sandbox import generate_keypair

    key = directory / "client_ed25519"
    if not key.exists() or not key.with_suffix(".pub").exists():
        key.unlink(missing_ok=True)
        generate_keypair(key, "remote-bash-sandbox-client")
    return key


def _sandbox_host(address: str, port: int, key: Path, known_hosts: Path) -> Host:
    from remote_bash.models import Host

    return Host(name=SANDBOX, hostname=address, port=port, user=_local_user(), identity_file=key,
                known_hosts=known_hosts, credential="key", labels={"sandbox": "true"})


def _sandbox_inventory(host: Host) -> Inventory:
    from remote_bash.inventory import Inventory

    return Inventory(hosts={SANDBOX: host})


def _start_sshd(workdir: Path, key: Path) -> SshdServer:
    """OpenSSH's sshd on 127.0.0.1 (or, without it, asyncssh's server) for the current user."""
    from remote_bash.sandbox import start_sshd

    for old in workdir.glob("ssh_host_ed25519_key*"):
        old.unlink()  # fresh host keys every time
    return start_sshd(workdir, address="127.0.0.1", users=[_local_user()],
                      authorized_keys=[key.with_suffix(".pub").read_text()])


def _running_sandbox(directory: Path) -> dict[str, Any] | None:
    """The state of the sandbox ``sandbox start`` left running, or None."""
    from remote_bash._paths import open_private, private_dir

    try:
        # A state file someone else could write would point connections at their host and key.
        private_dir(directory, what="the sandbox", create=False)
        fd = open_private(directory / "sandbox.json", os.O_RDONLY, what="the sandbox")
        with os.fdopen(fd, "rb") as file:
            state = json.loads(file.read(1 << 20))
        pid = int(state["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes() if Path("/proc").is_dir() else b"sshd"
    except (ProcessLookupError, PermissionError, FileNotFoundError):
        return None
    # The pid may have been reused since: it must still be an sshd (or the asyncssh fallback).
    return state if b"sshd" in cmdline or b"remote_bash._ssh" in cmdline else None


@contextlib.contextmanager
def _sandbox_for_command(env: Mapping[str, str]) -> Iterator[Inventory]:
    """The running sandbox, or one started now and stopped when the command ends."""
    directory = _sandbox_dir(env)
    state = _running_sandbox(directory)
    if state is not None:
        yield _sandbox_inventory(_sandbox_host(state["address"], state["port"], Path(state["identity_file"]),
                                               Path(state["known_hosts"])))
        return
    import shutil
    import tempfile

    _make_private(directory)
    key = _client_key(directory)
    workdir = Path(tempfile.mkdtemp(prefix="run-", dir=directory))
    try:
        server = _start_sshd(workdir, key)
        try:
            known = workdir / "known_hosts"
            _write(known, server.known_hosts_line + "\n")
            yield _sandbox_inventory(_sandbox_host(server.address, server.port, key, known))
        finally:
            server.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _make_private(directory: Path) -> None:
    from remote_bash._paths import private_dir

    private_dir(directory, what="the sandbox")


def _write(path: Path, text: str) -> None:
    from remote_bash._paths import write_private

    write_private(path, text.encode(), what="the sandbox")


def _cmd_sandbox(ctx: _Context) -> int:
    directory = _sandbox_dir(ctx.env)
    state = _running_sandbox(directory)
    action = ctx.args.action
    if action == "status":
        if ctx.args.json:
            _out(json.dumps({"running": state is not None, **(state or {})}) + "\n")
        elif state is None:
            _out("sandbox: not running\n")
        else:
            _out(f"sandbox: running, pid {state['pid']}, {state['user']}@{state['address']} "
                 f"port {state['port']}\n  identity_file: {state['identity_file']}\n"
                 f"  known_hosts:   {state['known_hosts']}\n")
        return 0 if state is not None else 3
    if action == "stop":
        if state is None:
            _out("sandbox: not running\n")
        else:
            _stop_pid(int(state["pid"]))
            _out(f"sandbox: stopped (pid {state['pid']})\n")
        (directory / "sandbox.json").unlink(missing_ok=True)
        return 0
    if state is not None:
        _out(f"sandbox: already running, pid {state['pid']}, {state['address']} port {state['port']}\n")
        return 0
    import shutil

    _make_private(directory)
    key = _client_key(directory)
    shutil.rmtree(directory / "sshd", ignore_errors=True)  # leftovers of an earlier sandbox
    server = _start_sshd(directory / "sshd", key)
    known = directory / "known_hosts"
    _write(known, server.known_hosts_line + "\n")
    state = {"pid": server.pid, "address": server.address, "port": server.port, "user": _local_user(),
             "identity_file": str(key), "known_hosts": str(known)}
    tmp = directory / "sandbox.json.tmp"
    _write(tmp, json.dumps(state, indent=2) + "\n")
    tmp.replace(directory / "sandbox.json")
    _out(f"sandbox: started, pid {server.pid}, {state['user']}@{server.address} port {server.port}\n"
         f"  try: {PROG} exec -- uname -a\n  stop: {PROG} sandbox stop\n")
    return 0


def _stop_pid(pid: int) -> None:
    import time

    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which has no command line left, does not)."""
    try:
        os.kill(pid, 0)
        return not Path("/proc").is_dir() or bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except (ProcessLookupError, PermissionError, FileNotFoundError):
        return False
