"""One reader for every config section of sagemaker-gateway, and its one error class.

A section is a frozen dataclass made with :func:`section`; its fields are the
keys, and ``setting(...)`` adds bounds, a conversion or a check. It is the
runtime type too: every instance is checked when built, by :func:`read` from
a TOML table or by a caller directly, then its own ``__post_init__`` checks
what joins fields. Every error is a :class:`ConfigError` naming the key::

    config error at routes.bid.hedge.max_extra_load: must be > 0 and < 1, got 2.0

``routing`` and ``cache`` use it without importing ``gateway``, whose
``gateway.errors`` re-exports both error classes.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import tomllib
import types
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, dataclass_transform, get_args, get_origin
from typing import get_type_hints as _hints
from urllib.parse import urlsplit

T = TypeVar("T")


class GatewayError(Exception):
    """Root of every error raised by the gateway."""

    retryable: bool = False
    # Requests the call sent before it failed (retries and hedges included).
    attempts: int = 1


class ConfigError(GatewayError, ValueError):
    """A configuration value is missing or wrong; the message names the key."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    @classmethod
    def at(cls, key: str, problem: str) -> ConfigError:
        return cls(f"config error at {key}: {problem}", key)


@dataclasses.dataclass(frozen=True, slots=True)
class _Rules:
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    # before(raw, key) runs first (a bare string -> a table); check(value) gets
    # the typed value and raises ValueError saying what is wrong.
    before: Callable[[Any, str], Any] | None = None
    check: Callable[[Any], object] | None = None
    inline: bool = False  # the nested section's keys sit in this table


def setting(
    *,
    default: Any = dataclasses.MISSING,
    factory: Any = dataclasses.MISSING,
    repr: bool = True,
    **rules: Any,
) -> Any:
    """A field with rules: ``ge gt le lt`` bounds, ``before``, ``check``, ``inline``."""
    field: Any = dataclasses.field
    metadata = {"rules": _Rules(**rules)}
    return field(default=default, default_factory=factory, repr=repr, metadata=metadata)


_NO_RULES = _Rules()
# Each section's default key (names its fields when it is built directly).
_KEYS: dict[type, str | Callable[[Any], str]] = {}
_SCHEMAS: dict[type, tuple[tuple[str, Any, _Rules, bool], ...]] = {}
# (section class, key) of the table being read, so errors name its full key.
_WHERE: ContextVar[tuple[type, str] | None] = ContextVar("config_where", default=None)


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, setting))
def section(key: str | Callable[[Any], str] = "") -> Callable[[type[T]], type[T]]:
    """Make a class a config section (see the module's docstring)."""

    def build(cls: type[T]) -> type[T]:
        own = cls.__dict__.get("__post_init__")

        def __post_init__(self: Any) -> None:
            _check(self)
            if own is not None:
                own(self)

        setattr(cls, "__post_init__", __post_init__)  # noqa: B010 - mypy: a new attribute
        made = dataclasses.dataclass(frozen=True, slots=True)(cls)
        _KEYS[made] = key
        return made

    return build


def _schema(cls: type) -> tuple[tuple[str, Any, _Rules, bool], ...]:
    schema = _SCHEMAS.get(cls)
    if schema is None:
        hints = _hints(cls)
        schema = _SCHEMAS[cls] = tuple(
            (
                item.name,
                hints[item.name],
                item.metadata.get("rules", _NO_RULES),
                item.default is item.default_factory is dataclasses.MISSING,
            )
            for item in dataclasses.fields(cls)
            if item.init
        )
    return schema


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def read(cls: type[T], table: object, where: str, **fixed: Any) -> T:
    """Section ``cls`` from the table at key ``where``; ``fixed``: values from elsewhere."""
    if not isinstance(table, Mapping):
        raise ConfigError.at(where, f"must be a table, got {table!r}")
    schema = _schema(cls)
    inline = {name: _schema(kind) for name, kind, rules, _ in schema if rules.inline}
    allowed = {name for name, *_ in schema if name not in inline and name not in fixed}
    allowed.update(sub[0] for subs in inline.values() for sub in subs)
    for key in table:
        if key not in allowed:
            problem = f"unknown key (allowed: {', '.join(sorted(allowed))})"
            raise ConfigError.at(_join(where, str(key)), problem)
    values = dict(fixed)
    for name, kind, _, required in schema:
        if name in inline:
            names = {sub[0] for sub in inline[name]}
            values[name] = read(kind, {k: v for k, v in table.items() if k in names}, where)
        elif name in table:
            # TOML has no null: None in a table is a mistake, not "unset".
            if table[name] is None:
                raise ConfigError.at(_join(where, name), "has no value (None)")
            values[name] = table[name]
        elif required and name not in fixed:
            raise ConfigError.at(_join(where, name), "required")
    token = _WHERE.set((cls, where))
    try:
        return cls(**values)
    finally:
        _WHERE.reset(token)


def _key_of(section: object, name: str) -> str:
    current = _WHERE.get()
    if current is not None and current[0] is type(section):
        return _join(current[1], name)
    key = _KEYS.get(type(section), "")
    return _join(key if isinstance(key, str) else key(section), name)


def fail(section: object, name: str, problem: str) -> ConfigError:
    """The error for field ``name`` of ``section``, for the rules that join fields."""
    return ConfigError.at(_key_of(section, name), problem)


def _check(section: object) -> None:
    # Validates, and normalises (1 -> 1.0, list -> tuple, str -> bytes), every field.
    for name, kind, rules, _ in _schema(type(section)):
        key = _key_of(section, name)
        value = getattr(section, name)
        if rules.before is not None:
            value = rules.before(value, key)
        value = _convert(kind, value, key, rules)
        if rules.check is not None and value is not None:
            try:
                rules.check(value)
            except ValueError as exc:
                if isinstance(exc, ConfigError) and exc.key is not None:
                    raise
                raise ConfigError.at(key, str(exc)) from None
        object.__setattr__(section, name, value)


def _convert(kind: Any, value: Any, key: str, rules: _Rules) -> Any:
    origin = get_origin(kind)
    if origin is Union or origin is types.UnionType:  # only "X | None"
        inner = next(arg for arg in get_args(kind) if arg is not type(None))
        return None if value is None else _convert(inner, value, key, rules)
    if origin is Literal and value not in get_args(kind):
        choices = ", ".join(map(str, get_args(kind)))
        raise ConfigError.at(key, f"must be one of {choices}, got {value!r}")
    if kind is int or kind is float:
        return _number(kind, value, key, rules)
    if kind is bool:
        return _typed(value, bool, key, "true or false")
    if kind is str:
        return _typed(value, str, key, "a non-empty string", empty=False)
    if kind is bytes:
        return value.encode() if isinstance(value, str) else _typed(value, bytes, key, "a string")
    if origin is tuple:
        return _tuple(get_args(kind), value, key, rules)
    if origin is Mapping:
        return _mapping(get_args(kind)[1], value, key, rules)
    if kind in _KEYS and not isinstance(value, kind):
        return read(kind, value, key)
    return value if kind is Any or origin is Literal else _typed(value, kind, key, kind.__name__)


def _typed(value: Any, kind: Any, key: str, text: str, empty: bool = True) -> Any:
    if not isinstance(value, kind) or (not empty and not value):
        raise ConfigError.at(key, f"must be {text}, got {value!r}")
    return value


def _mapping(item: Any, value: Any, key: str, rules: _Rules) -> dict[str, Any]:
    # Sections with a `name` field take it from their key ([endpoints.<name>]).
    named = item in _KEYS and any(field[0] == "name" for field in _schema(item))
    return {
        str(k): read(item, v, _join(key, str(k)), name=str(k))
        if named and not isinstance(v, item)
        else _convert(item, v, _join(key, str(k)), rules)
        for k, v in _typed(value, Mapping, key, "a table").items()
    }


def _tuple(items: tuple[Any, ...], value: Any, key: str, rules: _Rules) -> tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise ConfigError.at(key, f"must be a list, got {value!r}")
    if len(items) == 2 and items[1] is Ellipsis:
        items = (items[0],) * len(value)
    elif len(items) != len(value):
        raise ConfigError.at(key, f"must be a list of {len(items)} items, got {value!r}")
    return tuple(
        _convert(kind, item, f"{key}[{index}]", rules)
        for index, (kind, item) in enumerate(zip(items, value, strict=True))
    )


def _number(kind: type, value: Any, key: str, rules: _Rules) -> Any:
    # bool is an int subclass: "timeout_ms = true" is a mistake, not 1 ms.
    if isinstance(value, bool) or not isinstance(value, int if kind is int else int | float):
        text = "an integer" if kind is int else "a number"
        raise ConfigError.at(key, f"must be {text}, got {value!r}")
    if kind is float:
        # TOML has nan and inf; neither is a usable timeout, rate or size.
        if not math.isfinite(value):
            raise ConfigError.at(key, f"must be a finite number, got {value!r}")
        value = float(value)
    bounds = ((">=", rules.ge), (">", rules.gt), ("<=", rules.le), ("<", rules.lt))
    limits = [(sign, bound) for sign, bound in bounds if bound is not None]
    if any(not _OPS[sign](value, bound) for sign, bound in limits):
        if rules.ge is not None and rules.le is not None:
            text = f"between {_text(rules.ge)} and {_text(rules.le)}"
        else:
            text = " and ".join(f"{sign} {_text(bound)}" for sign, bound in limits)
        raise ConfigError.at(key, f"must be {text}, got {value!r}")
    return value


_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


def _text(number: float) -> str:
    return str(int(number)) if number == int(number) else repr(number)


def to_table(section: object, *, keyed: bool = False) -> dict[str, Any]:
    """``section`` as the table :func:`read` builds it from; ``keyed``: its name is its key."""
    table: dict[str, Any] = {}
    for name, _, rules, _ in _schema(type(section)):
        value = getattr(section, name)
        if rules.inline:
            table.update(to_table(value))
        # TOML has no null: an unset value is left out, as is a name that is the key.
        elif value is not None and not (keyed and name == "name"):
            table[name] = _plain(value)
    return table


def _plain(value: Any, keyed: bool = False) -> Any:
    if type(value) in _KEYS:
        return to_table(value, keyed=keyed)
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _plain(item, keyed=True) for key, item in value.items()}
    return value


def http_url(value: str) -> None:
    """A ``check``: an http(s) URL with a host (and a valid port, if any)."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http(s):// URL with a host, got {value!r}")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ValueError(f"has a bad port: {value!r}") from None


def load_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file as a mapping; an unreadable or malformed file is a ConfigError."""
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"config error: cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config error: config file {path} is not valid TOML: {exc}") from None
