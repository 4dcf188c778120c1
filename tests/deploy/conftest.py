"""Session fixtures: the Dockerfile's stages run once (one wheel build); the plain wheel."""

from __future__ import annotations

import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy._docker import (
    DOCKERFILE,
    BuiltImage,
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


@pytest.fixture(scope="session")
def docker_build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BuiltImage]:
    stages = parse_dockerfile(DOCKERFILE.read_text())
    root = tmp_path_factory.mktemp("docker")
    stage_roots: dict[str, Path] = {}
    image: BuiltImage | None = None
    for stage in stages:
        prebuilt = prebuilt_stage(stage) if stage is not stages[-1] else None
        if prebuilt is not None:
            stage_roots[stage.name] = prebuilt
            continue
        stage_root = root / f"stage-{stage.name}"
        stage_root.mkdir()
        image = run_stage_once(stage, stage_root, stage_roots)
        stage_roots[stage.name] = stage_root
    assert image is not None
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
