"""The OpenRTB proxy's decoding does bounded work: gzip members and nesting depth.

A gzip body of many empty members took quadratic time to inflate on the event
loop (6 MiB: ~37 s, /livez waiting too); a request nested ~1000 deep raised
RecursionError in the duplicate-key check (a traceback per request).
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import zlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from gateway._server.http import start_server
from gateway.emulator import Emulator, EmulatorConfig
from gateway.rtb.bidder import ToyBidder
from gateway.rtb.request import MAX_DEPTH
from gateway.rtb.synth import sample_bodies
from gateway.sidecar import Sidecar
from gateway.sidecar import _rtb as rtb_module
from gateway.sidecar._rtb import MAX_GZIP_MEMBERS, BodyRefused, inflate
from tests.reliability.conftest import bounded
from tests.rtb.test_rtb_nesting import nested

PATH = "/openrtb2/auction"
BODY = orjson.dumps({**orjson.loads(sample_bodies(1, seed=4)[0]), "tmax": 5000})
EMPTY_MEMBER = gzip.compress(b"")
SIX_MIB = 6 * 1024 * 1024  # the sidecar's default max_body_bytes
# Far more than the bounded work takes, far less than the quadratic inflation did (~37 s).
GENEROUS_S = 10.0


@pytest.fixture
async def proxy(toy: ToyBidder) -> AsyncIterator[httpx.AsyncClient]:
    bidder = await start_server(toy.handle, "127.0.0.1", 0)
    config: dict[str, Any] = {
        "region": "us-east-1",
        "credentials": {"access_key_id": "AK", "secret_access_key": "SK"},
        "rtb": {"bidders": [f"http://127.0.0.1:{bidder.port}/bid"], "default_budget_ms": 2000.0},
    }
    try:
        async with Emulator(EmulatorConfig.default(seed=2)) as emulator:
            config["endpoint_url"] = emulator.url
            async with (
                Sidecar(config, "127.0.0.1", 0) as sidecar,
                httpx.AsyncClient(base_url=sidecar.url, timeout=GENEROUS_S * 5) as http,
            ):
                yield http
    finally:
        await bidder.close(grace=1.0)


@pytest.fixture
def toy() -> ToyBidder:
    return ToyBidder()


async def invalid_count(http: httpx.AsyncClient) -> float:
    for line in (await http.get("/metrics")).text.splitlines():
        if line.startswith("sagemaker_gateway_rtb_invalid_total "):
            return float(line.split()[1])
    raise AssertionError("no sagemaker_gateway_rtb_invalid_total in /metrics")


async def test_a_request_nested_too_deep_goes_unscored_without_a_traceback(
    proxy: httpx.AsyncClient, toy: ToyBidder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    bodies = [nested(MAX_DEPTH + 1), nested(1000)]
    for body in bodies:
        answer = await proxy.post(PATH, content=body)
        assert answer.headers["x-bid-filter-reason"] == "unreadable"

    assert [received.body for received in toy.received] == bodies  # a pre-filter never drops
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_6_mib_body_of_empty_gzip_members_is_refused_while_livez_answers(
    proxy: httpx.AsyncClient, toy: ToyBidder
) -> None:
    body = EMPTY_MEMBER * (SIX_MIB // len(EMPTY_MEMBER))
    bomb = asyncio.create_task(proxy.post(PATH, content=body, headers={"content-encoding": "gzip"}))
    live = await bounded(proxy.get("/livez"), GENEROUS_S)
    answer = await bounded(bomb, GENEROUS_S)

    assert live.status_code == 200
    assert answer.status_code == 413
    assert f"more than {MAX_GZIP_MEMBERS} members" in answer.text
    assert await invalid_count(proxy) == 1
    assert toy.received == []
    # And the proxy goes on reading gzip as before.
    ok = await proxy.post(PATH, content=gzip.compress(BODY), headers={"content-encoding": "gzip"})
    assert ok.status_code in (200, 204)


class _CountingInflater:
    """A real zlib decompressor whose input is counted."""

    def __init__(self, wbits: int, owner: _CountingZlib) -> None:
        self._inner = zlib.decompressobj(wbits)
        self._owner = owner

    def decompress(self, data: Any, max_length: int = 0) -> bytes:
        self._owner.fed += len(data)
        return self._inner.decompress(data, max_length)

    @property
    def eof(self) -> bool:
        return self._inner.eof

    @property
    def unconsumed_tail(self) -> bytes:
        return self._inner.unconsumed_tail

    @property
    def unused_data(self) -> bytes:
        return self._inner.unused_data


class _CountingZlib:
    """The proxy module's zlib, counting decompressors made and bytes fed to them."""

    error = zlib.error
    MAX_WBITS = zlib.MAX_WBITS

    def __init__(self, give_up_after: int) -> None:
        self.made = 0
        self.fed = 0
        self._give_up_after = give_up_after

    def decompressobj(self, wbits: int) -> _CountingInflater:
        self.made += 1
        if self.made > self._give_up_after:  # the old code's way: fail fast, not in minutes
            raise AssertionError(f"more than {self._give_up_after} decompressors")
        return _CountingInflater(wbits, self)


@pytest.mark.parametrize("members", [1_000, 300_000])
def test_many_empty_members_cost_at_most_the_member_cap_in_decompressors_and_one_read(
    monkeypatch: pytest.MonkeyPatch, members: int
) -> None:
    counting = _CountingZlib(give_up_after=10 * MAX_GZIP_MEMBERS)
    monkeypatch.setattr(rtb_module, "zlib", counting)
    body = EMPTY_MEMBER * members

    with pytest.raises(BodyRefused) as refused:
        inflate(body, 1024 * 1024)

    assert refused.value.status == 413
    assert counting.made == MAX_GZIP_MEMBERS
    # Each member is handed at most one slice it does not use (the old code: all the rest).
    assert counting.fed <= len(body) + MAX_GZIP_MEMBERS * rtb_module._INFLATE_SLICE


def test_up_to_the_member_cap_members_are_joined() -> None:
    parts = [gzip.compress(b"x%d," % n) for n in range(MAX_GZIP_MEMBERS)]
    assert inflate(b"".join(parts), 4096) == b"".join(b"x%d," % n for n in range(64))
    with pytest.raises(BodyRefused, match=f"more than {MAX_GZIP_MEMBERS} members"):
        inflate(b"".join(parts) + EMPTY_MEMBER, 4096)


def test_a_member_split_across_read_slices_inflates_whole() -> None:
    payload = bytes(range(256)) * 2000  # ~500 KiB that barely compresses: many slices
    body = gzip.compress(payload) + gzip.compress(b"tail")
    assert inflate(body, len(payload) + 4) == payload + b"tail"
    with pytest.raises(BodyRefused) as refused:
        inflate(body, len(payload) + 3)
    assert refused.value.status == 413
    with pytest.raises(BodyRefused, match="truncated"):
        inflate(body[:-1], len(payload) + 4)
