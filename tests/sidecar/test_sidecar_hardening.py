"""/metrics behind inbound auth, and numeric headers that are a caller's mistake."""

from __future__ import annotations

import httpx
import pytest

from gateway import Gateway
from gateway.sidecar import AuthSettings, Sidecar, SidecarConfig

TOKEN = "a-bearer-token-of-some-length"


@pytest.mark.parametrize("metrics_auth", [True, False])
async def test_metrics_follow_inbound_auth_unless_opened(
    gateway: Gateway, metrics_auth: bool
) -> None:
    config = SidecarConfig(auth=AuthSettings(mode="bearer", token=TOKEN), metrics_auth=metrics_auth)
    async with (
        Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url) as http,
    ):
        anonymous = await http.get("/metrics")
        authorised = await http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        ping = await http.get("/ping")
    assert authorised.status_code == 200 and b"sidecar_" in authorised.content
    if metrics_auth:
        assert anonymous.status_code == 403
        assert anonymous.headers["x-amzn-errortype"].startswith(
            "MissingAuthenticationTokenException"
        )
    else:
        assert anonymous.status_code == 200
    assert ping.status_code == 200  # health checks never need the token


def test_metrics_auth_is_protected_by_default_and_read_from_the_table() -> None:
    assert SidecarConfig().metrics_auth is True
    assert SidecarConfig.from_mapping({"metrics_auth": False}).metrics_auth is False
    assert SidecarConfig.from_mapping({"write_timeout_s": 2.5}).write_timeout_s == 2.5


@pytest.mark.parametrize(
    "value",
    ["\u00b2", "1\u00b9\u00b3", "1" * 5000, "12a", "-1", ""],
    ids=["superscript", "digits-and-superscripts", "5000-digits", "letters", "negative", "empty"],
)
@pytest.mark.parametrize(
    "header",
    ["X-Amzn-SageMaker-RequestTTLSeconds", "X-Amzn-SageMaker-InvocationTimeoutSeconds"],
)
async def test_bad_integer_headers_are_400_validation_errors(
    sidecar: Sidecar, header: str, value: str
) -> None:
    async with httpx.AsyncClient(base_url=sidecar.url) as http:
        response = await http.post(
            "/endpoints/echo/async-invocations",
            headers={
                "X-Amzn-SageMaker-InputLocation": "s3://bucket/input.json",
                # Latin-1 on the wire: the server reads the superscripts back as
                # characters str.isdigit() accepts and int() refuses.
                header: value.encode("latin-1"),
            },
        )
    assert response.status_code == 400, response.text
    assert response.headers["x-amzn-errortype"].startswith("ValidationError")
