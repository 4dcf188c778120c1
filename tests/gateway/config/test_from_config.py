"""``Gateway.from_config`` reads a config as the sidecar does: environment
overrides and secrets from ``*_file`` keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway import Gateway
from gateway.emulator import Emulator
from gateway.errors import ConfigError
from tests.gateway.conftest import ACCESS_KEY, SECRET_KEY


def _toml(tmp_path: Path, secret: Path) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(
        'region = "us-east-1"\n'
        'endpoint_url = "http://127.0.0.1:9"\n'  # nothing listens: the variable must win
        "[credentials]\n"
        f'access_key_id = "{ACCESS_KEY}"\n'
        f'secret_access_key_file = "{secret}"\n'
    )
    return path


async def test_environment_overrides_and_secret_files_are_honoured(
    emulator: Emulator, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text(f"{SECRET_KEY}\n")
    environ = {"SAGEMAKER_GATEWAY__ENDPOINT_URL": emulator.url}
    async with Gateway.from_config(_toml(tmp_path, secret), environ) as gateway:
        result = await gateway.invoke("echo", b"hello", timeout=5)
    assert result.body == b"hello"  # signed with the file's secret, sent to the variable's URL


async def test_a_mapping_source_reads_the_process_environment(
    emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SECRET_KEY)
    monkeypatch.setenv("SAGEMAKER_GATEWAY__ENDPOINT_URL", emulator.url)
    mapping = {
        "region": "us-east-1",
        "credentials": {"access_key_id": ACCESS_KEY, "secret_access_key_file": str(secret)},
    }
    async with Gateway.from_config(mapping) as gateway:
        assert (await gateway.invoke("echo", b"x", timeout=5)).body == b"x"


def test_a_bad_variable_is_named_in_the_error(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SECRET_KEY)
    with pytest.raises(ConfigError, match="SAGEMAKER_GATEWAY__POOL__MAX_CONECTIONS"):
        Gateway.from_config(
            _toml(tmp_path, secret), {"SAGEMAKER_GATEWAY__POOL__MAX_CONECTIONS": "4"}
        )
