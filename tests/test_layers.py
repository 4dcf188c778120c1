"""The import graph keeps its layers: each layer imports only the ones below it.

Read from the sources (no imports run), so a forbidden import fails here even
on a code path no other test reaches.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

import pytest

from tests._source import parse_file

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway",)
# What the independent layers (routing, cache) may import of gateway: the error tree and
# the config reader, which import nothing else of gateway themselves.
_FOUNDATION = ("gateway.errors", "gateway._config.reader")

# Folders under gateway/ that hold something other than the embedded client.
_NOT_CLIENT = (
    "gateway.sidecar",
    "gateway.emulator",
    "gateway.tools",
    "gateway.rtb",
    "gateway._server",
)

# The server's connection (http.py) composes a reader and a writer that know nothing of each other.
_SERVER_HALVES = "the server's reader and writer import neither each other nor the connection"


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    if node.level:
        base = module.split(".")
        base = base if is_package else base[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join([*base, node.module] if node.module else base)
    else:
        prefix = node.module or ""
    # `from gateway import errors` imports the submodule gateway.errors.
    return [f"{prefix}.{alias.name}" for alias in node.names]


def imports_of(path: Path) -> set[str]:
    module = _module_of(path)
    found: set[str] = set()
    for node in ast.walk(parse_file(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.update(_resolve(module, path.name == "__init__.py", node))
    return {name for name in found if name.split(".")[0] in PACKAGES}


def modules() -> Iterator[tuple[str, set[str]]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield _module_of(path), imports_of(path)


def _within(name: str, *prefixes: str) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def _is_client(module: str) -> bool:
    return _within(module, "gateway") and not _within(module, *_NOT_CLIENT)


def violations(rule: str) -> list[str]:
    return [
        f"{module} imports {name}"
        for module, imported in modules()
        for name in sorted(imported)
        if _breaks(rule, module, name)
    ]


def _breaks(rule: str, module: str, name: str) -> bool:
    if rule == "routing stands alone":
        allowed: tuple[str, ...] = ("gateway.routing", *_FOUNDATION)
        return _within(module, "gateway.routing") and not _within(name, *allowed)
    if rule == "cache stands alone":
        allowed = ("gateway.cache", *_FOUNDATION)
        return _within(module, "gateway.cache") and not _within(name, *allowed)
    if rule == "the foundation imports nothing above it":
        below = {"gateway.errors": (), "gateway._config.reader": ("gateway.errors",)}
        return module in below and not _within(name, *below[module])
    if rule == "the client never imports the server kit or the programs":
        return _is_client(module) and _within(name, *_NOT_CLIENT[:3], "gateway._server")
    if rule == "the HTTP layer knows no SageMaker and no client":
        allowed = (
            *_FOUNDATION,
            "gateway._host.version",
            "gateway._http",
            "gateway._aws",
        )
        return _within(module, "gateway._http") and not _within(name, *allowed)
    if rule == "the AWS protocols sit at the bottom":
        allowed = ("gateway.errors", "gateway._host.version", "gateway._aws")
        return _within(module, "gateway._aws") and not _within(name, *allowed)
    if rule == "the server kit never imports the client":
        client = (
            "gateway._client",
            "gateway._invoke.call",
            "gateway._http",
            "gateway._invoke.cached",
        )
        return _within(module, "gateway._server") and _within(name, *client)
    if rule == _SERVER_HALVES:
        reader, writer, connection = (
            "gateway._server.parsing",
            "gateway._server.writing",
            "gateway._server.http",
        )
        forbidden = {reader: (writer, connection), writer: (reader, connection)}
        return module in forbidden and _within(name, *forbidden[module])
    if rule == "observing imports no part of the call pipeline but the operation table":
        pipeline = ("gateway._client", "gateway._invoke", "gateway.compat")
        return (
            _within(module, "gateway._observe")
            and _within(name, *pipeline)
            and not _within(name, "gateway._invoke.api")
        )
    raise AssertionError(rule)


RULES = [
    "routing stands alone",
    "cache stands alone",
    "the foundation imports nothing above it",
    "the client never imports the server kit or the programs",
    "the HTTP layer knows no SageMaker and no client",
    "the AWS protocols sit at the bottom",
    "the server kit never imports the client",
    _SERVER_HALVES,
    "observing imports no part of the call pipeline but the operation table",
]


@pytest.mark.parametrize("rule", RULES)
def test_layers_import_only_downwards(rule: str) -> None:
    assert violations(rule) == []


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text("from gateway._server.http import Server\nfrom . import errors\n")
    found = imports_of_foreign(source, "gateway._client")
    assert "gateway._server.http.Server" in found
    assert _breaks(RULES[3], "gateway._client", "gateway._server.http")
    assert not _breaks(RULES[3], "gateway.sidecar._app", "gateway._server.http")
    assert _breaks(RULES[0], "gateway.routing._route", "gateway._client")
    assert _breaks(RULES[0], "gateway.routing._route", "gateway.cache")
    assert not _breaks(RULES[0], "gateway.routing._route", "gateway.errors")
    assert _breaks(_SERVER_HALVES, "gateway._server.parsing", "gateway._server.writing.logger")
    assert _breaks(_SERVER_HALVES, "gateway._server.writing", "gateway._server.http.Server")
    assert not _breaks(_SERVER_HALVES, "gateway._server.http", "gateway._server.parsing")
    assert not _breaks(_SERVER_HALVES, "gateway._server.parsing", "gateway._server.messages")
    observing = "observing imports no part of the call pipeline but the operation table"
    assert _breaks(observing, "gateway._observe.tracing", "gateway._invoke.runtimes")
    assert _breaks(observing, "gateway._observe.prometheus", "gateway._client.Gateway")
    assert not _breaks(observing, "gateway._observe.tracing", "gateway._invoke.api")


def imports_of_foreign(path: Path, as_module: str) -> set[str]:
    """``imports_of`` for a file outside the tree, read as if it were ``as_module``."""
    found: set[str] = set()
    for node in ast.walk(parse_file(path)):
        if isinstance(node, ast.ImportFrom):
            found.update(_resolve(as_module, False, node))
    return {name for name in found if name.split(".")[0] in PACKAGES}


# -- no import cycle between files ---------------------------------------------------


def import_graph() -> dict[str, set[str]]:
    """Each module of gateway -> the modules of gateway it imports.

    Every import counts: at module level, under TYPE_CHECKING and inside a function.
    A cycle through any of them still ties the two files together for a reader, and
    for mypyc, which compiles the hot path's modules. A package's ``__init__`` counts
    like any file, its imports of its own submodules included: a submodule that
    imported a name through its package would close a cycle with it.
    """
    imports = dict(modules())
    return {module: _modules_named(found, imports) for module, found in imports.items()}


def _modules_named(names: Collection[str], known: Collection[str]) -> set[str]:
    """The modules of ``known`` that ``names`` (modules, or names inside them) lie in."""
    return {_module_of_name(name, known) for name in names if _within(name, *known)}


def _module_of_name(name: str, known: Collection[str]) -> str:
    """The module ``name`` is in: ``gateway._server.http.Server`` -> ``gateway._server.http``."""
    while name not in known:
        name = name.rpartition(".")[0]
    return name


def import_cycle(graph: Mapping[str, Collection[str]]) -> list[str]:
    """One import cycle in ``graph``, its first module repeated at the end; [] if none."""
    finished: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str]:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in finished:
            return []
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            cycle = visit(imported)
            if cycle:
                return cycle
        path.pop()
        finished.add(module)
        return []

    for module in sorted(graph):
        cycle = visit(module)
        if cycle:
            return cycle
    return []


def test_no_two_files_import_each_other() -> None:
    assert import_cycle(import_graph()) == []


def test_the_cycle_finder_sees_a_cycle() -> None:
    graph = {"d": {"a"}, "a": {"b"}, "b": {"c", "e"}, "c": {"a"}, "e": set()}
    assert import_cycle(graph) == ["a", "b", "c", "a"]
    assert import_cycle({**graph, "c": set()}) == []
    assert import_cycle({"a": {"a"}}) == ["a", "a"]
    assert "gateway._server.messages" in import_graph()["gateway._server.http"]


def test_the_import_graph_counts_every_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "from gateway.errors import ConfigError\n"
        "if TYPE_CHECKING:\n"
        "    from gateway._http.pool import OriginPool\n"
        "def train():\n"
        "    from gateway.rtb import distributed\n"
    )
    found = imports_of_foreign(probe, "gateway._http.connection")
    assert _modules_named(found, dict(modules())) == {
        "gateway.errors",  # the module that holds the name
        "gateway._http.pool",  # under TYPE_CHECKING
        "gateway.rtb.distributed",  # inside a function; a submodule, not its package
    }


# The top of the package is its public face; everything else sits in a folder by role.
_PUBLIC_FACE = {"__init__.py", "__main__.py", "errors.py", "compat.py", "_client.py"}


def test_the_top_of_the_package_is_its_public_face() -> None:
    top = {path.name for path in (ROOT / "gateway").glob("*.py")}
    assert top <= _PUBLIC_FACE, sorted(top - _PUBLIC_FACE)
