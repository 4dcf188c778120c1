"""Bid requests nested deeper than MAX_DEPTH are invalid requests, whichever reader sees them.

orjson and msgspec read ~1000 levels; the standard library's reader (the
duplicate-key check) recurses per level and raised RecursionError there.
"""

from __future__ import annotations

import orjson
import pytest

from gateway.rtb import BidFilter, InProcessScorer, InvalidBidRequest
from gateway.rtb.request import (
    MAX_DEPTH,
    parse_bid_request,
    parse_record,
    refuse_duplicate_keys,
)
from gateway.rtb.synth import sample_bodies

BASE = orjson.loads(sample_bodies(1, seed=9)[0])


def nested(depth: int, *, opener: bytes = b'[{"a":', closer: bytes = b"}]") -> bytes:
    """``BASE`` with an unknown field nested so that the request is ``depth`` levels deep."""
    per_opener = opener.count(b"[") + opener.count(b"{")
    repeats, rest = divmod(depth - 1, per_opener)  # the root object is the first level
    inner = opener * repeats + b"[" * rest + b"1" + b"]" * rest + closer * repeats
    return orjson.dumps(BASE)[:-1] + b',"x_deep":' + inner + b"}"


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH])
def test_a_request_up_to_max_depth_is_read(depth: int) -> None:
    body = nested(depth)
    assert orjson.loads(body)["id"] == BASE["id"]  # the helper builds what it says
    assert parse_bid_request(body).id == BASE["id"]
    refuse_duplicate_keys(body)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000])
@pytest.mark.parametrize("form", [bytes, bytearray, memoryview, lambda b: b.decode()])
def test_a_deeper_request_is_an_invalid_request(depth: int, form: object) -> None:
    body = form(nested(depth))  # type: ignore[operator]
    with pytest.raises(InvalidBidRequest, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_record(body)


def test_arrays_alone_count_as_levels_and_strings_do_not() -> None:
    with pytest.raises(InvalidBidRequest, match="nested deeper"):
        parse_bid_request(nested(MAX_DEPTH + 1, opener=b"[", closer=b"]"))
    # Brackets inside strings (an escaped quote among them) are text, not levels.
    text = '"' + '[{\\"' * 200 + '"'
    body = orjson.dumps(BASE)[:-1] + b',"x_note":' + text.encode() + b"}"
    assert parse_bid_request(body).id == BASE["id"]


def test_the_duplicate_key_check_alone_refuses_what_its_reader_cannot_recurse_into() -> None:
    with pytest.raises(InvalidBidRequest, match="nested deeper"):
        refuse_duplicate_keys(nested(5000))


async def test_bid_filter_refuses_a_deep_request_at_submit() -> None:
    bid_filter = BidFilter(InProcessScorer(), "bid-filter")
    try:
        with pytest.raises(InvalidBidRequest, match="nested deeper"):
            await bid_filter.decide(nested(1000))
        decision = await bid_filter.decide(nested(MAX_DEPTH))
        assert decision.score is not None
    finally:
        await bid_filter.aclose()
