"""Build script: compiles the per-call hot path with mypyc for wheels.

Everything else is declared in pyproject.toml. The modules named in
``gateway/_build.py`` run on every ``Gateway.invoke`` or every request the
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

import concurrent.futures
import importlib.machinery
import os
import runpy
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The list lives in the package, which reports at run time which build it is.
ROOT = Path(__file__).resolve().parent
HOT_PATH = list(runpy.run_path(str(ROOT / "gateway" / "_build.py"))["HOT_PATH"])
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
    """The compiled modules (and mypyc's shared library) beside the sources."""
    shared = GROUP.replace(".", "/") + "__mypyc"
    stems = [ROOT / source.removesuffix(".py") for source in [*HOT_PATH, shared]]
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


def compiled_modules() -> list[Extension]:
    if not wants_compiled():
        remove_in_place_builds()
        return []
    from mypyc.build import mypycify

    # One C file per module, so the C compiler runs on every core (build_ext above).
    extensions = mypycify([*BUILD_FLAGS, *HOT_PATH], group_name=GROUP, multi_file=True)
    # mypyc writes the group's headers under the package's folder (the group name is
    # dotted) and the modules' C files above it: let those find the headers.
    for extension in extensions:
        extension.include_dirs.append(os.path.join("build", *GROUP.split(".")[:-1]))
    return extensions


setup(ext_modules=compiled_modules(), cmdclass={"build_ext": BuildExtMarkingBuildTime})
