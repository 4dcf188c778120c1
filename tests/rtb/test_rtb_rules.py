"""Rules in the filter's policy: matched on OpenRTB paths before scoring, from the config."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway._config.env import apply_environment
from gateway._config.reader import read
from gateway.errors import ConfigError
from gateway.rtb import (
    RULE_PATHS,
    BidFilter,
    Decision,
    FilterPolicy,
    Reason,
    Rule,
    parse_bid_request,
)
from gateway.rtb.request import parse_record
from gateway.rtb.rules import compile_rules
from tests.rtb.test_rtb_filter import ECHO_SPEC, EchoScorer

# The echo spec scores a request with its first impression's floor.
REQUEST: dict[str, Any] = {
    "id": "r1",
    "imp": [{"id": "1", "banner": {"w": 300, "h": 250}, "bidfloor": 0.3}],
    "site": {
        "domain": "news.example",
        "cat": ["IAB12", "IAB3"],
        "publisher": {"id": "pub-1"},
    },
    "device": {"ip": "192.0.2.1", "devicetype": 4, "geo": {"country": "USA", "lat": 40.7}},
    "user": {"ext": {"consent": "CO-abc"}},
    "regs": {"ext": {"gdpr": 1}},
    "source": {"ext": {"schain": {"ver": "1.0"}}},
    "tmax": 120,
}


def body(**changes: Any) -> bytes:
    request = orjson.loads(orjson.dumps(REQUEST))
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = request
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return orjson.dumps(request)


def policy(threshold: float = 0.5, **rules: dict[str, Any]) -> FilterPolicy:
    mapping: dict[str, Any] = {"threshold": threshold, "rules": rules}
    return read(FilterPolicy, mapping, "rtb")


def matcher(**rule: Any) -> tuple[Any, Any]:
    rule_set = compile_rules({"r": read(Rule, rule, "rtb.rules.r", name="r")})
    assert rule_set is not None
    return rule_set.match_record, rule_set.match_view


@pytest.mark.parametrize(
    ("rule", "matching", "other"),
    [
        (
            {"path": "site.domain", "match": "equals", "value": "news.example"},
            {},
            {"site__domain": "x.example"},
        ),
        (
            {"path": "site.domain", "match": "in", "values": ["a.example", "news.example"]},
            {},
            {"site__domain": "b.example"},
        ),
        (
            {"path": "site.domain", "match": "prefix", "values": ["new", "old"]},
            {},
            {"site__domain": "x.example"},
        ),
        ({"path": "site.domain", "match": "absent"}, {"site__domain": None}, {}),
        ({"path": "app.bundle", "match": "exists"}, {"site": None, "app": {"bundle": "com.x"}}, {}),
        (
            {"path": "device.geo.country", "match": "in", "values": ["USA", "CAN"]},
            {},
            {"device__geo__country": "FRA"},
        ),
        (
            {"path": "device.geo.lat", "match": "range", "min": 40, "max": 41},
            {},
            {"device__geo__lat": 52.5},
        ),
        (
            {"path": "device.devicetype", "match": "equals", "value": 4},
            {},
            {"device__devicetype": 2},
        ),
        ({"path": "device.ip", "match": "absent"}, {"device__ip": None}, {}),
        (
            {"path": "imp.banner.w", "match": "range", "min": 300},
            {},
            {"imp__0__banner__w": 120},
        ),
        (
            {"path": "imp.banner.w", "match": "equals", "value": 728},
            {"imp": [{"id": "1", "video": {"w": 1}}, {"id": "2", "banner": {"w": 728}}]},
            {},
        ),
        (
            {"path": "imp.video.w", "match": "exists"},
            {"imp": [{"id": "1", "video": {"w": 640}}]},
            {},
        ),
        ({"path": "imp.video", "match": "absent"}, {}, {"imp": [{"id": "1", "video": {}}]}),
        ({"path": "imp.bidfloor", "match": "range", "max": 0.5}, {}, {"imp__0__bidfloor": 0.9}),
        ({"path": "site.cat", "match": "in", "values": ["IAB3"]}, {}, {"site__cat": ["IAB1"]}),
        ({"path": "site.cat", "match": "prefix", "values": ["IAB12"]}, {}, {"site__cat": None}),
        ({"path": "user.consent", "match": "exists"}, {}, {"user": None}),
        ({"path": "regs.gdpr", "match": "equals", "value": 1}, {}, {"regs": None}),
        ({"path": "source.schain", "match": "exists"}, {}, {"source": None}),
        ({"path": "tmax", "match": "range", "max": 150}, {}, {"tmax": 500}),
        (
            {"path": "site.publisher.id", "match": "equals", "value": "pub-1"},
            {},
            {"site__publisher": None},
        ),
    ],
)
def test_each_match_reads_the_same_from_a_record_and_a_view(
    rule: dict[str, Any], matching: dict[str, Any], other: dict[str, Any]
) -> None:
    on_record, on_view = matcher(**rule)
    for changes, expected in ((matching, 0), (other, -1)):
        raw = body(**changes)
        assert on_record(parse_record(raw)) == expected, (rule, changes)
        assert on_view(parse_bid_request(raw)) == expected, (rule, changes)


def make(policy_: FilterPolicy, scorer: EchoScorer | None = None) -> BidFilter:
    return BidFilter(scorer or EchoScorer(), "bid-filter", spec=ECHO_SPEC, policy=policy_)


async def test_actions_drop_and_keep_unscored_and_score_with_their_own_threshold() -> None:
    scorer = EchoScorer()
    bid_filter = make(
        policy(
            block={"path": "site.domain", "match": "prefix", "values": ["casino."]},
            ctv={"path": "device.devicetype", "match": "in", "values": [3, 7], "action": "keep"},
            video={"path": "imp.video", "match": "exists", "action": "score", "threshold": 0.05},
        ),
        scorer,
    )
    dropped = await bid_filter.decide(body(site__domain="casino.example"))
    assert dropped == Decision(False, None, Reason.RULE_DROP, "block")
    kept = await bid_filter.decide(parse_bid_request(body(device__devicetype=3)))
    assert kept == Decision(True, None, Reason.RULE_KEEP, "ctv")
    assert scorer.batches == []  # neither reached the model
    # 0.1 is below the policy's 0.5 but above the video rule's 0.05
    video = {"imp": [{"id": "1", "video": {"w": 640}, "bidfloor": 0.1}]}
    assert (await bid_filter.decide(body(**video))).reason is Reason.SCORED_KEEP
    assert (await bid_filter.decide(body(imp__0__bidfloor=0.1))).reason is Reason.SCORED_DROP
    stats = bid_filter.stats
    assert stats.rule_hits == {"block": 1, "ctv": 1, "video": 1}
    assert (stats.rule_dropped, stats.rule_kept, stats.dropped, stats.kept) == (1, 1, 1, 2)


async def test_rules_are_tried_in_the_order_written() -> None:
    rules = {
        "us-keep": {
            "path": "device.geo.country",
            "match": "equals",
            "value": "USA",
            "action": "keep",
        },
        "banner-drop": {"path": "imp.banner", "match": "exists"},
    }
    first = make(policy(**rules))
    assert (await first.decide(body())).rule == "us-keep"
    swapped = make(policy(**dict(reversed(rules.items()))))
    assert (await swapped.decide(body())).rule == "banner-drop"


async def test_holdback_keeps_a_seeded_share_of_matches_and_counts_it_apart() -> None:
    rules = {"drop-all": {"path": "id", "match": "exists", "holdback": 0.2}}
    mapping = {"threshold": 0.5, "seed": 3, "rules": rules}
    bid_filter = make(read(FilterPolicy, mapping, "rtb"))
    decisions = await bid_filter.decide_many([body()] * 2000)
    held = [d for d in decisions if d.reason is Reason.HOLDBACK]
    assert all(d.keep and d.score is None and d.rule == "drop-all" for d in held)
    assert 0.17 < len(held) / 2000 < 0.23
    stats = bid_filter.stats
    assert (stats.held_back, stats.rule_dropped) == (len(held), 2000 - len(held))
    assert stats.rule_hits == {"drop-all": 2000}
    again = make(read(FilterPolicy, mapping, "rtb"))
    assert await again.decide_many([body()] * 2000) == decisions  # seeded


async def test_shadow_mode_keeps_what_a_rule_would_drop() -> None:
    mapping = {"shadow": True, "rules": {"x": {"path": "id", "match": "exists"}}}
    bid_filter = make(read(FilterPolicy, mapping, "rtb"))
    assert await bid_filter.decide(body()) == Decision(True, None, Reason.SHADOW, "x")
    assert bid_filter.stats.shadowed == 1


async def test_set_rules_and_set_policy_apply_to_the_next_requests() -> None:
    bid_filter = make(policy())
    assert (await bid_filter.decide(body())).reason is Reason.SCORED_DROP  # 0.3 < 0.5
    bid_filter.set_rules(
        {"keep": Rule("keep", "site.domain", "equals", value="news.example", action="keep")}
    )
    assert (await bid_filter.decide(body())).reason is Reason.RULE_KEEP
    assert bid_filter.policy.threshold == 0.5
    bid_filter.set_policy(policy(threshold=0.1))
    assert (await bid_filter.decide(body())).reason is Reason.SCORED_KEEP
    with pytest.raises(ConfigError, match=r"rtb\.rules\.bad\.path"):
        bid_filter.set_rules({"bad": Rule("bad", "site.bundle", "exists")})
    assert (await bid_filter.decide(body())).reason is Reason.SCORED_KEEP  # unchanged


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (
            {"path": "site.bundle", "match": "exists"},
            r"rules\.r\.path: no bid request field .* 'site\.bundle' .*site\.domain",
        ),
        (
            {"path": "device.geo.zip", "match": "exists"},
            r"rules\.r\.path: .*'device\.geo\.zip'.*device\.geo\.country",
        ),
        ({"path": "imp.banner.wmax", "match": "exists"}, r"rules\.r\.path: .*imp\.banner\.w"),
        (
            {"path": "device.devicetype", "match": "in", "values": ["phone"]},
            r"rules\.r\.values\[0\]: device\.devicetype takes integers",
        ),
        (
            {"path": "device.ip", "match": "equals", "value": "192.0.2.1"},
            r"rules\.r\.match: .*only whether device\.ip is there",
        ),
        ({"path": "test", "match": "exists"}, r"rules\.r\.match: test reads as False when absent"),
        (
            {"path": "site.domain", "match": "range", "min": 1},
            r"rules\.r\.match: range needs numbers",
        ),
        (
            {"path": "site.domain", "match": "in", "values": []},
            r"rules\.r\.values: must list at least one",
        ),
        (
            {"path": "site.domain", "match": "in", "value": "a"},
            r"rules\.r\.value: only for match 'equals'",
        ),
        ({"path": "tmax", "match": "range", "min": 5, "max": 1}, r"rules\.r\.max: must be >= min"),
        ({"path": "id", "match": "exists", "action": "score"}, r"rules\.r\.threshold: required"),
        (
            {"path": "id", "match": "exists", "action": "keep", "nbr": 7},
            r"rules\.r\.nbr: only for action 'drop'",
        ),
        (
            {"path": "id", "match": "exists", "holdback": 1.5},
            r"rules\.r\.holdback: must be between 0 and 1",
        ),
        ({"path": "id", "match": "like"}, r"rules\.r\.match: must be one of equals, in, prefix"),
    ],
)
def test_a_bad_rule_is_a_config_error_naming_it(rule: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=rf"^config error at rtb\.{message}"):
        policy(r=rule)


def test_rules_come_from_the_environment_too() -> None:
    file = {
        "rtb": {"rules": {"geo": {"path": "device.geo.country", "match": "in", "values": ["USA"]}}}
    }
    environ = {
        "SAGEMAKER_GATEWAY__RTB__RULES__GEO__VALUES": '["CAN"]',
        "SAGEMAKER_GATEWAY__RTB__RULES__BUNDLES": (
            '{ path = "app.bundle", match = "prefix", values = ["com.bad."], holdback = 0.05 }'
        ),
    }
    table = apply_environment(file, environ).mapping["rtb"]
    rules = read(FilterPolicy, table, "rtb").rules
    assert list(rules) == ["geo", "bundles"]
    assert rules["geo"].values == ("CAN",)
    assert (rules["bundles"].path, rules["bundles"].holdback) == ("app.bundle", 0.05)


def test_every_rule_path_compiles_for_both_readers() -> None:
    for path, read_as in RULE_PATHS.items():
        rule: dict[str, Any] = {"path": path, "match": "exists"}
        if read_as.default is not None:
            rule = {"path": path, "match": "equals", "value": read_as.default}
        on_record, on_view = matcher(**rule)
        for raw in (body(), b'{"id": "x", "imp": [{"id": "1", "audio": {}}]}'):
            expected = on_view(parse_bid_request(raw))
            assert expected in (0, -1)
            assert on_record(parse_record(raw)) == expected, path
