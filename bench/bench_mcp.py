"""Benchmark: one ``bash`` call through ``remote-bash mcp`` next to the same call through the Python API.

In one run against one local sshd: the round trip of ``echo x`` from the mcp SDK's own stdio client to
the tool's result (the server a subprocess, its session kept between calls), and ``session.run`` on a
RemoteBashSession in this process, calls interleaved so both see the same machine load. Prints the
medians and the ratio. All traffic stays on loopback.

Run: python bench/bench_mcp.py [--calls 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from remote_bash.session import RemoteBashSession
from tests.sshd import make_test_hosts

ROOT = Path(__file__).resolve().parent.parent


async def main(calls: int, rounds: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="rb-bench-mcp-"))
    os.chmod(root, 0o755)  # noqa: S103 - sshd reads authorized_keys here as the test user
    hosts = make_test_hosts(root)
    host = hosts.start("bench")
    inventory = root / "hosts.yaml"
    inventory.write_text(json.dumps({"hosts": {"bench": {
        "hostname": host.hostname, "port": host.port, "user": host.user, "credential": "key",
        "identity_file": str(host.identity_file), "known_hosts": str(host.known_hosts)}}}))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "remote_bash.cli", "--inventory", str(inventory), "--audit-dir", str(root / "audit"), "mcp"],
        cwd=str(ROOT), env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        async with Client(params, mode="legacy") as client, \
                RemoteBashSession(host) as session:
            await client.call_tool("bash", {"command": "true"})
            await session.run("true")
            print(f"{calls} calls x {rounds} rounds of `echo x`, interleaved; medians")
            print(f"{'round':>5} {'mcp bash (ms)':>14} {'session.run (ms)':>17} {'ratio':>7}")
            for r in range(rounds):
                via_mcp: list[float] = []
                via_api: list[float] = []
                for _ in range(calls):
                    t = time.perf_counter()
                    result = await client.call_tool("bash", {"command": "echo x"})
                    via_mcp.append(time.perf_counter() - t)
                    assert not result.is_error and isinstance(result.content[0], types.TextContent)
                    t = time.perf_counter()
                    await session.run("echo x")
                    via_api.append(time.perf_counter() - t)
                m, a = statistics.median(via_mcp), statistics.median(via_api)
                print(f"{r + 1:>5} {m * 1000:>14.3f} {a * 1000:>17.3f} {m / a:>6.2f}x")
    finally:
        hosts.stop_all()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.rounds))
