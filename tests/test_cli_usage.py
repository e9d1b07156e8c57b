"""The command line's first contact, without a host: the parser, usage errors, help, exit-status tables,
the shell's refusal of full-screen programs, and the README and hosts.example.yaml against the parser.

What reaches a host is tested in test_cli.py and test_terminal_cli.py; here the parser is called
directly (``_grammar.parse``, the one function that turns argv into options) or the CLI is run as a
subprocess where the exact bytes on stderr matter.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_bash.cli import _grammar, _output
from remote_bash.cli._shell import needs_terminal
from remote_bash.inventory import load_inventory

from .test_cli import CLI, base_env

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def parsers(parser: argparse.ArgumentParser | None = None) -> Iterator[argparse.ArgumentParser]:
    """Every parser: the top level, each command, each action of a command."""
    parser = parser or _grammar._parser()
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield from parsers(child)


def leaves() -> list[argparse.ArgumentParser]:
    """The parsers that run something: those with no actions below them."""
    return [p for p in parsers() if not any(isinstance(a, argparse._SubParsersAction) for a in p._actions)]


def usage_error(argv: list[str]) -> str:
    """The line a usage mistake prints, without the leading ``remote-bash`` (and its space or colon)."""
    with pytest.raises(_output._UsageError) as caught:
        _grammar.parse(argv)
    line = str(caught.value)
    assert line.startswith("remote-bash") and "\n" not in line
    return line.removeprefix("remote-bash").lstrip(" :")


# -- the parser -------------------------------------------------------------------------------------


def test_every_option_and_argument_has_a_description() -> None:
    missing = [f"{p.prog} {a.option_strings or a.dest}" for p in parsers() for a in p._actions
               if not a.help or a.help == argparse.SUPPRESS]
    assert missing == []


def test_global_options_go_before_or_after_the_command() -> None:
    before = _grammar.parse(["--inventory", "inv.yaml", "--allow", "web", "--debug", "exec", "web-1", "--", "uptime"])
    after = _grammar.parse(["exec", "web-1", "--inventory", "inv.yaml", "--allow", "web", "--debug", "--", "uptime"])
    nested = _grammar.parse(["fleet", "exec", "--audit-dir", "/a", "web", "--", "true"])
    for args in (before, after):
        assert (args.inventory, args.allow, args.debug, args.host, args.words) == \
            ("inv.yaml", "web", True, "web-1", ["uptime"])
    assert (nested.audit_dir, nested.command, nested.action, nested.pattern) == ("/a", "fleet", "exec", "web")
    assert _grammar.parse(["hosts"]).debug is False


@pytest.mark.parametrize(("argv", "expected"), [
    (["exec", "--workers", "3", "x", "--", "true"],
     "exec: unknown option --workers; usage: remote-bash exec [options] [HOST] -- COMMAND..."),
    (["fleet", "exec", "web", "--coordinator", "--", "true"],
     "fleet exec: unknown option --coordinator; usage: remote-bash fleet exec [options] PATTERN -- COMMAND..."),
    (["hosts", "--forks", "3"], "hosts: unknown option --forks; usage: remote-bash hosts [--json] [PATTERN]"),
    (["sandbox", "stop", "--json"], "sandbox stop: unknown option --json; usage: remote-bash sandbox stop"),
    (["credentials", "delete", "web-1", "--store-readable"],
     "credentials delete: unknown option --store-readable; usage: remote-bash credentials delete HOST"),
    (["audit", "verify", "web-1", "--since", "2h"],
     "audit verify: unknown option --since; usage: remote-bash audit verify HOST"),
    (["exc", "web-1"],
     "unknown command 'exc'; did you mean 'exec'? usage: remote-bash [global options] COMMAND [options] ..."),
    (["fleet", "exe", "web"], "fleet: unknown action 'exe'; did you mean 'exec'? "
                              "usage: remote-bash fleet exec|run [options] PATTERN ..."),
    (["exec", "web-1", "uptime"], "exec: unexpected argument 'uptime' (the command goes after '--'); "
                                  "usage: remote-bash exec [options] [HOST] -- COMMAND..."),
    (["exec", "--timeout", "soon", "web-1", "--", "true"], "exec: argument --timeout: 'soon' is not a number of "
                                                           "seconds; usage: remote-bash exec [options] [HOST] -- "
                                                           "COMMAND..."),
    (["hosts", "--", "web"], "hosts: takes nothing after '--'; see 'remote-bash hosts --help'"),
    (["--bogus", "hosts"], "unknown option --bogus; usage: remote-bash [global options] COMMAND [options] ..."),
])
def test_a_usage_error_names_the_command_and_its_usage(argv: list[str], expected: str) -> None:
    assert usage_error(argv) == expected


def _read(parser: argparse.ArgumentParser, words: list[str]) -> tuple[str, object]:
    try:
        return "options", vars(parser.parse_args(words))
    except _output._UsageError as exc:
        return "usage error", str(exc)
    except SystemExit as exc:
        return "exit", exc.code


@pytest.mark.parametrize("words", [
    ["exec", "web-1"], ["--inventory", "i.yaml", "--allow=web", "--debug", "exec", "--keep", "web-1"],
    ["--inventory=i.yaml", "fleet", "exec", "--forks", "3", "web"], ["fleet", "run", "web", "task", "--serial", "2"],
    ["fleet", "exe", "web"], ["fleet"], ["exec", "--workers", "3"], ["exc", "web-1"], ["--bogus", "hosts"],
    ["--inventory"], ["--inventory", "--debug", "exec"], ["--allow", "x"], [], ["hosts", "--json", "web"],
    ["audit", "show", "web-1", "--since", "2025-01-31T12:00:00+00:00"],
    ["audit", "key", "init", "--file", "k"], ["sandbox", "status"],
    ["credentials", "set", "web-1"], ["sessions", "stop", "--all"], ["mcp", "--http", "127.0.0.1:8080"],
    ["shell", "web-1", "--timeout", "0"], ["run", "--host", "h", "t", "--tools", "bash"], ["check", "--forks", "x"],
    ["exec", "--help"], ["fleet", "exec", "--help"], ["--help"], ["-h", "exec"], ["exec", "-h"],
])
def test_reading_only_the_named_command_gives_what_the_whole_grammar_gives(
        words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """The grammar is built for the command the words name alone (a plain command line reads faster):
    the options, the error line and the help are those of the whole grammar."""
    whole = (_read(_grammar._parser(), words), capsys.readouterr())
    only = (_read(_grammar._parser(_grammar._command_word(words)), words), capsys.readouterr())
    assert only == whole


def test_the_command_names_the_quick_reading_knows_are_the_grammars() -> None:
    top = next(a for a in _grammar._parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(top.choices) == _grammar._COMMANDS


def test_options_of_one_command_are_not_accepted_by_another() -> None:
    """Each leaf parser refuses every option that only some other leaf has."""
    own = {p.prog: {o for a in p._actions for o in a.option_strings} for p in leaves()}
    every = set().union(*own.values())
    checked = 0
    for prog, options in own.items():
        words = prog.split()[1:]
        parser = next(p for p in leaves() if p.prog == prog)
        required = [next(iter(a.choices)) if a.choices else "x" for a in parser._actions
                    if not a.option_strings and a.nargs is None]
        for option in sorted(every - options)[:6]:
            message = usage_error([*words, *required, option])
            assert message.startswith(f"{' '.join(words)}: unknown option {option}"), message
            checked += 1
    assert checked > 50


def test_a_usage_error_is_one_line_on_stderr_with_exit_2(tmp_path: Path) -> None:
    out = subprocess.run([*CLI, "exec", "--workers", "3", "x", "--", "true"], env=base_env(tmp_path),
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr == ("remote-bash exec: unknown option --workers; usage: remote-bash exec [options] [HOST] "
                          "-- COMMAND...\n")


# -- help ---------------------------------------------------------------------------------------------


def test_the_exit_status_table_is_at_the_top_once_and_each_command_lists_its_own() -> None:
    top = _grammar._parser().format_help()
    assert top.count("exit status:") == 1
    assert _output.EXIT_CODES in top
    for code in (1, 2, 124, 125, 126, 127, 130):
        assert re.search(rf"^  {code}\b", top, re.M), code
    helps = {p.prog: p.format_help() for p in leaves()}
    assert len(helps) >= 17
    for prog, text in helps.items():
        assert text.count("exit status:") == 1, prog
        assert "example:" in text, prog
        assert _output.EXIT_CODES not in text, prog
    codes = {prog: set(re.findall(r"^  (\d+|N) ", text.split("exit status:")[1], re.M))
             for prog, text in helps.items()}
    assert codes["remote-bash exec"] == {"N", "2", "124", "125", "126", "127", "130"}
    assert codes["remote-bash hosts"] == {"0", "2", "125", "127"}
    assert codes["remote-bash sandbox status"] == {"0", "3", "2", "125"}
    assert "124" not in codes["remote-bash audit verify"]
    assert codes["remote-bash fleet exec"] == {"0", "1", "2", "125", "127", "130"}


def test_help_is_printed_for_every_command_and_action(tmp_path: Path) -> None:
    out = subprocess.run([*CLI, "audit", "key", "--help"], env=base_env(tmp_path), capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0
    assert out.stdout.startswith("usage: remote-bash audit key init [--file FILE] [--store-readable]\n")
    assert "--file FILE" in out.stdout


# -- the shell's refusal of full-screen programs ----------------------------------------------------------


@pytest.mark.parametrize(("command", "program"), [
    ("vi /etc/hosts", "vi"), ("vim", "vim"), ("sudo -u root vim /etc/hosts", "vim"), ("/usr/bin/top", "top"),
    ("cd /etc && nano hosts", "nano"), ("FOO=1 env BAR=2 watch ls", "watch"), ("htop; echo done", "htop"),
    ("echo a | less", None), ("echo vi", None), ("top -b -n 1", None), ("top -bn1", None),
    ("emacs --batch -l x.el", None), ("vim -es -c 'wq' file", None), ("man ls", None), ("less /etc/passwd", None),
    ("ls && (cd /tmp; vi x)", "vi"), ("nice -n 5 tmux", "tmux"), ("grep vi file", None), ("echo 'unclosed", None),
    ("timeout 5 watch ls", None), ("crontab -e", "crontab -e"), ("crontab -l", None),
])
def test_programs_that_wait_for_a_terminal_are_named(command: str, program: str | None) -> None:
    assert needs_terminal(command) == program


# -- what the README and hosts.example.yaml name exists ---------------------------------------------------


def _section(title: str) -> str:
    """The README's text under ``title``, up to the next heading of any level."""
    start = README.index(f"\n{title}\n")
    rest = README[start + len(title) + 2 :]
    end = re.search(r"^#{1,6} \S", rest, re.M)  # a heading, not a "#   comment" in a code block
    return rest[: end.start()] if end else rest


def test_every_option_the_readme_command_line_section_names_exists() -> None:
    text = _section("## The command line") + _section("### What reaches your terminal")
    text = re.sub(r"```console\n.*?```", "", text, flags=re.S)  # the examples show mistakes on purpose
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", text)) - {"--color"}  # ls --color: run on a host
    known = {o for p in parsers() for a in p._actions for o in a.option_strings}
    assert len(named) >= 12
    assert sorted(named - known) == []


def test_every_command_in_the_readme_table_parses() -> None:
    rows = re.findall(r"^\| `remote-bash ([^`]+)` \|", _section("## The command line"), re.M)
    assert len(rows) >= 12
    for row in rows:
        # A usage line as the table writes it, made concrete: one choice of each a|b, optional parts kept.
        words = row.replace("\\|", "|").replace('"task"', "task").replace("[", "").replace("]", "").split()
        words = [w.split("|")[0] for w in words]
        concrete = [{"HOST": "web-1", "PATTERN": "web", "NAME": "web-1", "COMMAND": "uptime", "F": "key",
                     "PATH": "x.yaml", "127.0.0.1:PORT": "127.0.0.1:8765"}.get(w, w) for w in words]
        args = _grammar.parse(concrete)
        assert args.handler, row


def test_the_readme_exit_codes_match_the_cli() -> None:
    text = _section("## The command line")
    paragraph = text[text.index("Exit codes:") :].split("\n\n")[0]
    for code in (_output.EXIT_FAILED, _output.EXIT_USAGE, _output.EXIT_TIMEOUT, _output.EXIT_ERROR,
                 _output.EXIT_REFUSED, _output.EXIT_NOT_ALLOWED, _output.EXIT_INTERRUPTED):
        assert f"`{code}`" in paragraph, code


def test_hosts_example_loads_and_names_only_what_exists() -> None:
    path = ROOT / "hosts.example.yaml"
    inventory = load_inventory(path)
    assert set(inventory.hosts) == {"bastion", "web-1", "web-2", "db-1"}
    assert inventory.hosts["web-1"].jump == ["bastion"]
    assert inventory.groups["datacenter"] == ["db-1", "web-1", "web-2"]
    assert [h.name for h in inventory.select("web:&production")] == ["web-2"]
    text = path.read_text()
    known = {o for p in parsers() for a in p._actions for o in a.option_strings}
    assert sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", text)) - known) == []
    commands = {p.prog.split()[1] for p in leaves()}
    named = set(re.findall(r"remote-bash ([a-z]+)", text)) | set(re.findall(r", ([a-z]+) PATTERN", text))
    assert named and named <= commands


def test_the_readme_usage_error_examples_are_what_the_cli_prints(tmp_path: Path) -> None:
    block = _section("## The command line").split("```console\n")[1].split("```")[0]
    pairs = re.findall(r"^\$ (remote-bash .+)\n(.+)$", block, re.M)
    assert len(pairs) == 2
    env = base_env(tmp_path)
    inventory = Path(env["XDG_CONFIG_HOME"]) / "remote-bash" / "hosts.yaml"
    inventory.parent.mkdir(parents=True)
    inventory.write_text("hosts:\n  web-1:\n    hostname: 192.0.2.1\n")  # never connected: TEST-NET-1
    for command, expected in pairs:
        out = subprocess.run([*CLI, *command.split()[1:]], env=env, capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL)
        assert out.returncode in (2, 127), out.stderr
        assert out.stderr.replace(str(inventory), "/home/me/.config/remote-bash/hosts.yaml") == expected + "\n"
    assert not (Path(env["XDG_STATE_HOME"]) / "remote-bash" / "audit").exists()


def test_the_readme_sample_audit_record_is_of_the_command_shown_first() -> None:
    from remote_bash.redact import Redactor

    session = _section("## A session, as a user sees it")
    command = re.search(r"^\$ remote-bash exec -- '(.+)'$", session, re.M)
    assert command is not None
    audit = _section("## The audit log")
    record = json.loads(audit.split("```json\n")[1].split("```")[0])
    assert record["event"] == "exec.start"
    assert record["command"] == Redactor().redact(command[1])
    shown = audit[audit.index("$ remote-bash audit show sandbox") :]
    assert f"exec.start     {record['session_id'][:8]}" in shown
    assert record["command"] in shown


def test_every_remote_bash_command_line_the_readme_shows_parses() -> None:
    import shlex

    lines = re.findall(r"^\$ (remote-bash .*)$", README, re.M)
    assert len(lines) >= 15
    for line in lines:
        words = shlex.split(line, comments=True)
        for stop in ("&&", "|", "<", ">"):
            words = words[: words.index(stop)] if stop in words else words
        if "--workers" in words:  # the README's example of a usage error
            assert usage_error(words[1:]).startswith("exec: unknown option --workers")
            continue
        assert _grammar.parse(words[1:]).handler, line
