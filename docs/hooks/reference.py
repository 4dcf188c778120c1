"""Reference pages generated from the code, so they cannot drift from it.

- configuration keys: walked from the config sections (``gateway._config.reader.section``
  classes), with type, default, bounds, environment variable and ``_file`` form; what each
  key means comes from ``config_keys.yml`` beside this file, which must name exactly the
  declared keys;
- operations and their members: ``gateway._invoke.api.operation_table()`` (botocore's models);
- metric families: collected from a Gateway and a Sidecar (with the OpenRTB proxy)
  built in this process, as ``GET /metrics`` would render them;
- command-line flags: the ``argparse`` parsers of each command, caught as they parse.

``docs/hooks/pages.py`` (the MkDocs hook) puts these into the pages at build time, where a
page says
``<!-- reference: KIND [ARGUMENT] -->``; ``tests/docs`` checks that nothing is left out.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import io
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, Literal, Union

import yaml

HERE = Path(__file__).resolve().parent
MEANINGS = HERE / "config_keys.yml"


# -- configuration ---------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """One configuration key, as the reference lists it."""

    table: str  # the TOML table it sits in: "" (top level), "routes.NAME.hedge", ...
    name: str  # "enabled"
    kind: str  # "number", "true or false", ...
    default: str  # as TOML writes it, or "required" / "none"
    bounds: str  # ">= 0, < 1"
    env: str  # SAGEMAKER_GATEWAY__... ("" where no variable reaches it)
    secret: bool  # also read from a file: <name>_file / <ENV>_FILE
    python_only: bool  # a constructor keyword only (no TOML form)

    @property
    def path(self) -> str:
        return f"{self.table}.{self.name}" if self.table else self.name


@dataclass(frozen=True)
class Table:
    """A table of the reference: its keys, from one section class (and its nested ones)."""

    title: str  # "[routes.NAME]"
    prefix: str  # key prefix: "routes.NAME"
    cls: type
    env: bool  # whether SAGEMAKER_GATEWAY__ variables reach it


def _tables() -> dict[str, list[Table]]:
    """The config files' tables, by file: "gateway" (Gateway and sidecar), "emulator"."""
    from gateway._config import options as _config
    from gateway.cache import CacheConfig
    from gateway.emulator import EmulatorConfig
    from gateway.routing import RouteConfig
    from gateway.sidecar import RtbConfig, SidecarConfig

    delegated: dict[str, tuple[str, type]] = {
        "routes": ("[routes.NAME]", RouteConfig),
        "global_gateway_routes": ("[global_gateway_routes.NAME]", RouteConfig),
        "defaults": ("[defaults]", RouteConfig),
        "cache": ("[cache]", CacheConfig),
        "sidecar": ("[sidecar]", SidecarConfig),
        "rtb": ("[rtb]", RtbConfig),
    }
    missing = set(_config._DELEGATED_SECTIONS) - delegated.keys()
    if missing:  # a new section of the config file: say where it belongs here
        raise LookupError(f"config sections with no reference table: {sorted(missing)}")
    named = {"routes", "global_gateway_routes"}
    gateway = [Table("top level", "", _config.GatewayConfig, True)]
    for key in _config._DELEGATED_SECTIONS:
        title, cls = delegated[key]
        gateway.append(Table(title, f"{key}.NAME" if key in named else key, cls, True))
    return {"gateway": gateway, "emulator": [Table("emulator", "", EmulatorConfig, False)]}


def _is_section(kind: Any) -> bool:
    from gateway._config import reader as _config_reader

    return isinstance(kind, type) and kind in _config_reader._KEYS


def _optional(kind: Any) -> Any:
    if typing.get_origin(kind) in (Union, types.UnionType):
        inner = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        if len(inner) == 1:
            return inner[0]
    return kind


def _kind_text(kind: Any) -> str:
    kind = _optional(kind)
    origin = typing.get_origin(kind)
    if origin is Literal:
        return " or ".join(_toml(arg) for arg in typing.get_args(kind))
    if origin is tuple:
        args = typing.get_args(kind)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"list of {_plural(args[0])}"
        return f"list of {len(args)} {_plural(args[0])}"
    if origin in (Mapping, dict) or kind is Mapping:
        args = typing.get_args(kind)
        return f"table of {_plural(args[1])}" if args else "table"
    return {
        bool: "true or false",
        int: "integer",
        float: "number",
        str: "string",
        bytes: "string",
    }.get(kind, getattr(kind, "__name__", str(kind)))


def _plural(kind: Any) -> str:
    text = _kind_text(kind)
    if _is_section(kind):
        return "tables"
    return {
        "true or false": "booleans",
        "integer": "integers",
        "number": "numbers",
        "string": "strings",
    }.get(text, text)


def _toml(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bytes):
        return f'"{value.decode()}"'
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if dataclasses.is_dataclass(value):
        fields = dataclasses.fields(value)
        return (
            "{ " + ", ".join(f"{f.name} = {_toml(getattr(value, f.name))}" for f in fields) + " }"
        )
    return str(value)


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not MISSING:
        return _toml(field.default)
    if field.default_factory is not MISSING:
        value = field.default_factory()
        if _is_section(type(value)):
            return "(table)"
        return _toml(value)
    return "required"


def _bounds(field: dataclasses.Field[Any]) -> str:
    rules = field.metadata.get("rules")
    if rules is None:
        return ""
    return ", ".join(f"{sign} {_number(limit)}" for sign, limit in rules.bounds)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _walk(cls: type, table: str, env: str | None, inherited_env: bool = True) -> Iterator[Key]:
    from gateway._config import options as _config
    from gateway._config.reader import SECRET_KEYS
    from gateway._config.reader import _hints as hints_of

    hints = hints_of(cls)
    for field in dataclasses.fields(cls):
        if not field.init or field.name == "sections":
            continue
        if field.name == "name" and (table.endswith(".NAME") or table == "defaults"):
            continue  # the table's own name (its key in the file)
        if table == "defaults" and field.name == "targets":  # a template has no targets
            continue
        kind = hints[field.name]
        inner = _optional(kind)
        rules = field.metadata.get("rules")
        variable = f"{env}__{field.name.upper()}" if env is not None else ""
        if cls is _config.GatewayConfig and field.name == "credentials":
            # Credentials in Python; in the file, the [credentials] table.
            yield from _walk(_config._CredentialsTable, "credentials", f"{env}__CREDENTIALS")
            continue
        if rules is not None and rules.inline:  # rtb's filter policy: its keys sit here
            yield from _walk(inner, table, env)
            continue
        where = f"{table}.{field.name}" if table else field.name
        if _is_section(inner):
            yield from _walk(inner, where, variable or None)
            continue
        origin = typing.get_origin(inner)
        args = typing.get_args(inner)
        python_only = not _is_toml_kind(inner)
        yield Key(
            table,
            field.name,
            _kind_text(kind),
            _default(field),
            _bounds(field),
            "" if python_only else variable,
            field.name in SECRET_KEYS,
            python_only,
        )
        if origin is tuple and args and _is_section(args[0]):  # a list of tables
            yield from _walk(args[0], f"{where}[]", None)
        elif origin in (Mapping, dict) and len(args) == 2 and _is_section(args[1]):
            yield from _walk(args[1], f"{where}.NAME", None)


def _is_toml_kind(kind: Any) -> bool:
    kind = _optional(kind)
    if kind in (bool, int, float, str, bytes) or _is_section(kind):
        return True
    origin = typing.get_origin(kind)
    if origin is Literal:
        return True
    if origin in (tuple, Mapping, dict):
        return all(
            arg is Ellipsis or arg is Any or _is_toml_kind(arg) for arg in typing.get_args(kind)
        )
    return kind is Mapping


@functools.cache
def config_keys(file: str = "gateway") -> list[Key]:
    """Every key of a config file ("gateway" or "emulator"), in declaration order."""
    keys: list[Key] = []
    for table in _tables()[file]:
        env = None
        if table.env:
            parts = [
                part.upper() if part != "NAME" else "<NAME>" for part in table.prefix.split(".")
            ]
            env = "__".join(["SAGEMAKER_GATEWAY", *[part for part in parts if part]])
        keys.extend(_walk(table.cls, table.prefix, env))
    return keys


def _sections_of(file: str) -> list[str]:
    return [table.prefix for table in _tables()[file]]


@functools.cache
def meanings() -> dict[str, dict[str, str]]:
    """``config_keys.yml``: per file, key path -> what it means (or {meaning, default})."""
    data: dict[str, dict[str, Any]] = yaml.safe_load(MEANINGS.read_text(encoding="utf-8"))
    return data


# Tables whose keys mean what those of another table mean.
ALIASES = {"global_gateway_routes.NAME.": "routes.NAME.", "defaults.": "routes.NAME."}


def meaning_entry(file: str, path: str) -> Any:
    """The ``config_keys.yml`` entry of a key (None when it has none)."""
    known = meanings().get(file, {})
    if path in known:
        return known[path]
    for prefix, alias in ALIASES.items():
        if file == "gateway" and path.startswith(prefix):
            return known.get(alias + path[len(prefix) :])
    return None


def _meaning(entry: Any) -> tuple[str, str | None]:
    if isinstance(entry, Mapping):
        return str(entry.get("meaning", "")), entry.get("default")
    return ("" if entry is None else str(entry)), None


def config_table(file: str, prefix: str) -> str:
    """The Markdown table of the keys of one table (``prefix``; "" for the top level)."""
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key in config_keys(file):
        if not _in_table(key, prefix, file):
            continue
        meaning, unset = _meaning(meaning_entry(file, key.path))
        default = f"`{key.default}`" if key.default not in {"required", "(table)"} else key.default
        if key.default == "none" and unset:
            default = unset
        extras = []
        if key.bounds:
            extras.append(key.bounds)
        if key.python_only:
            extras.append("Python only")
        kind = key.kind + (f" ({'; '.join(extras)})" if extras else "")
        name = key.path[len(prefix) + 1 :] if prefix else key.path
        env = []
        if key.env:
            env.append(f"`{key.env}`")
        if key.secret:
            env.append(f"`{key.name}_file`" + (f", `{key.env}_FILE`" if key.env else ""))
        where = f"<br>{' '.join(env)}" if env else ""
        rows.append(
            f'| <code id="{_anchor(file, key.path)}">{name}</code>{where} | {kind} | {default} '
            f"| {_cell(meaning)} |"
        )
    return "\n".join(rows)


def _in_table(key: Key, prefix: str, file: str) -> bool:
    if not prefix:  # the top level: keys of no delegated section
        others = [p for p in _sections_of(file) if p]
        return not any(key.path == p or key.path.startswith(p + ".") for p in others)
    return key.path.startswith(prefix + ".")


def _anchor(file: str, path: str) -> str:
    return f"{file}-" + path.replace(".", "-").replace("[]", "").lower()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# -- operations ------------------------------------------------------------------------


def operations_markdown() -> str:
    """Every operation of the three runtimes, with its request and response members."""
    from gateway._invoke.api import operation_table

    out: list[str] = []
    service = None
    for (service_name, name), operation in sorted(operation_table().items()):
        if service_name != service:
            service = service_name
            out.append(f"## `{service_name}`\n")
        out.append(f"### {name}\n")
        out.append(
            f"`POST {operation.uri}` (success: {operation.success_status}); "
            f"signed for `{operation.service.signing_name}` at "
            f"`{operation.service.endpoint_prefix}.REGION.amazonaws.com`.\n"
        )
        out.append("| member | keyword | where | type | required | bounds |")
        out.append("|---|---|---|---|---|---|")
        for member in operation.request:
            where = member.location
            if member.wire_header:
                where = f"header `{member.wire_header}`"
            bounds = ""
            if member.kind in {"string", "integer"} and (member.min_length or member.max_length):
                top = "" if member.max_length is None else str(member.max_length)
                bounds = f"{member.min_length}..{top}"
            out.append(
                f"| `{member.name}` | `{member.keyword}` | {where} | {member.kind} | "
                f"{'yes' if member.required else 'no'} | {bounds} |"
            )
        if operation.response:
            fields = ", ".join(f"`{member.name}`" for member in operation.response)
            out.append(f"\nResponse members: {fields}.")
        if operation.errors:
            out.append(f"\nErrors: {', '.join(f'`{code}`' for code in operation.errors)}.")
        out.append("")
    return "\n".join(out)


def operation_names() -> list[tuple[str, str]]:
    from gateway._invoke.api import operation_table

    return sorted(operation_table())


# -- metrics ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    name: str
    kind: str
    help: str
    labels: tuple[str, ...]
    source: str  # "gateway", "sidecar", "rtb"


@functools.cache
def metric_families() -> list[Family]:
    """The families ``GET /metrics`` of a sidecar with routes, a cache and [rtb] serves.

    Collected from objects built in this process: a Gateway with a routed route (an
    endpoint and an inference router target) and a prediction cache, and a Sidecar with
    the OpenRTB proxy; nothing is called or listened on.
    """

    families: dict[str, Family] = {}
    for family in (f for registry in _collectors() for f in registry.collect()):
        declared = getattr(family, "_labelnames", ())
        labels = sorted(
            {*declared, *(label for sample in family.samples for label in sample.labels)}
        )
        labels = [label for label in labels if label not in {"le", "quantile"}]
        name = family.name
        if family.type == "counter":
            name += "_total"
        if not name.startswith("sagemaker_gateway_"):
            source = "standard"
        elif name.startswith("sagemaker_gateway_rtb_"):
            source = "rtb"
        elif name.startswith("sagemaker_gateway_sidecar_"):
            source = "sidecar"
        else:
            source = "gateway"
        families[name] = Family(name, family.type, family.documentation, tuple(labels), source)
    return sorted(families.values(), key=lambda f: f.name)


def _collectors() -> list[Any]:
    from gateway import Gateway
    from gateway.sidecar import RtbConfig, RtbProxy, SidecarConfig
    from gateway.sidecar._app import SidecarApp

    gateway = Gateway(
        region="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        credentials=("AKIDREFERENCE", "reference"),
        routes={
            "bid-filter": {
                "targets": [
                    {"endpoint": "bid-filter"},
                    {"inference_router": "bid-router", "routing_target": "bid-filter"},
                ]
            }
        },
        cache={"ttl_s": 60},
    )
    rtb = RtbProxy(gateway, RtbConfig(bidders=("http://127.0.0.1:9/bid",)))
    app = SidecarApp(gateway, SidecarConfig(), None, rtb)
    return [app.registry]


def metrics_markdown(source: str) -> str:
    rows = ["| family | type | labels | help |", "|---|---|---|---|"]
    for family in metric_families():
        if family.source != source:
            continue
        labels = ", ".join(f"`{label}`" for label in family.labels)
        rows.append(
            f'| <code id="{family.name}">{family.name}</code> | {family.kind} | {labels} '
            f"| {_cell(family.help)} |"
        )
    return "\n".join(rows)


# -- command line ----------------------------------------------------------------------

# Each command and the function that parses its flags.
COMMANDS: dict[str, tuple[str, str]] = {
    "python -m gateway emulator": ("gateway.emulator", "main"),
    "python -m gateway sidecar": ("gateway.sidecar", "main"),
    "python -m gateway demo": ("gateway.tools.demo", "main"),
    "python -m gateway loadtest": ("gateway.tools.loadtest", "main"),
    "python -m gateway.rtb.train": ("gateway.rtb.train", "main"),
    "python -m gateway.rtb.report": ("gateway.rtb.report", "main"),
}


class _Caught(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


@functools.cache
def parser_of(module: str, function: str = "main") -> argparse.ArgumentParser:
    """The parser a command's ``main`` builds, caught when it parses (nothing else runs)."""
    entry: Callable[[list[str]], Any] = getattr(importlib.import_module(module), function)
    original = argparse.ArgumentParser.parse_known_args

    def catch(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _Caught(self)

    argparse.ArgumentParser.parse_known_args = catch  # type: ignore[method-assign]
    try:
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            entry([])
    except _Caught as caught:
        return caught.parser
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]
    raise LookupError(f"{module}.{function} parsed no arguments")


def cli_flags() -> dict[str, list[str]]:
    """Each command's option strings."""
    return {
        command: [
            option for action in parser_of(*target)._actions for option in action.option_strings
        ]
        for command, target in COMMANDS.items()
    }


def cli_markdown() -> str:
    out: list[str] = []
    for command, target in COMMANDS.items():
        parser = parser_of(*target)
        out.append(f"## `{command}`\n")
        if parser.description:
            out.append(_cell(parser.description.split("\n\n")[0]) + "\n")
        out.append("| flag | default | help |")
        out.append("|---|---|---|")
        for action in parser._actions:
            if not action.option_strings:
                continue
            flags = ", ".join(f"`{option}`" for option in action.option_strings)
            if action.nargs == 0:
                shown = ""
            else:
                metavar = action.metavar or action.dest.upper()
                flags = ", ".join(f"`{option} {metavar}`" for option in action.option_strings)
            default = action.default
            if default in (None, False, argparse.SUPPRESS) or action.nargs == 0:
                shown = ""
            else:
                shown = f"`{default}`" if not isinstance(default, list) or default else ""
            help_text = (action.help or "").replace("%(default)s", str(default))
            if action.choices:
                help_text += f" (one of: {', '.join(map(str, action.choices))})"
            anchor = (
                command.split()[-1].replace(".", "-") + "-" + action.option_strings[-1].lstrip("-")
            )
            rows = f'| <span id="{anchor}"></span>{flags} | {shown} | {_cell(help_text)} |'
            out.append(rows)
        if parser.epilog:
            out.append("\n" + _cell(parser.epilog))
        out.append("")
    return "\n".join(out)
