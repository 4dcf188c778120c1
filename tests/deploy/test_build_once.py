"""CI compiles the hot path once: a prebuilt build stage is reused only while it is current,
and the compiled pass puts that wheel's modules in place and takes them away again."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.deploy import _docker

ROOT = Path(__file__).resolve().parents[2]
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout with one package; _docker's COPY reads from it."""
    root = tmp_path / "checkout"
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "hot.py").write_text("X = 1\n")
    (root / "pkg" / "__pycache__" / "hot.cpython-311.pyc").write_bytes(b"cache")
    (root / "setup.py").write_text("setup()\n")
    monkeypatch.setattr(_docker, "ROOT", root)
    return root


def _stage() -> _docker.Stage:
    return _docker.Stage(
        "build",
        "python:3.11-slim",
        [("WORKDIR", "/src"), ("COPY", "setup.py ./"), ("COPY", "pkg ./pkg")],
    )


def test_the_digest_follows_the_copied_files_and_not_caches_or_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _checkout(tmp_path, monkeypatch)
    first = _docker.stage_digest(_stage())
    # What the COPY leaves out (bytecode, an in-place compiled module) changes nothing.
    (root / "pkg" / "__pycache__" / "hot.cpython-311.pyc").write_bytes(b"other cache")
    (root / "pkg" / f"hot{SUFFIX}").write_bytes(b"\x7fELF")
    assert _docker.stage_digest(_stage()) == first
    # An edited source, a new file, or another instruction each make another build.
    (root / "pkg" / "hot.py").write_text("X = 2\n")
    edited = _docker.stage_digest(_stage())
    assert edited != first
    (root / "pkg" / "new.py").write_text("")
    assert _docker.stage_digest(_stage()) not in {first, edited}
    changed = _docker.Stage("build", "python:3.11-slim", [*_stage().instructions, ("RUN", "x")])
    assert _docker.stage_digest(changed) != _docker.stage_digest(_stage())


def test_a_prebuilt_stage_is_used_only_when_asked_for_and_current(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _checkout(tmp_path, monkeypatch)
    prebuilt = tmp_path / "prebuilt"
    stage_root = prebuilt / "stage-build"
    stage_root.mkdir(parents=True)
    monkeypatch.delenv(_docker.BUILD_STAGE_ENV, raising=False)
    assert _docker.prebuilt_stage(_stage()) is None  # not asked for
    monkeypatch.setenv(_docker.BUILD_STAGE_ENV, str(prebuilt))
    assert _docker.prebuilt_stage(_stage()) is None  # asked for, never finished
    (prebuilt / "stage-build.sha256").write_text(_docker.stage_digest(_stage()) + "\n")
    assert _docker.prebuilt_stage(_stage()) == stage_root
    (root / "pkg" / "hot.py").write_text("X = 2\n")
    assert _docker.prebuilt_stage(_stage()) is None  # built from other sources


def _compiled_in_place(root: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "compiled_in_place", ROOT / ".ci/compiled_in_place.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "ROOT", root)
    return module


def test_the_compiled_pass_puts_the_wheels_modules_beside_the_sources_and_removes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _checkout(tmp_path, monkeypatch)
    wheel = tmp_path / "pkg-1-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"pkg/hot{SUFFIX}", b"compiled hot")
        archive.writestr(f"pkg_group__mypyc{SUFFIX}", b"shared library")
        archive.writestr("pkg/hot.py", b"X = 'from the wheel'\n")
        archive.writestr("pkg-1.dist-info/RECORD", b"")
    tool = _compiled_in_place(root, monkeypatch)
    assert tool.main(["install", str(wheel)]) == 0
    assert (root / "pkg" / f"hot{SUFFIX}").read_bytes() == b"compiled hot"
    assert (root / f"pkg_group__mypyc{SUFFIX}").read_bytes() == b"shared library"
    assert (root / "pkg" / "hot.py").read_text() == "X = 1\n"  # the sources stay the checkout's
    assert not (root / "pkg-1.dist-info").exists()
    # Newer than its source, so the suite's staleness check accepts it.
    assert (root / "pkg" / f"hot{SUFFIX}").stat().st_mtime >= (root / "pkg/hot.py").stat().st_mtime
    assert tool.main(["remove", str(wheel)]) == 0
    assert sorted(p.name for p in root.rglob(f"*{SUFFIX}")) == []
    assert (root / "pkg" / "hot.py").exists()


def test_the_compiled_pass_refuses_a_wheel_without_compiled_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _checkout(tmp_path, monkeypatch)
    wheel = tmp_path / "pkg-1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pkg/hot.py", b"X = 1\n")
    tool = _compiled_in_place(root, monkeypatch)
    with pytest.raises(SystemExit, match="holds no compiled modules"):
        tool.main(["install", str(wheel)])
    assert tool.main(["bogus"]) == 2
