"""Requests the HTTP server refuses are counted and logged; a draining sidecar
asks every client to reconnect (``Connection: close``)."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway import Gateway
from gateway.sidecar import Sidecar
from gateway.sidecar._config import SidecarConfig


def _rejected(text: str) -> dict[str, float]:
    for family in text_string_to_metric_families(text):
        if family.name == "sagemaker_gateway_sidecar_rejected":
            return {s.labels["reason"]: s.value for s in family.samples}
    return {}


async def _raw(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 5)  # the server closes after a refusal
    finally:
        writer.close()


async def test_a_request_the_parser_refuses_is_counted_and_logged(
    gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    config = SidecarConfig.from_mapping({"access_log": True})
    caplog.set_level(logging.INFO, logger="gateway.access")
    async with Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar:
        answer = await _raw(sidecar.port, b"GET /\x01bad HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400 ")
        async with httpx.AsyncClient(base_url=sidecar.url) as http:
            text = (await http.get("/metrics")).text
    assert _rejected(text)["bad_request"] == 1
    lines = [r for r in caplog.records if r.name == "gateway.access"]
    refused = [r for r in lines if r.status == 400]  # type: ignore[attr-defined]
    assert len(refused) == 1
    assert refused[0].error_code == "bad_request"  # type: ignore[attr-defined]


async def test_a_body_over_the_limit_is_counted_as_too_large(gateway: Gateway) -> None:
    config = SidecarConfig.from_mapping({"max_body_bytes": 16})
    sidecar = Sidecar(gateway, "127.0.0.1", 0, config=config)
    async with sidecar, httpx.AsyncClient(base_url=sidecar.url) as http:
        posted = await http.post("/endpoints/echo/invocations", content=b"x" * 64)
        assert posted.status_code == 413
        text = (await http.get("/metrics")).text
    assert _rejected(text)["too_large"] == 1


async def test_while_draining_every_answer_says_connection_close(gateway: Gateway) -> None:
    async with Sidecar(gateway, "127.0.0.1", 0) as sidecar:
        async with httpx.AsyncClient(base_url=sidecar.url) as http:
            before = await http.post("/endpoints/echo/invocations", content=b"x")
            assert "close" not in before.headers.get("connection", "")
            sidecar.draining = True
            during = await http.post("/endpoints/echo/invocations", content=b"x")
            ready = await http.get("/readyz")
        assert during.status_code == 200  # still serving
        assert during.headers["connection"] == "close"
        assert ready.status_code == 503 and ready.headers["connection"] == "close"
