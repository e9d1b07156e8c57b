"""Real OpenSSH sshd hosts on loopback for the tests, with keys generated per run."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remote_bash.models import Host
from remote_bash.sandbox import SshdServer, generate_keypair, start_sshd

TEST_USER = "rbtest"


def own_proc_wrapper() -> list[str] | None:
    """The command that starts an sshd in a PID and mount namespace of its own, with its own /proc
    (``unshare --pid --fork --mount-proc``), or None where that cannot be done (not root, no
    ``unshare``, or the kernel refuses).

    On loopback every sshd shares one process table, so each host's sessions see every other
    host's processes: a real host sees only its own. In its own namespace an sshd and everything
    it starts see only that host's processes, and ``--kill-child`` ends them with ``unshare``
    (the sshd is the namespace's init: when it ends, the kernel ends the rest)."""
    exe = shutil.which("unshare")
    if exe is None or os.geteuid() != 0:
        return None
    argv = [exe, "--pid", "--fork", "--mount-proc", "--kill-child"]
    probe = subprocess.run([*argv, "true"], capture_output=True, timeout=10, check=False)
    return argv if probe.returncode == 0 else None


def ensure_test_user() -> str:
    """A non-root user sshd accepts (created if missing; locked password, no PAM)."""
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        if os.geteuid() != 0:
            return pwd.getpwuid(os.getuid()).pw_name
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", TEST_USER], check=True, capture_output=True)
    if os.geteuid() == 0:
        subprocess.run(["usermod", "-p", "*", TEST_USER], check=True, capture_output=True)
        return TEST_USER
    return pwd.getpwuid(os.getuid()).pw_name


@dataclass
class TestHosts:
    """Starts sshd on 127.0.0.2, 127.0.0.3, ... and hands out Host models for them."""

    __test__ = False  # a helper, not a test class

    root: Path
    user: str
    client_key: Path
    known_hosts: Path
    servers: dict[str, SshdServer] = field(default_factory=dict)
    wrapper: tuple[str, ...] = ()
    """What every sshd is started under (:func:`own_proc_wrapper`: a host's own process table)."""
    _next: int = 2

    def start(
        self, name: str, *, address: str | None = None, extra_config: tuple[str, ...] = (), **host_fields: Any
    ) -> Host:
        if address is None:
            address = f"127.0.0.{self._next}"
            self._next += 1
        server = start_sshd(
            self.root / name,
            address=address,
            users=[self.user],
            authorized_keys=[self.client_key.with_suffix(".pub").read_text()],
            extra_config=extra_config,
            wrapper=self.wrapper,
        )
        self.servers[name] = server
        with self.known_hosts.open("a") as fh:
            fh.write(server.known_hosts_line + "\n")
        return self.host(name, **host_fields)

    def host(self, name: str, **host_fields: Any) -> Host:
        server = self.servers[name]
        fields: dict[str, Any] = {
            "name": name,
            "hostname": server.address,
            "port": server.port,
            "user": self.user,
            "identity_file": self.client_key,
            "known_hosts": self.known_hosts,
            "credential": "key",
        }
        fields.update(host_fields)
        return Host(**fields)

    def restart(self, name: str) -> SshdServer:
        """Stop the named sshd and start it again on the same address, port and host key."""
        old = self.servers[name]
        old.stop()
        server = start_sshd(
            old.workdir,
            address=old.address,
            port=old.port,
            users=[self.user],
            authorized_keys=[self.client_key.with_suffix(".pub").read_text()],
            host_key=old.workdir / "ssh_host_ed25519_key",
            wrapper=self.wrapper,
        )
        self.servers[name] = server
        return server

    def stop_all(self) -> None:
        for server in self.servers.values():
            server.stop()


def make_test_hosts(root: Path, *, own_proc: bool = False) -> TestHosts:
    """``own_proc``: start each sshd in a PID namespace with its own /proc (see
    :func:`own_proc_wrapper`); raises RuntimeError where that cannot be done."""
    wrapper: tuple[str, ...] = ()
    if own_proc:
        got = own_proc_wrapper()
        if got is None:
            raise RuntimeError("cannot start sshd in a PID namespace of its own here (needs root and unshare)")
        wrapper = tuple(got)
    user = ensure_test_user()
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)  # noqa: S103 - sshd reads authorized_keys here as the test user
    key = generate_keypair(root / "client_ed25519", "remote-bash-tests")
    known = root / "known_hosts"
    known.touch()
    return TestHosts(root=root, user=user, client_key=key, known_hosts=known, wrapper=wrapper)


def processes_with(marker: str, user: str) -> list[str]:
    """Command lines of ``user``'s processes that contain ``marker`` (the remote side is local)."""
    out = subprocess.run(["ps", "-ww", "-u", user, "-o", "pid=,args="], capture_output=True, text=True, check=False)
    return [line for line in out.stdout.splitlines() if marker in line and "ps -u" not in line]


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a marked ``sh`` and the ``sleep`` it waits for)."""
    found, queue = [], [pid]
    while queue and len(found) < 64:
        current = queue.pop()
        found.append(current)
        for children in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                queue += [int(c) for c in children.read_text().split()]
    return found


@contextlib.contextmanager
def reaped(marker: str, user: str) -> Iterator[None]:
    """Whatever a test left running under ``marker`` is stopped at its end, children included."""
    try:
        yield
    finally:
        tops = [int(line.split()[0]) for line in processes_with(marker, user)]
        for pid in [p for top in tops for p in _tree(top)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
