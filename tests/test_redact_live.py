"""Redaction against real sshd: the capture's head/tail cut, the live stream's chunk boundaries,
and secrets in the command text everywhere a command is shown or stored (the CLI as a user runs it,
and ``run`` against the scripted Messages endpoint)."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path

import pytest

from remote_bash.fleet import FleetPool, SessionFactory
from remote_bash.inventory import Inventory
from remote_bash.models import Host
from remote_bash.redact import Redactor
from remote_bash.session import RemoteBashSession

from .messages_server import MessagesServer, Reply, text, tool_use
from .sshd import TestHosts
from .test_cli import audit_records, base_env, cli, host_entry, write_inventory

KEY = "AKIAIOSFODNN7EXAMPLE"
PASSWORD = "hunter2hunter2"
"""A value masked as ``password=`` assignment in commands and output."""
ANSI = "\\033[0m"
"""A colour reset: cleaning strips it, so many of them shrink the capture's head or tail to little."""


def parts(secret: str, size: int = 6) -> list[str]:
    """Every piece of ``secret`` of ``size`` characters: none may be shown."""
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


@pytest.fixture(scope="module")
def redact_host(hosts: TestHosts) -> Host:
    return hosts.start("redact-a").model_copy(update={"output_limit": 1000})


# -- the capture's head/tail cut ------------------------------------------------------------------


async def test_a_secret_straddling_the_head_cut_is_not_shown_in_part(redact_host: Host) -> None:
    # The capture keeps 2048 bytes at each end; 500 colour codes (2000 bytes) clean to nothing, so
    # the key that the capture's cut falls into would be in the kept text.
    capture = 2 * max(redact_host.output_limit, 1024)
    lead = "x\\n" + ANSI * 500
    split = capture - 2 - 4 * 500 - 8  # 8 characters of the key before the cut
    assert split > 0
    command = f"printf '{lead}{'y' * (split - 1)} {KEY} more\\n'; seq 1 3000"
    async with RemoteBashSession(redact_host) as session:
        result = await session.run(command, timeout=30)
    assert result.truncated
    head = result.output.split("[... ")[0]
    assert head.startswith("x\n")
    for piece in parts(KEY, 4):
        assert piece not in result.output, result.output[:300]


async def test_a_secret_straddling_the_tail_cut_is_not_shown_in_part(redact_host: Host) -> None:
    capture = 2 * max(redact_host.output_limit, 1024)
    # The capture's tail (its last 2048 bytes) starts inside the password: its keyword is cut away.
    pad = capture - len(PASSWORD[6:]) - len(" end\n") - 4 * 500 - len("last\n")
    assert pad > 0
    command = f"seq 1 3000; printf 'password={PASSWORD} end\\n{ANSI * 500}{'z' * pad}last\\n'"
    async with RemoteBashSession(redact_host) as session:
        result = await session.run(command, timeout=30)
    assert result.truncated
    assert result.output.endswith("last\n")
    for piece in parts(PASSWORD):
        assert piece not in result.output, result.output[-300:]


# -- the live stream ----------------------------------------------------------------------------------


async def test_a_secret_split_across_reads_is_masked_in_the_live_output(redact_host: Host) -> None:
    chunks: list[str] = []
    # The sleep makes the two halves two reads, two chunks of the live stream.
    command = f"printf 'a {KEY[:9]}'; sleep 0.3; printf '{KEY[9:]} b\\npassword=hun'; sleep 0.3; printf 'ter2x\\n'"
    async with RemoteBashSession(redact_host) as session:
        result = await session.run(command, timeout=30, on_output=chunks.append)
    live = "".join(chunks)
    assert live == result.output == "a [REDACTED:aws-access-key-id] b\npassword=[REDACTED:password]\n"


async def test_a_quoted_secret_in_a_line_longer_than_any_bound_never_shows(redact_host: Host) -> None:
    # A 160 KB line: a long run of words, then a quoted password of 110 KB, then more words.
    chunks: list[str] = []
    command = ("yes 'word' | head -n 5000 | tr '\\n' ' '; printf 'password=\"'; "
               "yes 'hiddenpart' | head -n 10000 | tr '\\n' ' '; printf '\" tail\\n'")
    async with RemoteBashSession(redact_host) as session:
        result = await session.run(command, timeout=60, on_output=chunks.append)
    live = "".join(chunks)
    assert "hiddenpart" not in live
    assert "hiddenpart" not in result.output
    assert live.count("word ") == 5000
    assert live.endswith('password="[REDACTED:password]" tail\n')
    assert len(chunks) > 2  # it did come in pieces


async def test_a_carriage_return_cannot_hide_the_key_of_a_shown_value(redact_host: Host) -> None:
    # Collapsing "password\\r=x" to its last state would show "=x" with no key left to find.
    async with RemoteBashSession(redact_host) as session:
        result = await session.run(f"printf 'password\\r={PASSWORD}\\nMYSQL_PWD=\\r{PASSWORD}\\n'", timeout=30)
    assert result.output == "=[REDACTED:password]\n[REDACTED:password]\n"


async def test_a_carriage_return_cannot_hide_the_key_in_the_live_output(redact_host: Host) -> None:
    # One read holds key, carriage return and value: the live stream masks the line before it
    # collapses it, as the result does; and so when the key and the value come in two reads.
    chunks: list[str] = []
    command = (f"printf 'password\\r={PASSWORD}\\nx token:\\r{PASSWORD}\\npassword \\r= {PASSWORD}\\n'; "
               f"printf 'MYSQL_PWD\\r'; sleep 0.3; printf '={PASSWORD}\\n'")
    async with RemoteBashSession(redact_host) as session:
        result = await session.run(command, timeout=30, on_output=chunks.append)
    live = "".join(chunks)
    assert PASSWORD not in live
    assert live == result.output == ("=[REDACTED:password]\n[REDACTED:token]\n= [REDACTED:password]\n"
                                     "=[REDACTED:password]\n")


async def test_a_carriage_return_inside_a_value_cannot_show_its_rest(redact_host: Host) -> None:
    # "password=hunt\rer2" collapses to "er2": the value goes on past the carriage return, in the
    # result and in the live output alike.
    chunks: list[str] = []
    command = f"printf 'password={PASSWORD[:4]}\\r{PASSWORD[4:]}\\n'"
    async with RemoteBashSession(redact_host) as session:
        result = await session.run(command, timeout=30, on_output=chunks.append)
    assert "".join(chunks) == result.output == "password=[REDACTED:password]\n"


async def test_a_value_beside_its_name_on_the_next_line_is_masked_when_it_comes_in_a_later_read(
        redact_host: Host) -> None:
    chunks: list[str] = []
    command = f"printf 'env:\\n- name: DB_PASSWORD\\n'; sleep 0.3; printf '  value: {PASSWORD}\\n- name: X\\n'"
    async with RemoteBashSession(redact_host) as session:
        result = await session.run(command, timeout=30, on_output=chunks.append)
    assert "".join(chunks) == result.output == "env:\n- name: DB_PASSWORD\n  value: [REDACTED:password]\n- name: X\n"


async def test_the_forms_of_the_re_attack_are_masked_in_the_result_and_the_live_output(redact_host: Host) -> None:
    """What a re-attack of the masking got past it, printed by a real shell: an argv item with a string
    prefix or blanks around its comma, dotted keys and names, a Unicode blank between JSON members (a
    no-break space, printed from its UTF-8 bytes), a pair as Python prints a dict, dot segments in a
    webhook's path; and an LLM's token counts, which stay."""
    lines = [
        ("[b'false', b'--password', b'{pw}']", "[b'false', b'--password', b'[REDACTED:password]']"),
        ('[ "--password" , "{pw}" ]', '[ "--password" , "[REDACTED:password]" ]'),
        ('["--token",\\302\\240"{pw}"]', '["--token",\u00a0"[REDACTED:token]"]'),
        ("spring.datasource.password.prod: {pw}", "spring.datasource.password.prod: [REDACTED:password]"),
        ('{{"name": "db.password.prod", "value": "{pw}"}}',
         '{"name": "db.password.prod", "value": "[REDACTED:password]"}'),
        ("<db.password.prod>{pw}</db.password.prod>", "<db.password.prod>[REDACTED:password]</db.password.prod>"),
        ('{{"name": "DB_PASSWORD", "value":\\302\\240"{pw}"}}',
         '{"name": "DB_PASSWORD", "value":\u00a0"[REDACTED:password]"}'),
        ("{{'name': 'DB_PASSWORD', 'value': '{pw}'}}", "{'name': 'DB_PASSWORD', 'value': '[REDACTED:password]'}"),
        ("https://hooks.slack.com/x/../services/T0/B0/{pw}", "https://hooks.slack.com/x/../services/[REDACTED:slack-webhook]"),
        ("tokens: 1,234 in, 0 cached", "tokens: 1,234 in, 0 cached"),
    ]
    chunks: list[str] = []
    command = "; ".join(f"printf '%b\\n' {shlex.quote(line.format(pw=PASSWORD))}; sleep 0.05" for line, _ in lines)
    async with RemoteBashSession(redact_host) as session:
        result = await session.run(command, timeout=30, on_output=chunks.append)
    assert PASSWORD not in result.output
    assert "".join(chunks) == result.output == "".join(f"{shown}\n" for _, shown in lines)


async def test_the_forms_of_the_third_attack_are_masked_in_the_result_and_the_live_output(redact_host: Host) -> None:
    """What an outside attack got past the masking, printed by a real shell: Unicode blanks that are no
    no-break space, a masked value masked again by the live view (which must change nothing, and keep
    the separator), numbered keys, JSON inside a JSON string, a Python dict's string prefixes, and an
    option spelt with underscores."""
    lines = [
        ('"password":\u202f"{pw}"', '"password":\u202f"[REDACTED:password]"'),
        ("['--password',\u202f'{pw}']", "['--password',\u202f'[REDACTED:password]']"),
        ("password\u205f: {pw}", "password\u205f: [REDACTED:password]"),
        ("db.password.prod:\u1680{pw}", "db.password.prod:\u1680[REDACTED:password]"),
        ("password :\u202f{pw}", "password :\u202f[REDACTED:password]"),
        ("password:\u00a0{pw}", "password:\u00a0[REDACTED:password]"),
        ("password: !!str {pw}", "password: !!str [REDACTED:password]"),
        ("DB_PASSWORD2={pw}", "DB_PASSWORD2=[REDACTED:password]"),
        ("<password1>{pw}</password1>", "<password1>[REDACTED:password]</password1>"),
        ('"SecretString": "{{\\"username\\":\\"admin\\",\\"password\\":\\"{pw}\\"}}",',
         '"SecretString": "{\\"username\\":\\"admin\\",\\"password\\":\\"[REDACTED:password]\\"}",'),
        ("{{u'name': u'DB_PASSWORD', u'value': u'{pw}'}}",
         "{u'name': u'DB_PASSWORD', u'value': u'[REDACTED:password]'}"),
        ("{{'/prod/db/password': b'{pw}'}}", "{'/prod/db/password': b'[REDACTED:password]'}"),
        ("--client_secret {pw}", "--client_secret [REDACTED:secret]"),
    ]
    chunks: list[str] = []
    command = "; ".join(f"printf '%s\\n' {shlex.quote(line.format(pw=PASSWORD))}; sleep 0.05" for line, _ in lines)
    async with RemoteBashSession(redact_host) as session:
        result = await session.run(command, timeout=30, on_output=chunks.append)
    assert PASSWORD not in result.output
    assert "".join(chunks) == result.output == "".join(f"{shown}\n" for _, shown in lines)


async def test_a_yaml_value_on_the_next_line_is_masked_when_it_comes_in_a_later_read(redact_host: Host) -> None:
    chunks: list[str] = []
    command = f"printf 'db:\\n  password:\\n'; sleep 0.3; printf '    {PASSWORD[:5]}'; sleep 0.3; " \
              f"printf '{PASSWORD[5:]}\\n  user: app\\n'"
    async with RemoteBashSession(redact_host) as session:
        result = await session.run(command, timeout=30, on_output=chunks.append)
    assert "".join(chunks) == result.output == "db:\n  password:\n    [REDACTED:password]\n  user: app\n"
    assert len(chunks) >= 2


async def test_a_fleet_command_is_masked_with_each_hosts_known_secrets(redact_host: Host) -> None:
    # The secrets a host's session knows (its keyring password, say) mask the command the fleet
    # result shows and stores, as they mask that host's own audit records.
    b = redact_host.model_copy(update={"name": "redact-k"})
    inventory = Inventory(hosts={redact_host.name: redact_host, b.name: b}, groups={})
    known = {redact_host.name: "k3yring-a-secret", b.name: "k3yring-b-secret"}

    def factory(host: Host) -> RemoteBashSession:
        return RemoteBashSession(host, audit=False, redactor=Redactor(host.redact, [known[host.name]]))

    command = "echo k3yring-a-secret k3yring-b-secret"
    async with FleetPool(inventory, session_factory=factory) as pool:
        result = await pool.run([redact_host, b], command)
    assert result.command == "echo [REDACTED:known-secret] [REDACTED:known-secret]"
    assert [r.status for r in result.results] == ["ok", "ok"]



async def test_a_fleet_command_masks_a_known_secret_with_blanks_whole(redact_host: Host) -> None:
    """A keyword's rule would take the first word of such a secret: the sessions' known secrets are
    applied first, so the rest of it goes with it."""
    inventory = Inventory(hosts={redact_host.name: redact_host}, groups={})
    secret = "correct horse battery staple"

    def factory(host: Host) -> RemoteBashSession:
        return RemoteBashSession(host, audit=False, redactor=Redactor(host.redact, [secret]))

    command = f"true --password {secret}; echo \"token={secret}\""
    async with FleetPool(inventory, session_factory=factory) as pool:
        result = await pool.run([redact_host], command)
    # A bare option value runs to a blank (ps shows a process's arguments unquoted: a ";" may be the
    # password's own), so the ";" after it goes under the mask too.
    assert result.command == "true --password [REDACTED:password] echo \"token=[REDACTED:token]\""


# -- the command text, through the CLI ---------------------------------------------------------------


@pytest.fixture
def env(tmp_path: Path, redact_host: Host) -> dict[str, str]:
    inventory = write_inventory(tmp_path / "hosts.yaml", {
        "redact-a": host_entry(redact_host, redact=[r"corp-[0-9]{6}"]),
        "redact-b": host_entry(redact_host),
    })
    return {**base_env(tmp_path), "REMOTE_BASH_INVENTORY": str(inventory)}


def test_exec_masks_the_command_in_json_and_the_audit_log_and_streams_masked(env: dict[str, str]) -> None:
    command = f"echo start; export DB_PASSWORD={PASSWORD}; echo id corp-123456; printf '{KEY[:10]}'; sleep 0.3; " \
              f"echo '{KEY[10:]} done'"
    out = cli(env, "exec", "redact-a", "--", command)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "start\nid [REDACTED:custom]\n[REDACTED:aws-access-key-id] done\n"
    as_json = cli(env, "exec", "--json", "redact-a", "--", command)
    record = json.loads(as_json.stdout)
    assert "DB_PASSWORD=[REDACTED:password]" in record["command"]
    assert "echo id [REDACTED:custom]" in record["command"]
    audit = json.dumps(audit_records(env, "redact-a"))
    assert "[REDACTED:password]" in audit
    for secret in (PASSWORD, "corp-123456"):
        assert secret not in as_json.stdout
        assert secret not in audit


def test_a_command_continued_between_an_option_and_its_value_is_masked(env: dict[str, str],
                                                                       tmp_path: Path) -> None:
    """bash joins a backslash-newline before it reads the words: so does the masking of a command."""
    command = f"true mysqldump --password \\\n  {PASSWORD} db; curl -u \\\n bob:{PASSWORD}x -V >/dev/null || :"
    as_json = cli(env, "exec", "--json", "redact-a", "--", command)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["command"] == (
        "true mysqldump --password   [REDACTED:password] db; curl -u  bob:[REDACTED:password] -V >/dev/null || :")
    outdir = tmp_path / "out"
    fleet = cli(env, "fleet", "exec", "redact-a", "--json", "--output-dir", str(outdir), "--", command)
    assert fleet.returncode == 0, fleet.stderr
    files = [p.read_text() for p in outdir.iterdir()]
    for shown in (as_json.stdout, fleet.stdout, *files, json.dumps(audit_records(env, "redact-a"))):
        assert PASSWORD not in shown
    plain = cli(env, "exec", "--json", "redact-a", "--", "echo a \\\n b")  # nothing to mask: kept as sent
    assert json.loads(plain.stdout)["command"] == "echo a \\\n b"


def test_exec_masks_a_line_before_collapsing_its_carriage_returns(env: dict[str, str]) -> None:
    out = cli(env, "exec", "redact-a", "--", f"printf 'password\\r={PASSWORD}\\n'")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "=[REDACTED:password]\n"


def test_fleet_masks_the_command_in_json_output_dir_and_recap(env: dict[str, str], tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    command = f"mysql -u root -p{PASSWORD} -e 'select 1' 2>/dev/null; echo ran; : corp-654321"
    out = cli(env, "fleet", "exec", "redact-a,redact-b", "--json", "--output-dir", str(outdir), "--", command)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["command"] == "mysql -u root -p[REDACTED:password] -e 'select 1' 2>/dev/null; " \
                                "echo ran; : [REDACTED:custom]"
    files = {p.name: p.read_text() for p in outdir.iterdir()}
    assert sorted(files) == ["redact-a.txt", "redact-b.txt"]
    assert "# command: mysql -u root -p[REDACTED:password]" in files["redact-a.txt"]
    recap = cli(env, "fleet", "exec", "redact-a,redact-b", "--", command)
    for shown in (out.stdout, recap.stdout, recap.stderr, *files.values()):
        assert PASSWORD not in shown
        assert "corp-654321" not in shown


XML_COMMAND = ("printf '<password >LEAK80</password>\\n<password>\\n  LEAK81\\n</password>\\n"
               "<password\\t>LEAK82</password>\\n<password\\n id=\"1\">LEAK83</password>\\n'; "
               "printf '<Password><![CDATA[\\n'; sleep 0.3; printf 'LEAK84]]></Password>\\n'")
XML_OUTPUT = ("<password >[REDACTED:password]</password>\n<password>\n  [REDACTED:password]\n</password>\n"
              "<password\t>[REDACTED:password]</password>\n<password\n id=\"1\">[REDACTED:password]</password>\n"
              "<Password><![CDATA[\n[REDACTED:password]]]></Password>\n")


def test_an_elements_text_on_a_later_line_is_masked_in_the_command_output_and_audit(
        env: dict[str, str], tmp_path: Path) -> None:
    live = cli(env, "exec", "redact-a", "--", XML_COMMAND)
    assert live.returncode == 0, live.stderr
    assert live.stdout == XML_OUTPUT  # streamed: the CDATA's text came in a later read
    as_json = cli(env, "exec", "--json", "redact-a", "--", XML_COMMAND)
    record = json.loads(as_json.stdout)
    assert record["output"] == XML_OUTPUT
    assert "<password >[REDACTED:password]</password>" in record["command"]
    outdir = tmp_path / "xml"
    fleet = cli(env, "fleet", "exec", "redact-a", "--output-dir", str(outdir), "--", XML_COMMAND)
    assert fleet.returncode == 0, fleet.stderr
    header = (outdir / "redact-a.txt").read_text()
    assert "# command: printf '<password >[REDACTED:password]</password>" in header
    ends = [r for r in audit_records(env, "redact-a") if r.get("event") == "exec.end"]
    assert ends and all(r["output_head"].startswith("<password >[REDACTED:password]") for r in ends)
    for shown in (live.stdout, as_json.stdout, header, json.dumps(audit_records(env, "redact-a"))):
        for leak in ("LEAK80", "LEAK81", "LEAK82", "LEAK83", "LEAK84"):
            assert leak not in shown


def test_fleet_masks_each_hosts_output_with_every_hosts_patterns(env: dict[str, str], tmp_path: Path,
                                                                  redact_host: Host) -> None:
    # redact-b has no pattern of its own: the custom secret redact-a declares must not show in its output.
    out = cli(env, "fleet", "exec", "redact-a,redact-b", "--json", "--", "echo id corp-777777")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert [r["output"] for r in result["results"]] == ["id [REDACTED:custom]\n"] * 2
    recap = cli(env, "fleet", "exec", "redact-a,redact-b", "--", "echo id corp-777777")
    assert "corp-777777" not in recap.stdout + recap.stderr
    # The library's own factory does the same for every host of the inventory.
    b = redact_host.model_copy(update={"name": "redact-n"})
    a = redact_host.model_copy(update={"name": "redact-p", "redact": [r"corp-[0-9]{6}"]})
    inventory = Inventory(hosts={a.name: a, b.name: b}, groups={})

    async def both() -> list[str]:
        async with FleetPool(inventory, session_factory=SessionFactory(inventory, audit=False, gate=False)) as pool:
            ran = await pool.run([a, b], "echo id corp-888888")
        return [r.output for r in ran.results]

    assert asyncio.run(both()) == ["id [REDACTED:custom]\n"] * 2


def test_run_masks_commands_in_the_live_view_json_events_and_transcript(env: dict[str, str]) -> None:
    command = f"export API_KEY={PASSWORD}; echo 'password: {PASSWORD}'; true --password \\\n RunC0ntPw"
    script = [
        Reply([text(f"Setting password={PASSWORD} now."), tool_use({"command": command}, id="toolu_r1")]),
        Reply([text("Done.")]),
        Reply([tool_use({"command": command}, id="toolu_r2")]),
        Reply([text(f"Done again: token: {PASSWORD}")]),
    ]
    with MessagesServer(script) as server:
        run_env = {**env, "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test-key"}
        live = cli(run_env, "run", "--host", "redact-a", f"set API_KEY={PASSWORD} in the shell")
        as_json = cli(run_env, "run", "--json", "--host", "redact-a", "again")
    assert live.returncode == 0, live.stderr
    # A value after "password: " runs over its words, quotes included, up to the ";".
    assert "$ export API_KEY=[REDACTED:api-key]; echo 'password: [REDACTED:password]; true" in live.stdout
    transcripts = list(Path(env["XDG_STATE_HOME"]).rglob("*.jsonl"))
    transcript_text = "".join(p.read_text() for p in transcripts if "transcripts" in str(p))
    assert "[REDACTED:api-key]" in transcript_text
    events = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert any(e["event"] == "command" and "[REDACTED:api-key]" in e["command"] for e in events)
    # Claude's own text is masked too, in the live view and in the JSON events.
    assert "Setting password=[REDACTED:password] now." in live.stdout
    assert "".join(e.get("text", "") for e in events if e["event"] == "text") == "Done again: token: [REDACTED:token]"
    for shown in (live.stdout, live.stderr, as_json.stdout, transcript_text,
                  json.dumps(audit_records(env, "redact-a"))):
        assert PASSWORD not in shown
        assert "RunC0ntPw" not in shown  # a continued line is masked as joined, in the transcript too
