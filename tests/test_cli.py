"""The ``remote-bash`` command line, run as a user runs it: a subprocess against real sshd hosts.

Every test gets its own HOME, XDG directories, audit directory and keyring file under tmp_path,
and an inventory (REMOTE_BASH_INVENTORY) listing the fixture hosts it needs.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from keyrings.alt.file import PlaintextKeyring

from remote_bash.models import Host

from .messages_server import MessagesServer, Reply, text, tool_use
from .sshd import TestHosts, processes_with
from .waiting import wait_until

CLI = [sys.executable, "-m", "remote_bash.cli"]


def base_env(tmp_path: Path) -> dict[str, str]:
    """A clean environment for the CLI: home, config, state and keyring all under tmp_path."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "REMOTE_BASH_", "XDG_", "PYTHON_KEYRING"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_STATE_HOME=str(home / ".state"),
               XDG_DATA_HOME=str(home / ".data"), PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring")
    return env


def host_entry(host: Host, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"hostname": host.hostname, "port": host.port, "user": host.user,
                             "identity_file": str(host.identity_file), "known_hosts": str(host.known_hosts),
                             "credential": host.credential}
    entry.update(extra)
    return entry


def write_inventory(path: Path, hosts: dict[str, dict[str, Any]],
                    groups: dict[str, Any] | None = None) -> Path:
    doc: dict[str, Any] = {"hosts": hosts}
    if groups:
        doc["groups"] = groups
    path.write_text(yaml.safe_dump(doc))
    return path


def cli(env: dict[str, str], *args: str, stdin: str | None = None, timeout: float = 60,
        **popen: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, input=stdin, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL if stdin is None else None, **popen)


def audit_records(env: dict[str, str], host: str) -> list[dict[str, Any]]:
    out = cli(env, "audit", "show", "--json", host)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.fixture(scope="module")
def pair(hosts: TestHosts) -> tuple[Host, Host]:
    return hosts.start("cli-a"), hosts.start("cli-b", labels={"role": "db"})


@pytest.fixture
def env(tmp_path: Path, pair: tuple[Host, Host]) -> dict[str, str]:
    a, b = pair
    inventory = write_inventory(tmp_path / "hosts.yaml", {
        "cli-a": host_entry(a, labels={"role": "web"}),
        "cli-b": host_entry(b, labels={"role": "db"}),
        "guarded": host_entry(a, policy={"deny": [r"\btouch\b"]}),
    }, groups={"web": {"hosts": ["cli-a"]}})
    return {**base_env(tmp_path), "REMOTE_BASH_INVENTORY": str(inventory)}


# -- exec ----------------------------------------------------------------------------------------


def test_exec_streams_output_and_exits_with_the_command_status(env: dict[str, str]) -> None:
    out = cli(env, "exec", "cli-a", "--", "echo out; echo err >&2; exit 3")
    assert out.returncode == 3
    assert out.stdout == "out\nerr\n"
    assert out.stderr == ""

    words = cli(env, "exec", "cli-a", "--", "echo", "hello", "world")
    assert (words.returncode, words.stdout) == (0, "hello world\n")

    as_json = cli(env, "exec", "--json", "cli-b", "--", "printf 'a\\nb\\n'; false")
    assert as_json.returncode == 1
    record = json.loads(as_json.stdout)
    assert (record["host"], record["output"], record["exit_code"]) == ("cli-b", "a\nb\n", 1)


def test_exec_timeout_exits_124_and_kills_the_command(env: dict[str, str], hosts: TestHosts) -> None:
    marker = str(uuid.uuid4().int)[:9]
    started = time.monotonic()
    out = cli(env, "exec", "--timeout", "1", "cli-a", "--", f"echo begun; sleep 77.{marker}")
    assert out.returncode == 124
    assert time.monotonic() - started < 20
    assert out.stdout == "begun\n"
    assert len(out.stderr.splitlines()) == 1
    assert "did not finish within 1 s" in out.stderr and "shell went with it" not in out.stderr
    assert processes_with(f"sleep 77.{marker}", hosts.user) == []


def test_exec_timeout_inside_a_function_says_the_shell_went_with_it(env: dict[str, str]) -> None:
    out = cli(env, "exec", "--timeout", "1", "cli-a", "--", "f() { sleep 30; }; f; echo REST")
    assert out.returncode == 124 and "REST" not in out.stdout
    assert "did not finish within 1 s" in out.stderr and "the shell went with it" in out.stderr


def test_policy_refusal_exits_126_and_nothing_runs(env: dict[str, str], tmp_path: Path) -> None:
    marker = Path(f"/tmp/rb-cli-policy-{uuid.uuid4().hex}")
    out = cli(env, "exec", "guarded", "--", f"touch {marker}")
    assert out.returncode == 126
    assert len(out.stderr.splitlines()) == 1
    assert "touch" in out.stderr
    assert not marker.exists()
    events = [r["event"] for r in audit_records(env, "guarded")]
    assert events == ["policy.denied"]  # no connection, no exec.start


@pytest.mark.parametrize("words", [
    ["exec", "cli-aa", "--", "true"], ["exec", "--keep", "cli-aa", "--", "true"], ["shell", "cli-aa"],
    ["run", "--host", "cli-aa", "task"], ["check", "cli-aa"], ["fleet", "exec", "cli-aa", "--", "true"],
    ["fleet", "run", "cli-aa,cli-b", "task"], ["credentials", "set", "cli-aa"], ["audit", "show", "cli-aa"],
    ["audit", "verify", "cli-aa"],
])
def test_a_host_name_typo_gets_the_same_suggestion_and_writes_no_audit_file(env: dict[str, str],
                                                                             words: list[str]) -> None:
    audit_dir = Path(env["XDG_STATE_HOME"]) / "remote-bash" / "audit"
    cli(env, "exec", "cli-a", "--", "true")  # a real log, so the audit directory exists
    before = sorted(p.name for p in audit_dir.iterdir())
    out = cli({**env, "ANTHROPIC_API_KEY": "unused"}, *words,
              stdin="secret\n" if words[0] == "credentials" else None)
    assert out.returncode == (1 if words[0] == "audit" else 127), out.stderr
    assert out.stdout == ""
    assert len(out.stderr.splitlines()) == 1
    assert "'cli-aa'" in out.stderr
    assert "did you mean 'cli-a'" in out.stderr
    assert "Traceback" not in out.stderr
    assert sorted(p.name for p in audit_dir.iterdir()) == before  # no cli-aa.jsonl, no cli-aa.jsonl.lock


def test_an_unknown_host_is_refused_before_anything_is_connected(env: dict[str, str]) -> None:
    out = cli(env, "exec", "no-such-host", "--", "true")
    assert out.returncode == 127
    assert out.stdout == ""
    assert out.stderr.startswith("remote-bash: unknown host 'no-such-host': not in the inventory ")
    assert not list(Path(env["XDG_STATE_HOME"]).rglob("no-such-host*"))

    sandbox = cli({k: v for k, v in env.items() if k != "REMOTE_BASH_INVENTORY"}, "exec", "sandbx", "--", "true")
    assert sandbox.returncode == 127
    assert sandbox.stderr == ("remote-bash: unknown host 'sandbx': with no inventory configured, the only host is "
                              "'sandbox'; did you mean 'sandbox'?\n")


@pytest.mark.parametrize("pattern", ["", " "])
def test_an_empty_allow_pattern_is_a_usage_error_not_no_allowlist(env: dict[str, str], pattern: str) -> None:
    out = cli(env, "--allow", pattern, "exec", "cli-a", "--", "echo reached")
    assert out.returncode == 2
    assert out.stdout == ""
    assert len(out.stderr.splitlines()) == 1
    assert "allowlist pattern is empty" in out.stderr


@pytest.mark.parametrize("keep", [False, True], ids=["exec", "exec --keep"])
def test_an_end_the_audit_log_could_not_record_is_said_and_verify_names_it(env: dict[str, str], keep: bool) -> None:
    # The file size limit lets the start record (the command holds 6,000 characters) through, not
    # the end record (the command again, with the output): the command has run by then.
    big = "x" * 6000
    words = [*CLI, "exec", *(["--keep"] if keep else []), "cli-a", "--", f"echo ran; : {big}"]
    out = subprocess.run(["bash", "-c", 'ulimit -f 8; exec "$@"', "bash", *words], env=env, capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    if keep:
        cli(env, "sessions", "stop", "--all")
    assert (out.returncode, out.stdout) == (0, "ran\n"), out.stderr
    assert "the command ran, but its exec.end record is missing from the audit log" in out.stderr
    assert "remote-bash: cli-a: cannot write the audit log" in out.stderr
    verify = cli(env, "audit", "verify", "cli-a")
    assert verify.returncode != 0
    assert "has no exec.end, although its session went on" in verify.stdout + verify.stderr


def test_the_audit_names_the_account_not_what_user_says(env: dict[str, str]) -> None:
    import pwd

    assert cli({**env, "USER": "mallory", "LOGNAME": "mallory"}, "exec", "cli-a", "--", "true").returncode == 0
    start = [r for r in audit_records(env, "cli-a") if r["event"] == "exec.start"][-1]
    assert start["operator"] == pwd.getpwuid(os.getuid()).pw_name


def test_exec_never_loads_the_anthropic_sdk(env: dict[str, str]) -> None:
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "remote_bash.cli", "exec", "cli-a", "--",
                          "echo light"], env=env, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert out.stdout == "light\n"
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    assert "remote_bash.session" in imported
    assert not {name for name in imported if name.split(".")[0] in ("anthropic", "keyring", "httpx")}


def test_exec_needs_a_command_after_the_separator(env: dict[str, str]) -> None:
    out = cli(env, "exec", "cli-a")
    assert out.returncode == 2
    assert "--" in out.stderr
    assert len(out.stderr.splitlines()) == 1


def test_audit_write_failure_runs_nothing(env: dict[str, str]) -> None:
    """A file-size limit hits the audit log: SIGXFSZ is ignored, so it is an AuditError (125)."""
    marker = Path(f"/tmp/rb-cli-fsize-{uuid.uuid4().hex}")

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))

    out = cli(env, "exec", "cli-a", "--", f"touch {marker}", preexec_fn=small_files)
    assert out.returncode == 125, out.stderr
    assert "audit log" in out.stderr
    assert "not run" in out.stderr
    assert len(out.stderr.splitlines()) == 1
    assert not marker.exists()


def test_ctrl_c_kills_the_remote_command_and_exits_130(env: dict[str, str], hosts: TestHosts) -> None:
    marker = str(uuid.uuid4().int)[:9]
    # The second line pushes "started" past what the session holds back to look for its sentinel.
    command = f"echo started; echo {'.' * 80}; sleep 88.{marker}"
    proc = subprocess.Popen([*CLI, "exec", "cli-a", "--", command], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "started\n"
        wait_until(lambda: processes_with(f"sleep 88.{marker}", hosts.user), within=10, what="the command to start")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 130
    finally:
        proc.kill()
        proc.communicate()
    assert processes_with(f"sleep 88.{marker}", hosts.user) == []
    ends = [r for r in audit_records(env, "cli-a") if r["event"] == "exec.end" and marker in r["command"]]
    assert len(ends) == 1
    assert ends[0]["interrupted"] is True


# -- shell ---------------------------------------------------------------------------------------


def test_shell_reads_lines_from_stdin(env: dict[str, str]) -> None:
    script = ("cd /tmp\npwd\nfalse\n\nexport X=kept\necho $X\n:restart\necho ${X:-gone}\npwd\n"
              ":exit\necho never\n")
    out = cli(env, "shell", "cli-a", stdin=script)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:3] == ["/tmp", "kept", "gone"]
    assert lines[3] != "/tmp"
    assert "never" not in out.stdout
    assert "[exit 1]" in out.stderr
    assert "restarted" in out.stderr
    commands = [r["command"] for r in audit_records(env, "cli-a") if r["event"] == "exec.start"]
    assert commands == ["cd /tmp", "pwd", "false", "export X=kept", "echo $X", "echo ${X:-gone}", "pwd"]


def test_shell_ends_at_end_of_input_and_refuses_by_policy(env: dict[str, str]) -> None:
    out = cli(env, "shell", "guarded", stdin="touch /tmp/rb-never\necho fine\n")
    assert out.returncode == 0
    assert out.stdout == "fine\n"
    assert "refused" in out.stderr


# -- help, hosts, check -------------------------------------------------------------------------


def test_every_command_has_help_with_an_example(env: dict[str, str]) -> None:
    commands = [[], ["exec"], ["shell"], ["run"], ["hosts"], ["check"], ["credentials", "set"], ["audit", "show"],
                ["sandbox", "start"], ["fleet", "exec"], ["fleet", "run"], ["mcp"], ["sessions"]]
    procs = [subprocess.Popen([*CLI, *words, "--help"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for words in commands]
    for words, proc in zip(commands, procs, strict=True):
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, (words, stderr)
        assert "example" in stdout, words
        assert "remote-bash " in stdout.split("example", 1)[1], words
        assert stdout.count("exit status:") == 1, words
        assert " 2  " in stdout.split("exit status:")[1], words  # a usage error is possible everywhere


def test_hosts_table(env: dict[str, str], pair: tuple[Host, Host]) -> None:
    out = cli(env, "hosts")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["NAME", "ADDRESS", "USER", "GROUPS", "LABELS"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {"cli-a", "cli-b", "guarded"}
    assert rows["cli-a"][1:] == [pair[0].address, str(pair[0].user), "web", "role=web"]
    assert rows["cli-b"][3:] == ["-", "role=db"]

    only = cli(env, "hosts", "--json", "role=db")
    assert [h["name"] for h in json.loads(only.stdout)] == ["cli-b"]


def test_check_reports_each_host_and_fails_for_a_stopped_one(
    tmp_path: Path, pair: tuple[Host, Host], hosts: TestHosts
) -> None:
    down = hosts.start("cli-down")
    hosts.servers["cli-down"].stop()
    inventory = write_inventory(tmp_path / "hosts.yaml", {"cli-a": host_entry(pair[0]),
                                                          "cli-down": host_entry(down)})
    env = {**base_env(tmp_path), "REMOTE_BASH_INVENTORY": str(inventory)}
    out = cli(env, "check")
    assert out.returncode == 1
    lines = {line.split()[0]: line for line in out.stdout.splitlines()}
    assert set(lines) == {"cli-a", "cli-down"}
    assert lines["cli-a"].split()[1] == "ok"
    assert "bash 5" in lines["cli-a"]
    assert "SHA256:" in lines["cli-a"]
    pretty = next(line.split("=", 1)[1].strip('"') for line in Path("/etc/os-release").read_text().splitlines()
                  if line.startswith("PRETTY_NAME="))  # the test hosts are this machine
    assert f"{pretty} (linux" in lines["cli-a"]
    assert lines["cli-down"].split()[1] == "FAILED"
    assert "ConnectionRefused" in lines["cli-down"]

    report = {r["host"]: r for r in json.loads(cli(env, "check", "--json", "cli-a").stdout)}
    assert report["cli-a"]["ok"] is True
    assert report["cli-a"]["user"] == pair[0].user
    assert report["cli-a"]["distribution"] == pretty
    assert report["cli-a"]["address"] == pair[0].address


def test_check_shows_the_address_of_a_host_behind_a_jump_host(tmp_path: Path, pair: tuple[Host, Host]) -> None:
    inventory = write_inventory(tmp_path / "hosts.yaml", {"cli-a": host_entry(pair[0]),
                                                          "inner": host_entry(pair[1], jump=["cli-a"])})
    env = {**base_env(tmp_path), "REMOTE_BASH_INVENTORY": str(inventory)}
    out = cli(env, "check", "--json", "inner")
    assert out.returncode == 0, out.stderr
    (report,) = json.loads(out.stdout)
    assert report["address"] == f"{pair[1].address} via cli-a"
    table = cli(env, "check", "inner")
    assert f"@{pair[1].address} via cli-a " in table.stdout


# -- audit -------------------------------------------------------------------------------------


def test_audit_show_and_verify_detects_tampering(env: dict[str, str], tmp_path: Path) -> None:
    audit_dir = tmp_path / "audit"
    assert cli(env, "--audit-dir", str(audit_dir), "exec", "cli-b", "--", "echo audited-1").returncode == 0
    assert cli(env, "exec", "--audit-dir", str(audit_dir), "cli-b", "--", "echo audited-2").returncode == 0

    shown = cli(env, "audit", "show", "cli-b", "--audit-dir", str(audit_dir))
    assert shown.returncode == 0
    assert shown.stdout.splitlines()[0].split() == ["TIME", "(UTC)", "EVENT", "SESSION", "TOOL", "USE", "OUTCOME",
                                                    "COMMAND"]
    assert "exec.start" in shown.stdout
    assert "echo audited-2" in shown.stdout
    assert "exit=0" in shown.stdout
    records = [json.loads(x) for x in cli(env, "audit", "show", "--json", "cli-b", "--audit-dir",
                                          str(audit_dir)).stdout.splitlines()]
    first = records[0]["session_id"]
    one = cli(env, "audit", "show", "cli-b", "--session", first, "--audit-dir", str(audit_dir))
    assert "audited-1" in one.stdout
    assert "audited-2" not in one.stdout
    later = cli(env, "audit", "show", "cli-b", "--since", "2999-01-01T00:00:00Z",
                "--audit-dir", str(audit_dir))
    assert later.stdout == ""
    assert "no records of cli-b match" in later.stderr

    ok = cli(env, "audit", "verify", "cli-b", "--audit-dir", str(audit_dir))
    assert ok.returncode == 0
    assert "intact" in ok.stdout

    log = audit_dir / "cli-b.jsonl"
    log.write_text(log.read_text().replace("echo audited-1", "echo innocent"))
    bad = cli(env, "audit", "verify", "cli-b", "--audit-dir", str(audit_dir))
    assert bad.returncode == 1
    assert f"{log}:2:" in bad.stdout
    assert "altered" in bad.stdout

    for action in ("show", "verify"):
        missing = cli(env, "audit", action, "never-used", "--audit-dir", str(audit_dir))
        assert missing.returncode == 1
        assert "no audit log" in missing.stderr
        declared = cli(env, "audit", action, "cli-a", "--audit-dir", str(audit_dir))
        assert declared.returncode == 1
        assert "nothing has been run there yet" in declared.stderr


# -- credentials ---------------------------------------------------------------------------------


def test_credentials_set_and_delete(env: dict[str, str]) -> None:
    keyring = PlaintextKeyring()
    keyring.file_path = str(Path(env["XDG_DATA_HOME"]) / "python_keyring" / "keyring_pass.cfg")
    stored = cli(env, "credentials", "set", "cli-a", "--store-readable", stdin="pass-phrase-1\n")
    assert stored.returncode == 0, stored.stderr
    assert keyring.get_password("remote-bash", "cli-a") == "pass-phrase-1"

    deleted = cli(env, "credentials", "delete", "cli-a")
    assert deleted.returncode == 0
    assert keyring.get_password("remote-bash", "cli-a") is None
    again = cli(env, "credentials", "delete", "cli-a")
    assert again.returncode == 125
    assert "no secret is stored" in again.stderr

    typo = cli(env, "credentials", "set", "cli-aa", stdin="x\n")
    assert typo.returncode == 127
    assert "cli-a" in typo.stderr


# -- run -----------------------------------------------------------------------------------------


def test_run_without_an_api_key_says_how_to_set_one(env: dict[str, str]) -> None:
    out = cli(env, "run", "--host", "cli-a", "tidy up /tmp")
    assert out.returncode == 2
    assert out.stdout == ""
    assert len(out.stderr.splitlines()) == 1
    assert "ANTHROPIC_API_KEY" in out.stderr
    assert out.stderr.endswith("without a key this works: remote-bash exec cli-a -- uptime\n")
    for words in (["run", "tidy up /tmp"], ["run", "--host", "cli-aa", "tidy up"]):
        first = cli(env, *words)  # no host, or one the inventory does not know: its first host
        assert first.stderr.endswith("without a key this works: remote-bash exec cli-a -- uptime\n")
    fleet = cli(env, "fleet", "run", "web", "tidy up")
    assert fleet.stderr.endswith("without a key this works: remote-bash fleet exec web -- uptime\n")
    no_inventory = cli({k: v for k, v in env.items() if k != "REMOTE_BASH_INVENTORY"}, "run", "tidy up")
    assert no_inventory.stderr.endswith("without a key this works: remote-bash exec -- uname -a\n")


def test_run_shows_commands_output_and_cost(env: dict[str, str]) -> None:
    script = [
        Reply([text("Looking."), tool_use({"command": "seq 1 20; exit 0"}, id="toolu_cli1")]),
        Reply([text("There are 20 lines.")], usage={"input_tokens": 1000, "output_tokens": 50}),
    ]
    with MessagesServer(script) as server:
        run_env = {**env, "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test-key"}
        out = cli(run_env, "run", "--host", "cli-a", "--model", "claude-sonnet-5", "count lines")
        as_json = None
        server.add(Reply([tool_use({"command": "echo json-run"}, id="toolu_cli2")]), Reply([text("done")]))
        as_json = cli(run_env, "run", "--json", "--host", "cli-a", "again")
    assert out.returncode == 0, out.stderr
    assert "Looking." in out.stdout
    assert "$ seq 1 20; exit 0" in out.stdout
    assert "  1\n" in out.stdout
    assert "  6\n" in out.stdout
    assert "  7\n" not in out.stdout
    assert "14 more lines" in out.stdout
    assert "[exit 0," in out.stdout
    assert "There are 20 lines." in out.stdout
    assert "estimated cost $" in out.stderr
    assert "transcript:" in out.stderr

    events = [json.loads(line) for line in as_json.stdout.splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "outcome"
    assert "command" in kinds
    assert "result" in kinds
    assert any(e["event"] == "output" and "json-run" in e["text"] for e in events)
    assert events[-1]["stop_reason"] == "end_turn"
    ids = [r["tool_use_id"] for r in audit_records(env, "cli-a") if r["event"] == "exec.start"]
    assert {"toolu_cli1", "toolu_cli2"} <= set(ids)


def test_run_shows_a_bad_input_and_an_unknown_tool_as_they_were_sent(env: dict[str, str]) -> None:
    """A bad input is no restart, and a tool that is not the editor is not shown as an edit."""
    script = [
        Reply([tool_use({"command": 12345}, id="toolu_bad1"), tool_use({"command": "id"}, id="toolu_bad2",
                                                                        name="nosuchtool"),
               tool_use({"restart": True}, id="toolu_bad3")]),
        Reply([text("done")]),
    ]
    with MessagesServer(script) as server:
        run_env = {**env, "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test-key"}
        out = cli(run_env, "run", "--host", "cli-a", "look")
    assert out.returncode == 0, out.stderr
    assert '$ (input: {"command": 12345})' in out.stdout, out.stdout
    assert "nosuchtool: id" in out.stdout and "edit: id" not in out.stdout
    assert out.stdout.count("(restart the shell)") == 1, out.stdout


def test_run_says_where_the_lines_it_does_not_show_are(tmp_path: Path, pair: tuple[Host, Host]) -> None:
    """Lines past the first few are in the transcript only when the tool result kept them all."""
    inventory = write_inventory(tmp_path / "hosts.yaml", {"small": host_entry(pair[0], output_limit=200)})
    env = {**base_env(tmp_path), "REMOTE_BASH_INVENTORY": str(inventory)}
    script = [Reply([tool_use({"command": "seq 1 8"}, id="toolu_few")]),
              Reply([tool_use({"command": "seq 1 500"}, id="toolu_many")]), Reply([text("done")])]
    with MessagesServer(script) as server:
        out = cli({**env, "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test-key"}, "run", "count")
    assert out.returncode == 0, out.stderr
    assert "  ... 2 more lines (in the transcript)\n" in out.stdout
    assert "  ... 494 more lines (only the first and last reached Claude and the transcript)\n" in out.stdout
    assert "1 turn;" not in out.stderr and "3 turns;" in out.stderr


# -- fleet ---------------------------------------------------------------------------------------


def test_fleet_exec_recap_json_and_output_dir(env: dict[str, str], tmp_path: Path) -> None:
    out = cli(env, "fleet", "exec", "cli-a,cli-b", "--", "echo same")
    assert out.returncode == 0, out.stderr
    assert "2 hosts in" in out.stdout
    assert "same" in out.stdout
    one = cli(env, "fleet", "exec", "cli-a", "--", "true")
    assert "\n1 host in " in one.stdout

    outdir = tmp_path / "out"
    as_json = cli(env, "fleet", "exec", "all", "--json", "--output-dir", str(outdir), "--",
                  "echo x; touch /tmp/y")
    result = json.loads(as_json.stdout)
    statuses = {r["host"]: r["status"] for r in result["results"]}
    assert statuses == {"cli-a": "ok", "cli-b": "ok", "guarded": "refused"}
    assert as_json.returncode == result["exit_code"] == 1
    assert sorted(p.name for p in outdir.iterdir()) == ["cli-a.txt", "cli-b.txt", "guarded.txt"]

    allowed = cli(env, "--allow", "cli-b", "fleet", "exec", "cli-a,cli-b", "--json", "--", "true")
    statuses = {r["host"]: r["status"] for r in json.loads(allowed.stdout)["results"]}
    assert statuses == {"cli-a": "refused", "cli-b": "ok"}
    assert "host.denied" in [r["event"] for r in audit_records(env, "cli-a")]


def test_fleet_exec_a_shell_ended_with_status_0_is_ok_and_the_header_is_escaped(env: dict[str, str],
                                                                                  tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    out = cli(env, "fleet", "exec", "cli-a", "--output-dir", str(outdir), "--", "echo done; exit 0")
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert "# status: ok\n# exit: 0\n" in (outdir / "cli-a.txt").read_text()
    failed = cli(env, "fleet", "exec", "cli-a", "--json", "--", "exit 3")
    assert failed.returncode == 1 and json.loads(failed.stdout)["results"][0]["status"] == "failed"
    # A command whose text would repaint its own header line on a terminal (`cat` of the file).
    spoof = cli(env, "fleet", "exec", "cli-a", "--output-dir", str(outdir), "--",
                "echo safe; #\r\x1b[2Kecho harmless \u202e")
    assert spoof.returncode == 0, spoof.stderr
    text = (outdir / "cli-a.txt").read_text()
    assert "# command: echo safe; #\\x0d\\x1b[2Kecho harmless \\u202e\n" in text, text
    assert "\r" not in text and "\x1b" not in text


def test_every_command_handler_named_in_the_parser_exists() -> None:
    """The parser names its handlers as strings (so --help imports nothing heavy); check them all."""
    import re

    from remote_bash.cli import _app, _grammar

    source = Path(_grammar.__file__).read_text()
    names = set(re.findall(r'"(_[a-z]+:_cmd_[a-z_]+)"', source))
    assert len(names) >= 9
    for name in names:
        assert callable(_app._command(name)), name
