"""The fleet's results as text for a person, and as one file per host for scripts.

What this module must never do: print (the CLI does), or write outside the directory it is given.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from remote_bash._paths import private_dir, write_private
from remote_bash.terminal import escape

from .results import FleetResult, FleetRun, _first_line

__all__ = ["format_recap", "format_run_recap", "write_output_dir", "write_run_output_dir"]

def _count(n: int, noun: str) -> str:
    """``1 host``, ``2 hosts``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _seconds(value: float) -> str:
    return f"{value:.2f}s" if value < 10 else f"{value:.1f}s"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def format_recap(result: FleetResult, *, width: int = 120, max_names: int = 8, max_lines: int = 20) -> str:
    """A table (host, status, exit, time, first line of output or error), a summary line, then
    the distinct outputs (at most ``max_lines`` lines each) with the hosts that printed each.
    What the hosts printed is shown with terminal controls escaped (:func:`terminal.escape`)."""
    rows = [("HOST", "STATUS", "EXIT", "TIME", "OUTPUT")]
    for r in result.results:
        completed = r.status in ("ok", "failed")
        shown = escape(r.first_line if completed else _first_line(r.error or "") or r.first_line)
        rows.append((r.host, r.status, "-" if r.exit_code is None else str(r.exit_code),
                     _seconds(r.duration), shown))
    sizes = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for row in rows:
        head = "  ".join(cell.ljust(size) for cell, size in zip(row[:4], sizes, strict=True))
        lines.append(f"{head}  {_clip(row[4], max(20, width - len(head) - 2))}".rstrip())
    counts = ", ".join(f"{n} {status}" for status, n in result.counts.items())
    lines.append("")
    lines.append(f"{_count(len(result.results), 'host')} in {_seconds(result.duration)}: {counts or 'none selected'}")
    for group in result.groups():
        names = ", ".join(group.hosts[:max_names])
        if len(group.hosts) > max_names:
            names += f" and {len(group.hosts) - max_names} more"
        noun = "host" if len(group.hosts) == 1 else "hosts"
        body = escape(group.output) or "(no output)"
        if "\n" not in body:
            lines.append(f"\n{len(group.hosts)} {noun}: {_clip(body, width)}\n  ({names})")
        else:
            lines.append(f"\n{len(group.hosts)} {noun} ({names}):")
            body_lines = body.splitlines()
            lines.extend(f"  {_clip(line, width)}" for line in body_lines[:max_lines])
            if len(body_lines) > max_lines:
                more = len(body_lines) - max_lines
                lines.append(f"  ... {more} more lines (all of them in the output directory)")
    return "\n".join(lines) + "\n"


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _file_name(host: str) -> str:
    """A host name made safe as a file name: no separators, no leading dot."""
    return _UNSAFE.sub("_", host).lstrip(".") or "_"


def _output_path(root: Path, host: str, written: Sequence[Path]) -> Path:
    """``root/<host>.txt``, numbered when two host names come out the same."""
    name = _file_name(host)
    path = root / f"{name}.txt"
    n = 1
    while path in written:
        n += 1
        path = root / f"{name}-{n}.txt"
    return path


def write_output_dir(result: FleetResult, directory: str | Path) -> list[Path]:
    """Write ``<host>.txt`` per host: a few ``# key: value`` header lines, a blank line, the output.
    The header's command and error are shown as the CLI paints text (controls escaped): a file is
    read on a terminal later. The output is as Claude reads it (escape sequences removed)."""
    root = private_dir(directory, what="--output-dir")
    written: list[Path] = []
    for r in result.results:
        path = _output_path(root, r.host, written)
        header = {"host": r.host, "status": r.status, "exit": "-" if r.exit_code is None else r.exit_code,
                  "duration": f"{r.duration:.3f}", "command": escape(result.command.replace("\n", "\\n"))}
        if r.error:
            header["error"] = escape(r.error.replace("\n", " "))
        text = "".join(f"# {k}: {v}\n" for k, v in header.items()) + "\n" + r.output
        write_private(path, text.encode(), what="--output-dir")
        written.append(path)
    return written




def _money(value: float) -> str:
    return f"${value:.4f}"


def format_run_recap(result: FleetRun, *, width: int = 120, max_lines: int = 40) -> str:
    """A table (host, status, turns, commands, cost, time, summary or error), a totals line, where the
    transcripts are, and for a coordinator Claude's final answer (at most ``max_lines`` lines).
    Claude's and the hosts' words are shown with terminal controls escaped."""

    per_host = result.mode == "per-host"
    rows = [["HOST", "STATUS", "TURNS", "CMDS", "COST", "TIME", "SUMMARY"]]
    for r in result.results:
        c = r.conversation
        ran = r.status != "skipped"
        shown = escape(r.summary if r.ok or not r.error else _first_line(r.error))
        rows.append([r.host, r.status, str(c.turns) if c else "-", str(r.commands) if ran else "-",
                     _money(c.cost_usd) if c else "-", _seconds(r.duration) if ran else "-", shown])
    if not per_host:  # one conversation: its turns and cost are in the totals line
        rows = [[row[i] for i in (0, 1, 3, 5, 6)] for row in rows]
    sizes = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        head = "  ".join(cell.ljust(size) for cell, size in zip(row[:-1], sizes, strict=True))
        lines.append(f"{head}  {_clip(row[-1], max(20, width - len(head) - 2))}".rstrip())
    counts = ", ".join(f"{n} {status}" for status, n in result.counts.items())
    lines.append("")
    totals = (f"{_count(result.turns, 'turn')}, {_count(result.tokens, 'token')}, about {_money(result.cost_usd)}"
              if result.turns else "no conversation")
    lines.append(f"{_count(len(result.results), 'host')} in {_seconds(result.duration)}: {counts or 'none selected'}; "
                 f"{totals}")
    if per_host:
        paths = [r.conversation.transcript for r in result.results if r.conversation and r.conversation.transcript]
        folders = sorted({str(p.parent) for p in paths})
        if len(folders) == 1:
            lines.append(f"transcripts: {folders[0]}")
        lines.extend(f"transcript of {r.host}: {r.conversation.transcript}" for r in result.results
                     if len(folders) > 1 and r.conversation and r.conversation.transcript)
    elif result.coordinator is not None:
        c = result.coordinator
        lines.append(f"coordinator: {c.message}; transcript: {c.transcript or '(none)'}")
        if c.final_text.strip():
            body = escape(c.final_text.strip()).split("\n")
            lines.append("")
            lines.extend(_clip(line, width) for line in body[:max_lines])
            if len(body) > max_lines:
                lines.append(f"... {len(body) - max_lines} more lines (in the transcript)")
    return "\n".join(lines) + "\n"


def write_run_output_dir(result: FleetRun, directory: str | Path) -> list[Path]:
    """Write ``<host>.txt`` per host: ``# key: value`` header lines (status, transcript, ...), a blank
    line, then Claude's final answer (the coordinator's, for a coordinator run)."""

    root = private_dir(directory, what="--output-dir")
    written: list[Path] = []
    for r in result.results:
        conversation = r.conversation or result.coordinator
        header: dict[str, Any] = {"host": r.host, "status": r.status, "mode": result.mode,
                                  "commands": r.commands, "duration": f"{r.duration:.3f}"}
        if conversation is not None:
            header.update(stop_reason=conversation.stop_reason, turns=conversation.turns,
                          cost_usd=f"{conversation.cost_usd:.6f}", transcript=conversation.transcript or "-")
        if r.error:
            header["error"] = r.error
        header["task"] = result.task
        text = "".join(f"# {k}: {str(v).replace(chr(10), ' ')}\n" for k, v in header.items())
        final = conversation.final_text if conversation is not None else ""
        path = _output_path(root, r.host, written)
        write_private(path, (text + "\n" + (final.rstrip() + "\n" if final.strip() else "")).encode(),
                      what="--output-dir")
        written.append(path)
    return written
