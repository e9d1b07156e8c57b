"""``hosts``, ``check``, ``credentials`` and ``audit``: looking at the inventory, the hosts and the logs."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._context import _address, _Context, _known_host, _session, _unknown
from ._output import (
    EXIT_FAILED,
    PROG,
    _count,
    _duration,
    _err,
    _json,
    _one_line,
    _out,
    _out_json,
    _out_raw,
    _table,
)

if TYPE_CHECKING:
    from remote_bash.inventory import Inventory
    from remote_bash.models import Host
    from remote_bash.session import RemoteBashSession


def _cmd_hosts(ctx: _Context) -> int:
    inventory = ctx.load()
    address: dict[str, str] = {}
    if inventory is None:
        from remote_bash.models import Host
        from remote_bash.sandbox import SANDBOX, running

        state = running(ctx.env)
        hosts = [state.host() if state else Host(name=SANDBOX, hostname="127.0.0.1", labels={"sandbox": "true"})]
        if state is None:
            address[SANDBOX] = "127.0.0.1 (started when used; see 'remote-bash sandbox --help')"
    else:
        hosts = inventory.select(ctx.args.pattern) if ctx.args.pattern else list(inventory.hosts.values())
    if ctx.args.json:
        data = [{"name": h.name, "hostname": h.hostname, "port": h.port, "user": h.user, "groups": h.groups,
                 "labels": h.labels, "jump": h.jump} for h in hosts]
        _out_json(data, indent=2, ascii_only=True)
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
        _out_json(results, indent=2, ascii_only=True)
    else:
        rows = []
        for r in results:
            if r["ok"]:
                rows.append((r["host"], "ok", f"{r['user']}@{r['address']}", r["host_key"],
                             f"{r['distribution']} ({r['os']}), bash {r['bash_version']}", _duration(r['duration'])))
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

        from remote_bash.errors import RemoteBashError

        def failed(exc: RemoteBashError) -> dict[str, Any]:
            return {"host": host.name, "ok": False, "error": _one_line(exc.message),
                    "error_type": type(exc).__name__, "duration": round(time.monotonic() - started, 3)}

        async with limit:
            started = time.monotonic()
            session, _redactor = await _session(ctx, inventory, host.name)
            try:
                await session.start()
                info = session.info
                assert info is not None
                distribution = await _distribution(session)
                row = {"host": host.name, "ok": True, "address": _address(session), "user": info.user,
                       "host_key": info.host_key, "distribution": distribution, "os": info.os,
                       "bash_version": info.bash_version, "duration": round(time.monotonic() - started, 3)}
            except RemoteBashError as exc:
                row = failed(exc)
            except BaseException:
                with contextlib.suppress(RemoteBashError):
                    await session.close()
                raise
            try:
                await session.close()
            except RemoteBashError as exc:  # a lost connection whose leftovers could not be stopped
                row = failed(exc)
            return row

    return list(await asyncio.gather(*(one(h) for h in hosts)))


# Builtins only: the PRETTY_NAME line of /etc/os-release, however the host's PATH is set up.
_OS_RELEASE = ("while IFS= read -r _l; do case $_l in PRETTY_NAME=*) printf '%s\\n' \"${_l#PRETTY_NAME=}\";; esac; "
               "done < /etc/os-release")


async def _distribution(session: RemoteBashSession) -> str:
    """The host's distribution as /etc/os-release names it (``PRETTY_NAME``), or ``unknown``.

    Read with a command of its own, audited like any other; the value is the host's word, so it is
    cut short and shown escaped like everything else a host says."""
    from remote_bash.errors import RemoteBashError

    try:
        result = await session.run(_OS_RELEASE, 10)
    except RemoteBashError:
        return "unknown"
    lines = result.output.splitlines()
    name = lines[0].strip().strip("\"'").strip() if result.exit_code == 0 and lines else ""
    return name[:80] or "unknown"


# -- credentials and audit -----------------------------------------------------------------------------


def _cmd_credentials(ctx: _Context) -> int:
    from remote_bash.credentials import delete_secret, set_secret

    name: str = ctx.args.host
    inventory = ctx.load()
    if inventory is not None:
        _known_host(inventory, name)  # a typo: the closest names, and nothing stored
    if ctx.args.action == "delete":
        stored = delete_secret(name)
        _out(f"deleted the stored secret of {name} from the keyring backend {stored.backend}\n")
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
    stored = set_secret(name, secret, store_readable=ctx.args.store_readable)
    how = "encrypted" if stored.encrypted else "NOT encrypted: readable by anyone who can read it"
    _out(f"stored the secret of {name} in the keyring backend {stored.backend} ({how})\n")
    return 0


def _cmd_audit(ctx: _Context) -> int:
    if ctx.args.action == "key":
        return _cmd_audit_key(ctx)
    host: str = ctx.args.host
    # verify always asks the keyring, so a removed marker cannot make a keyed log read as unkeyed.
    log = ctx.audit_log(keyring=True if ctx.args.action == "verify" else None)
    if not log.files(host):
        _err(f"{PROG}: {_one_line(_no_log(ctx, log.directory, host))}")
        return EXIT_FAILED
    if ctx.args.action == "verify":
        report = log.verify(host)
        for problem in report.problems:
            _out(_one_line(problem) + "\n")
        if report.ok:
            verdict = "intact"
        elif report.needs_key and len(report.problems) == 1:
            verdict = "NOT VERIFIED: the log is keyed and its audit key was not found"
        else:
            verdict = f"TAMPERED or damaged: {_count(len(report.problems), 'problem')}"
        _out(f"{host}: {_count(report.records, 'record')} in {_count(len(report.files), 'file')}: {verdict}\n")
        if report.keyed:
            _out("  keyed chain: every record's HMAC-SHA256 was checked with the audit key, so an edit "
                 "recomputed without the key would have failed\n")
        elif not report.needs_key:
            _out(f"  UNKEYED chain: this shows edits, not forgery by someone who can recompute the hashes; "
                 f"keep an audit key ('{PROG} audit key init') to detect that\n")
        for note in report.notes:
            _out(f"  note: {_one_line(note)}\n")
        if report.last_seq is not None:
            _out(f"  newest record: seq {report.last_seq} at {_one_line(report.last_ts or '?')}; records removed from "
                 "the end are seen only while the head file is kept with the log: compare with a copy kept "
                 "elsewhere\n")
        return 0 if report.ok else EXIT_FAILED
    from remote_bash.audit import format_records

    records = log.read(host, since=ctx.args.since, session_id=ctx.args.session,
                       tool_use_id=ctx.args.tool_use_id)
    if ctx.args.json:
        _out_raw("".join(_json(r) for r in records))
    elif records:
        _out(_AUDIT_HEADER + "".join(line + "\n" for line in format_records(records)))
    else:
        _err(f"{PROG}: no records of {host} match (see '{PROG} audit show --help' for the filters)")
    return 0


def _no_log(ctx: _Context, directory: Path, host: str) -> str:
    """Why ``host`` has no log to show or verify, with the closest names that have one."""
    from urllib.parse import unquote

    logged = {unquote(p.name.removesuffix(".jsonl")) for p in directory.glob("*.jsonl")} if directory.is_dir() \
        else set()
    from remote_bash.sandbox import SANDBOX

    inventory = ctx.load() if ctx.inventory_path() is not None else None
    declared = set(inventory.hosts) if inventory is not None else {SANDBOX}
    if host in declared:
        return f"no audit log for {host} in {directory}: nothing has been run there yet"
    return str(_unknown(host, f"no audit log for it in {directory}, and it is not in the inventory",
                        sorted(logged | declared)))


# The columns of audit.format_records, named.
_AUDIT_HEADER = f"{'TIME (UTC)':<23}  {'EVENT':<13}  {'SESSION':<8}  {'TOOL USE':<24}  {'OUTCOME':<16}  COMMAND\n"


def _cmd_audit_key(ctx: _Context) -> int:
    from remote_bash.audit import mark_keyring_key, new_key, write_key_file
    from remote_bash.credentials import AUDIT_KEY_NAME, get_secret, set_secret

    if ctx.args.file is not None:
        path = Path(ctx.args.file).expanduser().absolute()
        write_key_file(path)
        _out(f"wrote a new audit key to {path} (mode 0600)\nname it in the inventory, under defaults: "
             f"or a host:\n  audit_key_file: {path}\nkeep a copy where the audit log is not: "
             "verifying the records it keys needs it\n")
        return 0
    if get_secret(AUDIT_KEY_NAME) is not None:
        mark_keyring_key(ctx.env)
        _err(f"{PROG}: an audit key is already kept in the OS keyring (commands use it); it is never "
             "replaced, since verifying the records it keyed needs it")
        return EXIT_FAILED
    stored = set_secret(AUDIT_KEY_NAME, new_key(), store_readable=ctx.args.store_readable)
    mark_keyring_key(ctx.env)
    how = "encrypted" if stored.encrypted else "NOT encrypted: readable by anyone who can read it"
    _out(f"stored a new audit key in the keyring backend {stored.backend} ({how}; service 'remote-bash', "
         "user 'audit:key'); from now on every audit record carries an HMAC-SHA256 made with it\nkeep a copy "
         "where the audit log is not: verifying the records it keys needs it\n")
    return 0
