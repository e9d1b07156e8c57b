"""The inventory loader, its error messages, ssh_config support and host patterns."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Literal

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from remote_bash._inventory_file import validate_file
from remote_bash._yaml_lines import parse_yaml
from remote_bash.errors import InventoryError, SelectionError
from remote_bash.inventory import (
    MAX_FILE_BYTES,
    Inventory,
    default_inventory_path,
    load_inventory,
    parse_ssh_config,
    select_names,
)
from remote_bash.models import Host

REPO = Path(__file__).resolve().parent.parent

SPEC_EXAMPLE = """\
defaults:
  user: deploy
  command_timeout: 60
  policy: {deny: ['rm\\s+-rf\\s+/']}
hosts:
  web-1: {hostname: 10.0.0.5, port: 22, labels: {env: staging, role: web}, jump: [bastion]}
  bastion: {hostname: bastion.example.com, jump: []}
  db-1: {ssh_config: db1-alias}
groups:
  web: {hosts: [web-1], vars: {env: {APP: web}}, forks: 5}
  staging: {children: [web], hosts: [db-1]}
"""

SSH_CONFIG = """\
# a comment
User everyone

Host db1-alias
  HostName %h.internal
  Port=2202
  IdentityFile keys/db1
"""


def write(tmp_path: Path, text: str, name: str = "hosts.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load_error(tmp_path: Path, text: str, **kwargs: object) -> InventoryError:
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path, **kwargs)  # type: ignore[arg-type]
    return info.value


# --- loading -----------------------------------------------------------------------------------


def test_spec_example_resolves_every_layer(tmp_path: Path) -> None:
    ssh = write(tmp_path, SSH_CONFIG, "ssh_config")
    inv = load_inventory(write(tmp_path, SPEC_EXAMPLE), ssh_config_path=ssh)

    assert list(inv.hosts) == ["web-1", "bastion", "db-1"]
    web = inv.hosts["web-1"]
    assert (web.hostname, web.user, web.command_timeout) == ("10.0.0.5", "deploy", 60)
    assert web.groups == ["staging", "web"]
    assert web.env == {"APP": "web"}
    assert web.forks == 5
    assert web.policy.deny == [r"rm\s+-rf\s+/"]
    db = inv.hosts["db-1"]
    assert (db.hostname, db.port, db.user) == ("db1-alias.internal", 2202, "everyone")
    assert db.identity_file == Path.home() / "keys/db1"
    assert db.groups == ["staging"]
    assert db.forks is None
    assert inv.groups == {"web": ["web-1"], "staging": ["db-1", "web-1"]}
    assert inv.group_forks == {"web": 5}
    assert inv.defaults["user"] == "deploy"
    assert inv.path == tmp_path / "hosts.yaml"


def test_example_file_in_repo_loads() -> None:
    inv = load_inventory(REPO / "hosts.example.yaml")
    assert "bastion" in inv.hosts
    assert inv.hosts["db-1"].policy.allow_operators is False
    assert [h.name for h in inv.select("web:&production")] == ["web-2"]


def test_precedence_parent_then_child_then_name_then_host(tmp_path: Path) -> None:
    inv = load_inventory(
        write(
            tmp_path,
            """\
            defaults: {command_timeout: 1, user: d, labels: {a: defaults, b: defaults}}
            hosts:
              h1: {}
              h2: {command_timeout: 99}
            groups:
              outer: {children: [inner], vars: {command_timeout: 2, user: outer, labels: {a: outer}}}
              inner: {hosts: [h1, h2], vars: {command_timeout: 3}}
              alpha: {hosts: [h1], vars: {connect_timeout: 5, env: {A: alpha, B: alpha}}}
              zulu: {hosts: [h1], vars: {connect_timeout: 7, env: {A: zulu}}}
            """,
        )
    )
    h1, h2 = inv.hosts["h1"], inv.hosts["h2"]
    assert h1.command_timeout == 3  # the inner group beats the outer one, whatever their names
    assert h1.user == "outer"
    assert h1.labels == {"a": "outer", "b": "defaults"}
    assert h1.connect_timeout == 7  # unrelated groups: by name, so zulu comes last
    assert h1.env == {"A": "zulu", "B": "alpha"}
    assert h2.command_timeout == 99
    assert h1.groups == ["alpha", "inner", "outer", "zulu"]
    assert inv.groups["outer"] == ["h1", "h2"]


def test_ssh_config_beats_groups_and_host_fields_beat_ssh_config(tmp_path: Path) -> None:
    ssh = write(tmp_path, "Host box\n  User from-ssh\n  Port 2222\n", "ssh_config")
    inv = load_inventory(
        write(
            tmp_path,
            """\
            defaults: {user: from-defaults, port: 2000}
            hosts:
              a: {ssh_config: box}
              b: {ssh_config: box, user: own, hostname: b.example}
            groups:
              g: {hosts: [a, b], vars: {user: from-group}}
            """,
        ),
        ssh_config_path=ssh,
    )
    assert (inv.hosts["a"].user, inv.hosts["a"].port, inv.hosts["a"].hostname) == ("from-ssh", 2222, "box")
    assert (inv.hosts["b"].user, inv.hosts["b"].hostname) == ("own", "b.example")


def test_policy_merges_key_by_key_and_lists_replace(tmp_path: Path) -> None:
    inv = load_inventory(
        write(
            tmp_path,
            """\
            defaults: {policy: {deny: [x]}, redact: [a]}
            hosts:
              h: {policy: {allow: [ls]}, redact: [b]}
            """,
        )
    )
    host = inv.hosts["h"]
    assert (host.policy.allow, host.policy.deny) == (["ls"], ["x"])
    assert host.redact == ["b"]


def test_numbers_in_env_and_labels_are_strings_but_booleans_are_errors(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, "hosts:\n  a: {env: {PORT: 8080}, labels: {tier: 1.5}}\n"))
    assert (inv.hosts["a"].env, inv.hosts["a"].labels) == ({"PORT": "8080"}, {"tier": "1.5"})
    error = load_error(tmp_path, "hosts:\n  a:\n    env:\n      DEBUG: yes\n")
    assert (error.field, error.line) == ("hosts.a.env.DEBUG", 4)
    assert "expected a string, got true" in str(error)


@pytest.mark.parametrize(("value", "field"), [
    ("012", "env.A"), ("0x1F", "env.A"), ("0b101", "env.A"), ("1:30", "env.A"), ("1_000", "env.A"),
    ("017", "port"), ("0x16", "port"), ("02134", "labels.zip"),
])
def test_a_number_yaml_reads_unlike_its_text_is_an_error_not_another_value(
        tmp_path: Path, value: str, field: str) -> None:
    """YAML 1.1 reads 012 as 10 and 1:30 as 90: a setting would silently differ from the file's text."""
    key, _, sub = field.partition(".")
    text = f"hosts:\n  a:\n    {key}: {value}\n" if not sub else f"hosts:\n  a:\n    {key}:\n      {sub}: {value}\n"
    error = load_error(tmp_path, text)
    assert (error.field, error.line) == (f"hosts.a.{field}", 3 if not sub else 4)
    assert f"quote it ('{value}')" in str(error)
    if sub:  # quoted, it is the text
        quoted = load_inventory(write(tmp_path, text.replace(f": {value}", f": '{value}'")))
        assert getattr(quoted.hosts["a"], key)[sub] == value


@pytest.mark.parametrize("field", ["policy: {deny: ['x\\ud800']}", "redact: ['\\udfff']", "env: {A: 'x\\ud800'}",
                                   "identity_file: '/k\\ud800'"])
def test_a_lone_surrogate_escape_is_an_error_naming_its_line(tmp_path: Path, field: str) -> None:
    error = load_error(tmp_path, f'hosts:\n  b: {{}}\n  a:\n    {field.replace(chr(39), chr(34))}\n')
    assert error.line == 4 and "lone surrogate" in str(error) and str(error.field).startswith("hosts.a.")


def test_hostname_defaults_to_the_name_and_null_entries_are_empty(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, "hosts:\n  box.lan:\n"))
    assert inv.hosts["box.lan"].hostname == "box.lan"


def test_group_forks_smallest_wins_unless_the_host_sets_it(tmp_path: Path) -> None:
    inv = load_inventory(
        write(
            tmp_path,
            """\
            hosts: {a: {}, b: {forks: 9}}
            groups:
              big: {hosts: [a, b], forks: 8}
              small: {hosts: [a, b], forks: 2}
            """,
        )
    )
    assert inv.hosts["a"].forks == 2
    assert inv.hosts["b"].forks == 9
    assert inv.group_forks == {"big": 8, "small": 2}


def test_paths_are_relative_to_the_inventory_and_expand_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    inv = load_inventory(
        write(tmp_path, "hosts:\n  h: {identity_file: keys/id, known_hosts: ~/kh}\n", "inv.yaml")
    )
    assert inv.hosts["h"].identity_file == tmp_path / "keys" / "id"
    assert inv.hosts["h"].known_hosts == tmp_path / "home" / "kh"


def test_yaml_anchors_and_merge_keys_work(tmp_path: Path) -> None:
    inv = load_inventory(
        write(
            tmp_path,
            """\
            hosts:
              a: &base {port: 2200, labels: {env: prod}}
              b: {<<: *base, hostname: b.lan}
            """,
        )
    )
    assert (inv.hosts["b"].port, inv.hosts["b"].labels) == (2200, {"env": "prod"})


# --- errors: file and YAML ---------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="not found") as info:
        load_inventory(tmp_path / "nope.yaml")
    assert info.value.path == str(tmp_path / "nope.yaml")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="directory"):
        load_inventory(tmp_path)


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "hosts: {}\n")

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(InventoryError, match="cannot read inventory file: Permission denied"):
        load_inventory(path)


def test_file_over_the_size_limit_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("wb") as stream:
        stream.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(InventoryError, match=r"10\.0 MiB; files over 10 MiB are refused") as info:
        load_inventory(path)
    assert info.value.path == str(path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "h.yaml"
    path.write_bytes(b"hosts:\n  a: {user: \xff}\n")
    with pytest.raises(InventoryError, match="not UTF-8") as info:
        load_inventory(path)
    assert info.value.line == 2


def test_control_character_names_the_line(tmp_path: Path) -> None:
    error = load_error(tmp_path, "hosts:\n  a: {user: \x1f}\n")
    assert "character YAML does not allow" in str(error)
    assert error.line == 2


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    error = load_error(tmp_path, "hosts:\n  a: {port: 22\n  b: [\n")
    assert "YAML syntax error" in str(error)
    assert error.line is not None
    assert error.line >= 2
    assert str(error).startswith(f"{tmp_path / 'hosts.yaml'}:{error.line}: ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the file is empty"),
        ("- a\n- b\n", "got a list"),
        ("just text\n", "got 'just text'"),
        ("groups: {}\n", "no 'hosts' section"),
        ("hosts: [a, b]\n", "expected a mapping of host names to settings, got a list"),
    ],
)
def test_file_that_is_not_an_inventory(tmp_path: Path, text: str, message: str) -> None:
    assert message in str(load_error(tmp_path, text))


def test_billion_laughs_is_refused(tmp_path: Path) -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    error = load_error(tmp_path, "\n".join(levels) + "\nhosts: {}\n")
    assert "more than 200000 YAML nodes" in str(error)


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    error = load_error(tmp_path, "hosts:\n  a: &x\n    labels: *x\n")
    assert "refers to a node that contains it" in str(error)
    assert error.field == "hosts.a.labels"


def test_duplicate_keys_are_errors(tmp_path: Path) -> None:
    error = load_error(tmp_path, "hosts:\n  a: {}\n  b: {}\n  a: {port: 2}\n")
    assert "duplicate key 'a' (first on line 2)" in str(error)
    assert (error.line, error.field) == (4, "hosts.a")


def test_unsupported_tag(tmp_path: Path) -> None:
    error = load_error(tmp_path, "hosts:\n  a: !!set {x}\n")
    assert "unsupported YAML tag" in str(error)


# --- errors: fields ----------------------------------------------------------------------------


def test_bad_port_names_file_line_field_and_expectation(tmp_path: Path) -> None:
    error = load_error(tmp_path, "hosts:\n  web-1:\n    hostname: a\n    port: abc\n")
    assert (error.path, error.line, error.field) == (str(tmp_path / "hosts.yaml"), 4, "hosts.web-1.port")
    assert str(error) == (
        f"{tmp_path / 'hosts.yaml'}:4: hosts.web-1.port: expected an integer from 1 to 65535, got 'abc'"
    )


def test_bad_value_inherited_from_defaults_points_at_defaults(tmp_path: Path) -> None:
    error = load_error(tmp_path, "defaults:\n  user: x\n  command_timeout: -1\nhosts:\n  a: {}\n")
    assert (error.line, error.field) == (3, "defaults.command_timeout")
    assert "expected a number greater than 0, got -1" in str(error)


def test_bad_value_in_group_vars_points_at_the_group(tmp_path: Path) -> None:
    error = load_error(tmp_path, "hosts: {a: {}}\ngroups:\n  g:\n    hosts: [a]\n    vars: {port: 0}\n")
    assert (error.line, error.field) == (5, "groups.g.vars.port")


@pytest.mark.parametrize(
    ("host", "field", "message"),
    [
        ("{prot: 22}", "hosts.a.prot", "unknown field 'prot'; did you mean 'port'?"),
        ("{host_key_policy: loose}", "hosts.a.host_key_policy", "expected one of 'strict', 'accept-new'"),
        ("{env: {1BAD: x}}", "hosts.a.env", "'1BAD' is not a valid shell name"),
        ("{identity_file: ''}", "hosts.a.identity_file", "identity_file is empty (or '.')"),
        ("{audit_key_file: '.'}", "hosts.a.audit_key_file", "audit_key_file is empty"),
        ("{known_hosts: ''}", "hosts.a.known_hosts", "names a directory, not a file"),
        ('{env: {A: "x\\0y"}}', "hosts.a.env", "'A' holds a NUL byte"),
        ("{policy: {alow: [ls]}}", "hosts.a.policy.alow", "unknown field 'alow'; did you mean 'allow'?"),
        ("{policy: {deny: ['(']}}", "hosts.a.policy.deny.0", "not a valid regular expression"),
        ("{redact: ['[']}", "hosts.a.redact.0", "not a valid regular expression"),
        ("{jump: x}", "hosts.a.jump", "expected a list of strings, got 'x'"),
        ("{output_limit: 5}", "hosts.a.output_limit", "expected an integer of at least 200, got 5"),
        ("{labels: [a]}", "hosts.a.labels", "expected a mapping of names to strings, got a list"),
        ("{groups: [g]}", "hosts.a.groups", "list the host under groups.<group>.hosts"),
        ("{name: b}", "hosts.a.name", "'name' cannot be set here"),
        ("{jump: [bastoin]}", "hosts.a.jump.0", "'bastoin' is not a host of this inventory"),
    ],
)
def test_field_errors(tmp_path: Path, host: str, field: str, message: str) -> None:
    error = load_error(tmp_path, f"hosts:\n  bastion: {{}}\n  a: {host}\n")
    assert error.field == field
    assert error.line == 3
    assert message in str(error)


@pytest.mark.parametrize(
    ("text", "field", "line", "message"),
    [
        ("hosts: {}\nextra: 1\n", "extra", 2, "unknown field 'extra'"),
        ("defaults: {hostname: x}\nhosts: {}\n", "defaults.hostname", 1, "set it on each host"),
        ("hosts: {}\ngroups:\n  g: {members: []}\n", "groups.g.members", 3, "unknown field 'members'"),
        ("hosts: {a: {}}\ngroups:\n  g:\n    hosts: [b]\n", "groups.g.hosts.0", 4, "'b' is not a host"),
        ("hosts: {a: {}}\ngroups:\n  g: {children: [h]}\n", "groups.g.children.0", 3, "not a group"),
        ("hosts: {a: {}}\ngroups:\n  g: {forks: 0}\n", "groups.g.forks", 3, "positive integer, got 0"),
        ("hosts: {a: {}}\ngroups:\n  a: {}\n", "groups.a", 3, "same name as a host"),
        ("hosts:\n  all: {}\n", "hosts.all", 2, "cannot be a host name"),
        ("hosts:\n  'web 1': {}\n", "hosts.web 1", 2, "cannot be a host name"),
        ("hosts: {a: 5}\n", "hosts.a", 1, "expected a mapping of host settings, got 5"),
    ],
)
def test_structure_errors(tmp_path: Path, text: str, field: str, line: int, message: str) -> None:
    error = load_error(tmp_path, text)
    assert (error.field, error.line) == (field, line)
    assert message in str(error)


def test_group_cycle_is_named(tmp_path: Path) -> None:
    error = load_error(
        tmp_path,
        "hosts: {a: {}}\ngroups:\n  x: {children: [y]}\n  y: {children: [z]}\n  z: {children: [x]}\n",
    )
    assert "groups contain each other in a cycle: x -> y -> z -> x" in str(error)
    assert (error.field, error.line) == ("groups.x.children", 3)


def test_jump_cycle_is_named(tmp_path: Path) -> None:
    error = load_error(tmp_path, "hosts:\n  a: {jump: [b]}\n  b: {jump: [a]}\n")
    assert "jump hosts form a cycle: a -> b -> a" in str(error)
    assert error.line == 2


def test_jump_inherited_by_the_jump_host_itself_is_a_cycle(tmp_path: Path) -> None:
    error = load_error(tmp_path, "defaults: {jump: [bastion]}\nhosts:\n  bastion: {}\n  web: {}\n")
    assert "bastion -> bastion" in str(error)


# --- ssh config --------------------------------------------------------------------------------


def test_parse_ssh_config_patterns_and_first_value_wins() -> None:
    text = """\
    Host *.prod !db-?.prod
      User prod-user
    Host db-?.prod
      # a comment line
      HOSTNAME   %h.example   # trailing comment
      port = 2022
      Port 3033
    Match host db-1.prod
      User from-match
    Host *
      User everyone
      IdentityFile "~/my keys/id"
      ProxyJump a,b
    """
    text = textwrap.dedent(text)
    assert parse_ssh_config(text, "db-1.prod") == {
        "hostname": "db-1.prod.example",
        "port": 2022,
        "user": "everyone",
        "identity_file": "~/my keys/id",
        "jump": ["a", "b"],
    }
    assert parse_ssh_config(text, "web.prod")["user"] == "prod-user"
    assert parse_ssh_config(text, "WEB.PROD")["user"] == "prod-user"  # host patterns ignore case
    assert parse_ssh_config(text, "db-10.prod")["user"] == "prod-user"  # ? is exactly one character


def test_parse_ssh_config_tokens_and_none() -> None:
    text = "Host x\n  HostName 100%%-%h\n  ProxyJump none\nHost *\n  ProxyJump a\n"
    assert parse_ssh_config(text, "x") == {"hostname": "100%-x", "jump": []}


def test_parse_ssh_config_errors() -> None:
    with pytest.raises(InventoryError, match="1 to 65535, got 'ssh'") as info:
        parse_ssh_config("Host x\n  Port ssh\n", "x", path="cfg")
    assert (info.value.path, info.value.line, info.value.field) == ("cfg", 2, "Port")
    with pytest.raises(InventoryError, match=r"ProxyJump hop 'gw' .* is not a host of the inventory"):
        parse_ssh_config("Host x\n  ProxyJump ok,gw\n", "x", inventory_hosts={"ok"})
    with pytest.raises(InventoryError, match="cannot read ssh config line"):
        parse_ssh_config('Host x\n  User "unclosed\n', "x")


def test_ssh_config_proxyjump_must_name_inventory_hosts(tmp_path: Path) -> None:
    ssh = write(tmp_path, "Host box\n  ProxyJump gw.example.com\n", "ssh_config")
    error = load_error(tmp_path, "hosts:\n  a: {ssh_config: box}\n", ssh_config_path=ssh)
    assert (error.path, error.line) == (str(ssh), 2)
    assert "every hop must be an inventory host name" in str(error)


def test_ssh_config_proxyjump_to_inventory_host(tmp_path: Path) -> None:
    ssh = write(tmp_path, "Host box\n  ProxyJump gw\n", "ssh_config")
    inv = load_inventory(write(tmp_path, "hosts:\n  gw: {}\n  a: {ssh_config: box}\n"), ssh_config_path=ssh)
    assert inv.hosts["a"].jump == ["gw"]


def test_ssh_config_alias_without_a_block(tmp_path: Path) -> None:
    ssh = write(tmp_path, "Host other\n  User x\n", "ssh_config")
    error = load_error(tmp_path, "hosts:\n  a:\n    ssh_config: box\n", ssh_config_path=ssh)
    assert "no Host block" in str(error)
    assert "matches 'box'" in str(error)
    assert (error.line, error.field) == (3, "hosts.a.ssh_config")


def test_ssh_config_file_missing(tmp_path: Path) -> None:
    error = load_error(tmp_path, "hosts:\n  a: {ssh_config: box}\n", ssh_config_path=tmp_path / "none")
    assert "does not exist" in str(error)
    assert error.line == 2


# --- where the inventory lives -----------------------------------------------------------------


def test_default_inventory_path_order(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    env = {"REMOTE_BASH_INVENTORY": "/env/hosts.yaml", "XDG_CONFIG_HOME": str(xdg), "HOME": str(tmp_path)}
    assert default_inventory_path("/cli.yaml", env) == Path("/cli.yaml")
    assert default_inventory_path(None, env) == Path("/env/hosts.yaml")
    del env["REMOTE_BASH_INVENTORY"]
    assert default_inventory_path(None, env) is None
    (xdg / "remote-bash").mkdir(parents=True)
    (xdg / "remote-bash" / "hosts.yaml").write_text("hosts: {}\n")
    assert default_inventory_path(None, env) == xdg / "remote-bash" / "hosts.yaml"
    home_file = tmp_path / ".config" / "remote-bash" / "hosts.yaml"
    home_file.parent.mkdir(parents=True)
    home_file.write_text("hosts: {}\n")
    assert default_inventory_path(None, {"HOME": str(tmp_path)}) == home_file
    assert default_inventory_path(None, {"HOME": str(tmp_path), "XDG_CONFIG_HOME": "relative"}) == home_file


# --- host patterns -----------------------------------------------------------------------------


def _host(name: str, **labels: str) -> Host:
    return Host(name=name, hostname=f"{name}.lan", labels=labels)


HOSTS = {
    "web-1": _host("web-1", env="staging", role="web"),
    "web-2": _host("web-2", env="prod", role="web"),
    "db-1": _host("db-1", env="prod", role="db"),
    "bastion": _host("bastion"),
}
GROUPS = {"web": ["web-1", "web-2"], "prod": ["db-1", "web-2"], "empty": []}


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("all", ["web-1", "web-2", "db-1", "bastion"]),
        ("*", ["web-1", "web-2", "db-1", "bastion"]),
        ("db-1", ["db-1"]),
        ("web", ["web-1", "web-2"]),
        ("db-1,web-1", ["web-1", "db-1"]),
        ("db-1:bastion", ["db-1", "bastion"]),
        ("web:&prod", ["web-2"]),
        ("prod:!db-1", ["web-2"]),
        ("web-*", ["web-1", "web-2"]),
        ("pro?", ["web-2", "db-1"]),
        ("env=prod", ["web-2", "db-1"]),
        ("role=w*", ["web-1", "web-2"]),
        (" web , db-1 : !web-2 ", ["web-1", "db-1"]),
        ("!web", ["db-1", "bastion"]),
        ("web:!web-1:&prod", ["web-2"]),
        ("web:&db-1", []),
        ("empty", []),
        ("emp*", []),
    ],
)
def test_select_names(pattern: str, expected: list[str]) -> None:
    assert select_names(pattern, HOSTS, GROUPS) == expected


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (
            "web-3",
            "unknown host or group 'web-3' in pattern 'web-3'; did you mean 'web-2', 'web-1' or 'web'\\?",
        ),
        ("web,dbb-1", "unknown host or group 'dbb-1'.*did you mean 'db-1'"),
        ("web:&nothing", "unknown host or group 'nothing'"),
        ("zz-*", "'zz-\\*' .* matches no host or group name"),
        ("colour=red", "no host has a label 'colour'.*labels in use: env, role"),
        ("env=qa", "no host has the label env=qa.*values of 'env' in use: prod, staging"),
        ("", "empty"),
        ("web,,db-1", "empty term"),
        ("web:!", "empty term"),
    ],
)
def test_select_names_errors(pattern: str, message: str) -> None:
    with pytest.raises(SelectionError, match=message):
        select_names(pattern, HOSTS, GROUPS)


def test_inventory_host_and_select() -> None:
    inv = Inventory(hosts=HOSTS, groups=GROUPS)
    assert inv.host("db-1") is HOSTS["db-1"]
    assert [h.name for h in inv.select("web")] == ["web-1", "web-2"]
    with pytest.raises(SelectionError, match="unknown host 'db-2'; did you mean 'db-1'"):
        inv.host("db-2")


names = st.lists(st.from_regex(r"[a-c][0-9]", fullmatch=True), min_size=1, max_size=8, unique=True)


@st.composite
def inventories(draw: st.DrawFn) -> tuple[dict[str, Host], dict[str, list[str]]]:
    hosts = {n: _host(n, tier=draw(st.sampled_from(["x", "y"]))) for n in draw(names)}
    group_names = draw(st.lists(st.sampled_from(["g1", "g2", "g3", "g4"]), unique=True))
    groups = {g: draw(st.lists(st.sampled_from(sorted(hosts)), unique=True)) for g in group_names}
    return hosts, groups


@st.composite
def inventory_and_terms(draw: st.DrawFn) -> tuple[dict[str, Host], dict[str, list[str]], str, str]:
    hosts, groups = draw(inventories())
    terms = st.sampled_from([*hosts, *groups, "all", "tier=x", "tier=*", "?1"])
    return hosts, groups, draw(terms), draw(terms)


def _set(term: str, hosts: dict[str, Host], groups: dict[str, list[str]]) -> set[str]:
    try:
        return set(select_names(term, hosts, groups))
    except SelectionError:
        return set()


@settings(max_examples=150, deadline=None)
@given(inventory_and_terms())
def test_pattern_laws(case: tuple[dict[str, Host], dict[str, list[str]], str, str]) -> None:
    hosts, groups, a, b = case
    try:
        sa, sb = set(select_names(a, hosts, groups)), set(select_names(b, hosts, groups))
    except SelectionError:
        return  # a glob or label that matches nothing in this inventory
    order = list(hosts)
    for pattern, expected in [
        (f"{a},{b}", sa | sb),
        (f"{a}:{b}", sa | sb),
        (f"{a}:&{b}", sa & sb),
        (f"{a}:!{b}", sa - sb),
        (f"!{b}", set(hosts) - sb),
        (f"{a}:!{a}", set()),
    ]:
        result = select_names(pattern, hosts, groups)
        assert result == [n for n in order if n in expected], pattern
    assert select_names(f"{a},{b}", hosts, groups) == select_names(f"{b},{a}", hosts, groups)
    assert select_names(f"{a}:&{b}", hosts, groups) == select_names(f"{b}:&{a}", hosts, groups)


@settings(max_examples=100, deadline=None)
@given(inventories(), st.text(alphabet="ab01g,:&!*?= ", max_size=12))
def test_select_names_only_raises_selection_error(
    inventory: tuple[dict[str, Host], dict[str, list[str]]], pattern: str
) -> None:
    hosts, groups = inventory
    try:
        result = select_names(pattern, hosts, groups)
    except SelectionError:
        return
    assert result == [n for n in hosts if n in set(result)]


# --- robustness ----------------------------------------------------------------------------------

keys = st.sampled_from(
    ["hosts", "groups", "defaults", "a", "b", "port", "user", "jump", "labels", "env", "policy", "deny",
     "children", "vars", "forks", "ssh_config", "identity_file", "limits", "hostname", "<<"]
)  # fmt: skip
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 70000), st.floats(), st.sampled_from(["a", "b", "(", "~/k"])
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=15,
)
documents = st.dictionaries(
    st.sampled_from(["hosts", "groups", "defaults"]), st.dictionaries(keys, values, max_size=4), max_size=3
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(documents.map(yaml.safe_dump), st.text(max_size=60)))
def test_load_inventory_only_raises_inventory_error(tmp_path: Path, text: str) -> None:
    ssh = tmp_path / "ssh_config"
    ssh.write_text("Host a*\n  ProxyJump b\nHost *\n  HostName %h.lan\n")
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    error: InventoryError | None = None
    try:
        inv = load_inventory(path, ssh_config_path=ssh)
    except InventoryError as exc:
        error = exc
    if error is not None:
        assert error.path in (str(path), str(ssh))
        return
    for name, host in inv.hosts.items():
        assert host.name == name
        assert set(host.groups) == {g for g, members in inv.groups.items() if name in members}


ssh_lines = st.one_of(
    st.text(max_size=30),
    st.builds(
        "{}{}{}".format,
        st.sampled_from(["Host", "HostName", "port", "User", "IdentityFile", "ProxyJump", "Match"]),
        st.sampled_from([" ", "=", " = ", "\t"]),
        st.text(alphabet="ab*?!%h,\"' #0123456789", max_size=12),
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(ssh_lines, max_size=8).map("\n".join), st.sampled_from(["a", "ab", "b.x"]))
def test_parse_ssh_config_only_raises_inventory_error(text: str, alias: str) -> None:
    try:
        result = parse_ssh_config(text, alias, inventory_hosts={"a", "b"})
    except InventoryError:
        return
    assert set(result) <= {"hostname", "user", "port", "identity_file", "jump"}
    assert set(result.get("jump", [])) <= {"a", "b"}


# --- the file as pydantic models -----------------------------------------------------------------


def test_settings_model_is_derived_from_host() -> None:
    from remote_bash._inventory_file import GroupEntry, HostEntry, HostSettings, InventoryFile

    assert set(HostSettings.model_fields) == set(Host.model_fields) - {"name", "hostname", "groups"}
    assert set(HostEntry.model_fields) == set(HostSettings.model_fields) | {"hostname"}
    assert not [name for name, field in HostEntry.model_fields.items() if field.is_required()]
    for model in (HostSettings, HostEntry, GroupEntry, InventoryFile):
        assert model.model_config.get("extra") == "forbid", model
    # Bounds and validators come with the fields.
    assert HostSettings.model_fields["port"].metadata == Host.model_fields["port"].metadata


def test_unset_inherits_and_null_overrides(tmp_path: Path) -> None:
    inv = load_inventory(
        write(
            tmp_path,
            """\
            defaults: {user: deploy, limits: {cpu_seconds: 5, nice: 3}}
            hosts:
              a: {user: null}
              b: {}
            groups:
              g: {hosts: [a, b], vars: {limits: {nice: 7}}}
            """,
        )
    )
    assert (inv.hosts["a"].user, inv.hosts["b"].user) == (None, "deploy")
    assert (inv.hosts["b"].limits.cpu_seconds, inv.hosts["b"].limits.nice) == (5, 7)


def test_numbers_in_string_fields_are_strings(tmp_path: Path) -> None:
    assert load_inventory(write(tmp_path, "hosts:\n  a: {user: 1000}\n")).hosts["a"].user == "1000"


def test_several_problems_say_how_many(tmp_path: Path) -> None:
    error = load_error(tmp_path, "hosts:\n  a:\n    port: x\n    user: [1]\n")
    assert (error.field, error.line) == ("hosts.a.port", 3)
    assert str(error).endswith("(and 1 more problems)")


def test_misspelt_section_is_named_before_the_missing_one(tmp_path: Path) -> None:
    error = load_error(tmp_path, "hostz:\n  a: {}\n")
    assert "unknown field 'hostz'; did you mean 'hosts'?" in str(error)
    assert (error.field, error.line) == ("hostz", 1)


@pytest.mark.parametrize(
    ("text", "field", "line", "message"),
    [
        ("defaults:\n  redact: ['[']\nhosts: {a: {}}\n", "defaults.redact.0", 2, "not a valid regular expression"),
        ("hosts: {a: {}}\ngroups:\n  g:\n    vars: {jump: [b]}\n", "groups.g.vars.jump.0", 4, "'b' is not a host"),
        ("hosts: {a: {}}\ngroups:\n  g: {vars: {forks: 0}}\n", "groups.g.vars.forks", 3, "a positive integer, got 0"),
        ("hosts: {a: {}}\ngroups:\n  g: {vars: {name: x}}\n", "groups.g.vars.name", 3, "'name' cannot be set here"),
        ("hosts: {a: {}}\ngroups:\n  g: {hosts: a}\n", "groups.g.hosts", 3, "expected a list of strings, got 'a'"),
        ("hosts: {a: {limits: {nice: 40}}}\n", "hosts.a.limits.nice", 1, "an integer from 0 to 19, got 40"),
        ("hosts: {a: {limits: 5}}\n", "hosts.a.limits", 1, "a mapping with any of the keys cpu_seconds"),
        ("hosts:\n  a:\n    approve:\n      - {regex: '('}\n", "hosts.a.approve.0.regex", 4, "not a valid regular"),
        ("defaults: {approve: [sudo]}\nhosts: {a: {}}\n", "defaults.approve", 1, "'sudo' is not a class of commands"),
    ],
)
def test_errors_in_every_section(tmp_path: Path, text: str, field: str, line: int, message: str) -> None:
    error = load_error(tmp_path, text)
    assert (error.field, error.line) == (field, line)
    assert message in str(error)


def test_group_depth_and_cycles_through_graphlib(tmp_path: Path) -> None:
    # A diamond: top contains left and right, both contain bottom; bottom's vars win, then by name.
    inv = load_inventory(
        write(
            tmp_path,
            """\
            hosts: {h: {}}
            groups:
              bottom: {hosts: [h], vars: {user: bottom}}
              right: {children: [bottom], vars: {user: right, port: 2}}
              left: {children: [bottom], vars: {user: left, port: 1, command_timeout: 9}}
              top: {children: [left, right], vars: {command_timeout: 1, connect_timeout: 3}}
            """,
        )
    )
    h = inv.hosts["h"]
    assert (h.user, h.port, h.command_timeout, h.connect_timeout) == ("bottom", 2, 9, 3)
    assert inv.groups["top"] == ["h"]
    error = load_error(tmp_path, "hosts: {a: {}}\ngroups:\n  b: {}\n  g: {children: [g]}\n")
    assert "groups contain each other in a cycle: g -> g" in str(error)
    assert (error.field, error.line) == ("groups.g.children", 4)
    error = load_error(tmp_path, "hosts:\n  x: {}\n  c: {jump: [a]}\n  a: {jump: [b]}\n  b: {jump: [c]}\n")
    assert "jump hosts form a cycle: c -> a -> b -> c" in str(error)
    assert error.line == 3


class _WithUnion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    approve: bool | Literal["ask"] = False


def test_a_value_no_union_member_takes_is_one_problem_at_its_own_path() -> None:
    doc, lines = parse_yaml("# a union field\napprove: maybe\n", "f.yaml")
    with pytest.raises(InventoryError) as info:
        validate_file(doc, "f.yaml", lines, _WithUnion)
    assert (info.value.field, info.value.line) == ("approve", 2)
    assert str(info.value) == "f.yaml:2: approve: expected true or false or 'ask', got 'maybe'"


def test_every_path_field_is_relative_to_the_inventory(tmp_path: Path) -> None:
    fields = [name for name, info in Host.model_fields.items() if info.annotation == Path | None]
    assert {"identity_file", "known_hosts"} <= set(fields)  # and any path field added later
    body = ", ".join(f"{name}: keys/{name}" for name in fields)
    host = load_inventory(write(tmp_path, f"hosts:\n  h: {{{body}}}\n")).hosts["h"]
    assert {name: getattr(host, name) for name in fields} == {name: tmp_path / "keys" / name for name in fields}


@pytest.mark.parametrize(("setting", "value", "said"), [
    ("command_timeout", ".inf", "expected a finite number, got inf"),
    ("max_timeout", ".nan", "expected a finite number, got nan"),
    ("port", "true", "a number is needed here, not true"),
    ("connect_timeout", "true", "a number is needed here, not true"),
    ("forks", "yes", "a number is needed here, not true"),
    ("limits", None, "a number is needed here, not true"),
])
def test_numbers_are_finite_and_never_booleans(tmp_path: Path, setting: str, value: str | None, said: str) -> None:
    """`.inf` would be a call with no deadline, and YAML's `true` read as 1 a port or a one-second
    deadline: each is an error at its line."""
    line = f"    {setting}: {value}\n" if value is not None else "    limits: {cpu_seconds: true}\n"
    err = load_error(tmp_path, "hosts:\n  a:\n    hostname: 127.0.0.1\n" + line)
    assert said in str(err) and ":4:" in str(err), err
