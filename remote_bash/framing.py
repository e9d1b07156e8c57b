"""Pure framing: wrap a command for the remote bash, find where its output ends, render it.

The remote side is one ``bash --noprofile --norc`` reading its script from stdin, with
stdout and stderr merged. Its start-up script ends in a *driver*: a loop, parsed once, that
reads each call as a fixed-size header and the command's bytes (``read -N``, a few system
calls, where bash's parser reads a pipe one byte at a time), ``eval``s the command at top level
with stdin from /dev/null (so ``cat`` or ``read`` get end-of-file, never the session's input),
then writes a sentinel that is unique to the call and carries the exit status to a private
descriptor. The command is never parsed as part of the driver, so quotes, heredocs, trailing
``&`` or ``# comment``, unclosed quotes and 200 KB of text all reach ``eval`` intact.

The sentinel's bytes never appear in what is sent (the nonce follows the length digits, never
the sentinel's opening bytes), and
nothing the command prints can fake it. The frame uses only keywords, assignments and ``builtin``, and
suspends ``set -x``/``set -v`` and history around itself, so ``set -u``, ``IFS=``, ``PATH=``,
``set -o history`` or a function named like a builtin add no noise, break nothing and show
nothing of the framing.

This module does no I/O; everything here is plain functions over bytes and str.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import terminal
from ._digest import EMPTY_SHA256, StreamDigest
from ._plain import Record

if TYPE_CHECKING:
    import concurrent.futures

__all__ = [
    "HEADER_SIZE",
    "NULL_FD",
    "SENTINEL_FD",
    "SHELL_COMMAND",
    "CallToken",
    "FrameScanner",
    "KillNoiseFilter",
    "OutputCapture",
    "ShellNames",
    "TextCleaner",
    "clean_text",
    "collapse_cr",
    "driver",
    "exit_frame",
    "frame_command",
    "init_script",
    "may_run_a_subshell",
    "render_output",
    "shell_quote",
    "status_line_safe",
]

SENTINEL_FD = 19
"""The descriptor the shell keeps pointing at the channel, for sentinels only."""

SHELL_COMMAND = "BASH_ENV= exec bash --noprofile --norc 2>&1"
"""What the exec channel runs: a non-login, non-interactive bash with no rc files, stderr merged.
``BASH_ENV`` (which an rc file of the login shell may have exported) would be read all the same:
emptied for the new bash only."""

ABORT_SIGNAL = "USR2"
"""Sent to the shell itself on a timeout: its trap breaks out of the loop around the ``eval``,
so the rest of the command text (after ``;`` or a newline) is not run once a part was killed."""

CALL_ENV = "REMOTE_BASH_CALL"
"""Exported while a command runs; every process it starts inherits it, so a kill can find them."""

NONINTERACTIVE_ENV = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "SYSTEMD_PAGER": "cat",
    "LESS": "-FRX",
    "TERM": "dumb",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "true",
    "SSH_ASKPASS": "true",
    "DEBIAN_FRONTEND": "noninteractive",
    "NO_COLOR": "1",
    "PIP_NO_INPUT": "1",
    "PYTHONUNBUFFERED": "1",
    "CLICOLOR": "0",
}
"""Set in every shell so that no tool waits on a person or paints the output."""


def shell_quote(text: str) -> str:
    """Quote ``text`` as one bash word that expands to exactly ``text``."""
    return "'" + text.replace("'", "'\\''") + "'"


class CallToken:
    """The identity of one call: its sentinel and the tag its processes carry. Read-only by use:
    nothing changes a token once it is made (a plain slotted class: one is made per call)."""

    __slots__ = ("call_id", "marker", "nonce", "second")

    def __init__(self, nonce: str) -> None:
        self.nonce = nonce
        self.call_id = nonce[:12]
        """The first half of the nonce: exported as the call's process tag."""
        self.second = nonce[12:]
        self.marker = b"\x1eRB" + nonce.encode() + b":"
        """The bytes that open this call's sentinel; never present in what is sent."""

    def __repr__(self) -> str:
        return f"CallToken({self.nonce!r})"

    @classmethod
    def new(cls) -> CallToken:
        return cls(os.urandom(12).hex())  # what secrets.token_hex(12) does, without its two calls


class ShellNames(Record):
    """The per-shell name of the framing function, unguessable so no command collides with it."""

    suffix: str

    @classmethod
    def new(cls) -> ShellNames:
        return cls(secrets.token_hex(2))

    @property
    def after(self) -> str:
        return f"_rba{self.suffix}"


NULL_FD = 18
"""A descriptor the shell keeps open on /dev/null: each call's stdin, and where framing noise goes
(a dup is cheaper than opening /dev/null twice per call)."""


HEADER_SIZE = 34
"""A call's header: the command's length in bytes (8 digits), the call id, the nonce's second half
(the two halves side by side, so that one substring gives the sentinel), the status-line flag, the
escape flag."""


def frame_command(command: str, token: CallToken, names: ShellNames, *, stdin: str | None = None,
                  restart: bool = False, status_line: bool | None = None) -> bytes:
    """The bytes to send to the shell's driver to run ``command`` as one call: a header, then
    the command's bytes. ``restart`` puts the driver's text first, for a shell whose driver loop
    was left (the last call's sentinel said so: see :class:`ScanResult`).

    ``read -N`` counts characters in the shell's locale, so a command that is not plain ASCII is
    sent escaped (every backslash doubled, every other byte as ``\\xHH``) and flagged; the driver
    turns it back with ``printf %b``. The status-line flag says whether :func:`status_line_safe`
    lets the driver add ``$_rbq`` after the text (see :func:`driver`).

    ``stdin``, when given, is a path (a FIFO fed with the caller's input) that the ``eval`` reads
    instead of /dev/null: it goes first in the body, on a line of its own, and the flag says so.

    ``status_line=False`` skips the check and adds no line, for a command after which nothing runs.
    """
    if "\x00" in command:
        raise ValueError("the command contains a NUL byte, which bash cannot pass on")
    if not command.isascii() and _SURROGATE.search(command):
        raise ValueError("the command contains a lone surrogate code point, which is not valid text")
    text = command or " "  # read -N 0 fails: an empty command is sent as a blank
    if stdin is not None:
        if not stdin.isascii() or "\n" in stdin:
            raise ValueError(f"the input FIFO's path {stdin!r} must be ASCII on one line")
        text = f"{stdin}\n{text}"
    if text.isascii():
        body, escaped = text.encode(), "-"
    else:
        body = "".join(c if c.isascii() and c != "\\" else _escape(c) for c in text).encode()
        escaped = "e"
    if stdin is not None:
        escaped = "f" if escaped == "-" else "g"
    flag = "0" if status_line is not False and status_line_safe(command) else "9"
    header = f"{len(body):08d}{token.call_id}{token.second}{flag}{escaped}".encode()
    return (driver(names) if restart else b"") + header + body


def _escape(char: str) -> str:
    return "".join(f"\\x{b:02x}" for b in char.encode()) if char != "\\" else "\\\\"


def driver(names: ShellNames) -> bytes:
    """The loop that runs calls, parsed once: it reads a header and the command (no timeout, even
    when a command set ``TMOUT``: the framing function puts it aside between calls), exports the
    call's process tag and ``eval``s the command at top level (so ``declare``, ``cd`` and
    ``export`` persist) inside two one-iteration loops, with stdin on /dev/null and stdout/stderr
    on the channel (bash restores the shell's own when the ``eval`` returns, so a command's
    ``exec >file`` or ``exec 1>&-`` lasts until the end of its call and cannot blind the next
    one); then the framing function writes the sentinel.

    The inner loops take a command's own ``break`` or ``continue`` (up to two levels). The abort
    signal's trap, and a ``break`` of more levels, leave the driver itself: the sentinel after
    the loop then says so (its status ends in ``r``), and the next frame brings the driver again.
    ``$_rbq`` is added after the text (as ``$_rbz``) when the header's flag is ``0``:
    it records the status inside the ``eval`` so that the ``eval`` itself succeeds, and a user's
    ``ERR`` trap runs once, for the user's command, never a second time for the framing. It
    shares the eval's text on purpose: after a syntax error inside ``eval``, bash misreads a
    reserved word that starts the next line.

    A call fed from a FIFO (flag ``f``, or ``g`` when escaped) has the FIFO's path as the body's
    first line; its ``eval`` reads the FIFO, opened last so that bash's message, should it fail,
    reaches the output.
    """
    command = '"$_rbp$_rbc$_rbz"'
    return (
        # A call ends at the top of the loop, before the next header is read: the `for` leaves
        # `_rbl` set, and a command's `continue` of three or more levels (which resumes this
        # loop) comes here too, so its sentinel is written all the same.
        f"while case ${{_rbl-}} in 1) {_reset(names)}; "
        # echo costs a third of printf; xpg_echo cannot change it (no backslash in what it writes).
        f"builtin echo -n $'\\036RB'\"${{_rbm:8:24}}:$_rbs\"$'\\036' >&{SENTINEL_FD}; _rbs= _rbh=;; esac; "
        f"builtin read -r -N {HEADER_SIZE} _rbm && "
        'builtin read -r -N "${_rbm:0:8}" _rbc; do '  # read -N takes the length in decimal, zeros and all
        # Plain ASCII without a FIFO is the common case; the others go through a function.
        f"case ${{_rbm:32:2}} in 0-) _rbz=$_rbq;; 9-) _rbz=;; *) {names.after}f;; esac; "
        # Quoted: `builtin export` is not seen as a declaration, so its word would be split on an IFS
        # of a command's (hex digits in IFS cut the tag). Last before the eval: $? is 0 for the command.
        f'builtin export {CALL_ENV}="${{_rbm:8:12}}"; '
        f'for _rbl in 1;do for _rbl in 1;do case ${{_rbi-}} in "") eval {command} '
        f"<&{NULL_FD} >&{SENTINEL_FD} 2>&1;; *) eval {command} >&{SENTINEL_FD} 2>&1 <\"$_rbi\";; esac;"
        f'done;done;done;{names.after} "${{_rbm:8:12}}" "${{_rbm:20:12}}" r\n'
    ).encode()


_HEREDOC_OP = re.compile(r"(?<!<)<<(?!<)")
_HEREDOC = re.compile(r"<<(-?)[ \t]*(?:'([^'\n]*)'|\"([^\"\n]*)\"|\\?([^\s'\"<>|&;()]+))")
# Text whose next line bash reads as part of it: after an operator that continues the list, or
# after a function's header (``f()``, ``function f``), whose body the next line would become; a
# comment may follow either.
_CONTINUED = re.compile(r"(?:&&|\|\||\||\|&|\(\s*\)|\bfunction\s+[^\s;|&()<>]+(?:\s*\(\s*\))?)\s*(?:#[^\n]*)?\Z")


_SUBSHELL = re.compile(r"(?<![$<>(])\((?!\()")


def may_run_a_subshell(command: str) -> bool:
    """True when the text may run a subshell ``( … )``: any ``(`` but those of ``$(``, ``<(``,
    ``>(`` and arithmetic ``((``. After a subshell in the foreground, bash runs the abort signal's
    trap only once the next command has started, too late for its ``break`` to stop it: on a
    deadline such a command's shell is stopped at once and replaced instead. When in doubt (a
    quoted paren, a function's ``()``), True: the only cost is the shell's state on a timeout."""
    return "(" in command and _SUBSHELL.search(command) is not None


def status_line_safe(command: str) -> bool:
    """True when a line appended after ``command`` is parsed as a command of its own.

    Not after a trailing backslash or an operator that continues on the next line (``&&``,
    ``||``, ``|``), nor after a here-document whose end line is missing (the line would become
    part of its text). When in doubt, False: the only cost is a second run of an ``ERR`` trap.
    """
    text = command.rstrip(" \t\n")
    if command.startswith("-"):
        return False  # `eval` would read it (and the line after it) as options
    # _CONTINUED can only match text that ends (but for whitespace, as its \s reads it) in & | ), or
    # holds a comment or the function keyword: most commands are none of these, and skip its search.
    if ((text.rstrip().endswith(("&", "|", ")")) or "#" in text or "function" in text)
            and _CONTINUED.search(text)):
        return False
    backslashes = len(text) - len(text.rstrip("\\"))
    if backslashes % 2 == 1:
        return False
    if "<<" not in command:
        return True
    lines = command.split("\n")
    for at, line in enumerate(lines):
        for op in _HEREDOC_OP.finditer(line):
            match = _HEREDOC.match(line, op.start())
            if match is None:
                return False
            strip_tabs = match.group(1) == "-"
            word = next(g for g in match.groups()[1:] if g is not None)
            if not any((body.lstrip("\t") if strip_tabs else body) == word for body in lines[at + 1:]):
                return False
    return True


def _reset(names: ShellNames) -> str:
    # Ends a call and readies the shell for the next one: records the status and undoes what a
    # command may have changed that the driver relies on (functions shadowing `builtin` or `eval`,
    # the process tag, the abort trap). The sentinel follows. Inlined in the driver's loop, where
    # it runs after every call: bash copies a function's body at each call, which cost more than
    # the rest of the frame. `_rbl` is set only while a command runs: the abort trap leaves the
    # loops then, never while the driver waits for the next call (which would lose that call).
    #
    # The common case is one `case`: no TMOUT, no history, none of -x, -v, -a left on ($- comes
    # last, after a "|" that SHELLOPTS never holds, so only its letters can match [xva]); anything else
    # goes through the slow path (see _functions). The process tag's clearing comes last among the
    # assignments: should a command have made it read-only, only it fails.
    return (
        f"_rbs=${{_rbs:-$?}} _rbl= _rbi= _rbc= _rbz= {CALL_ENV}=; unset -f builtin eval; "
        # The trap's text is parsed when it runs: quoted words escape a command's aliases, and
        # `builtin break` its function named `break`. Inside a shell function `break` cannot leave
        # the loops around the call, and bash has no other way to unwind a function: the shell stops
        # itself (the rest of the command never runs) and the kill replaces it.
        f"builtin trap '[[ ${{_rbl-}} ]] && {{ \\unset -f builtin; [[ ${{FUNCNAME-}} ]] && "
        '\\builtin kill -STOP "$$"; \\builtin break 1000; } 2>/dev/null\' '
        f"{ABORT_SIGNAL}; "
        f"case ${{TMOUT:+T}}$SHELLOPTS\\|$- in T*|*history*|*\\|*[xva]*) {names.after}s;; "
        "*) _rbp= _rbq=$_rbN;; esac"
    )


def _functions(names: ShellNames) -> list[str]:
    # The first ends a call outside the loop (at start-up, and when the driver was left); the
    # second readies an escaped command or a FIFO; the third is the slow path of every end: it
    # puts TMOUT aside (it would give the driver's read a timeout; given back to each command), and
    # computes the prefix that gives the next command the tracing, allexport and the history its
    # predecessor left on, and the status line (`$_rbq`, see driver) unless `set -v` or history would show it.
    return [
        f"{names.after}() {{ {_reset(names)}; "
        f"builtin printf '\\036RB%s%s:%s%s\\036' \"$1\" \"$2\" \"$_rbs\" \"${{3-}}\" >&{SENTINEL_FD}; _rbs= _rbh=; }}",
        # A call whose command was sent escaped (not plain ASCII), or that reads a FIFO.
        f"{names.after}f() {{ case ${{_rbm:33:1}} in e|g) builtin printf -v _rbc %b \"$_rbc\";; esac; "
        "case ${_rbm:33:1} in f|g) _rbi=${_rbc%%$'\\n'*} _rbc=${_rbc#*$'\\n'};; esac; "
        "case ${_rbm:32:1} in 0) _rbz=$_rbq;; *) _rbz=;; esac; }",
        f"{names.after}s() {{ _rbf=$-; builtin set +xva; "
        # Under set -x the status line runs silenced ($_rbX), so that it is not traced.
        'case $_rbf in *v*) _rbp=" -${_rbf//[!xva]/}" _rbq=;; *x*) _rbp=" -${_rbf//[!xa]/}" _rbq=$_rbX;; '
        '*a*) _rbp=" -a" _rbq=$_rbN;; *) _rbp= _rbq=$_rbN;; esac; '
        # Under set -a (allexport) the framing's own assignments were exported: never into the
        # environment of a later command's processes (the header holds the nonce, _rbc a command).
        "case $_rbf in *a*) builtin export -n _rbs _rbh _rbl _rbi _rbc _rbz _rbm _rbp _rbq _rbf _rbT _rbN "
        "_rbX _rbk _rbu _rbv;; esac; "
        # History turned on by this very command recorded the status line: take it out again.
        '[[ -o history ]] && { [[ $_rbh ]] && builtin history -d -1; builtin set +o history; '
        '_rbp+=" -o history" _rbq=; }; '
        "[[ $_rbp ]] && _rbp=\"builtin set$_rbp\"$'\\n'; "
        "[[ ${TMOUT-} ]] && { _rbT=$TMOUT; builtin unset -v TMOUT; _rbp=\"TMOUT=\\$_rbT\"$'\\n'$_rbp; }; }",
    ]


def init_script(token: CallToken, names: ShellNames, env: dict[str, str], ulimits: list[tuple[str, int]],
                nice: int | None) -> bytes:
    """The start-up script: descriptors, the framing function, environment, limits, a line of
    facts and the sentinel, then the driver, which waits for the first call.

    Its output holds ``RBINFO <pid>|<bash version>|<uname -srm>|<user>|<uptime>`` and one
    ``RBERR <what>`` line per setting that failed.
    """
    lines = [
        "builtin set +o history 2>/dev/null",
        # The shell's own stderr goes to /dev/null: only the eval's (set per call) reaches the
        # channel, so the framing's traces and errors never do.
        f"exec {SENTINEL_FD}>&1 {NULL_FD}<>/dev/null 2>&{NULL_FD}",
        "builtin unset HISTFILE PROMPT_COMMAND",
        # A command substitution whose child dies of SIGINT makes a non-interactive bash kill
        # itself with SIGINT, and `kill 0` (the `trap "kill 0" EXIT` idiom) signals the shell's
        # process group: (non-ignoring) traps keep the shell, as an interactive bash keeps itself,
        # and children still get the default action.
        "builtin trap : INT TERM HUP",
        *_functions(names),
        # The status lines (see frame_command), plain and silenced, set once.
        f"_rbN=$'\\n_rbs=$? _rbh=1' _rbX=$'\\n{{ _rbs=$? _rbh=1;}} 2>&{NULL_FD}'",
    ]
    merged = {**NONINTERACTIVE_ENV, **env}
    for key, value in merged.items():
        lines.append(f"builtin export {key}={shell_quote(value)}")
    for flag, limit in ulimits:
        lines.append(f"builtin ulimit -S -H {flag} {limit} 2>/dev/null || builtin printf 'RBERR %s\\n' "
                     f"{shell_quote(f'ulimit {flag} {limit}')}")
    if nice is not None:
        lines.append(f"renice -n {nice} -p $$ >/dev/null 2>&1 || builtin printf 'RBERR %s\\n' "
                     f"{shell_quote(f'renice -n {nice}')}")
    # Facts without starting a process: the kernel release from /proc where there is one, and
    # the clock since boot at the shell's start (process start times are compared with it).
    lines.append("_rbk=; builtin read -r _rbk </proc/sys/kernel/osrelease 2>/dev/null")
    lines.append("_rbu=; IFS=' ' builtin read -r _rbu _rbv </proc/uptime 2>/dev/null")
    lines.append(
        "builtin printf 'RBINFO %s|%s|%s|%s|%s\\n' \"$$\" \"$BASH_VERSION\" "
        "\"${OSTYPE-} ${_rbk:-?} ${HOSTTYPE-}\" \"${USER:-${LOGNAME-}}\" \"${_rbu-}\""
    )
    lines.append(f"{names.after} {token.call_id} {token.second}")
    script = ("\n".join(lines) + "\n").encode()
    if not script.isascii():
        return script + driver(names)
    # bash reads a script from a pipe one byte per system call (so as not to take a child's input):
    # these 2 KB would cost as many reads. Plain ASCII (a character is a byte in any locale) goes
    # whole instead: one line, parsed whole before its ``read -N`` takes the rest, reads the
    # settings and runs them. The driver is not part of it: it stays at top level (a command run
    # inside an ``eval`` would be traced one level deeper by ``set -x``).
    body = b"builtin unset -v _rbI\n" + script
    return (f"builtin read -r -N {len(body)} _rbI || builtin exit 1; builtin eval \"$_rbI\"\n".encode() + body
            + driver(names))


class ScanResult:
    """What one ``FrameScanner.feed`` found (made for every chunk of output: a plain class with
    slots, the cheapest to make)."""

    __slots__ = ("data", "done", "rest", "restart", "status")

    def __init__(self, data: bytes, done: bool = False, status: int | None = None, rest: bytes = b"",
                 restart: bool = False) -> None:
        self.data = data
        """Output bytes of the call (everything before the sentinel)."""
        self.done = done
        self.status = status
        self.rest = rest
        """Bytes after the sentinel: output of background jobs, kept for the next call."""
        self.restart = restart
        """The shell left its driver loop (an abort, or a command's ``break`` of many levels): the
        next frame must bring the driver again."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScanResult):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable, as before

    def __repr__(self) -> str:
        return f"ScanResult(data={self.data!r}, done={self.done}, status={self.status}, rest={self.rest!r}, " \
               f"restart={self.restart})"


class FrameScanner:
    """Finds one call's sentinel in a byte stream fed in arbitrary chunks."""

    _TAIL = 12  # longest exit status text plus the closing byte

    def __init__(self, token: CallToken) -> None:
        self._marker = token.marker
        self._keep = len(self._marker) + self._TAIL
        self._carry = b""

    def feed(self, chunk: bytes) -> ScanResult:
        if self._carry:
            buf = self._carry + chunk
        elif b"\x1e" not in chunk:
            # Most chunks of a large output: a memchr, where a search for the marker costs several
            # times more. With nothing held back and no \x1e, no sentinel starts here.
            return ScanResult(chunk)
        else:
            buf = chunk
        at = buf.find(self._marker)
        if at >= 0:
            end = buf.find(b"\x1e", at + len(self._marker))
            if end >= 0:
                digits = buf[at + len(self._marker):end]
                self._carry = b""
                restart = digits.endswith(b"r")
                if restart:
                    digits = digits[:-1]
                status = int(digits) if digits.isdigit() else None
                return ScanResult(buf[:at], True, status, buf[end + 1:], restart)
            if len(buf) - at <= self._keep:
                self._carry = buf[at:]
                return ScanResult(buf[:at])
            # Marker followed by garbage: not ours after all, pass it through.
            at = -1
        # Keep back what could be the start of a marker split across chunks.
        # Keep back only what could be the start of a marker: bytes from a \x1e near the end.
        cut = max(len(buf) - self._keep, 0)
        tail = buf[cut:]
        first = tail.find(b"\x1e")
        if first < 0:
            self._carry = b""
            return ScanResult(buf)
        self._carry = buf[cut + first:]
        return ScanResult(buf[:cut + first])

    def pending(self) -> bytes:
        """Bytes held back so far (output, when the stream ends without a sentinel)."""
        return self._carry


class OutputCapture:
    """Keeps the first and last ``limit`` bytes of a stream, its size and its SHA-256.

    Memory stays bounded whatever the stream's size; every byte is hashed (a large stream in
    batches on a worker thread: see :mod:`remote_bash._digest`). What a call with no output
    never needs (the digest's state, the tail, the escape-sequence tracker) is made at its
    first byte: a capture is made per call.
    """

    __slots__ = ("_digest", "_escapes", "_tail", "_tail_size", "_tail_states", "head", "limit", "total")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.total = 0
        self._digest: StreamDigest | None = None
        self._escapes: terminal.ByteTracker | None = None
        self._tail: deque[bytes] = _NO_CHUNKS
        self._tail_size = 0
        self._tail_states: deque[int] = _NO_STATES
        """The escape-sequence state where each chunk of ``_tail`` starts (after the bytes that end a
        character begun in the chunk before), so the tail is stripped as a terminal would read it
        even when the cut falls inside a sequence."""

    def add(self, data: bytes) -> None:
        if not data:
            return
        self.total += len(data)
        digest = self._digest
        if digest is None:
            digest = self._digest = StreamDigest()
            self._escapes = terminal.ByteTracker()
        digest.update(data)
        escapes = self._escapes
        assert escapes is not None
        room = self.limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            escapes.feed(data[:room])
            data = data[room:]
            if not data:
                return
        if self._tail is _NO_CHUNKS:
            self._tail, self._tail_states = deque(), deque()
        lead = _continuation_bytes(data) if 0x80 <= data[0] < 0xC0 else 0
        if lead:
            escapes.feed(data[:lead])
        self._tail_states.append(escapes.state)
        escapes.feed(data[lead:] if lead else data)
        self._tail.append(data)
        self._tail_size += len(data)
        while self._tail_size - len(self._tail[0]) >= self.limit:
            self._tail_size -= len(self._tail.popleft())
            self._tail_states.popleft()

    @property
    def tail(self) -> bytes:
        joined = b"".join(self._tail)
        return joined[-self.limit:] if len(joined) > self.limit else joined

    def tail_chunks(self) -> tuple[bytes, int]:
        """The kept tail from the start of its first chunk (at most ``limit`` bytes more than
        :attr:`tail`), and the escape-sequence state there."""
        return b"".join(self._tail), self._tail_states[0] if self._tail_states else terminal.GROUND

    def hashing(self) -> concurrent.futures.Future[None] | None:
        """The batch of this stream being hashed on the worker thread, if one is: an async caller
        awaits it before reading :attr:`sha256`, which would otherwise wait for it in place."""
        return None if self._digest is None else self._digest.in_flight()

    @property
    def sha256(self) -> str:
        return EMPTY_SHA256 if self._digest is None else self._digest.hexdigest()


_NO_CHUNKS: deque[bytes] = deque(maxlen=0)
"""The tail of a capture that has none yet: shared, never added to (a capture swaps in its own)."""
_NO_STATES: deque[int] = deque(maxlen=0)


_JOB_NOISE = re.compile(
    rb"(?:bash: line \d+: +\d+ |\[\d+\][+-]? +)"
    rb"(?:Killed|Terminated|Hangup|Interrupt)(?: \(core dumped\))?(?:[ \t].*)?\r?"
    rb"|(?:Killed|Terminated|Hangup|Interrupt)(?: \(core dumped\))?\r?"
)


class KillNoiseFilter:
    """Drops bash's reports of jobs killed by a signal (``bash: line 3: 1778 Killed  sleep 99``,
    ``Terminated``, ``[1]+  Killed ...``) from the output that follows a kill.

    Those lines are what remote_bash's own signals made the shell print; they say nothing of the
    command and point into the framing. Only whole lines that match exactly are dropped; a partial
    last line is held until its end comes (at most a few KB: longer is not a report).
    """

    _HOLD = 4096

    def __init__(self) -> None:
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        buf = self._held + data
        cut = buf.rfind(b"\n") + 1
        self._held = buf[cut:]
        if len(self._held) > self._HOLD:
            self._held, buf, cut = b"", buf, len(buf)
        return self._drop(buf[:cut])

    def flush(self) -> bytes:
        held, self._held = self._held, b""
        return self._drop(held)

    @staticmethod
    def _drop(data: bytes) -> bytes:
        if not data or (b"Killed" not in data and b"Terminated" not in data and b"Hangup" not in data
                        and b"Interrupt" not in data):
            return data
        lines = data.split(b"\n")
        kept = [line for line in lines[:-1] if not _JOB_NOISE.fullmatch(line)]
        last = lines[-1]
        if last and _JOB_NOISE.fullmatch(last):
            last = b""
        return b"".join(line + b"\n" for line in kept) + last


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str, state: int = terminal.GROUND, redact: Callable[[str], str] | None = None) -> str:
    """What a person would read: escape sequences, control strings and control characters
    removed (:func:`remote_bash.terminal.strip`, as read from ``state``), ``\\r`` progress lines
    collapsed to their last state; tabs and newlines kept. ``redact``, if given, masks secrets
    before the collapse, which could hide a key and show its value (``password\\r=hunter2``)."""
    text = terminal.strip(text, state)
    if redact is not None and "\r" in text:
        text = redact(text)
    return _collapse_cr(text)


class TextCleaner:
    """The first half of :func:`clean_text` over a stream of chunks: escape sequences and control
    characters removed, a sequence split across chunks too. ``\\r`` is kept: the stream masks
    each line first, then :func:`collapse_cr` collapses it (collapsing first could hide a key and
    show its value)."""

    def __init__(self) -> None:
        self._stripper = terminal.Stripper()

    def feed(self, text: str) -> str:
        return self._stripper.feed(text)


def collapse_cr(text: str, redact: Callable[[str], str] | None = None) -> str:
    """Each line of ``text`` as a terminal would leave it after its ``\\r``: run on masked text
    only. ``redact``, if given, masks the collapsed text again where a line was collapsed: what
    a later state leaves of an earlier one can join a key and a value that were apart."""
    out = _collapse_cr(text)
    return redact(out) if redact is not None and out is not text else out


def _collapse_cr(text: str) -> str:
    # Line by line; each ``\r`` goes back to the line's start, and what follows overwrites what
    # was there cell by cell, as on a terminal: what a shorter state does not cover stays shown
    # (``wrote /etc/x\rDone.`` is ``Done./etc/x``), so a progress bar that repaints the same
    # width shows its last state and a short line cannot hide a long one. Every character is
    # written once, so a long line costs one pass whatever its carriage returns.
    if "\r" not in text:
        return text
    text = text.replace("\r\n", "\n")
    if "\r" not in text:
        return text
    return "\n".join(_overwrite(line) if "\r" in line else line for line in text.split("\n"))


_TAB = 8


def _overwrite(line: str) -> str:
    parts = line.split("\r")
    if (line.isascii() and "\t" not in line) or _narrow().fullmatch(line):
        # One column per character: each column shows the last part that reaches it. Most
        # often the last part is the longest (a progress bar) and is all there is to show.
        longest = max(map(len, parts))
        if len(parts[-1]) == longest:
            return parts[-1]
        pieces, covered = [], 0
        for part in reversed(parts):
            if len(part) > covered:
                pieces.append(part[covered:])
                covered = len(part)
                if covered == longest:
                    break
        return "".join(pieces)
    cells: list[str] = []
    """One entry per terminal column: a character (with the zero-width ones that follow it), or
    "" for the second column of a wide character."""
    for part in parts:
        _write(cells, part)
    return "".join(cells)


def _write(cells: list[str], part: str) -> None:
    col = 0
    for ch in part:
        if ch == "\t":
            col = (col // _TAB + 1) * _TAB  # moves the cursor, writes nothing
            continue
        width = 1 if ch < "\u0300" else _width(ch)
        if not width:
            # Zero-width: joins the character before it (or, at the line's start, the first).
            if col:
                if len(cells) < col:
                    cells.extend(" " * (col - len(cells)))
                cells[col - 1] += ch
            elif cells:
                cells[0] = ch + cells[0]
            else:
                cells.append(ch)
            continue
        if len(cells) < col + width:
            cells.extend(" " * (col + width - len(cells)))
        if cells[col] == "" and col:
            cells[col - 1] = " "  # overwriting the second column of a wide character blanks it
        cells[col] = ch
        if width == 2:
            cells[col + 1] = ""
        col += width
        if col < len(cells) and cells[col] == "":
            cells[col] = " "


def _width(ch: str) -> int:
    """Columns ``ch`` takes on a terminal: 0 for combining marks and format characters, 2 for
    East Asian wide and fullwidth ones, else 1 (unassigned ones too: wider would hide more)."""
    import unicodedata

    category = unicodedata.category(ch)
    if category in ("Mn", "Me", "Cf"):
        return 0
    return 2 if category != "Cn" and unicodedata.east_asian_width(ch) in ("W", "F") else 1


# Stretches of characters one column wide each (Latin, Greek, Cyrillic, Armenian, punctuation,
# currency, letterlike symbols, arrows, box drawing, blocks: what progress bars are made of), so
# a line of them is collapsed without counting columns; tests/test_terminal.py checks it against _width.
@functools.cache
def _narrow() -> re.Pattern[str]:
    # Compiled on the first line with a carriage return and other than ASCII: half a millisecond
    # that most runs never need.
    return re.compile(
        "[\x20-\x7e\xa0-\xac\xae-\u02ff\u0370-\u0482\u048a-\u0590\u2010-\u2027\u2030-\u205e"
        "\u2070-\u20cf\u2100-\u2319\u2500-\u25fc\r]*+"
    )


def _decode_head(data: bytes) -> str:
    # A multi-byte character cut by the head limit is dropped, not shown as garbage.
    for back in range(min(3, len(data)), 0, -1):
        if data[-back] >= 0xC0:
            if len(data[-back:]) < _utf8_len(data[-back]):
                data = data[:-back]
            break
    return data.decode("utf-8", "replace")


def _decode_tail(data: bytes) -> str:
    return data[_continuation_bytes(data):].decode("utf-8", "replace")


def _continuation_bytes(data: bytes) -> int:
    """How many bytes at the start of ``data`` end a character begun before it (at most 3)."""
    skip = 0
    while skip < min(3, len(data)) and 0x80 <= data[skip] < 0xC0:
        skip += 1
    return skip


def _utf8_len(lead: int) -> int:
    if lead >= 0xF0:
        return 4
    if lead >= 0xE0:
        return 3
    return 2


_ORPHAN_KEY_END = re.compile(r"\A(?:(?!-----BEGIN)[\s\S])*?-----END [A-Z0-9 ]*PRIVATE KEY-----")


def _unchanged(text: str) -> str:
    return text


def render_output(capture: OutputCapture, limit: int,
                  redact: Callable[[str], str] = _unchanged, *,
                  redact_head: Callable[[str], str] | None = None,
                  redact_tail: Callable[[str], str] | None = None) -> tuple[str, bool]:
    """The text Claude sees: decoded, cleaned, redacted, and cut to about ``limit`` characters.

    When the output is longer, the start and the end are kept, in whole lines (a line the cut
    falls into is dropped, not shown in part), and a marker says how much of the middle was
    cut. Redaction runs before the cut, on each kept piece whole, so a secret is never split
    by the cut; a tail that starts inside a private key (its BEGIN line was cut
    away) is masked up to the key's END line. ``redact_head`` and ``redact_tail`` (the
    redactor's own, when it has them) redact the kept start and end knowing where the capture
    cut them, so a secret the capture's own cut falls into is not shown in part either.
    Returns (text, truncated): ``("", False)`` for no output at all (there is nothing to mask).
    """
    if not capture.total:
        return "", False
    half = limit // 2
    if capture.total <= capture.limit:
        text = redact(clean_text(bytes(capture.head).decode("utf-8", "replace"), redact=redact))
        if len(text) <= limit:
            return text, False
        head_kept, tail_kept = _head_lines(text, half), _tail_lines(text, half, whole=True)
        cut = len(text) - len(head_kept) - len(tail_kept)
        return f"{head_kept}[... {cut:,} characters cut ...]\n{tail_kept}", True
    head = (redact_head or redact)(clean_text(_decode_head(bytes(capture.head)), redact=redact))
    tail_bytes, state = capture.tail_chunks()
    tail = clean_text(_decode_tail(tail_bytes), state, redact)
    if redact_tail is not None:
        tail = redact_tail(tail)  # starts at a line's start: the cut line is dropped
    else:
        if "PRIVATE KEY-----" in tail:
            tail = _ORPHAN_KEY_END.sub("[REDACTED:private-key]", tail, count=1)
        tail = redact(tail)
    head_kept, tail_kept = _head_lines(head, half), _tail_lines(tail, half, whole=redact_tail is not None)
    shown = len(head_kept.encode("utf-8", "replace")) + len(tail_kept.encode("utf-8", "replace"))
    cut = max(capture.total - shown, 0)
    return f"{head_kept}[... {cut:,} bytes cut: the output was {capture.total:,} bytes ...]\n{tail_kept}", True


def _head_lines(text: str, n: int) -> str:
    """The whole lines, newline included, in the first ``n`` characters of ``text``, a start of
    a longer output: a line the cut (this one or the capture's) falls into is not shown in part."""
    return text[:text.rfind("\n", 0, n) + 1]


def _tail_lines(text: str, n: int, *, whole: bool) -> str:
    """The whole lines in the last ``n`` characters of ``text``, the end of a longer output whose
    first line is ``whole`` or may have been cut."""
    start = max(len(text) - n, 0)
    if (start == 0 and whole) or (start > 0 and text[start - 1] == "\n"):
        return text[start:]
    newline = text.find("\n", start)
    return text[newline + 1:] if newline >= 0 else ""


def exit_frame(text: str, names: ShellNames, *, restart: bool = False) -> bytes:
    """What to send an idle shell so that it runs ``text``, which ends it (``exit`` or ``exec``)."""
    # Nothing runs after the shell's end: no status line, and no check of a long script's end for
    # one (half a millisecond of every session's close).
    return frame_command(text, CallToken.new(), names, restart=restart, status_line=False)
