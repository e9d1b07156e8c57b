"""Real OpenSSH sshd hosts on loopback for the tests, with keys generated per run."""

from __future__ import annotations

import os
import pwd
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remote_bash.models import Host
from remote_bash.sandbox import SshdServer, generate_keypair, start_sshd

TEST_USER = "rbtest"


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
        )
        self.servers[name] = server
        return server

    def stop_all(self) -> None:
        for server in self.servers.values():
            server.stop()


def make_test_hosts(root: Path) -> TestHosts:
    user = ensure_test_user()
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)  # noqa: S103 - sshd reads authorized_keys here as the test user
    key = generate_keypair(root / "client_ed25519", "remote-bash-tests")
    known = root / "known_hosts"
    known.touch()
    return TestHosts(root=root, user=user, client_key=key, known_hosts=known)


def processes_with(marker: str, user: str) -> list[str]:
    """Command lines of ``user``'s processes that contain ``marker`` (the remote side is local)."""
    out = subprocess.run(["ps", "-ww", "-u", user, "-o", "pid=,args="], capture_output=True, text=True, check=False)
    return [line for line in out.stdout.splitlines() if marker in line and "ps -u" not in line]
