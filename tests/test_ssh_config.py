"""ssh_config read as OpenSSH reads it: Include, Match, % tokens, every IdentityFile, first value wins.

The files are written the way people write them: an Include of conf.d/*.conf at the top, wildcard
Host blocks, ProxyJump, several IdentityFile lines and a ``Host *`` block of defaults at the end.
"""

from __future__ import annotations

import getpass
import os
import socket
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remote_bash._ssh_config import read_ssh_config
from remote_bash.errors import InventoryError
from remote_bash.inventory import load_inventory, parse_ssh_config

CONFIG = """\
# ~/.ssh/config
Include conf.d/*.conf

Host bastion
    HostName bastion.example.com
    User admin

Host web-* !web-9
    HostName %h.internal.example.com
    ProxyJump bastion
    IdentityFile ~/.ssh/web_%r_ed25519

Host db-?
    Port 2222
    User deploy

Match originalhost db-1 user deploy
    IdentityFile ~/.ssh/db1

Host *
    User nobody
    ServerAliveInterval 30
    IdentityFile ~/.ssh/id_ed25519
    IdentityFile ~/.ssh/id_rsa
"""

CONF_D = {
    "10-legacy.conf": "Host legacy\n    HostName 192.0.2.10\n    Port 2200\n    User root\n",
    "20-web1.conf": "Host web-1\n    Port 2201\n",
    "README": "Host *\n    User from-readme\n",  # not *.conf: never read
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory with ~/.ssh/config and ~/.ssh/conf.d/, as ``~`` for the test."""
    home = tmp_path / "home"
    (home / ".ssh" / "conf.d").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(CONFIG)
    for name, text in CONF_D.items():
        (home / ".ssh" / "conf.d" / name).write_text(text)
    monkeypatch.setenv("HOME", str(home))
    return home


def read(home: Path, alias: str, **kwargs: object) -> dict[str, object]:
    path = home / ".ssh" / "config"
    found = read_ssh_config(path.read_text(), alias, path=path, home=home, **kwargs)  # type: ignore[arg-type]
    return {**found.values, "identity_files": [text for text, _place in found.identity_files]}


def test_wildcards_include_and_defaults_at_the_end(home: Path) -> None:
    assert read(home, "web-1") == {
        "port": 2201,  # from conf.d, included before the Host blocks: the first value wins
        "hostname": "web-1.internal.example.com",
        "jump": ["bastion"],
        "user": "nobody",  # Host * at the end fills in what no block before it set
        "identity_file": "~/.ssh/web_nobody_ed25519",  # %r is the final user
        "identity_files": ["~/.ssh/web_nobody_ed25519", "~/.ssh/id_ed25519", "~/.ssh/id_rsa"],
    }
    assert read(home, "legacy") == {
        "hostname": "192.0.2.10",
        "port": 2200,
        "user": "root",
        "identity_file": "~/.ssh/id_ed25519",
        "identity_files": ["~/.ssh/id_ed25519", "~/.ssh/id_rsa"],
    }
    assert "hostname" not in read(home, "web-9")  # excluded by !web-9


def test_match_sees_the_values_set_before_it(home: Path) -> None:
    db1 = read(home, "db-1")
    assert (db1["port"], db1["user"]) == (2222, "deploy")
    assert db1["identity_files"] == ["~/.ssh/db1", "~/.ssh/id_ed25519", "~/.ssh/id_rsa"]
    assert read(home, "db-2")["identity_files"] == ["~/.ssh/id_ed25519", "~/.ssh/id_rsa"]


def test_match_host_is_the_hostname_so_far(tmp_path: Path) -> None:
    text = "Host short\n  HostName long.example\nMatch host long.example\n  User by-hostname\n"
    assert parse_ssh_config(text, "short")["user"] == "by-hostname"
    text = "Match originalhost sh*rt !canonical\n  Port 2\nMatch all\n  User u\nMatch canonical\n  Port 3\n"
    assert parse_ssh_config(text, "short") == {"port": 2, "user": "u"}
    me = getpass.getuser()
    assert parse_ssh_config(f"Match localuser {me}\n  User mine\n", "x") == {"user": "mine"}
    assert parse_ssh_config("Match user someone-else\n  Port 9\n", "x") == {}
    assert parse_ssh_config("Match !originalhost x\n  Port 9\nHost *\n  Port 8\n", "x") == {"port": 8}


def test_every_percent_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYS", "/keys")
    text = (
        "Host box\n  HostName %h.lan\n  Port 2022\n  User ops\n"
        "  IdentityFile %d/%n/%h/%p/%r/%u/%%/%L/%l/%i\n  IdentityFile ${KEYS}/%h\n"
    )
    found = read_ssh_config(text, "box", home=tmp_path)
    host = socket.gethostname()
    assert [text for text, _ in found.identity_files] == [
        f"{tmp_path}/box/box.lan/2022/ops/{getpass.getuser()}/%/{host.split('.')[0]}/{host}/{os.getuid()}",
        "/keys/box.lan",
    ]


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("Host x\n  IdentityFile ~/.ssh/%z\n", 2, "unknown token %z"),
        ("Host x\n  HostName %p.lan\n", 2, "HostName accepts %% %h"),
        ("Host x\n  IdentityFile ${NOT_SET_ANYWHERE}/k\n", 2, "NOT_SET_ANYWHERE is not set"),
        ("Match colour blue\n  User x\n", 1, "unknown Match criterion 'colour'"),
        ("Match host\n  User x\n", 1, "Match host needs an argument"),
        ("Match exec true\n  User x\n", 2, "Match exec is not evaluated by remote_bash (it would run a command)"),
        ("Match final\n  Port 2\n", 2, "Match final"),
    ],
)
def test_what_is_refused_names_the_line(text: str, line: int, message: str) -> None:
    with pytest.raises(InventoryError) as info:
        parse_ssh_config(text, "x", path="cfg")
    assert (info.value.path, info.value.line) == ("cfg", line)
    assert message in str(info.value)


def test_match_exec_is_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    # Skipped as ssh skips it: an earlier criterion failed, or the block could change nothing read here.
    text = (
        f"Match host other exec 'touch {marker}'\n  User a\n"
        f"Host x\n  User b\nMatch exec 'touch {marker}'\n  User c\n"
    )
    assert parse_ssh_config(text, "x") == {"user": "b"}
    with pytest.raises(InventoryError, match="set these values on the host in the inventory"):
        parse_ssh_config(f"Match exec 'touch {marker}'\n  User a\n", "x")
    assert not marker.exists()


def test_include_inside_a_block_is_conditional(home: Path) -> None:
    (home / ".ssh" / "special.conf").write_text("User special\n")
    text = "Host special\n  Include special.conf\nHost *\n  User everyone\n"
    assert read_ssh_config(text, "special", home=home).values["user"] == "special"
    assert read_ssh_config(text, "other", home=home).values["user"] == "everyone"


def test_include_absolute_home_and_missing(home: Path, tmp_path: Path) -> None:
    (tmp_path / "abs.conf").write_text("Port 1001\n")
    (home / "tilde.conf").write_text("User tilde\n")
    text = f"Include {tmp_path}/abs.conf ~/tilde.conf nothing/*.conf\n"
    assert read_ssh_config(text, "x", home=home).values == {"port": 1001, "user": "tilde"}


def test_include_loop_and_errors_name_the_included_file(home: Path) -> None:
    loop = home / ".ssh" / "loop.conf"
    loop.write_text("Include loop.conf\n")
    with pytest.raises(InventoryError, match="nested more than 16 levels") as info:
        read_ssh_config("Include loop.conf\n", "x", home=home)
    assert (info.value.path, info.value.line) == (str(loop), 1)
    bad = home / ".ssh" / "conf.d" / "30-bad.conf"
    bad.write_text("\n\nHost x\n  Port ssh\n")
    with pytest.raises(InventoryError, match="got 'ssh'") as info:
        read(home, "x")
    assert (info.value.path, info.value.line) == (str(bad), 4)


# --- through the inventory -----------------------------------------------------------------------


def inventory(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_inventory_hosts_from_a_real_world_config(home: Path, tmp_path: Path) -> None:
    (home / ".ssh" / "id_rsa").write_text("key")  # the only key file that exists
    inv = load_inventory(
        inventory(
            tmp_path,
            """\
            hosts:
              bastion: {ssh_config: bastion}
              web-1: {ssh_config: web-1}
              db-1: {ssh_config: db-1, identity_file: keys/own}
              legacy: {ssh_config: legacy, user: ops}
            """,
        ),
        ssh_config_path=home / ".ssh" / "config",
    )
    web = inv.hosts["web-1"]
    assert (web.hostname, web.port, web.user, web.jump) == ("web-1.internal.example.com", 2201, "nobody", ["bastion"])
    # One key file per host: the first IdentityFile that exists, as ssh would try it first.
    assert web.identity_file == home / ".ssh" / "id_rsa"
    assert inv.hosts["db-1"].identity_file == tmp_path / "keys" / "own"  # the host's own field wins
    legacy = inv.hosts["legacy"]
    assert (legacy.hostname, legacy.port, legacy.user) == ("192.0.2.10", 2200, "ops")
    assert inv.hosts["bastion"].user == "admin"


def test_inventory_with_no_key_file_on_disk_keeps_the_first(home: Path, tmp_path: Path) -> None:
    inv = load_inventory(inventory(tmp_path, "hosts:\n  legacy: {ssh_config: legacy}\n"),
                         ssh_config_path=home / ".ssh" / "config")
    assert inv.hosts["legacy"].identity_file == home / ".ssh" / "id_ed25519"


def test_inventory_error_in_an_ssh_value_points_at_the_ssh_line(home: Path, tmp_path: Path) -> None:
    (home / ".ssh" / "conf.d" / "00-empty.conf").write_text('Host blank\n  HostName ""\n')
    with pytest.raises(InventoryError) as info:
        load_inventory(inventory(tmp_path, "hosts:\n  blank: {ssh_config: blank}\n"),
                       ssh_config_path=home / ".ssh" / "config")
    assert (info.value.path, info.value.line) == (str(home / ".ssh" / "conf.d" / "00-empty.conf"), 2)
    assert "expected a non-empty string, got ''" in str(info.value)


# No '/' or '~': an Include stays under the test's ~/.ssh.
_lines = st.builds(
    "{} {}".format,
    st.sampled_from(["Host", "Match", "Include", "HostName", "IdentityFile", "Port", "User", "ProxyJump", "Tag",
                     "ProxyCommand", "HostKeyAlias", "CanonicalizeHostname", "RevokedHostKeys"]),
    st.text(alphabet="ab*?!%hpru{}$,'\" =#.", max_size=14),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_lines, max_size=8).map("\n".join), st.sampled_from(["a", "ab", "b.x"]))
def test_read_ssh_config_only_raises_inventory_error(home: Path, text: str, alias: str) -> None:
    (home / ".ssh" / "a").write_text("Include a\n")  # a file that includes itself
    error: InventoryError | None = None
    try:
        found = read_ssh_config(text, alias, inventory_hosts={"a", "b"}, path="cfg", home=home)
    except InventoryError as exc:
        error = exc
    if error is not None:
        assert error.path in ("cfg", str(home / ".ssh" / "a")), error
        return
    assert set(found.values) <= {"hostname", "user", "port", "identity_file", "jump"}
    assert found.values.get("identity_file") == (found.identity_files[0][0] if found.identity_files else None)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("Host x\n  ProxyCommand ssh -W %h:%p b\n", 2, "ProxyCommand: 'ssh -W %h:%p b' (for 'x') is not supported"),
        ("Host *\n  ProxyCommand nc %h %p\n", 2, "would otherwise dial the host directly"),
        ("Host x\n  HostKeyAlias other\n", 2, "HostKeyAlias: 'other'"),
        ("Host x\n  CanonicalizeHostname yes\n", 2, "CanonicalizeHostname: 'yes'"),
        ("Host x\n  CanonicalizeHostname always\n", 2, "not supported"),
        ("Host x\n  RevokedHostKeys ~/.ssh/revoked\n", 2, "would otherwise trust a key revoked there"),
        # The first obtained wins, as in ssh: a later 'none' does not undo an earlier command.
        ("Host x\n  ProxyCommand nc %h %p\nHost *\n  ProxyCommand none\n", 2, "Use ProxyJump"),
    ],
)
def test_an_option_that_would_change_where_or_whom_we_trust_is_refused(text: str, line: int, message: str) -> None:
    with pytest.raises(InventoryError) as info:
        parse_ssh_config(text, "x", path="cfg")
    assert (info.value.path, info.value.line) == ("cfg", line)
    assert message in str(info.value) and str(info.value).startswith("cfg:2: ")


@pytest.mark.parametrize(
    ("text", "jump"),
    [
        ("Host x\n  ProxyCommand none\nHost *\n  ProxyCommand nc %h %p\n", []),
        ("Host x\n  ProxyCommand none\n  ProxyJump a\n", []),  # ssh: the first of the two wins
        ("Host x\n  ProxyJump a\n  ProxyCommand nc %h %p\n", ["a"]),
        ("Host y\n  ProxyCommand nc %h %p\nHost x\n  CanonicalizeHostname no\n", None),
        ("Host x\n  RevokedHostKeys none\nHost *\n  RevokedHostKeys /etc/ssh/revoked\n", None),
        ("Host x\n  CanonicalizeHostname no\nHost *\n  CanonicalizeHostname yes\n  Tunnel yes\n"
         "  ProxyUseFdpass yes\n", None),
    ],
)
def test_what_changes_nothing_is_accepted(text: str, jump: list[str] | None) -> None:
    assert parse_ssh_config(text, "x", path="cfg").get("jump") == jump


def test_a_proxycommand_is_not_refused_when_the_host_sets_its_own_jump(home: Path, tmp_path: Path) -> None:
    (home / ".ssh" / "config").write_text("Host proxied\n  HostName 192.0.2.7\n  ProxyCommand nc %h %p\n")
    path = inventory(tmp_path, "hosts:\n  proxied: {ssh_config: proxied}\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path, ssh_config_path=home / ".ssh" / "config")
    assert (info.value.path, info.value.line) == (str(home / ".ssh" / "config"), 3)
    assert "ProxyCommand" in str(info.value) and "jump:" in str(info.value)
    path = inventory(tmp_path, "hosts:\n  hop: {hostname: 192.0.2.8}\n  proxied: {ssh_config: proxied, jump: [hop]}\n")
    assert load_inventory(path, ssh_config_path=home / ".ssh" / "config").hosts["proxied"].jump == ["hop"]
