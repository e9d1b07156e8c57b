"""Plain frozen data classes whose declarations pydantic validates on demand.

The package's data (hosts, limits, policies, command results, inventories, fleet results) are
frozen :mod:`dataclasses`, not pydantic models, so that a command line that only reads them back
(``remote-bash exec`` with its inventory from the cache) never imports pydantic, about a tenth of
a cold start. Their field types carry the bounds and validators as ``Annotated`` metadata of this
module (:class:`Bound`, :class:`Before`, :class:`After`); two readers use them:

* :func:`twin` builds, on first use, a pydantic model of the same name and
  fields for each class and validates through it: making one in code (``Host(name=..., ...)``),
  ``model_validate`` and the inventory file's reader. So the errors are pydantic's, as before;
* :func:`from_json` checks a JSON value written by ``model_dump(mode="json")`` against the same
  declarations (exact types, bounds, validators) and rebuilds the object without pydantic: the
  inventory cache's hit. Anything it does not recognise fails the check, never passes it.

The classes keep pydantic's reading methods (``model_dump``, ``model_copy``, ``model_validate``,
``model_fields``, ``model_json_schema``), so code written against the models is unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar, cast

if TYPE_CHECKING:
    from pydantic import BaseModel

_T = TypeVar("_T")

__all__ = ["After", "Before", "Bound", "Model", "NotValid", "Record", "factory", "from_json", "hints", "public_fields",
           "twin", "validated"]


class Bound:
    """Bounds of a number (``ge``, ``gt``, ``le``) or of a length (``min_length``)."""

    __slots__ = ("ge", "gt", "le", "min_length")

    def __init__(self, *, ge: float | None = None, gt: float | None = None, le: float | None = None,
                 min_length: int | None = None) -> None:
        self.ge, self.gt, self.le, self.min_length = ge, gt, le, min_length

    def given(self) -> dict[str, float]:
        """The bounds set, by pydantic's names for them."""
        return {name: value for name in self.__slots__ if (value := getattr(self, name)) is not None}


class Before:
    """A function run on the raw value before its type is checked (pydantic's ``BeforeValidator``)."""

    __slots__ = ("func",)

    def __init__(self, func: Callable[[Any], Any]) -> None:
        self.func = func


class After:
    """A function run on the value once its type is checked (pydantic's ``AfterValidator``)."""

    __slots__ = ("func",)

    def __init__(self, func: Callable[[Any], Any]) -> None:
        self.func = func


_MISSING: Any = object()


class _Field:
    __slots__ = ("default", "factory", "name")

    def __init__(self, name: str, default: Any, factory: Callable[[], Any] | None) -> None:
        self.name, self.default, self.factory = name, default, factory


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def factory(make: Callable[[], _T]) -> _T:
    """A field's default made anew for each instance (``deny: list[str] = factory(list)``)."""
    return cast(_T, _Factory(make))


_FIELDS: dict[type, tuple[_Field, ...]] = {}
_PUBLIC: dict[type, tuple[str, ...]] = {}


def _declare(cls: type) -> None:
    """Keep the fields ``cls`` and its bases declare (annotated class attributes, in order)."""
    found = {spec.name: spec for base in reversed(cls.__mro__[1:]) for spec in _FIELDS.get(base, ())}
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063 -- own only
        if str(annotation).startswith(("ClassVar", "typing.ClassVar")):
            continue
        default = cls.__dict__.get(name, _MISSING)
        if isinstance(default, _Factory):
            delattr(cls, name)
            found[name] = _Field(name, _MISSING, default.make)
        else:
            found[name] = _Field(name, default, None)
    _FIELDS[cls] = tuple(found.values())
    _PUBLIC[cls] = tuple(name for name in found if not name.startswith("_"))


@typing.dataclass_transform(field_specifiers=())
class Record:
    """A plain record of the package's own values: what ``@dataclass`` gives (an ``__init__`` by
    position or name, defaults, :func:`factory`, equality and a ``repr``) without the code it
    generates at import, which costs a cold start about 1.5 ms a class. Frozen unless declared
    with ``frozen=False`` (``class Scan(Record, frozen=False)``); equal when of the same class
    with equal fields."""

    _frozen: ClassVar[bool] = True

    def __init_subclass__(cls, *, frozen: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._frozen = frozen
        _declare(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = _FIELDS[type(self)]
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__} takes {len(fields)} values, {len(args)} given")
        values = dict(zip((f.name for f in fields), args, strict=False))
        for name in kwargs:
            if name in values:
                raise TypeError(f"{type(self).__name__} got {name!r} twice")
        values.update(kwargs)
        _fill(self, values)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        if not self._frozen:
            raise TypeError(f"unhashable type: {type(self).__name__!r}")
        return hash((self.__class__, *self.__dict__.values()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.__dict__.items())
        return f"{self.__class__.__name__}({shown})"

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if self._frozen:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        object.__delattr__(self, name)


class _TwinFields:
    """``Cls.model_fields``: the fields of the class's pydantic model (built on first use)."""

    def __get__(self, obj: object, owner: type[Model]) -> dict[str, Any]:
        return dict(twin(owner).model_fields)


class Model:
    """Base of the plain data classes: validated when made in code, frozen, dumped as pydantic dumps.

    A subclass declares its fields as annotated class attributes, a default as the value
    (:func:`factory` for a new one per instance); fields whose names start with ``_`` are private:
    never validated, dumped, compared or shown. Instances are equal when of the same class with
    equal public fields; setting or deleting a field raises ``dataclasses.FrozenInstanceError``.
    (Written out rather than made by ``dataclasses``, whose generated methods cost a cold start
    more than all of this module.)"""

    _config: ClassVar[dict[str, Any]] = {"extra": "forbid", "frozen": True, "allow_inf_nan": False}
    """pydantic's configuration of the class's model."""
    model_fields: ClassVar[dict[str, Any]] = _TwinFields()  # type: ignore[assignment]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _declare(cls)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        mine, theirs = self.__dict__, other.__dict__
        return all(mine[name] == theirs[name] for name in _PUBLIC[self.__class__])

    def __hash__(self) -> int:
        return hash((self.__class__, *(self.__dict__[name] for name in _PUBLIC[self.__class__])))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={self.__dict__[name]!r}" for name in _PUBLIC[self.__class__])
        return f"{self.__class__.__name__}({shown})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}: a {type(self).__name__} is frozen")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}: a {type(self).__name__} is frozen")

    def __init__(self, **data: Any) -> None:
        _fill(self, validated(type(self), data))

    @classmethod
    def _trusted(cls, **values: Any) -> typing.Self:
        """One made from values that are already of their fields' types, without validation
        (absent fields take their defaults)."""
        made = cls.__new__(cls)
        _fill(made, values)
        return made

    @classmethod
    def model_validate(cls, obj: Any) -> typing.Self:
        """``obj`` (a mapping, or an instance, returned as it is) validated as this class."""
        if isinstance(obj, cls):
            return obj
        return cls._trusted(**validated(cls, obj))

    @classmethod
    def model_validate_json(cls, text: str | bytes) -> typing.Self:
        """JSON text validated as this class (in pydantic's JSON mode)."""
        model = twin(cls).model_validate_json(text)
        return cast("typing.Self", _as_plain(model))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Callable[[Any], Any]) -> Any:
        """So a pydantic model may hold one of these as a field, as it held the models: an instance
        is taken as it is, anything else validated by the class's model; dumped as its fields."""
        from pydantic_core import core_schema

        def keep_or_make(value: Any, validate: Callable[[Any], Any]) -> Any:
            return value if isinstance(value, cls) else _as_plain(validate(value))

        def dump(value: Model, info: Any) -> dict[str, Any]:
            return value.model_dump(mode="json" if info.mode_is_json() else "python")

        return core_schema.no_info_wrap_validator_function(
            keep_or_make, handler(twin(cls)),
            serialization=core_schema.plain_serializer_function_ser_schema(dump, info_arg=True))

    @classmethod
    def model_json_schema(cls) -> dict[str, Any]:
        """The JSON schema of the class's pydantic model."""
        return twin(cls).model_json_schema()

    def model_dump(self, *, mode: Literal["python", "json"] = "python", exclude: set[str] | None = None,
                   exclude_none: bool = False) -> dict[str, Any]:
        """The public fields as a dict, nested objects as dicts; with ``mode="json"``, only JSON
        types (paths as strings)."""
        return {name: _dump(getattr(self, name), mode, exclude_none) for name in public_fields(type(self))
                if not (exclude and name in exclude) and not (exclude_none and getattr(self, name) is None)}

    def model_dump_json(self, *, indent: int | None = None) -> str:
        """``model_dump(mode="json")`` as JSON text."""
        import json

        return json.dumps(self.model_dump(mode="json"), indent=indent, ensure_ascii=False,
                          separators=None if indent is not None else (",", ":"))

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> typing.Self:
        """A copy, with ``update`` set as given (not validated, as pydantic's ``model_copy``)."""
        values = dict(self.__dict__)
        if deep:
            import copy

            values = {name: value if name.startswith("_") else copy.deepcopy(value) for name, value in values.items()}
        if update:
            unknown = set(update) - set(public_fields(type(self)))
            if unknown:
                raise ValueError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
            values.update(update)
        made = type(self).__new__(type(self))
        object.__setattr__(made, "__dict__", values)
        return made


def public_fields(cls: type) -> tuple[str, ...]:
    """The names of ``cls``'s public fields, in order."""
    return _PUBLIC[cls]


def _fill(obj: Model | Record, values: dict[str, Any]) -> None:
    cls = type(obj)
    given = dict(values)
    filled: dict[str, Any] = {}
    for field in _FIELDS[cls]:
        if field.name in given:
            filled[field.name] = given.pop(field.name)
        elif field.default is not _MISSING:
            filled[field.name] = field.default
        elif field.factory is not None:
            filled[field.name] = field.factory()
        else:
            raise TypeError(f"{cls.__name__}: no value for {field.name!r}")
    if given:
        raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(given))}")
    object.__setattr__(obj, "__dict__", filled)


def _dump(value: Any, mode: str, exclude_none: bool) -> Any:
    if isinstance(value, Model):
        return value.model_dump(mode=mode, exclude_none=exclude_none)  # type: ignore[arg-type]
    if isinstance(value, list | tuple):
        return [_dump(each, mode, exclude_none) for each in value]
    if isinstance(value, dict):
        return {key: _dump(each, mode, exclude_none) for key, each in value.items()}
    if mode == "json" and isinstance(value, Path):
        return str(value)
    return value


# -- checking a JSON value against the declarations -------------------------------------------------------


class NotValid(Exception):
    """A JSON value that does not match a class's declarations (the inventory cache then reads the
    file in full)."""


_HINTS: dict[type, dict[str, Any]] = {}


def hints(cls: type) -> dict[str, Any]:
    """The resolved field types of ``cls``'s fields, metadata included (its annotations evaluated
    in its module, as ``typing.get_type_hints`` would, for the fields only)."""
    found = _HINTS.get(cls)
    if found is None:
        names = {spec.name for spec in _FIELDS[cls]}
        found = {}
        for klass in reversed(cls.__mro__):
            module = vars(sys.modules[klass.__module__])
            for name, annotation in klass.__dict__.get("__annotations__", {}).items():  # noqa: RUF063 -- own only
                if name in names:
                    # The class's own annotation text, evaluated as typing evaluates it.
                    found[name] = (eval(annotation, module, dict(vars(klass)))  # noqa: S307
                                   if isinstance(annotation, str) else annotation)
        _HINTS[cls] = found
    return found


_Check = Callable[[Any], Any]
_CHECKS: dict[Any, _Check] = {}


def from_json(cls: type[Model], data: Any) -> Any:
    """``data``, a dump of ``cls`` in JSON mode, checked against its declarations and made into
    an instance; :class:`NotValid` names the first thing that does not match."""
    return _check_of(cls)(data)


def _check_of(tp: Any) -> _Check:
    """The function that checks a JSON value against the type ``tp`` and gives the value it stands
    for (made once per type: a cached inventory's hosts are checked at every start)."""
    try:
        return _CHECKS[tp]
    except (KeyError, TypeError):  # TypeError: an unhashable Annotated metadata; made anew
        pass
    check = _make_check(tp)
    with contextlib.suppress(TypeError):
        _CHECKS[tp] = check
    return check


def _make_check(tp: Any) -> _Check:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        base, *meta = typing.get_args(tp)
        for item in meta:
            if not isinstance(item, Before | Bound | After):
                raise NotValid(f"unknown metadata {item!r}")
        before = [item.func for item in meta if isinstance(item, Before)]
        after = [item for item in meta if isinstance(item, Bound | After)]
        inner = _check_of(base)

        def annotated(value: Any) -> Any:
            for func in before:
                value = _run(func, value)
            value = inner(value)
            for item in after:
                if isinstance(item, Bound):
                    _check_bounds(item, value)
                else:
                    value = _run(item.func, value)
            return value

        return annotated
    if isinstance(tp, type) and issubclass(tp, Model):
        return _model_check(tp)
    if origin in (typing.Union, types.UnionType):
        options = [_check_of(option) for option in typing.get_args(tp)]

        def union(value: Any) -> Any:
            for option in options:
                try:
                    return option(value)
                except NotValid:
                    continue
            raise NotValid(f"{value!r} matches none of {tp}")

        return union
    if origin is Literal:
        choices = [(choice, type(choice)) for choice in typing.get_args(tp)]

        def literal(value: Any) -> Any:
            if any(value == choice and type(value) is kind for choice, kind in choices):
                return value
            raise NotValid(f"{value!r} is not one of {[c for c, _ in choices]}")

        return literal
    if origin is list:
        item_check = _check_of(typing.get_args(tp)[0])

        def a_list(value: Any) -> Any:
            if type(value) is not list:
                raise NotValid("not a list")
            return [item_check(each) for each in value]

        return a_list
    if origin is dict:
        key, item = typing.get_args(tp)
        if key is not str:
            raise NotValid(f"cannot check keys of {key!r}")
        value_check = _check_of(item)

        def a_dict(value: Any) -> Any:
            if type(value) is not dict or not all(type(k) is str for k in value):
                raise NotValid("not a mapping of strings")
            return {k: value_check(each) for k, each in value.items()}

        return a_dict
    if tp is type(None) or tp is None:
        return _none
    if tp is Any:
        return _anything
    if tp is Path:
        return _path
    if tp is float:
        return _float
    if tp in (str, int, bool):
        return functools.partial(_exactly, tp)
    raise NotValid(f"cannot check a {tp!r}")


def _model_check(cls: type[Model]) -> _Check:
    names = public_fields(cls)
    wanted = set(names)
    checks: list[tuple[str, _Check]] = []

    def model(value: Any) -> Any:
        if not checks:  # made at the first use: a class may refer to one declared after it
            types_of = hints(cls)
            checks.extend((name, _check_of(types_of[name])) for name in names)
        if type(value) is not dict or value.keys() != wanted:
            raise NotValid(f"not the fields of {cls.__name__}")
        values = {}
        for name, check in checks:
            try:
                values[name] = check(value[name])
            except NotValid as exc:
                raise NotValid(f"{cls.__name__}.{name}: {exc}") from None
        return cls._trusted(**values)

    return model


def _none(value: Any) -> None:
    if value is not None:
        raise NotValid("not null")


def _anything(value: Any) -> Any:
    return value


def _path(value: Any) -> Path:
    if type(value) is not str:
        raise NotValid("not a path")
    return Path(value)


def _float(value: Any) -> float:
    if type(value) not in (int, float) or value != value or value in (float("inf"), float("-inf")):
        raise NotValid("not a finite number")
    return float(value)


def _exactly(kind: type, value: Any) -> Any:
    if type(value) is not kind:
        raise NotValid(f"not a {kind.__name__}")
    return value


def _run(func: Callable[[Any], Any], value: Any) -> Any:
    try:
        return func(value)
    except (ValueError, TypeError, AssertionError) as exc:
        raise NotValid(str(exc)) from None


def _check_bounds(bound: Bound, value: Any) -> None:
    if value is None:
        return
    if bound.min_length is not None and len(value) < bound.min_length:
        raise NotValid(f"shorter than {bound.min_length}")
    if bound.ge is not None and not value >= bound.ge:
        raise NotValid(f"below {bound.ge}")
    if bound.gt is not None and not value > bound.gt:
        raise NotValid(f"not above {bound.gt}")
    if bound.le is not None and not value <= bound.le:
        raise NotValid(f"above {bound.le}")


# -- pydantic's model of each class (pydantic is imported here only) ------------------------------------

_TWINS: dict[type, type[BaseModel]] = {}
_PLAIN: dict[type[BaseModel], type[Model]] = {}


def twin(cls: type[Model]) -> type[BaseModel]:
    """The pydantic model of the plain class ``cls``."""
    found = _TWINS.get(cls)
    if found is not None:
        return found
    from pydantic import ConfigDict, Field, create_model

    fields: dict[str, Any] = {}
    types_of = hints(cls)
    for field in _FIELDS[cls]:
        if field.name.startswith("_"):
            continue
        if field.default is not _MISSING:
            spec = Field(default=field.default)
        elif field.factory is not None:
            spec = Field(default_factory=field.factory)
        else:
            spec = Field()
        fields[field.name] = (_pydantic_type(types_of[field.name]), spec)
    model: type[BaseModel] = create_model(
        cls.__name__, __config__=cast(ConfigDict, dict(cls._config)), __doc__=cls.__doc__, __module__=cls.__module__,
        **fields)
    _TWINS[cls] = model
    _PLAIN[model] = cls
    return model


def _pydantic_type(tp: Any) -> Any:
    """``tp`` with plain classes replaced by their models and this package's metadata by pydantic's."""
    from pydantic import WrapValidator

    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        base, *meta = typing.get_args(tp)
        return Annotated[(_pydantic_type(base), *(_pydantic_meta(item) for item in meta))]
    if isinstance(tp, type) and issubclass(tp, Model):
        return Annotated[twin(tp), WrapValidator(_keep_instances_of(tp))]
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_pydantic_type(arg) for arg in typing.get_args(tp))]  # noqa: UP007
    if origin is list:
        return types.GenericAlias(list, (_pydantic_type(typing.get_args(tp)[0]),))
    if origin is dict:
        key, value = typing.get_args(tp)
        return types.GenericAlias(dict, (key, _pydantic_type(value)))
    return tp


def _keep_instances_of(cls: type[Model]) -> Callable[[Any, Callable[[Any], Any]], Any]:
    """An instance of ``cls`` is taken as it is (as pydantic takes a model's instance), anything
    else is validated by its model."""
    def keep(value: Any, handler: Callable[[Any], Any]) -> Any:
        return value if isinstance(value, cls) else handler(value)

    return keep


def _pydantic_meta(item: Any) -> Any:
    from pydantic import AfterValidator, BeforeValidator, Field

    if isinstance(item, Bound):
        return Field(**cast(Any, item.given()))
    if isinstance(item, Before):
        return BeforeValidator(item.func)
    if isinstance(item, After):
        return AfterValidator(item.func)
    return item


def validated(cls: type[Model], data: Any) -> dict[str, Any]:
    """The values of a ``cls`` made from ``data`` (a mapping; plain objects in it are taken as they
    are), validated by its model: pydantic's ``ValidationError`` when they do not fit."""
    model = twin(cls).model_validate(data)
    return {name: _as_plain(getattr(model, name)) for name in type(model).model_fields}


def _as_plain(value: Any) -> Any:
    plain = _PLAIN.get(type(value))
    if plain is not None:
        return plain._trusted(**{name: _as_plain(getattr(value, name)) for name in type(value).model_fields})
    if isinstance(value, list):
        return [_as_plain(each) for each in value]
    if isinstance(value, dict):
        return {key: _as_plain(each) for key, each in value.items()}
    return value
