"""Session fixtures: the Dockerfile's stages run once (one wheel build); the plain wheel."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy._docker import (
    DOCKERFILE,
    BuiltImage,
    Stage,
    outside_the_checkout,
    parse_dockerfile,
    prebuilt_stage,
    run_stage_once,
)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of the built wheel on one xdist worker, so the wheel is compiled once;
    every test of the sdist on one worker too.

    Session and module fixtures are per worker: spread over workers, each would build
    again. Two sdist builds of one checkout at once also race: setuptools assembles
    each in the same ``<name>-<version>/`` folder of the checkout, and one removes the
    files the other is archiving.
    """
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "docker_build" in fixtures:
            item.add_marker(pytest.mark.xdist_group("built-wheel"))
        elif "sdist" in fixtures:
            item.add_marker(pytest.mark.xdist_group("sdist"))


@contextlib.contextmanager
def _exclusive(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_file`` (one process of the run at a time)."""
    with lock_file.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run_wide_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory every xdist worker of this run shares (the run's base temp), else ours."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if "PYTEST_XDIST_WORKER" in os.environ else base


def _build_stages(stages: list[Stage], shared: Path) -> dict[str, Path]:
    """The stages before the image's, built once for the whole run.

    Whichever workers need the wheel, the first to get here compiles it into a
    directory all share, under a lock; the others wait and take it (its digest
    says it is complete and built from these sources). A stage built ahead for
    the run (``SAGEMAKER_GATEWAY_TEST_BUILD_STAGE``) is taken first.
    """
    stage_roots: dict[str, Path] = {}
    with _exclusive(shared / "build-stage.lock"):
        for stage in stages:
            built = prebuilt_stage(stage) or prebuilt_stage(stage, shared / "build-stage")
            if built is None:
                built = shared / "build-stage" / f"stage-{stage.name}"
                shutil.rmtree(built, ignore_errors=True)  # a build that was cut short
                built.mkdir(parents=True)
                run_stage_once(stage, built, stage_roots)
            stage_roots[stage.name] = built
    return stage_roots


@pytest.fixture(scope="session")
def docker_build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BuiltImage]:
    stages = parse_dockerfile(DOCKERFILE.read_text())
    stage_roots = _build_stages(stages[:-1], _run_wide_directory(tmp_path_factory))
    # The image's own stage (a virtualenv installing the wheel) is this worker's.
    stage_root = tmp_path_factory.mktemp("docker") / f"stage-{stages[-1].name}"
    stage_root.mkdir()
    image = run_stage_once(stages[-1], stage_root, stage_roots)
    wheels = sorted(stage_roots[stages[0].name].rglob("*.whl"))
    assert len(wheels) == 1, wheels
    image.wheel = wheels[0]
    yield image


@pytest.fixture(scope="session")
def plain_install(docker_build: BuiltImage, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same wheel installed alone in a clean virtualenv: no extras, no dev tools."""
    environment = tmp_path_factory.mktemp("plain") / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(environment)
    python = environment / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(docker_build.wheel)],
        check=True,
        capture_output=True,
        env=outside_the_checkout(),
    )
    return python


@pytest.fixture(scope="session")
def manylinux_wheel(docker_build: BuiltImage, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's compiled wheel, repaired by auditwheel to the manylinux tag it qualifies for."""
    out = tmp_path_factory.mktemp("manylinux")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "auditwheel",
            "repair",
            "--wheel-dir",
            str(out),
            str(docker_build.wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = out.glob("*.whl")
    return wheel
