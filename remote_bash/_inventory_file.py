"""The inventory file's shape as pydantic models, and pydantic's errors as one-line messages.

:class:`HostSettings` is derived from the fields of :class:`~remote_bash.models.Host`'s pydantic model (all optional,
with their types, bounds and validators), so a field added to ``Host`` is settable in the file with
no second edit; it is what ``defaults``, a group's ``vars`` and a host entry share. A host entry
adds ``hostname``; :class:`GroupEntry` and :class:`InventoryFile` complete the file. Every model
forbids unknown keys. :func:`validate_file` checks a parsed document once against
:class:`InventoryFile` and turns the first problem into an
:class:`~remote_bash.errors.InventoryError` naming the file, line, field, what was expected and a
close match for a misspelt key; what is expected is read from the models' JSON schema.

This module never reads a file and never layers settings or follows references between hosts and
groups: that is the inventory's job.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import ErrorDetails

from remote_bash._plain import twin
from remote_bash._yaml_lines import Where, line_of
from remote_bash.errors import InventoryError
from remote_bash.models import Host

__all__ = ["GroupEntry", "HostEntry", "HostSettings", "InventoryFile", "suggest", "validate_file"]

NOT_SETTINGS = {
    "name": "a host's name is its key under hosts:",
    "groups": "list the host under groups.<group>.hosts instead",
    "hostname": "set it on each host",
}
"""Host fields that no layer of settings may set, and what to do instead."""

_SETTINGS = "a mapping of host settings"
# Numbers in string fields (``PORT: 8080`` in env, ``tier: 1.5`` in labels) mean the string;
# booleans stay errors, since yes/no/on/off are ambiguous.
_CONFIG = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


def _optional(name: str) -> tuple[Any, Any]:
    """Host's field ``name`` with its type, bounds and validators, but no default: unset means
    "inherit", which ``model_dump(exclude_unset=True)`` tells apart from any value."""
    field = twin(Host).model_fields[name]
    annotation = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    return annotation, Field(default=None, description=field.description)


if TYPE_CHECKING:

    class HostSettings(BaseModel):
        """Settings of a host that ``defaults``, a group's ``vars`` and a host entry share."""

    class HostEntry(HostSettings):
        """A host under ``hosts:``: its settings and the address to connect to."""

        hostname: str | None

else:
    HostSettings = create_model(
        "HostSettings",
        __config__=ConfigDict(**_CONFIG, json_schema_extra={"expected": _SETTINGS}),
        __doc__="Settings of a host that ``defaults``, a group's ``vars`` and a host entry share.",
        **{name: _optional(name) for name in twin(Host).model_fields if name not in NOT_SETTINGS},
    )
    HostEntry = create_model(
        "HostEntry",
        __base__=HostSettings,
        __doc__="A host under ``hosts:``: its settings and the address to connect to.",
        hostname=_optional("hostname"),
    )


class GroupEntry(BaseModel):
    """A group under ``groups:``."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, json_schema_extra={"expected": "a mapping with hosts, children, vars or forks"}
    )

    hosts: list[str] | None = None
    """Names of member hosts."""
    children: list[str] | None = None
    """Names of groups whose members are members of this one too."""
    vars: HostSettings | None = None
    """Settings every member inherits (below its own)."""
    forks: int | None = Field(default=None, ge=1)
    """How many of its hosts fleet commands work on at once."""


class InventoryFile(BaseModel):
    """A whole inventory file."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={"expected": "a mapping with 'hosts', 'groups' and 'defaults' sections"},
    )

    defaults: HostSettings | None = None
    """Settings every host inherits (below its groups' and its own)."""
    hosts: dict[str, HostEntry | None] = Field(
        json_schema_extra={"expected": "a mapping of host names to settings"}
    )
    """Hosts by name; an empty entry is a host whose hostname is its name."""
    groups: dict[str, GroupEntry | None] | None = Field(
        default=None, json_schema_extra={"expected": "a mapping of group names to groups"}
    )
    """Groups by name."""


def validate_file(
    doc: Any, path: str, lines: Mapping[Where, int], model: type[BaseModel] = InventoryFile
) -> Any:
    """``doc`` (parsed YAML) as a ``model`` (an :class:`InventoryFile`), or an :class:`InventoryError`."""
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        first, count = first_problem(exc, doc)
        where = yaml_path(first, doc)
        more = f" (and {count - 1} more problems)" if count > 1 else ""
        message = explain(first, model, where) + more
        raise InventoryError(message, path=path, line=line_of(lines, where), field=".".join(where) or None) from None


def first_problem(exc: ValidationError, doc: Any) -> tuple[ErrorDetails, int]:
    """The error to report, and how many places in ``doc`` have one."""
    errors = exc.errors()
    first = errors[0]
    if first["type"] == "missing":
        # A misspelt key explains the missing one beside it: "unknown field 'hostz'" says more.
        siblings = (e for e in errors if e["type"] == "extra_forbidden" and e["loc"][:-1] == first["loc"][:-1])
        first = next(siblings, first)
    if first["type"] != "value_error":
        # A value that fits no member of a union: the member whose own check spoke (a regex that
        # does not compile) says what is wrong, where the others only say they are not its shape.
        at = yaml_path(first, doc)
        spoken = [e for e in errors if e["type"] == "value_error" and yaml_path(e, doc)[:len(at)] == at]
        if spoken:
            first = max(spoken, key=lambda e: len(yaml_path(e, doc)))
    # A value that fits no member of a union is one problem, not one per member.
    return first, len({yaml_path(error, doc) for error in errors})


def yaml_path(error: ErrorDetails, doc: Any) -> Where:
    """The error's ``loc`` as a path in the document: without dict-key markers and union members'
    tags (``bool``, ``literal['ask']``), which name no key of the file."""
    path: list[str] = []
    value = doc
    for index, part in enumerate(error["loc"]):
        if isinstance(value, dict) and str(part) in value:
            value = value[str(part)]
        elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
            value = value[part]
        elif not (error["type"] == "missing" and index == len(error["loc"]) - 1):
            continue
        path.append(str(part))
    return tuple(path)


def explain(error: ErrorDetails, model: type[BaseModel], where: Where) -> str:
    """What a pydantic error at ``where`` means, for a person: what was expected and what was found."""
    kind, loc = error["type"], where
    if kind == "missing" and loc == ("hosts",):
        return "the file has no 'hosts' section"
    if kind == "missing":
        return "this field is required"
    if kind == "value_error":
        return str(error.get("ctx", {}).get("error", error["msg"]))
    given = error.get("input")
    if kind == "finite_number" or (isinstance(given, float) and not math.isfinite(given)):
        return f"expected a finite number, got {show(given)}"
    try:
        schema = model.model_json_schema()
    except Exception:  # a field type with no JSON schema: fall back to pydantic's own words
        return str(error["msg"])
    defs = schema.get("$defs", {})
    node = _at(schema, loc[:-1] if kind == "extra_forbidden" else loc, defs)
    if kind == "extra_forbidden":
        key = str(loc[-1])
        if key in NOT_SETTINGS and node.get("title") in ("HostSettings", "HostEntry"):
            return f"{key!r} cannot be set here: {NOT_SETTINGS[key]}"
        return unknown_key(key, list(node.get("properties", {})))
    return f"expected {_describe(node, defs)}, got {show(error.get('input'))}"


def _resolve(node: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    if "$ref" in node:
        node = defs[str(node["$ref"]).rsplit("/", 1)[-1]]
    options = [o for o in node.get("anyOf", ()) if o.get("type") != "null"]
    if len(options) == 1:
        return _resolve(options[0], defs)
    return node


def _at(schema: Mapping[str, Any], loc: Sequence[Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    """The JSON schema of the value at ``loc``."""
    node = _resolve(schema, defs)
    for part in loc:
        if str(part) in node.get("properties", {}):
            node = node["properties"][str(part)]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        elif isinstance(node.get("items"), dict):
            node = node["items"]
        else:
            break
        node = _resolve(node, defs)
    return node


def _describe(node: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    node = _resolve(node, defs)
    kind = node.get("type")
    if "expected" in node:
        return str(node["expected"])
    if "anyOf" in node:
        return " or ".join(_describe(option, defs) for option in node["anyOf"] if option.get("type") != "null")
    if "enum" in node:
        return "one of " + ", ".join(repr(v) for v in node["enum"])
    if "const" in node:
        return repr(node["const"])
    if kind == "boolean":
        return "true or false"
    if kind in ("integer", "number"):
        return _number(kind, node)
    if kind == "string":
        if node.get("format") == "path":
            return "a file path"
        return "a non-empty string" if node.get("minLength") else "a string"
    if kind == "array":
        return "a list of strings" if _resolve(node.get("items", {}), defs).get("type") == "string" else "a list"
    if kind == "object":
        values = node.get("additionalProperties")
        if isinstance(values, dict) and _resolve(values, defs).get("type") == "string":
            return "a mapping of names to strings"
        if node.get("properties"):
            return "a mapping with any of the keys " + ", ".join(node["properties"])
        return "a mapping"
    return "a value of another type"


def _number(kind: str, node: Mapping[str, Any]) -> str:
    noun = "an integer" if kind == "integer" else "a number"
    # A constrained type inside Annotated (models.Int) gives pydantic's own names: ge, le, gt.
    low, high = node.get("minimum", node.get("ge")), node.get("maximum", node.get("le"))
    above = node.get("exclusiveMinimum", node.get("gt"))
    if low is not None and high is not None:
        return f"{noun} from {low} to {high}"
    if kind == "integer" and low == 1:
        return "a positive integer"
    if low is not None:
        return f"{noun} of at least {low}"
    if above is not None:
        return f"{noun} greater than {above}"
    return f"{noun} of at most {high}" if high is not None else noun


def show(value: Any) -> str:
    """A value as an error message quotes it: short, and in YAML's words for null and booleans."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nothing (null)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def suggest(name: str, choices: Collection[str]) -> str:
    """``; did you mean 'x'?`` for the closest of ``choices``, or nothing."""
    close = [repr(c) for c in difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6)]
    if not close:
        return ""
    return "; did you mean " + (f"{', '.join(close[:-1])} or {close[-1]}" if len(close) > 1 else close[0]) + "?"


def unknown_key(key: str, allowed: Sequence[str]) -> str:
    """An unknown key, with the closest allowed one or the whole list."""
    return f"unknown field {key!r}" + (suggest(key, allowed) or f"; expected one of: {', '.join(allowed)}")
