"""Benchmark: remote_bash session against the alternatives, on one local sshd.

Measures, in one run against one sshd on 127.0.0.2:
  - warm per-command latency of ``true`` (median over N calls),
  - output throughput (MB/s reading a large output),
  - session open time (connect + shell ready),
for: remote_bash's RemoteBashSession, a bare asyncssh loop (one channel, command + sentinel
printf, read up to the sentinel: the floor for this design), asyncssh ``conn.run`` (a new
channel per command), and OpenSSH's ssh with ControlMaster.

Run: python bench/bench_session.py [--calls 500] [--mbytes 200]
All traffic stays on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncssh

from remote_bash.session import RemoteBashSession
from tests.sshd import make_test_hosts


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


class BareLoop:
    """The floor for this design: one channel, the command plus a sentinel printf, read up to it."""

    def __init__(self, proc: asyncssh.SSHClientProcess[bytes]) -> None:
        self.proc = proc
        self.buf = b""
        self.n = 0

    async def run(self, cmd: str) -> bytes:
        self.n += 1
        marker = f"__END_{self.n}__".encode()
        self.proc.stdin.write(f"{cmd}\nprintf '%s\\n' __END_{self.n}__\n".encode())
        while marker not in self.buf:
            self.buf += await self.proc.stdout.read(1 << 20)
        out, _, self.buf = self.buf.partition(marker + b"\n")
        return out

    async def throughput(self, mbytes: int) -> float:
        """MB/s reading ``mbytes`` MB of output, counting bytes without keeping them."""
        self.n += 1
        marker = f"__END_{self.n}__".encode()
        t = time.perf_counter()
        self.proc.stdin.write(f"head -c {mbytes * 1_000_000} /dev/zero | tr '\\0' x\n"
                              f"printf '%s\\n' __END_{self.n}__\n".encode())
        size, tail = 0, b""
        while True:
            chunk = await self.proc.stdout.read(1 << 20)
            size += len(chunk)
            window = tail + chunk
            if marker in window:
                break
            tail = window[-64:]
        return size / (time.perf_counter() - t) / 1e6


async def conn_run(conn: asyncssh.SSHClientConnection, calls: int) -> float:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        await conn.run("true")
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def controlmaster(host: str, port: int, user: str, key: Path, known: Path, calls: int) -> float:
    sock = Path(tempfile.mkdtemp()) / "cm"
    base = ["ssh", "-p", str(port), "-i", str(key), "-o", f"UserKnownHostsFile={known}",
            "-o", "StrictHostKeyChecking=yes", "-o", f"ControlPath={sock}", "-o", "BatchMode=yes",
            f"{user}@{host}"]
    master = subprocess.Popen([*base[:-1], "-o", "ControlMaster=yes", "-N", base[-1]])
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            subprocess.run([*base[:-1], "-o", "ControlMaster=no", base[-1], "true"], check=True)
            times.append(time.perf_counter() - t)
        return statistics.median(times)
    finally:
        master.terminate()
        master.wait(5)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--mbytes", type=int, default=200)
    args = parser.parse_args()
    th = make_test_hosts(Path(tempfile.mkdtemp(prefix="rb-bench-")))
    host = th.start("bench")
    rows: list[tuple[str, str, str, str]] = []
    try:
        # remote_bash
        opens = []
        for _ in range(5):
            t = time.perf_counter()
            s = RemoteBashSession(host, audit=False)  # the session alone, as the bare loop has no log
            await s.start()
            opens.append(time.perf_counter() - t)
            await s.close()
        conn = await asyncssh.connect(host.hostname, port=host.port, username=host.user,
                                      client_keys=[str(host.identity_file)], known_hosts=str(host.known_hosts))
        async with RemoteBashSession(host.model_copy(update={"output_limit": 30000}), audit=False) as s:
            bare = BareLoop(await conn.create_process("exec bash --noprofile --norc 2>&1", encoding=None))
            for _ in range(20):
                await s.run("true")
                await bare.run("true")
            # Interleaved, so that whatever else the machine does weighs on both alike.
            times, bare_times = [], []
            for _ in range(args.calls):
                t = time.perf_counter()
                await s.run("true")
                times.append(time.perf_counter() - t)
                t = time.perf_counter()
                await bare.run("true")
                bare_times.append(time.perf_counter() - t)
            rb_lat, bare_lat = statistics.median(times), statistics.median(bare_times)
            t = time.perf_counter()
            r = await s.run(f"head -c {args.mbytes * 1_000_000} /dev/zero | tr '\\0' x", timeout=300)
            rb_tp = r.output_bytes / (time.perf_counter() - t) / 1e6
            bare_tp = await bare.throughput(args.mbytes)
        rb_open = statistics.median(opens)

        conn_opens = []
        for _ in range(5):
            t = time.perf_counter()
            c = await asyncssh.connect(host.hostname, port=host.port, username=host.user,
                                       client_keys=[str(host.identity_file)], known_hosts=str(host.known_hosts))
            conn_opens.append(time.perf_counter() - t)
            c.close()
            await c.wait_closed()
        run_lat = await conn_run(conn, min(args.calls, 200))
        conn.close()
        cm_lat = controlmaster(host.hostname, host.port, str(host.user), Path(str(host.identity_file)),
                               Path(str(host.known_hosts)), min(args.calls, 100))
        rows = [
            ("remote_bash session.run", fmt_ms(rb_lat), f"{rb_tp:.0f} MB/s", fmt_ms(rb_open)),
            ("bare asyncssh loop (floor)", fmt_ms(bare_lat), f"{bare_tp:.0f} MB/s",
             fmt_ms(statistics.median(conn_opens))),
            ("asyncssh conn.run", fmt_ms(run_lat), "-", "-"),
            ("ssh ControlMaster", fmt_ms(cm_lat), "-", "-"),
        ]
        print(f"{'':30} {'true latency':>14} {'throughput':>12} {'open':>12}")
        for name, lat, tp, op in rows:
            print(f"{name:30} {lat:>14} {tp:>12} {op:>12}")
        print()
        print(f"latency vs bare loop:  {rb_lat / bare_lat:.2f}x   (target <= 1.5x)")
        print(f"speed-up vs conn.run:  {run_lat / rb_lat:.1f}x   (target >= 5x)")
        print(f"speed-up vs ControlMaster: {cm_lat / rb_lat:.1f}x")
        print(f"throughput vs bare:    {rb_tp / bare_tp * 100:.0f}%   (target >= 80%)")
        print(f"(medians of {args.calls} interleaved calls; open = connect + shell ready, bare = connect only; "
              f"{args.mbytes} MB of output; {os.cpu_count()} cores)")
    finally:
        th.stop_all()


if __name__ == "__main__":
    asyncio.run(main())
