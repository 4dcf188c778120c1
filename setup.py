"""Build script: compiles the per-call hot path with mypyc.

Everything else is declared in pyproject.toml. The modules named in
``gateway/_build.py`` run on every ``Gateway.invoke``; compiled, a call costs
less CPU (``python -m bench.compare`` prints which build it measured). Set
``SAGEMAKER_GATEWAY_PURE=1`` to install plain Python instead, e.g. where no
C compiler is available; behaviour is the same.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

from setuptools import Extension, setup

# The list lives in the package, which reports at run time which build it is.
HOT_PATH = list(runpy.run_path(str(Path(__file__).parent / "gateway" / "_build.py"))["HOT_PATH"])

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


def compiled_modules() -> list[Extension]:
    if os.environ.get("SAGEMAKER_GATEWAY_PURE") == "1":
        return []
    from mypyc.build import mypycify

    return mypycify([*BUILD_FLAGS, *HOT_PATH], group_name="gateway_hot_path")


setup(ext_modules=compiled_modules())
