"""The benchmark's boto3-shaped request (``bench.instructions --sdk-headers``) is boto3's."""

from __future__ import annotations

import asyncio
from typing import Any

import boto3
import httptools
from botocore.awsrequest import AWSResponse

from bench._stub import StubServer
from bench.instructions import _drive
from bench.sidecar_load import build_request
from bench.sidecar_vs_nginx import SidecarUnderTest

# What http.client adds on the wire to the fields botocore hands it.
_ADDED_BY_HTTP_CLIENT = {"host", "accept-encoding"}


class _Fields:
    def __init__(self) -> None:
        self.names: list[str] = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.names.append(name.decode().lower())


def field_names(request: bytes) -> set[str]:
    fields = _Fields()
    httptools.HttpRequestParser(fields).feed_data(request)
    return set(fields.names)


def _botocore_field_names() -> set[str]:
    """The fields botocore sends for invoke_endpoint (captured before sending)."""
    captured: dict[str, Any] = {}

    def before_send(request: Any, **_: Any) -> AWSResponse:
        captured.update(request.headers)
        return AWSResponse(request.url, 200, {"Content-Type": "application/json"}, None)

    client = boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="AKID",
        aws_secret_access_key="secret",
    )
    client.meta.events.register("before-send", before_send)
    client.invoke_endpoint(
        EndpointName="bench-model",
        Body=b'{"x": 1}',
        ContentType="application/json",
        Accept="application/json",
    )
    return {name.lower() for name in captured}


def test_the_sdk_shaped_request_has_the_fields_boto3_sends() -> None:
    shaped = field_names(build_request("127.0.0.1:1", sdk_headers=True))
    assert shaped - _ADDED_BY_HTTP_CLIENT == _botocore_field_names()
    plain = field_names(build_request("127.0.0.1:1"))
    assert len(plain) == 4 and plain < shaped


def test_a_sidecar_answers_every_sdk_shaped_request() -> None:
    with StubServer() as stub:
        sidecar = SidecarUnderTest(stub.url)
        try:
            port = int(sidecar.url.rsplit(":", 1)[1])
            assert asyncio.run(_drive(port, 40, 4, sdk_headers=True)) == 0
        finally:
            sidecar.stop()
