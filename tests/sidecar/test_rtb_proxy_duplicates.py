"""The OpenRTB proxy refuses a bid request that repeats a key, before any bidder sees it."""

from __future__ import annotations

import httpx

from gateway._server.http import Server
from gateway.rtb.bidder import ToyBidder
from tests.sidecar.test_rtb_proxy import BODY, KEEP, PATH, proxy, rtb_emulator

__all__ = ["proxy", "rtb_emulator"]  # fixtures used here


async def test_a_repeated_key_is_a_400_and_never_forwarded(
    proxy: httpx.AsyncClient, bidder: tuple[ToyBidder, Server]
) -> None:
    decoy = BODY.replace(b'"id":', b'"id":"decoy","id":', 1)
    answer = await proxy.post(PATH, content=decoy, headers=KEEP)
    assert answer.status_code == 400
    assert "duplicate key 'id'" in answer.text
    clean = await proxy.post(PATH, content=BODY, headers=KEEP)
    assert clean.status_code == 200
    assert bidder[0].requests == 1
