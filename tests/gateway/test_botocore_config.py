"""botocore's configuration, honoured: CA bundles, the user agent, retry settings, the
route template for bare endpoint names, and Config options compat cannot honour."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
from botocore.config import Config

from bench._stub import make_certificate
from gateway import Gateway, __version__, compat, errors
from gateway.emulator import Emulator
from tests.gateway.conftest import ACCESS_KEY, SECRET_KEY, StubRequest, StubServer

CREDENTIALS = {"aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET_KEY}


@pytest.fixture(autouse=True)
def _clean_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Only what a test sets: no machine-wide AWS_CA_BUNDLE, profile or retry mode."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    yield


# -- CA bundles ---------------------------------------------------------------------


async def _ok(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok")
    return True


@pytest.fixture
async def tls_server(stub_server: Any, tmp_path: Path) -> tuple[StubServer, Path]:
    certificate = make_certificate(tmp_path)
    return await stub_server(_ok, ssl=certificate.server_context()), Path(certificate.cert_file)


async def _invoke(gateway: Gateway) -> bytes:
    async with gateway:
        return (await gateway.invoke("ep", b"x", timeout=5)).body


async def test_a_ca_bundle_verifies_the_endpoint(
    tls_server: tuple[StubServer, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, cert_file = tls_server
    common: dict[str, Any] = {"endpoint_url": server.url, "credentials": ("AK", "SK")}
    untrusted = Gateway("us-east-1", **common)
    with pytest.raises(errors.ConnectError):
        await _invoke(untrusted)
    assert await _invoke(Gateway("us-east-1", ca_bundle=str(cert_file), **common)) == b"ok"
    monkeypatch.setenv("AWS_CA_BUNDLE", str(cert_file))
    assert await _invoke(Gateway("us-east-1", **common)) == b"ok"


async def test_a_profile_ca_bundle_and_compat_verify_path(
    tls_server: tuple[StubServer, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server, cert_file = tls_server
    config_file = tmp_path / "config"
    config_file.write_text(f"[profile pinned]\nca_bundle = {cert_file}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config_file))
    gateway = Gateway(
        "us-east-1", endpoint_url=server.url, credentials=("A", "S"), profile="pinned"
    )
    assert await _invoke(gateway) == b"ok"
    async with compat.create_client(
        "sagemaker-runtime",
        region_name="us-east-1",
        endpoint_url=server.url,
        verify=str(cert_file),
        **CREDENTIALS,
    ) as client:
        response = await client.invoke_endpoint(EndpointName="ep", Body=b"x")
        assert await response["Body"].read() == b"ok"


def test_a_missing_ca_bundle_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="ca_bundle"):
        Gateway("us-east-1", ca_bundle=str(tmp_path / "missing.pem"))


# -- the user agent -----------------------------------------------------------------


async def test_user_agent_extra_and_appid(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with compat.create_client(
        "sagemaker-runtime",
        region_name="us-east-1",
        endpoint_url=emulator.url,
        config=Config(user_agent_extra="bidder/2.1", user_agent_appid="dsp-east"),
        **CREDENTIALS,
    ) as client:
        await client.invoke_endpoint(EndpointName="echo", Body=b"x")
    agent = dict(emulator.recorded[-1].headers)["user-agent"]
    assert agent == f"sagemaker-gateway/{__version__} app/dsp-east bidder/2.1"
    # The app id botocore reads from the environment (or a profile's sdk_ua_app_id).
    monkeypatch.setenv("AWS_SDK_UA_APP_ID", "from-env")
    async with Gateway(
        "us-east-1", endpoint_url=emulator.url, credentials=(ACCESS_KEY, SECRET_KEY)
    ) as gw:
        await gw.invoke("echo", b"x")
    agent = dict(emulator.recorded[-1].headers)["user-agent"]
    assert agent == f"sagemaker-gateway/{__version__} app/from-env"


# -- retries ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retries", "environment", "total"),
    [
        ({"max_attempts": 3}, {}, 4),  # botocore counts retries after the first attempt
        ({"total_max_attempts": 3}, {}, 3),
        ({"max_attempts": 0}, {}, 1),
        ({"mode": "standard", "total_max_attempts": 5}, {}, 5),
        (None, {"AWS_MAX_ATTEMPTS": "6"}, 6),  # total, as botocore reads it
        ({"total_max_attempts": 2}, {"AWS_MAX_ATTEMPTS": "6"}, 2),  # Config wins
    ],
)
def test_compat_retry_settings_become_the_route_policy(
    monkeypatch: pytest.MonkeyPatch,
    retries: dict[str, Any] | None,
    environment: dict[str, str],
    total: int,
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    config = Config(retries=retries) if retries is not None else None
    client = compat.create_client(
        "sagemaker-runtime", region_name="us-east-1", config=config, **CREDENTIALS
    )
    assert client.gateway.route("any-endpoint").config.retry.max_attempts == total


def test_unsupported_compat_settings_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    refused: list[Config] = [
        Config(retries={"mode": "adaptive"}),
        Config(proxies={"https": "http://proxy:3128"}),
        Config(client_cert="/path/cert.pem"),
        Config(signature_version="v4a"),
        Config(parameter_validation=False),
        Config(tcp_keepalive=False),
        Config(defaults_mode="standard"),
        Config(user_agent="replaced/1.0"),
    ]
    for config in refused:
        with pytest.raises(botocore.exceptions.InvalidConfigError, match=r"gateway\.compat"):
            compat.create_client(
                "sagemaker-runtime", region_name="us-east-1", config=config, **CREDENTIALS
            )
    monkeypatch.setenv("AWS_RETRY_MODE", "adaptive")
    with pytest.raises(botocore.exceptions.InvalidConfigError, match="adaptive"):
        compat.create_client("sagemaker-runtime", region_name="us-east-1", **CREDENTIALS)


async def test_compat_settings_with_a_wrapped_gateway_are_refused(emulator: Emulator) -> None:
    gateway = Gateway("us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK"))
    with pytest.raises(botocore.exceptions.InvalidConfigError):
        compat.create_client(
            "sagemaker-runtime", gateway=gateway, config=Config(retries={"max_attempts": 5})
        )


async def test_retry_attempts_count_what_was_sent(emulator: Emulator) -> None:
    emulator.set_faults("echo", error_rates={"ServiceUnavailable": 1.0})
    async with compat.create_client(
        "sagemaker-runtime",
        region_name="us-east-1",
        endpoint_url=emulator.url,
        config=Config(retries={"total_max_attempts": 3}),
        **CREDENTIALS,
    ) as client:
        before = len(emulator.recorded)
        with pytest.raises(botocore.exceptions.ClientError) as raised:
            await client.invoke_endpoint(EndpointName="echo", Body=b"x")
    sent = len(emulator.recorded) - before
    assert sent == 3
    assert raised.value.response["ResponseMetadata"]["RetryAttempts"] == sent - 1


async def test_a_defaults_template_shapes_bare_endpoint_routes(
    emulator: Emulator, tmp_path: Path
) -> None:
    config_file = tmp_path / "gateway.toml"
    config_file.write_text(
        f'region = "us-east-1"\nendpoint_url = "{emulator.url}"\n'
        f'[credentials]\naccess_key_id = "{ACCESS_KEY}"\nsecret_access_key = "{SECRET_KEY}"\n'
        "[defaults]\ntimeout_ms = 750\n[defaults.retry]\nmax_attempts = 4\n"
    )
    emulator.set_faults("echo", error_rates={"InternalFailure": 1.0})
    async with Gateway.from_config(config_file) as gw:
        route = gw.route("echo")
        assert (route.config.retry.max_attempts, route.config.timeout_ms) == (4, 750)
        before = len(emulator.recorded)
        with pytest.raises(errors.InternalFailure) as raised:
            await gw.invoke("echo", b"x", cache=False)
    assert len(emulator.recorded) - before == raised.value.attempts == 4
    with pytest.raises(errors.ConfigError, match=r"defaults\.targets"):
        Gateway(defaults={"targets": ["x"]})
    with pytest.raises(errors.ConfigError, match=r"defaults\.retry\.max_attempts"):
        Gateway(defaults={"retry": {"max_attempts": 0}})
