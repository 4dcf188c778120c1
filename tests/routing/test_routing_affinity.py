from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from gateway.routing import Outcome, TargetHealth, rendezvous_score
from tests.routing._support import FakeClock, by_key, call, make_route

MODELS = [f"model-{index}.tar.gz" for index in range(10_000)]

# blake2b(b"bid-filter-a\0model-a.tar.gz", digest_size=8), big-endian.
KNOWN_SCORE = 17026489722297965603


def test_the_score_is_the_documented_blake2b() -> None:
    assert rendezvous_score("model-a.tar.gz", "bid-filter-a") == KNOWN_SCORE


def test_rankings_agree_across_processes_with_different_hash_seeds() -> None:
    script = (
        "import json; from gateway.routing import rendezvous_score as s; "
        "print(json.dumps([s('model-a.tar.gz', 'bid-filter-a'), "
        "[s(m, k) for m in ('x', 'model-7', 'é') for k in ('a', 'b@us-west-2')]]))"
    )
    root = Path(__file__).resolve().parents[2]
    answers = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(root)}
        output = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        ).stdout
        answers.append(json.loads(output))

    assert answers[0] == answers[1]
    assert answers[0][0] == KNOWN_SCORE
    local = [rendezvous_score(m, k) for m in ("x", "model-7", "é") for k in ("a", "b@us-west-2")]
    assert answers[0][1] == local


def test_a_model_sticks_to_its_preferred_targets() -> None:
    clock = FakeClock()
    route = make_route(6, clock)
    preferred = set(route.preferred_targets("model-42")[:2])

    served = {call(route, clock, 0.002, model="model-42") for _ in range(200)}

    assert served == preferred  # both preferred targets share the load, nobody else


def test_models_spread_evenly_over_targets() -> None:
    clock = FakeClock()
    route = make_route(4, clock)

    first = Counter(route.preferred_targets(model)[0].key for model in MODELS)
    pairs = Counter(
        frozenset(s.key for s in route.preferred_targets(model)[:2]) for model in MODELS
    )

    assert all(2300 < count < 2700 for count in first.values())  # 2500 each
    assert len(pairs) == 6 and all(1450 < count < 1900 for count in pairs.values())  # 1667


def test_weighted_targets_lead_more_models() -> None:
    clock = FakeClock()
    route = make_route(
        [{"endpoint": "small", "weight": 1}, {"endpoint": "big", "weight": 3}], clock
    )

    first = Counter(route.preferred_targets(model)[0].key for model in MODELS)

    assert 0.72 < first["big"] / len(MODELS) < 0.78


def test_removing_a_target_only_moves_the_models_it_led() -> None:
    clock = FakeClock()
    four = make_route(4, clock)
    three = make_route(3, clock)

    moved = [
        model
        for model in MODELS[:2000]
        if four.preferred_targets(model)[0].key != three.preferred_targets(model)[0].key
    ]

    assert all(four.preferred_targets(model)[0].key == "e3" for model in moved)


def test_an_ejected_preferred_target_is_replaced_by_the_next_in_rank() -> None:
    clock = FakeClock()
    route = make_route(5, clock, ejection={"max_ejected_share": 0.5})
    ranking = route.preferred_targets("model-7")
    leader = ranking[0]
    for _ in range(5):
        call(route, clock, 0.001, Outcome.FAILURE, target=leader)
    assert leader.state is TargetHealth.EJECTED

    served = {call(route, clock, 0.002, model="model-7") for _ in range(100)}

    assert served == {ranking[1], ranking[2]}


def test_exclude_falls_through_to_the_next_ranked_target() -> None:
    clock = FakeClock()
    route = make_route(4, clock)
    ranking = route.preferred_targets("model-9")

    hedge = route.pick("model-9", exclude=ranking[:2])

    assert hedge is ranking[2]


def test_model_picks_balance_by_cost_within_the_preferred_set() -> None:
    clock = FakeClock()
    route = make_route(4, clock)
    first, second = route.preferred_targets("m")[:2]
    call(route, clock, 0.010, target=first)
    call(route, clock, 0.001, target=second)

    assert route.pick("m") is second


def test_a_probing_preferred_target_gets_its_probe_from_model_traffic() -> None:
    clock = FakeClock()
    route = make_route(3, clock, ejection={"jitter": 0})
    leader = route.preferred_targets("m")[0]
    for _ in range(5):
        call(route, clock, 0.001, Outcome.FAILURE, target=leader)
    clock.advance(31.0)

    probe = call(route, clock, 0.001, model="m")

    assert probe is leader
    assert leader.state is TargetHealth.HEALTHY


def test_single_target_routes_ignore_the_model() -> None:
    clock = FakeClock()
    route = make_route(1, clock)
    assert route.pick("anything") is route.targets[0]
    assert route.preferred_targets("anything") == route.targets


def test_many_models_keep_the_ranking_cache_bounded() -> None:
    clock = FakeClock()
    from gateway.routing import Route, RouteConfig

    config = RouteConfig.from_mapping("r", {"targets": ["a", "b", "c"]})
    route = Route(config, clock=clock, ranking_cache_size=100)
    for model in MODELS[:1000]:
        route.pick(model)

    assert len(route._ranker._cache) == 100  # type: ignore[union-attr]
    assert by_key(route).keys() == {"a", "b", "c"}
