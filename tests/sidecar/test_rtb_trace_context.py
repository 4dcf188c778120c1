"""The OpenRTB proxy passes the caller's W3C trace context to the bidder only when valid."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from gateway._server.http import Server
from gateway.emulator import Emulator, EmulatorConfig
from gateway.rtb.bidder import ToyBidder
from gateway.sidecar import Sidecar
from gateway.sidecar._rtb import valid_traceparent, valid_tracestate
from tests.sidecar.test_rtb_proxy import BODY, KEEP, PATH, config

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (TRACEPARENT, True),
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future", True),
        (TRACEPARENT + "-extra", False),  # version 00 has exactly four fields
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", False),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", False),
        ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", False),
        (f"{TRACEPARENT},{TRACEPARENT}", False),  # two headers, comma-joined
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + "x" * 60_000, False),
        ("", False),
    ],
)
def test_traceparent_follows_w3c(value: str, valid: bool) -> None:
    assert valid_traceparent(value) is valid


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("vendor=1", True),
        ("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", True),
        ("rojo=1, ,congo=2", True),  # empty list members are allowed
        ("tenant@vendor=abc", True),
        ("rojo=1,rojo=2", False),  # a key at most once
        ("Upper=1", False),
        ("novalue", False),
        ("k=a,b", False),
        ("k=" + "v" * 600, False),
        (",".join(f"k{i}=v" for i in range(33)), False),
        ("k=va\x01lue", False),
    ],
)
def test_tracestate_follows_w3c(value: str, valid: bool) -> None:
    assert valid_tracestate(value) is valid


@pytest.fixture
async def proxy(bidder: tuple[ToyBidder, Server]) -> AsyncIterator[httpx.AsyncClient]:
    bidder_url = f"http://127.0.0.1:{bidder[1].port}/bid"
    async with (
        Emulator(EmulatorConfig.default(seed=2)) as emulator,
        Sidecar(config(emulator.url, [bidder_url]), "127.0.0.1", 0) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        assert sidecar.app.tracing is None
        yield http


async def test_invalid_trace_context_never_reaches_the_bidder(
    proxy: httpx.AsyncClient, bidder: tuple[ToyBidder, Server]
) -> None:
    sent = [
        [("traceparent", "00-" + "a" * 30_000), ("tracestate", "k=" + "v" * 30_000)],
        [("traceparent", TRACEPARENT), ("traceparent", TRACEPARENT), ("tracestate", "k=v")],
        [("traceparent", TRACEPARENT), ("tracestate", "k=v,k=w")],
        [("traceparent", TRACEPARENT), ("tracestate", "a=1")],
    ]
    for trace in sent:
        headers = [*KEEP.items(), *trace]
        assert (await proxy.post(PATH, content=BODY, headers=headers)).status_code == 200
    forwarded = [
        (request.headers.get("traceparent"), request.headers.get("tracestate"))
        for request in bidder[0].received
    ]
    # Before: the 30 KB values and the comma-joined pair went to the bidder as they came.
    assert forwarded == [
        (None, None),
        (None, None),  # two traceparent headers: invalid, and its tracestate with it
        (TRACEPARENT, None),
        (TRACEPARENT, "a=1"),
    ]
