"""The fallback sandbox server, for machines without OpenSSH's sshd: exec channels only, loopback only.

Run as ``python -m remote_bash._ssh ADDRESS PORT HOST_KEY AUTHORIZED_KEYS``; it must never
listen on anything but a loopback address.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import asyncssh

__all__ = ["serve_fallback"]


async def _serve_process(process: asyncssh.SSHServerProcess[bytes]) -> None:
    """Run an exec request as sshd does: the user's shell with -c, stdin/stdout/stderr piped."""
    command = process.command
    if command is None:
        process.stderr.write(b"this sandbox serves commands only, not interactive shells\n")
        process.exit(1)
        return
    shell = os.environ.get("SHELL") or "/bin/bash"
    child = await asyncio.create_subprocess_exec(
        shell, "-c", command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None

    async def pump_in() -> None:
        assert child.stdin is not None
        with contextlib.suppress(Exception):
            while data := await process.stdin.read(65536):
                child.stdin.write(data)
                await child.stdin.drain()
        with contextlib.suppress(Exception):
            child.stdin.close()

    async def pump_out(source: asyncio.StreamReader, sink: asyncssh.SSHWriter[bytes]) -> None:
        with contextlib.suppress(Exception):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()

    feeder = asyncio.create_task(pump_in())
    try:
        await asyncio.gather(pump_out(child.stdout, process.stdout), pump_out(child.stderr, process.stderr))
        status = await child.wait()
    finally:
        feeder.cancel()
        if child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
    if status < 0:
        process.exit_with_signal(_signal_name(-status))
    else:
        process.exit(status)


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name.removeprefix("SIG")
    except ValueError:
        return "KILL"


async def serve_fallback(address: str, port: int, host_key: str, authorized_keys: str) -> None:
    """Serve exec channels for the current user on a loopback address until cancelled.

    Prints ``Server listening on ADDRESS port PORT.`` to stderr once listening, as sshd -e does.
    """
    import ipaddress
    import sys

    if not ipaddress.ip_address(address).is_loopback:
        raise ValueError(f"the fallback sandbox only listens on loopback, not {address}")
    server = await asyncssh.create_server(
        asyncssh.SSHServer, address, port, server_host_keys=[host_key], authorized_client_keys=authorized_keys,
        process_factory=_serve_process, encoding=None, allow_scp=False, sftp_factory=None,
        keepalive_interval=0,
    )
    bound = server.sockets[0].getsockname()[1]
    print(f"Server listening on {address} port {bound}.", file=sys.stderr, flush=True)
    async with server:
        await server.wait_closed()
