"""An agent run's transcript: one JSONL line per event as it happens, and the conversation rebuilt
from it to resume a run.

What this module must never do: import anthropic, or re-run anything: a command whose result a
transcript does not hold is answered, on resume, with an error that says its effect is unknown.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ._paths import open_private, private_dir, state_dir
from .errors import RemoteBashError

__all__ = ["AgentError", "Transcript", "add_user", "answer_pending", "block_param", "default_transcript",
           "default_transcript_dir", "now", "rebuild"]


class AgentError(RemoteBashError):
    """The agent run could not go on (the API refused a request, a transcript is unusable).

    ``transcript`` is the transcript written so far, when there is one.
    """

    def __init__(self, message: str, *, host: str | None = None, transcript: Path | None = None) -> None:
        super().__init__(message, host=host)
        self.transcript = transcript


class Transcript:
    """Append-only JSONL, one flushed line per event.

    Written synchronously on purpose: appending a line to a local file takes microseconds, and a
    write handed to a thread could itself be cancelled by the Ctrl-C it is meant to record.
    """

    def __init__(self, path: Path, redact: Callable[[str], str]) -> None:
        self.path = path
        self._redact = redact
        # The transcript holds command output: readable by its owner only, never through a link.
        private_dir(path.parent, what="transcripts")
        fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, what="the transcript")
        self._fh = os.fdopen(fd, "a", encoding="utf-8")

    def write(self, kind: str, **fields: Any) -> None:
        # Every string masked: commands Claude wrote, the task, Claude's text (a resumed run is
        # rebuilt from these, so it continues with the masks in place of the secrets).
        record = {"type": kind, "time": now(), **_masked(fields, self._redact)}
        line = json.dumps(record, ensure_ascii=False, default=str)
        if not line.isascii():
            try:
                line.encode("utf-8")
            except UnicodeEncodeError:
                # A lone surrogate (Claude's text may hold one) has no UTF-8 form: JSON's \uXXXX
                # escapes keep it exactly, so a resumed run reads back what was sent.
                line = json.dumps(record, ensure_ascii=True, default=str)
        self._fh.write(line + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def _masked(value: Any, redact: Callable[[str], str]) -> Any:
    """``value`` (JSON-like) with ``redact`` applied to every string in it, keys aside."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _masked(v, redact) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(v, redact) for v in value]
    return value


_PARAM_KEYS = {
    "text": ("type", "text"),
    "tool_use": ("type", "id", "name", "input"),
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
}


def block_param(block: dict[str, Any]) -> dict[str, Any]:
    """A reply's content block as it is sent back in ``messages``."""
    keys = _PARAM_KEYS.get(block.get("type", ""))
    if keys is None:
        return {k: v for k, v in block.items() if k != "parsed_output"}
    return {k: block[k] for k in keys if k in block}


def add_user(messages: list[dict[str, Any]], blocks: list[dict[str, Any]]) -> None:
    """Append user content, merged into a trailing user message so roles keep alternating."""
    if messages and messages[-1]["role"] == "user":
        content = messages[-1]["content"]
        head = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        messages[-1] = {"role": "user", "content": head + blocks}
    else:
        messages.append({"role": "user", "content": list(blocks)})


_NOT_RECORDED = ("Error: the previous agent run stopped before this command's result was recorded: it may "
                 "not have run, or may have run in part. Its effect on the host is unknown; check before "
                 "repeating it.")
_INTERRUPTED = ("Error: the previous agent run was interrupted while this command ran, and the command was "
                "killed. Its effect on the host is unknown; check before repeating it.")


def rebuild(path: Path, host: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The conversation recorded in a transcript (task, replies, tool results, in order), and its records.

    The tool_use blocks of the last reply may still be unanswered: see ``answer_pending``."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise AgentError(f"cannot read the transcript {path}: {exc.strerror or exc}") from exc
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if number == len(lines):  # a line cut short by a crash
                break
            raise AgentError(f"{path}:{number}: not a JSON line ({exc.msg}); the transcript is damaged",
                             transcript=path) from exc
    meta = next((r for r in records if r.get("type") == "meta"), None)
    if meta is None:
        raise AgentError(f"{path} has no meta line: it is not a remote_bash transcript")
    if meta.get("host") != host:
        raise AgentError(f"{path} is a run on host {meta.get('host')!r}, not {host!r}: resume it on "
                         "that host", transcript=path)
    messages: list[dict[str, Any]] = [{"role": "user", "content": meta["task"]}]
    for record in records:
        kind = record.get("type")
        if kind == "response":
            answer_pending(messages, records)
            blocks = [block_param(b) for b in record["message"]["content"]]
            messages.append({"role": "assistant", "content": blocks})
        elif kind in ("tool_results", "user"):
            add_user(messages, record["content"])
    return messages, records


def answer_pending(messages: list[dict[str, Any]], records: list[dict[str, Any]],
                    transcript: Transcript | None = None) -> None:
    """Answer tool_use blocks of the last reply that have no result: with the recorded result of
    the command when there is one, else with an error. Nothing is re-run."""
    if not messages or messages[-1]["role"] != "assistant":
        return
    uses = [b for b in messages[-1]["content"] if b.get("type") == "tool_use"]
    if not uses:
        return
    commands = {r["tool_use_id"]: r for r in records if r.get("type") == "command"}
    results = []
    for block in uses:
        ran = commands.get(block["id"], {})
        if isinstance(ran.get("result"), dict):
            results.append(ran["result"])
        else:
            text = _INTERRUPTED if ran.get("interrupted") else _NOT_RECORDED
            results.append({"type": "tool_result", "tool_use_id": block["id"], "content": text,
                            "is_error": True})
    add_user(messages, results)
    if transcript is not None:
        transcript.write("tool_results", content=results, recovered=True)


def default_transcript_dir() -> Path:
    """Where transcripts go unless told otherwise: ``$XDG_STATE_HOME/remote-bash/transcripts``."""
    return state_dir() / "transcripts"


def default_transcript(host: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return default_transcript_dir() / f"{host}-{stamp}-{os.getpid()}.jsonl"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
