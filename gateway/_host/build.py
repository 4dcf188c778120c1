"""Which build is running: the hot path compiled with mypyc, or plain Python.

``setup.py`` compiles ``HOT_PATH`` (it reads this file by path, so keep it
free of imports beyond the standard library). An editable install puts the
compiled modules next to their sources, where they shadow them: an edited
source does nothing until the next ``pip install -e .``. ``stale_modules``
finds such modules, and the test suite refuses to run on them.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

__all__ = [
    "HOT_PATH",
    "NATIVE_HEADERS",
    "NATIVE_HELPERS",
    "build_kind",
    "compiled_modules",
    "headers_of",
    "missing_helpers",
    "stale_modules",
]

# The modules every Gateway.invoke (or sidecar request) runs through, as setup.py paths.
HOT_PATH = (
    "gateway/_client.py",
    "gateway/_invoke/context.py",
    "gateway/_invoke/pipeline.py",
    "gateway/_invoke/typed.py",
    "gateway/_invoke/cached.py",
    "gateway/_invoke/credentials.py",
    "gateway/_observe/prometheus.py",
    "gateway/_observe/counting.py",
    "gateway/_invoke/call.py",
    "gateway/_invoke/target_plans.py",
    "gateway/_aws/sigv4.py",
    "gateway/_http/interfaces.py",
    "gateway/_http/message.py",
    "gateway/_http/deadlines.py",
    "gateway/_http/connection.py",
    "gateway/_http/pool.py",
    "gateway/_http/native.py",
    "gateway/_http/request.py",
    "gateway/_invoke/api.py",
    "gateway/routing/_route.py",
    "gateway/routing/_router.py",
    "gateway/routing/_hedge_policy.py",
    "gateway/routing/_stats.py",
    "gateway/routing/_target_state.py",
    # The sidecar's per-request path: its HTTP server, its handler and its counters.
    "gateway/_server/messages.py",
    "gateway/_server/parsing.py",
    "gateway/_server/writing.py",
    "gateway/_server/http.py",
    "gateway/sidecar/_app.py",
    "gateway/sidecar/_metrics.py",
    # The RTB filter's per-request path: decoding, the micro-batcher and the filter.
    # Its msgspec structs (_structs.py) and its policy (policy.py, a config section)
    # stay plain Python: both need the class annotations a compiled class drops.
    "gateway/rtb/_typed.py",
    "gateway/rtb/_batcher.py",
    "gateway/rtb/filter.py",
)

# Small C modules of the same path, each with a Python fallback, as setup.py paths:
# SigV4's per-request tail, scans of a received answer, and of a plain request. setup.py
# builds them in every build but an explicitly pure one, editable installs included.
NATIVE_HELPERS = (
    "gateway/_aws/_sigv4_tail.c",
    "gateway/_http/_heads.c",
    "gateway/_server/_request_heads.c",
)
# What C helpers include from the package, and which: the plain HTTP syntax of both fast
# paths, and the Content-Length digits of the heads and answers they write. An edit to
# one is an edit to each helper that includes it.
NATIVE_HEADERS = {
    "gateway/_http/_plain_syntax.h": ("gateway/_http/_heads.c", "gateway/_server/_request_heads.c"),
    "gateway/_http/_decimal.h": ("gateway/_aws/_sigv4_tail.c", "gateway/_server/_request_heads.c"),
}


def headers_of(helper: str) -> list[str]:
    """The package's headers the C helper ``helper`` (a setup.py path) includes."""
    return [header for header, includers in NATIVE_HEADERS.items() if helper in includers]


def _module_name(path: str) -> str:
    return str(Path(path).with_suffix("")).replace("/", ".")


def _origin(name: str) -> str | None:
    """The file ``name`` loads from (found without importing the module itself)."""
    spec = importlib.util.find_spec(name)
    return spec.origin if spec is not None else None


def _is_extension(file: str | None) -> bool:
    return file is not None and file.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def compiled_modules() -> dict[str, bool]:
    """Each hot-path module's name -> whether it loads from a compiled file."""
    return {name: _is_extension(_origin(name)) for name in map(_module_name, HOT_PATH)}


def build_kind() -> str:
    """ "compiled", "pure", or "mixed" (a broken or partial build)."""
    states = set(compiled_modules().values())
    if states == {True}:
        return "compiled"
    if states == {False}:
        return "pure"
    return "mixed"


def missing_helpers() -> list[str]:
    """The C helpers not built: each builds apart, and one that fails to compile leaves
    its Python fallback running, silently (a compiled build carries them all)."""
    names = map(_module_name, NATIVE_HELPERS)
    return [name for name in names if not _is_extension(_origin(name))]


def stale_modules() -> list[str]:
    """Compiled hot-path modules (and C helpers) whose source was edited after they were built."""
    stale = []
    root = Path(__file__).resolve().parents[2]
    for path in (*HOT_PATH, *NATIVE_HELPERS):
        name = _module_name(path)
        file = _origin(name)
        if file is None or not _is_extension(file):
            continue
        compiled = Path(file)
        source = compiled.with_name(compiled.name.split(".", 1)[0] + Path(path).suffix)
        inputs = [source, *(root / header for header in headers_of(path))]
        # (Only where a source is here to compare: a compiled module's origin can name
        # a path of mypyc's, not a file.)
        edited = max((each.stat().st_mtime for each in inputs if each.exists()), default=None)
        if edited is not None and edited > compiled.stat().st_mtime:
            stale.append(name)
    return stale
