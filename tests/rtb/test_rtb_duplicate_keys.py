"""Bid requests that repeat a key: one parser reads the first value, another the last."""

from __future__ import annotations

import orjson
import pytest

from gateway.rtb import BidFilter, FilterPolicy, InProcessScorer, Reason
from gateway.rtb.request import InvalidBidRequest, parse_bid_request, refuse_duplicate_keys
from gateway.rtb.synth import sample_bodies

BODY = sample_bodies(1, seed=5)[0]


def _with_duplicate(key: str, first: object) -> bytes:
    """``BODY`` with the first ``key`` written twice: ``first``, then its own value."""
    needle = f'"{key}":'
    text = BODY.decode()
    assert needle in text
    return text.replace(needle, f"{needle}{orjson.dumps(first).decode()},{needle}", 1).encode()


def test_a_well_formed_request_passes() -> None:
    refuse_duplicate_keys(BODY)
    refuse_duplicate_keys(BODY.decode())


@pytest.mark.parametrize(
    ("key", "first"), [("id", "decoy"), ("ua", "decoy-agent"), ("bidfloor", 99.0)]
)
def test_a_repeated_key_anywhere_is_refused_and_named(key: str, first: object) -> None:
    body = _with_duplicate(key, first)
    parse_bid_request(body)  # the parser alone keeps one value silently
    with pytest.raises(InvalidBidRequest, match=f"duplicate key '{key}'"):
        refuse_duplicate_keys(body)


def test_the_same_key_in_different_objects_is_not_a_duplicate() -> None:
    refuse_duplicate_keys(b'{"id": "a", "imp": [{"id": "1"}, {"id": "2"}], "site": {"id": "s"}}')


def test_a_body_that_is_not_json_is_refused_clearly() -> None:
    with pytest.raises(InvalidBidRequest, match="not JSON"):
        refuse_duplicate_keys(b'{"id": ')


@pytest.mark.parametrize(("key", "first"), [("id", "decoy"), ("bidfloor", 0.0)])
async def test_the_library_keeps_a_repeated_key_unscored_as_the_proxy_does(
    key: str, first: object
) -> None:
    """The proxy forwards such a request unscored (``unreadable``); BidFilter.decide on the
    same bytes scored it, and dropped it below the threshold."""
    body = _with_duplicate(key, first)
    lenient = BidFilter(InProcessScorer(), "e", policy=FilterPolicy(threshold=1.0))
    strict = BidFilter(InProcessScorer(), "e", strict=True)
    try:
        decision = await lenient.decide(body)
        assert (decision.keep, decision.score, decision.reason) == (True, None, Reason.UNREADABLE)
        assert lenient.stats.unreadable_reasons == {"duplicate_key": 1}
        with pytest.raises(InvalidBidRequest, match=f"duplicate key '{key}'") as refused:
            await strict.decide(body)
        assert refused.value.reason == "duplicate_key"
        # A request without a repeated key is scored, and a parsed view is taken as is.
        assert (await lenient.decide(BODY)).reason == Reason.SCORED_DROP
        assert (await lenient.decide(parse_bid_request(body))).reason == Reason.SCORED_DROP
    finally:
        await lenient.aclose()
        await strict.aclose()
