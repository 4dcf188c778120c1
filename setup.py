"""Build script: compiles the per-call hot path with mypyc for wheels.

Everything else is declared in pyproject.toml. The modules named in
``gateway/_host/build.py`` run on every ``Gateway.invoke`` or every request the
sidecar serves; compiled, a call costs less CPU (``python -m bench.compare``
prints which build it measured).

- ``pip install .`` and ``pip wheel .`` build the compiled hot path.
- ``pip install -e .`` (a contributor's checkout) installs plain Python, so an
  edit takes effect at once.
- ``SAGEMAKER_GATEWAY_BUILD=pure`` or ``=compiled`` overrides either default;
  ``pure`` is the fallback for hosts without a C compiler (behaviour is the
  same, a call costs a few microseconds more CPU).
"""

from __future__ import annotations

import ast
import concurrent.futures
import importlib.machinery
import os
import re
import runpy
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The list lives in the package, which reports at run time which build it is.
ROOT = Path(__file__).resolve().parent
_BUILD = runpy.run_path(str(ROOT / "gateway" / "_host" / "build.py"))
HOT_PATH = list(_BUILD["HOT_PATH"])
# Small C modules of the hot path, each with a Python fallback (see native_helpers).
NATIVE_HELPERS = list(_BUILD["NATIVE_HELPERS"])
headers_of = _BUILD["headers_of"]
# mypyc's shared library, named after the group: a dotted name puts it inside the
# package (gateway/_hot_path__mypyc.<suffix>), so the wheel installs one top-level
# name; the compiled modules import it by that full name.
GROUP = "gateway._hot_path"

# The build environment has mypy but not the runtime dependencies, so their
# types are Any here and strict mode's complaints about Any are moot. The
# real strict check is `python -m mypy` in CI, with everything installed.
BUILD_FLAGS = [
    "--ignore-missing-imports",
    "--follow-imports=silent",
    "--no-warn-unused-ignores",
    "--no-warn-return-any",
    "--allow-subclassing-any",
    "--allow-untyped-decorators",
]


def compiled_in_place() -> list[Path]:
    """The compiled modules (mypyc's, its shared library, the C helpers) beside the sources."""
    shared = GROUP.replace(".", "/") + "__mypyc"
    helpers = [source.removesuffix(".c") for source in NATIVE_HELPERS]
    stems = [ROOT / source.removesuffix(".py") for source in [*HOT_PATH, shared, *helpers]]
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    found = (stem.with_name(stem.name + suffix) for stem in stems for suffix in suffixes)
    return [path for path in found if path.exists()]


def remove_in_place_builds() -> None:
    """Delete compiled modules an earlier editable install left beside the sources.

    They would shadow the plain sources this build is asked for.
    """
    for path in compiled_in_place():
        path.unlink()


class BuildExtMarkingBuildTime(build_ext):
    """build_ext that compiles on every core, then dates each in-place module to this build.

    mypyc writes the hot path as one C file per module (``multi_file``); a C
    compiler takes one file at a time, so the files of an extension are
    compiled side by side, one per core (``pip install -v`` shows each
    compiler command as it starts).

    mypyc leaves a module's small stub untouched when its generated C did not
    change (a comment edit; or the code moved into the shared library), so
    the stub would keep a time older than the edited source, and the test
    suite's staleness check would refuse a build that is in fact current.
    """

    def build_extension(self, ext: Extension) -> None:
        compile_one = self.compiler.compile

        def compile_all(sources: list[str], *args: object, **kwargs: object) -> list[str]:
            if len(sources) < 2:
                return list(compile_one(sources, *args, **kwargs))
            # The first alone: it makes the output folders the others write into.
            objects = list(compile_one(sources[:1], *args, **kwargs))
            jobs = max(1, len(os.sched_getaffinity(0)))
            with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
                for built in pool.map(lambda s: compile_one([s], *args, **kwargs), sources[1:]):
                    objects.extend(built)
            return objects

        self.compiler.compile = compile_all
        try:
            super().build_extension(ext)
        finally:
            self.compiler.compile = compile_one

    def run(self) -> None:
        super().run()
        for path in compiled_in_place():
            os.utime(path)


def wants_compiled() -> bool:
    chosen = os.environ.get("SAGEMAKER_GATEWAY_BUILD", "")
    if chosen not in {"", "pure", "compiled"}:
        raise SystemExit(f"SAGEMAKER_GATEWAY_BUILD must be 'pure' or 'compiled', not {chosen!r}")
    if chosen:
        return chosen == "compiled"
    # setuptools builds an editable install through its editable_wheel command.
    return "editable_wheel" not in sys.argv


def _docstrings(paths: list[str]) -> dict[tuple[str, str | None, str], str]:
    """(module, class or None, name) -> docstring, for every class and function in ``paths``."""
    found: dict[tuple[str, str | None, str], str] = {}
    for path in paths:
        module = path.removesuffix(".py").replace("/", ".")
        tree = ast.parse((ROOT / path).read_text(), path)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                found[(module, None, node.name)] = ast.get_docstring(node) or ""
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        found[(module, node.name, item.name)] = ast.get_docstring(item) or ""
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found[(module, None, node.name)] = ast.get_docstring(node) or ""
    return found


# In mypyc's C: a function's or method's wrapper with its doc string, and a type's name
# and doc string (the doc strings hold only a text signature: "name(args)\n--\n\n").
Name = tuple[str | None, str]  # (class or None, function) in one module
_WRAPPER_DOC = re.compile(
    r'\(PyCFunction\)CPyPy_(\w+),[^,]*?,\s*PyDoc_STR\(("(?:[^"\\]|\\.)*"|NULL)\)'
)
_TYPE_DOC = re.compile(
    r'\.tp_name = "(\w+)",(?:(?!\n\};).)*?\.tp_doc = PyDoc_STR\(("(?:[^"\\]|\\.)*"|NULL)\)', re.S
)


def _c_string(text: str) -> str:
    """``text`` as a C string literal (octal escapes: no escape can run into the next byte)."""
    escaped = "".join(
        chr(byte) if 32 <= byte < 127 and byte not in b'"\\?' else f"\\{byte:03o}"
        for byte in text.encode()
    )
    return f'"{escaped}"'


def keep_docstrings(c_files: list[Path], paths: list[str]) -> None:
    """Add the sources' docstrings to the doc strings mypyc wrote into ``c_files``.

    mypyc 2.4 gives a compiled function only its text signature as ``__doc__``, so
    ``help()`` and notebooks would show nothing of the installed build. Each doc
    string keeps that signature and gains the docstring of its function, method or
    class, read from the source.
    """
    docs = _docstrings(paths)

    def with_doc(signature_literal: str, doc: str) -> str:
        pristine = signature_literal == "NULL" or signature_literal.endswith('\\n--\\n\\n"')
        if not doc or not pristine:
            return signature_literal
        prefix = "" if signature_literal == "NULL" else signature_literal[:-1]
        return (prefix + _c_string(doc)[1:]) if prefix else _c_string(doc)

    for c_file in c_files:
        module = c_file.stem.removeprefix("__native_").replace("___", ".")
        names = {(cls, name): doc for (mod, cls, name), doc in docs.items() if mod == module}
        if not names:
            continue

        def method_doc(
            match: re.Match[str], names: dict[tuple[str | None, str], str] = names
        ) -> str:
            c_name, literal = match.group(1), match.group(2)
            # The longest (class, name) whose C spelling ends the wrapper's name.
            found = [
                (len(key), doc)
                for (cls, name), doc in names.items()
                for key in [f"___{cls}___{name}" if cls else f"___{name}"]
                if c_name.endswith(key)
            ]
            doc = max(found)[1] if found else ""
            whole = match.group(0)
            return whole[: match.start(2) - match.start(0)] + with_doc(literal, doc) + ")"

        def type_doc(match: re.Match[str], names: dict[Name, str] = names) -> str:
            doc = names.get((None, match.group(1)), "")
            whole = match.group(0)
            return whole[: match.start(2) - match.start(0)] + with_doc(match.group(2), doc) + ")"

        text = c_file.read_text()
        changed = _TYPE_DOC.sub(type_doc, _WRAPPER_DOC.sub(method_doc, text))
        if changed != text:
            c_file.write_text(changed)


def native_helpers() -> list[Extension]:
    """The hot path's small C modules, in every build but an explicitly pure one.

    Editable installs included: they link nothing (the signing tail hashes with the
    libcrypto Python's hashlib loaded, so it needs no OpenSSL headers). Optional:
    without a C compiler the build goes on without them, and their Python versions
    run, with the same results. (A pure build's remove_in_place_builds drops
    earlier ones.)
    """
    if os.environ.get("SAGEMAKER_GATEWAY_BUILD") == "pure":
        return []
    return [
        Extension(
            source.removesuffix(".c").replace("/", "."),
            [source],
            depends=headers_of(source),  # an edited header rebuilds its includers
            optional=True,
        )
        for source in NATIVE_HELPERS
    ]


def compiled_modules() -> list[Extension]:
    if not wants_compiled():
        remove_in_place_builds()
        return native_helpers()
    from mypyc.build import mypycify

    # One C file per module, so the C compiler runs on every core (build_ext above).
    extensions = mypycify([*BUILD_FLAGS, *HOT_PATH], group_name=GROUP, multi_file=True)
    # mypyc writes the group's headers under the package's folder (the group name is
    # dotted) and the modules' C files above it: let those find the headers.
    for extension in extensions:
        extension.include_dirs.append(os.path.join("build", *GROUP.split(".")[:-1]))
    keep_docstrings(sorted((ROOT / "build").glob("__native_*.c")), list(HOT_PATH))
    return [*extensions, *native_helpers()]


setup(ext_modules=compiled_modules(), cmdclass={"build_ext": BuildExtMarkingBuildTime})
