"""Where calls go: the regional runtime host (FIPS, dual-stack), a VPC interface
endpoint, and the endpoint variables of the environment, resolved as botocore does.
Independent of the transport, so it runs once."""

from __future__ import annotations

from typing import Any

import pytest

from gateway import Gateway, errors
from gateway._transport import TransportStats
from gateway._wire import Origin, PreparedRequest, RawResponse

# -- resolution --------------------------------------------------------------


class _NoNetwork:
    """A transport that records the origins it is started with and sends nothing."""

    def __init__(self) -> None:
        self.stats = TransportStats()
        self.origins: list[Origin] = []

    async def start(self, origins: list[Origin]) -> None:
        self.origins = origins

    async def request(self, request: PreparedRequest, deadline: float) -> RawResponse:
        raise AssertionError("no request expected")

    async def stream(self, request: PreparedRequest, deadline: float) -> Any:
        raise AssertionError("no request expected")

    async def aclose(self) -> None:
        return None


async def resolved_url(**arguments: Any) -> str:
    gw = Gateway(credentials=("a", "b"), transport=_NoNetwork(), **arguments)
    async with gw:
        origin = gw.origin
        assert origin is not None
        return f"{origin.scheme}://{origin.host_header}"


@pytest.mark.parametrize(
    ("arguments", "url"),
    [
        ({"region": "us-east-1"}, "https://runtime.sagemaker.us-east-1.amazonaws.com"),
        ({"region": "eu-central-1"}, "https://runtime.sagemaker.eu-central-1.amazonaws.com"),
        (
            {"region": "us-east-1", "use_fips_endpoint": True},
            "https://runtime-fips.sagemaker.us-east-1.amazonaws.com",
        ),
        (
            {"region": "us-west-2", "use_dualstack_endpoint": True},
            "https://runtime.sagemaker.us-west-2.api.aws",
        ),
        (
            {
                "region": "us-east-1",
                "endpoint_url": "https://vpce-0a1b2c3d-e4f5.runtime.sagemaker.us-east-1.vpce.amazonaws.com",
            },
            "https://vpce-0a1b2c3d-e4f5.runtime.sagemaker.us-east-1.vpce.amazonaws.com",
        ),
    ],
)
async def test_endpoint_resolution(arguments: dict[str, Any], url: str) -> None:
    assert await resolved_url(**arguments) == url


async def test_endpoint_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://general.example:8080")
    assert await resolved_url(region="us-east-1") == "http://general.example:8080"
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", "http://specific.example:9090")
    assert await resolved_url(region="us-east-1") == "http://specific.example:9090"
    # an explicit endpoint_url wins over both
    assert (
        await resolved_url(region="us-east-1", endpoint_url="http://explicit.example")
        == "http://explicit.example"
    )
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    assert await resolved_url() == "https://runtime.sagemaker.ap-south-1.amazonaws.com"


async def test_no_region_is_a_config_error() -> None:
    with pytest.raises(errors.ConfigError, match="region"):
        await resolved_url()
