"""Fixtures: emulator -> Gateway -> sidecar (all in-process), and unmodified boto3 clients."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from gateway import Gateway
from gateway._server.http import Server, start_server
from gateway.emulator import Emulator, EmulatorConfig
from gateway.rtb.bidder import ToyBidder
from gateway.sidecar import Sidecar
from tests._boto import ClientFactory, boto_clients

EMULATOR_CONFIG: dict[str, Any] = {
    "seed": 5,
    "auth": {"credentials": {"AK": "SK"}},
    "endpoints": {
        "echo": {},
        "constant": {"model": {"type": "constant", "body": "0.25", "content_type": "text/csv"}},
        "mme": {"mme": {"models": ["a.tar.gz", "b.tar.gz"], "cold_load_ms": 1, "max_loaded": 2}},
        "ab": {"variants": [{"name": "blue", "weight": 1}, {"name": "green", "weight": 1}]},
        "slow": {"latency": {"base_ms": 300.0}},
        "a": {},
        "b": {},
    },
}


@pytest.fixture(autouse=True)
def _clean_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may pick up the machine's AWS configuration by accident."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.from_dict(EMULATOR_CONFIG)) as emu:
        yield emu


def make_gateway(emulator: Emulator, **kwargs: Any) -> Gateway:
    return Gateway(
        region="us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK"), **kwargs
    )


@pytest.fixture
async def gateway(emulator: Emulator) -> AsyncIterator[Gateway]:
    async with make_gateway(emulator) as gw:
        yield gw


@pytest.fixture
async def sidecar(gateway: Gateway) -> AsyncIterator[Sidecar]:
    async with Sidecar(gateway, "127.0.0.1", 0) as running:
        yield running


@pytest.fixture
async def bidder() -> AsyncIterator[tuple[ToyBidder, Server]]:
    """A toy ad server behind the OpenRTB proxy, on a free loopback port."""
    toy = ToyBidder()
    server = await start_server(toy.handle, "127.0.0.1", 0)
    try:
        yield toy, server
    finally:
        await server.close(grace=1.0)


@pytest.fixture
def boto_client() -> Iterator[ClientFactory]:
    """``boto_client(url)``: fake credentials, retries off; closed afterwards."""
    yield from boto_clients("AKIDCLIENT", "client-secret")
