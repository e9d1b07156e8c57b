"""The throwaway host: OpenSSH's sshd when installed, asyncssh's own server otherwise."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest

from remote_bash import ConfigError, Host, RemoteBashSession, sandbox
from remote_bash.sandbox import generate_keypair, start_sshd


@pytest.mark.parametrize("backend", ["openssh", "asyncssh"])
async def test_sandbox_serves_a_persistent_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   backend: str) -> None:
    if backend == "asyncssh":
        monkeypatch.setattr(sandbox, "find_sshd", lambda: None)
    key = generate_keypair(tmp_path / "client")
    user = getpass.getuser()
    server = start_sshd(tmp_path / "srv", users=[user], authorized_keys=[key.with_suffix(".pub").read_text()])
    try:
        known = tmp_path / "known_hosts"
        known.write_text(server.known_hosts_line + "\n")
        host = Host(name="sandbox", hostname="127.0.0.1", port=server.port, user=user, identity_file=key,
                    known_hosts=known, credential="key")
        async with RemoteBashSession(host, kill_grace=0.3) as s:
            assert (await s.run("cd /tmp; echo hi")).output == "hi\n"
            assert (await s.run("pwd")).output == "/tmp\n"
            r = await s.run("sleep 100", timeout=1)
            assert r.timed_out and r.kill is not None and r.kill.survivors == 0
            r = await s.run("exit 4")
            assert r.shell_lost and r.exit_code == 4
            assert (await s.run("echo back")).output == "back\n"
    finally:
        server.stop()


def test_sandbox_refuses_non_loopback(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="loopback"):
        start_sshd(tmp_path, address="10.1.2.3", users=["x"], authorized_keys=[])
