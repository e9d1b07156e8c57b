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

Rounds are interleaved (each round runs the reference, then every contender), so a machine whose
load changes during the run moves the reference and the contenders alike; the table shows each
median next to the reference's median of the same N, their ratio and the target where there is one.
A row is one entry of ``ROWS`` (name, function of the hosts, target ratio or None).

``--scale 200`` then runs ``fleet.exec`` (audit on) on that many hosts, each in a fresh process, for
each of ``--scale-forks``: hosts per second, client CPU per host (``getrusage``, user + system) and
peak client memory (``ru_maxrss``), next to the asyncssh gather's, to show where one controller
saturates.

Run: python bench/bench_fleet.py [--sizes 10,30,100] [--repeat 3] [--skip ansible,parallel-ssh]
                                 [--scale 200 --scale-forks 10,25,50,100,200]
Each sshd runs in a PID and mount namespace of its own, with its own /proc (``unshare --pid --fork
--mount-proc``, as root), so that a host's sessions see only its processes, as on a real fleet:
on a shared /proc each session's close-time check would read every other host's processes too (work
that grows as N squared, which no real host does). ``--shared-proc`` runs them without (the
default where namespaces cannot be made); the first line of output says which ran. The reference
and every contender run against the same hosts.

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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncssh

from remote_bash import fleet
from remote_bash.audit import AuditLog
from remote_bash.inventory import Inventory, load_inventory
from remote_bash.models import Host
from remote_bash.session import RemoteBashSession
from tests.sshd import TestHosts, make_test_hosts, own_proc_wrapper

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
                          stdin=subprocess.DEVNULL, check=False)
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


def rss_kb(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


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


# -- scale: one controller, many hosts ------------------------------------------------------------


async def _scale_child(kind: str, inventory_file: Path, forks: int, audit_dir: Path) -> dict[str, float]:
    """Runs in a fresh process: one fan-out over every host of the inventory, with its wall time,
    the client's CPU (user + system) and its peak RSS."""
    import resource

    inventory = load_inventory(inventory_file)
    hosts = list(inventory.hosts.values())
    base_kb = rss_kb()
    before = resource.getrusage(resource.RUSAGE_SELF)
    if kind == "fleet":
        factory = fleet.SessionFactory(inventory, audit=AuditLog(audit_dir))
        start = time.perf_counter()
        result = await fleet.exec(inventory, "all", COMMAND, forks=forks, session_factory=factory)
        elapsed = time.perf_counter() - start
        if not result.ok:
            raise SystemExit(fleet.format_recap(result))
    else:
        elapsed = await _asyncssh_gather(hosts)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork and exec.
    peak_kb = rss_kb("VmHWM")
    return {"elapsed": elapsed, "cpu_ms_per_host": cpu * 1000 / len(hosts),
            "growth_kb_per_host": (peak_kb - base_kb) / len(hosts), "peak_mb": peak_kb / 1024}


def scale_run(kind: str, inventory_file: Path, forks: int, audit_dir: Path) -> dict[str, float]:
    proc = subprocess.run([sys.executable, __file__, "--scale-child", kind, str(inventory_file), str(forks),
                           str(audit_dir)], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, check=False)
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr or proc.stdout)[-800:])
    data: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data


def scale(all_hosts: list[Host], root: Path, forks_list: list[int], repeat: int) -> None:
    n = len(all_hosts)
    inv_file = write_inventory(root / f"inventory-scale-{n}.yaml", all_hosts)
    print(f"\nscale: N={n} hosts, one controller (2-core machine that also runs every sshd); "
          f"median of {repeat} fresh processes each")
    print(f"{'method':<30}{'wall s':>8}{'hosts/s':>9}{'x ref':>7}{'CPU ms/host':>13}{'peak RSS MiB':>14}"
          f"{'KiB/host':>10}")
    runs: dict[str, list[dict[str, float]]] = {}
    labels = [("asyncssh gather", "asyncssh", n)] + [(f"fleet.exec forks={f} +audit", "fleet", f) for f in forks_list]
    for _ in range(repeat):  # interleaved, like the main table
        for label, kind, forks in labels:
            try:
                runs.setdefault(label, []).append(scale_run(kind, inv_file, forks, root / "audit-scale"))
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"  {label}: failed: {str(exc).strip()[:300]}")
    ref = statistics.median(r["elapsed"] for r in runs.get("asyncssh gather", [])) if runs.get("asyncssh gather") \
        else None
    for label, _kind, _forks in labels:
        got = runs.get(label)
        if not got:
            continue
        wall_s = statistics.median(r["elapsed"] for r in got)
        cpu = statistics.median(r["cpu_ms_per_host"] for r in got)
        rss = statistics.median(r["peak_mb"] for r in got)
        growth = statistics.median(r["growth_kb_per_host"] for r in got)
        ratio = f"{wall_s / ref:7.2f}" if ref else f"{'-':>7}"
        print(f"{label:<30}{wall_s:8.2f}{n / wall_s:9.0f}{ratio}{cpu:13.2f}{rss:14.1f}{growth:10.1f}")
    print("CPU: the controller's user + system time / N; peak RSS: VmHWM of the controller process; "
          "KiB/host: (peak - RSS before the run) / N")


# -- main ----------------------------------------------------------------------------------------

Row = tuple[str, Callable[[list[Host], Inventory, Path, Path], float | None], float | None]
"""A contender: its name, how to time it once on the first N hosts (hosts, their inventory, that
inventory's file, a scratch directory), and its target ratio to the reference (None: no target)."""

REFERENCE = "asyncssh gather"

ROWS: list[Row] = [
    (REFERENCE, lambda hosts, inv, f, d: asyncssh_gather(hosts), None),
    ("RemoteBashSession gather", lambda hosts, inv, f, d: raw_sessions(hosts), None),
    ("fleet.exec forks=N", lambda hosts, inv, f, d: fleet_exec(inv, len(hosts)), None),
    ("fleet.exec forks=10", lambda hosts, inv, f, d: fleet_exec(inv, 10), None),
    ("fleet.exec forks=N +audit", lambda hosts, inv, f, d: fleet_exec(inv, len(hosts), d / "audit"), 1.15),
    ("cli remote-bash fleet exec", lambda hosts, inv, f, d: cli(f, len(hosts), d / "audit-cli"), None),
    ("parallel-ssh", lambda hosts, inv, f, d: parallel_ssh(hosts), None),
    ("ssh & wait", lambda hosts, inv, f, d: ssh_loop(hosts, d / f"ssh-{len(hosts)}"), None),
    ("ansible -m shell pipelining", lambda hosts, inv, f, d: ansible(hosts, d / f"ansible-{len(hosts)}"), None),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,30,100", help="comma-separated host counts")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per measurement; the median is shown")
    parser.add_argument("--skip", default="", help="comma-separated contenders to leave out "
                        "(cli, parallel-ssh, ssh, ansible, memory, RemoteBashSession, ...: a row's first word "
                        "or its whole name)")
    parser.add_argument("--scale", type=int, default=0, help="also the one-controller scale run on this many hosts")
    parser.add_argument("--scale-forks", default="10,25,50,100,200", help="forks values of the scale run")
    parser.add_argument("--shared-proc", action="store_true",
                        help="run every sshd in the one process table (by default each has a PID namespace "
                        "and /proc of its own, as a real host has)")
    parser.add_argument("--memory-child", nargs=2, metavar=("KIND", "INVENTORY"), help=argparse.SUPPRESS)
    parser.add_argument("--scale-child", nargs=4, metavar=("KIND", "INVENTORY", "FORKS", "AUDIT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        kind, path = args.memory_child
        print(json.dumps(asyncio.run(_memory_child(kind, Path(path)))))
        return
    if args.scale_child:
        kind, path, forks, audit = args.scale_child
        print(json.dumps(asyncio.run(_scale_child(kind, Path(path), int(forks), Path(audit)))))
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
    rows = [row for row in ROWS if row[0] == REFERENCE or (row[0].split(" ")[0] not in skip and row[0] not in skip)]

    root = Path(tempfile.mkdtemp(prefix="rb-bench-fleet-"))
    os.chmod(root, 0o755)  # noqa: S103 (sshd, running as the test user, must reach the keys)
    own_proc = not args.shared_proc and own_proc_wrapper() is not None
    th = make_test_hosts(root, own_proc=own_proc)
    print("hosts: each sshd in a PID namespace with its own /proc (a host's processes only, as on a real "
          "fleet)" if own_proc else "hosts: every sshd shares this machine's /proc (each host's close-time "
          "check also reads every other host's processes)" + ("" if args.shared_proc else
                                                                ": no PID namespace could be made here"))
    try:
        t = time.perf_counter()
        all_hosts = start_hosts(th, max([*sizes, args.scale]))
        print(f"started {len(all_hosts)} sshd in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        table: dict[str, dict[int, float | None]] = {}
        for n in sizes:
            hosts = all_hosts[:n]
            inventory = Inventory(hosts={h.name: h for h in hosts})
            inv_file = write_inventory(root / f"inventory-{n}.yaml", hosts)
            asyncssh_gather(hosts)  # warm-up: first connections, sshd caches
            times: dict[str, list[float]] = {}
            failed: set[str] = set()
            for _ in range(args.repeat):
                for name, fn, _target in rows:
                    if name in failed:
                        continue
                    try:
                        value = fn(hosts, inventory, inv_file, root)
                    except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
                        notes.append(f"{name} at N={n}: failed: {str(exc).strip()[:300]}")
                        failed.add(name)
                        continue
                    if value is None:
                        failed.add(name)
                        continue
                    times.setdefault(name, []).append(value)
            for name, _fn, _target in rows:
                got = times.get(name) if name not in failed else None
                table.setdefault(name, {})[n] = statistics.median(got) if got else None
                shown = "-" if not got else f"{statistics.median(got):.3f}s"
                print(f"N={n:<4} {name:<34} {shown}", file=sys.stderr)

        print_table(table, sizes, rows)
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
        if args.scale:
            forks_list = sorted({int(f) for f in args.scale_forks.split(",") if f.strip()})
            scale(all_hosts[:args.scale], root, forks_list, args.repeat)
        for note in notes:
            print(f"note: {note}")
    finally:
        th.stop_all()
        shutil.rmtree(root, ignore_errors=True)


def print_table(table: dict[str, dict[int, float | None]], sizes: list[int], rows: list[Row]) -> None:
    """One line per row and N: its median, the reference's median at that N, the ratio, the target."""
    ref = table.get(REFERENCE, {})
    head = f"{'method (median wall time, s)':<34}{'N':>5}{'time':>9}{'reference':>11}{'ratio':>8}{'target':>8}"
    print("\n" + head)
    print("-" * len(head))
    targets = {name: target for name, _fn, target in rows}
    for name, by_n in table.items():
        if name == REFERENCE:
            continue
        for n in sizes:
            value, base = by_n.get(n), ref.get(n)
            target = targets.get(name)
            cells = f"{value:9.3f}" if value is not None else f"{'-':>9}"
            cells += f"{base:11.3f}" if base else f"{'-':>11}"
            cells += f"{value / base:8.2f}" if value is not None and base else f"{'-':>8}"
            if target is not None:
                met = value is not None and base and value / base <= target
                cells += f"{'<=' + format(target, 'g'):>8} {'met' if met else 'NOT met'}"
            print(f"{name:<34}{n:>5}{cells}")
    print(f"ratio: time / {REFERENCE} at the same N (rounds interleaved)")


if __name__ == "__main__":
    main()
