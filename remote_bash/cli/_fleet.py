"""``fleet exec`` and ``fleet run``: a command, or a task for Claude, on many hosts at once."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from remote_bash.terminal import escape_json

from ._context import _Context, _credentials, _literals, _source
from ._exec import _command_text
from ._output import PROG, _count, _duration, _err, _one_line, _out, _out_raw, _UsageError
from ._run import _approver, _require_api_key, _task_text

if TYPE_CHECKING:
    from remote_bash.inventory import Inventory
    from remote_bash.models import Host


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
    """The fleet's session factory: the gate, the audit log, credentials, and one redactor for
    every host: all the selected hosts' patterns and keyring secrets (their jump hosts' too)."""
    from remote_bash.fleet import SessionFactory
    from remote_bash.redact import Redactor

    selected = inventory.select(pattern)
    creds = await _credentials(ctx, inventory, selected)
    patterns = sorted({p for h in selected for p in h.redact})
    # One redactor for every host's output: a host may print another host's secret.
    redactor = Redactor(patterns, _literals(creds.values()))
    audit = ctx.audit(redactor)
    factory = SessionFactory(inventory, audit=audit, gate=ctx.gate(inventory, audit), credentials=_source(creds))

    def make(host: Host) -> Any:
        return factory(host, redactor=redactor)

    return make


def _check_output_dir(directory: str | None) -> None:
    """Refuse an unsafe ``--output-dir`` before any host is worked on, so no output is lost to it."""
    if directory:
        from remote_bash._paths import private_dir

        private_dir(directory, what="--output-dir")


def _cmd_fleet(ctx: _Context) -> int:
    if ctx.args.action == "run":
        return _cmd_fleet_run(ctx)
    from remote_bash import fleet

    command = _command_text(ctx.args, f"{PROG} fleet exec web -- uptime")
    from ._input import has_input

    if not ctx.args.no_stdin and has_input():
        # Run with /dev/null as input, `fleet exec web -- bash < fix.sh` would do nothing on every
        # host and report success; the input is left unread for whatever reads it next.
        raise _UsageError("fleet exec does not send stdin to the hosts (one input cannot go to each of them): "
                          "give -n (or </dev/null) to run the command without it, or use 'exec HOST' to send "
                          "it to one host")
    _check_output_dir(ctx.args.output_dir)
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
    if ctx.args.json:
        _out_raw(escape_json(result.to_json()) + "\n")
    else:
        _out(fleet.format_recap(result))
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
            done = f"{_count(c.turns, 'turn')}, {_count(last.commands, 'command')}, ${c.cost_usd:.4f}, " if c else ""
            why = f": {_one_line(last.error)}" if last.error else ""
            _err(f"{last.host}: {last.status} ({done}{_duration(last.duration)}){why}")
        super().__call__(p)


def _cmd_fleet_run(ctx: _Context) -> int:
    from remote_bash import fleet
    from remote_bash.agent import AgentConfig

    args = ctx.args
    if args.coordinator and (args.serial or args.fail_fast):
        raise _UsageError("--serial and --fail-fast apply to a conversation per host, not to --coordinator")
    _require_api_key(ctx, pattern=args.pattern)
    task = _task_text(args)
    _check_output_dir(args.output_dir)
    options: dict[str, Any] = {}
    if args.model:
        options["model"] = args.model
    if args.max_turns:
        options["max_turns"] = args.max_turns
    config = AgentConfig(**options)
    progress = _RunProgress(per_host=not args.coordinator)

    approver = _approver(ctx)

    async def go(inventory: Inventory) -> fleet.FleetRun:
        if approver.mode == "all":  # --approve: every command of this run is asked about
            inventory = inventory.model_copy(update={"hosts": {
                name: host.model_copy(update={"approve": "all"}) for name, host in inventory.hosts.items()}})
        factory = await _fleet_sessions(ctx, inventory, args.pattern)
        return await fleet.run(inventory, args.pattern, task, forks=args.forks, serial=args.serial,
                               fail_fast=args.fail_fast, coordinator=args.coordinator, timeout=args.timeout,
                               config=config, session_factory=factory, on_progress=progress, approver=approver)

    with ctx.inventory() as inventory:
        try:
            result = asyncio.run(go(inventory))
        finally:
            progress.clear()
    if args.output_dir:
        fleet.write_run_output_dir(result, args.output_dir)
    if args.json:
        _out_raw(escape_json(result.to_json()) + "\n")
    else:
        _out(fleet.format_run_recap(result))
    return result.exit_code
