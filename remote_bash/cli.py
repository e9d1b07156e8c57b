"""The ``remote-bash`` command line: the only module that prints or reads argv.

Commands: ``exec``, ``shell``, ``run``, ``hosts``, ``check``, ``credentials``, ``audit``,
``sandbox`` and ``fleet`` (``remote-bash COMMAND --help`` shows each, with an example).

Imports are lazy: ``--help`` and ``exec`` never load the anthropic SDK, which only ``run`` and
``fleet run`` need. An error is one line on stderr and a documented exit status, never a
traceback unless ``--debug`` is given. With no inventory configured, the built-in ``sandbox``
host is used: a throwaway sshd on 127.0.0.1 for the current user (``remote-bash sandbox``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from datetime import datetime

    from ._ssh import Credentials
    from .audit import AuditLog
    from .inventory import Inventory
    from .models import CommandResult, Host
    from .redact import Redactor
    from .sandbox import SshdServer
    from .session import AuditSink, RemoteBashSession

__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_ALLOWED",
    "EXIT_REFUSED",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "main",
]

EXIT_FAILED = 1
"""check/audit verify/credentials found a problem; fleet: the command failed on some host."""
EXIT_USAGE = 2
"""Bad arguments, or no Anthropic API key for ``run``."""
EXIT_TIMEOUT = 124
"""The command outran its deadline and was killed."""
EXIT_ERROR = 125
"""remote_bash itself failed: config, connect, authentication, host key, audit, lost connection."""
EXIT_REFUSED = 126
"""The command policy refused the command; nothing was sent."""
EXIT_NOT_ALLOWED = 127
"""The host is unknown or outside the allowlist; nothing was connected."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C); the remote command was killed."""
FLEET_EXIT_CODES = f"""exit status:
  0    the command exited 0 on every host
  1    it failed, or was refused by the command policy, on some host
  2    on some host it did not run to its end: unreachable, timed out, lost, or skipped by --fail-fast
  {EXIT_ERROR}  remote-bash error before any host was worked on (inventory, audit)
  {EXIT_NOT_ALLOWED}  the pattern names an unknown host or group
  {EXIT_INTERRUPTED}  interrupted with Ctrl-C (running commands were killed)
  fleet run: 0 when Claude finished on every host and the last command there succeeded; 1 when
  Claude finished but a host's last command failed; 2 when a conversation did not finish, or a
  host was unreachable or skipped"""
SANDBOX = "sandbox"
PROG = "remote-bash"

EXIT_CODES = f"""exit status:
  the command's own status (exec, shell), or 0 on success
  {EXIT_FAILED}    a check, verification or fleet host failed
  {EXIT_USAGE}    usage error, or no Anthropic API key for run
  {EXIT_TIMEOUT}  the command timed out and was killed
  {EXIT_ERROR}  remote-bash error: inventory, connect, authentication, host key, audit
  {EXIT_REFUSED}  the command policy refused the command (nothing was sent)
  {EXIT_NOT_ALLOWED}  unknown host, or outside --allow (nothing was connected)
  {EXIT_INTERRUPTED}  interrupted with Ctrl-C (the remote command was killed)"""


# -- output ------------------------------------------------------------------------------------------


def _out(text: str) -> None:
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()


def _err(text: str) -> None:
    sys.stderr.write(text if text.endswith("\n") else text + "\n")
    sys.stderr.flush()


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _table(rows: Sequence[Sequence[str]]) -> str:
    sizes = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ("  ".join(c.ljust(s) for c, s in zip(row, sizes, strict=True)).rstrip() for row in rows)
    return "".join(line + "\n" for line in lines)


# -- context: inventory, sandbox, audit, sessions -------------------------------------------------------


class _Context:
    """What every command needs from the global options."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.env = os.environ
        self.allow: str | None = args.allow
        self.debug: bool = args.debug

    @property
    def audit_dir(self) -> Path:
        if self.args.audit_dir:
            return Path(self.args.audit_dir).expanduser()
        from .audit import default_audit_dir

        return default_audit_dir(self.env)

    def inventory_path(self) -> Path | None:
        from .inventory import default_inventory_path

        return default_inventory_path(self.args.inventory, self.env)

    def load(self) -> Inventory | None:
        """The configured inventory, or None when there is none (the sandbox host is used)."""
        path = self.inventory_path()
        if path is None:
            return None
        from .inventory import load_inventory

        return load_inventory(path)

    @contextlib.contextmanager
    def inventory(self) -> Iterator[Inventory]:
        """The inventory; with none configured, one holding the ``sandbox`` host, running for the duration."""
        loaded = self.load()
        if loaded is not None:
            yield loaded
            return
        with _sandbox_for_command(self.env) as inventory:
            yield inventory

    def audit_log(self, redactor: Redactor | None = None) -> AuditLog:
        from .audit import AuditLog

        return AuditLog(self.audit_dir, redactor=redactor)

    def audit(self, redactor: Redactor | None) -> AuditSink:
        # AuditLog.awrite takes host and event positional-only, which session.AuditSink does not
        # spell out; the call sites pass them positionally, so the cast is sound.
        return cast("AuditSink", self.audit_log(redactor))


def _pick_host(inventory: Inventory, name: str | None) -> str:
    if name:
        return name
    if len(inventory.hosts) == 1:
        return next(iter(inventory.hosts))
    raise _UsageError(f"name a host: the inventory {inventory.path} has {len(inventory.hosts)} hosts "
                      f"(see '{PROG} hosts')")


class _UsageError(Exception):
    """A mistake in the command line: exit 2."""


async def _session(ctx: _Context, inventory: Inventory, name: str) -> tuple[RemoteBashSession, Redactor]:
    """A session to ``name`` (not connected yet) and its redactor, which also masks the host's keyring
    secrets, so a command that prints one never shows it on screen or in the audit log."""
    from .access import open_session
    from .redact import Redactor

    host = inventory.hosts.get(name)
    creds = await _credentials(ctx, inventory, [host] if host is not None else [])
    redactor = Redactor(host.redact if host is not None else (), _literals(creds.values()))
    session = open_session(inventory, name, allow=ctx.allow, audit=ctx.audit(redactor), redactor=redactor,
                           credentials=_source(creds))
    return session, redactor


async def _credentials(ctx: _Context, inventory: Inventory, hosts: Sequence[Host]) -> dict[str, Credentials]:
    """The credentials of ``hosts`` and their jump hosts, looked up now, so their secrets are known to
    the redactors. Hosts the gate will refuse are left out: the keyring is not even asked for them."""
    from .access import jump_chain
    from .credentials import acredentials_for
    from .errors import SelectionError

    try:
        allowed = {h.name for h in inventory.select(ctx.allow)} if ctx.allow else set(inventory.hosts)
    except SelectionError:
        return {}  # the gate says why
    hops: dict[str, Host] = {}
    for host in hosts:
        chain = [*jump_chain(inventory, host), host]
        if all(hop.name in allowed for hop in chain):
            hops.update((hop.name, hop) for hop in chain)
    found = await asyncio.gather(*(acredentials_for(hop) for hop in hops.values()))
    return dict(zip(hops, found, strict=True))


def _literals(creds: Iterable[Credentials]) -> list[str]:
    # A very short secret would mask every occurrence of a common string: it is not worth hiding.
    return [s for c in creds for s in (c.password, c.passphrase) if s and len(s) >= 4]


def _source(known: dict[str, Credentials]) -> Callable[[Host], Awaitable[Credentials]]:
    from .credentials import acredentials_for

    async def credentials(hop: Host) -> Credentials:
        return known[hop.name] if hop.name in known else await acredentials_for(hop)

    return credentials


# -- the sandbox host ----------------------------------------------------------------------------------


def _sandbox_dir(env: Mapping[str, str]) -> Path:
    state = env.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        state = os.path.join(env.get("HOME") or str(Path.home()), ".local", "state")
    return Path(state) / "remote-bash" / "sandbox"


def _local_user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _client_key(directory: Path) -> Path:
    from .sandbox import generate_keypair

    key = directory / "client_ed25519"
    if not key.exists() or not key.with_suffix(".pub").exists():
        key.unlink(missing_ok=True)
        generate_keypair(key, "remote-bash-sandbox-client")
    return key


def _sandbox_host(address: str, port: int, key: Path, known_hosts: Path) -> Host:
    from .models import Host

    return Host(name=SANDBOX, hostname=address, port=port, user=_local_user(), identity_file=key,
                known_hosts=known_hosts, credential="key", labels={"sandbox": "true"})


def _sandbox_inventory(host: Host) -> Inventory:
    from .inventory import Inventory

    return Inventory(hosts={SANDBOX: host})


def _start_sshd(workdir: Path, key: Path) -> SshdServer:
    """OpenSSH's sshd on 127.0.0.1 (or, without it, asyncssh's server) for the current user."""
    from .sandbox import start_sshd

    for old in workdir.glob("ssh_host_ed25519_key*"):
        old.unlink()  # fresh host keys every time
    return start_sshd(workdir, address="127.0.0.1", users=[_local_user()],
                      authorized_keys=[key.with_suffix(".pub").read_text()])


def _running_sandbox(directory: Path) -> dict[str, Any] | None:
    """The state of the sandbox ``sandbox start`` left running, or None."""
    try:
        state = json.loads((directory / "sandbox.json").read_text())
        pid = int(state["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes() if Path("/proc").is_dir() else b"sshd"
    except (ProcessLookupError, PermissionError, FileNotFoundError):
        return None
    # The pid may have been reused since: it must still be an sshd (or the asyncssh fallback).
    return state if b"sshd" in cmdline or b"remote_bash._ssh" in cmdline else None


@contextlib.contextmanager
def _sandbox_for_command(env: Mapping[str, str]) -> Iterator[Inventory]:
    """The running sandbox, or one started now and stopped when the command ends."""
    directory = _sandbox_dir(env)
    state = _running_sandbox(directory)
    if state is not None:
        yield _sandbox_inventory(_sandbox_host(state["address"], state["port"], Path(state["identity_file"]),
                                               Path(state["known_hosts"])))
        return
    import shutil
    import tempfile

    _make_private(directory)
    key = _client_key(directory)
    workdir = Path(tempfile.mkdtemp(prefix="run-", dir=directory))
    try:
        server = _start_sshd(workdir, key)
        try:
            known = workdir / "known_hosts"
            known.write_text(server.known_hosts_line + "\n")
            yield _sandbox_inventory(_sandbox_host(server.address, server.port, key, known))
        finally:
            server.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _make_private(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)


def _cmd_sandbox(ctx: _Context) -> int:
    directory = _sandbox_dir(ctx.env)
    state = _running_sandbox(directory)
    action = ctx.args.action
    if action == "status":
        if ctx.args.json:
            _out(json.dumps({"running": state is not None, **(state or {})}) + "\n")
        elif state is None:
            _out("sandbox: not running\n")
        else:
            _out(f"sandbox: running, pid {state['pid']}, {state['user']}@{state['address']} "
                 f"port {state['port']}\n  identity_file: {state['identity_file']}\n"
                 f"  known_hosts:   {state['known_hosts']}\n")
        return 0 if state is not None else 3
    if action == "stop":
        if state is None:
            _out("sandbox: not running\n")
        else:
            _stop_pid(int(state["pid"]))
            _out(f"sandbox: stopped (pid {state['pid']})\n")
        (directory / "sandbox.json").unlink(missing_ok=True)
        return 0
    if state is not None:
        _out(f"sandbox: already running, pid {state['pid']}, {state['address']} port {state['port']}\n")
        return 0
    import shutil

    _make_private(directory)
    key = _client_key(directory)
    shutil.rmtree(directory / "sshd", ignore_errors=True)  # leftovers of an earlier sandbox
    server = _start_sshd(directory / "sshd", key)
    known = directory / "known_hosts"
    known.write_text(server.known_hosts_line + "\n")
    state = {"pid": server.pid, "address": server.address, "port": server.port, "user": _local_user(),
             "identity_file": str(key), "known_hosts": str(known)}
    tmp = directory / "sandbox.json.tmp"
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(directory / "sandbox.json")
    _out(f"sandbox: started, pid {server.pid}, {state['user']}@{server.address} port {server.port}\n"
         f"  try: {PROG} exec -- uname -a\n  stop: {PROG} sandbox stop\n")
    return 0


def _stop_pid(pid: int) -> None:
    import time

    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which has no command line left, does not)."""
    try:
        os.kill(pid, 0)
        return not Path("/proc").is_dir() or bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except (ProcessLookupError, PermissionError, FileNotFoundError):
        return False


# -- exec and shell ------------------------------------------------------------------------------------


def _command_text(args: argparse.Namespace, example: str) -> str:
    words: list[str] | None = args.words
    if not words or not " ".join(words).strip():
        raise _UsageError(f"no command: put it after '--', e.g. {example}")
    return " ".join(words)


def _cmd_exec(ctx: _Context) -> int:
    command = _command_text(ctx.args, f"{PROG} exec web-1 -- uptime")
    with ctx.inventory() as inventory:
        name = _pick_host(inventory, ctx.args.host)
        return asyncio.run(_exec(ctx, inventory, name, command))


async def _exec(ctx: _Context, inventory: Inventory, name: str, command: str) -> int:
    session, redactor = await _session(ctx, inventory, name)
    as_json: bool = ctx.args.json
    echo = _Echo(redactor)
    result: CommandResult | None = None
    try:
        result = await _run_one(session, command, ctx.args.timeout, None if as_json else echo.feed)
    finally:
        if not as_json:
            echo.finish(result)
        await session.close()
    if as_json:
        _out(json.dumps({"host": name, **result.model_dump(mode="json")}, ensure_ascii=False) + "\n")
    return _status(name, result)


async def _run_one(session: RemoteBashSession, command: str, deadline: float | None,
                   on_output: Callable[[str], None] | None) -> CommandResult:
    """Run one command; a refusal is audited and re-raised."""
    from .errors import AccessDenied, HostNotAllowed

    try:
        return await session.run(command, deadline, on_output=on_output)
    except AccessDenied as exc:
        if not isinstance(exc, HostNotAllowed):  # the gate audits its own refusals
            await session.audit_denied(exc, command, None)
        raise


class _Echo:
    """Streams a command's output to stdout, redacted as it goes.

    When the shell exits mid-call (``exit 3``), the session hands the last bytes it held back
    only to the result, not to ``on_output``: they are printed from the result here.
    """

    def __init__(self, redactor: Redactor) -> None:
        self.stream = redactor.stream()
        self.count = 0
        self.tail = ""

    def feed(self, text: str) -> None:
        self._write(self.stream.feed(text))

    def finish(self, result: CommandResult | None) -> None:
        self._write(self.stream.flush())
        if result is None or not result.shell_lost or result.truncated:
            return
        out, count = result.output, self.count
        if len(out) > count and out[count - len(self.tail) : count] == self.tail:
            self._write(out[count:])

    def _write(self, text: str) -> None:
        if text:
            _out(text)
            self.count += len(text)
            self.tail = (self.tail + text)[-200:]


def _status(name: str, result: CommandResult) -> int:
    """The exit status for a command's result, with a line on stderr when it did not simply end."""
    if result.timed_out:
        _err(f"{PROG}: {name}: the command did not finish within {result.timeout:g} s and was killed")
        return EXIT_TIMEOUT
    if result.exit_code is None:
        _err(f"{PROG}: {name}: the shell ended abnormally (killed by a signal)")
        return EXIT_ERROR
    return result.exit_code


def _cmd_shell(ctx: _Context) -> int:
    with ctx.inventory() as inventory:
        name = _pick_host(inventory, ctx.args.host)
        return asyncio.run(_shell(ctx, inventory, name))


async def _shell(ctx: _Context, inventory: Inventory, name: str) -> int:
    from .errors import AccessDenied, RemoteBashError

    session, redactor = await _session(ctx, inventory, name)
    tty = sys.stdin.isatty()
    loop = asyncio.get_running_loop()
    running: list[asyncio.Task[CommandResult]] = []

    def interrupt() -> None:
        if running:
            running[0].cancel()
        elif tty:
            _err("\n(type :exit or press Ctrl-D to leave)")

    status = 0
    try:
        await session.start()
        info = session.info
        if info is not None:
            _err(f"connected to {name} ({info.user}@{info.address}, {info.os}, bash {info.bash_version}). "
                 "Meta-commands: :restart, :exit (or Ctrl-D)")
        loop.add_signal_handler(signal.SIGINT, interrupt)
        while True:
            line = await _read_line(f"{name}$ " if tty else None)
            if line is None or line.strip() in (":exit", ":quit"):
                break
            if not line.strip():
                continue
            if line.strip() == ":restart":
                try:
                    restarted = await session.restart()
                except RemoteBashError as exc:
                    _err(f"[error: {_one_line(str(exc))}]")
                    status = _exit_code(exc)
                else:
                    _err(f"restarted: a fresh shell (pid {restarted.shell_pid})")
                continue
            echo = _Echo(redactor)
            task = asyncio.create_task(_run_one(session, line, ctx.args.timeout, echo.feed))
            running.append(task)
            try:
                await asyncio.wait([task])
            finally:
                running.clear()
                done = task.done() and not task.cancelled() and task.exception() is None
                echo.finish(task.result() if done else None)
            if task.cancelled():
                _err("[interrupted: the command was killed]")
                status = EXIT_INTERRUPTED
                continue
            try:
                result = task.result()
            except AccessDenied as exc:
                _err(f"[refused: {exc.message}]")
                status = _exit_code(exc)
                continue
            except RemoteBashError as exc:
                _err(f"[error: {_one_line(str(exc))}]")
                status = _exit_code(exc)
                continue
            if result.timed_out:
                _err(f"[timed out after {result.timeout:g} s: the command was killed]")
                status = EXIT_TIMEOUT
            elif result.shell_lost:
                _err(f"[the shell exited (status {result.exit_code}); the next command gets a fresh one]")
                status = result.exit_code if result.exit_code is not None else EXIT_ERROR
            else:
                status = result.exit_code if result.exit_code is not None else EXIT_ERROR
                if status:
                    _err(f"[exit {status}]")
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
        await session.close()
    return status


async def _read_line(prompt: str | None) -> str | None:
    """One line from stdin without blocking the event loop; None at end of input."""
    if prompt is not None:
        try:
            return await asyncio.to_thread(input, prompt)
        except EOFError:
            _err("")
            return None
    line = await asyncio.to_thread(sys.stdin.readline)
    return line.rstrip("\n") if line else None


# -- hosts and check -----------------------------------------------------------------------------------


def _cmd_hosts(ctx: _Context) -> int:
    inventory = ctx.load()
    address: dict[str, str] = {}
    if inventory is None:
        state = _running_sandbox(_sandbox_dir(ctx.env))
        hosts = [_sandbox_host("127.0.0.1", int(state["port"]) if state else 22, Path("-"), Path("-"))]
        if state is None:
            address[SANDBOX] = "127.0.0.1 (started when used; see 'remote-bash sandbox --help')"
    else:
        hosts = inventory.select(ctx.args.pattern) if ctx.args.pattern else list(inventory.hosts.values())
    if ctx.args.json:
        data = [{"name": h.name, "hostname": h.hostname, "port": h.port, "user": h.user, "groups": h.groups,
                 "labels": h.labels, "jump": h.jump} for h in hosts]
        _out(json.dumps(data, indent=2) + "\n")
        return 0
    rows = [("NAME", "ADDRESS", "USER", "GROUPS", "LABELS")]
    for h in hosts:
        where = address.get(h.name) or h.address + (f" via {','.join(h.jump)}" if h.jump else "")
        rows.append((h.name, where, h.user or "-", ",".join(h.groups) or "-",
                     ",".join(f"{k}={v}" for k, v in h.labels.items()) or "-"))
    _out(_table(rows))
    return 0


def _cmd_check(ctx: _Context) -> int:
    with ctx.inventory() as inventory:
        hosts = inventory.select(ctx.args.pattern or "all")
        results = asyncio.run(_check_all(ctx, inventory, hosts))
    if ctx.args.json:
        _out(json.dumps(results, indent=2) + "\n")
    else:
        rows = []
        for r in results:
            if r["ok"]:
                rows.append((r["host"], "ok", f"{r['user']}@{r['address']}", r["host_key"],
                             f"{r['os']}, bash {r['bash_version']}", _duration(r['duration'])))
            else:
                rows.append((r["host"], "FAILED", f"{r['error_type']}: {r['error']}", "", "",
                             _duration(r['duration'])))
        width = max(len(r[0]) for r in rows) if rows else 0
        for row in rows:
            _out(f"{row[0].ljust(width)}  {row[1]:<6}  " + "  ".join(c for c in row[2:] if c) + "\n")
    return 0 if all(r["ok"] for r in results) else EXIT_FAILED


async def _check_all(ctx: _Context, inventory: Inventory, hosts: Sequence[Host]) -> list[dict[str, Any]]:
    limit = asyncio.Semaphore(ctx.args.forks)

    async def one(host: Host) -> dict[str, Any]:
        import time

        from .errors import RemoteBashError

        async with limit:
            started = time.monotonic()
            session, _redactor = await _session(ctx, inventory, host.name)
            try:
                await session.start()
                info = session.info
                assert info is not None
                return {"host": host.name, "ok": True, "address": info.address, "user": info.user,
                        "host_key": info.host_key, "os": info.os, "bash_version": info.bash_version,
                        "duration": round(time.monotonic() - started, 3)}
            except RemoteBashError as exc:
                return {"host": host.name, "ok": False, "error": _one_line(exc.message),
                        "error_type": type(exc).__name__, "duration": round(time.monotonic() - started, 3)}
            finally:
                await session.close()

    return list(await asyncio.gather(*(one(h) for h in hosts)))


# -- credentials and audit -----------------------------------------------------------------------------


def _cmd_credentials(ctx: _Context) -> int:
    from .credentials import delete_secret, set_secret

    name: str = ctx.args.host
    inventory = ctx.load()
    if inventory is not None:
        inventory.host(name)  # SelectionError (with close matches) for a typo
    if ctx.args.action == "delete":
        delete_secret(name)
        _out(f"deleted the stored secret of {name}\n")
        return 0
    if sys.stdin.isatty():
        import getpass

        secret = getpass.getpass(f"Secret for {name} (key passphrase, or password): ")
        if getpass.getpass("Again: ") != secret:
            _err(f"{PROG}: the two entries differ; nothing was stored")
            return EXIT_FAILED
    else:
        secret = sys.stdin.readline().rstrip("\r\n")
    if not secret:
        _err(f"{PROG}: the secret is empty; nothing was stored")
        return EXIT_FAILED
    set_secret(name, secret)
    _out(f"stored the secret of {name} in the OS keyring (service 'remote-bash')\n")
    return 0


def _since(value: str) -> datetime:
    import re
    from datetime import UTC, datetime, timedelta

    relative = re.fullmatch(r"(\d+)\s*([smhd])", value.strip())
    if relative:
        seconds = int(relative[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[relative[2]]
        return datetime.now(UTC) - timedelta(seconds=seconds)
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a time: use ISO 8601 (2025-01-31T12:00:00Z) or an age (30m, 2h, 7d)") from None


def _cmd_audit(ctx: _Context) -> int:
    log = ctx.audit_log()
    host: str = ctx.args.host
    if ctx.args.action == "verify":
        if not log.files(host):
            _err(f"{PROG}: no audit log for {host} in {log.directory}")
            return EXIT_FAILED
        report = log.verify(host)
        for problem in report.problems:
            _out(problem + "\n")
        verdict = "intact" if report.ok else f"TAMPERED or damaged: {len(report.problems)} problem(s)"
        _out(f"{host}: {report.records} records in {len(report.files)} file(s): {verdict}\n")
        return 0 if report.ok else EXIT_FAILED
    from .audit import format_records

    records = log.read(host, since=ctx.args.since, session_id=ctx.args.session,
                       tool_use_id=ctx.args.tool_use_id)
    if ctx.args.json:
        _out("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    else:
        _out("".join(line + "\n" for line in format_records(records)))
    if not records and not log.files(host):
        _err(f"{PROG}: no audit log for {host} in {log.directory}")
    return 0


# -- fleet -----------------------------------------------------------------------------------------------


class _Progress:
    """One live line on stderr (a terminal only) while a fleet command runs."""

    def __init__(self) -> None:
        self.live = sys.stderr.isatty()
        self.shown = False

    def __call__(self, p: Any) -> None:
        if not self.live:
            return
        sys.stderr.write(f"\r\x1b[K{p.done}/{p.total} done, {p.running} running, {p.failed} failed, "
                         f"{p.elapsed:.1f}s")
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


async def _fleet_sessions(ctx: _Context, inventory: Inventory, pattern: str) -> Callable[[Host], Any]:
    """The fleet's session factory: the gate, the audit log, credentials, and redactors that also
    mask each host's keyring secrets."""
    from .access import HostGate
    from .fleet import SessionFactory
    from .redact import Redactor
    from .session import RemoteBashSession

    selected = inventory.select(pattern)
    creds = await _credentials(ctx, inventory, selected)
    patterns = sorted({p for h in selected for p in h.redact})
    audit = ctx.audit(Redactor(patterns, _literals(creds.values())))
    factory = SessionFactory(inventory, audit=audit, gate=HostGate(inventory, ctx.allow, audit),
                             credentials=_source(creds))

    def make(host: Host) -> RemoteBashSession:
        secrets = _literals(creds[h] for h in [*host.jump, host.name] if h in creds)
        if not secrets:
            return factory(host)
        return RemoteBashSession(host, jump_hosts=factory.jump_hosts(host), credentials=factory.credentials,
                                 audit=audit, redactor=Redactor(host.redact, secrets), gate=factory.gate,
                                 operator=factory.operator, kill_grace=factory.kill_grace)

    return make


def _cmd_fleet(ctx: _Context) -> int:
    if ctx.args.action == "run":
        return _cmd_fleet_run(ctx)
    from . import fleet

    command = _command_text(ctx.args, f"{PROG} fleet exec web -- uptime")
    progress = _Progress()

    async def go(inventory: Inventory) -> fleet.FleetResult:
        factory = await _fleet_sessions(ctx, inventory, ctx.args.pattern)
        return await fleet.exec(inventory, ctx.args.pattern, command, forks=ctx.args.forks,
                                timeout=ctx.args.timeout, fail_fast=ctx.args.fail_fast,
                                session_factory=factory, on_progress=progress)

    with ctx.inventory() as inventory:
        try:
            result = asyncio.run(go(inventory))
        finally:
            progress.clear()
    if ctx.args.output_dir:
        fleet.write_output_dir(result, ctx.args.output_dir)
    _out(result.to_json() + "\n" if ctx.args.json else fleet.format_recap(result))
    return result.exit_code


class _RunProgress(_Progress):
    """The live line, and for a conversation per host one line on stderr as each host ends (terminal or not)."""

    def __init__(self, *, per_host: bool) -> None:
        super().__init__()
        self.per_host = per_host

    def __call__(self, p: Any) -> None:
        last = p.last
        if self.per_host and last is not None and last.status != "skipped":
            self.clear()
            c = last.conversation
            commands = f"{last.commands} command{'' if last.commands == 1 else 's'}"
            done = f"{c.turns} turns, {commands}, ${c.cost_usd:.4f}, " if c else ""
            why = f": {_one_line(last.error)}" if last.error else ""
            _err(f"{last.host}: {last.status} ({done}{_duration(last.duration)}){why}")
        super().__call__(p)


def _cmd_fleet_run(ctx: _Context) -> int:
    from . import fleet
    from .agent import AgentConfig

    args = ctx.args
    if args.coordinator and (args.serial or args.fail_fast):
        raise _UsageError("--serial and --fail-fast apply to a conversation per host, not to --coordinator")
    _require_api_key(ctx.env)
    task = _task_text(args)
    options: dict[str, Any] = {}
    if args.model:
        options["model"] = args.model
    if args.max_turns:
        options["max_turns"] = args.max_turns
    config = AgentConfig(**options)
    progress = _RunProgress(per_host=not args.coordinator)

    async def go(inventory: Inventory) -> fleet.FleetRun:
        factory = await _fleet_sessions(ctx, inventory, args.pattern)
        return await fleet.run(inventory, args.pattern, task, forks=args.forks, serial=args.serial,
                               fail_fast=args.fail_fast, coordinator=args.coordinator, timeout=args.timeout,
                               config=config, session_factory=factory, on_progress=progress)

    with ctx.inventory() as inventory:
        try:
            result = asyncio.run(go(inventory))
        finally:
            progress.clear()
    if args.output_dir:
        fleet.write_run_output_dir(result, args.output_dir)
    _out(result.to_json() + "\n" if args.json else fleet.format_run_recap(result))
    return result.exit_code


# -- run ---------------------------------------------------------------------------------------------------


def _require_api_key(env: Mapping[str, str]) -> None:
    if env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_AUTH_TOKEN") or env.get("ANTHROPIC_BASE_URL"):
        return
    raise _NoApiKey(
        "no Anthropic API key: set ANTHROPIC_API_KEY (export ANTHROPIC_API_KEY=sk-ant-...; keys are at "
        f"https://console.anthropic.com/settings/keys). '{PROG} exec HOST -- COMMAND' works without a key"
    )


class _NoApiKey(Exception):
    """``run`` without credentials for the Anthropic API: exit 2."""


def _task_text(args: argparse.Namespace, *, optional: bool = False) -> str:
    task = " ".join(args.words) if args.words else (args.task or "")
    if not task.strip() and not optional:
        raise _UsageError(f'no task: {PROG} run "what Claude should do"')
    return task


def _cmd_run(ctx: _Context) -> int:
    _require_api_key(ctx.env)
    resume = Path(ctx.args.resume).expanduser() if ctx.args.resume else None
    task = _task_text(ctx.args, optional=resume is not None)
    with ctx.inventory() as inventory:
        name = _pick_host(inventory, ctx.args.host)
        return asyncio.run(_run(ctx, inventory, name, task, resume))


async def _run(ctx: _Context, inventory: Inventory, name: str, task: str, resume: Path | None) -> int:
    from .agent import AgentConfig, run_agent

    options: dict[str, Any] = {}
    if ctx.args.model:
        options["model"] = ctx.args.model
    if ctx.args.max_turns:
        options["max_turns"] = ctx.args.max_turns
    session, redactor = await _session(ctx, inventory, name)
    view = _AgentView(redactor, as_json=ctx.args.json, tty=sys.stdout.isatty())
    try:
        outcome = await run_agent(task, session, AgentConfig(**options), on_event=view, resume=resume)
    finally:
        await session.close()
    view.finish(outcome)
    if outcome.stop_reason == "interrupted":
        return EXIT_INTERRUPTED
    return 0 if outcome.stop_reason == "end_turn" else EXIT_FAILED


class _AgentView:
    """Shows an agent run as it happens: Claude's text, each command, a few lines of its output
    (all of it goes to the transcript), its exit status and duration; or JSON lines with ``--json``.
    Output is redacted here, as the session's streamed chunks are raw."""

    LINES = 6

    def __init__(self, redactor: Redactor, *, as_json: bool, tty: bool) -> None:
        self.redactor = redactor
        self.as_json = as_json
        self.tty = tty
        self.stream = redactor.stream()
        self.shown = 0
        self.hidden = 0
        self.at_line_start = True

    def __call__(self, event: Any) -> None:
        kind: str = event.kind
        if kind == "output":
            text = self.stream.feed(event.text)
        elif kind == "result":
            text = self.stream.flush()
        else:
            text = event.text
        if self.as_json:
            self._json(event, text)
        elif kind == "text":
            self._write(text)
        elif kind == "command":
            self.stream = self.redactor.stream()
            self.shown = self.hidden = 0
            shown = "(restart the shell)" if event.command is None else self.redactor.redact(event.command)
            self._write(("" if self.at_line_start else "\n") + self._style("$ " + shown, "1;36") + "\n")
        elif kind in ("output", "result"):
            self._lines(text)
            if kind == "result":
                self._result(event)

    def _json(self, event: Any, text: str) -> None:
        record: dict[str, Any] = {"event": event.kind}
        if event.kind in ("text", "output", "result", "stop", "error") and text:
            record["text"] = text if event.kind != "result" else self.redactor.redact(event.text)
        for key in ("tool_use_id", "command", "exit_code", "duration", "cost_usd"):
            value = getattr(event, key)
            if value is not None:
                record[key] = self.redactor.redact(value) if key == "command" else value
        if event.kind == "result":
            record["is_error"] = event.is_error
        if event.usage is not None:
            record["usage"] = event.usage.model_dump()
        if event.kind != "output" or text:
            _out(json.dumps(record, ensure_ascii=False) + "\n")

    def _lines(self, text: str) -> None:
        for line in text.splitlines():
            if self.shown < self.LINES:
                self.shown += 1
                self._write(self._style("  " + line[:200], "2") + "\n")
            else:
                self.hidden += 1

    def _result(self, event: Any) -> None:
        if self.hidden:
            self._write(self._style(f"  ... {self.hidden} more lines (in the transcript)", "2") + "\n")
        took = _duration(event.duration) if event.duration is not None else ""
        if event.exit_code is not None:
            note = f"exit {event.exit_code}, {took}"
        else:
            note = self.redactor.redact(event.text.splitlines()[-1] if event.text else "error") + f", {took}"
        bad = event.is_error or bool(event.exit_code)
        self._write(self._style(f"  [{note}]", "31" if bad else "32") + "\n")

    def _style(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.tty else text

    def _write(self, text: str) -> None:
        if text:
            _out(text)
            self.at_line_start = text.endswith("\n")

    def finish(self, outcome: Any) -> None:
        usage = outcome.usage
        if self.as_json:
            record = {"event": "outcome", **outcome.model_dump(mode="json")}
            _out(json.dumps(record, ensure_ascii=False) + "\n")
            return
        if not self.at_line_start:
            _out("\n")
        _err(f"\n{outcome.message}. {outcome.turns} turns; tokens: {usage.input_tokens:,} in, "
             f"{usage.cache_read_input_tokens:,} cached, {usage.cache_creation_input_tokens:,} cache writes, "
             f"{usage.output_tokens:,} out; estimated cost ${outcome.cost_usd:.4f}\n"
             f"transcript: {outcome.transcript} (continue with --resume)")


# -- parsing -----------------------------------------------------------------------------------------------


def _globals(parser: argparse.ArgumentParser, *, top: bool) -> None:
    keep: Callable[[Any], Any] = (lambda v: v) if top else (lambda v: argparse.SUPPRESS)
    group = parser.add_argument_group("global options")
    group.add_argument("--inventory", metavar="PATH", default=keep(None),
                       help="inventory file (default: $REMOTE_BASH_INVENTORY, else "
                            "~/.config/remote-bash/hosts.yaml; with none, the built-in 'sandbox' host)")
    group.add_argument("--allow", metavar="PATTERN", default=keep(None),
                       help="only these hosts may be reached in this run (a host pattern: web,db-1, "
                            "env=prod, ...)")
    group.add_argument("--audit-dir", metavar="DIR", default=keep(None),
                       help="audit log directory (default: $REMOTE_BASH_AUDIT_DIR, else "
                            "~/.local/state/remote-bash/audit)")
    group.add_argument("--debug", action="store_true", default=keep(False), help="show tracebacks")


def _timeout(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError("the timeout must be positive")
    return seconds


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive whole number")
    return int(value)


def _parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    common = argparse.ArgumentParser(add_help=False)
    _globals(common, top=False)
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=raw,
        description="Run Claude's bash tool, or your own commands, in persistent bash sessions on remote "
                    "hosts over SSH.",
        epilog=f"examples:\n  {PROG} exec web-1 -- uptime\n"
               f"  {PROG} run --host web-1 \"why is the disk full?\"\n"
               f"  {PROG} fleet exec web -- systemctl is-active nginx\n\n{EXIT_CODES}",
    )
    _globals(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, summary: str, example: str, codes: str = EXIT_CODES) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=summary, description=summary, formatter_class=raw,
                              epilog=f"example:\n  {example}\n\n{codes}")

    p = add("exec", "Run one command on a host (no model) and exit with its status.",
            f"{PROG} exec web-1 -- 'df -h / && uptime'")
    p.add_argument("host", nargs="?", metavar="HOST",
                   help="inventory host (optional with no inventory: sandbox)")
    p.add_argument("--timeout", type=_timeout, metavar="SECONDS", help="deadline (default: the host's)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of streaming")
    p.usage = f"{PROG} exec [options] [HOST] -- COMMAND..."
    p.set_defaults(handler=_cmd_exec)

    p = add("shell", "An interactive line-by-line prompt on a host, audited like everything else "
                     "(:restart for a fresh shell, :exit or Ctrl-D to leave).", f"{PROG} shell web-1")
    p.add_argument("host", nargs="?", metavar="HOST")
    p.add_argument("--timeout", type=_timeout, metavar="SECONDS", help="deadline per command")
    p.set_defaults(handler=_cmd_shell)

    p = add("run", "Let Claude do a task on a host with the bash tool, showing every command live.",
            f'{PROG} run --host web-1 --max-turns 20 "find out why nginx returns 502 and fix it"')
    p.add_argument("task", nargs="?", metavar="TASK", help="what Claude should do")
    p.add_argument("--host", metavar="NAME", help="inventory host (optional with no inventory: sandbox)")
    p.add_argument("--model", metavar="MODEL", help="Claude model to use")
    p.add_argument("--max-turns", type=_positive, metavar="N", help="stop after N model turns")
    p.add_argument("--resume", metavar="TRANSCRIPT", help="continue the conversation saved in TRANSCRIPT")
    p.add_argument("--json", action="store_true", help="print events as JSON lines")
    p.set_defaults(handler=_cmd_run)

    p = add("hosts", "List the inventory's hosts.", f"{PROG} hosts 'web:&env=production'")
    p.add_argument("pattern", nargs="?", metavar="PATTERN", help="host pattern (default: all)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_hosts)

    p = add("check", "Connect to each host and report host key, OS and bash version, or the error.",
            f"{PROG} check web --forks 20")
    p.add_argument("pattern", nargs="?", metavar="PATTERN", help="host pattern (default: all)")
    p.add_argument("--forks", type=_positive, default=10, metavar="N", help="hosts checked at once (10)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_check)

    p = add("credentials", "Store or delete a host's secret (key passphrase or password) in the OS keyring.",
            f"{PROG} credentials set web-1")
    p.add_argument("action", choices=["set", "delete"])
    p.add_argument("host", metavar="HOST")
    p.set_defaults(handler=_cmd_credentials)

    p = add("audit", "Show or verify a host's audit log.",
            f"{PROG} audit show web-1 --since 2h   /   {PROG} audit verify web-1")
    p.add_argument("action", choices=["show", "verify"])
    p.add_argument("host", metavar="HOST")
    p.add_argument("--since", type=_since, metavar="TIME", help="ISO 8601 time, or an age: 30m, 2h, 7d")
    p.add_argument("--session", metavar="ID", help="only this session")
    p.add_argument("--tool-use-id", metavar="ID", help="only this tool_use id")
    p.add_argument("--json", action="store_true", help="print records as JSON lines")
    p.set_defaults(handler=_cmd_audit)

    p = add("sandbox", "Start, stop or show the throwaway local SSH host used without an inventory.",
            f"{PROG} sandbox start && {PROG} exec -- whoami && {PROG} sandbox stop",
            EXIT_CODES + "\n  3    sandbox status: the sandbox is not running")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_sandbox)

    p = add("fleet", "Run a command, or a task for Claude, on many hosts at once.",
            f"{PROG} fleet exec 'web:&env=production' --forks 20 -- systemctl is-active nginx",
            FLEET_EXIT_CODES)
    p.add_argument("action", choices=["exec", "run"])
    p.add_argument("pattern", metavar="PATTERN", help="host pattern")
    p.add_argument("task", nargs="?", metavar="TASK", help="fleet run: what Claude should do on each host")
    p.add_argument("--forks", type=_positive, default=10, metavar="N", help="hosts worked on at once (10)")
    p.add_argument("--fail-fast", action="store_true", help="start no more hosts after the first failure")
    p.add_argument("--output-dir", metavar="DIR", help="write each host's output to DIR/<host>.txt")
    p.add_argument("--timeout", type=_timeout, metavar="SECONDS", help="deadline per command")
    p.add_argument("--coordinator", action="store_true",
                   help="fleet run: one conversation drives every host (default: one per host)")
    p.add_argument("--serial", type=_positive, metavar="N", help="fleet run: hosts per batch")
    p.add_argument("--model", metavar="MODEL", help="fleet run: Claude model to use")
    p.add_argument("--max-turns", type=_positive, metavar="N", help="fleet run: stop a conversation after N turns")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.usage = (f"{PROG} fleet exec [options] PATTERN -- COMMAND...\n"
               f"       {PROG} fleet run [options] PATTERN TASK")
    p.set_defaults(handler=_cmd_fleet)
    return parser


# -- errors and main -------------------------------------------------------------------------------------


def _exit_code(exc: BaseException) -> int:
    from .errors import CommandTimeout, HostNotAllowed, PolicyDenied, RemoteBashError, SelectionError

    if isinstance(exc, CommandTimeout):
        return EXIT_TIMEOUT
    if isinstance(exc, PolicyDenied):
        return EXIT_REFUSED
    if isinstance(exc, HostNotAllowed | SelectionError):
        return EXIT_NOT_ALLOWED
    if isinstance(exc, RemoteBashError):
        return EXIT_ERROR
    if isinstance(exc, _UsageError | _NoApiKey):
        return EXIT_USAGE
    return EXIT_FAILED


def _setup_logging(debug: bool) -> None:
    import logging

    handler = logging.StreamHandler(sys.stderr)
    shape = f"{PROG}: %(name)s: %(levelname)s: %(message)s" if debug else f"{PROG}: warning: %(message)s"
    handler.setFormatter(logging.Formatter(shape))
    logger = logging.getLogger("remote_bash")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.WARNING)
    logger.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    """The ``remote-bash`` entry point; returns the exit status."""
    if hasattr(signal, "SIGXFSZ"):
        # A file-size limit on the audit directory must become an AuditError, not a crash.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    words = list(sys.argv[1:] if argv is None else argv)
    after: list[str] | None = None
    if "--" in words:
        cut = words.index("--")
        words, after = words[:cut], words[cut + 1 :]
    args = _parser().parse_args(words)
    args.words = after
    _setup_logging(args.debug)
    ctx = _Context(args)
    try:
        code: int = args.handler(ctx)
        return code
    except KeyboardInterrupt:
        _err(f"{PROG}: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as exc:
        if args.debug:
            import traceback

            traceback.print_exc()
        from .errors import RemoteBashError

        known = isinstance(exc, RemoteBashError | _UsageError | _NoApiKey)
        message = str(exc) if known else f"internal error: {type(exc).__name__}: {exc} (--debug shows where)"
        _err(f"{PROG}: {_one_line(message)}")
        return _exit_code(exc)


def _duration(seconds: float) -> str:
    """1 ms, 250 ms, 1.25 s: what a person reads at a glance."""
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


if __name__ == "__main__":
    sys.exit(main())
