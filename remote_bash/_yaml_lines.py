"""Reading a YAML file safely while noting the line of every key and item, for error messages.

:func:`read_text` refuses files that are too large, not UTF-8, or directories; :func:`parse_yaml`
uses PyYAML's safe loader only, expands anchors, aliases and ``<<`` merge keys itself so every node
is counted, and refuses documents that expand past :data:`MAX_NODES` or nest too deeply. It returns
plain values and a map from each key path to its line. It never gives the data any meaning: that is
the inventory's job. Every problem is an :class:`~remote_bash.errors.InventoryError` naming the file.

PyYAML is loaded at the first parse, not at import: a command whose inventory comes from the cache
(:mod:`remote_bash._inventory_cache`) never parses YAML.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_bash.errors import InventoryError

if TYPE_CHECKING:
    import yaml

__all__ = ["MAX_FILE_BYTES", "MAX_NODES", "Where", "decode_text", "line_of", "parse_yaml", "read_bytes", "read_text"]

MAX_FILE_BYTES = 10 * 1024 * 1024
"""Inventory (and ssh config) files larger than this are refused before parsing."""
MAX_NODES = 200_000
"""YAML nodes a document may hold once anchors and aliases are expanded (billion-laughs guard)."""
_MAX_DEPTH = 64

Where = tuple[str, ...]
"""A key path in the document: ``("hosts", "web-1", "port")``; list items by their index."""


def line_of(lines: Mapping[Where, int], where: Where) -> int | None:
    """The line of ``where``, or of the nearest key above it (a value the file does not spell
    out, such as a key a validator says is missing, is reported at its parent's line)."""
    return next((lines[where[:n]] for n in range(len(where), 0, -1) if where[:n] in lines), None)


def read_text(file: Path, what: str) -> str:
    """The text of ``file`` (``what`` names it in errors): at most MAX_FILE_BYTES of UTF-8."""
    return decode_text(read_bytes(file, what), file, what)


def read_bytes(file: Path, what: str) -> bytes:
    """The bytes of ``file`` (``what`` names it in errors): at most MAX_FILE_BYTES."""
    try:
        if file.is_dir():
            raise InventoryError(f"{what} is a directory, not a file", path=str(file))
        with file.open("rb") as stream:
            data = stream.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise InventoryError(f"{what} not found", path=str(file)) from None
    except OSError as exc:
        raise InventoryError(f"cannot read {what}: {exc.strerror or exc}", path=str(file)) from None
    if len(data) > MAX_FILE_BYTES:
        size = file.stat().st_size / (1024 * 1024)
        raise InventoryError(
            f"{what} is {size:.1f} MiB; files over {MAX_FILE_BYTES // (1024 * 1024)} MiB are refused",
            path=str(file),
        )
    return data


def decode_text(data: bytes, file: Path, what: str) -> str:
    """``data``, read from ``file``, as UTF-8 text (a leading byte order mark dropped)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InventoryError(f"{what} is not UTF-8 text", path=str(file), line=line) from None


_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
# YAML 1.1's integers and floats that are not plain decimal: 012 (octal, 10), 0x1F, 0b101, 0o17,
# 1:30 (base 60, 90) and 1_000. Read silently they would put 10 where the file shows 012.
_UNCLEAR_NUMBER = re.compile(r"^[-+]?(?:0[0-9_]|0[xXbBoO]|[0-9_]*_)|:")
_SURROGATE = re.compile("[\ud800-\udfff]")


@functools.cache
def _loader_class() -> type[yaml.SafeLoader]:
    import yaml

    class _Loader(yaml.SafeLoader):
        """A safe loader that refuses documents with too many nodes while composing them."""

        def __init__(self, stream: str, path: str) -> None:
            super().__init__(stream)
            self.path = path
            self.composed = 0

        def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
            self.composed += 1
            if self.composed > MAX_NODES:
                line = self.get_mark().line + 1
                raise InventoryError(f"the file has more than {MAX_NODES} YAML nodes", path=self.path, line=line)
            return super().compose_node(parent, index)

    return _Loader


class _Tree:
    """Turns composed YAML nodes into plain values, noting the line of every key and item."""

    def __init__(self, loader: yaml.SafeLoader, path: str) -> None:
        self.loader = loader
        self.path = path
        self.lines: dict[Where, int] = {}
        self.nodes = 0
        self._open: set[int] = set()

    def fail(self, message: str, where: Where, node: yaml.Node) -> InventoryError:
        return InventoryError(
            message, path=self.path, line=node.start_mark.line + 1, field=".".join(where) or None
        )

    def value(self, node: yaml.Node, where: Where) -> Any:
        import yaml

        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(
                f"the document expands to more than {MAX_NODES} YAML nodes through "
                "anchors and aliases; refusing it",
                where,
                node,
            )
        if len(where) > _MAX_DEPTH:
            raise self.fail("the document is nested too deeply", where, node)
        if isinstance(node, yaml.ScalarNode):
            if node.style is None and node.tag in (_INT, _FLOAT) and _UNCLEAR_NUMBER.search(node.value):
                raise self.fail(
                    f"{node.value} is a number in a form YAML reads differently from its text (octal, hex, "
                    f"binary, base 60 or with '_'): quote it ('{node.value}') to mean the text, or write the "
                    "number in plain decimal", where, node)
            try:
                value = self.loader.construct_object(node)
            except yaml.YAMLError as exc:
                raise self.fail(f"bad YAML value: {getattr(exc, 'problem', exc)}", where, node) from None
            if isinstance(value, str) and _SURROGATE.search(value):
                raise self.fail("a lone surrogate escape (\\ud800-\\udfff) is not text; write the character itself",
                                where, node)
            return value
        if id(node) in self._open:
            raise self.fail("an alias refers to a node that contains it", where, node)
        self._open.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode) and node.tag == "tag:yaml.org,2002:seq":
                items = []
                for index, item in enumerate(node.value):
                    self.lines[(*where, str(index))] = item.start_mark.line + 1
                    items.append(self.value(item, (*where, str(index))))
                return items
            if isinstance(node, yaml.MappingNode) and node.tag == "tag:yaml.org,2002:map":
                return self._mapping(node, where)
            raise self.fail(f"unsupported YAML tag {node.tag!r}", where, node)
        finally:
            self._open.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, where: Where) -> dict[str, Any]:
        import yaml

        merged: dict[str, Any] = {}
        own: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                # Merge keys are expanded here (not by PyYAML) so that every merged node is counted.
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in reversed(sources):
                    value = self.value(source, where)
                    if not isinstance(value, dict):
                        raise self.fail(
                            "a '<<' merge key needs a mapping or a list of mappings", where, source
                        )
                    merged.update(value)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.fail("mapping keys must be plain names", where, key_node)
            key = str(key_node.value)
            if key in own:
                first = self.lines[(*where, key)]
                raise self.fail(f"duplicate key {key!r} (first on line {first})", (*where, key), key_node)
            self.lines[(*where, key)] = key_node.start_mark.line + 1
            own[key] = self.value(value_node, (*where, key))
        return {**merged, **own}


def parse_yaml(text: str, path: str) -> tuple[Any, dict[Where, int]]:
    """The document in ``text`` as plain values, and the line of every key path in it."""
    import yaml

    try:
        loader = _loader_class()(text, path)  # type: ignore[call-arg]  # the class above takes the path
    except yaml.reader.ReaderError as exc:
        where = text[: exc.position].count("\n") + 1
        message = f"the file holds a character YAML does not allow ({exc.reason})"
        raise InventoryError(message, path=path, line=where) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        tree = _Tree(loader, path)
        return tree.value(node, ()), tree.lines
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        line = mark.line + 1 if mark else None
        raise InventoryError(f"YAML syntax error: {message}", path=path, line=line) from None
    except yaml.YAMLError as exc:
        raise InventoryError(f"YAML error: {exc}", path=path) from None
    except RecursionError:
        raise InventoryError("the YAML document is nested too deeply", path=path) from None
    finally:
        loader.dispose()
