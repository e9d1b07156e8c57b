"""``run``: Claude does a task on one host with the bash tool, shown live as it happens.

The agent module (and with it the anthropic SDK) is imported only when a run starts.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_bash.terminal import escape

from ._context import _Context, _pick_host, _session
from ._output import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    PROG,
    _count,
    _duration,
    _err,
    _NoApiKey,
    _out_json,
    _out_raw,
    _UsageError,
)

if TYPE_CHECKING:
    from remote_bash.inventory import Inventory
    from remote_bash.redact import Redactor

    from ._approve import Mode, TerminalApprover


def _require_api_key(ctx: _Context, *, pattern: str | None = None) -> None:
    """No key, no run: say where keys come from, and the ``exec`` line that works without one, with
    a host of the configured inventory (or none, for the sandbox)."""
    env = ctx.env
    if env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_AUTH_TOKEN") or env.get("ANTHROPIC_BASE_URL"):
        return
    raise _NoApiKey(
        "no Anthropic API key: set ANTHROPIC_API_KEY (export ANTHROPIC_API_KEY=sk-ant-...; keys are at "
        f"https://console.anthropic.com/settings/keys); without a key this works: {_exec_hint(ctx, pattern)}"
    )


def _exec_hint(ctx: _Context, pattern: str | None) -> str:
    if pattern is not None:
        return f"{PROG} fleet exec {_quoted(pattern)} -- uptime"
    named: str | None = getattr(ctx.args, "host", None)
    from remote_bash.errors import RemoteBashError

    try:
        inventory = ctx.load()
    except RemoteBashError:  # a broken inventory is reported when the run loads it, not here
        inventory = None
    if inventory is None and ctx.inventory_path() is None:
        return f"{PROG} exec -- uname -a"  # the sandbox: no host to name
    if inventory is not None and inventory.hosts and named not in inventory.hosts:
        named = next(iter(inventory.hosts))  # never a name the inventory does not know
    return f"{PROG} exec {_quoted(named or 'HOST')} -- uptime"


def _quoted(word: str) -> str:
    import shlex

    return shlex.quote(word)


def _task_text(args: argparse.Namespace, *, optional: bool = False) -> str:
    task = " ".join(args.words) if args.words else (args.task or "")
    if not task.strip() and not optional:
        raise _UsageError(f'no task: {PROG} run "what Claude should do"')
    return task


def _cmd_run(ctx: _Context) -> int:
    _require_api_key(ctx)
    resume = Path(ctx.args.resume).expanduser() if ctx.args.resume else None
    task = _task_text(ctx.args, optional=resume is not None)
    with ctx.inventory() as inventory:
        name = _pick_host(inventory, ctx.args.host)
        return asyncio.run(_run(ctx, inventory, name, task, resume))


async def _run(ctx: _Context, inventory: Inventory, name: str, task: str, resume: Path | None) -> int:
    from remote_bash.agent import AgentConfig, run_agent

    options: dict[str, Any] = {}
    if ctx.args.model:
        options["model"] = ctx.args.model
    if ctx.args.max_turns:
        options["max_turns"] = ctx.args.max_turns
    options["tools"] = ctx.args.tools
    session, redactor = await _session(ctx, inventory, name)
    view = _AgentView(redactor, as_json=ctx.args.json, tty=sys.stdout.isatty())
    approver = _approver(ctx)
    if approver.mode == "all":
        session.host = session.host.model_copy(update={"approve": "all"})
    try:
        outcome = await run_agent(task, session, AgentConfig(**options), on_event=view, resume=resume,
                                  approver=approver)
    finally:
        await session.close()
    view.finish(outcome)
    if outcome.stop_reason == "interrupted":
        return EXIT_INTERRUPTED
    return 0 if outcome.stop_reason == "end_turn" else EXIT_FAILED


def _approver(ctx: _Context) -> TerminalApprover:
    from ._approve import TerminalApprover

    mode: Mode = "all" if ctx.args.approve is True else "none" if ctx.args.approve is False else "rules"
    from remote_bash._paths import account_name

    return TerminalApprover(account_name(), mode=mode, timeout=ctx.args.approve_timeout)


class _AgentView:
    """Shows an agent run as it happens: Claude's text, each command, a few lines of its output
    (the transcript keeps what Claude got), its exit status and duration; or JSON lines with ``--json``.
    Output is redacted here, as the session's streamed chunks are raw. Everything Claude or the
    host wrote is shown with what a terminal would act on escaped (:func:`escape`), so a command
    is shown as it will run: a ``\\r``, a backspace or a bidi override in it shows as such."""

    LINES = 6

    def __init__(self, redactor: Redactor, *, as_json: bool, tty: bool) -> None:
        self.redactor = redactor
        self.as_json = as_json
        self.tty = tty
        self.stream = redactor.stream()
        self.text_stream = redactor.stream()
        """Claude's text comes in pieces: masked as a stream, a line at a time, as output is."""
        self.shown = 0
        self.hidden = 0
        self.at_line_start = True

    def __call__(self, event: Any) -> None:
        kind: str = event.kind
        if kind == "text":
            self._text(self.text_stream.feed(event.text))
            return
        self._text(self.text_stream.flush())
        if kind == "output":
            text = self.stream.feed(event.text)
        elif kind == "result":
            # The editor streams nothing: its result (a view, a snippet) is what there is to show.
            text = self.stream.flush() if getattr(event, "tool", None) in (None, "bash") else \
                self.redactor.redact(event.text)
        else:
            text = self.redactor.redact(event.text) if event.text else event.text
        if self.as_json:
            self._json(event, text)
        elif kind == "command":
            self.stream = self.redactor.stream()
            self.shown = self.hidden = 0
            shown = ("(restart the shell)" if event.command is None
                     else escape(self.redactor.redact_command(event.command)))
            tool = getattr(event, "tool", None)
            prompt = ("$ " if tool in (None, "bash") else "edit: " if tool == "str_replace_based_edit_tool"
                      else f"{escape(str(tool))}: ")
            self._write(("" if self.at_line_start else "\n") + self._style(prompt + shown, "1;36") + "\n")
        elif kind in ("output", "result"):
            self._lines(text)
            if kind == "result":
                self._result(event)

    def _text(self, text: str) -> None:
        """Claude's text, masked already."""
        if not text:
            return
        if self.as_json:
            _out_json({"event": "text", "text": text})
        else:
            self._write(escape(text))

    def _json(self, event: Any, text: str) -> None:
        record: dict[str, Any] = {"event": event.kind}
        if event.kind in ("text", "output", "result", "stop", "error") and text:
            record["text"] = text if event.kind != "result" else self.redactor.redact(event.text)
        for key in ("tool_use_id", "command", "exit_code", "duration", "cost_usd"):
            value = getattr(event, key)
            if value is not None:
                record[key] = self.redactor.redact_command(value) if key == "command" else value
        if event.kind == "result":
            record["is_error"] = event.is_error
        if event.usage is not None:
            record["usage"] = event.usage.model_dump()
        if event.kind != "output" or text:
            _out_json(record)

    def _lines(self, text: str) -> None:
        # Split on newlines only: a line that holds a \r or a form feed shows it, escaped.
        lines = text.split("\n")
        if not lines[-1]:
            lines.pop()
        for line in lines:
            if self.shown < self.LINES:
                self.shown += 1
                self._write(self._style("  " + escape(line[:200]), "2") + "\n")
            else:
                self.hidden += 1

    def _result(self, event: Any) -> None:
        if self.hidden:
            # The transcript keeps the tool result: the whole output, or only its head and tail when
            # it was longer than the host's output limit.
            whole = len(event.text.splitlines()) >= self.shown + self.hidden
            where = "in the transcript" if whole else "only the first and last reached Claude and the transcript"
            lines = "line" if self.hidden == 1 else "lines"
            self._write(self._style(f"  ... {self.hidden} more {lines} ({where})", "2") + "\n")
        took = _duration(event.duration) if event.duration is not None else ""
        if event.exit_code is not None:
            note = f"exit {event.exit_code}, {took}"
        elif not event.is_error:
            note = f"done, {took}"
        else:
            note = escape(self.redactor.redact(event.text.splitlines()[-1] if event.text else "error")) + f", {took}"
        bad = event.is_error or bool(event.exit_code)
        self._write(self._style(f"  [{note}]", "31" if bad else "32") + "\n")

    def _style(self, text: str, code: str) -> str:
        # ``text`` is escaped already: the only escape sequences written are these.
        return f"\x1b[{code}m{text}\x1b[0m" if self.tty else text

    def _write(self, text: str) -> None:
        """Write text that is safe already (escaped, or styling built here)."""
        if text:
            _out_raw(text)
            self.at_line_start = text.endswith("\n")

    def finish(self, outcome: Any) -> None:
        usage = outcome.usage
        self._text(self.text_stream.flush())
        if self.as_json:
            record = {"event": "outcome", **outcome.model_dump(mode="json")}
            record["final_text"] = self.redactor.redact(record["final_text"])
            _out_json(record)
            return
        if not self.at_line_start:
            _out_raw("\n")
        _err(f"\n{outcome.message}. {_count(outcome.turns, 'turn')}; tokens: {usage.input_tokens:,} in, "
             f"{usage.cache_read_input_tokens:,} cached, {usage.cache_creation_input_tokens:,} cache writes, "
             f"{usage.output_tokens:,} out; estimated cost ${outcome.cost_usd:.4f}\n"
             f"transcript: {outcome.transcript} (continue with --resume)")
