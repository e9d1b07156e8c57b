"""Where a command writes, for approval's ``writes_outside`` rule: pure functions over words, no I/O.

Reads the targets of redirections and of programs that write files (``cp``/``mv`` targets and
``-t DIR``, ``tee``, ``sed -i`` and sed's ``w``, ``dd of=``, ``curl -o``, editors such as ``ed``,
``uniq``/``xxd``/``split``/``csplit`` outputs, ``find -fprint``, ``sqlite3``'s database, ``ssh-keygen -f``;
``mv`` writes where its sources were too), and links made from
under an allowed path to outside it (``ln``, ``link``, ``cp -s``/``-l``), since writes through such a link
land outside. Paths are read as written: what this module must never claim is to know the host's
file system (a link that already exists is not seen), nor treat a relative or expanded path as
inside (where it lands depends on the shell's state).
"""

from __future__ import annotations

import posixpath
import re

from remote_bash._programs import sed_effects

__all__ = ["OUTPUT_REDIRECTS", "inside", "writes_outside"]

_WRITERS = frozenset({"cp", "mv", "install", "ln", "rsync", "touch", "mkdir", "tee", "truncate", "chmod", "chown",
                      "chgrp", "sed", "patch", "tar", "unzip", "rm", "rmdir", "unlink", "shred", "dd", "link", "ed",
                      "ex", "red", "vi", "vim", "nvim", "nano", "emacs", "fallocate"})
# Options that take a value, for programs whose output file is a later operand.
_VALUED = {"uniq": ("-f", "-s", "-w"), "xxd": ("-c", "-g", "-l", "-o", "-s", "-n", "-cols", "-len", "-seek"),
           "split": ("-a", "-b", "-C", "-l", "-n", "-t"), "sqlite3": ("-cmd", "-init", "-separator", "-newline",
                                                                      "-nullvalue", "-A")}
OUTPUT_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})


def writes_outside(base: str, words: list[tuple[str, bool]], allowed: list[str]) -> str | None:
    """Why ``base`` with these words (each with whether it is literal) writes outside ``allowed``, or
    None. A path is read as written: a link that already leads out of an allowed path is not seen."""
    operands = [(w, lit) for w, lit in words if not w.startswith("-")]
    named = _option_targets(base, words)
    if named is not None:
        targets = named
    elif base not in _WRITERS:
        return None
    elif base == "dd":
        targets = [(w[3:], lit) for w, lit in words if w.startswith("of=")]
    elif base == "sed":
        targets = operands[1:] if any(w.startswith("-i") or w == "--in-place" for w, _ in words) else []
        targets += [(f, True) for f in sed_effects([w for w, _ in words])[1]]
    elif base in {"cp", "mv", "install", "ln"} and (named_dir := _target_directory(words)) is not None:
        targets = [named_dir] + (operands if base == "mv" else [])  # mv also removes its sources
        if _links(base, words):
            return _links_out(base, operands, named_dir, allowed)
    elif base in {"cp", "mv", "install", "ln", "rsync", "link"}:
        targets = operands if base == "mv" else operands[-1:]
        if _links(base, words):
            why = _links_out(base, operands[:-1] if len(operands) > 1 else operands,
                             operands[-1] if len(operands) > 1 else (".", True), allowed)
            if why is not None:
                return why
    elif base in {"chmod", "chown", "chgrp"}:
        targets = operands[1:]
    elif base in {"tar", "unzip"}:
        targets = []  # where an archive writes is decided by its content and -C: asked about as a whole
        if operands:
            return f"{base!r} extracts files where the archive says"
    else:
        targets = operands
    for target, literal in targets:
        if not inside(target, literal, allowed):
            return f"{base} writes to {target!r}, outside {', '.join(allowed)}"
    return None


def _target_directory(words: list[tuple[str, bool]]) -> tuple[str, bool] | None:
    """The directory of ``-t DIR``/``--target-directory=DIR`` (cp, mv, install, ln), or None."""
    for i, (word, literal) in enumerate(words):
        if word in ("-t", "--target-directory") and i + 1 < len(words):
            return words[i + 1]
        if word.startswith("--target-directory="):
            return word.split("=", 1)[1], literal
        match = None if word.startswith("--") else re.fullmatch(r"-[A-Za-z]*?t(.*)", word)
        if match is not None:
            return (match.group(1), literal) if match.group(1) else words[i + 1] if i + 1 < len(words) else None
    return None


def _links_out(base: str, sources: list[tuple[str, bool]], link: tuple[str, bool], allowed: list[str]) -> str | None:
    """A link under an allowed path to a file or directory outside them: later writes through it
    land outside. A relative symlink target is read from the link's directory."""
    where, where_literal = link
    base_dir = where if where.endswith("/") else posixpath.dirname(where)
    for target, literal in sources:
        if target.startswith("-"):
            continue
        resolved = target
        if literal and not target.startswith(("/", "~")) and where_literal and where.startswith("/"):
            resolved = posixpath.normpath(posixpath.join(base_dir or "/", target))
        if not inside(resolved, literal, allowed):
            return (f"{base} links {target!r} from under {', '.join(allowed)}: writes through the link would land "
                    "outside them")
    return None


def _option_targets(base: str, words: list[tuple[str, bool]]) -> list[tuple[str, bool]] | None:
    """Where programs that write to a file named by an option (or to the current directory) write;
    None for programs that are not such writers."""
    values = [w for w, _ in words]
    if base in _VALUED:
        skipped = {i + 1 for i, w in enumerate(values) if w in _VALUED[base]}
        operands = [words[i] for i, w in enumerate(values)
                    if i not in skipped and (w == "-" or not w.startswith("-"))]
        return operands[1:2] if base != "sqlite3" else operands[:1]
    if base == "find":
        return [words[i + 1] for i, w in enumerate(values[:-1]) if w in ("-fprint", "-fprint0", "-fprintf", "-fls")]
    if base == "csplit":
        found = [words[i + 1] for i, w in enumerate(values[:-1]) if w in ("-f", "--prefix")]
        found += [(w.split("=", 1)[1], lit) for w, lit in words if w.startswith("--prefix=")]
        return found or [(".", True)]
    if base == "ssh-keygen":
        if any(re.fullmatch(r"-[a-zA-Z]*[lyeiFQBD][a-zA-Z]*", w) for w in values):
            return []  # prints a key, a fingerprint or a known_hosts line
        found = [words[i + 1] for i, w in enumerate(values[:-1]) if w == "-f"]
        return found or [("~/.ssh", True)]
    if base in ("curl", "wget", "sort"):
        flags = {"curl": ("-o", "--output"), "wget": ("-O", "--output-document"), "sort": ("-o", "--output")}[base]
        cluster = re.compile(r"-[A-Za-z]*" + flags[0][1])  # -so, -sSLo: the last short flag takes the value
        found = [words[i + 1] for i, w in enumerate(values[:-1]) if w in flags or cluster.fullmatch(w)]
        found += [(w.split("=", 1)[1], lit) for w, lit in words if any(w.startswith(f + "=") for f in flags)]
        if base == "curl" and any(w in ("-O", "--remote-name", "-J") for w in values):
            found.append((".", True))  # into the current directory
        if base == "wget" and not found and any(not w.startswith("-") for w in values):
            found.append((".", True))
        return found
    if base == "git" and values and values[0] in ("init", "clone"):
        operands = [(w, lit) for w, lit in words[1:] if not w.startswith("-")]
        return operands[-1:] if operands and (values[0] == "init" or len(operands) > 1) else [(".", True)]
    return None


def inside(target: str, literal: bool, allowed: list[str]) -> bool:
    if target in {"/dev/null", "/dev/stdout", "/dev/stderr"} or re.fullmatch(r"[0-9]+|-", target):
        return True
    if not literal or not target.startswith("/") or "/../" in f"{target}/":
        return False  # a relative or expanded path: where it lands depends on the shell's state
    return any(target == p.rstrip("/") or target.startswith(p.rstrip("/") + "/") for p in allowed)


def _links(base: str, words: list[tuple[str, bool]]) -> bool:
    """``ln``, or ``cp -s``/``cp -l``, which make links as ln does."""
    return base in ("ln", "link") or (base == "cp" and any(
        w in ("--link", "--symbolic-link") or re.fullmatch(r"-[a-zA-Z]*[sl][a-zA-Z]*", w) for w, _ in words))
