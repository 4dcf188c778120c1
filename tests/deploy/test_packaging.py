"""The package's metadata and the image's lock file, read without building anything."""

from __future__ import annotations

import ast
import json
import re
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LOCK = ROOT / "requirements-image.lock"
# The image: CPython 3.11 on Linux (the Dockerfile's base), with the redis extra.
IMAGE_ENVIRONMENT = {"sys_platform": "linux", "python_version": "3.11", "extra": "redis"}


def _image_requirements() -> list[Requirement]:
    declared = [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["redis"]]
    requirements = [Requirement(text) for text in declared]
    return [r for r in requirements if r.marker is None or r.marker.evaluate(IMAGE_ENVIRONMENT)]


def _locked() -> dict[str, tuple[str, list[str]]]:
    """Name -> (version, hashes) from the lock file."""
    pins: dict[str, tuple[str, list[str]]] = {}
    name = ""
    for line in LOCK.read_text().splitlines():
        pin = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)", line)
        if pin:
            name = canonicalize_name(pin[1])
            pins[name] = (pin[2], [])
        elif line.strip().startswith("--hash=sha256:"):
            pins[name][1].append(line.strip().split(":", 1)[1].rstrip(" \\"))
    return pins


def test_the_image_lock_pins_every_runtime_dependency_by_hash() -> None:
    locked = _locked()
    for requirement in _image_requirements():
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is not in requirements-image.lock"
        version, _ = locked[name]
        assert requirement.specifier.contains(version, prereleases=True), (name, version)
    for name, (_, hashes) in locked.items():
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), name
    # The redis extra's own extra (hiredis) came along.
    assert {"redis", "hiredis"} <= locked.keys()


def _imported_top_level_names() -> set[str]:
    names: set[str] = set()
    for source in (ROOT / "gateway").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def test_every_runtime_dependency_is_imported_by_the_package() -> None:
    providers = packages_distributions()
    imported = {
        canonicalize_name(distribution)
        for name in _imported_top_level_names()
        for distribution in providers.get(name, [])
    }
    declared = {canonicalize_name(Requirement(text).name) for text in PROJECT["dependencies"]}
    assert declared - imported == set()


def test_the_metadata_has_classifiers_and_no_placeholders() -> None:
    classifiers = set(PROJECT["classifiers"])
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "Typing :: Typed" in classifiers
    assert any(c.startswith("Development Status ::") for c in classifiers)
    # The license is the SPDX expression; a License classifier beside it is an error (PEP 639).
    assert PROJECT["license"] == "Apache-2.0"
    assert not any(c.startswith("License ::") for c in classifiers)
    # No placeholder contact or home: none exists yet, so none is declared (a URL, once
    # there is one, must be https).
    assert all(url.startswith("https://") for url in PROJECT.get("urls", {}).values())
    metadata = json.dumps({key: PROJECT.get(key) for key in ("authors", "urls")})
    assert "example" not in metadata
