"""The build report: which hot-path modules are compiled, and which are stale."""

from __future__ import annotations

import importlib.machinery
import os
from pathlib import Path

import pytest

from gateway._host import build as _build


def test_the_hot_path_is_one_build_not_a_mix() -> None:
    assert _build.build_kind() in {"compiled", "pure"}


def test_every_listed_module_exists_and_setup_reads_the_list() -> None:
    root = Path(__file__).resolve().parents[3]
    for path in (*_build.HOT_PATH, *_build.NATIVE_HELPERS, *_build.NATIVE_HEADERS):
        assert (root / path).is_file(), path
    for includers in _build.NATIVE_HEADERS.values():
        assert set(includers) <= set(_build.NATIVE_HELPERS)
    assert "gateway/_host/build.py" in (root / "setup.py").read_text()


@pytest.mark.parametrize(
    ("source_name", "listed_as"),
    [("hot.py", "HOT_PATH"), ("_fast.c", "NATIVE_HELPERS")],
    ids=["compiled-module", "c-helper"],
)
def test_an_edited_source_makes_its_compiled_module_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source_name: str, listed_as: str
) -> None:
    """A compiled module (mypyc's, or a C helper) built in place by an editable install
    does not change when its source is edited: the staleness check names it."""
    stem = source_name.split(".")[0]
    # A package name of its own per case: find_spec imports the package, once a process.
    name = f"stale{stem.strip('_')}"
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    source = package / source_name
    source.write_text("X = 1\n")
    # A file with an extension module's suffix is "the compiled source": the
    # import system prefers it, and it is found but never imported here.
    compiled = package / f"{stem}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    compiled.write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_build, "HOT_PATH", ())
    monkeypatch.setattr(_build, "NATIVE_HELPERS", ())
    monkeypatch.setattr(_build, "NATIVE_HEADERS", {})
    monkeypatch.setattr(_build, listed_as, (f"{name}/{source_name}",))
    os.utime(source, (1_000_000, 1_000_000))
    os.utime(compiled, (2_000_000, 2_000_000))
    assert _build.stale_modules() == []
    os.utime(source, (3_000_000, 3_000_000))
    assert _build.stale_modules() == [f"{name}.{stem}"]


def test_an_edited_shared_header_makes_the_c_helpers_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A header a C helper includes is as much its source as its own file; a helper that
    does not include it is not stale for it."""
    package = tmp_path / "staleheader"
    package.mkdir()
    (package / "__init__.py").write_text("")
    source = package / "_fast.c"
    source.write_text('#include "shared.h"\n')
    header = package / "shared.h"
    header.write_text("/* shared */\n")
    compiled = package / f"_fast{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    compiled.write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_build, "HOT_PATH", ())
    other = package / "_other.c"
    other.write_text("/* includes nothing */\n")
    other_compiled = package / f"_other{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    other_compiled.write_bytes(b"")
    monkeypatch.setattr(_build, "NATIVE_HELPERS", ("staleheader/_fast.c", "staleheader/_other.c"))
    monkeypatch.setattr(_build, "NATIVE_HEADERS", {str(header): ("staleheader/_fast.c",)})
    for path in (source, header, other, other_compiled):
        os.utime(path, (1_000_000, 1_000_000))
    os.utime(compiled, (2_000_000, 2_000_000))
    assert _build.stale_modules() == []
    os.utime(header, (3_000_000, 3_000_000))
    assert _build.stale_modules() == ["staleheader._fast"]


def _package(root: Path, name: str, sources: dict[str, str], built: tuple[str, ...]) -> None:
    """A package ``name`` under ``root`` (on sys.path) with these source files, and an
    (empty) extension file for each of ``built``."""
    package = root / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    for file, text in sources.items():
        (package / file).write_text(text)
    for module in built:
        (package / f"{module}{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"")


def test_a_compiled_module_is_reported_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _package(tmp_path, "builtpkg", {"hot.py": "X = 1\n"}, ("hot",))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_build, "HOT_PATH", ("builtpkg/hot.py",))
    assert _build.compiled_modules() == {"builtpkg.hot": True}


def test_a_c_helper_that_was_not_built_is_reported_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One helper built (an extension file), one left as its source only (a failed compile).
    _package(tmp_path, "helperpkg", {"_built.c": "", "_failed.c": ""}, ("_built",))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_build, "NATIVE_HELPERS", ("helperpkg/_built.c", "helperpkg/_failed.c"))
    assert _build.missing_helpers() == ["helperpkg._failed"]


def test_every_compiled_module_says_so_in_its_first_lines() -> None:
    root = Path(__file__).resolve().parents[3]
    for path in _build.HOT_PATH:
        first_line = (root / path).read_text().splitlines()[0]
        assert first_line.startswith("# Compiled with mypyc"), path
