"""The plain data classes: validated as pydantic validates them, read back without it, the same either way."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from remote_bash._plain import NotValid, from_json, twin
from remote_bash.fleet.results import FleetResult, HostResult
from remote_bash.inventory import Inventory
from remote_bash.models import (
    CommandResult,
    Host,
    KillReport,
    RegexApproveRule,
    ResourceLimits,
    WritesOutsideRule,
)

ROOT = Path(__file__).resolve().parent.parent


def test_importing_the_models_loads_no_pydantic() -> None:
    script = ("import sys, remote_bash.models, remote_bash.inventory, remote_bash.session, remote_bash.fleet.results\n"
              "found = [m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')]\n"
              "assert not found, found\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_a_host_made_in_code_is_validated_and_coerced_as_pydantic_does() -> None:
    host = Host(name="web", hostname="10.0.0.1", port="2222", identity_file="keys/web",  # type: ignore[arg-type]
                limits={"nice": 5}, approve=["privilege", {"regex": "reboot"}, {"writes_outside": ["/srv"]}])
    assert host.port == 2222 and host.identity_file == Path("keys/web")
    assert host.limits == ResourceLimits(nice=5)
    assert host.approve == ["privilege", RegexApproveRule(regex="reboot"), WritesOutsideRule(writes_outside=["/srv"])]
    assert host.address == "10.0.0.1:2222"


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"name": "", "hostname": "h"}, "name"),
        ({"name": "a", "hostname": "h", "port": 0}, "port"),
        ({"name": "a", "hostname": "h", "port": True}, "port"),
        ({"name": "a", "hostname": "h", "command_timeout": float("inf")}, "command_timeout"),
        ({"name": "a", "hostname": "h", "nmae": "x"}, "nmae"),
        ({"name": "a", "hostname": "h", "env": {"1X": "y"}}, "env"),
        ({"name": "a", "hostname": "h", "limits": {"nice": 20}}, "limits.nice"),
        ({"name": "a", "hostname": "h", "edit": {"deny": ["etc"]}}, "edit.deny"),
        ({"name": "a", "hostname": "h", "approve": ["sudo"]}, "approve"),
        ({"hostname": "h"}, "name"),
    ],
)
def test_a_bad_value_is_pydantics_error_naming_the_field(data: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Host(**data)
    assert caught.value.title == "Host"
    assert ".".join(str(part) for part in caught.value.errors()[0]["loc"]).startswith(where)


def test_a_host_is_frozen_and_equal_by_value() -> None:
    host = Host(name="a", hostname="h")
    with pytest.raises(dataclasses.FrozenInstanceError):
        host.port = 23  # type: ignore[misc]
    assert host == Host(name="a", hostname="h") != Host(name="a", hostname="h", port=23)
    assert host != host.model_copy(update={"port": 23}) == Host(name="a", hostname="h", port=23)
    assert pickle.loads(pickle.dumps(host)) == host == copy.deepcopy(host)  # noqa: S301 -- our own bytes
    with pytest.raises(ValueError, match="no field prot"):
        host.model_copy(update={"prot": 1})


def test_an_instance_given_to_another_is_kept_not_copied() -> None:
    limits = ResourceLimits(nice=3)
    hosts = {"a": Host(name="a", hostname="h", limits=limits)}
    assert hosts["a"].limits is limits
    assert Inventory(hosts=hosts).hosts["a"] is hosts["a"]
    assert Host.model_validate(hosts["a"]) is hosts["a"]


def test_the_dump_is_pydantics() -> None:
    host = Host(name="a", hostname="h", identity_file=Path("/k"), approve=[{"regex": "x"}])
    assert twin(Host).model_validate(host.model_dump()).model_dump(mode="json") == host.model_dump(mode="json")
    dumped = host.model_dump(mode="json")
    assert dumped["identity_file"] == "/k" and dumped["approve"] == [{"regex": "x"}] and "_origin" not in dumped
    assert host.model_dump()["identity_file"] == Path("/k")
    assert json.loads(host.model_dump_json()) == dumped
    assert "jump" in Host.model_fields and Host.model_json_schema()["title"] == "Host"


def test_a_pydantic_model_may_hold_one() -> None:
    from pydantic import BaseModel

    class Holder(BaseModel):
        host: Host
        result: CommandResult | None = None

    host = Host(name="a", hostname="h", identity_file=Path("/k"))
    assert Holder(host=host).host is host
    made = Holder.model_validate({"host": {"name": "b", "hostname": "h", "port": "23"}})
    assert made.host == Host(name="b", hostname="h", port=23)
    assert Holder(host=host).model_dump(mode="json")["host"]["identity_file"] == "/k"
    assert Holder.model_validate_json(Holder(host=host).model_dump_json()).host == host
    with pytest.raises(ValidationError):
        Holder.model_validate({"host": {"name": "", "hostname": "h"}})


def test_a_result_made_by_the_session_equals_the_validated_one() -> None:
    values: dict[str, Any] = {
        "command": "true", "output": "x", "exit_code": None, "timed_out": True, "truncated": False,
        "shell_lost": False, "duration": 1.5, "output_bytes": 1, "output_sha256": "ab", "timeout": 2.0,
        "kill": KillReport(signals=["INT", "KILL"], survivors=1), "audit_error": None}
    made = CommandResult._from_session(**values)
    assert made == CommandResult(**values) and made.model_dump() == CommandResult(**values).model_dump()
    assert not made.ok and made.kill == KillReport._trusted(signals=["INT", "KILL"], survivors=1)


def test_fleet_results_dump_as_json() -> None:
    result = FleetResult._trusted(command="uname", pattern="all", results=[
        HostResult._trusted(host="a", status="ok", exit_code=0, output="Linux\n", first_line="Linux"),
        HostResult._trusted(host="b", status="ok", exit_code=0, output="Linux\n", first_line="Linux")])
    assert json.loads(result.to_json())["results"][1]["host"] == "b"
    assert [(g.output, g.hosts) for g in result.groups()] == [("Linux", ["a", "b"])]
    with pytest.raises(ValidationError):
        HostResult(host="a", status="fine")  # type: ignore[arg-type]


# -- reading a dump back without pydantic ---------------------------------------------------------------------

names = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)
texts = st.text(max_size=12)
patterns = texts.map(re.escape)  # any text, as a pattern the linear-time engine compiles
hosts = st.builds(
    dict,
    name=names,
    hostname=names,
    port=st.integers(1, 65535),
    user=st.none() | names,
    identity_file=st.none() | st.sampled_from(["/k", "keys/a b", "~/.ssh/id"]),
    host_key_policy=st.sampled_from(["strict", "accept-new"]),
    credential=st.sampled_from(["auto", "agent", "key", "keyring"]),
    jump=st.lists(names, max_size=2),
    labels=st.dictionaries(names, texts, max_size=2),
    # No NUL in an environment value: the model refuses one (what bash would drop in silence).
    env=st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,5}", fullmatch=True),
                        st.text(st.characters(exclude_characters="\x00"), max_size=12), max_size=2),
    command_timeout=st.floats(0.001, 1e6),
    keepalive_interval=st.floats(0, 100) | st.integers(0, 100),
    output_limit=st.integers(200, 10**6),
    limits=st.builds(dict, nice=st.none() | st.integers(0, 19), open_files=st.none() | st.integers(16, 4096)),
    policy=st.builds(dict, allow=st.none() | st.lists(names, max_size=2), deny=st.lists(patterns, max_size=2),
                     allow_operators=st.booleans()),
    edit=st.builds(dict, deny=st.lists(st.just("/etc"), max_size=1), read_only=st.booleans()),
    redact=st.lists(patterns, max_size=2),
    forks=st.none() | st.integers(1, 50),
    approve=st.none() | st.sampled_from(["never", "all"]) | st.lists(
        st.sampled_from(["privilege", "packages"]) | st.builds(dict, regex=patterns)
        | st.builds(dict, writes_outside=st.lists(st.just("/srv"), min_size=1, max_size=2)), max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(hosts)
def test_a_dump_reads_back_equal_without_pydantic(data: dict[str, Any]) -> None:
    host = Host(**data)
    dumped = json.loads(json.dumps(host.model_dump(mode="json")))
    assert from_json(Host, dumped) == host
    assert from_json(Host, dumped).model_dump(mode="json") == dumped


@settings(max_examples=150, deadline=None)
@given(hosts, st.sampled_from(["port", "command_timeout", "host_key_policy", "limits", "approve", "env", "labels",
                                "identity_file", "jump", "forks"]),
       st.sampled_from([None, True, "x", -1, 0, 1.5, [], {}, ["x"], {"a": 1}, float("nan")]))
def test_a_value_the_model_refuses_is_refused_by_the_check(data: dict[str, Any], field: str, value: Any) -> None:
    """Whatever the check takes, pydantic takes too, and gives the same host: the check is never the
    looser of the two."""
    dumped = Host(**data).model_dump(mode="json")
    dumped[field] = value
    try:
        checked = from_json(Host, dumped)
    except NotValid:
        return
    assert Host.model_validate(dumped) == checked


def test_a_record_is_made_and_compared_as_a_dataclass_is() -> None:
    from remote_bash._plain import Record, factory

    class Point(Record):
        x: int
        y: int = 0

    class Scan(Record, frozen=False):
        count: int = 0
        seen: list[int] = factory(list)

    a, b = Point(1), Point(x=1, y=0)
    assert a == b and hash(a) == hash(b) and repr(a) == "Point(x=1, y=0)" and a != Point(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.x = 2  # type: ignore[misc]
    with pytest.raises(TypeError, match="no value for 'x'"):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="twice"):
        Point(1, x=2)  # type: ignore[misc]
    with pytest.raises(TypeError, match="no field z"):
        Point(1, z=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes 2 values"):
        Point(1, 2, 4)  # type: ignore[call-arg]
    scan = Scan()
    scan.count += 1
    scan.seen.append(1)
    assert scan == Scan(1, [1]) and Scan().seen == [] and copy.deepcopy(scan) == scan
    with pytest.raises(TypeError):
        hash(scan)


@pytest.mark.parametrize(("fields", "said"), [
    ({"redact": ["(?<=x)y"]}, r"redact pattern '\(\?<=x\)y' cannot be used: it uses a lookahead or lookbehind"),
    ({"approve": [{"regex": "a\\1"}]}, r"approve regex 'a\\\\1' cannot be used: it uses a backreference"),
    ({"policy": {"deny": ["ok", "(b"]}}, r"policy\.deny\.1\n.*deny pattern '\(b' cannot be used"),
])
def test_a_pattern_the_engine_cannot_run_is_refused_where_the_host_is_made(fields: dict[str, Any], said: str) -> None:
    # Not at the first command: a Host built in code is checked as an inventory's host is.
    with pytest.raises(ValidationError, match=said):
        Host(name="web-1", hostname="10.0.0.5", **fields)
