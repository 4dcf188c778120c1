"""Where calls go: the regional runtime host (FIPS, dual-stack), a VPC interface
endpoint, and the endpoint variables of the environment, resolved as botocore does.
Independent of the transport, so it runs once."""

from __future__ import annotations

from typing import Any

import pytest

from gateway import Gateway, errors
from gateway._http.interfaces import TransportStats
from gateway._http.message import Origin, RawResponse
from gateway._http.request import PreparedRequest

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


# -- the same host as boto3, in the same environment ------------------------------

_PROFILE_FILE = """
[default]
region = us-east-1

[profile fips]
region = us-east-1
use_fips_endpoint = true

[profile dual]
region = eu-west-1
use_dualstack_endpoint = true

[profile configured]
region = us-east-1
endpoint_url = http://from-profile.example:7000
"""


def boto3_url(region: str | None, profile: str | None, **config: Any) -> str:
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(profile_name=profile)
    client = session.client(
        "sagemaker-runtime",
        region_name=region,
        aws_access_key_id="a",
        aws_secret_access_key="b",
        config=Config(**config),
    )
    try:
        return str(client.meta.endpoint_url)
    finally:
        client.close()


@pytest.mark.parametrize(
    ("environment", "region", "profile", "config"),
    [
        ({"AWS_USE_FIPS_ENDPOINT": "true"}, "us-east-1", None, {}),
        ({"AWS_USE_DUALSTACK_ENDPOINT": "true"}, "us-west-2", None, {}),
        (
            {"AWS_USE_FIPS_ENDPOINT": "true", "AWS_USE_DUALSTACK_ENDPOINT": "true"},
            "us-east-1",
            None,
            {},
        ),
        ({}, None, "fips", {}),
        ({}, None, "dual", {}),
        ({"AWS_PROFILE": "fips"}, None, None, {}),
        ({}, "us-east-1", "fips", {"use_fips_endpoint": False}),  # the caller said so
        ({"AWS_USE_FIPS_ENDPOINT": "true"}, "us-east-1", None, {"use_fips_endpoint": False}),
        ({}, "us-east-1", None, {"use_fips_endpoint": True, "use_dualstack_endpoint": True}),
        ({"AWS_ENDPOINT_URL": "http://general.example:8080"}, "us-east-1", None, {}),
        (
            {
                "AWS_ENDPOINT_URL": "http://general.example:8080",
                "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true",
            },
            "us-east-1",
            None,
            {},
        ),
        ({}, None, "configured", {}),
        ({"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"}, None, "configured", {}),
        ({}, None, "configured", {"ignore_configured_endpoint_urls": True}),
        (
            {"AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": "http://specific.example:9090"},
            "us-east-1",
            None,
            {"ignore_configured_endpoint_urls": True},
        ),
        ({}, "cn-north-1", None, {}),
        ({"AWS_USE_DUALSTACK_ENDPOINT": "true"}, "cn-northwest-1", None, {}),
        ({}, "us-gov-west-1", None, {}),
        ({"AWS_USE_FIPS_ENDPOINT": "true"}, "us-gov-west-1", None, {}),
        ({"AWS_USE_FIPS_ENDPOINT": "true"}, "us-gov-east-1", None, {}),
    ],
)
async def test_the_host_boto3_resolves(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
    environment: dict[str, str],
    region: str | None,
    profile: str | None,
    config: dict[str, bool],
) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    config_file = tmp_path / "config"
    config_file.write_text(_PROFILE_FILE)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config_file))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    expected = boto3_url(region, profile, **config)
    ours = await resolved_url(region=region, profile=profile, **config)
    assert ours == expected.rstrip("/")
