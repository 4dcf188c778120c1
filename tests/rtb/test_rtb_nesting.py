"""Bid requests nested deeper than MAX_DEPTH are invalid requests, whichever reader sees them.

orjson and msgspec read ~1000 levels; the standard library's reader (the
duplicate-key check) recurses per level and raised RecursionError there.
"""

from __future__ import annotations

import orjson
import pytest

from gateway.rtb import BidFilter, InProcessScorer, InvalidBidRequest, Reason
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


async def test_bid_filter_keeps_a_deep_request_unscored_or_refuses_it_when_strict() -> None:
    lenient = BidFilter(InProcessScorer(), "bid-filter")
    strict = BidFilter(InProcessScorer(), "bid-filter", strict=True)
    try:
        kept = await lenient.decide(nested(1000))
        assert (kept.keep, kept.score, kept.reason) == (True, None, Reason.UNREADABLE)
        assert lenient.stats.unreadable_reasons == {"too_deep": 1}
        with pytest.raises(InvalidBidRequest, match="nested deeper") as refused:
            await strict.decide(nested(1000))
        assert refused.value.reason == "too_deep"
        decision = await lenient.decide(nested(MAX_DEPTH))
        assert decision.score is not None
    finally:
        await lenient.aclose()
        await strict.aclose()
