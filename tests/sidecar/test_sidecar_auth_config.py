"""Inbound auth, the bind rule, and the [sidecar] table's validation."""

from __future__ import annotations

import asyncio
import io
import logging
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from gateway import Gateway
from gateway.errors import ConfigError
from gateway.sidecar import AuthSettings, Sidecar, SidecarConfig
from gateway.sidecar._logging import JsonFormatter
from tests.sidecar.conftest import ClientFactory

TOKEN = "a-bearer-token-of-some-length"


def _local_url(sidecar: Sidecar) -> str:
    # Bound to 0.0.0.0 for the test, but traffic only ever goes to loopback.
    return f"http://127.0.0.1:{sidecar.port}"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "sidecar.internal"])
async def test_non_loopback_without_auth_refuses_to_start(gateway: Gateway, host: str) -> None:
    with pytest.raises(ConfigError, match=r"sidecar\.auth\.mode"):
        async with Sidecar(gateway, host, 0):
            pass


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.2.1", "localhost"])
def test_loopback_names(host: str) -> None:
    SidecarConfig().check_bind(host)


async def test_bearer_auth(gateway: Gateway, boto_client: ClientFactory) -> None:
    config = SidecarConfig(auth=AuthSettings(mode="bearer", token=TOKEN))
    async with (
        Sidecar(gateway, "0.0.0.0", 0, config=config) as sidecar,
        httpx.AsyncClient(base_url=_local_url(sidecar)) as http,
    ):
        path = "/endpoints/echo/invocations"
        missing = await http.post(path, content=b"x")
        assert missing.status_code == 403
        assert missing.headers["x-amzn-errortype"].startswith(
            "MissingAuthenticationTokenException:"
        )
        wrong = await http.post(path, content=b"x", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 403
        assert wrong.headers["x-amzn-errortype"].startswith("UnrecognizedClientException:")
        right = await http.post(path, content=b"x", headers={"Authorization": f"Bearer {TOKEN}"})
        assert right.status_code == 200 and right.content == b"x"

        # An AWS SDK can send the token from a before-send hook.
        client = boto_client(_local_url(sidecar))

        def bearer(request: Any, **_: Any) -> None:
            request.headers["Authorization"] = f"Bearer {TOKEN}"

        client.meta.events.register_last("before-send.sagemaker-runtime.InvokeEndpoint", bearer)

        def call() -> bytes:
            body: bytes = client.invoke_endpoint(EndpointName="echo", Body=b"sdk")["Body"].read()
            return body

        assert await asyncio.to_thread(call) == b"sdk"
        assert sidecar.app.metrics.rejected == {"auth": 2}


async def test_sigv4_auth(gateway: Gateway, boto_client: ClientFactory) -> None:
    auth = AuthSettings(mode="sigv4", credentials={"AKIDCLIENT": "client-secret"})
    async with Sidecar(gateway, "0.0.0.0", 0, config=SidecarConfig(auth=auth)) as sidecar:
        url = _local_url(sidecar)
        good = boto_client(url, access_key="AKIDCLIENT", secret="client-secret")

        def call() -> bytes:
            body: bytes = good.invoke_endpoint(EndpointName="echo", Body=b"signed")["Body"].read()
            return body

        assert await asyncio.to_thread(call) == b"signed"
        wrong_secret = boto_client(url, access_key="AKIDCLIENT", secret="not-it")
        with pytest.raises(ClientError) as caught:
            await asyncio.to_thread(wrong_secret.invoke_endpoint, EndpointName="echo", Body=b"x")
        assert caught.value.response["Error"]["Code"] == "InvalidSignatureException"
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        unknown = boto_client(url, access_key="AKIDOTHER", secret="client-secret")
        with pytest.raises(ClientError) as caught:
            await asyncio.to_thread(unknown.invoke_endpoint, EndpointName="echo", Body=b"x")
        assert caught.value.response["Error"]["Code"] == "UnrecognizedClientException"
        async with httpx.AsyncClient(base_url=url) as http:
            unsigned = await http.post("/endpoints/echo/invocations", content=b"x")
        assert unsigned.status_code == 403


async def test_loopback_accepts_any_signature(sidecar: Sidecar, boto_client: ClientFactory) -> None:
    client = boto_client(sidecar.url, access_key="WHATEVER", secret="anything")

    def call() -> bytes:
        body: bytes = client.invoke_endpoint(EndpointName="echo", Body=b"ok")["Body"].read()
        return body

    assert await asyncio.to_thread(call) == b"ok"
    async with httpx.AsyncClient(base_url=sidecar.url) as http:
        unsigned = await http.post("/endpoints/echo/invocations", content=b"raw")
    assert unsigned.status_code == 200 and unsigned.content == b"raw"


def test_config_defaults_and_full_table() -> None:
    assert SidecarConfig.from_mapping({}) == SidecarConfig()
    config = SidecarConfig.from_mapping(
        {
            "listen": "0.0.0.0:9000",
            "max_in_flight": 64,
            "shutdown_grace_s": 3,
            "header_timeout_s": 1.5,
            "body_timeout_s": 2,
            "idle_timeout_s": 30,
            "max_body_bytes": 1024,
            "default_timeout_ms": 25,
            "auth": {"mode": "sigv4", "credentials": {"AKID": "secret-value"}},
        }
    )
    assert config.max_in_flight == 64 and config.default_timeout_ms == 25.0
    assert config.auth.credentials == {"AKID": "secret-value"}
    config.check_bind("0.0.0.0")  # auth configured: allowed


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"max_in_flight": 0}, "sidecar.max_in_flight"),
        ({"max_in_flight": "10"}, "sidecar.max_in_flight"),
        ({"shutdown_grace_s": -1}, "sidecar.shutdown_grace_s"),
        ({"header_timeout_s": True}, "sidecar.header_timeout_s"),
        ({"listen": "nowhere"}, "sidecar.listen"),
        ({"max_body_bytes": 1.5}, "sidecar.max_body_bytes"),
        ({"default_timeout_ms": 0}, "sidecar.default_timeout_ms"),
        ({"colour": "blue"}, "sidecar.colour"),
        ({"auth": "bearer"}, "sidecar.auth"),
        ({"auth": {"mode": "magic"}}, "sidecar.auth.mode"),
        ({"auth": {"mode": "bearer"}}, "sidecar.auth.token"),
        ({"auth": {"mode": "bearer", "token": "short"}}, "sidecar.auth.token"),
        ({"auth": {"mode": "sigv4"}}, "sidecar.auth.credentials"),
        ({"auth": {"mode": "sigv4", "credentials": {"AKID": 3}}}, "sidecar.auth.credentials.AKID"),
        ({"auth": {"mode": "none", "extra": 1}}, "sidecar.auth.extra"),
    ],
)
def test_config_errors_name_the_key(table: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SidecarConfig.from_mapping(table)
    assert str(caught.value).startswith(f"config error at {key}:")


def test_secrets_are_redacted() -> None:
    config = SidecarConfig.from_mapping(
        {"auth": {"mode": "bearer", "token": TOKEN, "credentials": {"AKID": "s3cr3t-value"}}}
    )
    text = repr(config)
    assert TOKEN not in text and "s3cr3t-value" not in text
    assert "bearer" in text
    with pytest.raises(ConfigError) as caught:
        SidecarConfig.from_mapping({"auth": {"mode": "bearer", "token": "tiny"}})
    assert "tiny" not in str(caught.value)


async def test_sidecar_section_of_the_gateway_config(emulator: Any) -> None:
    mapping = {
        "region": "us-east-1",
        "endpoint_url": emulator.url,
        "credentials": {"access_key_id": "AK", "secret_access_key": "SK"},
        "sidecar": {"listen": "127.0.0.1:0", "max_in_flight": 7},
    }
    async with Sidecar(mapping) as sidecar:
        assert sidecar.config.max_in_flight == 7
        async with httpx.AsyncClient(base_url=sidecar.url) as http:
            response = await http.post("/endpoints/echo/invocations", content=b"own gateway")
        assert response.content == b"own gateway"
    with pytest.raises(ConfigError, match=r"sidecar\.max_in_flight"):
        Sidecar({**mapping, "sidecar": {"max_in_flight": -1}})


def test_log_lines_are_json_and_never_carry_credentials() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("gateway.sidecar.test")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning(
            "refused",
            extra={"authorization": "AWS4-HMAC-SHA256 Credential=AKID", "route": "echo"},
        )
    finally:
        log.removeHandler(handler)
    import orjson

    entry = orjson.loads(stream.getvalue())
    assert entry["message"] == "refused" and entry["route"] == "echo"
    assert entry["authorization"] == "<redacted>"
    assert "AWS4" not in stream.getvalue()
