"""A toy ad server (bidder) for the demo, the examples and the tests.

It stands behind the RTB proxy where a real ad server would: every OpenRTB
bid request it receives gets one bid, priced a little above the first
impression's floor. ``status`` makes it answer something else (204 no bid,
500), to exercise the proxy's handling of a bidder that passes or fails.
A gzipped request (``Content-Encoding: gzip``) is read inflated.
"""

from __future__ import annotations

import gzip
from typing import Any

import orjson

from gateway._server.http import Request, Response, Server, start_server

__all__ = ["ToyBidder"]

_JSON = (("Content-Type", "application/json"),)


class ToyBidder:
    """Bids on everything; remembers what it received. ``async with`` or start/close."""

    def __init__(self, path: str = "/bid", status: int = 200, keep_requests: bool = True) -> None:
        self.path = path
        self.status = status
        self.requests = 0
        self.received: list[Request] = []
        self._keep = keep_requests  # off for long runs: the demo sends thousands
        self._server: Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start the bidder first"
        return f"http://127.0.0.1:{self._server.port}{self.path}"

    async def start(self) -> str:
        self._server = await start_server(self.handle, "127.0.0.1", 0)
        return self.url

    async def close(self) -> None:
        if self._server is not None:
            await self._server.close(grace=1.0)
            self._server = None

    async def __aenter__(self) -> ToyBidder:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def handle(self, request: Request) -> Response:
        self.requests += 1
        if self._keep:
            self.received.append(request)
        if self.status != 200:
            return Response(self.status)
        body = request.body
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        return Response(200, _JSON, orjson.dumps(bid_for(orjson.loads(body))))


def bid_for(request: dict[str, Any]) -> dict[str, Any]:
    """One bid on the first impression, 10% above its floor (at least 0.55)."""
    imp = request["imp"][0]
    price = max(float(imp.get("bidfloor", 0.0)), 0.5) * 1.1
    bid = {"id": "1", "impid": imp["id"], "price": round(price, 4), "adm": "<ad/>"}
    return {"id": request["id"], "seatbid": [{"seat": "toy", "bid": [bid]}], "cur": "USD"}
