"""The editor's pure text operations and path policy, exhaustively and with hypothesis."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remote_bash.models import EditPolicy
from remote_bash.tools import _text
from remote_bash.tools._edit_policy import check_path, normalize, path_problem

lines_st = st.lists(st.text(alphabet=st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)),
                            max_size=12), max_size=12)


@given(st.binary(max_size=300))
def test_decode_encode_round_trips_any_bytes(data: bytes) -> None:
    doc = _text.decode(data)
    assert _text.encode(doc.text, doc.crlf) == data


@given(lines_st, st.booleans())
def test_crlf_files_are_seen_with_lf_and_written_back_with_crlf(lines: list[str], final: bool) -> None:
    lf = "\n".join(lines) + ("\n" if final and lines else "")
    data = lf.replace("\n", "\r\n").encode()
    doc = _text.decode(data)
    assert doc.text == lf and (doc.crlf or "\n" not in lf)
    assert _text.encode(doc.text, doc.crlf) == data


def test_mixed_line_ends_stay_as_they_are() -> None:
    doc = _text.decode(b"a\r\nb\nc\r\n")
    assert not doc.crlf and doc.text == "a\r\nb\nc\r\n"


def test_invalid_utf8_is_counted_and_shown_as_replacement() -> None:
    doc = _text.decode(b"caf\xe9\n\xff\xfe\n")
    assert doc.invalid_bytes == 3
    assert _text.display(doc.text) == "caf\ufffd\n\ufffd\ufffd\n"


@given(lines_st)
def test_split_lines_inverts_join(lines: list[str]) -> None:
    assert _text.split_lines("".join(f"{line}\n" for line in lines)) == lines
    if lines and lines[-1]:
        assert _text.split_lines("\n".join(lines)) == lines  # no final newline: the same lines


@given(lines_st, st.booleans(), st.data())
def test_insert_adds_exactly_the_lines_and_keeps_the_end(lines: list[str], final: bool, data: st.DataObject) -> None:
    text = "\n".join(lines) + ("\n" if final and lines else "")
    total = len(_text.split_lines(text))
    at = data.draw(st.integers(0, total))
    added = data.draw(lines_st.filter(bool))
    result, first, last = _text.insert_lines(text, at, "".join(f"{line}\n" for line in added), "/f")
    if added[-1]:  # the last line's newline may be left out
        assert _text.insert_lines(text, at, "\n".join(added), "/f")[0] == result
    before, after = _text.split_lines(text), _text.split_lines(result)
    if at == total and text and not text.endswith("\n") and not added[-1]:
        return  # an empty last line without a final newline cannot be written: it *is* a final newline
    assert after == before[:at] + added + before[at:]
    assert (first, last) == (at + 1, at + len(added))
    if text:
        assert result.endswith("\n") == text.endswith("\n")


@given(lines_st, st.integers())
def test_insert_outside_is_refused_with_the_line_count(lines: list[str], at: int) -> None:
    text = "".join(f"{line}\n" for line in lines)
    if 0 <= at <= len(lines):
        return
    with pytest.raises(_text.EditRefused, match=f"has {len(lines)} line"):
        _text.insert_lines(text, at, "x", "/f")


@given(st.text(max_size=60), st.text(min_size=1, max_size=5), st.text(max_size=10))
def test_replace_unique_replaces_only_a_unique_occurrence(text: str, old: str, new: str) -> None:
    positions = [i for i in range(len(text)) if text.startswith(old, i)]
    if len(positions) == 1:
        result, first, last = _text.replace_unique(text, old, new, "/f")
        assert result == text[:positions[0]] + new + text[positions[0] + len(old):]
        assert first == text[:positions[0]].count("\n") + 1 and last >= first
    else:
        with pytest.raises(_text.EditRefused) as info:
            _text.replace_unique(text, old, new, "/f")
        if positions:
            assert f"occurs {len(positions)} times" in info.value.message
            lines = sorted({text[:p].count("\n") + 1 for p in positions})
            assert ", ".join(map(str, lines)) in info.value.message
        else:
            assert "does not occur" in info.value.message


def test_view_numbering_and_range() -> None:
    doc = _text.decode(b"a\nb\nc\n")
    assert _text.view_file(doc, "/f", None, None).splitlines()[1:] == ["     1\ta", "     2\tb", "     3\tc"]
    assert _text.view_file(doc, "/f", [2, -1], None).splitlines()[1:] == ["     2\tb", "     3\tc"]
    assert "is empty" in _text.view_file(_text.decode(b""), "/f", None, None)
    assert "cut at 5 characters" in _text.view_file(doc, "/f", None, 5)


def test_snippet_and_diff() -> None:
    before = "".join(f"{i}\n" for i in range(1, 31))
    after = before.replace("15\n", "fifteen\n")
    shown = _text.snippet(after, 15, 15, "/f")
    assert "    11\t11" in shown and "    15\tfifteen" in shown and "    19\t19" in shown
    assert "    10\t" not in shown and "    20\t" not in shown
    diff = _text.diff_excerpt(before, after, "/f")
    assert "@@ -13,5 +13,5 @@" in diff and "-15" in diff and "+fifteen" in diff
    assert "--- a/f" in diff and "+++ b/f" in diff
    huge = _text.diff_excerpt("", "x\n" * 5000, "/f", limit=100)
    assert huge.endswith("[... diff cut at 100 characters]")


def test_listing_and_bound() -> None:
    out = _text.format_listing("/srv/", [("a", True), ("a/b.txt", False)], 1000)
    assert out.splitlines()[1:] == ["/srv", "/srv/a/", "/srv/a/b.txt"]
    assert _text.format_listing("/", [("etc", True)], 1000).splitlines()[1:] == ["/", "/etc/"]
    text, cut = _text.bound("x" * 1000, 100)
    assert cut and text.startswith("x" * 50) and text.endswith("x" * 50) and "900 characters cut" in text


@pytest.mark.parametrize(("path", "says"), [
    (None, "must be a string"), ("", "is empty"), ("etc/x", "must be absolute"), ("./a", "'/a'"),
    ("/a\x00b", "NUL"), ("/" + "a" * 5000, "the limit is"),
])
def test_path_problems(path: object, says: str) -> None:
    problem = path_problem(path)
    assert problem is not None and says in problem


def test_normalize() -> None:
    assert normalize("/etc/../etc//app/./x.conf") == "/etc/app/x.conf"
    assert normalize("//x") == "/x"
    assert normalize("/") == "/"


@pytest.mark.parametrize(("path", "command", "allowed"), [
    ("/etc/app/x.conf", "view", True),
    ("/etc/app/sub/y", "str_replace", True),
    ("/etc/app/secret.key", "view", False),
    ("/etc/shadow", "view", False),
    ("/srv/www/index.html", "create", True),
    ("/srv/www-old/index.html", "create", False),
    ("/srv/www", "view", True),
])
def test_edit_policy(path: str, command: str, allowed: bool) -> None:
    policy = EditPolicy(allow=["/etc/app", "/srv/www/"], deny=["/etc/app/*.key"])
    assert check_path(path, command, policy).allowed is allowed


@pytest.mark.parametrize(("path", "pattern", "matches"), [
    ("/srv/x.conf", "/srv/*.conf", True), ("/srv/x.conf/inner", "/srv/*.conf", True),
    ("/srv/sub/deep/x.conf", "/srv/*.conf", False), ("/srv/sub/x.conf", "/srv/?ub/*.conf", True),
    ("/srv/sub/x.conf", "/srv/**/*.conf", True), ("/srv/x.conf", "/srv/**/*.conf", True),
    ("/srv/a/b/c", "/srv/**", True), ("/srvx/a", "/srv/**", False), ("/a/b", "/", True),
    ("/srv/a1", "/srv/a[0-9]", True), ("/srv/a/", "/srv/a[/]", False), ("/srv/ab", "/srv/a[!b]", False),
])
def test_a_star_stops_at_a_slash_and_two_cross_it(path: str, pattern: str, matches: bool) -> None:
    assert check_path(path, "view", EditPolicy(allow=[pattern])).allowed is matches


def test_a_deny_star_still_covers_deeper_paths() -> None:
    assert not check_path("/etc/ssl/x.key", "view", EditPolicy(deny=["/etc/*.key"])).allowed


def test_read_only_and_default_policy() -> None:
    assert check_path("/any", "str_replace", EditPolicy()).allowed
    decision = check_path("/any", "insert", EditPolicy(read_only=True))
    assert not decision.allowed and decision.rule == "read_only"
    assert check_path("/any", "view", EditPolicy(read_only=True)).allowed
    with pytest.raises(ValueError, match="must be absolute"):
        EditPolicy(deny=["etc/*"])


def test_inventory_edit_policy_merges_key_by_key(tmp_path: Path) -> None:
    from remote_bash.inventory import load_inventory

    path = tmp_path / "hosts.yaml"
    path.write_text("defaults:\n  edit: {deny: [/etc/shadow]}\nhosts:\n  web-1:\n    hostname: 10.0.0.5\n"
                    "    edit: {read_only: true}\n  bad:\n    hostname: 10.0.0.6\n")
    host = load_inventory(path).hosts["web-1"]
    assert host.edit == EditPolicy(deny=["/etc/shadow"], read_only=True)
    path.write_text("hosts:\n  web-1:\n    hostname: 10.0.0.5\n    edit: {deny: [etc/x]}\n")
    with pytest.raises(Exception, match="must be absolute"):
        load_inventory(path)


@given(lines_st, lines_st, lines_st, st.booleans())
def test_diff_excerpt_hunks_point_at_the_right_lines(head: list[str], middle: list[str], tail: list[str],
                                                     change: bool) -> None:
    before_lines = [*head, *middle, *tail]
    after_lines = [*head, *(["changed!"] if change else []), *middle[1:], *tail]
    before = "".join(f"{line}\n" for line in before_lines)
    after = "".join(f"{line}\n" for line in after_lines)
    diff = _text.diff_excerpt(before, after, "/f", limit=100_000)
    if before == after:
        assert diff == ""
        return
    old_lines, new_lines = _text.split_lines(before), _text.split_lines(after)
    body = diff.split("\n")[2:]
    hunks = [line for line in body if line.startswith("@@")]
    assert hunks
    for header in hunks:
        nums = header.split()[1:3]
        a, b = (int(x) for x in ([*nums[0][1:].split(","), "1"])[:2])
        c, d = (int(x) for x in ([*nums[1][1:].split(","), "1"])[:2])
        at = body.index(header)
        rows = []
        for row in body[at + 1:]:
            if row.startswith("@@"):
                break
            rows.append(row)
        old_side = [r[1:] for r in rows if r[:1] in (" ", "-")]
        new_side = [r[1:] for r in rows if r[:1] in (" ", "+")]
        start_old = a - 1 if b else a
        start_new = c - 1 if d else c
        assert old_side == old_lines[start_old:start_old + b]
        assert new_side == new_lines[start_new:start_new + d]
