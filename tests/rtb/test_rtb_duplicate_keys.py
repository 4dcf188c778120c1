"""Bid requests that repeat a key: one parser reads the first value, another the last."""

from __future__ import annotations

import orjson
import pytest

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
