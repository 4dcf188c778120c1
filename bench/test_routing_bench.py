"""Micro-benchmarks for routing's hot path: pick + start + finish.

Run with:  python -m pytest bench/test_routing_bench.py --benchmark-enable
(pyproject's addopts disables benchmarks by default; then each body runs once
as a smoke test). Each benchmark round runs a batch of calls, so the
per-call figure printed is the round mean divided by the batch size.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import pytest

from gateway.routing import Outcome, Route, RouteConfig

BATCH = 1_000
MODELS = [f"model-{index:05d}.tar.gz" for index in range(10_000)]


def make_route(targets: int, **settings: Any) -> Route:
    config = RouteConfig.from_mapping(
        "bench",
        {
            "targets": [{"endpoint": f"endpoint-{index}"} for index in range(targets)],
            "hedge": {"enabled": True},
            **settings,
        },
    )
    return Route(config, rng=random.Random(1))


def plain_batch(route: Route) -> Callable[[], None]:
    pick, start, finish, success = route.pick, route.start, route.finish, Outcome.SUCCESS

    def run() -> None:
        for _ in range(BATCH):
            target = pick()
            assert target is not None
            finish(target, start(target), success)

    return run


def model_batch(route: Route, models: list[str]) -> Callable[[], None]:
    pick, start, finish, success = route.pick, route.start, route.finish, Outcome.SUCCESS
    cycle = itertools.cycle(models)

    def run() -> None:
        for model in itertools.islice(cycle, BATCH):
            target = pick(model)
            assert target is not None
            finish(target, start(target), success)

    return run


def report(benchmark: Any, label: str) -> None:
    stats = getattr(benchmark, "stats", None)
    if stats is None:  # --benchmark-disable: the body ran once, nothing measured
        return
    per_call_us = stats.stats.mean / BATCH * 1e6
    benchmark.extra_info["us_per_call"] = round(per_call_us, 3)
    print(f"\n{label}: {per_call_us:.2f} us per pick+start+finish")


@pytest.mark.parametrize("targets", [4, 16])
def test_pick_start_finish(benchmark: Any, targets: int) -> None:
    route = make_route(targets)
    benchmark(plain_batch(route))
    report(benchmark, f"{targets} targets")
    assert sum(state.outstanding for state in route.targets) == 0


def test_mme_pick_10k_models(benchmark: Any) -> None:
    route = make_route(4)
    run = model_batch(route, MODELS)
    for _ in range(len(MODELS) // BATCH):
        run()  # warm the ranking cache once: steady state is what we measure
    benchmark(run)
    report(benchmark, "MME, 10,000 models cycling, 4 targets")


def test_mme_pick_ranking_cache_misses(benchmark: Any) -> None:
    # Worst case: more distinct models than the ranking cache holds, so
    # every pick re-ranks (one blake2b per target). Still flat in model count.
    route = Route(make_route(4).config, rng=random.Random(1), ranking_cache_size=1_000)
    benchmark(model_batch(route, MODELS))
    report(benchmark, "MME, every ranking a cache miss, 4 targets")


def test_pick_start_finish_with_a_fallback_level(benchmark: Any) -> None:
    """Two endpoints at priority 0 and a fallback at priority 1: the per-pick cost of levels."""
    config = RouteConfig.from_mapping(
        "bench",
        {
            "targets": [
                {"endpoint": "endpoint-0"},
                {"endpoint": "endpoint-1"},
                {"inference_router": "router", "routing_target": "t", "priority": 1},
            ],
            "hedge": {"enabled": True},
        },
    )
    benchmark(plain_batch(Route(config, rng=random.Random(1))))
