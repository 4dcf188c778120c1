"""In strict mode the OpenRTB proxy refuses a bid request that repeats a key, before any
bidder sees it (without strict it forwards it unscored: test_rtb_proxy_loose.py)."""

from __future__ import annotations

from gateway._server.http import Server
from gateway.emulator import Emulator
from gateway.rtb.bidder import ToyBidder
from tests.sidecar.test_rtb_proxy import BODY, KEEP, PATH, rtb_emulator
from tests.sidecar.test_rtb_proxy_loose import proxy_with

__all__ = ["rtb_emulator"]  # fixture used here


async def test_a_repeated_key_is_a_400_and_never_forwarded(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    decoy = BODY.replace(b'"id":', b'"id":"decoy","id":', 1)
    async with proxy_with(rtb_emulator, bidder, strict=True) as proxy:
        answer = await proxy.post(PATH, content=decoy, headers=KEEP)
        assert answer.status_code == 400
        assert "duplicate key 'id'" in answer.text
        clean = await proxy.post(PATH, content=BODY, headers=KEEP)
        assert clean.status_code == 200
    assert bidder[0].requests == 1
