"""Pure: the POSIX sh scripts that find and signal a call's processes on the remote host, and the
reader of what they report.

A call's processes are found three ways, all through /proc (Linux):

- by the tag in their environment (``REMOTE_BASH_CALL=<id>``, or the session's tag), so children,
  grandchildren and processes that left the shell's process group are found and nothing of
  another call is;
- as the shell's descendants, through the kernel's children lists (a command that cleared its
  environment, ``env -i`` or ``sudo``, is still below the shell);
- as *strays*: processes of the shell's user, started since a given moment (the call's or the
  session's start, in clock ticks since boot), that are neither below the shell nor below another
  channel of the same SSH login, nor tagged. A daemon that forked twice, called ``setsid`` and
  rewrote its environment (``setproctitle``, perl's ``$0=``) or cleared it is one. Where the host
  puts each SSH login in a cgroup of its own (systemd's ``session-N.scope``), only members of
  the shell's cgroup are looked at, so every stray is this login's and is signalled with the
  rest. Elsewhere nothing tells a stray of this call from one of another login of the same user
  started at the same time: strays are reported, never signalled.

At a session's end, a cheap check run by the shell first tells whether anything of the session can
still exist outside it (:func:`end_script`): one ``awk`` over every process's stat proves that
nothing started since the shell is left where an escaped process could be, and the costly scan (a
dozen processes, every process's environment read twice) is then skipped. Whenever it cannot
prove that, the shell replaces itself with the full scan.

The scripts print ``RBKILL <n>`` (processes signalled; on a round of INT, ``RBTERM <n>`` of them
got TERM instead, as they ignore INT), ``RBUP <seconds since boot>``,
``RBSCOPE cgroup|none``, one ``RBSTRAY <pid> <name>`` line per stray left alone, and ``RBCLEAN``
when the check above made the scan needless.
This module does no I/O; nothing here runs a process.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from remote_bash._plain import Record, factory
from remote_bash.framing import shell_quote

__all__ = ["KillScan", "end_script", "kill_script", "orphan_script", "parse_kill_output", "reported", "uptime_ticks"]

CALL_ENV = "REMOTE_BASH_CALL"
SESSION_ENV = "REMOTE_BASH_SESSION"
ABORT_SIGNAL = "USR2"
TICKS_PER_SECOND = 100
"""USER_HZ: the unit of process start times in /proc/PID/stat, fixed by the Linux ABI."""


class KillScan(Record, frozen=False):
    """What one run of a :func:`kill_script` reported."""

    count: int = 0
    """Processes found (and signalled, unless the signal was ``0``)."""
    uptime: int | None = None
    """The host's clock since boot when the script started, in ticks."""
    cgroup: bool = False
    """True when the shell's login has a cgroup of its own, so that strays were signalled."""
    strays: list[tuple[int, str]] = factory(list)
    """Strays left alone (no cgroup to tell whose they are): pid and process name."""
    termed: int = 0
    """Of ``count``, on a round of INT: the processes that ignore INT, sent TERM instead."""
    unanswered: bool = False
    """The output held no ``RBKILL`` report: the script did not run to its end (an rc file of the
    login shell that ends every command, a kill of the script), so nothing was checked."""
    failed: bool = False
    """The script could not start a helper (``grep``, ``awk``: a limit on the user's processes, most
    likely), so what it searched for may have been missed."""


def uptime_ticks(text: str) -> int | None:
    """``12345.67`` (from /proc/uptime) in ticks; None when it is not that shape."""
    match = re.fullmatch(r"(\d+)(?:\.(\d{1,2}))?", text.strip())
    if not match:
        return None
    return int(match.group(1)) * TICKS_PER_SECOND + int((match.group(2) or "0").ljust(2, "0"))


_REPORTED = re.compile(rb"(?:\A|\n)RBKILL [0-9]+\n")


def reported(output: bytes | bytearray) -> bool:
    """True once ``output`` holds the script's last report, ``RBKILL <n>`` on a line of its own.
    Only a whole line counts: the script's own text, echoed by a shell's ``set -x`` or ``set -v``
    left on by a command, holds those words too, in the middle of a line."""
    return _REPORTED.search(output) is not None


def parse_kill_output(output: str) -> KillScan:
    """Read the report lines of a :func:`kill_script` run; anything else is ignored."""
    scan = KillScan(unanswered=True)
    for line in output.splitlines():
        head, _, rest = line.partition(" ")
        if head == "RBKILL" and rest.strip().isdigit():
            scan.count = int(rest)
            scan.unanswered = False
        elif line == "RBFAIL":
            scan.failed = True
        elif head == "RBTERM" and rest.strip().isdigit():
            scan.termed = int(rest)
        elif head == "RBUP":
            scan.uptime = uptime_ticks(rest)
        elif head == "RBSCOPE":
            scan.cgroup = rest.strip() == "cgroup"
        elif head == "RBSTRAY":
            pid, _, name = rest.partition(" ")
            if pid.isdigit():
                scan.strays.append((int(pid), name.strip()[:64]))
    return scan


# The stray finder. Input: every /proc/PID/stat line (pid, (name), state, ppid, ... starttime is
# the 22nd field) and every /proc/PID/status (its Pid: and Uid: lines). Variables: S the shell, M
# the script itself, T the start tick, C the candidates (" pid pid ", or "*" for all), X pids to
# leave out (tagged). A stray has the shell's user, started at T or later, and was orphaned: going
# up its parents while they are the user's, the chain ends at init (or at a parent that is gone),
# not at the shell, the shell's parent (the sshd serving every channel of this login), the script,
# or a process of another user (sshd serving another login, cron). Kernel threads never count, nor
# zombies (they run nothing: a chain the kill just ended leaves some until they are reaped).
_STRAY_AWK = r"""
/^Name:/ { held = "" }
held == "" && /^Pid:/ { cp = $2; next }
held == "" && /^Uid:/ { uid[cp] = $2; next }
held == "" && /^[^0-9]/ { next }
{ line = held == "" ? $0 : held "\n" $0; s = line; n = line
  sub(/^[^(]*\(/, "", n); sub(/\)[^)]*$/, "", n); sub(/^.*\) /, "", s)
  # A name holding a newline (a process may write its own) cut the line: joined with the next.
  if (split(s, f, " ") < 20) { held = ++cut < 16 ? line : ""; next }
  held = ""; cut = 0; split(line, g, " "); x = g[1]
  if (int(f[7] / 2097152) % 2) next
  if (f[1] == "Z") next
  pp[x] = f[2]; st[x] = f[20]; nm[x] = n }
END {
  # A shell gone (it died, or the kill replaced it): the shell of this script, on a channel of the
  # same login, stands in for it (its parent is the sshd of the login all the same).
  if (!(S in uid)) S = M
  if (!(S in uid)) exit
  P = pp[S]
  for (x in pp) {
    if (x == S || x == M || x == P || st[x] + 0 < T + 0) continue
    if (C != "*" && index(C, " " x " ") == 0) continue
    if (index(X, " " x " ") > 0 || !(x in uid) || uid[x] != uid[S]) continue
    y = x; out = 0
    for (i = 0; i < 64; i++) {
      if (y == S || y == P || y == M) break
      q = pp[y]
      if (!(q in pp) || q <= 1) { out = 1; break }
      if (uid[q] != uid[S]) break
      y = q
    }
    if (out) { gsub(/[^A-Za-z0-9._:@\/+-]/, "?", nm[x]); print x, nm[x] }
  }
}
"""


def _stray_block(shell_pid: int | str, since: int, kind: str) -> str:
    """Find strays (see the module docstring); in a login's own cgroup they join ``$p``.

    ``kind`` is the tag the scan looks for (``REMOTE_BASH_CALL`` or ``REMOTE_BASH_SESSION``): a
    process tagged so is another call's or session's when it is not in ``$p``. One that carries
    only a tag of the other kind is not: its own was taken away (``unset``, ``env -u``), and it
    is looked at like any untagged process.

    ``shell_pid`` may be ``$$``: the script's own shell, a channel of the same login as the shell
    that died, whose parent is the login's sshd all the same."""
    return (
        # The shell's cgroup: the v2 line, or systemd's v1 hierarchy. Only a login's own scope
        # (pam_systemd's session-N.scope) is trusted to hold nothing but this login.
        # A shell gone (see _STRAY_AWK): the script's own channel is of the same login, in its cgroup.
        f"cgf=/proc/{shell_pid}/cgroup; [ -r \"$cgf\" ] || cgf=/proc/$$/cgroup\n"
        "cg=; cv=; while IFS= read -r l; do case $l in 0::/*) cg=${l#0::};; "
        '*:name=systemd:/*) cv=${l#*:name=systemd:};; esac; done 2>/dev/null <"$cgf"\n'
        "cd_=\n"
        "case $cg in */session-*.scope) m=$(awk '/ - cgroup2 /{print $5; exit}' /proc/self/mountinfo "
        '2>/dev/null); [ -n "$m" ] && [ -r "$m$cg/cgroup.procs" ] && cd_=$m$cg;; esac\n'
        'if [ -z "$cd_" ]; then case $cv in */session-*.scope) m=$(awk \'/ - cgroup / && /name=systemd/'
        '{print $5; exit}\' /proc/self/mountinfo 2>/dev/null); [ -n "$m" ] && [ -r "$m$cv/cgroup.procs" ] '
        '&& cd_=$m$cv;; esac; fi\n'
        'if [ -n "$cd_" ]; then c=" $(tr \'\\n\' \' \' <"$cd_/cgroup.procs" 2>/dev/null) "; '
        'echo "RBSCOPE cgroup"; else c="*"; echo "RBSCOPE none"; fi\n'
        # Tagged processes are another call's or session's (or already in $p).
        f"x=\" $(cd /proc 2>/dev/null && grep -lsxzE '{kind}=[0-9a-f]+' [0-9]*/environ "
        "2>/dev/null | sed 's,/environ,,' | tr '\\n' ' ') $p \" || ef=1\n"
        "s=$({ cat /proc/[0-9]*/stat; cat /proc/[0-9]*/status; } 2>/dev/null | "
        f"awk -v S={shell_pid} -v M=$$ -v T={since} -v C=\"$c\" -v X=\"$x\" '{_STRAY_AWK}') || ef=1\n"
        'if [ -n "$cd_" ]; then for y in $(echo "$s" | awk \'{print $1}\'); do p="$p $y"; done\n'
        'else echo "$s" | while read -r y n; do [ -n "$y" ] && echo "RBSTRAY $y $n"; done; fi\n'
    )


# The check of end_script. Input: every process's /proc directory, as arguments (the shell
# expanded the list before it started awk, so awk itself is not in it; a directory, not its stat file,
# so the shell lists /proc without looking each file up), whose stat is read with getline (a process
# gone since is skipped). Variables: S the shell (awk's parent), T the tick it started at. Exit status
# 0: nothing can be left; 1: the full scan must run. Kernel threads never count; a zombie runs nothing.
# TAG is the session's tag (``NAME=value``), which awk inherited from the shell: awk's own environment
# proves that an environment is read whole, and the shell's (another process of the user) that the
# user's can be read at all; an environment unreadable here is unreadable to the scan too.
_CLEAN_AWK = r"""
function uid(p,  f, l, u) {
  if (p in uids) return uids[p]
  f = "/proc/" p "/status"; u = ""
  while ((getline l < f) > 0) if (l ~ /^Uid:/) { split(l, a, /[ \t]+/); u = a[2]; break }
  close(f); uids[p] = u; return u
}
function tagged(p,  f, l, t) {
  f = "/proc/" p "/environ"; t = 0
  while ((getline l < f) > 0) if (index(l, TAG)) { t = 1; break }
  close(f); return t
}
BEGIN {
  if (!tagged("self")) exit 1
  f = "/proc/" S "/environ"; if ((getline l < f) < 0) exit 1
  close(f)
  for (i = 1; i < ARGC; i++) {
    x = ARGV[i]; sub(/^\/proc\//, "", x); f = "/proc/" x "/stat"; l = ""
    if ((getline l < f) <= 0) { close(f); continue }
    close(f)
    # A name holding a newline cut the line read: nothing can be proved.
    s = l; sub(/^.*\) /, "", s); if (split(s, v, " ") < 20) exit 1
    if (int(v[7] / 2097152) % 2) continue
    pp[x] = v[2]; st[x] = v[20]; zombie[x] = (v[1] == "Z")
  }
  if (!(S in pp)) exit 1
  us = uid(S)
  if (us == "" || us == 0 || uid(1) == us) exit 1
  P = pp[S]; n = 0
  # The ancestors, each with the child on the way to the shell.
  for (y = S; (y in pp) && pp[y] > 0; y = pp[y]) { via[pp[y]] = y; if (++n > 64) exit 1 }
  for (x in pp) {
    if (x == S || zombie[x]) continue
    if (pp[x] == S) exit 1
    if (st[x] + 0 < T + 0) continue
    if ((pp[x] in via) && via[pp[x]] != x) exit 1
    if (x == P || uid(x) != us) continue
    y = x
    for (i = 0; i < 64; i++) {
      if (y == S || y == P) break
      q = pp[y]
      if (!(q in pp) || q <= 1) exit 1
      if (uid(q) != us) break
      y = q
    }
    # Below a process of another user (atd runs a job as the user, with the environment it was given):
    # the scan would find it by its tag.
    if (tagged(x)) exit 1
  }
  exit 0
}
"""


def end_script(match: str, shell_pid: int, since: int | None) -> str:
    """What the session's idle shell (bash, ``shell_pid``) runs at the session's end: it sets
    nothing of the user's off but what could fool the check, and when :data:`_CLEAN_AWK` proves that
    nothing started since ``since`` (ticks) can be left outside it, prints the report (``RBUP``,
    ``RBCLEAN``, ``RBSCOPE none``, ``RBKILL 0``) and exits; otherwise it replaces itself with
    ``/bin/sh`` running the full scan (:func:`kill_script`), at once when ``since`` is unknown.

    Why it is enough: a process the session started is below the shell until an ancestor of it
    exits; it is then adopted by the nearest child subreaper among its ancestors, or by init, so
    it becomes a child of one of the shell's ancestors (the shell's own parent, sshd, ..., init),
    and what it starts stays below it or is adopted the same way. So the shell has no child, no
    child of any of its ancestors (beside the way to the shell) started since ``since``, and no
    process started since then is a stray (the rule of the full scan, see the module docstring: a
    daemon of the user may start one when asked) or, below another user's process, carries the
    session's tag (``atd`` runs a job so). One ``awk`` reads every process's stat once, and the status
    and environment of the few that need it. A root session (every daemon is root's), a host whose
    init runs as the user, and a login in a cgroup of its own (the full scan also decides what its
    strays are) fail the check, and so does anything the check cannot read: the full scan runs.

    The shell runs the check itself (no ``sh`` to start: a clean end costs one ``awk``), so the
    user's state must not fool it: traps (a ``DEBUG`` trap could start a process after the check)
    and ``set -e``/``-u``/``-f`` are turned off, ``awk`` is looked up in the standard path only
    (``command -p``: no function, alias or directory of the user's stands in for it), and with a
    ``GLOBIGNORE`` (which could hide processes from ``/proc/[0-9]*``) the check is not even tried.
    """
    # The program goes between single quotes.
    assert "'" not in _CLEAN_AWK
    full = kill_script(match, "KILL", exclude_self=True, below=shell_pid, since=since)
    if since is None:  # no start time to check against: the full scan (without strays) it is
        return f"builtin exec /bin/sh -c {shell_quote(full)}\n"
    return (
        "{ builtin trap - DEBUG RETURN ERR EXIT; builtin set +aeufxv +o pipefail; } 2>/dev/null\n"
        "_rbxu= _rbxg= _rbxs=; IFS=' ' builtin read -r _rbxu _rbxv </proc/uptime 2>/dev/null\n"
        "if [[ -z ${GLOBIGNORE+x} ]]; then\n"
        "  while IFS= builtin read -r _rbxl; do case $_rbxl in *session-*.scope*) _rbxs=1;; esac; done "
        f"2>/dev/null </proc/{shell_pid}/cgroup\n"
        f"  [[ -z $_rbxs ]] && builtin command -p awk -v S={shell_pid} -v T={since} -v TAG={match} "
        f"'{_CLEAN_AWK}' /proc/[0-9]* 2>/dev/null && _rbxg=1\n"
        "fi\n"
        "[[ -n $_rbxg ]] && { builtin printf 'RBUP %s\\nRBCLEAN\\nRBSCOPE none\\nRBKILL 0\\n' \"$_rbxu\"; "
        "builtin exit 0; }\n"
        f"builtin exec /bin/sh -c {shell_quote(full)}\n"
    )


_PATH = "PATH=/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}; export PATH\n"
"""The standard directories first: a script the session's shell replaces itself with inherits the
PATH a command left (``PATH=/nowhere``, or a directory holding another ``awk``), and its tools
(``grep``, ``sed``, ``awk``) must be the system's."""


def kill_script(match: str, signal: str, *, also_pid: int | None = None, abort_pid: int | None = None,
                exclude_self: bool = False, below: int | None = None, untagged_only: bool = False,
                since: int | None = None, login_strays: bool = False,
                abort_stop: bool = False) -> str:
    """A POSIX sh script that signals every process whose environment holds ``match``
    (``NAME=value``), and ``also_pid`` if given, then prints ``RBKILL <count>`` of the
    processes it found. ``signal`` ``0`` only counts.

    With ``below``, the descendants of that pid (the shell) are added too: all of them, or with
    ``untagged_only`` those that carry no call tag at all. With ``since`` (ticks since boot) and
    ``below``, strays started since then are looked for as well (see the module docstring).

    With ``login_strays`` and ``since`` but no ``below`` (the shell died), strays are looked for
    as the script's own shell's: another channel of the same login.

    """
    if not re.fullmatch(r"[A-Z_]+=[A-Za-z0-9_]+", match):
        raise ValueError(f"bad process tag {match!r}")
    if signal not in ("0", "INT", "TERM", "KILL", "HUP"):
        raise ValueError(f"bad signal {signal!r}")
    extra = f"kill -0 {also_pid} 2>/dev/null && p=\"$p {also_pid}\"\n" if also_pid else ""
    # With ``abort_stop`` the shell is stopped rather than sent the abort signal (whose trap bash
    # runs too late after a subshell): it is replaced then.
    abort = f"kill -s {'STOP' if abort_stop else ABORT_SIGNAL} {abort_pid} 2>/dev/null\n" if abort_pid else ""
    tree = ""
    if below:
        keep = (f'grep -qsz "^{CALL_ENV}=." "/proc/$x/environ" && continue; ' if untagged_only else "")
        awk_walk = (
            # Without /proc/PID/task/TID/children: parent pids of every process, then a walk.
            "d=$(cat /proc/[0-9]*/stat 2>/dev/null | awk '{ s = $0; sub(/^.*\\) /, \"\", s); "
            "split(s, f, \" \"); print $1, f[2] }' | awk -v r=" + str(below) + " '{ k[$2] = k[$2] \" \" $1 } "
            "END { q = r; while (q != \"\") { n = split(q, a, \" \"); q = \"\"; for (i = 1; i <= n; i++) "
            "{ m = split(k[a[i]], c, \" \"); for (j = 1; j <= m; j++) { print c[j]; q = q \" \" c[j] } } } }')\n"
        )
        tree = (
            # The descendants of `below`, level by level through the kernel's children lists: no
            # process is started, and a shell with no children costs one file read.
            f"d=; q={below}; i=0\n"
            f"if [ -r /proc/{below}/task/{below}/children ]; then\n"
            '  while [ -n "$q" ] && [ $i -lt 64 ]; do n=; i=$((i+1))\n'
            '    for x in $q; do for f in /proc/$x/task/*/children; do c=; read -r c <"$f" 2>/dev/null; '
            'n="$n $c"; done; done\n'
            '    d="$d $n"; case $n in *[0-9]*) q=$n;; *) q=;; esac\n'
            "  done\n"
            "else\n"
            f"  {awk_walk}"
            "fi\n"
            f"for x in $d; do [ \"$x\" = \"$$\" ] && continue; {keep}"
            'case " $p " in *" $x "*) ;; *) p="$p $x";; esac; done\n'
        )
    strays = ""
    if since is not None and (below or login_strays):
        strays = _stray_block(below or "$$", since, match.partition("=")[0])
    return (
        _PATH
        # The clock first: the caller dates the call's start on the host by it.
        + 'up=; read -r up rest </proc/uptime 2>/dev/null; echo "RBUP $up"\n'
        + f"{abort}"
        # A helper that cannot start (a limit on the user's processes) fails its substitution: said.
        f"ef=; p=$(cd /proc 2>/dev/null && grep -lsxzF '{match}' [0-9]*/environ 2>/dev/null | sed 's,/environ,,') "
        "|| ef=1\n"
        f"{extra}"
        f"{tree}"
        f"{strays}"
        # Only processes still alive count: the finders' own subshells, grep and sed carry the tag
        # when the script runs in the tagged shell, and are gone by now.
        + ('q=; for x in $p; do [ "$x" = "$$" ] && continue; [ -d "/proc/$x" ] && q="$q $x"; done; p=$q\n'
           if exclude_self else 'q=; for x in $p; do [ -d "/proc/$x" ] && q="$q $x"; done; p=$q\n')
        + "set -- $p\n"
        + (_INT_OR_TERM if signal == "INT" else _FREEZE_THEN_KILL.format(match=match) if signal == "KILL" else
           f"if [ $# -gt 0 ] && [ {signal} != 0 ]; then kill -s {signal} \"$@\" 2>/dev/null; fi\n")
        + '[ -n "$ef" ] && echo "RBFAIL"; echo "RBKILL $#"\n'
    )


# KILL, after STOP: a process stopped cannot fork, so what keeps forking (each generation starting
# the next and exiting, with INT and TERM ignored) is frozen first, together with the children its
# processes started before their STOP landed (they carry the tag), and only then killed. A scan can
# miss a generation that started after /proc was listed while its parent ended before its turn: the
# freezing stops only after three scans in a row found nothing new (at most 50), and runs even when
# the list it starts from is empty. Without it such a chain outran the kill; on a loaded host it
# still can, rarely, and the session's check after the round sends KILL again (a bounded few times).
_FREEZE_THEN_KILL = (
    '[ $# -gt 0 ] && kill -s STOP "$@" 2>/dev/null; f=" $* "; i=0; e=0\n'
    "while [ $i -lt 50 ] && [ $e -lt 3 ]; do i=$((i+1)); n=\n"
    "  l_=$(cd /proc 2>/dev/null && grep -lsxzF '{match}' [0-9]*/environ 2>/dev/null | sed 's,/environ,,') "
    "|| ef=1\n"
    "  for x in $l_; do\n"
    '    [ "$x" = "$$" ] && continue; case $f in *" $x "*) ;; *) [ -d "/proc/$x" ] && n="$n $x";; esac; done\n'
    '  if [ -z "$n" ]; then e=$((e+1)); else e=0; kill -s STOP $n 2>/dev/null; f="$f$n "; fi\n'
    "done\n"
    'set -- $f; [ $# -gt 0 ] && kill -s KILL "$@" 2>/dev/null\n'
)


# INT, but TERM at once for a process that ignores INT (its SigIgn mask has bit 2 set): INT would
# do nothing to it, and it would run on for the whole grace before TERM, past the deadline. A
# non-interactive shell starts every background job so (``( sleep 1; rm F ) &``).
_INT_OR_TERM = (
    "t=; n=; for x in \"$@\"; do g=; while IFS= read -r l; do case $l in SigIgn:*) g=$l; break;; esac; "
    'done </proc/$x/status 2>/dev/null; case $g in *[2367abef]) t="$t $x";; *) n="$n $x";; esac; done\n'
    '[ -n "$n" ] && kill -s INT $n 2>/dev/null; [ -n "$t" ] && kill -s TERM $t 2>/dev/null\n'
    'set -- $t; echo "RBTERM $#"; set -- $n $t\n'
)


# The start time (ticks since boot, the 22nd field) of the process whose /proc/PID/stat is read;
# the fields are counted after the name, which may hold spaces and parentheses.
_START_AWK = '{ s = $0; sub(/^.*\\) /, "", s); split(s, f, " "); print f[20] }'


def orphan_script(match: str, lost_shells: Sequence[tuple[int, int]]) -> str:
    """The KILL of what lost connections left: each lost shell (pid, start in ticks) with everything
    below it, while its pid still names it, then whatever carries ``match`` (the session's tag).
    A shell carries no tag of its own (its variables were set after it started), and it must go
    too: once its command is killed it would run the rest of the command text (``sleep 60; rm -rf
    build``). The process under the pid is the shell only if it started no later than the shell
    said it had: a process that took the pid since started after."""
    assert "'" not in _START_AWK
    shells = "".join(
        f"st=$(awk '{_START_AWK}' /proc/{pid}/stat 2>/dev/null)\n"
        f'if [ -n "$st" ] && [ "$st" -le {started} ]; then\n'
        f"{kill_script(match, 'KILL', also_pid=pid, below=pid)}fi\n"
        for pid, started in lost_shells)
    return _PATH + shells + kill_script(match, "KILL")
