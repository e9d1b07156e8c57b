"""Benchmark: ``remote_bash.fleet.exec`` against the alternatives, on N real sshd on loopback.

Starts max(N) OpenSSH sshd on 127.0.0.2, 127.0.0.3, ... (concurrently, with the test suite's
helpers), then for each N runs ``uname -a`` on the first N hosts with:

  asyncssh gather       asyncio.gather of asyncssh.connect + conn.run per host (in-process):
                        the floor for an asyncio client, and the reference of the ratios
  RemoteBashSession     start + run + close of a bare session per host, gathered (in-process):
                        what fleet.exec costs without the fleet layer
  fleet.exec            remote_bash.fleet.exec, in-process, forks=N, forks=10, and forks=N with
                        an AuditLog (what the CLI does)
  remote-bash CLI       ``remote-bash --inventory X fleet exec --forks N all -- uname -a``
  parallel-ssh          ParallelSSHClient in a child process (timed inside it)
  ssh & wait            OpenSSH, one ``ssh ... &`` per host, then ``wait``
  ansible               ``ansible all -m shell -a 'uname -a' -f N`` with pipelining

In-process and parallel-ssh times start when the client starts connecting; the CLI, ssh and
ansible times are wall times of the whole process, start-up included (what a user waits for).
Then client memory per open session at the largest N: VmRSS growth / N in a fresh child
process, sessions held open.

Run: python bench/bench_fleet.py [--sizes 10,30,100] [--repeat 3] [--skip ansible,parallel-ssh]
All traffic stays on loopback; every subprocess has a timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncssh

from remote_bash import fleet
from remote_bash.audit import AuditLog
from remote_bash.inventory import Inventory, load_inventory
from remote_bash.models import Host
from remote_bash.session import RemoteBashSession
from tests.sshd import TestHosts, make_test_hosts

COMMAND = "uname -a"
SUBPROCESS_TIMEOUT = 600


# -- setup ---------------------------------------------------------------------------------------


def start_hosts(th: TestHosts, count: int) -> list[Host]:
    """Start ``count`` sshd concurrently on 127.0.0.2 ... (start_sshd blocks, so threads)."""
    if count > 250:
        raise SystemExit("at most 250 hosts fit on 127.0.0.2 .. 127.0.0.251")
    names = [f"h{i:03d}" for i in range(count)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(lambda i: th.start(names[i], address=f"127.0.0.{i + 2}"), range(count)))


def write_inventory(path: Path, hosts: list[Host]) -> Path:
    lines = ["hosts:"]
    for h in hosts:
        lines += [f"  {h.name}:", f"    hostname: {h.hostname}", f"    port: {h.port}", f"    user: {h.user}",
                  f"    identity_file: {h.identity_file}", f"    known_hosts: {h.known_hosts}",
                  "    credential: key"]
    path.write_text("\n".join(lines) + "\n")
    return path


def timed(fn: Callable[[], float | None], repeat: int) -> float | None:
    """Median of ``repeat`` runs of ``fn`` (which returns its own time, or None when skipped)."""
    times = []
    for _ in range(repeat):
        t = fn()
        if t is None:
            return None
        times.append(t)
    return statistics.median(times)


def wall(cmd: list[str], env: dict[str, str] | None = None,
         check: Callable[[str], bool] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, env=env,
                          check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0 or (check is not None and not check(proc.stdout)):
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-800:]}")
    return elapsed


# -- the contenders ------------------------------------------------------------------------------


async def _asyncssh_gather(hosts: list[Host]) -> float:
    async def one(h: Host) -> str:
        async with asyncssh.connect(h.hostname, port=h.port, username=h.user,
                                    client_keys=[str(h.identity_file)], known_hosts=str(h.known_hosts),
                                    agent_path=None, config=None) as conn:
            result = await conn.run(COMMAND, check=True)
            return str(result.stdout)

    start = time.perf_counter()
    outputs = await asyncio.gather(*(one(h) for h in hosts))
    elapsed = time.perf_counter() - start
    assert all(o.startswith("Linux") for o in outputs)
    return elapsed


def asyncssh_gather(hosts: list[Host]) -> float:
    return asyncio.run(_asyncssh_gather(hosts))


def raw_sessions(hosts: list[Host]) -> float:
    """RemoteBashSession start + run + close per host, gathered: fleet.exec without the fleet layer."""
    async def one(h: Host) -> str:
        async with RemoteBashSession(h, audit=False) as session:
            return (await session.run(COMMAND)).output

    async def go() -> float:
        start = time.perf_counter()
        outputs = await asyncio.gather(*(one(h) for h in hosts))
        elapsed = time.perf_counter() - start
        assert all(o.startswith("Linux") for o in outputs)
        return elapsed

    return asyncio.run(go())


def fleet_exec(inventory: Inventory, forks: int, audit_dir: Path | None = None) -> float:
    async def go() -> float:
        # Without an audit log unless one is given: the default would write to the user's own.
        factory = fleet.SessionFactory(inventory, audit=AuditLog(audit_dir) if audit_dir is not None else False)
        start = time.perf_counter()
        result = await fleet.exec(inventory, "all", COMMAND, forks=forks, session_factory=factory)
        elapsed = time.perf_counter() - start
        if not result.ok:
            raise RuntimeError(fleet.format_recap(result))
        return elapsed

    return asyncio.run(go())


def cli(inventory_file: Path, forks: int, audit_dir: Path) -> float | None:
    exe = shutil.which("remote-bash")
    if exe is None:
        return None
    cmd = [exe, "--inventory", str(inventory_file), "--audit-dir", str(audit_dir),
           "fleet", "exec", "--forks", str(forks), "all", "--", *shlex.split(COMMAND)]
    return wall(cmd)


_PSSH_CHILD = """
import json, sys, time
from pssh.config import HostConfig
spec = json.loads(sys.argv[1])
try:
    from pssh.clients.native import ParallelSSHClient
except ImportError:
    from pssh.clients import ParallelSSHClient
cfg = [HostConfig(port=h["port"], user=h["user"], private_key=h["key"]) for h in spec["hosts"]]
start = time.perf_counter()
client = ParallelSSHClient([h["address"] for h in spec["hosts"]], host_config=cfg,
                           pool_size=len(cfg), num_retries=1, timeout=60)
out = client.run_command(spec["command"])
client.join(out)
lines = [list(o.stdout or []) for o in out]
elapsed = time.perf_counter() - start
ok = sum(1 for o, l in zip(out, lines) if o.exit_code == 0 and l and l[0].startswith("Linux"))
print(json.dumps({"elapsed": elapsed, "ok": ok}))
"""


def parallel_ssh(hosts: list[Host]) -> float:
    spec = {"command": COMMAND, "hosts": [{"address": h.hostname, "port": h.port, "user": h.user,
                                           "key": str(h.identity_file)} for h in hosts]}
    proc = subprocess.run([sys.executable, "-c", _PSSH_CHILD, json.dumps(spec)], capture_output=True,
                          text=True, timeout=SUBPROCESS_TIMEOUT, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-800:])
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    if data["ok"] != len(hosts):
        raise RuntimeError(f"parallel-ssh: only {data['ok']} of {len(hosts)} hosts answered")
    return float(data["elapsed"])


def ssh_loop(hosts: list[Host], outdir: Path) -> float:
    outdir.mkdir(parents=True, exist_ok=True)
    parts = []
    for h in hosts:
        opts = (f"-i {h.identity_file} -o BatchMode=yes -o UserKnownHostsFile={h.known_hosts} "
                "-o StrictHostKeyChecking=yes -o ControlMaster=no -o ConnectTimeout=30 -F /dev/null")
        parts.append(f"ssh -q {opts} -p {h.port} {h.user}@{h.hostname} {shlex.quote(COMMAND)} "
                     f"> {outdir / h.name} 2>&1 &")
    elapsed = wall(["bash", "-c", "\n".join(parts) + "\nwait\n"])
    good = sum(1 for h in hosts if (outdir / h.name).read_text().startswith("Linux"))
    if good != len(hosts):
        raise RuntimeError(f"ssh: only {good} of {len(hosts)} hosts answered")
    return elapsed


def ansible(hosts: list[Host], workdir: Path) -> float | None:
    exe = shutil.which("ansible")
    if exe is None:
        return None
    workdir.mkdir(parents=True, exist_ok=True)
    inv = workdir / "hosts.ini"
    h0 = hosts[0]
    inv.write_text("".join(f"{h.name} ansible_host={h.hostname} ansible_port={h.port}\n" for h in hosts)
                   + f"[all:vars]\nansible_user={h0.user}\nansible_ssh_private_key_file={h0.identity_file}\n"
                   + "ansible_python_interpreter=/usr/bin/python3\n")
    env = {**os.environ, "ANSIBLE_PIPELINING": "True", "ANSIBLE_HOME": str(workdir / "home"),
           "ANSIBLE_CONFIG": str(workdir / "none.cfg"), "ANSIBLE_LOCAL_TEMP": str(workdir / "tmp"),
           "ANSIBLE_SSH_ARGS": f"-o ControlMaster=no -o UserKnownHostsFile={h0.known_hosts} "
                               "-o StrictHostKeyChecking=yes -F /dev/null",
           "ANSIBLE_GATHERING": "explicit", "ANSIBLE_STDOUT_CALLBACK": "minimal"}
    return wall([exe, "all", "-i", str(inv), "-m", "shell", "-a", COMMAND, "-f", str(len(hosts))], env=env,
                check=lambda out: out.count("| CHANGED |") == len(hosts))


# -- memory --------------------------------------------------------------------------------------


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


async def _memory_child(kind: str, inventory_file: Path) -> dict[str, float]:
    """Runs in a fresh process: RSS growth with every host's session open and idle."""
    inventory = load_inventory(inventory_file)
    hosts = list(inventory.hosts.values())
    warm = Inventory(hosts={hosts[0].name: hosts[0]})
    # Imports and first-use caches, not per-session cost.
    await fleet.exec(warm, "all", "true", session_factory=fleet.SessionFactory(warm, audit=False))
    await _asyncssh_gather(hosts[:1])
    gc.collect()
    before = rss_kb()
    if kind == "fleet":
        quiet = fleet.SessionFactory(inventory, audit=False)
        async with fleet.FleetPool(inventory, forks=len(hosts), session_factory=quiet) as pool:
            result = await pool.run("all", "true")
            assert result.ok
            gc.collect()
            after = rss_kb()
    else:
        conns = await asyncio.gather(*(asyncssh.connect(
            h.hostname, port=h.port, username=h.user, client_keys=[str(h.identity_file)],
            known_hosts=str(h.known_hosts), agent_path=None, config=None) for h in hosts))
        await asyncio.gather(*(c.run("true") for c in conns))
        gc.collect()
        after = rss_kb()
        for c in conns:
            c.close()
        await asyncio.gather(*(c.wait_closed() for c in conns))
    return {"per_session_kb": (after - before) / len(hosts), "total_mb": (after - before) / 1024}


def memory(kind: str, inventory_file: Path) -> dict[str, float]:
    proc = subprocess.run([sys.executable, __file__, "--memory-child", kind, str(inventory_file)],
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-800:])
    data: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,30,100", help="comma-separated host counts")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is shown")
    parser.add_argument("--skip", default="", help="comma-separated contenders to leave out "
                        "(cli, parallel-ssh, ssh, ansible, memory)")
    parser.add_argument("--memory-child", nargs=2, metavar=("KIND", "INVENTORY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        kind, path = args.memory_child
        print(json.dumps(asyncio.run(_memory_child(kind, Path(path)))))
        return
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    notes: list[str] = []
    try:
        import pssh  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        skip.add("parallel-ssh")
        notes.append("parallel-ssh: not importable (pip install parallel-ssh); skipped")
    if shutil.which("ansible") is None:
        skip.add("ansible")
        notes.append("ansible: not installed (pip install ansible-core); skipped")

    root = Path(tempfile.mkdtemp(prefix="rb-bench-fleet-"))
    os.chmod(root, 0o755)  # noqa: S103 (sshd, running as the test user, must reach the keys)
    th = make_test_hosts(root)
    try:
        t = time.perf_counter()
        all_hosts = start_hosts(th, max(sizes))
        print(f"started {len(all_hosts)} sshd in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        table: dict[str, dict[int, float | None]] = {}

        def record(name: str, n: int, fn: Callable[[], float | None]) -> None:
            label = name.split(" ")[0]
            if label in skip or name in skip:
                return
            try:
                value = timed(fn, args.repeat)
            except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
                notes.append(f"{name} at N={n}: failed: {str(exc).strip()[:300]}")
                value = None
            table.setdefault(name, {})[n] = value
            shown = "-" if value is None else f"{value:.3f}s"
            print(f"N={n:<4} {name:<34} {shown}", file=sys.stderr)

        for n in sizes:
            hosts = all_hosts[:n]
            inventory = Inventory(hosts={h.name: h for h in hosts})
            inv_file = write_inventory(root / f"inventory-{n}.yaml", hosts)
            asyncssh_gather(hosts)  # warm-up: first connections, sshd caches
            record("asyncssh gather", n, partial(asyncssh_gather, hosts))
            record("RemoteBashSession gather", n, partial(raw_sessions, hosts))
            record("fleet.exec forks=N", n, partial(fleet_exec, inventory, n))
            record("fleet.exec forks=10", n, partial(fleet_exec, inventory, 10))
            record("fleet.exec forks=N +audit", n, partial(fleet_exec, inventory, n, root / "audit"))
            record("cli remote-bash fleet exec", n, partial(cli, inv_file, n, root / "audit-cli"))
            record("parallel-ssh", n, partial(parallel_ssh, hosts))
            record("ssh & wait", n, partial(ssh_loop, hosts, root / f"ssh-{n}"))
            record("ansible -m shell pipelining", n, partial(ansible, hosts, root / f"ansible-{n}"))

        print_table(table, sizes)
        if "memory" not in skip:
            n = max(sizes)
            inv_file = root / f"inventory-{n}.yaml"
            print(f"\nclient memory per open session, N={n} (VmRSS growth / N, fresh process):")
            for kind in ("fleet", "asyncssh"):
                try:
                    m = memory(kind, inv_file)
                    kib, mib = m["per_session_kb"], m["total_mb"]
                    print(f"  {kind:<9} {kib:7.1f} KiB/session   ({mib:.1f} MiB in all)")
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    print(f"  {kind:<9} failed: {exc}")
        for note in notes:
            print(f"note: {note}")
    finally:
        th.stop_all()
        shutil.rmtree(root, ignore_errors=True)


def print_table(table: dict[str, dict[int, float | None]], sizes: list[int]) -> None:
    ref = table.get("asyncssh gather", {})
    head = f"{'method (median wall time, s)':<34}" + "".join(f"{'N=' + str(n):>9}" for n in sizes)
    head += "".join(f"{'x@' + str(n):>8}" for n in sizes)
    print("\n" + head)
    print("-" * len(head))
    for name, row in table.items():
        cells = "".join(f"{row[n]:9.3f}" if row.get(n) is not None else f"{'-':>9}" for n in sizes)
        ratios = ""
        for n in sizes:
            value, base = row.get(n), ref.get(n)
            ratios += f"{value / base:8.2f}" if value is not None and base else f"{'-':>8}"
        print(f"{name:<34}{cells}{ratios}")
    print("x@N: time / asyncssh gather at the same N")


if __name__ == "__main__":
    main()
