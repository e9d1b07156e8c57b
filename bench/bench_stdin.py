"""Benchmark: a command's input through ``remote-bash exec`` next to OpenSSH's ``ssh``.

In one run against one local sshd (loopback), interleaved so that whatever else the machine does
weighs on both alike:
  - throughput: a file of SIZE MB (random bytes) piped into ``wc -c`` by ``remote-bash exec HOST``
    and by ``ssh HOST`` (the reference), whole processes; with the client's peak RSS;
  - per call, in one session: ``session.run("cat", stdin=b"x")`` next to ``session.run("true")``,
    the cost of setting up the FIFO and its channel.

Run: python bench/bench_stdin.py [--size 200] [--rounds 3] [--calls 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remote_bash.models import Host  # noqa: E402 -- after the path to the tree under test
from remote_bash.session import RemoteBashSession  # noqa: E402
from tests.sshd import TestHosts, make_test_hosts  # noqa: E402

PEAK = ("import resource, subprocess, sys\n"
        "with open(sys.argv[1], 'rb') as fh:\n"
        "    out = subprocess.run(sys.argv[2:], stdin=fh, capture_output=True, check=True)\n"
        "print(out.stdout.decode().strip(), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")


def _piped(command: list[str], source: Path, env: dict[str, str]) -> tuple[float, int, int]:
    """Seconds, the byte count the remote printed, and the client's peak RSS in KB."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", PEAK, str(source), *command], env=env, cwd=ROOT, check=True,
                         capture_output=True, text=True, timeout=1800)
    elapsed = time.perf_counter() - start
    count, peak = out.stdout.split()
    return elapsed, int(count), int(peak)


async def _per_call(host: Host, calls: int) -> tuple[float, float]:
    async with RemoteBashSession(host, audit=False) as s:
        plain, fed = [], []
        for _ in range(calls):
            t = time.perf_counter()
            await s.run("true")
            plain.append(time.perf_counter() - t)
            t = time.perf_counter()
            r = await s.run("cat", stdin=b"x")
            fed.append(time.perf_counter() - t)
            assert r.output == "x"
        return statistics.median(plain), statistics.median(fed)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=200, help="MB of input")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=30, help="calls of each kind for the per-call figure")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rb-bench-stdin-"))
    work.chmod(0o755)  # sshd reads authorized_keys below it as the test user
    hosts = make_test_hosts(work / "hosts")
    try:
        _run(args, work, hosts)
    finally:
        hosts.stop_all()
        shutil.rmtree(work, ignore_errors=True)


def _run(args: argparse.Namespace, work: Path, hosts: TestHosts) -> None:
    host = hosts.start("bench")
    home = work / "home"
    home.mkdir()
    inventory = work / "hosts.yaml"
    inventory.write_text(json.dumps({"hosts": {"bench": {
        "hostname": host.hostname, "port": host.port, "user": host.user,
        "identity_file": str(host.identity_file), "known_hosts": str(host.known_hosts)}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REMOTE_BASH_", "XDG_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_STATE_HOME=str(home / ".state"),
               REMOTE_BASH_INVENTORY=str(inventory))
    size = args.size * 1_000_000
    source = work / "input"
    with source.open("wb") as fh:
        for _ in range(args.size):
            fh.write(os.urandom(1_000_000))
    ssh = ["ssh", "-p", str(host.port), "-i", str(host.identity_file), "-o", f"UserKnownHostsFile={host.known_hosts}",
           "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"{host.user}@{host.hostname}", "wc -c"]
    methods = {
        "ssh HOST 'wc -c' < file (reference)": ssh,
        "remote-bash exec HOST -- 'wc -c' < file": [sys.executable, "-m", "remote_bash.cli", "exec", "--timeout",
                                                   "1800", "bench", "--", "wc -c"],
    }
    seconds: dict[str, list[float]] = {name: [] for name in methods}
    peaks: dict[str, list[int]] = {name: [] for name in methods}
    for r in range(args.rounds):
        for name, command in methods.items():
            elapsed, count, peak = _piped(command, source, env)
            if count != size:
                raise SystemExit(f"{name}: the host counted {count} bytes, not {size}")
            seconds[name].append(elapsed)
            peaks[name].append(peak)
        ref = seconds["ssh HOST 'wc -c' < file (reference)"][-1]
        print(f"round {r + 1}: " + ", ".join(f"{name.split(' ')[0]} {seconds[name][-1]:.2f} s "
                                             f"({seconds[name][-1] / ref:.2f}x)" for name in methods))
    print(f"\n{args.size} MB of input, median over {args.rounds} rounds (whole processes, connect included):")
    ref = statistics.median(seconds["ssh HOST 'wc -c' < file (reference)"])
    for name in methods:
        value = statistics.median(seconds[name])
        print(f"  {name:<42} {value:6.2f} s  {args.size / value:6.1f} MB/s  {value / ref:5.2f}x  "
              f"client peak RSS {max(peaks[name]) / 1024:.1f} MB")
    plain, fed = asyncio.run(_per_call(host, args.calls))
    print(f"\nper call in one session (median of {args.calls}): run('true') {plain * 1000:.1f} ms, "
          f"run('cat', stdin=b'x') {fed * 1000:.1f} ms (+{(fed - plain) * 1000:.1f} ms for the FIFO and its channel)")
    print(f"this process's peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MB")


if __name__ == "__main__":
    main()
