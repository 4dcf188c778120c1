"""Put a compiled wheel's hot path beside this checkout's sources, or take it away again.

    python .ci/compiled_in_place.py install WHEEL   # the wheel's extension modules, in place
    python .ci/compiled_in_place.py remove WHEEL    # back to plain Python

The result is what ``SAGEMAKER_GATEWAY_BUILD=compiled pip install -e .`` leaves
(mypyc's modules next to the sources they shadow), without compiling a second
time: CI builds the wheel once (``python -m tests.deploy._docker``), tests it,
then runs the suite against the same compiled code. The wheel must have been
built from this checkout: the files' fresh times are what the suite's
staleness check compares with the sources. mypyc's shared library lands inside
``gateway/`` like the modules it serves.
"""

from __future__ import annotations

import importlib.machinery
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def _compiled_members(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    members = [name for name in names if name.endswith(SUFFIXES) and ".." not in Path(name).parts]
    if not members:
        raise SystemExit(f"{wheel} holds no compiled modules")
    return members


def install(wheel: Path) -> list[Path]:
    """Extract the wheel's extension modules to the same paths under the checkout."""
    with zipfile.ZipFile(wheel) as archive:
        for member in _compiled_members(wheel):
            # Beside, then renamed over: a running process may have the old file mapped.
            staged = ROOT / f"{member}.partial"
            staged.write_bytes(archive.read(member))
            staged.replace(ROOT / member)
    return [ROOT / member for member in _compiled_members(wheel)]


def remove(wheel: Path) -> list[Path]:
    """Delete what ``install`` put in place."""
    paths = [ROOT / member for member in _compiled_members(wheel)]
    for path in paths:
        path.unlink(missing_ok=True)
    return paths


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "install":
        paths = install(Path(argv[1]))
    elif len(argv) == 2 and argv[0] == "remove":
        paths = remove(Path(argv[1]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(f"{argv[0]}: {len(paths)} compiled modules")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
