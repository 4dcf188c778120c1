"""The Dockerfile's steps, run without Docker (the session fixtures are in conftest).

``docker_build`` parses the repository's ``Dockerfile`` and runs its stages
in order on this machine: each stage gets a clean virtualenv (its ``FROM
python:X.Y-slim@sha256:...``; the Python running the tests must be that X.Y), its
``WORKDIR`` becomes a directory of its own, ``COPY`` copies from the
repository (or from an earlier stage's directory with ``--from``), and every
``RUN`` line runs verbatim with ``sh -c`` in that directory, with the stage's
virtualenv first on ``PATH``. The one kind of line not run is the system
package manager's (``apt-get``): what it installs (a C compiler) is checked
for instead. ``ENV``, ``ENTRYPOINT``, ``CMD`` and ``HEALTHCHECK`` are kept
for the tests that run the image's command.

Building the wheel compiles the hot path with mypyc (about a minute or two),
so every test that needs the wheel shares this one session-scoped build. CI
compiles it once for the whole run: ``python -m tests.deploy._docker DIRECTORY``
runs the build stages into DIRECTORY, and with ``SAGEMAKER_GATEWAY_TEST_BUILD_STAGE``
naming it the session uses them instead of running them again, for as long as
nothing they copied from the checkout has changed (else it builds its own).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
_PACKAGE_MANAGER = re.compile(r"^\s*apt-get\b")
# A directory `python -m tests.deploy._docker` built the wheel's stages into.
BUILD_STAGE_ENV = "SAGEMAKER_GATEWAY_TEST_BUILD_STAGE"


@dataclass
class Stage:
    name: str
    image: str
    instructions: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class BuiltImage:
    """The runtime stage, installed: its virtualenv and the image's run settings."""

    root: Path
    python: Path
    env: dict[str, str]
    entrypoint: list[str]
    cmd: list[str]
    healthcheck: list[str]
    user: str
    wheel: Path
    run_lines: list[str]

    def command(self, *args: str) -> list[str]:
        """ENTRYPOINT with ``args`` (or CMD), the image's ``python`` replaced by the venv's."""
        command = [*self.entrypoint, *(args or self.cmd)]
        return [str(self.python) if part == "python" else part for part in command]

    def environment(self, **extra: str) -> dict[str, str]:
        base = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("SAGEMAKER_GATEWAY", "PYTHON", "VIRTUAL_ENV"))
        }
        return {**base, **self.env, **extra}


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages and their instructions (line continuations joined, comments dropped)."""
    logical: list[str] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(name, parts[0]))
        else:
            stages[-1].instructions.append((keyword, rest.strip()))
    return stages


def _exec_form(value: str) -> list[str]:
    parsed = json.loads(value) if value.startswith("[") else shlex.split(value)
    assert isinstance(parsed, list)
    return [str(part) for part in parsed]


def _copy(source: Path, destination: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, destination, dirs_exist_ok=True, ignore=_ignored)
    else:
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)


def _ignored(directory: str, names: list[str]) -> set[str]:
    # .dockerignore's intent: no caches or in-place builds in the context.
    return {n for n in names if n in {"__pycache__", ".mypy_cache"} or n.endswith(".so")}


def run_stage(stage: Stage, stage_root: Path, stage_roots: dict[str, Path]) -> BuiltImage:
    version = re.fullmatch(
        r"python:(\d+)\.(\d+)(?:\.\d+)?-slim(?:@sha256:[0-9a-f]{64})?", stage.image
    )
    assert version, f"unexpected base image {stage.image}"
    assert sys.version_info[:2] == (int(version[1]), int(version[2])), (
        f"the Dockerfile builds on {stage.image}; run the tests on that Python"
    )
    environment = stage_root / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(environment)
    python = environment / "bin" / "python"
    workdir = stage_root
    image = BuiltImage(stage_root, python, {}, [], [], [], "", Path(), [])
    for keyword, value in stage.instructions:
        if keyword == "WORKDIR":
            workdir = stage_root / value.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif keyword == "COPY":
            parts = value.split()
            source_root = ROOT
            if parts[0].startswith("--from="):
                source_root = stage_roots[parts.pop(0).removeprefix("--from=")]
            *sources, target = parts
            for source in sources:
                path = source_root / source.lstrip("/")
                destination = workdir / target
                if target.endswith("/") or len(sources) > 1:
                    destination = destination / path.name
                _copy(path, destination)
        elif keyword == "RUN":
            if _PACKAGE_MANAGER.match(value):
                assert shutil.which("gcc") or shutil.which("cc"), "no C compiler for the build"
                continue
            image.run_lines.append(value)
            env = {
                **os.environ,
                "PATH": f"{environment / 'bin'}{os.pathsep}{os.environ['PATH']}",
                "VIRTUAL_ENV": str(environment),
            }
            for name in ("PYTHONPATH", "SAGEMAKER_GATEWAY_BUILD"):
                env.pop(name, None)
            result = subprocess.run(
                ["sh", "-c", value], cwd=workdir, env=env, capture_output=True, text=True
            )
            assert result.returncode == 0, f"RUN {value}\n{result.stdout}\n{result.stderr}"
        elif keyword == "ENV":
            image.env.update(_env_pairs(value))
        elif keyword == "USER":
            image.user = value
        elif keyword == "ENTRYPOINT":
            image.entrypoint = _exec_form(value)
        elif keyword == "CMD":
            image.cmd = _exec_form(value)
        elif keyword == "HEALTHCHECK":
            image.healthcheck = _exec_form(value.split(" CMD ", 1)[1].strip())
    return image


def _copied_files(path: Path) -> list[Path]:
    """The files a ``COPY`` of ``path`` copies (what ``_copy`` does not ignore), sorted."""
    if not path.is_dir():
        return [path]
    found: list[Path] = []
    for directory, subdirectories, names in os.walk(path):
        dropped = _ignored(directory, [*subdirectories, *names])
        subdirectories[:] = sorted(d for d in subdirectories if d not in dropped)
        found += [Path(directory, name) for name in names if name not in dropped]
    return sorted(found)


def stage_digest(stage: Stage) -> str:
    """What a stage's result depends on: the Python, its instructions, the files it copies."""
    digest = hashlib.sha256(repr((sys.version, stage.image, stage.instructions)).encode())
    for keyword, value in stage.instructions:
        if keyword != "COPY" or value.startswith("--from="):
            continue
        *sources, _ = value.split()
        for source in sources:
            for file in _copied_files(ROOT / source.lstrip("/")):
                digest.update(f"{file.relative_to(ROOT)}\0".encode())
                digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def _digest_file(stage_root: Path) -> Path:
    return stage_root.with_name(stage_root.name + ".sha256")


def run_stage_once(stage: Stage, stage_root: Path, stage_roots: dict[str, Path]) -> BuiltImage:
    """``run_stage``, then a record of what it was built from (written last: it marks success)."""
    image = run_stage(stage, stage_root, stage_roots)
    _digest_file(stage_root).write_text(stage_digest(stage) + "\n")
    return image


def prebuilt_stage(stage: Stage, directory: Path | str | None = None) -> Path | None:
    """The stage as built into ``directory`` (by default the one ``python -m
    tests.deploy._docker`` built, if asked for), if it is there and still current."""
    directory = directory or os.environ.get(BUILD_STAGE_ENV)
    if not directory:
        return None
    stage_root = Path(directory) / f"stage-{stage.name}"
    recorded = _digest_file(stage_root)
    if not recorded.is_file() or recorded.read_text().strip() != stage_digest(stage):
        return None
    return stage_root


def build_stages(root: Path) -> Path:
    """Every stage before the last (the wheel's build) into ``root``; the wheel it built."""
    stages = parse_dockerfile(DOCKERFILE.read_text())
    stage_roots: dict[str, Path] = {}
    for stage in stages[:-1]:
        stage_root = root / f"stage-{stage.name}"
        shutil.rmtree(stage_root, ignore_errors=True)
        _digest_file(stage_root).unlink(missing_ok=True)
        stage_root.mkdir(parents=True)
        run_stage_once(stage, stage_root, stage_roots)
        stage_roots[stage.name] = stage_root
    (wheel,) = stage_roots[stages[0].name].rglob("*.whl")
    return wheel


def _env_pairs(value: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for token in shlex.split(value):
        key, _, item = token.partition("=")
        pairs[key] = item
    return pairs


def outside_the_checkout() -> dict[str, str]:
    """This environment without PYTHONPATH: the checkout (and any metadata a
    development install left in it) must not stand in for what pip installs."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def fresh_venv(root: Path, *requirements: str) -> Path:
    """A new virtualenv under ``root`` with ``requirements`` pip-installed; its python."""
    environment = root / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(environment)
    python = environment / "bin" / "python"
    if requirements:
        result = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *requirements],
            capture_output=True,
            text=True,
            timeout=600,
            env=outside_the_checkout(),
        )
        assert result.returncode == 0, result.stdout + result.stderr
    return python


if __name__ == "__main__":
    # CI: build the wheel once, before the suites that use it (see the module's docstring).
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m tests.deploy._docker DIRECTORY")
    print(build_stages(Path(sys.argv[1]).resolve()))
