"""Inbound SigV4 on both servers: a valid signature for the wrong scope is refused.

The requests are signed correctly with the right key; only what the signature
is for differs: another region, another host, or an x-amz* header the
signature does not cover. Each must be a 403 in AWS's error shape.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from gateway import Gateway
from gateway._aws.sigv4 import Credentials, SigV4Signer
from gateway.emulator import Emulator, EmulatorConfig
from gateway.sidecar import AuthSettings, Sidecar, SidecarConfig

PATH = "/endpoints/echo/invocations"


@dataclass(frozen=True, slots=True)
class Signed:
    url: str
    credentials: Credentials


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    config = EmulatorConfig.from_dict(
        {"seed": 1, "auth": {"credentials": {"AK": "SK"}}, "endpoints": {"echo": {}}}
    )
    async with Emulator(config) as running:
        yield running


@pytest.fixture(params=["emulator", "sidecar"])
async def server(request: pytest.FixtureRequest, emulator: Emulator) -> AsyncIterator[Signed]:
    if request.param == "emulator":
        yield Signed(emulator.url, Credentials("AK", "SK"))
        return
    auth = AuthSettings(mode="sigv4", credentials={"AKIDCLIENT": "client-secret"})
    async with (
        Gateway(region="us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK")) as gw,
        Sidecar(gw, "127.0.0.1", 0, config=SidecarConfig(auth=auth)) as sidecar,
    ):
        yield Signed(sidecar.url, Credentials("AKIDCLIENT", "client-secret"))


def _signed_headers(
    server: Signed,
    body: bytes,
    *,
    region: str = "us-east-1",
    host: str | None = None,
    signed_extra: tuple[tuple[str, str], ...] = (),
) -> dict[str, str]:
    amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    host = host or server.url.removeprefix("http://")
    pairs = [("host", host), ("x-amz-date", amz_date), *signed_extra]
    authorization = SigV4Signer(region).authorization(
        "POST",
        PATH,
        sorted(pairs),
        hashlib.sha256(body).hexdigest(),
        server.credentials,
        amz_date,
    )
    return {**dict(pairs), "authorization": authorization}


async def _post(server: Signed, headers: dict[str, str], body: bytes) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url) as http:
        return await http.post(PATH, content=body, headers=headers)


def _assert_refused(response: httpx.Response, words: str) -> None:
    assert response.status_code == 403, response.text
    assert response.headers["x-amzn-errortype"].startswith("InvalidSignatureException")
    assert words in response.json()["message"]


async def test_the_right_scope_is_accepted(server: Signed) -> None:
    headers = _signed_headers(server, b"ok")
    # The trace id is never signed by botocore: it may be added in between.
    headers["x-amzn-trace-id"] = "Root=1-abc"
    response = await _post(server, headers, b"ok")
    assert response.status_code == 200 and response.content == b"ok"


async def test_a_signature_for_another_region_is_refused(server: Signed) -> None:
    response = await _post(server, _signed_headers(server, b"x", region="eu-west-1"), b"x")
    _assert_refused(response, "valid region, not 'eu-west-1'")


@pytest.mark.parametrize(
    "host", ["runtime.sagemaker.us-east-1.amazonaws.com", "203.0.113.9:8080", "[2001:db8::1]:443"]
)
async def test_a_signature_for_another_host_is_refused(server: Signed, host: str) -> None:
    response = await _post(server, _signed_headers(server, b"x", host=host), b"x")
    _assert_refused(response, host)


@pytest.mark.parametrize("host", ["localhost:1", "127.0.0.2", "[::1]:9"])
async def test_this_machine_under_another_name_or_port_is_accepted(
    server: Signed, host: str
) -> None:
    """Proxies and port mappings change the port; loopback names are this machine."""
    response = await _post(server, _signed_headers(server, b"z", host=host), b"z")
    assert response.status_code == 200 and response.content == b"z"


async def test_configured_host_names_are_accepted(emulator: Emulator) -> None:
    auth = AuthSettings(
        mode="sigv4",
        credentials={"AKIDCLIENT": "client-secret"},
        hosts=("sidecar.prod.internal",),
    )
    async with (
        Gateway(region="us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK")) as gw,
        Sidecar(gw, "127.0.0.1", 0, config=SidecarConfig(auth=auth)) as sidecar,
    ):
        server = Signed(sidecar.url, Credentials("AKIDCLIENT", "client-secret"))
        named = _signed_headers(server, b"n", host="sidecar.prod.internal:443")
        other = _signed_headers(server, b"n", host="other.prod.internal:443")
        assert (await _post(server, named, b"n")).status_code == 200
        _assert_refused(await _post(server, other, b"n"), "other.prod.internal")


@pytest.mark.parametrize(
    "name", ["x-amzn-sagemaker-target-variant", "x-amz-security-token", "X-Amzn-SageMaker-X"]
)
async def test_an_unsigned_amz_header_is_refused(server: Signed, name: str) -> None:
    headers = _signed_headers(server, b"x")
    headers[name] = "added-after-signing"
    response = await _post(server, headers, b"x")
    _assert_refused(response, f"not signed: {name.lower()}")


async def test_a_signed_amz_header_is_accepted(server: Signed) -> None:
    extra = (("x-amzn-sagemaker-custom-attributes", "k=v"),)
    response = await _post(server, _signed_headers(server, b"y", signed_extra=extra), b"y")
    assert response.status_code == 200 and response.content == b"y"
