"""Terminal control text through the real CLI against real sshd: what Claude reads is plain text,
and nothing a host, a command or Claude writes is acted on by the operator's terminal.

Some tests run the CLI with its stdout on a real pseudo-terminal (the ``pty`` module), where
remote_bash decides what to escape by ``isatty()``.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import tempfile
import termios
import time
from pathlib import Path
from typing import Any

import pytest

from remote_bash.models import Host

from .messages_server import MessagesServer, Reply, text, tool_use
from .sshd import TestHosts
from .test_cli import CLI, audit_records, base_env, cli, host_entry, write_inventory

BIDI = "\u202e"
OSC52 = "\x1b]52;c;cHduZWQ=\x07"  # would set the clipboard to "pwned"
# Every escape sequence the CLI itself writes on a terminal: SGR styling, and the fleet progress line.
OWN_STYLING = re.compile(r"\x1b\[[0-9;]*m|\r\x1b\[K")


@pytest.fixture(scope="module")
def term_hosts(hosts: TestHosts) -> tuple[Host, Host]:
    return hosts.start("term-a"), hosts.start("term-b")


@pytest.fixture
def env(tmp_path: Path, term_hosts: tuple[Host, Host]) -> dict[str, str]:
    a, b = term_hosts
    inventory = write_inventory(tmp_path / "hosts.yaml", {"term-a": host_entry(a), "term-b": host_entry(b)})
    return {**base_env(tmp_path), "REMOTE_BASH_INVENTORY": str(inventory)}


def on_terminal(env: dict[str, str], *args: str, stdin: str = "", timeout: float = 60) -> tuple[int, str, str]:
    """Run the CLI with stdout on a pseudo-terminal (output processing off, so the bytes read are
    the bytes written) and ``stdin`` from a file; returns (status, stdout, stderr)."""
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    with tempfile.TemporaryFile() as source:
        source.write(stdin.encode())
        source.seek(0)
        proc = subprocess.Popen([*CLI, *args], env=env, stdin=source, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    data = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the last writer closed the terminal
                    break
                if not chunk:
                    break
                data += chunk
            elif proc.poll() is not None:
                break
        else:
            pytest.fail(f"the CLI did not finish within {timeout} s: {data!r}")
        _, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        os.close(master)
    return proc.returncode, data.decode("utf-8", "surrogateescape"), err.decode("utf-8", "surrogateescape")


def assert_inert(screen: str) -> None:
    """Nothing in ``screen`` that a terminal would act on, other than the CLI's own styling."""
    rest = OWN_STYLING.sub("", screen)
    assert "\x1b" not in rest, rest
    bad = [c for c in rest if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F
           or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"]
    assert not bad, (bad, rest)


# -- what Claude reads: plain text (issue: TERM=xterm programs) --------------------------------------


HYPERLINKS = ("printf '\\033]0;a window title\\007'; "
              "printf '\\033]8;;https://example.com/doc\\033\\\\the docs\\033]8;;\\033\\\\\\n'; "
              "printf '\\033]8;;file:///etc\\007etc\\033]8;;\\007\\n'; "
              "printf '\\033P+q544e\\033\\\\\\033_apc\\033\\\\\\033^pm\\033\\\\done\\n'")


@pytest.mark.parametrize(("command", "expected"), [
    ("export TERM=xterm; tput bold; echo x; tput sgr0", "x\n"),
    ("TERM=xterm tput smcup; TERM=xterm tput sc; echo y; TERM=xterm tput rc; TERM=xterm tput rmcup", "y\n"),
    ("printf '\\0337a\\0338\\033=b\\033>\\033cc\\033(0d\\033(B\\302\\2331me\\302\\2330m\\n'", "abcde\n"),
    (HYPERLINKS, "the docs\netc\ndone\n"),
])
def test_programs_run_with_term_xterm_read_as_plain_text(env: dict[str, str], command: str,
                                                         expected: str) -> None:
    out = cli(env, "exec", "--json", "term-a", "--", command)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["output"] == expected
    piped = cli(env, "exec", "term-a", "--", command)
    assert piped.stdout == expected


def test_ls_color_always_reads_as_plain_text(env: dict[str, str]) -> None:
    command = ("d=$(mktemp -d) && mkdir $d/sub && touch $d/run && chmod +x $d/run && ln -s run $d/link && "
               "TERM=xterm ls --color=always $d; rm -r $d")
    raw = cli(env, "exec", "term-a", "--", command.replace("TERM=xterm ls", "TERM=xterm ls -1 --color=always "
                                                           "$d | od -c | grep -c 033; true #"))
    assert int(raw.stdout.split()[0]) > 0  # ls did colour its output
    out = cli(env, "exec", "--json", "term-a", "--", command)
    assert json.loads(out.stdout)["output"].split() == ["link", "run", "sub"]


def test_sequences_across_the_head_and_tail_of_a_long_output_are_stripped(env: dict[str, str]) -> None:
    # 300 KB of coloured lines, then a long OSC 52 string and a hyperlink at the very end: the
    # middle is cut, and the tail must still be read from the state it starts in.
    command = ("for i in $(seq 1 6000); do "
               "printf '\\033[1;3%dmline %d\\033[0m\\033]8;;http://x/%d\\007l\\033]8;;\\007\\n' "
               "$((i % 8)) $i $i; done; "
               "printf '\\033]52;c;'; head -c 200000 /dev/zero | tr '\\0' A; printf '\\007end\\n'")
    out = cli(env, "exec", "--json", "term-a", "--", command, timeout=120)
    result = json.loads(out.stdout)
    assert result["truncated"]
    output = result["output"]
    assert "\x1b" not in output and "\x07" not in output
    assert "AAAA" not in output and "http://x" not in output
    assert output.startswith("line 1l\nline 2l\n")
    # The kept tail lies wholly inside the OSC 52 string: none of it shows, and what follows its end
    # is the rest of a line that began before the cut, which a tail never shows (it could be the
    # end of a secret whose start was cut away).
    assert output.endswith(" bytes ...]\n")
    record = next(r for r in reversed(audit_records(env, "term-a")) if r["event"] == "exec.end")
    assert "\x1b" not in record["output_head"] + record["output_tail"]


# -- the operator's terminal -------------------------------------------------------------------------


HOSTILE = f"printf 'ok {BIDI}txt.exe \\033]52;c;cHduZWQ=\\007\\033[2Jend\\n'"


def test_exec_escapes_on_a_terminal_and_streams_as_is_to_a_pipe(env: dict[str, str]) -> None:
    status, screen, _ = on_terminal(env, "exec", "term-a", "--", HOSTILE)
    assert status == 0
    assert_inert(screen)
    assert screen == "ok \\u202etxt.exe end\n"  # the clipboard sequence and the screen clear are gone

    piped = cli(env, "exec", "term-a", "--", HOSTILE)
    assert piped.stdout == f"ok {BIDI}txt.exe end\n"  # to a pipe: the text Claude reads, as it is


def test_shell_on_a_pipe_and_on_a_terminal(env: dict[str, str]) -> None:
    lines = f"{HOSTILE}\nprintf '\\033]0;t\\007' >&2; exit 3\n"
    out = cli(env, "shell", "term-a", stdin=lines)
    assert out.stdout == f"ok {BIDI}txt.exe end\n"
    assert_inert(out.stderr)

    status, screen, err = on_terminal(env, "shell", "term-a", stdin=lines)
    assert status == 3
    assert screen == "ok \\u202etxt.exe end\n"
    assert_inert(err)


def test_audit_show_escapes_a_command_that_holds_an_osc_52(env: dict[str, str]) -> None:
    command = f"echo harmless #{OSC52}\r\x1b[2K{BIDI}"
    assert cli(env, "exec", "term-a", "--", command).returncode == 0
    status, screen, _ = on_terminal(env, "audit", "show", "term-a")
    assert status == 0
    assert_inert(screen)
    assert "echo harmless #\\x1b]52;c;cHduZWQ=\\x07" in screen
    assert "\\x1b[2K\\u202e" in screen

    as_json = cli(env, "audit", "show", "--json", "term-a")
    assert_inert(as_json.stdout)
    commands = [json.loads(line).get("command") for line in as_json.stdout.splitlines()]
    assert command in commands  # the JSON still holds the command exactly


def test_fleet_exec_recap_escapes_hostile_output(env: dict[str, str]) -> None:
    status, screen, err = on_terminal(env, "fleet", "exec", "-n", "all", "--", HOSTILE + "; printf 'x\\rline2\\n'")
    assert status == 0, err
    assert_inert(screen)
    assert_inert(err)
    assert "ok \\u202etxt.exe end" in screen
    assert "2 hosts: ok \\u202etxt.exe end" in screen or "2 hosts (" in screen

    command = HOSTILE + "; true '\x7f\x9b'"
    as_json = cli(env, "fleet", "exec", "all", "--json", "--", command)
    assert_inert(as_json.stdout)
    result = json.loads(as_json.stdout)
    assert {r["output"] for r in result["results"]} == {f"ok {BIDI}txt.exe end\n"}
    assert result["command"] == command


def test_error_messages_show_what_they_quote_escaped(env: dict[str, str]) -> None:
    # Every error line goes through the same escaping: here one that quotes a host name given on
    # the command line (the same path carries errors that quote a host's or a command's words).
    for debug in ((), ("--debug",)):
        out = cli(env, *debug, "exec", f"term{OSC52}{BIDI}", "--", "true")
        assert out.returncode == 127
        assert_inert(out.stderr)
        assert "\\x1b]52;c;cHduZWQ=\\x07\\u202e" in out.stderr


def _run_script(command: str) -> list[Any]:
    return [
        Reply([text(f"Checking.{OSC52}"), tool_use({"command": command}, id="toolu_term1")]),
        Reply([text(f"Done{BIDI}.")]),
    ]


# A command whose \r, line erase and bidi override would, painted raw, show only "echo innocent".
SNEAKY = f"echo ran-this; echo also-this\r\x1b[2Kecho innocent {BIDI}cba"


@pytest.mark.parametrize("terminal", [False, True])
def test_run_shows_claudes_command_as_it_will_run(env: dict[str, str], terminal: bool) -> None:
    with MessagesServer(_run_script(SNEAKY)) as server:
        run_env = {**env, "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test-key"}
        args = ("run", "--host", "term-a", "--model", "claude-sonnet-5", "task")
        if terminal:
            status, screen, err = on_terminal(run_env, *args)
        else:
            done = cli(run_env, *args)
            status, screen, err = done.returncode, done.stdout, done.stderr
    assert status == 0, err
    assert_inert(screen)
    assert_inert(err)
    plain = OWN_STYLING.sub("", screen)
    assert "$ echo ran-this; echo also-this\\x0d\\x1b[2Kecho innocent \\u202ecba\n" in plain
    assert "Checking.\\x1b]52;c;cHduZWQ=\\x07" in plain
    assert "  ran-this\n" in plain
    assert "  also-this\n" not in plain  # its \r line was collapsed: the output shows its last state
    assert "Done\\u202e." in plain
    if terminal:
        assert "\x1b[1;36m" in screen  # the CLI's own styling is still there


def test_run_json_keeps_the_command_exact(env: dict[str, str]) -> None:
    with MessagesServer(_run_script(SNEAKY)) as server:
        run_env = {**env, "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test-key"}
        out = cli(run_env, "run", "--json", "--host", "term-a", "task")
    assert out.returncode == 0, out.stderr
    assert_inert(out.stdout)
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert SNEAKY in [e.get("command") for e in events]


def test_fleet_run_recap_escapes_claudes_answer(env: dict[str, str]) -> None:
    answer = f"All fine{OSC52}\r\x1b[2K{BIDI}really"
    with MessagesServer([Reply([text(answer)])]) as server:
        run_env = {**env, "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test-key"}
        status, screen, err = on_terminal(run_env, "fleet", "run", "--coordinator", "all", "look")
        server.add(Reply([text(answer)]))
        as_json = cli(run_env, "fleet", "run", "--coordinator", "--json", "all", "look")
    assert status == 0, err
    assert_inert(screen)
    assert_inert(err)
    assert "All fine\\x1b]52;c;cHduZWQ=\\x07\\x0d\\x1b[2K\\u202ereally" in screen
    assert_inert(as_json.stdout)
    assert json.loads(as_json.stdout)["coordinator"]["final_text"] == answer
