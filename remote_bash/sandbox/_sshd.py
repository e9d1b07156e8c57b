"""An OpenSSH ``sshd`` on loopback with fresh keys, started with a clean environment.

Used by the local sandbox backends and by the test suite, which starts several of them on
127.0.0.2, 127.0.0.3, ... It never listens anywhere but a loopback address, and never hands the
caller's environment (API keys, tokens) to the server or the shells it starts.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from remote_bash.errors import ConfigError

__all__ = ["SshdServer", "clean_environment", "find_sshd", "generate_keypair", "shared_sshd_config", "start_sshd"]

SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def clean_environment(**extra: str) -> dict[str, str]:
    """The whole environment a sandbox server starts with: a PATH and a UTF-8 locale, nothing inherited."""
    return {"PATH": SAFE_PATH, "LANG": "C.UTF-8", **extra}


def shared_sshd_config() -> str:
    """The sshd settings shared with docker/Dockerfile."""
    return resources.files("remote_bash").joinpath("data/sshd_config").read_text()


def find_sshd() -> str | None:
    """Path of OpenSSH's sshd, or None when it is not installed."""
    for candidate in (shutil.which("sshd"), "/usr/sbin/sshd", "/usr/local/sbin/sshd"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def generate_keypair(path: Path, comment: str = "remote-bash") -> Path:
    """Write a fresh ed25519 key pair (``path`` and ``path.pub``, no passphrase)."""
    if not shutil.which("ssh-keygen"):
        raise ConfigError("ssh-keygen is not installed; install openssh-client")
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True, timeout=30)
    return path


@dataclass
class SshdServer:
    """A running sshd; ``stop()`` ends it."""

    address: str
    port: int
    workdir: Path
    process: subprocess.Popen[bytes]
    host_public_key: str
    log: list[str] = field(default_factory=list)

    @property
    def known_hosts_line(self) -> str:
        return f"[{self.address}]:{self.port} {self.host_public_key}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, *, connections: bool = True) -> None:
        """Stop the listener and, unless ``connections`` is False, every connection it serves."""
        if connections:
            # Each connection is served by a child in a session of its own: signal them all.
            for pid in _descendants(self.process.pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGTERM)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def pause(self) -> None:
        """SIGSTOP the listener (existing connections are served by their own processes)."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)


def _descendants(root: int) -> list[int]:
    """Processes below ``root`` (through /proc), deepest last; [] where /proc is missing."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = entry.read_text()
            parents[int(entry.parent.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: list[int] = []
    frontier = [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        found.extend(children)
        frontier = children
    return found


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def start_sshd(
    workdir: Path,
    *,
    address: str = "127.0.0.1",
    port: int = 0,
    users: Sequence[str],
    authorized_keys: Sequence[str],
    extra_config: Sequence[str] = (),
    host_key: Path | None = None,
    deadline: float = 15.0,
    wrapper: Sequence[str] = (),
) -> SshdServer:
    """Start ``sshd -D -e`` on a loopback address and return once it listens.

    Without OpenSSH's sshd, asyncssh's own server runs instead (exec channels only, for the
    current user), so the sandbox works on a machine with nothing but Python.

    ``authorized_keys`` are public key lines accepted for every user in ``users``.
    ``host_key`` reuses an existing host key (to restart "the same" host); a new one is made
    otherwise. ``wrapper`` is a command sshd runs under (a bubblewrap namespace). Raises ConfigError
    when sshd is missing or does not come up in time.
    """
    if not ipaddress.ip_address(address).is_loopback:
        raise ConfigError(f"the throwaway sshd only listens on loopback, not {address}")
    sshd = find_sshd()
    workdir.mkdir(parents=True, exist_ok=True)
    if host_key is None:
        host_key = generate_keypair(workdir / "ssh_host_ed25519_key", "remote-bash-sandbox-host")
    auth = workdir / "authorized_keys"
    auth.write_text("".join(k.strip() + "\n" for k in authorized_keys))
    auth.chmod(0o644)
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    last_error = ""
    for _attempt in range(3):  # only a port taken between probe and bind is retried
        chosen = port or _free_port(address)
        lines = [
            f"ListenAddress {address}:{chosen}",
            f"HostKey {host_key}",
            f"PidFile {workdir / f'sshd-{chosen}.pid'}",
            f"AuthorizedKeysFile {auth}",
            f"AllowUsers {' '.join(users)}",
            *extra_config,
        ]
        if "root" in users:
            lines.append("PermitRootLogin prohibit-password")
        config = workdir / f"sshd_config-{chosen}"
        config.write_text("\n".join(lines) + "\n" + shared_sshd_config())
        if sshd is not None:
            argv = [*wrapper, sshd, "-D", "-e", "-f", str(config)]
            env = clean_environment()
        else:
            # No OpenSSH: asyncssh's own server, running the user's shell for exec requests. It
            # needs to find this package and its dependencies, and nothing else of the caller's.
            argv = [sys.executable, "-m", "remote_bash._ssh", address, str(chosen), str(host_key), str(auth)]
            env = clean_environment(PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
                                    SHELL=os.environ.get("SHELL", "/bin/bash"))
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env, cwd="/",
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        ok, log = _wait_listening(proc, deadline)
        if ok:
            server = SshdServer(address, chosen, workdir, proc, Path(f"{host_key}.pub").read_text().strip(), log)
            return server
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(5)
        last_error = " | ".join(log[-5:])
        if port or "Address already in use" not in last_error:
            break
    raise ConfigError(f"sshd on {address} did not start: {last_error or 'no output'}")


def _wait_listening(proc: subprocess.Popen[bytes], deadline: float) -> tuple[bool, list[str]]:
    """Read sshd's log until it says it listens, it exits, or the deadline passes."""
    assert proc.stderr is not None
    log: list[str] = []
    end = time.monotonic() + deadline
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stderr, selectors.EVENT_READ)
        while time.monotonic() < end:
            if not sel.select(timeout=max(0.0, end - time.monotonic())):
                break
            chunk = os.read(proc.stderr.fileno(), 4096)
            if not chunk:
                return False, log
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                text = line.decode("utf-8", "replace")
                log.append(text)
                if "Server listening on" in text:
                    _drain_in_background(proc)
                    return True, log
    return False, log


def _drain_in_background(proc: subprocess.Popen[bytes]) -> None:
    """Keep reading sshd's log so it never blocks on a full pipe."""
    import threading

    def drain() -> None:
        assert proc.stderr is not None
        with contextlib.suppress(OSError, ValueError):
            while proc.stderr.read1(65536):  # type: ignore[attr-defined]
                pass
        proc.stderr.close()

    threading.Thread(target=drain, daemon=True, name=f"sshd-log-{proc.pid}").start()
