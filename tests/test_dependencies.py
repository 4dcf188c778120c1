"""Every runtime dependency the package declares is imported by its code.

A declared but unused dependency is one more package to install, lock and
audit for nothing. Read from the sources, so no import runs.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from tests._source import parse_file

ROOT = Path(__file__).resolve().parents[1]
# Distribution name -> the top-level module it installs, where they differ.
_MODULE_OF = {"prometheus-client": "prometheus_client", "mypy-extensions": "mypy_extensions"}


def _declared() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0] for spec in project["dependencies"]]


def _imported() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "gateway").rglob("*.py"):
        for node in ast.walk(parse_file(path)):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def test_every_declared_dependency_is_imported() -> None:
    imported = _imported()
    unused = [d for d in _declared() if _MODULE_OF.get(d, d.replace("-", "_")) not in imported]
    assert unused == []
