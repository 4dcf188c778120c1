"""Proxy mode on what exchanges really send: loose types are scored, the unreadable go through.

A loose-typed request (the coercion table, docs/reference/rtb-loose-types.md) is scored
like its canonical form; a body the filter cannot read, or one over ``max_request_bytes``, is
forwarded to the bidder unscored (``x-bid-filter-reason: unreadable``) and
counted by reason, unless ``strict`` is set (then 400, or 413 when too large).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest

from gateway._server.http import Server
from gateway.emulator import Emulator
from gateway.rtb.bidder import ToyBidder
from gateway.sidecar import Sidecar
from tests.sidecar.test_rtb_proxy import BODY, KEEP, PATH, config, metrics, rtb_emulator

__all__ = ["rtb_emulator"]  # fixture used here

REQUEST = orjson.loads(BODY)


@asynccontextmanager
async def proxy_with(
    emulator: Emulator, bidder: tuple[ToyBidder, Server], **rtb: Any
) -> AsyncIterator[httpx.AsyncClient]:
    bidder_url = f"http://127.0.0.1:{bidder[1].port}/bid"
    async with (
        Sidecar(config(emulator.url, [bidder_url], **rtb), "127.0.0.1", 0) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        yield http


def loosened() -> bytes:
    """BODY with the loose types exchanges send: numeric ids, string floor, boolean secure."""
    request = orjson.loads(BODY)
    imp = request["imp"][0]
    imp["id"] = int(imp["id"]) if str(imp["id"]).isdigit() else 7
    imp["bidfloor"] = str(imp.get("bidfloor", 0.0))
    imp["secure"] = True
    request["tmax"] = str(request["tmax"])
    return orjson.dumps(request)


async def test_a_loose_request_is_scored_like_its_canonical_form(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    canonical = orjson.loads(BODY)
    canonical["imp"][0]["secure"] = 1
    async with proxy_with(rtb_emulator, bidder) as http:
        strict_form = await http.post(PATH, content=orjson.dumps(canonical), headers=KEEP)
        loose = await http.post(PATH, content=loosened(), headers=KEEP)
        assert (await metrics(http))["sagemaker_gateway_rtb_unreadable_total"] == 0
    assert (strict_form.status_code, loose.status_code) == (200, 200)
    assert loose.headers["x-bid-filter-reason"] == "scored_keep"
    assert loose.headers["x-bid-filter-score"] == strict_form.headers["x-bid-filter-score"]
    assert bidder[0].received[1].body == loosened()  # forwarded as received


# Nested past MAX_DEPTH (64) in an extension: no RecursionError, no traceback.
DEEP = orjson.dumps({**REQUEST, "ext": {"deep": []}}).replace(b"[]", b"[" * 1000 + b"]" * 1000)
UNREADABLE = [
    (b"{not json", "not_json"),
    (b'{"id": "x", "imp": []}', "invalid"),
    (orjson.dumps({**REQUEST, "tmax": "soon"}), "invalid"),
    (BODY.replace(b'"id":', b'"id":"decoy","id":', 1), "duplicate_key"),
    # Nested past MAX_DEPTH (64) in an extension: no RecursionError, no traceback.
    (
        orjson.dumps({**REQUEST, "ext": {"deep": []}}).replace(b"[]", b"[" * 1000 + b"]" * 1000),
        "too_deep",
    ),
]


@pytest.mark.parametrize(("body", "reason"), UNREADABLE)
async def test_an_unreadable_request_is_forwarded_unscored_and_counted(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server], body: bytes, reason: str
) -> None:
    bidder[0].status = 204  # the toy bidder cannot bid on these: its "no bid" comes back
    async with proxy_with(rtb_emulator, bidder) as http:
        answer = await http.post(PATH, content=body, headers=KEEP)
        counters = await metrics(http)
    assert answer.status_code == 204
    assert counters["sagemaker_gateway_rtb_bidder_responses_total{code=204}"] == 1
    assert answer.headers["x-bid-filter-reason"] == "unreadable"
    assert "x-bid-filter-score" not in answer.headers
    (forwarded,) = bidder[0].received
    assert forwarded.body == body and forwarded.headers["x-bid-filter-reason"] == "unreadable"
    assert counters["sagemaker_gateway_rtb_unreadable_total"] == 1
    assert counters[f"sagemaker_gateway_rtb_unreadable_by_reason_total{{reason={reason}}}"] == 1
    assert counters["sagemaker_gateway_rtb_invalid_total"] == 0
    assert rtb_emulator.stats.count("bid-filter") == 0  # nothing was scored


def padded(size: int) -> bytes:
    base = orjson.dumps({**REQUEST, "ext": {"pad": ""}})
    return base.replace(b'"pad":""', b'"pad":"' + b"x" * (size - len(base)) + b'"')


async def test_a_request_over_the_size_limit_is_forwarded_unscored(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    big = padded(70_000)
    async with proxy_with(rtb_emulator, bidder) as http:
        answer = await http.post(PATH, content=big, headers=KEEP)
        counters = await metrics(http)
    assert (answer.status_code, answer.headers["x-bid-filter-reason"]) == (200, "unreadable")
    assert bidder[0].received[0].body == big
    assert counters["sagemaker_gateway_rtb_unreadable_by_reason_total{reason=too_large}"] == 1


async def test_the_size_limit_is_a_setting(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    async with proxy_with(rtb_emulator, bidder, max_request_bytes=128 * 1024) as http:
        answer = await http.post(PATH, content=padded(70_000), headers=KEEP)
    assert answer.headers["x-bid-filter-reason"] == "scored_keep"


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (padded(70_000), 413, "request too large: 70000 bytes > limit 65536"),
        (orjson.dumps({**REQUEST, "tmax": "soon"}), 400, "tmax: expected integer, got string"),
    ],
)
async def test_strict_mode_refuses_instead(
    rtb_emulator: Emulator,
    bidder: tuple[ToyBidder, Server],
    body: bytes,
    status: int,
    message: str,
) -> None:
    async with proxy_with(rtb_emulator, bidder, strict=True) as http:
        answer = await http.post(PATH, content=body, headers=KEEP)
        counters = await metrics(http)
    assert (answer.status_code, answer.text) == (status, message)
    assert bidder[0].received == []
    assert (
        counters["sagemaker_gateway_rtb_invalid_total"],
        counters.get("sagemaker_gateway_rtb_unreadable_total"),
    ) == (1, 0)


async def test_out_of_vocabulary_values_are_exported_per_feature(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    unseen = orjson.loads(BODY)
    unseen["app" if "app" in unseen else "site"]["publisher"] = {"id": "never-seen-publisher"}
    async with proxy_with(rtb_emulator, bidder) as http:
        await http.post(PATH, content=BODY, headers=KEEP)
        await http.post(PATH, content=orjson.dumps(unseen), headers=KEEP)
        counters = await metrics(http)
    assert counters["sagemaker_gateway_rtb_feature_rows_total"] == 2
    assert counters["sagemaker_gateway_rtb_out_of_vocabulary_total{feature=advertiser}"] == 1
    assert counters["sagemaker_gateway_rtb_out_of_vocabulary_total{feature=format}"] == 0
