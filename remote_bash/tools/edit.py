"""The text editor tool (``text_editor_20250728``) on the session's host: a ``tool_use`` in, a
``tool_result`` out.

``view``, ``create``, ``str_replace`` and ``insert`` work on the host the bash session runs on,
over the session's own SSH connection (SFTP, or ``sh`` scripts on exec channels when the host
has no SFTP subsystem), while the session is held: an edit never interleaves with a command of
the same session, and two edits run one after the other. The host's ``edit`` policy is checked
before anything is sent; every call is audited (``edit.start`` before, ``edit.end`` after).

``EditHandler.handle`` never raises for anything Claude can cause: a bad input, a refused path, a
missing file, an ambiguous ``old_str``, a lost connection all come back as a ``tool_result``
with ``is_error: true`` and a sentence that says what to do. It never replaces a file in
place: a new file is written beside it, then renamed over it.

What this module must never do: import anthropic (``remote_bash.EditTool``, in
``remote_bash.agent``, is this tool as the SDK's tool runner takes it).
"""

from __future__ import annotations

import asyncio
import hashlib
import posixpath
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from remote_bash._ssh import FileInfo, SshConnection
from remote_bash.errors import AccessDenied, AuditError, ConnectError, RemoteBashError, RemoteFileError
from remote_bash.framing import clean_text, shell_quote

from . import _text
from ._base import SessionTool, ask_approval, tool_result
from ._edit_policy import WRITES, check_path, normalize, path_problem
from ._shell_files import ShellFiles

__all__ = ["COMMANDS", "TOOL_NAME", "TOOL_TYPE", "EditHandler", "approval_text"]

TOOL_TYPE = "text_editor_20250728"
TOOL_NAME = "str_replace_based_edit_tool"
COMMANDS = ("view", "create", "str_replace", "insert")
VIEW_LIMIT = 256 * 1024
"""Largest file shown whole; a larger one needs a view_range."""
MAX_FILE_BYTES = 16 * 1024 * 1024
"""Largest file the editor reads at all."""
MAX_TEXT_CHARS = 1_000_000
"""Largest file_text, old_str, new_str or insert_text."""
LIST_LIMIT = 1000
DIFF_LIMIT = 2000
NEW_FILE_MODE = 0o644

_FIELDS = {
    "view": ({"path"}, {"view_range"}),
    "create": ({"path", "file_text"}, set()),
    "str_replace": ({"path", "old_str"}, {"new_str"}),
    "insert": ({"path", "insert_line"}, {"insert_text", "new_str"}),
}


class _Files(Protocol):
    async def inspect(self, path: str) -> FileInfo: ...
    async def read(self, path: str, limit: int) -> bytes: ...
    async def write(self, path: str, data: bytes, *, mode: int, owner: tuple[int, int] | None,
                    create: bool) -> bool: ...
    async def listing(self, path: str, *, depth: int, limit: int) -> list[tuple[str, bool]]: ...


class _Outcome:
    """What one call did, for its ``edit.end`` record."""

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}
        self.target: str | None = None
        """The file a link points to, when the path is one."""


@dataclass(eq=False, kw_only=True)
class EditHandler(SessionTool):
    """Claude's text editor tool on the host of a remote bash session, without the anthropic SDK.

    The MCP server and the fleet's ``remote_edit`` tool use it as it is; ``remote_bash.EditTool``
    adds the SDK tool runner's entry point."""

    tool_type, tool_name = TOOL_TYPE, TOOL_NAME
    max_characters: int | None = None
    """Longest view shown, in characters (sent in the tool definition); None for the tool's default."""

    def __post_init__(self) -> None:
        if self.max_characters is not None and self.max_characters < 1:
            raise ValueError(f"max_characters must be positive, got {self.max_characters}")

    def to_dict(self) -> dict[str, Any]:
        """The tool definition sent to the Messages API."""
        definition = super().to_dict()
        if self.max_characters is not None:
            definition["max_characters"] = self.max_characters
        return definition

    async def run(self, tool_input: object, *, tool_use_id: str | None) -> dict[str, Any]:
        """Validate the input, check the policy, do the command, build the tool_result."""
        problem = _check_input(tool_input)
        if problem:
            return self._reply(tool_use_id, f"Error: {problem}", True)
        assert isinstance(tool_input, Mapping)
        command = str(tool_input["command"])
        path = normalize(str(tool_input["path"]))
        refusal = await self._refuse(command, path, tool_use_id)
        if refusal:
            return self._reply(tool_use_id, refusal, True, path)
        host = self.session.host
        deadline = self.timeout if self.timeout is not None else host.command_timeout
        target: str | None = None
        if command in WRITES and host.approve:
            # The rules are asked about the file that is written: through a link, its target.
            try:
                target = await self._resolve(path, deadline)
            except (RemoteBashError, TimeoutError) as exc:
                why = exc.message if isinstance(exc, RemoteBashError) else f"no answer within {deadline:g} s"
                return self._reply(tool_use_id, f"Error: nothing was done: where {path} leads could not be looked "
                                                f"up to ask this host's approval rules: {why}", True, path)
            if target != path:
                refusal = await self._refuse(command, target, tool_use_id)
                if refusal:
                    return self._reply(tool_use_id, refusal.replace("refused before", "refused (the path is a "
                                                                    "link) before"), True, path, target)
        said = approval_text(tool_input, target)
        if said is not None:
            try:
                refusal = await ask_approval(self.session, said, tool_use_id, self.approver)
            except AuditError as exc:
                refusal = f"Error: nothing was done, because it could not be audited: {exc.message}"
            if refusal:
                return self._reply(tool_use_id, refusal.replace("this command", "this edit"), True, path, target)
        outcome = _Outcome()
        started = time.monotonic()
        try:
            async with self.session.exclusive() as conn:
                await self.session.audit("edit.start", strict=True, command=command, path=self._path(path),
                                         tool_use_id=tool_use_id)
                try:
                    async with asyncio.timeout(deadline):
                        files = await self._files(conn, deadline)
                        text, is_error = await self._do(files, command, path, tool_input, tool_use_id, outcome,
                                                        target)
                except TimeoutError:
                    text, is_error = (f"Error: the {command} of {path} did not finish within {deadline:g} s; "
                                      + ("the file is either as it was or wholly replaced (a write is a rename, "
                                         "never a part): view it to see which."
                                         if command in WRITES else "try again, or view a smaller view_range.")), True
                    outcome.fields["error"] = f"timed out after {deadline:g} s"
                except _text.EditRefused as exc:
                    text, is_error = f"Error: {exc.message}", True
                    outcome.fields["error"] = exc.message
                except RemoteFileError as exc:
                    text, is_error = f"Error: {exc.message}{_hint(exc.reason, command)}", True
                    outcome.fields["error"] = exc.message
                except RemoteBashError as exc:
                    outcome.fields["error"] = exc.message
                    await self._end(command, path, tool_use_id, outcome, started)
                    raise
                await self._end(command, path, tool_use_id, outcome, started)
        except AccessDenied as exc:  # the host gate; already audited by it
            return self._reply(tool_use_id, f"Error: refused before anything was sent: {exc.message}", True, path)
        except AuditError as exc:
            return self._reply(tool_use_id, f"Error: nothing was done, because it could not be audited: "
                                            f"{exc.message}", True, path)
        except ConnectError as exc:
            return self._reply(tool_use_id, f"Error: could not reach the host: {exc.message}", True, path)
        except RemoteBashError as exc:
            return self._reply(tool_use_id, f"Error: {exc.message}; the file was not changed unless "
                                            "a view of it says otherwise.", True, path, outcome.target)
        return self._reply(tool_use_id, text, is_error, path, outcome.target)

    # -- policy, audit, result --------------------------------------------------------

    async def _refuse(self, command: str, path: str, tool_use_id: str | None) -> str | None:
        decision = check_path(path, command, self.session.host.edit)
        if decision.allowed:
            return None
        shown = self._path(path)
        await self.session.audit("policy.denied", command=f"{command} {shown}", path=shown, tool_use=TOOL_NAME,
                                 tool_use_id=tool_use_id, rule=decision.rule,
                                 error=decision.reason.replace(path, shown))
        return f"Error: refused before anything was sent: {decision.reason}."

    async def _end(self, command: str, path: str, tool_use_id: str | None, outcome: _Outcome,
                   started: float) -> None:
        fields = dict(outcome.fields)
        if outcome.target:
            fields["target"] = self._path(outcome.target)
        if isinstance(fields.get("error"), str):
            fields["error"] = self._shown(fields["error"], path, outcome.target)
        await self.session.audit("edit.end", command=command, path=self._path(path), tool_use_id=tool_use_id,
                                 duration=round(time.monotonic() - started, 6), **fields)

    # What Claude reads and the audit records follow the bash tool's output: terminal control
    # text removed, carriage returns collapsed (masked before and after), secrets masked. The
    # file itself is read and written byte for byte.

    def _clean(self, text: str) -> str:
        """``text`` as the bash tool shows a command's output."""
        redact = self.session.redact
        return redact(clean_text(text, redact=redact))

    def _line(self, line: str) -> str:
        """One line of a file as it is shown: the whole text is masked again after."""
        return clean_text(line, redact=self.session.redact)

    def _lines(self, text: str) -> str:
        """Lines of a file as they are shown, masked with every line kept in its place."""
        return self.session.redact_lines(text)

    def _path(self, path: str) -> str:
        """A path as it is shown and recorded: each name in it cleaned and masked on its own, as
        ``ls`` shows it (a secret in a file name follows a ``/``, where no rule looks for it)."""
        return "/".join(self._clean(part) for part in path.split("/"))

    def _shown(self, text: str, *paths: str | None) -> str:
        masked = isinstance(text, _text.Masked)
        for path in paths:
            if path:
                shown = self._path(path)
                if shown != path:
                    text = text.replace(path, shown)
        # A view's or snippet's lines were masked before they were numbered: not again after.
        return text if masked else self._clean(text)

    def _reply(self, tool_use_id: str | None, text: str, is_error: bool, *paths: str | None) -> dict[str, Any]:
        shown, _cut = _text.bound(self._shown(text, *paths), self.session.host.output_limit)
        return tool_result(tool_use_id, shown, is_error)

    async def _resolve(self, path: str, deadline: float) -> str:
        """Where ``path`` leads on the host, every link followed (metadata only)."""
        async with self.session.exclusive() as conn, asyncio.timeout(deadline):
            files = await self._files(conn, deadline)
            return (await files.inspect(path)).path

    async def _files(self, conn: SshConnection, deadline: float) -> _Files:
        sftp = await conn.sftp(timeout=deadline)
        return sftp if sftp is not None else ShellFiles(conn, timeout=deadline)

    # -- the commands -------------------------------------------------------------------

    async def _do(self, files: _Files, command: str, path: str, args: Mapping[str, Any],
                  tool_use_id: str | None, outcome: _Outcome, approved: str | None = None) -> tuple[str, bool]:
        outcome.fields["via"] = "sftp" if not isinstance(files, ShellFiles) else "shell"
        info = await files.inspect(path)
        if approved is not None and info.path != approved:
            outcome.target = info.path
            raise _text.EditRefused(f"{path} now leads to {info.path}, not to {approved} as when this host's "
                                    "approval rules were asked; nothing was written: try again")
        if info.path != path:
            outcome.target = info.path
            refusal = await self._refuse(command, info.path, tool_use_id)
            if refusal:
                outcome.fields["error"] = "refused by the edit policy (symbolic link target)"
                return refusal.replace("refused before", "refused (the path is a link) before"), True
        if command == "create":
            return await self._create(files, path, info, str(args["file_text"]), outcome)
        if info.kind == "missing":
            link = " (a symbolic link to a missing file)" if info.link else ""
            raise _text.EditRefused(f"{path} does not exist{link}. View its directory "
                                    f"({posixpath.dirname(path)}) to find the right name"
                                    + (", or create it with the create command" if command != "view" else ""))
        if info.kind == "other":
            raise _text.EditRefused(f"{path} is neither a regular file nor a directory (a device, FIFO or "
                                    "socket); the editor does not open those: use bash")
        if info.kind == "dir":
            if command != "view":
                raise _text.EditRefused(f"{path} is a directory; {command} works on files")
            if "view_range" in args and args["view_range"] is not None:
                raise _text.EditRefused("view_range applies to files; view a directory without it")
            found = await files.listing(info.path, depth=2, limit=LIST_LIMIT)
            # What the policy would refuse to view is not listed either.
            policy = self.session.host.edit
            entries = [(name, is_dir) for name, is_dir in found
                       if check_path(posixpath.join(info.path, name), "view", policy).allowed]
            listing = _text.format_listing(path, entries, LIST_LIMIT, self._clean, stopped=len(found) >= LIST_LIMIT)
            left_out = len(found) - len(entries)
            if left_out:
                listing += (f"\n({left_out} {'entry' if left_out == 1 else 'entries'} this host's edit policy "
                            "refuses to view left out)")
            return listing, False
        view_range = args.get("view_range") if command == "view" else None
        if info.size > MAX_FILE_BYTES:
            raise _text.EditRefused(f"{path} is {info.size:,} bytes; the editor reads files up to "
                                    f"{MAX_FILE_BYTES:,} bytes. Use bash (grep -n, sed -n '100,200p')")
        if command == "view" and view_range is None and info.size > VIEW_LIMIT:
            raise _text.EditRefused(f"{path} is {info.size:,} bytes, more than the {VIEW_LIMIT:,} shown whole; "
                                    "view part of it with view_range, e.g. [1, 200], or search it with bash "
                                    "(grep -n)")
        # Ask for what the file holds (and some room to grow), not the cap: an SFTP read asks for
        # every block of the size requested at once.
        limit = min(MAX_FILE_BYTES, info.size + 65536)
        data = await files.read(info.path, limit)
        if len(data) > limit:
            raise _text.EditRefused(f"{path} grew by more than 64 KiB while it was read (something is writing "
                                    "to it); look at it with bash, then try again")
        if _text.looks_binary(data):
            raise _text.EditRefused(f"{path} looks binary (it contains NUL bytes); the editor handles text "
                                    "only. Inspect it with bash (file, xxd | head)")
        before = hashlib.sha256(data).hexdigest()
        outcome.fields["sha256_before"] = before
        doc = _text.decode(data)
        if command == "view":
            outcome.fields["bytes_read"] = len(data)
            return _text.view_file(doc, path, view_range, self.max_characters, self._line, self._lines), False
        if command == "str_replace":
            old = doc.normalize(str(args["old_str"]))
            new = doc.normalize(str(args.get("new_str") or ""))
            try:
                text, first, last = _text.replace_unique(doc.text, old, new, path)
            except _text.EditRefused as exc:
                if "does not occur" in exc.message and "\ufffd" in old and doc.invalid_bytes:
                    raise _text.EditRefused(exc.message + ". The file holds bytes that are not UTF-8, shown as "
                                            "\ufffd; old_str cannot match them: match the text beside them "
                                            "instead, and they are kept as they are") from exc
                if "does not occur" in exc.message and "[REDACTED" in old:
                    raise _text.EditRefused(exc.message + ". The [REDACTED:...] mask in the view stands for a "
                                            "secret that is not shown: match the text around it instead") from exc
                raise
        else:
            raw = args.get("insert_text", args.get("new_str"))
            text, first, last = _text.insert_lines(doc.text, args["insert_line"], doc.normalize(str(raw)), path)
        if text == doc.text:
            outcome.fields["sha256_after"] = before
            outcome.fields["bytes_written"] = 0
            return f"The file {path} is unchanged: new_str is the same as old_str. Nothing was written.", False
        new_data = _text.encode(text, doc.crlf)
        outcome.fields["diff"] = _text.diff_excerpt(doc.text, text, self._path(path), DIFF_LIMIT, clean=self._line,
                                                    mask=self._clean, mask_lines=self._lines)
        kept = await files.write(info.path, new_data, mode=info.mode, owner=(info.uid, info.gid), create=False)
        outcome.fields.update(sha256_after=hashlib.sha256(new_data).hexdigest(), bytes_written=len(new_data),
                              owner_kept=kept)
        result = _text.snippet(text, first, last, path, self._line, self._lines)
        if not kept:
            result = _text.Masked(result + f"\nNote: the file belonged to uid {info.uid}, gid {info.gid}; the new "
                                  "file is owned by the remote user, who may not give files away.")
        return result, False

    async def _create(self, files: _Files, path: str, info: FileInfo, file_text: str,
                      outcome: _Outcome) -> tuple[str, bool]:
        if info.kind != "missing":
            what = {"file": "a file", "dir": "a directory"}.get(info.kind, "something other than a file")
            raise _text.EditRefused(f"{path} already exists ({what}); create never overwrites. Change it with "
                                    "str_replace or insert, or remove it with bash first if it must be replaced "
                                    "whole")
        folder = posixpath.dirname(info.path)
        parent = await files.inspect(folder)
        if parent.kind != "dir":
            raise _text.EditRefused(f"the directory {posixpath.dirname(path)} does not exist; create it with bash "
                                    "(mkdir -p) first")
        data = file_text.encode("utf-8", "surrogateescape")
        outcome.fields["diff"] = _text.diff_excerpt("", file_text, self._path(path), DIFF_LIMIT, clean=self._line,
                                                    mask=self._clean, mask_lines=self._lines)
        await files.write(info.path, data, mode=NEW_FILE_MODE, owner=None, create=True)
        outcome.fields.update(sha256_after=hashlib.sha256(data).hexdigest(), bytes_written=len(data))
        lines = len(_text.split_lines(file_text))
        return (f"File created successfully at {path} ({lines} line(s), {len(data):,} bytes, mode "
                f"{NEW_FILE_MODE:o}).", False)


def _hint(reason: str, command: str) -> str:
    if reason == "denied":
        return ". The remote user may not do this; the file was not changed" if command in WRITES else \
            ". The remote user may not read it"
    if reason == "exists":
        return ". Something was created at that path meanwhile; view it before going on"
    return ". The file was not changed" if command in WRITES else ""


def _text_problem(name: str, value: object) -> str | None:
    if not isinstance(value, str):
        return f"'{name}' must be a string, got {type(value).__name__}"
    if "\x00" in value:
        return f"'{name}' contains a NUL byte; the editor writes text files only"
    if any("\ud800" <= c <= "\udfff" for c in value):
        return f"'{name}' contains a lone surrogate code point (not valid UTF-8 text); send plain text"
    if len(value) > MAX_TEXT_CHARS:
        return (f"'{name}' is {len(value):,} characters; the limit is {MAX_TEXT_CHARS:,}. Write large files in "
                "parts (create, then insert)")
    return None


def approval_text(tool_input: Mapping[str, Any], target: str | None = None) -> str | None:
    """The shell text an edit is put to the host's approval rules as (they read shell text): a write
    as what it does, to ``target`` when the path is a link to it; None for a read."""
    command = str(tool_input.get("command"))
    if command not in WRITES:
        return None
    path = shell_quote(normalize(str(tool_input.get("path"))))
    if target is not None and shell_quote(target) != path:
        return f"# text editor: {command} {path} (a link to {shell_quote(target)})\ncat > {shell_quote(target)}"
    return f"# text editor: {command} {path}\ncat > {path}"


def _check_input(tool_input: object) -> str | None:
    if not isinstance(tool_input, Mapping):
        return f"the tool input must be an object with 'command' and 'path', got {type(tool_input).__name__}"
    command = tool_input.get("command")
    if command == "undo_edit":
        return "undo_edit is not part of text_editor_20250728; change the file back with str_replace"
    if command not in COMMANDS:
        return f"'command' must be one of {', '.join(COMMANDS)}, got {command!r}"
    problem = path_problem(tool_input.get("path"))
    if problem:
        return problem
    required, optional = _FIELDS[command]
    missing = sorted(required - set(tool_input))
    if command == "insert" and "insert_text" not in tool_input and "new_str" not in tool_input:
        missing.append("insert_text")
    if missing:
        return f"{command} needs {', '.join(map(repr, missing))}"
    unknown = sorted(set(tool_input) - required - optional - {"command"})
    if unknown:
        allowed = ", ".join(sorted(required | optional))
        return f"unknown input field(s) {', '.join(map(repr, unknown))} for {command}; it takes {allowed}"
    for name in ("file_text", "old_str", "new_str", "insert_text"):
        if name in tool_input and not (name == "new_str" and tool_input[name] is None):
            problem = _text_problem(name, tool_input[name])
            if problem:
                return problem
    return None
