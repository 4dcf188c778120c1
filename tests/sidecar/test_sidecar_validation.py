"""A caller's mistake through the sidecar: 400 ValidationError in rest-json, never a 500,
and never a header silently dropped."""

from __future__ import annotations

import httpx
import orjson
import pytest

from gateway.emulator import Emulator
from gateway.sidecar import Sidecar


async def post(url: str, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.post(url + path, content=b"{}", headers=headers or {})


def assert_validation_error(response: httpx.Response, *fragments: str) -> None:
    assert response.status_code == 400, response.text
    assert response.headers["x-amzn-errortype"].startswith("ValidationError:")
    assert response.headers["content-type"] == "application/json"
    message = orjson.loads(response.content)["message"]
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(
    "path",
    [
        "/endpoints//invocations",
        "/endpoints//invocations-response-stream",
        "/endpoints//async-invocations",
        "/endpoints/under_score/invocations",
        f"/endpoints/{'a' * 64}/invocations",
        "/endpoints/a%2Fb/invocations",
    ],
)
async def test_bad_endpoint_names_are_validation_errors(
    sidecar: Sidecar, emulator: Emulator, path: str
) -> None:
    headers = {"X-Amzn-SageMaker-InputLocation": "s3://b/k"} if "async" in path else {}
    assert_validation_error(await post(sidecar.url, path, headers), "invalid endpoint name")
    assert emulator.recorded == []


@pytest.mark.parametrize(
    ("path", "header"),
    [
        ("/endpoints/echo/invocations", "X-Amzn-SageMaker-Not-A-Member"),
        # A member of another operation is not one of this operation's.
        ("/endpoints/echo/invocations", "X-Amzn-SageMaker-Filename"),
        ("/endpoints/echo/invocations-response-stream", "X-Amzn-SageMaker-Target-Model"),
        ("/endpoints/echo/async-invocations", "X-Amzn-SageMaker-Session-Id"),
    ],
)
async def test_unknown_sagemaker_headers_are_refused(
    sidecar: Sidecar, emulator: Emulator, path: str, header: str
) -> None:
    response = await post(sidecar.url, path, {header: "value"})
    assert_validation_error(response, header.lower())
    assert emulator.recorded == []


async def test_out_of_bounds_values_are_validation_errors(
    sidecar: Sidecar, emulator: Emulator
) -> None:
    response = await post(
        sidecar.url,
        "/endpoints/echo/invocations",
        {"X-Amzn-SageMaker-Custom-Attributes": "a" * 1025},
    )
    assert_validation_error(response, "CustomAttributes")
    response = await post(
        sidecar.url,
        "/endpoints/echo/async-invocations",
        {"X-Amzn-SageMaker-RequestTTLSeconds": "5", "X-Amzn-SageMaker-InputLocation": "s3://b/k"},
    )
    assert_validation_error(response, "RequestTTLSeconds")
    assert emulator.recorded == []
