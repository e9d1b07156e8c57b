"""The built-in rules of secret masking: one regular expression per form, and the cheap triggers
that find the lines worth running them on.

Each rule's expression must stay linear on any input: a rule that can fail never rescans what it
read (runs are matched whole, possessively where a later part can fail), conditions that would
need a far lookahead are checked after the match, and a word stops where another match of the same
rule could start. ``bench/bench_redact.py`` repeats every sample's prefixes to keep that honest.

Pure data and pattern text: no I/O, and nothing here sees the text being masked.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from remote_bash._plain import Record


class _Rule(Record):
    kind: str
    pattern: str
    """Matches the secret; only the groups named in ``values`` are masked, when there are any."""
    triggers: tuple[str, ...]
    """Cheap expressions of which one finds, on the same line, part of every match of ``pattern``.

    Each starts with one plain character, and a rare one where possible:
    the search then skips through the text in C and only stops at those characters.
    """
    values: tuple[str, ...] = ()
    check: Callable[[str], bool] | None = None
    """A condition on the matched text, tested after the match so the expression needs no
    lookahead that could scan far and fail (the backtracking that made ``sk-`` runs slow)."""


# Private key blocks: BEGIN to the first END, or to the end of the text when END never comes.
_PEM_LABEL = r"-----{}[ ](?:[A-Z0-9]{{1,20}}[ ]){{0,3}}PRIVATE[ ]KEY(?:[ ]BLOCK)?-----"
_PEM_BEGIN = _PEM_LABEL.format("BEGIN")
_PEM_END = _PEM_LABEL.format("END")
_PEM_END_MAX = 128
"""No END marker is longer than this (the stream keeps this much to find a split one)."""

_DASH = "-(?!-{4})"
"""A dash in a token, but not the first of five: a token never swallows the ``-----`` of a key's BEGIN."""
_WORD = rf"(?:[A-Za-z0-9_]|{_DASH})"


# An assignment: a key ending in a keyword, a separator, then a quoted or bare value.
# Only the value is masked; a Bearer/Basic scheme word before it is kept. A quoted value runs
# to its closing quote, or to the end of the line when that never comes: a value cut short
# (by the end of what was read so far) is masked to the cut, never shown in part.
_UNICODE_BLANKS = "\u00a0\u1680\u180e\u2000-\u200d\u202f\u205f\u2060\u3000\ufeff"
"""Unicode's space separators (category Zs, the ASCII space aside: U+00A0, U+1680, U+2000 to U+200A,
U+202F, U+205F, U+3000) and the invisible characters a terminal shows as nothing or as a blank
(U+180E, U+200B to U+200D, U+2060, U+FEFF): a blank wherever one is accepted."""
_BLANK = f"[ \t\r{_UNICODE_BLANKS}]"
"""What may stand around a separator: a carriage return too (``password\\r=x`` shows ``=x`` once
the line is collapsed, so it is masked before), and the spaces and invisible characters of Unicode."""
_SEP = rf"""(?:\\?["'])?{_BLANK}*(?>===|!==|=>|:=|==|[:=\uff1a\uff1d]){_BLANK}*+"""
"""A key's closing quote (escaped, inside a JSON string: ``\\"password\\":``), a separator and the blanks
around it, the separator (``===`` and ``!==`` of JavaScript and PHP too) and the blanks after it taken
whole: ``==`` is never read again as ``=`` and a value ``=`` (``password == [REDACTED:password]``), and a
blank is never the start of a value (``password:\xa0x``, masked, must not be read again as ``password:``
and a value ``\xa0[REDACTED:password]``)."""
_YAML_PROPS = r"(?:(?:!<[^<>\s]{0,256}+>|!!?[A-Za-z]*+|&[A-Za-z0-9_-]++)[ \t]++){0,2}+"
"""A YAML tag and anchor before a value (``!!str``, a verbatim ``!<tag:yaml.org,2002:str>``, ``&pw``): not
the value. Taken whole, as the blanks after a separator are: the tag before a mask is never read as a
value (masking twice changes nothing)."""
_YAML_HEAD = r"(?:(?:[|>][-+0-9]{0,2}|!<[^<>\s]{0,256}+>|!!?[A-Za-z]*+|&[A-Za-z0-9_-]++)[ \t\r]*){0,3}(?:#[^\n]*+)?"
"""What may follow a YAML key on its line when the value is on the next one: a block scalar's
header, a tag, an anchor, a comment."""
_OPEN_END = rf"[:=\uff1a\uff1d]{_BLANK}*{_YAML_HEAD}"
"""The end of a line whose value may be on the next line: a separator, maybe a YAML block scalar's header."""
_TAG_BLANK = r"(?:[ \t]|\\[tnr])"
"""A blank in a start tag, or one a command spells as an escape (``printf '<password\\t>x'``)."""
_ATTR = rf"""{_TAG_BLANK}++[A-Za-z_:][-A-Za-z0-9_.:]*+=(?:"[^"<>\n]*+"|'[^'<>\n]*+')"""
"""One quoted attribute of a start tag, after its blanks."""
_TAG_PREFIX = r"[-A-Za-z0-9_.:]{0,64}?"
"""What of an element's name may stand between its ``<`` and the keyword (``db:``, ``jdbc.``): bounded,
so a name is tried from at most so many places."""
_DOTS_TAIL = r"(?:\.[A-Za-z0-9_]{1,32}+){0,4}+"
"""More of a dotted name after its keyword (``db.password.prod``, ``<db.password.prod>``): bounded, so a
run of dotted keywords is not read again from each."""
_TAG_KEYWORD = (
    r"(?i:pass(?:word|wd|phrase)?s?|sshpass|pwd|secret(?:[_-]?key)?|secret_?access_?key(?-i:[A-Z][A-Za-z0-9]{0,31}+)?|private[_-]?key"
    r"|key[_-]data|token|api[_-]?key)[0-9]{0,8}+(?:_[A-Za-z0-9_]{0,64}+)?"
)
_XOPEN_END = rf"<{_TAG_PREFIX}{_TAG_KEYWORD}{_DOTS_TAIL}(?:{_ATTR})*+[ \t]*>[ \t]*+(?:<!\[CDATA\[)?[ \t\r]*+"
"""The end of a line whose element's text may start on the next line: a start tag whose name ends in
a keyword (of any rule), maybe the start of a CDATA section, and nothing after them."""
_NOT_OPEN = rf"(?![^\n]*(?:{_OPEN_END}|{_XOPEN_END})(?:\n|\Z))"
"""A line that is neither a key whose value may be on the next line nor such a start tag: only such a
line is taken as the value of the line before it, so no match reaches over more than one line after
its key (and its blank lines)."""
_BLANK_LINES = 2
"""How many blank lines may stand between a YAML key and its value on a later line."""
_NEXT_LINE = (
    rf"{_YAML_HEAD}(?:\n(?:[ \t\r]*+\n){{0,{_BLANK_LINES}}}(?:[ \t]+(?:-[ \t]+)?|-[ \t]+)(?!-----){_NOT_OPEN}"
    rf"(?P<v4>(?:[^\s-]++|{_DASH})++(?:[ \t]+(?:[^\s-]++|{_DASH})++)*+)"
    r"""|\\n(?:[ \t]|\\t)++(?:-[ \t]+)?(?P<v7>[^\s"'\\]++))"""
)
"""A YAML value on a later, more indented line (``password:`` or a block scalar ``password: |``):
its first line, or a list's first item (which YAML lets stand at the key's own indentation). A line
that could itself be such a key (it ends in ``:``,
``=`` or a block scalar's header) is not taken as a value, so no match spans more than one line
after the key and its blank lines. This is the one rule besides key blocks that reaches over a
newline: the stream holds a line that ends in a keyword and a separator (and the blank lines after
it) until the next line is complete. In a command, ``printf 'token:\\n  x'`` spells the newline
and a tab as escapes: the value after them, up to a quote or a backslash, is masked too."""
_WORDS = rf"""[^\s"',;&\\-]+|\\[^\n]?|{_DASH}|\r++(?![\s"',;&]|\Z)"""
"""The runs of a bare value (see _VALUE)."""
_PLAIN = rf"""[^\s,;\\{_UNICODE_BLANKS}-]+|\\[^\n]?|{_DASH}|\r++(?![\s,;]|\Z)"""
"""The runs of a value that goes on over its words after a separator and a blank: quotes and ``&``
are part of it (``it's``, ``salt & pepper``)."""
_GAP = f"[ \t{_UNICODE_BLANKS}]"
"""What stands between the words of such a value: a blank, as around a separator, but not ``\r``."""
_STR_PREFIX = r"""(?:[bBuUrR]{1,2}+(?=["']))?+"""
"""A string prefix before a quote, as Python prints one (``b'x'``, ``u'x'``): the value is the quoted text after it."""
_ESCAPED_QUOTED = r"""(?:[^"\\\n]++|\\\\(?:\\[^\n]|[^\\\n])?|\\[^"\\\n])++"""
"""The text of a string inside a JSON string (``"{\\"password\\":\\"x\\"}"``, as ``aws secretsmanager``
and ``kubectl`` print one), after its escaped opening quote: to its escaped closing quote (an escaped
backslash in it escapes what follows it), or to the end of the string that holds it."""
_LIST = (
    r"""\[(?!REDACTED:)(?=[ \t]*+[^\s\]])(?P<v24>(?:[^\]\["'\\\n]++|"(?:[^"\\\n]++|\\[^\n]?)*+"?"""
    r"""|'(?:[^'\n]++|'')*+'?|\\[^\n]?|\[[^\]\n]*+\]?)++)"""
)
"""A YAML flow sequence or a JSON array (``password: [a, b]``, ``"passwords": ["a", "b"]``): all it
holds is masked, to its closing ``]`` (one that stands inside a quoted item or closes an inner list
does not end it) or to the end of the line. Never a mask (``[REDACTED:...]``), nor an empty list."""
_SCHEME_MASK = r"(?i:bearer|basic)[ \t]++\[REDACTED:"
"""A scheme word before a mask (``token: Bearer [REDACTED:token]``): masked text, which is never a value."""
_VALUE = (
    rf"""(?:{_NEXT_LINE}|{_YAML_PROPS}(?:(?i:bearer|basic)[ \t]+)?"""
    rf"""{_STR_PREFIX}(?:{_LIST}|"(?P<v1>(?:[^"\\\n-]+|\\[^\n]?|{_DASH}|"")+)"?"""
    rf"""|\$?'(?P<v2>(?:[^'\\\n-]+|\\[^\n]?|{_DASH}|'\\''|'')+)'?"""
    rf"""|\\"(?P<v32>{_ESCAPED_QUOTED})(?:\\")?"""
    rf"""|(?<={_BLANK})(?P<v23>(?![{{\[#"']|{_SCHEME_MASK})(?:{_PLAIN})+"""
    rf"""(?:{_GAP}++(?![#\s])(?![^\s=:]*+{_GAP}*+[=:])(?:{_PLAIN})+)*+)"""
    rf"""|["']?(?P<v3>(?![{{\[]|{_SCHEME_MASK})(?:{_WORDS})+)))"""
)
"""A value as shells and YAML quote it: ``"..."``, ``'...'`` and ANSI-C ``$'...'`` (with backslash
escapes), a quoted value going on after the ``'\\''`` of ``set`` and a doubled quote (``'it''s'`` in
YAML), and a bare value with backslash-escaped characters (``printf %q``: ``a\\ b``) or a carriage
return before more of it (``hunt\\rer2``, which the collapse of ``\\r`` lines would otherwise show).
Each of these continuations starts with a character the runs before it stop at, so none is read twice.

A value never takes in the ``-----`` of a key block's BEGIN (``private_key: -----BEGIN ...``):
the key block rule masks the block, over all its lines. The runs inside a value are matched whole
(``[...]+``), not a character per step: nothing can fail after a value, so nothing backtracks
into them, and a long value costs one step per run instead of one per character."""
_XML = (
    r"""(?:(?:[ \t]+[A-Za-z_:][-A-Za-z0-9_.:]*+=(?:"[^"<>\n]*+"|'[^'<>\n]*+'))++[ \t]*)?>"""
    r"(?:<!\[CDATA\[(?P<v6>(?:[^\]\n]++|\](?!\]>))+)|(?P<v5>[^<\n]+))"
)
"""The text of an XML element named by the key (``<password>x</password>``): after its quoted
attributes, if any (bare words and a ``>`` are a shell redirection: ``echo password >out``), and
inside a CDATA section, which may hold a ``<``."""
_NAME_BLANKS = 8
"""How many blanks may follow a name that holds a keyword at the end of its line."""
_NAME_END = (
    r"(?i:pass(?:word|wd|phrase)?s?|sshpass|pwd|secret(?:[_-]?key)?|secret_?access_?key(?-i:[A-Z][A-Za-z0-9]{0,31}+)?|private[_-]?key"
    rf"""|key[_-]data|token|api[_-]?key)[0-9]{{0,8}}+(?:_[A-Za-z0-9_]{{0,64}}+)?["']?[ \t\r]{{0,{_NAME_BLANKS}}}"""
)
"""The end of a line that may be a name whose ``value:`` is on the next line: a keyword of any rule
(and more of an identifier) at its end. Such a line is never itself taken as that value, so a
name's value line is never the name of another: no match reaches over more than one newline,
and the stream holds at most that line (and the key before it, when it may be that key's value)."""
_CDATA_TEXT = r"(?:[^\]\s]|\](?!\]>))(?:[^\]\n]++|\](?!\]>))*+"
"""The text of a CDATA section from its first non-blank character, to ``]]>`` or the end of the line."""
_TAG_TEXT = r"[^<\s][^<\n]*+"
_TAG_NEXT = rf"[ \t\r]*+\n(?:[ \t\r]*+\n){{0,{_BLANK_LINES}}}{_NOT_OPEN}[ \t]*+"
"""The end of the start tag's line and up to two blank lines, before text on a later line."""
_XML_TAG = (
    rf"(?:(?:{_ATTR})*+{_TAG_BLANK}*+>"
    rf"(?:[ \t]*+<!\[CDATA\[(?:(?P<v17>[ \t]*+{_CDATA_TEXT})|[ \t]*+{_TAG_NEXT}(?P<v19>{_CDATA_TEXT}))"
    rf"|(?P<v16>[ \t]*+{_TAG_TEXT})"
    rf"|{_TAG_NEXT}(?:<!\[CDATA\[[ \t]*+(?P<v20>{_CDATA_TEXT})|(?P<v18>{_TAG_TEXT})))"
    rf"|[ \t\r]*+\n{_NOT_OPEN}(?![^\n]*?{_NAME_END}(?:\n|\Z))(?:{_ATTR})++[ \t]*>[ \t]*+"
    rf"(?:<!\[CDATA\[[ \t]*+(?P<v21>{_CDATA_TEXT})|(?P<v22>{_TAG_TEXT})))"
)
"""After the ``<`` and the name of an element named by the key: its text, after blanks, quoted
attributes or both (``<password >x``), in a CDATA section or not, on the start tag's line or on a
later one (after up to two blank lines: ``<password>\\n  x``), or on the line of attributes that
follow the name on the next, indented line (``<password\\n id="1">x``). This and a YAML value are
the rules that reach over a newline to a value: the stream holds a line that ends in such a start tag
(``_XOPEN_END``) or in a keyword (``_NAME_END``) until the next one is complete."""


_ESCAPED_SIBLING = (
    rf"""\\"{_GAP}*+,{_GAP}*+(?:\\"[A-Za-z]{{1,32}}+\\"{_GAP}*+:{_GAP}*+"""
    rf"""(?:\\"[^"\\\n]{{0,128}}+\\"|[0-9a-z]{{1,16}}+){_GAP}*+,{_GAP}*+){{0,3}}"""
    rf"""\\"(?i:value)\\"{_GAP}*+:{_GAP}*+\\"(?P<v33>{_ESCAPED_QUOTED})"""
)
"""A name's value member inside a JSON string, its quotes escaped
(``{\\"name\\":\\"DB_PASSWORD\\",\\"value\\":\\"x\\"}``, the SSM form too, as ``kubectl``'s
last-applied annotation prints them): to its escaped closing quote."""
_SIBLING_LINE = (
    rf"""["'](?:{_GAP}+(?i:value){_GAP}*={_GAP}*(?:"(?P<v8>[^"\n]++)"?|'(?P<v9>[^'\n]++)'?)"""
    r"""|[ \t]*>(?P<v10>[^<>\n]++)(?=</))"""
    rf"""|["']{_GAP}*+,{_GAP}*+(?:{_STR_PREFIX}(?:"[A-Za-z]{{1,32}}+"|'[A-Za-z]{{1,32}}+'){_GAP}*+:{_GAP}*+"""
    rf"""{_STR_PREFIX}(?:"[^"\\\n]{{0,128}}+"|'[^'\\\n]{{0,128}}+'|[0-9a-z]{{1,16}}+){_GAP}*+,{_GAP}*+){{0,3}}"""
    rf"""{_STR_PREFIX}(?:"(?i:value)"|'(?i:value)'){_GAP}*+:{_GAP}*+"""
    rf"""{_STR_PREFIX}(?:"(?P<v11>(?:[^"\\\n]++|\\[^\n]?)++)"?|'(?P<v31>(?:[^'\\\n]++|\\[^\n]?)++)'?)"""
    rf"""|{_ESCAPED_SIBLING}"""
)
_SIBLING_NEXT = (
    rf"""["']?[ \t\r]{{0,{_NAME_BLANKS}}}\n[ \t]++(?i:value)[ \t]*:[ \t]*"""
    rf"""{_NOT_OPEN}(?![^\n]*?{_NAME_END}(?:\n|\Z))"""
    r"""["']?(?P<v12>[^\s"']++(?:[ \t]+[^\s"']++)*+)"""
)
"""A name that holds the keyword, quoted, and the secret in the value that goes with it: an XML
element's next attribute (``<add key="DbPassword" value="x"/>``, ``<property name="...password"
value="x"/>``) or its text (``<entry key="password">x</entry>``, up to a closing tag: ``echo
"password">out`` is a redirection), the next member of a JSON object (``{"name": "DB_PASSWORD",
"value": "x"}``, also past up to three members between, as in AWS SSM's ``{"Name": "/db/password", "Type":
"SecureString", "Value": "x"}``, or as Python prints a dict, ``{'name': 'DB_PASSWORD', 'value': 'x'}``),
or a YAML ``value:`` on the next, indented line (a Kubernetes container's
``- name: DB_PASSWORD``, ``_SIBLING_NEXT``). The last is the third rule that reaches over a newline:
the stream holds a line that ends in a keyword until the next one is complete (``_NAME_END``). On the
name's own line, the name may go on after the keyword as a dotted name (``db.password.prod``)."""
_SEPARATORS = r"(?:=>|:=|==|[:=\uff1a\uff1d])"
_SLASH_SEP = (
    rf"""(?:{_BLANK}*(?:=>|:=|==|[=\uff1d])|"{_BLANK}*{_SEPARATORS}|'{_BLANK}*{_SEPARATORS}(?={_BLANK}*(?:\$|[bBuUrR]{{1,2}})?["'])){_BLANK}*+"""
)
"""The separator after a key whose keyword follows a ``/`` (``DB/PASSWORD=x``, ``"/prod/db/password": "x"``):
an equals sign, or any separator after a key in double quotes, or in single quotes before a quoted
value. A colon after a bare path (or one in single quotes) is what an error message writes after a
file's name (``cat: /etc/passwd: No such file``, ``ls: cannot access '/srv/token': ...``): not a key."""
_PATH = r"""(?m:^)[ \t]*+(?:-[ \t]++)?["']?(?:[A-Za-z0-9_.-]++/)+?"""
"""The folders of a relative path before a keyword (``db/``, ``secret/data/db/``) at the start of a line
(after its indentation and a YAML list's ``-``), where YAML writes a key: tried once per line, each
folder read once (the keyword is looked for after each, so it may be followed by more: ``db/password/v2``)."""
_KEY_PATH = r"(?:[/.][A-Za-z0-9_]{1,32}+){1,4}+"
"""More of a key after its keyword, as a path or a dotted name (``DB_PASSWORD/PROD``, ``db.password.prod``):
a key only before the separators of ``_SLASH_SEP``."""
_SLASHED_TAIL = r"(?:[/.-][A-Za-z0-9_]{1,32}+){0,4}+"
"""More of a key whose keyword follows a ``/`` (``DB/PASSWORD/PROD``, ``db/password-prod``): bounded, so a
path of keywords is not read again from each."""
_PATH_TAIL = r"(?:[/-][A-Za-z0-9_]{1,32}+){0,4}+"
"""The same after the folders of a relative path at a line's start, but for a dotted part: ``db/password.txt:
ASCII text`` is what ``file`` prints."""
_PATH_SEP = rf"""["']?{_BLANK}*[:\uff1a](?={_BLANK}|\n){_BLANK}*+"""
"""The separator of YAML's ``db/password: x``: a colon and a blank (or the end of the line, its value
being on the next); a colon with no blank after a path is a path's (``-v ./password:/run/password``)."""

_DOTS = r"""(?m:^)[ \t]*+(?:-[ \t]++)?["']?(?:[A-Za-z0-9_-]++\.)+?"""
"""The parts of a dotted key before its keyword (``db.``, ``spring.datasource.``) at the start of a line,
where a ``.properties`` file or YAML writes a key: tried once per line, each part read once."""


def _keyed(keyword: str, slashed: str, value: str = _VALUE) -> str:
    """A key ending in ``keyword`` and its value, the text of an XML element named by it, or a sibling
    value; an element named by it that starts with ``<``; or a key whose keyword follows a ``/``
    (``slashed``, the same keyword after that ``/``), with a separator of ``_SLASH_SEP``, or after
    the folders of a relative path at a line's start (``_PATH``) with a colon and a blank; or a dotted
    key with a part before the keyword at a line's start (``_DOTS``), with a colon and a blank.

    A sibling value follows a name that holds the keyword or a path to it (``{"name": "/prod/db/password",
    "value": "x"}``). The three kinds of key share one ``value`` (a group name may appear once in an
    expression), and the keyword is tried once at each place: an element's text sets ``v0`` and a
    sibling value ``vs``, after which no separated value follows (a line with a keyword is matched at
    every one of its places, so each branch tried there counts)."""
    return (rf"(?:(?:(?:{keyword}(?P<vk>)|{slashed}{_SLASHED_TAIL})"
            rf"(?:(?(vk)(?:{_SEP}|{_KEY_PATH}{_SLASH_SEP}|{_XML}(?P<v0>))|{_SLASH_SEP})|(?:(?(vk){_DOTS_TAIL})(?:{_SIBLING_LINE})|{_SIBLING_NEXT})(?P<vs>))"
            rf"|{_PATH}{slashed}{_PATH_TAIL}{_PATH_SEP}|{_DOTS}{keyword}{_DOTS_TAIL}{_PATH_SEP})(?(v0)|(?(vs)|{value}))"
            rf"|<{_TAG_PREFIX}{keyword}{_DOTS_TAIL}{_XML_TAG})")


_ASSIGNED = ("v1", "v2", "v32", "v23", "v24", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v31", "v33",
             "v12", "v16", "v17", "v18", "v19", "v20", "v21", "v22")
_FLAG_VALUE = (
    r"""(?:"(?P<v1>(?:[^"\\\n]+|\\[^\n]?)+)"?|\$?'(?P<v2>(?:[^'\\\n]+|\\[^\n]?|'\\'')+)'?"""
    r"""|(?!\[REDACTED:[a-z0-9-]{1,32}\]\]*+(?:[\s,]|\Z))(?P<v3>(?:[^\s"'\\]+|\\[^\n])+))"""
)
"""The value of a command-line option, as shells quote it: ``"..."`` (with ``\\"``), ``'...'`` and
``$'...'`` (going on after the ``'\\''`` of ``set``), to the closing quote or the end of the line, or
bare, with backslash-escaped characters (``a\\ b``)."""
_ITEM = r"""(?!\[REDACTED:[a-z0-9-]{1,32}\](?:[\s,\]"'\\]|\Z))[^\s"'\\,\]]++"""
_ITEM_PREFIX = r"""(?(v27)(?:[bBuUrRfF]{1,2}+(?=["']))?)"""
"""A string prefix before a list item's quote, as Python prints one (``b'x'``, ``u'x'``, ``r"x"``): the
value is the quoted text after it."""
_OPTION_VALUE = rf"(?!,{_GAP}*+\[REDACTED:[a-z0-9-]{{1,32}}\])" + _ITEM_PREFIX + _FLAG_VALUE.replace(
    r"""(?P<v3>(?:""", rf"""(?P<v3>(?(v27){_ITEM}|(?(v28){_ITEM}|(?(v29){_ITEM}|(?:""").replace(
    r"""\\[^\n])+))""", r"""\\[^\n])+)))))""")
"""An option's value, which after a comma (an argv list's ``"--password", "x"``), or after an option
right after a ``[`` or a ``,`` (``[--password x]``, a usage line's), is a list's item: a bare one ends
at a ``,`` or ``]``, and is never a mask (masking ``[REDACTED:x]`` again would leave its ``]``), nor is
a comma before a mask (``[--password , [REDACTED:x]]``, where the comma is no list's); a quoted one may
have a prefix (``b'x'``)."""
_KEY_TAIL = "[0-9]{0,8}+(?:_[A-Za-z0-9_]{0,64}+)?"
"""More of an identifier after a keyword: a number (``DB_PASSWORD2``), then the rest (``DB_PASSWORD_PROD``):
bounded, so a run of ``pass_pass_...``
is not read again from each of its keywords."""
_AWS_TAIL = "(?:[A-Z][A-Za-z0-9]{0,31}+)?"
"""More of a CamelCase name after ``SecretAccessKey`` (``SecretAccessKeyProd``), before a number or an
``_`` and more (``SecretAccessKey2``, ``SecretAccessKey_2``): bounded, read once."""
_NUMBER = r"[0-9]{1,32}+(?:[.,][0-9]{1,32}+){0,8}+[kKmMbB]?+"
"""A count as a person writes it: ``512``, ``1.5``, ``1,234``, ``12k``, ``1.2M``."""
_COUNT = re.compile(rf"""(?i:tokens)(?:_[A-Za-z0-9_]{{0,64}})?["']?[ \t]*[:=][ \t]*["']?{_NUMBER}"""
                    rf"""(?:[ \t]++(?:{_NUMBER}|[A-Za-z]{{1,32}}+|\([A-Za-z]{{1,32}}+\)|[/|+-]))*+"""
                    r"""["']?[}\])]{0,8}\Z""")


def _not_a_count(text: str) -> bool:
    """False for a plural ``tokens`` key whose value is a number (``"total_tokens": 512``, ``max_tokens=4096``,
    an LLM's usage), maybe with a unit and words of letters or more numbers after it (``tokens: 12k``,
    ``tokens: 400 in, 0 cached``, ``Tokens: 1234 in / 56 out``, as ``run`` prints its use): a count, not a
    secret. A word with a digit in it after the number (``tokens: 12 S3cret``) is no count's."""
    return _COUNT.search(text) is None


_NOT_SSHPASS = r"(?:[^\ss]++|s(?!shpass))*+"
_NOT_MYSQL = r"(?:[^\sm]++|m(?!ysql|ariadb))*+"
"""The rest of a word on a command line, up to where another match of the same rule could start:
a line of ``mysql -mysql -mysql ...`` is read once, not once from each."""


def _token(first: str, rest: str, before: str = "A-Za-z0-9") -> str:
    """A token starting with ``first`` that is not the tail of a longer word.

    The check on the character before comes after ``first`` so that the expression starts
    with a plain character, which lets the regex engine reject most positions at once.
    """
    return f"{first}(?<![{before}]{first}){rest}"


def _has_digit(text: str) -> bool:
    return any(c.isdigit() for c in text)


_IDS = re.compile(r"""(?:^|[\s=u'"])[0-9]+:[0-9]+['"]?\Z""")


def _not_ids(text: str) -> bool:
    """False for ``-u 1000:1000``: a user and group id, not a user and password."""
    return _IDS.search(text) is None


def _option(keyword: str) -> str:
    """A long option whose name ends in ``keyword`` (``--db-password``), then its value after a
    space. A name that goes on past the keyword (``--password-stdin``, ``--token-file``) is not one:
    the name's parts are read once, possessively, so a keyword of two parts names its last one
    after a lookbehind (``(?<=-api-)key``).

    The name may be quoted (``"--password" x``, ``'--token' x``); quoted with its value
    (``"--password=a b"``), the value is one word to the closing quote, blanks and all. In an argv
    list the value is the next item, after a comma and blanks of any kind on either side of it."""
    name = rf"-(?:[A-Za-z0-9]+[_-])*+(?i:{keyword})"
    return (rf"""-(?<![A-Za-z0-9-]-)(?:(?<=[\[,]-)(?P<v28>)|(?<=[\[,][ \t]-)(?P<v29>))?{name}"""
            rf"""(?P<v30>["'])?{_GAP}*+(?:(?(v30)|(?(v28)|(?(v29)|(?!)))),{_GAP}*+(?P<v27>)"""
            rf"""|(?<={_GAP}))(?!-){_OPTION_VALUE}"""
            rf"""|"-{name}=(?P<v25>(?:[^"\\\n]++|\\[^\n]?)++)"?"""
            rf"""|'-{name}=(?P<v26>(?:[^'\\\n]++|\\[^\n]?|'\\'')++)'?""")


_QUOTED_OPTION_GROUPS = ("v25", "v26")
"""The value of an option quoted with its name: to the closing ``"``, to the closing ``'``."""
_FLAG_GROUPS = ("v1", "v2", "v3", *_QUOTED_OPTION_GROUPS)
_AUTH_HEAD = (
    r"""(?i:uthorization)["']?[ \t]*[:=][ \t]*+["']?+(?!(?i:basic|bearer)[ \t])"""
    r"""(?:[A-Za-z][A-Za-z0-9._-]{0,30}[ \t]+)?"""
)
_AUTH_ESCAPED_HEAD = (
    r"""(?i:uthorization)\\"[ \t]*[:=][ \t]*+(?:\\")?+(?!(?i:basic|bearer)[ \t])"""
    r"""(?:[A-Za-z][A-Za-z0-9._-]{0,30}[ \t]+)?"""
)
"""The same inside a JSON string, its quotes escaped (``\\"Authorization\\":\\"token x\\"``)."""
_AUTH_GROUPS = ("v16", "v13", "v14", "v15")
"""The credential of an Authorization header: to an escaped closing ``\\"`` inside a JSON string, to a
closing ``"``, to a closing ``'``, to the end of the line."""


def _either_case(first: str, rest: str) -> tuple[str, str]:
    """Triggers for a keyword anchored at the letter ``first``, in both cases."""
    return f"{first.lower()}{rest}", f"{first.upper()}{rest}"


_RULES: tuple[_Rule, ...] = (
    _Rule(
        "private-key",
        rf"{_PEM_BEGIN}(?s:.*?(?P<pem_end>{_PEM_END})|.*)",
        (r"Y(?<=PRIVATE KEY)(?: BLOCK)?-----",),
    ),
    _Rule(
        "aws-access-key-id",
        _token("A", r"(?:KIA|SIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        (r"K(?<=AK)IA", r"S(?<=AS)IA"),
    ),
    _Rule(
        "github-token",
        _token("g", r"(?:h[pousr]_[A-Za-z0-9]{20,}|ithub_pat_[A-Za-z0-9_]{20,})", "A-Za-z0-9_"),
        (r"g(?:h[pousr]_|ithub_pat_)",),
    ),
    # Bot, user and app tokens (xoxb-, xoxp-, xapp-1-...), and the secret path of a webhook URL.
    _Rule("slack-token", _token("x", rf"(?:ox[baprs]|app)-(?:[A-Za-z0-9]|{_DASH}){{10,}}"), (r"xox[baprs]-", "xapp-")),
    # The host in any case, maybe with a trailing dot, a port (hooks.slack.com:443) or an empty one;
    # JSON may write each slash as "\/". A client resolves "." and ".." segments before it sends the
    # path: up to eight segments of any name may stand before it ("//", "/./", "/x/../"), and the
    # secret runs on over "./" and "../" inside it.
    _Rule("slack-webhook",
          r"[Kk](?<=(?i:hooks\.slack))\.(?i:com)\.?(?::[0-9]{0,5})?\\?/"
          r"(?:(?!(?:services|workflows|triggers)\\?/)[A-Za-z0-9_.~-]{0,64}+\\?/){0,8}+"
          r"(?:services|workflows|triggers)\\?/(?P<v1>(?:[A-Za-z0-9_/-]|\\/|\.{1,2}+\\?/){8,})",
          _either_case("k", r"(?<=(?i:hooks\.slack))\.(?i:com)\.?[:/\\]"), ("v1",)),
    _Rule("anthropic-api-key", _token("s", rf"k-ant-{_WORD}{{20,}}"), (r"k(?<=sk)-",)),
    # Secret and restricted keys, live and test, and webhook signing secrets.
    _Rule("stripe-key", _token("[sr]", r"k_(?:live|test)_[A-Za-z0-9]{10,}"), (r"k(?<=[sr]k)_(?:live|test)_",)),
    _Rule("stripe-key", _token("w", r"hsec_[A-Za-z0-9]{20,}"), ("whsec_",)),
    # OpenAI-style keys: at least one digit, so hyphenated words like sk-learn-... stay. The whole
    # run is matched (and so consumed) before the digit is looked for: a run of "sk-sk-sk-..." is
    # read once, not once per "sk-" in it.
    _Rule("openai-api-key", _token("s", rf"k-{_WORD}{{20,}}"), (r"k(?<=sk)-",), check=_has_digit),
    _Rule("google-api-key", _token("A", rf"Iza{_WORD}{{35}}"), (r"z(?<=AIz)a",)),
    _Rule(
        "jwt",
        _token("e", rf"yJ{_WORD}{{5,}}\.eyJ{_WORD}{{5,}}\.{_WORD}*", "A-Za-z0-9_-"),
        (r"J(?<=eyJ)",),
    ),
    # A token after "Bearer": it has a digit or is long, so "Bearer authentication" stays.
    _Rule(
        "bearer-token",
        _token(
            "[Bb]",
            r"(?i:earer)[ \t]+(?P<v1>(?:(?=[A-Za-z._~+/-]*[0-9])[A-Za-z0-9._~+/-]{8,}"
            r"|[A-Za-z0-9._~+/-]{20,})=*)",
        ),
        _either_case("b", "(?i:earer)"),
        ("v1",),
    ),
    _Rule(
        "basic-auth",
        r"""[Aa](?i:uthorization)\\?["']?[ \t]*[:=][ \t]*(?:\\?["'])?(?i:basic)[ \t]+(?P<v1>[A-Za-z0-9+/]{4,}={0,2})""",
        _either_case("z", "(?<=(?i:authoriz))"),
        ("v1",),
    ),
    # Any other Authorization header: the credential after its scheme word, whatever it is.
    _Rule(
        "bearer-token",
        r"""[Aa](?i:uthorization)["']?[ \t]*[:=][ \t]*["']?(?i:bearer)[ \t]+(?P<v1>[^\s"']+)""",
        _either_case("z", "(?<=(?i:authoriz))"),
        ("v1",),
    ),
    # Everything after the scheme word is the credential (Digest's and AWS's have spaces and quotes
    # in it): to the closing quote when the header is quoted (curl -H "Authorization: ..."), else to
    # the end of the line.
    _Rule(
        "authorization",
        rf"""[Aa](?:(?<=\\"[Aa]){_AUTH_ESCAPED_HEAD}(?P<v16>{_ESCAPED_QUOTED})"""
        rf"""|(?<="[Aa]){_AUTH_HEAD}(?P<v13>(?:[^"\\\n]++|\\[^\n]?)++)"""
        rf"""|(?<='[Aa]){_AUTH_HEAD}(?P<v14>[^'\n]++)|(?<!["'][Aa]){_AUTH_HEAD}(?P<v15>(?:[^\r\n]++|\r++(?!\n|\Z))++))""",
        _either_case("z", "(?<=(?i:authoriz))"),
        _AUTH_GROUPS,
    ),
    # scheme://user:PASSWORD@host: the password runs to the last @ before the path.
    _Rule("url-password", r"""://[^\s:/?#@"'<>]*:(?P<v1>[^\s/?#"'<>]+)(?=@)""", ("@",), ("v1",)),
    # Key/value forms of config files and API answers: a key ending in the keyword, then a
    # separator (=, :, =>, :=, with the key's closing quote in JSON), then the value. This covers
    # env files and shell (FOO_SECRET=...), INI (aws_secret_access_key = ...), YAML (token: ...) and
    # JSON ("SecretAccessKey": "..." from aws sts, "private_key": "..." of a service account).
    _Rule(
        "aws-secret-access-key",
        _keyed(rf"[Ss](?<!/[Ss])(?i:ecret_?access_?key){_AWS_TAIL}{_KEY_TAIL}",
               rf"[Ss](?<=/[Ss])(?i:ecret_?access_?key){_AWS_TAIL}{_KEY_TAIL}"),
        _either_case("c", "(?<=(?i:sec))(?i:ret)"),
        _ASSIGNED,
    ),
    # A key with the keyword in it (DB_PASSWORD, MY_PASSWD_ROOT, pass, MYSQL_PWD, SSHPASS), but not
    # the "PASS: name" of test harnesses (automake, go test's "--- PASS:");
    # "/etc/passwd: No such file" is a path, not an assignment (db/password: x is one, see _SLASH_SEP);
    # PWD=/home/u is the working directory.
    _Rule(
        "password",
        _keyed(r"(?:[Pp](?<!/[Pp])(?i:ass(?:word|wd|phrase)s?)|[Pp](?<![A-Za-z0-9/][Pp])(?!(?<![^\s-]P)ASS:)(?i:ass)"
               r"|[Ss](?<![A-Za-z0-9][Ss])(?i:shpass))" + _KEY_TAIL,
               r"[Pp](?<=/[Pp])(?i:ass(?:(?:word|wd|phrase)s?)?)" + _KEY_TAIL),
        (*_either_case("w", "(?<=(?i:passw))"), *_either_case("h", "(?<=(?i:passph))(?i:rase)"),
         # "pass" alone only before a character that is no letter: "PASSED" in test logs is no key
         # ("PASS1" is one, numbered).
         *_either_case("s", "(?<=(?i:pass))(?![A-Za-z])")),
        _ASSIGNED,
    ),
    _Rule(
        "password",
        _keyed(rf"[Pp](?<![A-Za-z0-9/][Pp])(?i:wd){_KEY_TAIL}", rf"[Pp](?<=/[Pp])(?i:wd){_KEY_TAIL}",
               rf"""(?!["']?/){_VALUE}"""),
        _either_case("w", "(?<=(?i:pw))(?i:d)(?![A-Za-z])"),
        _ASSIGNED,
    ),
    # Options that take a secret as a value of their own, after a space: --password x, --db-pass 'x',
    # --token x, --auth-token x, --client-secret x, --api-key x (the CLIs of clouds, vault, gh).
    _Rule("password", _option("pass(?:word|wd|phrase)?|pwd"), (r"-(?<=--)(?:[A-Za-z0-9]+[_-])*+(?i:pass|pwd)",),
          _FLAG_GROUPS),
    _Rule("token", _option("token"), _either_case("k", "(?<=(?i:tok))(?i:en)"), _FLAG_GROUPS),
    _Rule("secret", _option("secret(?:key)?|(?<=[_-]secret[_-])key"), _either_case("c", "(?<=(?i:sec))(?i:ret)"),
          _FLAG_GROUPS),
    _Rule("api-key", _option("apikey|(?<=[_-]api[_-])key"),
          _either_case("k", "(?:(?<=(?i:api[_-]k))|(?<=(?i:apik)))(?i:ey)"),
          _FLAG_GROUPS),
    # curl -u user:password, --user, --proxy-user (a uid:gid of digits, as for docker -u, stays);
    # -u may end a bundle of short options (curl -fsSLu).
    _Rule(
        "password",
        r"-(?<![A-Za-z0-9-]-)(?:[A-Za-tv-z]{0,12}+u[ \t]*|-(?:proxy-)?user(?:[ \t]+|=))"
        r"""(?:"[^"\n:]*(?<!\[REDACTED):(?P<v1>[^"\n]+)"?|'[^'\n:]*(?<!\[REDACTED):(?P<v2>[^'\n]+)'?"""
        r"""|(?![-"'])[^\s:"']{0,128}+(?<!\[REDACTED):(?P<v3>[^\s"']+))""",
        (r"-(?:[A-Za-tv-z]{0,12}u|-(?:proxy-)?user)",),
        ("v1", "v2", "v3"),
        check=_not_ids,
    ),
    # sshpass -p PASSWORD, after its other options.
    _Rule(
        "password",
        rf"s(?<![A-Za-z0-9_]s)shpass(?:[ \t]+-(?!sshpass)[a-oq-zA-Z-]{_NOT_SSHPASS}"
        rf"(?:[ \t]+(?!sshpass)[^\s-]{_NOT_SSHPASS})?)*+[ \t]+-p[ \t]*{_FLAG_VALUE}",
        (r"h(?<=ssh)pass",),
        ("v1", "v2", "v3"),
    ),
    # mysql -pPASSWORD (and mysqldump, mysqladmin, mariadb ...): the value is attached to -p.
    _Rule(
        "password",
        r"m(?<![A-Za-z0-9_]m)(?:ysql[a-z]*|ariadb(?:-[a-z]+)?)"
        rf"(?:[ \t]+(?!mysql|mariadb)(?:[^\s-]|-(?!mysql|mariadb)[^\sp]){_NOT_MYSQL})*+[ \t]+-p{_FLAG_VALUE}",
        (r"q(?<=mysq)l", r"b(?<=mariadb)"),
        ("v1", "v2", "v3"),
    ),
    # .netrc: "machine h login u password p" (or "machine h password p login u") on one line, or
    # "password p" alone on its line. Never a separator or a blank before a mask: "password :\u202fx",
    # masked, is no .netrc line whose password is ":\u202f[REDACTED:password]".
    _Rule(
        "password",
        r"(?:[Ll](?<![A-Za-z0-9_][Ll])(?i:ogin)[ \t]+[^\s]{1,256}[ \t]+|[Mm](?<![A-Za-z0-9_][Mm])(?i:achine)[ \t]+"
        r"[^\s]{1,256}[ \t]+|(?m:^)[ \t]*)"
        rf"(?i:password)[ \t]+(?![:=]?{_GAP}*+\[REDACTED:)(?P<v1>[^\s]+)"
        r"(?:(?=[ \t]+(?i:machine|login|account|macdef|default)\b)|[ \t]*(?m:$))",
        _either_case("w", "(?<=(?i:passw))"),
        ("v1",),
    ),
    _Rule(
        "secret",
        _keyed(r"[Ss](?<!/[Ss])(?i:ecret(?:[_-]?key)?s?)" + _KEY_TAIL,
               r"[Ss](?<=/[Ss])(?i:ecret(?:[_-]?key)?s?)" + _KEY_TAIL),
        _either_case("c", "(?<=(?i:sec))(?i:ret)"),
        _ASSIGNED,
    ),
    # "private_key": "..." (JSON service accounts) and kubeconfig's client-key-data.
    _Rule(
        "private-key",
        _keyed(r"(?:[Pp](?<!/[Pp])(?i:rivate[_-]?keys?)|[Kk](?<![A-Za-z0-9][Kk])(?i:ey[_-]data))" + _KEY_TAIL,
               r"[Pp](?<=/[Pp])(?i:rivate[_-]?keys?)" + _KEY_TAIL),
        (*_either_case("v", "(?<=(?i:priv))(?i:ate)"), *_either_case("d", "(?<=(?i:key[_-]d))(?i:ata)")),
        _ASSIGNED,
    ),
    # Docker's config.json: "auth": "<base64 of user:password>".
    _Rule(
        "auth",
        r"""["'](?i:auth)["'][ \t]*:[ \t]*"(?P<v1>[^"\s]+)(?=")""",
        _either_case("h", """(?<=(?i:auth))["']"""),
        ("v1",),
    ),
    _Rule(
        "token",
        _keyed(rf"[Tt](?<!/[Tt])(?i:okens?){_KEY_TAIL}", rf"[Tt](?<=/[Tt])(?i:okens?){_KEY_TAIL}"),
        _either_case("k", "(?<=(?i:tok))(?i:en)"),
        _ASSIGNED,
        check=_not_a_count,
    ),
    _Rule(
        "api-key",
        _keyed(r"[Aa](?<!/[Aa])(?i:pi[_-]?keys?)" + _KEY_TAIL, r"[Aa](?<=/[Aa])(?i:pi[_-]?keys?)" + _KEY_TAIL),
        _either_case("k", "(?:(?<=(?i:api[_-]k))|(?<=(?i:apik)))(?i:ey)"),
        _ASSIGNED,
    ),
)
_PEM_GROUP = "r0"
"""The marker group of the private key rule, which stays first in the combined expression."""
