"""What the fleet commands return: one result per host, and the whole run's, as plain data classes.

``fleet exec`` gives a :class:`FleetResult` of :class:`HostResult`; ``fleet run`` a
:class:`FleetRun` of :class:`HostRun`; both send :class:`FleetProgress` snapshots while they run.
Plain data with the exit-status rules of the CLI: what this module must never do is I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args

from remote_bash._plain import Model, Record, factory

__all__ = [
    "COORDINATOR",
    "Conversation",
    "FleetProgress",
    "FleetResult",
    "FleetRun",
    "HostResult",
    "HostRun",
    "Mode",
    "OutputGroup",
    "RunStatus",
    "Status",
    "count_statuses",
]

Status = Literal["ok", "failed", "unreachable", "timed_out", "refused", "error", "skipped"]
RunStatus = Literal["ok", "failed", "incomplete", "unreachable", "error", "skipped", "unused"]
Mode = Literal["per-host", "coordinator"]
COORDINATOR: Literal["coordinator"] = "coordinator"
"""The coordinator conversation's name in transcripts and ``on_event``."""

_RUN_EXIT_2: frozenset[str] = frozenset({"incomplete", "unreachable", "error", "skipped"})


def count_statuses(order: Iterable[str], statuses: Iterable[str]) -> dict[str, int]:
    """How many of each status, only those that occurred, in ``order`` (shared with fleet.exec)."""
    counts = dict.fromkeys(order, 0)
    for status in statuses:
        counts[status] += 1
    return {s: n for s, n in counts.items() if n}


class _Model(Model):
    _config: ClassVar[dict[str, Any]] = {"extra": "forbid", "frozen": True}



class HostResult(_Model):
    """What happened on one host."""

    host: str
    """The inventory name of the host."""
    status: Status
    """``ok`` (exit 0); ``failed`` (non-zero exit, or the shell died); ``timed_out`` (killed at the
    deadline); ``unreachable`` (no connection, so nothing ran); ``refused`` (the gate refused the host
    or a hop of its route, so nothing was connected, or the command policy refused the command,
    so nothing was sent); ``error`` (anything else, e.g. the connection died while the
    command ran: its effects are unknown); ``skipped`` (not started, after a failure with fail_fast)."""
    exit_code: int | None = None
    """The command's exit status; ``None`` when it did not run to its end."""
    duration: float = 0.0
    """Seconds from taking the host's slot to its result, connecting included."""
    output: str = ""
    """stdout and stderr interleaved, bounded by the host's ``output_limit`` (partial on timeout)."""
    first_line: str = ""
    """The first non-blank line of the output, stripped."""
    error: str | None = None
    """What went wrong, in a sentence, when the command did not simply run."""
    error_type: str | None = None
    """The remote_bash error class behind ``error`` (``ConnectionRefused``, ``PolicyDenied``, ...)."""
    attempts: int = 0
    """Connect attempts: 1 normally (also when an open session was reused), more when a dropped
    handshake was retried, 0 when no connection was tried (refused, skipped)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class OutputGroup(_Model):
    """Hosts whose command printed exactly the same text (trailing whitespace aside)."""

    output: str
    hosts: list[str]


_EXEC_EXIT_2: frozenset[str] = frozenset({"unreachable", "timed_out", "error", "skipped"})


class FleetResult(_Model):
    """The outcome of one command across the selected hosts."""

    command: str
    """The command as sent to every host, with secrets masked."""
    pattern: str
    """The host pattern the hosts were selected with."""
    results: list[HostResult] = factory(list)
    """One per selected host, in inventory order."""
    duration: float = 0.0
    """Wall-clock seconds for the whole fan-out."""

    @property
    def ok(self) -> bool:
        """True when the command exited 0 on every selected host."""
        return all(r.ok for r in self.results)

    @property
    def counts(self) -> dict[str, int]:
        """Hosts per status, only the statuses that occurred, in a fixed order."""
        return count_statuses(get_args(Status), (r.status for r in self.results))

    @property
    def exit_code(self) -> int:
        """The exit status for the CLI: 0 when every host is ok; 1 when the command ran everywhere
        but failed or was refused somewhere; 2 when on some host it did not run to its end
        (unreachable, timed out, error, or skipped by fail_fast). 2 wins over 1."""
        statuses = {r.status for r in self.results}
        if statuses & _EXEC_EXIT_2:
            return 2
        return 0 if statuses <= {"ok"} else 1

    def by_host(self) -> dict[str, HostResult]:
        return {r.host: r for r in self.results}

    def groups(self) -> list[OutputGroup]:
        """Hosts whose command completed (``ok`` or ``failed``), grouped by identical output,
        largest group first."""
        found: dict[str, list[str]] = {}
        for r in self.results:
            if r.status in ("ok", "failed"):
                found.setdefault(r.output.rstrip(), []).append(r.host)
        ordered = sorted(found.items(), key=lambda item: -len(item[1]))  # stable: first seen first
        return [OutputGroup._trusted(output=out, hosts=hosts) for out, hosts in ordered]

    def to_json(self, *, indent: int | None = 2) -> str:
        """The result as JSON, with ``ok``, ``exit_code`` and ``counts`` added."""
        data = self.model_dump(mode="json")
        data.update(ok=self.ok, exit_code=self.exit_code, counts=self.counts)
        return json.dumps(data, indent=indent, ensure_ascii=False)


class FleetProgress(Record):
    """A snapshot for a live display, sent when a host starts and when it ends."""

    total: int
    done: int
    running: int
    failed: int
    """Hosts done with any status other than ``ok``."""
    elapsed: float
    last: HostResult | HostRun | None = None
    """The result that just came in (a :class:`HostRun` for :func:`run`); ``None`` when a host just
    started."""

    @property
    def waiting(self) -> int:
        return self.total - self.done - self.running


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")




class Conversation(_Model):
    """How one conversation with Claude ended."""

    stop_reason: str
    """Claude's own stop reason (``end_turn``, ``max_tokens``, ...), the limit that stopped the run
    (``max_turns``, ``token_budget``, ``cost_budget``), ``interrupted``, or ``error`` when the API
    refused a request (or something else broke the run)."""
    message: str
    """One sentence saying why the conversation stopped."""
    turns: int = 0
    """Requests made to Claude."""
    tokens: int = 0
    """Tokens used, cached ones included."""
    cost_usd: float = 0.0
    """Estimated cost in US dollars (list prices; not an invoice)."""
    transcript: Path | None = None
    """The JSONL transcript (``remote-bash run --resume`` continues a per-host one)."""
    final_text: str = ""
    """The text of Claude's last reply."""


class HostRun(_Model):
    """What a fleet run did on one host."""

    host: str
    """The inventory name of the host."""
    status: RunStatus
    """``ok`` (the conversation ended with ``end_turn`` and the last command on the host was not an
    error); ``failed`` (it ended with ``end_turn`` but that last command was an error);
    ``incomplete`` (a limit, Claude's ``max_tokens`` or ``refusal``, or a stopped coordinator ended
    the conversation before Claude finished); ``unreachable`` (no connection, so nothing ran);
    ``error`` (the API refused a request, the host gate refused the host, or something else broke
    it); ``skipped`` (not started, after a failure with ``serial`` or ``fail_fast``); ``unused``
    (coordinator only: reachable, but Claude ran nothing on it)."""
    duration: float = 0.0
    """Seconds: the host's whole conversation per host; the host's commands for a coordinator."""
    commands: int = 0
    """Tool calls answered on this host (refused and failed ones included)."""
    last_error: str | None = None
    """The last line of the last command's result, when that result was an error."""
    summary: str = ""
    """The first line of Claude's last reply (per host), for a recap."""
    error: str | None = None
    """Why the status is not ``ok``, in a sentence."""
    error_type: str | None = None
    """The error class behind ``error`` (``ConnectionRefused``, ``AgentError``, ...), when there was one."""
    conversation: Conversation | None = None
    """This host's own conversation (per host); ``None`` for a coordinator run and when none began."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class FleetRun(_Model):
    """The outcome of a task across the selected hosts."""

    task: str
    """The task as given to Claude."""
    pattern: str
    """The host pattern the hosts were selected with."""
    mode: Mode
    """``per-host`` (a conversation per host) or ``coordinator`` (one for all)."""
    results: list[HostRun] = factory(list)
    """One per selected host, in inventory order."""
    coordinator: Conversation | None = None
    """The coordinator's conversation; ``None`` per host, or when no host could be reached."""
    duration: float = 0.0
    """Wall-clock seconds for the whole run."""

    @property
    def ok(self) -> bool:
        """True when every host is ok (a coordinator's unused hosts aside) and Claude finished."""
        return self.exit_code == 0

    @property
    def counts(self) -> dict[str, int]:
        """Hosts per status, only the statuses that occurred, in a fixed order."""
        return count_statuses(get_args(RunStatus), (r.status for r in self.results))

    @property
    def exit_code(self) -> int:
        """0 when every host is ok (or unused by a coordinator that finished); 1 when Claude finished
        everywhere but a host failed; 2 when a conversation did not finish, or a host was
        unreachable, broken or skipped. 2 wins over 1."""
        statuses = {r.status for r in self.results}
        unfinished = self.coordinator is not None and self.coordinator.stop_reason != "end_turn"
        if statuses & _RUN_EXIT_2 or unfinished:
            return 2
        return 0 if statuses <= {"ok", "unused"} else 1

    @property
    def cost_usd(self) -> float:
        """Estimated US dollars over every conversation."""
        return sum(c.cost_usd for c in self._conversations())

    @property
    def tokens(self) -> int:
        return sum(c.tokens for c in self._conversations())

    @property
    def turns(self) -> int:
        return sum(c.turns for c in self._conversations())

    def _conversations(self) -> list[Conversation]:
        if self.coordinator is not None:
            return [self.coordinator]
        return [r.conversation for r in self.results if r.conversation is not None]

    def by_host(self) -> dict[str, HostRun]:
        return {r.host: r for r in self.results}

    def to_json(self, *, indent: int | None = 2) -> str:
        """The result as JSON, with ``ok``, ``exit_code``, ``counts`` and the totals added."""
        data = self.model_dump(mode="json")
        data.update(ok=self.ok, exit_code=self.exit_code, counts=self.counts, turns=self.turns,
                    tokens=self.tokens, cost_usd=round(self.cost_usd, 6))
        return json.dumps(data, indent=indent, ensure_ascii=False)
