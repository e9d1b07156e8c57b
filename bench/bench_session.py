"""Benchmark: a remote_bash session against the bare framed asyncssh loop, side by side.

Measures, in one run against one sshd on 127.0.0.2, in several rounds (the median of the rounds'
ratios is the figure):
  - warm latency of ``true``: session.run against a bare loop (one channel, the command plus a
    sentinel printf, read up to it: the floor for this design), interleaved call by call;
  - output throughput of a large output, with the session's bounded capture on, and the client's
    CPU time per MB (both threads of the session: it hashes large outputs on a worker thread);
the bare loop twice: with asyncssh's default ciphers (the reference the targets are against) and
with the cipher the session negotiated (remote_bash puts AES-GCM first where the CPU has AES
instructions: the second shows how much of the difference is that choice);
  - session open time (connect + shell ready) against an asyncssh connect alone;
  - client memory per open session at N sessions (VmRSS growth / N, in a fresh process) against
    asyncssh connections alone (connect + one ``run``);
and, for scale, asyncssh ``conn.run`` (a channel per command).

Run: python bench/bench_session.py [--rounds 5] [--calls 300] [--mbytes 200] [--sessions 100]
All traffic stays on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncssh

from remote_bash.models import Host
from remote_bash.session import RemoteBashSession
from tests.sshd import make_test_hosts

SUBPROCESS_TIMEOUT = 600


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

    async def throughput(self, mbytes: int) -> tuple[float, float]:
        """MB/s reading ``mbytes`` MB of output, counting bytes without keeping them, and the
        process's CPU seconds per MB."""
        self.n += 1
        marker = f"__END_{self.n}__".encode()
        t, cpu = time.perf_counter(), cpu_seconds()
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
        return size / (time.perf_counter() - t) / 1e6, (cpu_seconds() - cpu) / mbytes


def cpu_seconds() -> float:
    """CPU time of this process, every thread, user and system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _connect(host: Host, cipher: str | None = None) -> asyncssh.SSHClientConnection:
    """A plain asyncssh connection: asyncssh's default ciphers, or only ``cipher``."""
    extra = {"encryption_algs": [cipher]} if cipher else {}
    return await asyncssh.connect(host.hostname, port=host.port, username=host.user,
                                  client_keys=[str(host.identity_file)], known_hosts=str(host.known_hosts),
                                  agent_path=None, config=None, **extra)


def _cipher(conn: asyncssh.SSHClientConnection) -> str:
    return str(conn.get_extra_info("recv_cipher"))


def _short(cipher: str) -> str:
    return cipher.removesuffix("@openssh.com")


async def conn_run(conn: asyncssh.SSHClientConnection, calls: int) -> float:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        await conn.run("true")
        times.append(time.perf_counter() - t)
    return statistics.median(times)


async def one_round(host: Host, calls: int, mbytes: int) -> tuple[dict[str, float], str]:
    """One round: latency interleaved call by call, then throughput (order alternating). Returns
    the figures and the cipher the session negotiated."""
    async with RemoteBashSession(host.model_copy(update={"output_limit": 30000}), audit=False) as s:
        assert s._conn is not None
        cipher = _cipher(s._conn._conn)
        conns = [await _connect(host), await _connect(host, cipher)]
        try:
            bare, same = [BareLoop(await c.create_process("exec bash --noprofile --norc 2>&1", encoding=None))
                          for c in conns]
            for _ in range(20):
                await s.run("true")
                await bare.run("true")
                await same.run("true")
            # Interleaved, so that whatever else the machine does weighs on all alike.
            times: dict[str, list[float]] = {"rb": [], "bare": [], "same": []}
            for _ in range(calls):
                t = time.perf_counter()
                await s.run("true")
                times["rb"].append(time.perf_counter() - t)
                for name, loop in (("bare", bare), ("same", same)):
                    t = time.perf_counter()
                    await loop.run("true")
                    times[name].append(time.perf_counter() - t)

            async def ours() -> tuple[float, float]:
                t, cpu = time.perf_counter(), cpu_seconds()
                r = await s.run(f"head -c {mbytes * 1_000_000} /dev/zero | tr '\\0' x", timeout=300)
                return r.output_bytes / (time.perf_counter() - t) / 1e6, (cpu_seconds() - cpu) / mbytes

            runs: dict[str, list[tuple[float, float]]] = {"rb": [], "bare": [], "same": []}
            loops = {"bare": bare, "same": same}
            for order in (("rb", "bare", "same"), ("same", "bare", "rb")):
                for name in order:
                    runs[name].append(await ours() if name == "rb" else await loops[name].throughput(mbytes))
        finally:
            for c in conns:
                c.close()
                await c.wait_closed()
    figures = {f"{name}_lat": statistics.median(values) for name, values in times.items()}
    for name, pairs in runs.items():
        figures[f"{name}_tp"] = statistics.fmean(tp for tp, _ in pairs)
        figures[f"{name}_cpu"] = statistics.fmean(cpu for _, cpu in pairs)
    return figures, cipher


async def opens(host: Host, count: int) -> tuple[float, float]:
    ours, theirs = [], []
    for _ in range(count):
        t = time.perf_counter()
        s = RemoteBashSession(host, audit=False)  # the session alone, as the bare loop has no log
        await s.start()
        ours.append(time.perf_counter() - t)
        await s.close()
        t = time.perf_counter()
        c = await _connect(host)
        theirs.append(time.perf_counter() - t)
        c.close()
        await c.wait_closed()
    return statistics.median(ours), statistics.median(theirs)


# -- where the time goes: bash alone, Python alone ------------------------------------------------


def bash_alone(calls: int) -> tuple[float, float]:
    """Median µs per call of a local bash fed through a pipe, as sshd feeds it: the bare loop's two
    lines, and remote_bash's frames through its driver loop."""
    from remote_bash import framing

    def run(init: bytes, frame: Callable[[int], tuple[bytes, bytes]]) -> float:
        proc = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                bufsize=0)
        assert proc.stdin is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        proc.stdin.write(init)
        times = []
        try:
            for i in range(calls):
                data, marker = frame(i)
                t = time.perf_counter()
                proc.stdin.write(data)
                buf = b""
                while marker not in buf:
                    buf += os.read(fd, 65536)
                times.append(time.perf_counter() - t)
        finally:
            proc.stdin.close()
            proc.wait(10)
        return statistics.median(times[calls // 10:]) * 1e6

    names = framing.ShellNames.new()

    def ours(_i: int) -> tuple[bytes, bytes]:
        token = framing.CallToken.new()
        return framing.frame_command("true", token, names), token.marker

    def bare(i: int) -> tuple[bytes, bytes]:
        return f"true\nprintf '%s\\n' __END_{i}__\n".encode(), f"__END_{i}__".encode()

    return run(framing.init_script(framing.CallToken.new(), names, {}, [], None), ours), run(b"", bare)


class _EchoShell:
    """Stands in for the shell channel: answers each frame with its sentinel at once."""

    def __init__(self) -> None:
        from remote_bash._ssh.channel import Flag

        self.closed = Flag()
        self.exited = False
        self.on_data: Callable[[bytes], None] = lambda _data: None

    def write(self, data: bytes) -> None:
        from remote_bash.framing import HEADER_SIZE

        header = data[-HEADER_SIZE - 4:].decode()[:HEADER_SIZE]  # "true" is 4 bytes
        nonce = header[8:32]
        asyncio.get_running_loop().call_soon(self.on_data, b"\x1eRB" + nonce.encode() + b":0\x1e")


async def python_alone(calls: int) -> tuple[float, float]:
    """Median µs per call of session.run with the shell replaced by an in-process echo, and of the
    same future round trip alone (the floor for any asyncio code)."""
    from remote_bash.session import SessionState

    session = RemoteBashSession(Host(name="echo", hostname="127.0.0.1"), audit=False, gate=False)
    shell = _EchoShell()
    session._shell = shell  # type: ignore[assignment]
    session._conn = type("Conn", (), {"is_closed": False, "host_key_fingerprint": ""})()  # type: ignore[assignment]
    shell.on_data = session._on_data
    session.state = SessionState.OPEN
    loop = asyncio.get_running_loop()
    ours, floor = [], []
    for _ in range(calls):
        t = time.perf_counter()
        await session.run("true")
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        fut = loop.create_future()
        loop.call_soon(fut.set_result, None)
        await fut
        floor.append(time.perf_counter() - t)
    return statistics.median(ours) * 1e6, statistics.median(floor) * 1e6


# -- memory --------------------------------------------------------------------------------------


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


async def _memory_child(kind: str, host: Host, n: int) -> dict[str, float]:
    """Runs in a fresh process: RSS growth with ``n`` sessions (or connections) open and idle."""
    # Imports and first-use caches are not per-session cost.
    async with RemoteBashSession(host, audit=False) as warm:
        await warm.run("true")
    c = await _connect(host)
    await c.run("true")
    c.close()
    await c.wait_closed()
    gc.collect()
    before = rss_kb()
    batch = 10  # sshd's MaxStartups refuses more unauthenticated connections at once
    if kind == "session":
        sessions: list[RemoteBashSession] = []
        for at in range(0, n, batch):
            group = [RemoteBashSession(host, audit=False) for _ in range(min(batch, n - at))]
            await asyncio.gather(*(s.run("true") for s in group))
            sessions.extend(group)
        gc.collect()
        after = rss_kb()
        for at in range(0, n, batch):
            await asyncio.gather(*(s.close() for s in sessions[at:at + batch]))
    else:
        conns: list[asyncssh.SSHClientConnection] = []
        for at in range(0, n, batch):
            group = await asyncio.gather(*(_connect(host) for _ in range(min(batch, n - at))))
            await asyncio.gather(*(g.run("true") for g in group))
            conns.extend(group)
        gc.collect()
        after = rss_kb()
        for conn in conns:
            conn.close()
        await asyncio.gather(*(conn.wait_closed() for conn in conns))
    return {"per_session_kb": (after - before) / n}


def memory(kind: str, host: Host, n: int) -> float:
    proc = subprocess.run([sys.executable, __file__, "--memory-child", kind, host.model_dump_json(), str(n)],
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-800:])
    data: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data["per_session_kb"]


# -- main ----------------------------------------------------------------------------------------


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300, help="calls per round")
    parser.add_argument("--mbytes", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=100, help="N for the memory measurement (0: skip)")
    parser.add_argument("--memory-child", nargs=3, metavar=("KIND", "HOST", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        kind, host_json, n = args.memory_child
        print(json.dumps(await _memory_child(kind, Host.model_validate_json(host_json), int(n))))
        return
    th = make_test_hosts(Path(tempfile.mkdtemp(prefix="rb-bench-")))
    host = th.start("bench")
    try:
        done = [await one_round(host, args.calls, args.mbytes) for _ in range(args.rounds)]
        rounds = [figures for figures, _ in done]
        cipher = done[-1][1]
        probe = await _connect(host)
        reference = _cipher(probe)
        probe.close()
        await probe.wait_closed()

        def ratio(key: str, other: str) -> float:
            return statistics.median(r[key] / r[other] for r in rounds)

        lat_ratio, tp_ratio = ratio("rb_lat", "bare_lat"), ratio("rb_tp", "bare_tp")
        rb_open, conn_open = await opens(host, 5)
        conn = await _connect(host)
        run_lat = await conn_run(conn, min(args.calls, 200))
        conn.close()
        await conn.wait_closed()

        def med(key: str) -> float:
            return statistics.median(r[key] for r in rounds)

        width = 46
        print(f"{'':{width}} {'true latency':>14} {'throughput':>12} {'CPU per MB':>12} {'open':>12}")
        rows = [("rb", f"remote_bash session.run [{_short(cipher)}]", fmt_ms(rb_open)),
                ("bare", f"bare loop, asyncssh defaults [{_short(reference)}]", fmt_ms(conn_open)),
                ("same", f"bare loop, the session's cipher [{_short(cipher)}]", "-")]
        for key, label, opened in rows:
            print(f"{label:{width}} {fmt_ms(med(f'{key}_lat')):>14} {med(f'{key}_tp'):>7.0f} MB/s "
                  f"{med(f'{key}_cpu') * 1000:>6.2f} ms/MB {opened:>12}")
        print(f"{'asyncssh conn.run, defaults':{width}} {fmt_ms(run_lat):>14}")
        print()
        print("per round (latency ratio, throughput ratio) against the reference, the defaults' loop: " + ", ".join(
            f"{r['rb_lat'] / r['bare_lat']:.2f}x/{r['rb_tp'] / r['bare_tp']:.2f}x" for r in rounds))
        print(f"latency vs bare loop:    {lat_ratio:.2f}x   (target <= 1.2x); "
              f"vs the same cipher's loop: {ratio('rb_lat', 'same_lat'):.2f}x")
        print(f"throughput vs bare loop: {tp_ratio:.2f}x   (target >= 0.95x); "
              f"vs the same cipher's loop: {ratio('rb_tp', 'same_tp'):.2f}x")
        print(f"client CPU per MB vs bare loop: {ratio('rb_cpu', 'bare_cpu'):.2f}x; "
              f"vs the same cipher's loop: {ratio('rb_cpu', 'same_cpu'):.2f}x")
        print(f"speed-up vs conn.run:    {run_lat / med('rb_lat'):.1f}x")
        bash_ours, bash_bare = bash_alone(2000)
        py_ours, py_floor = await python_alone(5000)
        print(f"bash alone (local pipe):  {bash_ours:.0f} µs per call vs the bare loop's lines {bash_bare:.0f} µs")
        print(f"Python alone (echo shell): {py_ours:.0f} µs per call vs a future round trip {py_floor:.0f} µs")
        if args.sessions:
            ours = memory("session", host, args.sessions)
            theirs = memory("asyncssh", host, args.sessions)
            print(f"memory per open session, N={args.sessions}: {ours:.1f} KiB vs asyncssh connection alone "
                  f"{theirs:.1f} KiB: {ours / theirs:.2f}x   (target <= 1.3x)")
        print(f"({args.rounds} rounds of {args.calls} interleaved calls, medians; open = connect + shell ready, "
              f"bare = connect only; {args.mbytes} MB of output, twice per round; {os.cpu_count()} cores)")
    finally:
        th.stop_all()


if __name__ == "__main__":
    asyncio.run(main())
