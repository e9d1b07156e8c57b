"""Fan-out across real sshd hosts on loopback: statuses, limits, retries, recap and the coordinator tool."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from remote_bash import fleet
from remote_bash.audit import AuditLog
from remote_bash.errors import ConnectionLost, ConnectionRefused
from remote_bash.fleet import FleetPool, FleetProgress, FleetResult, HostBashTool, HostResult, SessionFactory
from remote_bash.inventory import Inventory, load_inventory
from remote_bash.models import CommandPolicy, CommandResult, Host
from remote_bash.session import RemoteBashSession

from .sshd import TestHosts, processes_with
from .waiting import wait_for

# Every host runs this; per-host env decides how it behaves.
COMMAND = 'sleep "${SLEEP:-0}"; echo "${MSG:-same}"; test -z "$FAIL"'


@dataclass
class Fleet:
    inventory: Inventory
    hosts: dict[str, Host]


def _inventory(hosts: list[Host], group_forks: dict[str, int] | None = None) -> Inventory:
    groups: dict[str, list[str]] = {}
    for host in hosts:
        for group in host.groups:
            groups.setdefault(group, []).append(host.name)
    return Inventory(hosts={h.name: h for h in hosts}, groups=groups, group_forks=group_forks or {})


_addresses = (f"127.0.1.{i}" for i in range(2, 255))


def _start(hosts: TestHosts, name: str, **fields: Any) -> Host:
    """Start a host on 127.0.1.x, away from the 127.0.0.x addresses other test modules count on."""
    return hosts.start(name, address=next(_addresses), **fields)


@pytest.fixture(scope="module")
def mixed(hosts: TestHosts) -> Fleet:
    """Hosts that each end differently; ``fleet`` is the group the tests select."""
    g = ["fleet"]
    made = [
        _start(hosts, "fl-a", groups=g),
        _start(hosts, "fl-b", groups=g),
        _start(hosts, "fl-c", groups=g, env={"MSG": "different"}),
        _start(hosts, "fl-fail", groups=g, env={"MSG": "broken", "FAIL": "1"}),
        _start(hosts, "fl-slow", groups=g, env={"SLEEP": "30"}, command_timeout=1),
        _start(hosts, "fl-deny", groups=g, policy=CommandPolicy(deny=[r"\bsleep\b"])),
        _start(hosts, "fl-down", groups=g),
        _start(hosts, "fl-bastion", groups=["infra"]),
    ]
    hosts.servers["fl-down"].stop()
    behind = _start(hosts, "fl-behind", groups=g, jump=["fl-bastion"])
    behind_down = behind.model_copy(update={"name": "fl-behind-down", "jump": ["fl-down"]})
    made += [behind, behind_down]
    return Fleet(_inventory(made), {h.name: h for h in made})


@pytest.fixture(scope="module")
def plain(hosts: TestHosts) -> Fleet:
    """Six well-behaved hosts, three of them in group ``db``."""
    made = [_start(hosts, f"fl-p{i}", groups=["plain", "db"] if i < 3 else ["plain"]) for i in range(6)]
    return Fleet(_inventory(made), {h.name: h for h in made})


# -- one command across a mixed fleet ----------------------------------------------------------


async def test_mixed_fleet_statuses_recap_files_and_audit(mixed: Fleet, tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "audit")
    started = time.monotonic()
    result = await fleet.exec(mixed.inventory, "fleet", COMMAND, forks=4,
                              session_factory=SessionFactory(mixed.inventory, audit=audit, kill_grace=0.3))
    elapsed = time.monotonic() - started
    by = result.by_host()
    assert [r.host for r in result.results] == [n for n in mixed.hosts if n != "fl-bastion"]
    assert {n: r.status for n, r in by.items()} == {
        "fl-a": "ok", "fl-b": "ok", "fl-c": "ok", "fl-fail": "failed", "fl-slow": "timed_out",
        "fl-deny": "refused", "fl-down": "unreachable", "fl-behind": "ok", "fl-behind-down": "unreachable",
    }
    assert elapsed < 10, "the slow host must not hold up the run beyond its own deadline"
    assert (by["fl-a"].exit_code, by["fl-a"].output, by["fl-a"].first_line) == (0, "same\n", "same")
    assert (by["fl-fail"].exit_code, by["fl-fail"].output) == (1, "broken\n")
    assert by["fl-slow"].exit_code is None
    assert "within 1 s" in (by["fl-slow"].error or "")
    assert (by["fl-deny"].error_type, by["fl-deny"].attempts) == ("PolicyDenied", 0)
    assert (by["fl-down"].error_type, by["fl-down"].attempts) == ("ConnectionRefused", 1)
    assert by["fl-behind-down"].error_type == "ConnectionRefused"
    assert (by["fl-behind-down"].error or "").startswith("fl-down: "), "it names the jump host that failed"
    assert (result.ok, result.exit_code) == (False, 2)
    assert result.counts == {"ok": 4, "failed": 1, "unreachable": 2, "timed_out": 1, "refused": 1}

    groups = [(g.output, g.hosts) for g in result.groups()]
    assert groups == [("same", ["fl-a", "fl-b", "fl-behind"]), ("different", ["fl-c"]),
                      ("broken", ["fl-fail"])]

    recap = fleet.format_recap(result)
    lines = recap.splitlines()
    assert lines[0].split() == ["HOST", "STATUS", "EXIT", "TIME", "OUTPUT"]
    row = {line.split()[0]: line.split() for line in lines[1:10]}
    assert [row["fl-a"][i] for i in (1, 2, 4)] == ["ok", "0", "same"]
    assert [row["fl-fail"][i] for i in (1, 2, 4)] == ["failed", "1", "broken"]
    assert row["fl-down"][1:3] == ["unreachable", "-"]
    assert "refused" in " ".join(row["fl-down"])
    assert row["fl-deny"][1] == "refused"
    assert "9 hosts in" in recap
    assert "4 ok, 1 failed, 2 unreachable, 1 timed_out, 1 refused" in recap
    assert "3 hosts: same\n  (fl-a, fl-b, fl-behind)" in recap

    paths = fleet.write_output_dir(result, tmp_path / "out")
    assert sorted(p.name for p in paths) == sorted(f"{n}.txt" for n in by)
    text = (tmp_path / "out" / "fl-fail.txt").read_text()
    assert text.startswith("# host: fl-fail\n# status: failed\n# exit: 1\n")
    assert text.endswith("\n\nbroken\n")
    assert "# error: connection to" in (tmp_path / "out" / "fl-down.txt").read_text()

    data = json.loads(result.to_json())
    assert (data["exit_code"], data["counts"]["ok"], len(data["results"])) == (2, 4, 9)
    fields = {k: v for k, v in data.items() if k in FleetResult.model_fields}
    assert FleetResult.model_validate(fields) == result

    events = {n: [r["event"] for r in audit.read(n)] for n in by}
    for name in ("fl-a", "fl-fail", "fl-behind"):
        assert events[name][:3] == ["session.start", "exec.start", "exec.end"], name
        assert audit.verify(name).ok
    assert "exec.kill" in events["fl-slow"]
    assert events["fl-deny"] == ["policy.denied"], "a refused command is audited and nothing is sent"
    assert "exec.start" not in events["fl-down"]


async def test_fleet_exec_alias_and_yaml_inventory(hosts: TestHosts, mixed: Fleet, tmp_path: Path) -> None:
    a, bastion = mixed.hosts["fl-a"], mixed.hosts["fl-bastion"]
    common = (f"user: {a.user}\n    identity_file: {a.identity_file}\n    known_hosts: {a.known_hosts}\n"
              "    credential: key\n")
    (tmp_path / "inv.yaml").write_text(
        "hosts:\n"
        f"  jumpbox:\n    hostname: {bastion.hostname}\n    port: {bastion.port}\n    {common}"
        f"  inner:\n    hostname: {a.hostname}\n    port: {a.port}\n    jump: [jumpbox]\n    {common}"
        "groups:\n  app:\n    hosts: [inner]\n    forks: 1\n"
    )
    inventory = load_inventory(tmp_path / "inv.yaml")
    assert fleet.fleet_exec is fleet.exec
    result = await fleet.fleet_exec(inventory, "app", "echo $((6 * 7))")
    assert [(r.host, r.status, r.output) for r in result.results] == [("inner", "ok", "42\n")]
    assert (result.exit_code, result.ok, result.pattern) == (0, True, "app")


# -- limits --------------------------------------------------------------------------------------


class _Counting:
    """A session factory that records when each host's command ran, to check the limits."""

    def __init__(self, inventory: Inventory) -> None:
        self.inner = SessionFactory(inventory)
        self.spans: dict[str, tuple[float, float]] = {}

    def __call__(self, host: Host) -> RemoteBashSession:
        session = self.inner(host)
        spans = self.spans
        run = session.run

        async def timed(command: str, timeout: float | None = None, **kw: Any) -> CommandResult:
            begin = time.monotonic()
            try:
                return await run(command, timeout, **kw)
            finally:
                spans[host.name] = (begin, time.monotonic())

        session.run = timed  # type: ignore[method-assign]
        return session

    def most_at_once(self, names: list[str]) -> int:
        edges = sorted([(s, 1) for n, (s, _e) in self.spans.items() if n in names]
                       + [(e, -1) for n, (_s, e) in self.spans.items() if n in names])
        level = peak = 0
        for _t, step in edges:
            level += step
            peak = max(peak, level)
        return peak


async def test_forks_bounds_concurrency(plain: Fleet) -> None:
    counting = _Counting(plain.inventory)
    snapshots: list[FleetProgress] = []
    result = await fleet.exec(plain.inventory, "plain", "sleep 0.3; echo done", forks=2,
                              session_factory=counting, on_progress=snapshots.append)
    assert (result.ok, len(result.results)) == (True, 6)
    assert counting.most_at_once(list(plain.hosts)) <= 2
    assert result.duration > 0.85, "6 hosts two at a time take three rounds of 0.3 s"
    assert max(s.running for s in snapshots) <= 2
    assert (snapshots[-1].done, snapshots[-1].running, snapshots[-1].waiting) == (6, 0, 0)
    assert [s.done for s in snapshots if s.last is not None] == [1, 2, 3, 4, 5, 6]


async def test_group_forks_bound_hosts_of_a_group(plain: Fleet) -> None:
    inventory = plain.inventory.model_copy(update={"group_forks": {"db": 1}})
    counting = _Counting(inventory)
    result = await fleet.exec(inventory, "plain", "sleep 0.3", forks=10, session_factory=counting)
    assert result.ok
    db = [n for n, h in plain.hosts.items() if "db" in h.groups]
    assert counting.most_at_once(db) == 1
    assert counting.most_at_once(list(plain.hosts)) > 1, "the other group's hosts are not held back"


async def test_fail_fast_skips_hosts_not_started(mixed: Fleet) -> None:
    hosts = [mixed.hosts[n] for n in ("fl-fail", "fl-a", "fl-b")]
    async with FleetPool(mixed.inventory, forks=1) as pool:
        result = await pool.run(hosts, COMMAND, fail_fast=True)
    assert [r.status for r in result.results] == ["failed", "skipped", "skipped"]
    assert "fail_fast" in (result.results[1].error or "")
    assert result.exit_code == 2


async def test_cancelling_kills_remote_commands_and_closes_sessions(plain: Fleet, hosts: TestHosts) -> None:
    mark = f"29.{time.monotonic_ns()}"  # a sleep length no other test uses, to find its processes
    opened: list[RemoteBashSession] = []
    factory = SessionFactory(plain.inventory, kill_grace=0.3)

    def tracking(host: Host) -> RemoteBashSession:
        opened.append(factory(host))
        return opened[-1]

    task = asyncio.create_task(fleet.exec(plain.inventory, "plain", f"sleep {mark}", forks=3,
                                          session_factory=tracking))
    await wait_for(lambda: len(processes_with(mark, hosts.user)) >= 3, within=10, what="the command on all three hosts",
                   show=lambda: processes_with(mark, hosts.user))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(opened) == 3, "hosts not started yet are never connected"
    assert all(s.state.value == "closed" for s in opened)
    assert processes_with(mark, hosts.user) == []


# -- connections: reuse and retry ---------------------------------------------------------------


async def test_pool_reuses_each_hosts_session(plain: Fleet) -> None:
    async with FleetPool(plain.inventory, forks=3) as pool:
        first = await pool.run("plain", "cd /tmp && export SEEN=yes && echo $$")
        again = await pool.run("plain", "echo $$ $PWD $SEEN")
        shells = {r.host: r.output.strip() for r in first.results}
        assert all(r.output == f"{shells[r.host]} /tmp yes\n" for r in again.results)
        sessions = dict(pool.sessions)
    assert all(s.state.value == "closed" for s in sessions.values())


class _FlakyProxy:
    """A TCP proxy in front of a real sshd that resets the first ``drop`` connections before the
    SSH banner, as sshd does to connections past MaxStartups."""

    def __init__(self, target: Host, drop: int) -> None:
        self.target, self.drop, self.accepted = target, drop, 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, self.target.hostname, 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.accepted <= self.drop:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(self.target.hostname, self.target.port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


@pytest.fixture
async def flaky(mixed: Fleet, tmp_path: Path) -> AsyncIterator[tuple[_FlakyProxy, Host]]:
    target = mixed.hosts["fl-b"]
    proxy = _FlakyProxy(target, drop=2)
    port = await proxy.start()
    known = tmp_path / "known_hosts"
    line = next(x for x in target.known_hosts.read_text().splitlines()  # type: ignore[union-attr]
                if x.startswith(f"[{target.hostname}]:{target.port} "))
    known.write_text(line.replace(f":{target.port} ", f":{port} ") + "\n")
    yield proxy, target.model_copy(update={"name": "fl-flaky", "port": port, "known_hosts": known})
    assert proxy.server is not None
    proxy.server.close()


async def test_dropped_handshakes_are_retried(flaky: tuple[_FlakyProxy, Host]) -> None:
    proxy, host = flaky
    result = await fleet.exec(_inventory([host]), "all", "echo through")
    assert [(r.status, r.output, r.attempts) for r in result.results] == [("ok", "through\n", 3)]
    assert proxy.accepted == 3


async def test_retries_give_up_after_the_last_attempt(flaky: tuple[_FlakyProxy, Host]) -> None:
    proxy, host = flaky
    proxy.drop = 100
    async with FleetPool(_inventory([host]), connect_attempts=2, retry_delays=[0.01]) as pool:
        r = (await pool.run("all", "echo never")).results[0]
    assert (r.status, r.attempts, r.error_type) == ("unreachable", 2, "ConnectionLost")
    assert proxy.accepted == 2


class _ScriptedSession(RemoteBashSession):
    """A session whose start and run fail as told, to count what the pool retries."""

    start_errors: list[Exception]
    run_error: Exception | None = None
    starts = runs = 0

    async def start(self) -> None:
        type(self).starts += 1
        if self.start_errors:
            raise self.start_errors.pop(0)

    async def run(self, command: str, timeout: float | None = None, **kw: Any) -> CommandResult:
        type(self).runs += 1
        if self.run_error is not None:
            raise self.run_error
        return CommandResult(command=command, output="fine\n", exit_code=0)


@pytest.fixture
def scripted() -> type[_ScriptedSession]:
    return type("Scripted", (_ScriptedSession,), {"start_errors": [], "starts": 0, "runs": 0})


async def test_a_command_is_never_retried(plain: Fleet, scripted: type[_ScriptedSession]) -> None:
    host = plain.hosts["fl-p0"]
    scripted.run_error = ConnectionLost("lost mid-command", host=host.name, partial_output="half")
    pool = FleetPool(_inventory([host]), session_factory=scripted, retry_delays=[0.01])
    async with pool:
        r = await pool.run_on(host, "touch /tmp/once")
    assert (r.status, r.error_type, r.output, scripted.runs) == ("error", "ConnectionLost", "half", 1)


async def test_only_dropped_connects_are_retried(plain: Fleet, scripted: type[_ScriptedSession]) -> None:
    host = plain.hosts["fl-p0"]
    scripted.start_errors = [ConnectionLost("dropped", host=host.name),
                             ConnectionRefused("refused", host=host.name)]
    async with FleetPool(_inventory([host]), session_factory=scripted, retry_delays=[0.01]) as pool:
        r = await pool.run_on(host, "true")
    assert (r.status, r.error_type, r.attempts, scripted.starts, scripted.runs) == (
        "unreachable", "ConnectionRefused", 2, 2, 0)


async def test_a_crashing_host_does_not_end_the_run(plain: Fleet, scripted: type[_ScriptedSession]) -> None:
    scripted.run_error = KeyError("bug")
    result = await fleet.exec(plain.inventory, "plain", "true", session_factory=scripted)
    assert {r.status for r in result.results} == {"error"}
    assert {r.error_type for r in result.results} == {"KeyError"}


# -- pure result logic -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("statuses", "code"),
    [([], 0), (["ok", "ok"], 0), (["ok", "failed"], 1), (["refused", "ok"], 1),
     (["failed", "unreachable"], 2), (["timed_out"], 2), (["error"], 2), (["failed", "skipped"], 2)],
)
def test_exit_code(statuses: list[str], code: int) -> None:
    results = [HostResult(host=f"h{i}", status=s) for i, s in enumerate(statuses)]  # type: ignore[arg-type]
    assert FleetResult(command="x", pattern="all", results=results).exit_code == code


def test_groups_ignore_trailing_whitespace_and_hosts_that_did_not_run() -> None:
    results = [
        HostResult(host="a", status="ok", output="x\n"),
        HostResult(host="b", status="unreachable", error="down"),
        HostResult(host="c", status="ok", output="y\n"),
        HostResult(host="d", status="failed", output="x  \n\n", exit_code=3),
        HostResult(host="e", status="ok", output="y"),
        HostResult(host="f", status="ok", output=""),
    ]
    groups = FleetResult(command="x", pattern="all", results=results).groups()
    assert [(g.output, g.hosts) for g in groups] == [("x", ["a", "d"]), ("y", ["c", "e"]), ("", ["f"])]
    recap = fleet.format_recap(FleetResult(command="x", pattern="all", results=results))
    assert "1 host: (no output)\n  (f)" in recap
    long = HostResult(host="g", status="ok", output="".join(f"line {i}\n" for i in range(30)))
    recap = fleet.format_recap(FleetResult(command="x", pattern="all", results=[long]))
    assert "1 host (g):\n  line 0\n" in recap
    assert "  line 19\n  ... 10 more lines" in recap
    assert "line 20" not in recap


def test_write_output_dir_keeps_names_apart(tmp_path: Path) -> None:
    results = [HostResult(host="a/b", status="ok", output="1"),
               HostResult(host="a_b", status="ok", output="2"),
               HostResult(host="..", status="ok", output="3")]
    paths = fleet.write_output_dir(FleetResult(command="x", pattern="all", results=results), tmp_path)
    assert [p.name for p in paths] == ["a_b.txt", "a_b-2.txt", "_.txt"]
    assert all(p.parent == tmp_path for p in paths)


# -- the coordinator's tool --------------------------------------------------------------------


async def test_host_bash_tool_dispatches_per_host(mixed: Fleet) -> None:
    names = ["fl-a", "fl-b", "fl-deny", "fl-down"]
    chunks: list[tuple[str, str]] = []
    async with FleetPool(mixed.inventory) as pool:
        tool = HostBashTool(pool, [mixed.hosts[n] for n in names], timeout=10,
                            on_output=lambda host, text: chunks.append((host, text)))
        spec = tool.to_dict()
        assert spec["name"] == "remote_bash"
        assert spec["input_schema"]["properties"]["host"]["enum"] == names
        assert "bash_20250124" not in json.dumps(spec)

        async def call(n: int, **tool_input: Any) -> dict[str, Any]:
            return await tool.handle({"id": f"t{n}", "name": "remote_bash", "input": tool_input})

        assert (await call(1, host="fl-a", command="cd /tmp"))["is_error"] is False
        a = await call(2, host="fl-a", command="pwd")
        b = await call(3, host="fl-b", command="cd / && pwd")
        assert (a["content"], a["tool_use_id"], b["content"]) == ("/tmp\n", "t2", "/\n")
        assert ("fl-a", "/tmp\n") in chunks

        failed = await call(4, host="fl-b", command="echo oops; exit_code() { return 3; }; exit_code")
        assert (failed["is_error"], failed["content"]) == (True, "oops\nExit status 3")
        unknown = await call(5, host="fl-zzz", command="true")
        assert unknown["is_error"]
        assert all(n in unknown["content"] for n in names)
        denied = await call(6, host="fl-deny", command="sleep 1")
        assert denied["is_error"]
        assert "refused" in denied["content"]
        down = await call(7, host="fl-down", command="true")
        assert down["is_error"]
        assert "could not reach fl-down" in down["content"]
        restarted = await call(8, host="fl-a", restart=True)
        assert not restarted["is_error"]
        assert "restarted" in restarted["content"]
        assert (await call(9, host="fl-a", command="pwd"))["content"] != "/tmp\n"
        bad = await call(10, host="fl-a")
        assert bad["is_error"]
        assert "command" in bad["content"]
        other = await tool.handle({"id": "t11", "name": "bash", "input": {}})
        assert other["is_error"]
        assert "remote_bash" in other["content"]


# -- the package's shape ----------------------------------------------------------------------------

FLEET_ORDER = ["results", "pool", "recap", "host_tool", "conversation", "per_host", "coordinator", "runner"]


def _imports(path: Path) -> set[str]:
    """The remote_bash modules ``path`` imports at run time, anywhere in the file (functions
    included), ``if TYPE_CHECKING:`` blocks aside."""
    import ast

    package = "remote_bash" + "".join(f".{p}" for p in path.parent.relative_to(Path(fleet.__file__).parents[1]).parts)
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = f"{base}.{node.module}".strip(".") if node.module else base
            if node.module:
                found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m.startswith("remote_bash.")}


def test_the_fleet_packages_modules_import_downwards_only() -> None:
    root = Path(fleet.__file__).parent
    assert sorted(p.stem for p in root.glob("*.py")) == sorted([*FLEET_ORDER, "__init__"])
    for index, name in enumerate(FLEET_ORDER):
        inside = {m.split(".")[2] for m in _imports(root / f"{name}.py") if m.startswith("remote_bash.fleet.")}
        above = inside - set(FLEET_ORDER[:index])
        assert not above, f"fleet.{name} imports {above}, which are not below it"
    # Nothing below the fleet imports it back (the CLI, above it, may).
    package = root.parent
    for path in package.glob("*.py"):
        assert not {m for m in _imports(path) if m.startswith("remote_bash.fleet")}, path.name


def test_the_gate_the_session_and_the_facts_are_in_no_import_cycle() -> None:
    package = Path(fleet.__file__).parents[1]

    def module_path(name: str) -> Path | None:
        rel = Path(*name.split(".")[1:])
        if not rel.parts:
            return None
        for candidate in (package / rel.with_suffix(".py"), package / rel / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            path = module_path(todo.pop())
            if path is None:
                continue
            for m in _imports(path):
                if m not in seen and module_path(m) is not None:
                    seen.add(m)
                    todo.append(m)
        return seen

    for name in ("remote_bash.access", "remote_bash.facts", "remote_bash.session", "remote_bash.fleet.pool",
                 "remote_bash.fleet.runner", "remote_bash.fleet.coordinator"):
        assert name not in reach(name), f"{name} imports itself back"
