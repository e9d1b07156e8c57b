"""Pure framing: the sentinel scanner, the bounded capture and the text cleaning, property-tested."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remote_bash.framing import (
    CallToken,
    FrameScanner,
    OutputCapture,
    ShellNames,
    clean_text,
    frame_command,
    may_run_a_subshell,
    render_output,
    shell_quote,
)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(data[last:p])
        last = p
    pieces.append(data[last:])
    return pieces


@settings(max_examples=400)
@given(before=st.binary(max_size=3000), after=st.binary(max_size=200), status=st.integers(0, 255),
       cuts=st.lists(st.integers(0, 4000), max_size=12))
def test_scanner_finds_its_sentinel_in_any_chunking(before: bytes, after: bytes, status: int, cuts: list[int]) -> None:
    token = CallToken.new()
    stream = before + token.marker + str(status).encode() + b"\x1e" + after
    scanner = FrameScanner(token)
    out, rest, found = b"", b"", None
    for piece in chunked(stream, cuts):
        if found is not None:
            rest += piece
            continue
        result = scanner.feed(piece)
        out += result.data
        if result.done:
            found = result.status
            rest += result.rest
    assert found == status
    assert out == before
    assert rest == after


@given(data=st.binary(max_size=5000), cuts=st.lists(st.integers(0, 6000), max_size=12))
def test_scanner_never_loses_bytes_without_a_sentinel(data: bytes, cuts: list[int]) -> None:
    token = CallToken.new()
    scanner = FrameScanner(token)
    out = b""
    for piece in chunked(data, cuts):
        result = scanner.feed(piece)
        assert not result.done
        out += result.data
    assert out + scanner.pending() == data


@given(data=st.binary(max_size=2000))
def test_a_foreign_sentinel_is_just_output(data: bytes) -> None:
    mine, other = CallToken.new(), CallToken.new()
    scanner = FrameScanner(mine)
    fake = data + other.marker + b"0\x1e"
    result = scanner.feed(fake)
    assert not result.done
    assert result.data + scanner.pending() == fake


@given(chunks=st.lists(st.binary(max_size=3000), max_size=30), limit=st.integers(1, 2000))
def test_capture_keeps_head_tail_size_and_hash(chunks: list[bytes], limit: int) -> None:
    import hashlib

    cap = OutputCapture(limit=limit)
    for c in chunks:
        cap.add(c)
    whole = b"".join(chunks)
    assert cap.total == len(whole)
    assert cap.sha256 == hashlib.sha256(whole).hexdigest()
    assert bytes(cap.head) == whole[:limit]
    if len(whole) > limit:
        assert whole.endswith(cap.tail)
        assert len(cap.tail) == min(limit, len(whole) - limit)


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 400_000), min_size=1, max_size=12), seed=st.integers(0, 2**32),
       peeks=st.sets(st.integers(0, 11)))
def test_a_large_stream_hashed_in_batches_has_the_plain_digest(sizes: list[int], seed: int, peeks: set[int]) -> None:
    # Batches go to a worker thread past _digest.BATCH; the digest is hashlib's whatever the split,
    # read midway or not, awaited or read in place.
    import hashlib
    import random

    rng = random.Random(seed)
    cap = OutputCapture(limit=1000)
    whole = hashlib.sha256()
    for at, size in enumerate(sizes):
        chunk = rng.randbytes(size)
        cap.add(chunk)
        whole.update(chunk)
        if at in peeks:
            hashing = cap.hashing()
            if hashing is not None and at % 2:
                hashing.result()
            assert cap.sha256 == whole.hexdigest()
    assert cap.total == sum(sizes)
    assert cap.sha256 == whole.hexdigest()


def test_no_output_has_the_empty_digest_and_renders_empty() -> None:
    import hashlib

    cap = OutputCapture(limit=100)
    cap.add(b"")
    assert cap.total == 0 and cap.sha256 == hashlib.sha256(b"").hexdigest()
    assert cap.hashing() is None and cap.tail == b"" and cap.tail_chunks() == (b"", 0)
    assert render_output(cap, 100, lambda text: text) == ("", False)


@given(text=st.text(max_size=300))
def test_clean_text_leaves_no_escape_or_control_characters(text: str) -> None:
    cleaned = clean_text(text)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", cleaned)


@given(data=st.binary(max_size=200_000), limit=st.integers(200, 5000))
@settings(max_examples=60)
def test_rendered_output_is_bounded(data: bytes, limit: int) -> None:
    cap = OutputCapture(limit=limit * 2)
    cap.add(data)
    text, truncated = render_output(cap, limit)
    assert len(text) <= limit + 120
    if not truncated:
        assert text == clean_text(data.decode("utf-8", "replace"))


@given(lines=st.lists(st.text("ab\u00e9\u4e2d", max_size=30), min_size=1, max_size=400),
       limit=st.integers(200, 1500), capture=st.integers(100, 3000))
@settings(max_examples=200)
def test_the_kept_parts_are_whole_lines(lines: list[str], limit: int, capture: int) -> None:
    # Without a redactor's help too: a line the capture's cut or the rendering's cut falls into
    # is not shown in part.
    cap = OutputCapture(limit=capture)
    cap.add("".join(f"{line}\n" for line in lines).encode())
    text, truncated = render_output(cap, limit)
    if not truncated:
        assert text.splitlines() == lines
        return
    head, _, rest = text.partition("[... ")
    tail = rest.split(" ...]\n", 1)[1]
    assert head == "" or head.endswith("\n")
    shown_head, shown_tail = head.splitlines(), tail.splitlines()
    assert shown_head == lines[:len(shown_head)]
    assert shown_tail == (lines[len(lines) - len(shown_tail):] if shown_tail else [])


@given(command=st.text(max_size=500).filter(lambda s: "\x00" not in s))
def test_frame_never_contains_the_sentinel(command: str) -> None:
    token, names = CallToken.new(), ShellNames.new()
    frame = frame_command(command, token, names)
    assert token.marker not in frame
    # The nonce is sent after the command's length digits, never after the sentinel's opening.
    assert frame.index(token.nonce.encode()) == 8


def test_shell_quote_round_trip_in_bash() -> None:
    import subprocess

    samples = ["", "a b", "it's", "'\"`$(x)`\\", "line1\nline2", "ünï ✓"]
    for s in samples:
        out = subprocess.run(["bash", "-c", f"printf %s {shell_quote(s)}"], capture_output=True, check=True).stdout
        assert out.decode() == s


def test_kill_report_is_read_from_the_script_output() -> None:
    from remote_bash.reaper import parse_kill_output

    scan = parse_kill_output("noise\nRBUP 6540.59\nRBSCOPE none\nRBSTRAY 42 sleep\nRBSTRAY x y\nRBKILL 3\n")
    assert (scan.count, scan.uptime, scan.cgroup, scan.strays) == (3, 654059, False, [(42, "sleep")])
    assert parse_kill_output("RBKILL 0\nRBSCOPE cgroup\n").cgroup
    assert parse_kill_output("").count == 0
    assert parse_kill_output("RBKILL x\nRBUP ?\n").uptime is None


_REPORTS = [b"bash: line 24: 1778 Killed                  sleep 100", b"Terminated", b"Killed",
            b"[1]+  Killed                  sleep 5", b"bash: line 1: 99 Hangup  x | y"]


@settings(max_examples=300)
@given(lines=st.lists(st.one_of(st.sampled_from(_REPORTS), st.binary(max_size=60).filter(lambda b: b"\n" not in b)),
                      max_size=12),
       cuts=st.lists(st.integers(0, 800), max_size=10))
def test_kill_noise_filter_drops_exactly_the_job_reports(lines: list[bytes], cuts: list[int]) -> None:
    from remote_bash.framing import _JOB_NOISE, KillNoiseFilter

    stream = b"".join(line + b"\n" for line in lines)
    noise = KillNoiseFilter()
    out = b"".join(noise.feed(piece) for piece in chunked(stream, cuts)) + noise.flush()
    assert out == b"".join(line + b"\n" for line in lines if not _JOB_NOISE.fullmatch(line))
    for line in lines:
        if line in _REPORTS:
            assert line not in out.split(b"\n")


@pytest.mark.parametrize(("command", "safe"), [
    ("echo hi", True), ("echo hi # comment", True), ("sleep 1 &", True), ("echo a \\\\", True),
    ("echo a \\", False), ("true &&", False), ("false ||", False), ("ls |", False), ("ls |&", False),
    ("cat <<EOF\nx\nEOF", True), ("cat <<-EOF\n\tx\n\tEOF\necho after", True), ("cat <<'E F'\nx", False),
    ("cat <<EOF\nx", False), ("cat <<< word", True), ("echo $((1<<2))", False),
    ("cat <<'E F'\nx\nE F", True), ("cat <<\\EOF\nx\nEOF", True),
])
def test_status_line_is_added_only_where_bash_parses_it_alone(command: str, safe: bool) -> None:
    from remote_bash.framing import status_line_safe

    assert status_line_safe(command) is safe
    frame = frame_command(command, CallToken.new(), ShellNames.new())
    assert frame[32:33] == (b"0" if safe else b"9")  # the header's status-line flag


def test_the_frame_that_replaces_the_shell_adds_no_status_line() -> None:
    """Nothing runs after the exec: the long script's end is not searched for an operator."""
    from remote_bash.framing import exit_frame

    frame = exit_frame("echo hi\n" * 500 + "builtin exec /bin/sh -c 'true &&'", ShellNames.new())
    assert frame[32:33] == b"9"
    assert frame_command("true", CallToken.new(), ShellNames.new(), status_line=False)[32:33] == b"9"


@settings(max_examples=60, deadline=None)
@given(command=st.text(alphabet="ab<'\"\\|&;\n\t E$()#-", max_size=30))
def test_status_line_never_changes_what_bash_runs(command: str) -> None:
    """Where the status line is added, bash runs the command's own text exactly as without it."""
    import subprocess

    from remote_bash.framing import status_line_safe

    if not status_line_safe(command):
        return
    script = "a() { echo A; }; b() { echo B; }; E() { echo E; }\n"
    plain = subprocess.run(["bash", "-c", script + 'eval "$1" 2>&1; echo "[$?]"', "x", command],
                           capture_output=True, timeout=10, check=False)
    status_line = 's=; eval "$1"$\'\\n{ s=$?;} 2>/dev/null\' 2>&1; t=$?; echo "[${s:-$t}]"'
    framed = subprocess.run(["bash", "-c", script + status_line, "x", command],
                            capture_output=True, timeout=10, check=False)
    strip = re.compile(rb"line \d+|\d{3,}")  # line numbers, and pids ($$ differs between the two runs)
    # Sorted: a background job's error may come before or after the status.
    assert sorted(strip.sub(b"", plain.stdout).split(b"\n")) == sorted(strip.sub(b"", framed.stdout).split(b"\n"))


def _through_bash(commands: list[str], *, restart_at: int = -1) -> list[tuple[bytes, int | None, bool]]:
    """Run ``commands`` as calls of one local bash through the driver: (output, status, restart) each."""
    import subprocess

    from remote_bash.framing import init_script

    names, first = ShellNames.new(), CallToken.new()
    data = init_script(first, names, {}, [], None)
    tokens = []
    for at, command in enumerate(commands):
        tokens.append(CallToken.new())
        data += frame_command(command, tokens[-1], names, restart=at == restart_at)
    out = subprocess.run(["bash", "--noprofile", "--norc"], input=data, capture_output=True, timeout=30,
                         check=False).stdout
    out = FrameScanner(first).feed(out).rest
    results = []
    for token in tokens:
        scan = FrameScanner(token).feed(out)
        assert scan.done, f"no sentinel for call {len(results)}: {out[:200]!r}"
        results.append((scan.data, scan.status, scan.restart))
        out = scan.rest
    return results


@settings(max_examples=20, deadline=None)
@given(texts=st.lists(st.text(max_size=40).filter(lambda s: "\x00" not in s and "\r" not in s), min_size=1,
                      max_size=8))
def test_the_driver_passes_any_text_to_eval_exactly(texts: list[str]) -> None:
    """Plain ASCII and escaped text alike: what eval runs is exactly the text sent."""
    results = _through_bash([f"printf %s {shell_quote(text)}" for text in texts])
    assert [r[0] for r in results] == [text.encode() for text in texts]


def test_a_command_that_leaves_the_driver_is_framed_and_the_driver_comes_back() -> None:
    results = _through_bash(["x=1", "", "break 5", "echo $x", "continue 2; echo no", "(exit 3)"], restart_at=3)
    assert [(r[1], r[2]) for r in results] == [(0, False), (0, False), (0, True), (0, False), (0, False),
                                               (3, False)]
    assert results[3][0] == b"1\n" and results[4][0] == b""


def test_a_continue_of_more_levels_than_the_frame_has_still_ends_its_call() -> None:
    """``continue 3`` (or 1000) resumes the driver's own loop: its sentinel is written all the same,
    where the call would otherwise wait out its deadline."""
    results = _through_bash(["x=1", "continue 3; echo no", "continue 1000", "echo $x; (exit 4)"])
    assert [(r[0], r[1], r[2]) for r in results] == [(b"", 0, False), (b"", 0, False), (b"", 0, False),
                                                     (b"1\n", 4, False)]


@pytest.mark.parametrize(("command", "expected"), [
    ("(sleep 30); rm f", True), ("x=1; ( cd /tmp && ls )", True), ("time (sleep 1)", True), ("f() { :; }", True),
    ("echo '(quoted)'", True), ("x=$(date); echo $x", False), ("diff <(ls a) <(ls b)", False),
    ("tee >(wc -l)", False), ("echo $((1 + 2)); ((x++))", False), ("ls -la", False),
])
def test_may_run_a_subshell(command: str, expected: bool) -> None:
    assert may_run_a_subshell(command) is expected


@pytest.mark.parametrize("value", ["plain", "caf\u00e9 \u2603"])
def test_the_start_up_script_is_read_whole_or_as_before_and_leaves_nothing_behind(value: str) -> None:
    """Plain ASCII settings are read with one ``read -N`` (not a system call per byte), others as
    plain script text; either way the settings hold and the variable that carried them is gone."""
    import subprocess

    from remote_bash.framing import init_script

    names, first, token = ShellNames.new(), CallToken.new(), CallToken.new()
    data = init_script(first, names, {"RB_VALUE": value}, [], None)
    assert data.startswith(b"builtin read -r -N ") == data.isascii()
    data += frame_command('printf "%s|" "$RB_VALUE"; [[ -v _rbI ]] && echo leaked || echo gone', token, names)
    out = subprocess.run(["bash", "--noprofile", "--norc"], input=data, capture_output=True, timeout=30,
                         check=False).stdout
    scan = FrameScanner(token).feed(FrameScanner(first).feed(out).rest)
    assert scan.done and scan.status == 0
    assert scan.data.decode() == f"{value}|gone\n"
