from __future__ import annotations

from collections import Counter

import pytest

from gateway.routing import Outcome, TargetState
from tests.routing._support import FakeClock, by_key, call, make_route


def warm(
    route_targets: dict[str, TargetState], route: object, clock: FakeClock, ms: dict[str, float]
) -> None:
    """Give each named target one latency sample."""
    for key, latency_ms in ms.items():
        call(route, clock, latency_ms / 1000, target=route_targets[key])  # type: ignore[arg-type]


def test_a_new_route_tries_every_target_once_before_piling_on() -> None:
    clock = FakeClock()
    route = make_route(3, clock)

    first_wave = []
    for _ in range(3):
        state = route.pick()
        assert state is not None
        route.start(state)
        first_wave.append(state)

    # Unsampled and idle costs nothing, unsampled with one in flight costs a
    # lot: the three picks cover the three targets.
    assert sorted(state.key for state in first_wave) == ["e0", "e1", "e2"]


def test_peak_ewma_prefers_the_faster_target() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    targets = by_key(route)
    warm(targets, route, clock, {"e0": 10.0, "e1": 2.0})

    picks = Counter(call(route, clock, 0.002 if key == "e1" else 0.010).key for key in ["e1"] * 50)

    assert picks == Counter({"e1": 50})
    assert targets["e1"].ewma_ms < targets["e0"].ewma_ms


def test_a_latency_spike_moves_traffic_at_once_and_decays_slowly() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    targets = by_key(route)
    warm(targets, route, clock, {"e0": 5.0, "e1": 2.0})
    assert route.pick() is targets["e1"]

    call(route, clock, 0.050, target=targets["e1"])  # one slow answer

    # Peak: the estimate jumps to the slow sample immediately.
    assert targets["e1"].ewma_ms == pytest.approx(50.0)
    assert route.pick() is targets["e0"]
    # Faster samples pull it back down only gradually (tau = 10 s) ...
    call(route, clock, 0.002, target=targets["e1"])
    assert 49.0 < targets["e1"].ewma_ms < 50.0


def test_an_avoided_target_is_tried_again_after_its_estimate_decays() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    targets = by_key(route)
    warm(targets, route, clock, {"e0": 100.0, "e1": 5.0})

    served: Counter[str] = Counter()
    for _ in range(600):  # 600 calls x 100 ms of steady e1 traffic = 60 s
        served[call(route, clock, 0.005).key] += 1
        clock.advance(0.095)

    assert served["e1"] > 550
    # 100 ms x exp(-t / 10 s) drops under e1's 5 ms after ~30 s: another chance.
    assert served["e0"] >= 1


def test_a_long_idle_target_takes_a_share_not_a_flood() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    targets = by_key(route)
    warm(targets, route, clock, {"e0": 5.0})
    clock.advance(100.0)  # e0's estimate has decayed to almost nothing
    warm(targets, route, clock, {"e1": 5.0})

    burst: Counter[str] = Counter()
    for _ in range(10):  # ten concurrent requests, none answered yet
        state = route.pick()
        assert state is not None
        route.start(state)
        burst[state.key] += 1

    assert burst["e0"] == 5  # in-flight work is costed at the undecayed 5 ms


def test_outstanding_requests_count_toward_cost() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    targets = by_key(route)
    warm(targets, route, clock, {"e0": 4.0, "e1": 2.0})

    route.start(targets["e1"])  # one in flight: cost 2 ms x 2 = 4 ms
    route.start(targets["e1"])  # two in flight: cost 2 ms x 3 = 6 ms

    assert route.pick() is targets["e0"]
    assert targets["e1"].outstanding == 2


def test_weights_scale_the_share_under_concurrency() -> None:
    clock = FakeClock()
    route = make_route(
        [{"endpoint": "light", "weight": 1}, {"endpoint": "heavy", "weight": 3}], clock
    )
    in_flight: list[tuple[TargetState, float]] = []
    served: Counter[str] = Counter()
    for _ in range(4000):
        state = route.pick()
        assert state is not None
        in_flight.append((state, route.start(state)))
        served[state.key] += 1
        clock.advance(0.0005)
        if len(in_flight) >= 16:  # 16 concurrent requests, same speed everywhere
            done, started = in_flight.pop(0)
            route.finish(done, started, Outcome.SUCCESS)

    share = served["heavy"] / sum(served.values())
    assert 0.68 < share < 0.82


def test_full_scan_up_to_four_targets_and_power_of_two_choices_above() -> None:
    def share_of_fastest(count: int) -> float:
        clock = FakeClock()
        route = make_route(count, clock, seed=3)
        targets = by_key(route)
        warm(targets, route, clock, {f"e{i}": 1.0 + i for i in range(count)})
        served = Counter(route.pick().key for _ in range(4000))  # type: ignore[union-attr]
        assert route.pick() is not None
        if count > 4:
            # Every target but the slowest (which loses every pair) gets traffic.
            assert len(served) == count - 1
        return served["e0"] / 4000

    # Four targets: the scan always finds the cheapest one.
    assert share_of_fastest(4) == 1.0
    # Eight: e0 only wins when drawn into the pair: 1 - C(7,2)/C(8,2) = 25%.
    assert 0.22 < share_of_fastest(8) < 0.28


def test_exclude_steers_hedges_and_retries_elsewhere() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    targets = by_key(route)
    warm(targets, route, clock, {"e0": 1.0, "e1": 9.0})

    assert route.pick(exclude=(targets["e0"],)) is targets["e1"]
    # Everything excluded: "no target" unless the caller accepts a repeat.
    everything = tuple(route.targets)
    assert route.pick(exclude=everything) is None
    assert route.pick(exclude=everything, reuse_excluded=True) is targets["e0"]


def test_single_target_route_always_returns_it_and_reuse_is_explicit() -> None:
    clock = FakeClock()
    route = make_route(1, clock)
    (only,) = route.targets

    assert route.pick() is only
    assert route.pick(exclude=[only]) is None
    assert route.pick(exclude=[only], reuse_excluded=True) is only


def test_cancelled_attempts_release_the_slot_without_a_sample() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    targets = by_key(route)
    warm(targets, route, clock, {"e0": 3.0})

    started = route.start(targets["e0"])
    clock.advance(5.0)
    route.finish(targets["e0"], started, Outcome.CANCELLED)

    assert targets["e0"].outstanding == 0
    assert targets["e0"].ewma_ms == pytest.approx(3.0)


def test_start_backup_counts_in_flight_but_earns_no_tokens() -> None:
    clock = FakeClock()
    route = make_route(2, clock, hedge={"enabled": True})
    state = route.targets[0]
    before = route.hedge_budget.tokens

    started = route.start_backup(state)

    assert state.outstanding == 1
    assert route.hedge_budget.tokens == before
    route.finish(state, started, Outcome.CANCELLED)
    assert state.outstanding == 0
