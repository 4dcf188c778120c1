"""One reader for every config section of sagemaker-gateway.

A section is a frozen dataclass made with :func:`section`; its fields are the
keys, and ``setting(...)`` adds bounds, a conversion or a check. It is the
runtime type too: every instance is checked when built, by :func:`read` from
a TOML table or by a caller directly, then its own ``__post_init__`` checks
what joins fields. Every error is a :class:`ConfigError` naming the key::

    config error at routes.bid.hedge.max_extra_load: must be > 0 and < 1, got 2.0

``gateway.routing`` and ``gateway.cache`` use it, and ``gateway.errors`` for
its error class; neither imports anything else of ``gateway``.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import tomllib
import types
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import MISSING
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, dataclass_transform, get_args, get_origin
from typing import get_type_hints as _hints
from urllib.parse import urlsplit

from gateway.errors import ConfigError

T = TypeVar("T")

# Keys whose values are secrets (at any depth: "sidecar.auth.credentials.AKID"
# is one): an error about one never shows its value.
SECRET_KEYS = frozenset(
    {"token", "credentials", "secret_access_key", "session_token", "redis_url", "password"}
)
# Integers must fit a signed 64-bit value: larger ones are no usable count or
# size, and break what serialises them (the JSON log formatter, metrics).
_INT_LIMIT = 2**63 - 1
# How much of a bad value an error shows.
_SHOWN_CHARS = 60


@dataclasses.dataclass(frozen=True, slots=True)
class _Rules:
    # Each number (each item, in a list or table) must be within: ((">=", 0), ...).
    bounds: tuple[tuple[str, float], ...] = ()
    # before(raw, key) runs first (a bare string -> a table); check(value) gets
    # the typed value and raises ValueError saying what is wrong.
    before: Callable[[Any, str], Any] = lambda value, key: value
    check: Callable[[Any], object] | None = None
    inline: bool = False  # the nested section's keys sit in this table


_SIGNS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


def setting(
    *, default: Any = MISSING, factory: Any = MISSING, repr: bool = True, **rules: Any
) -> Any:
    """A field with rules: ``ge gt le lt`` bounds, ``before``, ``check``, ``inline``."""
    bounds = tuple((sign, rules.pop(name)) for name, sign in _SIGNS.items() if name in rules)
    field: Any = dataclasses.field
    metadata = {"rules": _Rules(bounds, **rules)}
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
        own = cls.__dict__.get("__post_init__", lambda self: None)

        def __post_init__(self: Any) -> None:
            _check(self)
            own(self)

        setattr(cls, "__post_init__", __post_init__)  # noqa: B010 - mypy: a new attribute
        made = dataclasses.dataclass(frozen=True, slots=True)(cls)
        _KEYS[made] = key
        return made

    return build


def _schema(cls: type) -> tuple[tuple[str, Any, _Rules, bool], ...]:
    """(name, type, rules, required) of each field of section ``cls``, worked out once."""
    if cls in _SCHEMAS:
        return _SCHEMAS[cls]
    hints = _hints(cls)
    _SCHEMAS[cls] = schema = tuple(
        (f.name, hints[f.name], f.metadata.get("rules", _NO_RULES), f.default is f.default_factory)
        for f in dataclasses.fields(cls)
        if f.init
    )
    return schema


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def read(cls: type[T], table: object, where: str, **fixed: Any) -> T:
    """Section ``cls`` from the table at key ``where``; ``fixed``: values from elsewhere."""
    if not isinstance(table, Mapping):
        raise ConfigError.at(where, f"must be a table{_got(where, table)}")
    schema = _schema(cls)
    # An inline section's keys sit in this table (rtb's filter policy).
    inline = {
        name: {sub[0] for sub in _schema(kind)} for name, kind, rules, _ in schema if rules.inline
    }
    allowed = {name for name, *_ in schema if name not in inline and name not in fixed}
    allowed = allowed.union(*inline.values())
    for key in table:
        if key not in allowed:
            problem = f"unknown key (allowed: {', '.join(sorted(allowed))})"
            raise ConfigError.at(_join(where, str(key)), problem)
    values = dict(fixed)
    for name, kind, _, required in schema:
        if name in inline:
            values[name] = read(kind, {k: v for k, v in table.items() if k in inline[name]}, where)
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
        value = _convert(kind, rules.before(getattr(section, name), key), key, rules)
        if rules.check is not None and value is not None:
            try:
                rules.check(value)
            except ValueError as exc:
                raise ConfigError.at(key, str(exc)) from None
        object.__setattr__(section, name, value)


# What a value of each type must be (for the error), and the types TOML gives for it.
_MUST_BE: dict[Any, str] = {int: "an integer", float: "a number", bool: "true or false"}
_MUST_BE |= {str: "a non-empty string", bytes: "a string", tuple: "a list", Mapping: "a table"}
_TAKES: dict[Any, Any] = {float: int | float, bytes: bytes | str, tuple: list | tuple}


def _is_secret(key: str) -> bool:
    return any(part.partition("[")[0] in SECRET_KEYS for part in key.split("."))


def _got(key: str, value: Any) -> str:
    """What an error says of the bad ``value``: never a secret, never more than a line."""
    if _is_secret(key):
        return " (the value is a secret: not shown)"
    try:
        shown = repr(value)
    except ValueError:  # an integer past Python's 4,300-digit limit for text
        return f", got an integer of {value.bit_length()} bits"
    if len(shown) > _SHOWN_CHARS:
        shown = f"{shown[:_SHOWN_CHARS]}... ({len(shown)} characters)"
    return f", got {shown}"


def _convert(kind: Any, value: Any, key: str, rules: _Rules, name: str = "") -> Any:
    origin = get_origin(kind)
    if origin is Union or origin is types.UnionType:  # only "X | None"
        inner = next(arg for arg in get_args(kind) if arg is not type(None))
        return None if value is None else _convert(inner, value, key, rules, name)
    if origin is Literal and value not in get_args(kind):
        choices = ", ".join(map(str, get_args(kind)))
        raise ConfigError.at(key, f"must be one of {choices}{_got(key, value)}")
    if kind in _KEYS:
        # Sections with a `name` field take it from their key ([endpoints.<name>]).
        named = {"name": name} if name and any(f[0] == "name" for f in _schema(kind)) else {}
        return value if isinstance(value, kind) else read(kind, value, key, **named)
    base = origin or kind
    if base is Any or base is Literal:
        return value
    # bool is an int subclass: "timeout_ms = true" is a mistake, not 1 ms.
    wrong = isinstance(value, bool) and base is not bool
    if wrong or not isinstance(value, _TAKES.get(base, base)) or (base is str and not value):
        raise ConfigError.at(key, f"must be {_MUST_BE.get(base, base.__name__)}{_got(key, value)}")
    if base is tuple:
        items = get_args(kind)
        if items[-1] is Ellipsis:
            items = items[:1] * len(value)
        elif len(items) != len(value):
            raise ConfigError.at(key, f"must be a list of {len(items)} items{_got(key, value)}")
        pairs = enumerate(zip(items, value, strict=True))
        return tuple(_convert(sub, item, f"{key}[{i}]", rules) for i, (sub, item) in pairs)
    if base is Mapping:
        item = get_args(kind)[1]
        return {str(k): _convert(item, v, f"{key}.{k}", rules, str(k)) for k, v in value.items()}
    if base is int and not -_INT_LIMIT <= value <= _INT_LIMIT:
        raise ConfigError.at(key, f"must be at most 2**63-1 in size{_got(key, value)}")
    if base is float:
        # TOML has nan and inf; neither is a usable timeout, rate or size.
        if not math.isfinite(value):
            raise ConfigError.at(key, f"must be a finite number{_got(key, value)}")
        value = float(value)
    if not all(_OPS[sign](value, bound) for sign, bound in rules.bounds):
        signs, limits = zip(*rules.bounds, strict=True)
        text = " and ".join(map("{} {}".format, signs, limits))
        if signs == (">=", "<="):
            text = "between {} and {}".format(*limits)
        raise ConfigError.at(key, f"must be {text}{_got(key, value)}")
    return value.encode() if base is bytes and isinstance(value, str) else value


def to_table(value: Any, *, keyed: bool = False) -> Any:
    """A section as the table :func:`read` builds it from; ``keyed``: its name is its key."""
    if isinstance(value, tuple):
        return [to_table(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): to_table(item, keyed=True) for key, item in value.items()}
    if type(value) not in _KEYS:
        return value
    table: dict[str, Any] = {}
    for name, _, rules, _ in _schema(type(value)):
        item = getattr(value, name)
        if rules.inline:
            table.update(to_table(item))
        # TOML has no null: an unset value is left out, as is a name that is the key.
        elif item is not None and not (keyed and name == "name"):
            table[name] = to_table(item)
    return table


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
    except ValueError as exc:  # TOMLDecodeError, or an integer too long to convert
        raise ConfigError(f"config error: config file {path} is not valid TOML: {exc}") from None
