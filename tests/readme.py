"""The README's Python snippets, as tests run them: taken from the README itself, so a snippet that
drifts from the code fails a test.

A snippet line followed by a comment that is a Python literal (``# {"type": "tool_result", ...}``)
states the value of the name that line assigns; ``checked`` turns each such comment into a call
that records the value, and ``matches`` compares them, ``...`` in a string standing for any text.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

README = Path(__file__).parents[1] / "README.md"
_STATED = re.compile(r"^(?P<indent>\s*)# (?P<value>\{.*\})\s*$")
_ASSIGNED = re.compile(r"^\s*(?P<name>\w+)\s*=")


def python_snippets(section: str) -> list[str]:
    """The ```python blocks of the README section headed ``## section``, in order."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end if end != -1 else None], re.S)


def checked(snippet: str, record: str) -> tuple[str, list[Any]]:
    """The snippet with ``record(name)`` in place of each stated-value comment, and the values stated."""
    lines: list[str] = []
    stated: list[Any] = []
    name = None
    for line in snippet.splitlines():
        assigned = _ASSIGNED.match(line)
        if assigned:
            name = assigned["name"]
        comment = _STATED.match(line)
        if comment:
            assert name is not None, f"a stated value with no assignment before it: {line}"
            stated.append(ast.literal_eval(comment["value"]))
            lines.append(f"{comment['indent']}{record}({name})")
        else:
            lines.append(line)
    return "\n".join(lines) + "\n", stated


def matches(stated: Any, actual: Any) -> bool:
    """Whether ``actual`` is what the README states: equal, ``...`` in a string matching any text."""
    if isinstance(stated, dict):
        return (isinstance(actual, dict) and stated.keys() == actual.keys()
                and all(matches(v, actual[k]) for k, v in stated.items()))
    if isinstance(stated, str) and "..." in stated:
        pattern = ".*".join(re.escape(part) for part in stated.split("..."))
        return isinstance(actual, str) and re.fullmatch(pattern, actual, re.S) is not None
    return bool(stated == actual)
