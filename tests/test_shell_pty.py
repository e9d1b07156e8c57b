"""``remote-bash shell`` at a real terminal: a pseudo-terminal (``os.openpty``) that is the CLI's
controlling terminal, so Ctrl-C is the byte 0x03 turned into SIGINT by the kernel's line discipline,
and readline does the line editing, against a real sshd.
"""

from __future__ import annotations

import fcntl
import os
import select
import stat
import subprocess
import termios
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_bash.models import Host

from .sshd import TestHosts, processes_with
from .test_cli import CLI, audit_records, base_env, host_entry, write_inventory
from .waiting import wait_until


@pytest.fixture(scope="module")
def pty_host(hosts: TestHosts) -> Host:
    return hosts.start("pty-a")


@pytest.fixture
def env(tmp_path: Path, pty_host: Host) -> dict[str, str]:
    inventory = write_inventory(tmp_path / "hosts.yaml", {"pty-a": host_entry(pty_host)})
    return {**base_env(tmp_path), "REMOTE_BASH_INVENTORY": str(inventory), "TERM": "xterm"}


class Terminal:
    """The CLI on a pseudo-terminal: type into it, wait for what it shows."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.master, slave = os.openpty()

        def controlling_terminal() -> None:  # runs in the child, after setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen([*CLI, *args], env=env, stdin=slave, stdout=slave, stderr=slave,
                                     start_new_session=True, preexec_fn=controlling_terminal)
        os.close(slave)
        self.screen = b""
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if not ready:
                if self.proc.poll() is not None:
                    return
                continue
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: the other side closed
                return
            if not data:
                return
            with self.lock:
                self.screen += data

    def text(self) -> str:
        with self.lock:
            return self.screen.decode(errors="replace")

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def wait_for(self, needle: str, count: int = 1, timeout: float = 30) -> None:
        wait_until(lambda: self.text().count(needle) >= count, within=timeout,
                   what=f"{needle!r} (x{count}) on the terminal", show=lambda: self.text()[-3000:])

    def close(self) -> int:
        try:
            return self.proc.wait(30)
        finally:
            self.proc.kill()
            self.reader.join(10)
            os.close(self.master)


@pytest.fixture
def terminal(env: dict[str, str]) -> Iterator[Terminal]:
    term = Terminal(env, "shell", "pty-a")
    try:
        yield term
    finally:
        if term.proc.poll() is None:
            term.proc.kill()


PROMPT = "pty-a$ "


def test_line_editing_history_ctrl_c_and_ctrl_d(terminal: Terminal, env: dict[str, str], hosts: TestHosts) -> None:
    terminal.wait_for("connected to pty-a")
    terminal.wait_for(PROMPT)
    terminal.type("echo one-$((1+1))\r")
    terminal.wait_for("one-2")
    terminal.wait_for(PROMPT, 2)

    # Ctrl-C at an empty prompt: a fresh prompt, and the shell is still there.
    terminal.type("\x03")
    terminal.wait_for(PROMPT, 3)
    # Ctrl-C on a half-typed line drops it: it is never run.
    terminal.type("echo dropped-line\x03")
    terminal.wait_for(PROMPT, 4)
    # Line editing: Ctrl-A goes to the start of the line; the arrow up recalls the last line.
    terminal.type("cho edited-$((3*3))\x01e\r")
    terminal.wait_for("edited-9")
    terminal.wait_for(PROMPT, 5)
    terminal.type("\x1b[A\r")
    terminal.wait_for("edited-9", 2)  # the recalled line ran again
    terminal.wait_for(PROMPT, 6)

    # A full-screen program is refused at once, nothing sent.
    started = time.monotonic()
    terminal.type("vi /etc/hostname\r")
    terminal.wait_for("[not run: vi waits for a terminal")
    assert time.monotonic() - started < 20  # the default command deadline is far longer
    terminal.wait_for(PROMPT, 7)
    terminal.type(":help\r")
    terminal.wait_for("meta-commands:")
    terminal.wait_for(PROMPT, 8)

    # Ctrl-C while a command runs kills it on the host.
    marker = str(uuid.uuid4().int)[:9]
    terminal.type(f"echo begun; sleep 77.{marker}\r")
    terminal.wait_for("begun\r\n")
    wait_until(lambda: processes_with(f"sleep 77.{marker}", hosts.user), within=20,
               what="the command to start on the host")
    terminal.type("\x03")
    terminal.wait_for("[interrupted: the command was killed]")
    terminal.wait_for(PROMPT, 9)
    assert processes_with(f"sleep 77.{marker}", hosts.user) == []

    terminal.type("echo password=hunter22\r")
    terminal.wait_for("password=[REDACTED")
    terminal.wait_for(PROMPT, 10)
    terminal.type("\x04")  # Ctrl-D leaves
    assert terminal.close() == 0

    commands = [r["command"] for r in audit_records(env, "pty-a") if r["event"] == "exec.start"]
    assert commands[:3] == ["echo one-$((1+1))", "echo edited-$((3*3))", "echo edited-$((3*3))"]
    assert not [c for c in commands if "dropped-line" in c or c.startswith("vi ")]

    history = Path(env["XDG_STATE_HOME"]) / "remote-bash" / "shell_history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    lines = history.read_text().splitlines()
    assert "echo edited-$((3*3))" in lines
    assert "hunter22" not in history.read_text()
    assert any(line.startswith("echo password=[REDACTED") for line in lines)


def test_the_history_comes_back_in_the_next_shell(env: dict[str, str]) -> None:
    first = Terminal(env, "shell", "pty-a")
    try:
        first.wait_for(PROMPT)
        first.type("echo remembered-$((6*7))\r")
        first.wait_for("remembered-42")
        first.wait_for(PROMPT, 2)
        first.type(":exit\r")
        assert first.close() == 0
    finally:
        first.proc.kill()
    second = Terminal(env, "shell", "pty-a")
    try:
        second.wait_for(PROMPT)
        second.type("\x1b[A\r")
        second.wait_for("remembered-42")
        second.wait_for(PROMPT, 2)
        second.type("\x04")
        assert second.close() == 0
    finally:
        second.proc.kill()
