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
    for path in (*_build.HOT_PATH, *_build.NATIVE_HELPERS):
        assert (root / path).is_file(), path
    assert "gateway/_host/build.py" in (root / "setup.py").read_text()


def test_an_edited_source_makes_its_compiled_module_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "stalepkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    source = package / "hot.py"
    source.write_text("X = 1\n")
    # A file with an extension module's suffix is "the compiled hot.py": the
    # import system prefers it, and it is found but never imported here.
    compiled = package / f"hot{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    compiled.write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_build, "HOT_PATH", ("stalepkg/hot.py",))
    os.utime(source, (1_000_000, 1_000_000))
    os.utime(compiled, (2_000_000, 2_000_000))
    assert _build.compiled_modules() == {"stalepkg.hot": True}
    assert _build.stale_modules() == []
    os.utime(source, (3_000_000, 3_000_000))
    assert _build.stale_modules() == ["stalepkg.hot"]


def test_an_edited_c_helper_makes_its_module_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A C helper built in place (an editable install) shadows nothing, but an edit to
    its source does nothing until the next install: the same staleness check holds."""
    package = tmp_path / "stalehelpers"
    package.mkdir()
    (package / "__init__.py").write_text("")
    source = package / "_fast.c"
    source.write_text("/* C */\n")
    compiled = package / f"_fast{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    compiled.write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_build, "HOT_PATH", ())
    monkeypatch.setattr(_build, "NATIVE_HELPERS", ("stalehelpers/_fast.c",))
    os.utime(source, (1_000_000, 1_000_000))
    os.utime(compiled, (2_000_000, 2_000_000))
    assert _build.stale_modules() == []
    os.utime(source, (3_000_000, 3_000_000))
    assert _build.stale_modules() == ["stalehelpers._fast"]


def test_every_compiled_module_says_so_in_its_first_lines() -> None:
    root = Path(__file__).resolve().parents[3]
    for path in _build.HOT_PATH:
        first_line = (root / path).read_text().splitlines()[0]
        assert first_line.startswith("# Compiled with mypyc"), path
