"""Redaction at decode, seen from the sidecar: a secret an upstream echoes into its answer
never reaches the admin ``/metrics`` (which needs no credentials), the access log's
``error_code``, the sidecar's spans or its log lines; a code or request id that is not
well-formed reads ``other``. The issue's shape: ``attempt_errors_total{code="<token>"}``."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.sidecar import Sidecar
from gateway.sidecar._logging import JsonFormatter
from tests._echoing_upstream import SECRETS, echoing_upstream, holds
from tests.gateway.invoke.test_redaction import _span_text
from tests.gateway.invoke.test_redaction import spans as spans  # a fixture

TOKEN_HEADER = "x-amzn-sagemaker-customer-identity-token"
ATTRIBUTES_HEADER = "x-amzn-sagemaker-custom-attributes"
# Each runtime's call through the sidecar: path, headers but the secret's, the secret's header.
CALLS: dict[str, tuple[str, dict[str, str], str]] = {
    "InvokeEndpoint": ("/endpoints/ep/invocations", {}, ATTRIBUTES_HEADER),
    "InvokeEndpointWithResponseStream": (
        "/endpoints/ep/invocations-response-stream",
        {},
        ATTRIBUTES_HEADER,
    ),
    "InvokeInferenceRouter": (
        "/inference-routers/r1/invocations",
        {"x-amzn-sagemaker-routing-target-name": "t"},
        ATTRIBUTES_HEADER,
    ),
    "InvokeGlobalInferenceGateway": (
        "/global-inference-gateway/gw1/invocations",
        {"content-type": "application/json"},
        TOKEN_HEADER,
    ),
}
FIELDS = ("request_id", "error_type", "type_body", "message", "model_error", "ok_request_id")


@pytest.fixture
def access_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("gateway.access")
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)


@pytest.mark.parametrize(
    "operation",
    [
        # The router and Global Inference Gateway operations need their runtimes' models.
        op
        if op.startswith("InvokeEndpoint")
        else pytest.param(op, marks=pytest.mark.newer_runtimes)
        for op in sorted(CALLS)
    ],
)
async def test_an_echoed_secret_reaches_no_sidecar_sink(
    operation: str,
    spans: Any,
    access_lines: io.StringIO,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    path, headers, secret_header = CALLS[operation]
    async with echoing_upstream() as upstream:
        config = {
            "region": "us-east-1",
            "endpoint_url": upstream.url,
            "credentials": {"access_key_id": "AK", "secret_access_key": "SK"},
            "defaults": {"retry": {"max_attempts": 1}},
            "sidecar": {
                "listen": "127.0.0.1:0",
                "admin_listen": "127.0.0.1:0",
                "access_log": True,
            },
        }
        async with Sidecar(config) as sidecar:
            assert sidecar.admin_url is not None and sidecar.app.tracing is not None
            async with (
                httpx.AsyncClient(base_url=sidecar.url, timeout=10) as client,
                httpx.AsyncClient(base_url=sidecar.admin_url, timeout=10) as admin,
            ):
                for field in FIELDS:
                    for kind, secret in SECRETS.items():
                        where = f"{operation} {field} {kind}"
                        upstream.into = field
                        access_lines.seek(0)
                        access_lines.truncate()
                        spans.clear()
                        answer = await client.post(
                            path, content=b"{}", headers={**headers, secret_header: secret}
                        )
                        assert upstream.seen[-1] == secret, where
                        (line,) = [orjson.loads(t) for t in access_lines.getvalue().splitlines()]
                        if field in ("error_type", "type_body"):
                            assert answer.status_code == 400, where
                            assert line["error_code"] == "other", where
                        sinks = {
                            "admin /metrics": (await admin.get("/metrics")).text,
                            "access log": access_lines.getvalue(),
                            "spans": _span_text(spans),
                            # (the gateway's own: the test's HTTP client logs what it got)
                            "logs": "\n".join(
                                f"{record.getMessage()} {vars(record)}"
                                for record in caplog.records
                                if record.name.startswith("gateway")
                            ),
                        }
                        for sink, text in sinks.items():
                            assert not holds(text, secret), f"{where}: {sink}"
