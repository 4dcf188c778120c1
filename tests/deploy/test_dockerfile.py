"""The image, built and run from the Dockerfile's own steps (see conftest), and the plain wheel.

Slow: the session builds the wheel once (mypyc); every test here shares it.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway._server import processes
from tests.deploy._docker import DOCKERFILE, BuiltImage, parse_dockerfile

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

EMULATOR_TOML = """
[auth]
credentials = { AKIDEMU = "emulator-secret" }
[endpoints.echo]
"""
REDIS_WITHOUT_THE_EXTRA = (
    *("--upstream", "http://127.0.0.1:1", "--region", "us-east-1"),
    *("--redis", "redis://127.0.0.1:6379/0"),
)
TOKEN = "a-bearer-token-of-32-characters!"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _gateway(python: Path, command: str) -> list[str]:
    return [str(python), "-m", "gateway", command]


def _outside_the_checkout() -> dict[str, str]:
    # Nothing from this checkout on the path: the installed wheel is what runs.
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


@pytest.fixture
def emulator_url(docker_build: BuiltImage, tmp_path: Path) -> Iterator[str]:
    config = tmp_path / "emulator.toml"
    config.write_text(EMULATOR_TOML)
    process = processes.start(
        [
            *_gateway(docker_build.python, "emulator"),
            "--listen",
            "127.0.0.1:0",
            "--config",
            str(config),
        ],
        env=_outside_the_checkout(),
    )
    try:
        yield processes.read_ready_line(process, "emulator listening on ", "emulator", 60)
    finally:
        processes.terminate(process)


def test_the_dockerfile_is_multi_stage_slim_non_root_with_a_healthcheck() -> None:
    stages = parse_dockerfile(DOCKERFILE.read_text())
    assert len(stages) == 2
    build, runtime = stages
    assert any(k == "RUN" and "pip wheel" in v for k, v in build.instructions)
    assert re.fullmatch(r"python:3\.\d+-slim@sha256:[0-9a-f]{64}", runtime.image)
    keywords = dict(runtime.instructions)
    assert keywords["USER"].split(":")[0] not in {"0", "root"}
    assert '"gateway", "sidecar"' in keywords["ENTRYPOINT"]
    # Every package the wheel holds is copied into the build stage.
    project = tomllib.loads((DOCKERFILE.parent / "pyproject.toml").read_text())
    packages = {
        name.rstrip("*") for name in project["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    copied = {v.split()[0] for k, v in build.instructions if k == "COPY"}
    assert packages <= copied, packages - copied


def test_the_healthcheck_asks_the_admin_listener_not_the_traffic_port() -> None:
    runtime = parse_dockerfile(DOCKERFILE.read_text())[-1]
    keywords = dict(runtime.instructions)
    env = dict(token.partition("=")[::2] for token in shlex.split(keywords["ENV"]))
    admin_port = env["SAGEMAKER_GATEWAY__SIDECAR__ADMIN_LISTEN"].rsplit(":", 1)[1]
    traffic_port = env["SAGEMAKER_GATEWAY__SIDECAR__LISTEN"].rsplit(":", 1)[1]
    assert admin_port == "9091" and traffic_port != admin_port
    (asked,) = re.findall(r"http://127\.0\.0\.1:(\d+)(/\w+)", keywords["HEALTHCHECK"])
    assert asked == (admin_port, "/livez")
    assert set(keywords["EXPOSE"].split()) == {traffic_port, admin_port}


def test_both_stages_build_on_one_base_image_pinned_by_digest() -> None:
    stages = parse_dockerfile(DOCKERFILE.read_text())
    images = {stage.image for stage in stages}
    (image,) = images  # the wheel is compiled against the Python it runs on
    assert re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", image), image
    # The file says where the digest came from and how to refresh it.
    assert "docker buildx imagetools inspect python:3.11-slim" in DOCKERFILE.read_text()


def test_the_runtime_stage_installs_the_locked_dependencies_by_hash() -> None:
    runtime = parse_dockerfile(DOCKERFILE.read_text())[-1]
    runs = [value for keyword, value in runtime.instructions if keyword == "RUN"]
    (install,) = [run for run in runs if "pip install" in run]
    assert "--require-hashes -r requirements-image.lock" in install
    assert "--no-deps dist/*.whl" in install and "pip check" in install
    assert ("COPY", "requirements-image.lock ./") in runtime.instructions


def test_the_image_installs_a_compiled_hot_path(docker_build: BuiltImage) -> None:
    result = subprocess.run(
        [
            str(docker_build.python),
            "-c",
            "from gateway._host.build import build_kind; print(build_kind())",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=docker_build.root,
        env=_outside_the_checkout(),
    )
    assert result.stdout.strip() == "compiled"


def test_the_image_command_serves_with_workers_and_passes_its_healthcheck(
    docker_build: BuiltImage, emulator_url: str, tmp_path: Path
) -> None:
    port, admin_port = _free_port(), _free_port()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'region = "us-east-1"\nendpoint_url = "{emulator_url}"\n'
        '[credentials]\naccess_key_id = "AKIDEMU"\nsecret_access_key = "emulator-secret"\n'
    )
    # As `docker run -e ... -v gateway.toml:/etc/sagemaker-gateway/gateway.toml` would.
    env = docker_build.environment(
        SAGEMAKER_GATEWAY__SIDECAR__LISTEN=f"0.0.0.0:{port}",
        SAGEMAKER_GATEWAY__SIDECAR__ADMIN_LISTEN=f"127.0.0.1:{admin_port}",
        SAGEMAKER_GATEWAY__SIDECAR__WORKERS="2",
        SAGEMAKER_GATEWAY__SIDECAR__DRAIN_S="0",
        SAGEMAKER_GATEWAY__SIDECAR__AUTH__MODE="bearer",
        SAGEMAKER_GATEWAY__SIDECAR__AUTH__TOKEN_FILE=str(token_file),
    )
    command = docker_build.command()
    assert command[-2:] == ["--config", "/etc/sagemaker-gateway/gateway.toml"]
    command[-1] = str(config)
    sidecar = processes.start(command, env=env)
    try:
        url = processes.read_ready_line(sidecar, "sidecar listening on ", "sidecar", 60)
        healthcheck = [
            str(docker_build.python)
            if part == "python"
            else part.replace(":9091/", f":{admin_port}/")
            for part in docker_build.healthcheck
        ]
        # No credentials: the admin listener needs none although the traffic port does.
        assert subprocess.run(healthcheck, env=env, timeout=30, check=False).returncode == 0
        with httpx.Client(base_url=url) as http:
            assert http.get("/readyz").status_code == 200
            refused = http.post("/endpoints/echo/invocations", content=b"x")
            assert refused.status_code in (401, 403)
            answer = http.post(
                "/endpoints/echo/invocations",
                content=b"through the image",
                headers={"authorization": f"Bearer {TOKEN}"},
            )
            assert answer.status_code == 200 and answer.content == b"through the image"
    finally:
        code = processes.terminate(sidecar, grace=30)
    assert code == 0


def test_the_plain_wheel_runs_the_demo_the_emulator_and_the_sidecar(
    plain_install: Path, tmp_path: Path
) -> None:
    env = _outside_the_checkout()
    version = subprocess.run(
        [str(plain_install.parent / "sagemaker-gateway"), "--version"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    assert version.stdout.startswith("sagemaker-gateway ")
    # No extras: none of the optional packages came along.
    for optional in ("redis", "xgboost", "matplotlib", "numpy", "pytest"):
        probe = subprocess.run(
            [str(plain_install), "-c", f"import {optional}"], capture_output=True, env=env
        )
        assert probe.returncode != 0, f"{optional} is installed without its extra"
    demo = subprocess.run(
        [str(plain_install), "-m", "gateway", "demo", "--duration", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert demo.returncode == 0, demo.stderr
    assert "Summary" in demo.stdout and "requests/s" in demo.stdout


def test_the_plain_wheel_refuses_a_redis_tier_in_one_line(plain_install: Path) -> None:
    result = subprocess.run(
        [*_gateway(plain_install, "sidecar"), *REDIS_WITHOUT_THE_EXTRA],
        capture_output=True,
        text=True,
        timeout=60,
        env={**_outside_the_checkout(), "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"},
    )
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert "pip install 'sagemaker-gateway[redis]'" in lines[0]
