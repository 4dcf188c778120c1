"""The typed (msgspec) fast path agrees with the validators, or declines.

For every body, either both paths give the same record, or the fast path
declines (``NotTyped``) and the validators decide; the fast path never
accepts what the validators refuse. So the errors callers see are the
validators' own.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.rtb import InvalidBidRequest, parse_bid_request
from gateway.rtb._typed import NotTyped, decode_record
from gateway.rtb.request import parse_record, validated_record
from gateway.rtb.synth import sample_bodies

FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*.json"))
BASE: dict[str, Any] = {"id": "r", "imp": [{"id": "1", "banner": {"w": 300, "h": 250}}]}


def agree_or_decline(body: bytes) -> str:
    """``"typed"`` when the fast path took the body (and matched), else ``"declined"``."""
    try:
        fast = decode_record(body)
    except NotTyped:
        return "declined"
    assert fast == validated_record(body), body  # it never accepts what is refused
    return "typed"


def test_synthetic_traffic_and_fixtures_take_the_typed_path_with_the_same_records() -> None:
    bodies = [*sample_bodies(1000, seed=21), *(path.read_bytes() for path in FIXTURES)]
    assert {agree_or_decline(body) for body in bodies} == {"typed"}


# Valid for the validators, yet declined by the typed path (or typed and equal).
EDGE_VALID: list[Any] = [
    {"tmax": 1, "at": 1, "test": 1, "cur": ["USD"], "bcat": [], "badv": ["a.com"]},
    {"imp": [{"id": "1", "video": {"w": 640, "h": 480}, "banner": {"format": [{"w": 1}]}}]},
    {"imp": [{"id": "1", "native": {}, "audio": {}, "bidfloor": 2, "instl": 0, "secure": 1}]},
    {"imp": [{"id": "a", "banner": {}}, {"id": "b", "video": {}}]},
    {"site": {"publisher": {"id": "p"}, "cat": ["IAB1"]}, "device": {"ipv6": "::1", "js": 0}},
    {"app": {"bundle": "b", "publisher": None}, "device": {"geo": {"lat": 1, "lon": -2.5}}},
    {"user": {"ext": {"consent": "c"}}, "regs": None},
    {"user": {"consent": "c", "ext": {"consent": 5}}},  # 2.6 consent wins: ext unread
    {"regs": {"gdpr": 1, "ext": {"gdpr": "x"}}},  # ext.gdpr unread: the validators accept
    {"regs": {"gpp_sid": [1], "ext": {"gpp_sid": "x"}}},
    {"regs": {"ext": {"gdpr": 0, "us_privacy": "1YNN", "gpp": "g", "gpp_sid": [2]}}},
    {"source": {"schain": {"ver": "1.0"}, "ext": 7}},  # schain found first: ext unread
    {"source": {"ext": {"schain": {}}}},
    {"ext": {"deep": [[[[{"x": "é"}]]]]}, "device": {"ua": "Mozilla/5.0 ☃"}},
    {"site": None, "app": None, "user": None, "device": None, "source": None},
]


@pytest.mark.parametrize("extra", EDGE_VALID)
def test_edge_bodies_the_validators_accept_are_typed_alike_or_declined(extra: Any) -> None:
    body = orjson.dumps({**BASE, **extra})
    agree_or_decline(body)
    assert parse_record(body) == validated_record(body)


def test_an_escaped_surrogate_pair_is_valid_and_declined_to_the_validators() -> None:
    body = b'{"id": "r", "imp": [{"id": "1", "banner": {}}], "ext": {"e": "\\ud83d\\ude00"}}'
    assert agree_or_decline(body) == "declined"
    assert parse_record(body) == validated_record(body)


@pytest.mark.parametrize(
    ("escaped", "path"),
    [
        (b"https:\\/\\/example.com\\/a", "typed"),  # exchanges escape slashes
        (b"tab\\there \\u00e9 \\\\", "typed"),
        (b"\\uD83D\\uDE00", "declined"),  # surrogates, upper case
        (b"\\ud83d\\ude00", "declined"),
    ],
)
def test_escapes_other_than_surrogates_keep_the_typed_path(escaped: bytes, path: str) -> None:
    body = b'{"id": "r", "imp": [{"id": "1", "banner": {}}], "site": {"page": "' + escaped + b'"}}'
    assert agree_or_decline(body) == path
    assert parse_record(body) == validated_record(body)


DEEP = b'{"id": "r", "imp": [{"id": "1", "banner": {}}], "x": ' + b"[" * 2000 + b"]" * 2000 + b"}"
INVALID: list[tuple[bytes, str]] = [
    (b"{not json", "not JSON"),
    (b"[]", "bid request: expected object, got array"),
    (orjson.dumps({**BASE, "id": None}), "missing required field: id"),
    (orjson.dumps({**BASE, "imp": []}), "imp is empty"),
    (orjson.dumps({**BASE, "imp": [{"id": "1"}]}), "imp[0]: needs one of banner"),
    (orjson.dumps({**BASE, "imp": [{"banner": {}}]}), "missing required field: imp[0].id"),
    (orjson.dumps({**BASE, "tmax": -5}), "tmax: must be >= 0"),
    (orjson.dumps({**BASE, "tmax": True}), "tmax: expected integer, got boolean"),
    (orjson.dumps({**BASE, "test": 2}), "test: expected 0 or 1"),
    (orjson.dumps({**BASE, "site": {}, "app": {}}), "site and app are mutually exclusive"),
    (orjson.dumps({**BASE, "device": {"geo": {"lat": "n"}}}), "device.geo.lat: expected number"),
    (orjson.dumps({**BASE, "imp": [{"id": "1", "banner": {}, "bidfloor": -1}]}), "must be >= 0"),
    (orjson.dumps({**BASE, "user": {"ext": []}}), "user.ext: expected object"),
    (orjson.dumps({**BASE, "source": {"ext": {"schain": 1}}}), "source.ext.schain"),
    (b'{"id": "r", "imp": [{"id": "1", "banner": {}}], "x": "\xff"}', "not JSON"),
    (b'{"id": "r", "imp": [{"id": "1", "banner": {}}], "x": "\\ud800"}', "not JSON"),
    (
        b'{"id": "r", "imp": [{"id": "1", "banner": {}}], "x": ' + b"[" * 2000 + b"]" * 2000 + b"}",
        "nested deeper than 64 levels",
    ),
]


@pytest.mark.parametrize(("body", "message"), INVALID)
def test_refused_bodies_are_declined_and_named_by_the_validators(body: bytes, message: str) -> None:
    with pytest.raises(NotTyped):
        decode_record(body)
    with pytest.raises(InvalidBidRequest) as info:
        parse_bid_request(body)
    assert message in str(info.value)


def test_random_mutations_never_make_the_paths_disagree() -> None:
    """Swap one field of a real request for a value of another JSON type."""
    rng = random.Random(5)
    values: list[Any] = [None, True, 0, 1, 2, -1, 1.5, "s", [], ["s"], [1], {}, {"w": 1}]
    for body in sample_bodies(300, seed=8):
        request = orjson.loads(body)
        paths = list(_paths(request))
        for _ in range(3):
            mutated = orjson.loads(body)
            container, key = rng.choice(paths)
            _walk(mutated, container)[key] = rng.choice(values)
            data = orjson.dumps(mutated)
            try:
                expected: Any = validated_record(data)
            except InvalidBidRequest:
                expected = InvalidBidRequest
            try:
                fast: Any = decode_record(data)
            except NotTyped:
                continue
            assert fast == expected, data


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Any:
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in items:
        yield prefix, key
        if isinstance(value, dict | list) and value:
            yield from _paths(value, (*prefix, key))


def _walk(node: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        node = node[key]
    return node
