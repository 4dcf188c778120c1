"""Tail latency with and without hedging: ``python -m bench.tail``.

Two targets, each answering in 2 ms +- 0.5 ms; one of them also stalls 2% of
its answers by 50 ms. Two set-ups: the emulator (in its own process) and a
plain keep-alive stub (``bench._stub``, uvloop, in its own process). The same
calls run through a route with hedging off, then on, alternating for several
rounds; the table shows the medians (and min-max) of p50, p99, p99.9, the
share of extra requests the upstream saw, and the hedges fired, won and wasted
(fired and answered second).

A control run per round calls the same set-up without the stalls, hedging
off: its p99.9 is what the client, the upstream and the machine give with no
tail to cut, the floor any hedging policy can reach (on a busy machine the
event loop's own delays set it, not the stalls).

Every run freezes the collector after its warm-up (``gateway.tune_gc()``, as
the README tells embedders to do) and unfreezes it after: otherwise one full
collection, tens of milliseconds on the loop's thread, lands in some runs and
not others and sets their p99.9 whatever the hedging does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from bench._stub import Latency, StubServer
from gateway import Gateway, GatewayError, tune_gc
from gateway.emulator import Emulator

STEADY = Latency(base_ms=2.0, jitter_ms=0.5)
STALLING = Latency(base_ms=2.0, jitter_ms=0.5, tail_share=0.02, tail_ms=50.0)


def emulator_config(stalling: Latency) -> dict[str, Any]:
    return {
        "seed": 5,
        "endpoints": {
            "steady": {"latency": {"base_ms": STEADY.base_ms, "jitter_ms": STEADY.jitter_ms}},
            "stalling": {
                "latency": {
                    "base_ms": stalling.base_ms,
                    "jitter_ms": stalling.jitter_ms,
                    "tail_share": stalling.tail_share,
                    "tail_ms": stalling.tail_ms,
                }
            },
        },
    }


WARM_UP_CALLS = 200
# Targets, to judge the hedged runs by.
MAX_P999_OVER_P50 = 3.0
MAX_EXTRA_SHARE = 0.03


@dataclass
class TailResult:
    upstream: str
    kind: str  # "off", "on", or "control" (no stalls, hedging off)
    hedging: bool
    calls: int
    requests: int
    extra_share: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    hedges_fired: int
    hedges_won: int
    hedges_wasted: int
    failures: dict[str, int]


def _route(hedging: bool) -> dict[str, Any]:
    return {
        "targets": [{"endpoint": "steady"}, {"endpoint": "stalling"}],
        "hedge": {"enabled": hedging, "max_extra_load": 0.05, "min_delay_ms": 1.0},
        "retry": {"max_attempts": 1},
    }


def _percentile(sorted_values: list[float], share: float) -> float:
    index = min(len(sorted_values) - 1, int(share * len(sorted_values)))
    return sorted_values[index]


async def _run(
    url: str, hedging: bool, calls: int, concurrency: int
) -> tuple[list[float], Counter[str], Any, int]:
    gateway = Gateway(
        "us-east-1",
        endpoint_url=url,
        credentials=("AK", "SK"),
        routes={"bid": _route(hedging)},
        pool={"max_connections": concurrency * 2, "prewarm": concurrency},
    )
    latencies: list[float] = []
    failures: Counter[str] = Counter()
    remaining = calls

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            started = time.perf_counter()
            try:
                await gateway.invoke("bid", b"1,2,3", content_type="text/csv", timeout=1.0)
            except GatewayError as error:
                failures[type(error).__name__] += 1
                continue
            latencies.append(time.perf_counter() - started)

    async with gateway:
        gateway.enable_metrics()  # counting from the first call, warm-up included
        # Warm-up: connections. Hedges may fire from the first call; only the
        # measured calls' hedges are counted.
        for _ in range(WARM_UP_CALLS):
            await gateway.invoke("bid", b"1,2,3", content_type="text/csv", timeout=1.0)
        warm_up_hedges = gateway.metrics.hedges.get("bid", 0)
        gateway.metrics.hedges.clear()
        gateway.metrics.hedge_wins.clear()
        tune_gc()
        try:
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        finally:
            gc.unfreeze()
        return latencies, failures, gateway.metrics, warm_up_hedges


def measure(
    upstream: str,
    kind: str,
    url: str,
    requests_seen: Callable[[], int],
    calls: int,
    concurrency: int,
) -> TailResult:
    hedging = kind == "on"
    before = requests_seen()
    latencies, failures, metrics, warm_up_hedges = asyncio.run(
        _run(url, hedging, calls, concurrency)
    )
    after = requests_seen()
    fired = metrics.hedges.get("bid", 0)
    won = metrics.hedge_wins.get("bid", 0)
    # The warm-up's requests and hedges are left out.
    requests = after - before - WARM_UP_CALLS - warm_up_hedges
    calls_made = len(latencies) + sum(failures.values())
    latencies.sort()
    return TailResult(
        upstream=upstream,
        kind=kind,
        hedging=hedging,
        calls=len(latencies),
        requests=requests,
        extra_share=requests / calls_made - 1.0,
        p50_ms=_percentile(latencies, 0.50) * 1000,
        p99_ms=_percentile(latencies, 0.99) * 1000,
        p999_ms=_percentile(latencies, 0.999) * 1000,
        max_ms=latencies[-1] * 1000,
        hedges_fired=fired,
        hedges_won=won,
        hedges_wasted=fired - won,
        failures=dict(failures),
    )


Upstream = tuple[str, Callable[[], int]]


@contextlib.contextmanager
def upstream(name: str, stalling: Latency) -> Iterator[Upstream]:
    """(url, requests answered so far) of the emulator or the stub, in its own process."""
    if name == "emulator":
        with Emulator.start_subprocess(emulator_config(stalling)) as emulator:
            yield emulator.url, lambda: emulator.stats().count()
    else:
        with StubServer(latencies={"steady": STEADY, "stalling": stalling}) as stub:
            yield stub.url, lambda: stub.stats()["requests"]


def summarize(results: list[TailResult]) -> dict[str, Any]:
    """Medians and min-max over the rounds of one (upstream, hedging) pair."""

    def spread(values: list[float]) -> dict[str, float]:
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    ratios = [r.p999_ms / r.p50_ms for r in results]
    extra = [r.extra_share for r in results]
    summary: dict[str, Any] = {
        "upstream": results[0].upstream,
        "kind": results[0].kind,
        "hedging": results[0].hedging,
        "rounds": len(results),
        "calls": sum(r.calls for r in results),
        "p50_ms": spread([r.p50_ms for r in results]),
        "p99_ms": spread([r.p99_ms for r in results]),
        "p999_ms": spread([r.p999_ms for r in results]),
        "max_ms": max(r.max_ms for r in results),
        "p999_over_p50": spread(ratios),
        "extra_share": spread(extra),
        "hedges_fired": sum(r.hedges_fired for r in results),
        "hedges_won": sum(r.hedges_won for r in results),
        "hedges_wasted": sum(r.hedges_wasted for r in results),
        "failures": dict(sum((Counter(r.failures) for r in results), Counter())),
    }
    if summary["kind"] == "on":
        summary["meets_target"] = (
            summary["p999_over_p50"]["median"] <= MAX_P999_OVER_P50
            and summary["extra_share"]["median"] <= MAX_EXTRA_SHARE
        )
    return summary


def _range(figure: dict[str, float], digits: int = 2, scale: float = 1.0, unit: str = "") -> str:
    return (
        f"{figure['median'] * scale:.{digits}f}{unit} "
        f"({figure['min'] * scale:.{digits}f}-{figure['max'] * scale:.{digits}f})"
    )


_KIND_LABELS = {
    "off": "hedging off",
    "on": "hedging on",
    "control": "control: no stalls, hedging off",
}


def _table(summaries: list[dict[str, Any]]) -> str:
    lines = [
        "| upstream | run | calls | p50 ms | p99 ms | p99.9 ms | max ms | p99.9/p50 "
        "| extra requests | hedges fired | won | wasted | target | failed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for s in summaries:
        failed = ", ".join(f"{code} {count}" for code, count in s["failures"].items()) or "0"
        verdict = {True: "PASS", False: "MISS"}.get(s.get("meets_target"), "-")  # type: ignore[arg-type]
        lines.append(
            f"| {s['upstream']} | {_KIND_LABELS[s['kind']]} | {s['calls']} "
            f"| {_range(s['p50_ms'])} | {_range(s['p99_ms'])} | {_range(s['p999_ms'])} "
            f"| {s['max_ms']:.1f} | {_range(s['p999_over_p50'], unit='x')} "
            f"| {_range(s['extra_share'], scale=100, unit='%')} | {s['hedges_fired']} "
            f"| {s['hedges_won']} | {s['hedges_wasted']} | {verdict} | {failed} |"
        )
    return "\n".join(lines)


def run_upstream(name: str, rounds: int, calls: int, concurrency: int) -> list[dict[str, Any]]:
    """Off, on and control runs, ``rounds`` times, the order rotating each round."""
    runs: dict[str, list[TailResult]] = {"off": [], "on": [], "control": []}
    kinds = list(runs)
    no_stalls = Latency(base_ms=STALLING.base_ms, jitter_ms=STALLING.jitter_ms)
    with upstream(name, STALLING) as stalling, upstream(name, no_stalls) as control:
        for index in range(rounds):
            # Rotate which goes first, so drift in load favours none of them.
            for kind in kinds[index % 3 :] + kinds[: index % 3]:
                print(f"{name} round {index + 1}/{rounds}: {kind} ...", file=sys.stderr, flush=True)
                url, requests_seen = control if kind == "control" else stalling
                runs[kind].append(measure(name, kind, url, requests_seen, calls, concurrency))
    return [summarize(runs[kind]) for kind in kinds]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls per run")
    # With few calls in flight the peak-EWMA balancer simply starves the
    # stalling target after its first stall, and there is no tail to hedge;
    # 32 in flight keeps both targets busy, as real bid traffic does.
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating off/on runs per upstream (medians)"
    )
    parser.add_argument(
        "--upstreams", default="emulator,stub", help="comma-separated: emulator, stub"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.upstreams.split(",") if name.strip()]
    unknown = sorted(set(names) - {"emulator", "stub"})
    if unknown or not names:
        parser.error(f"unknown upstreams: {', '.join(unknown)}; choose from emulator, stub")
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls must be at least 1")
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency
        pass
    summaries: list[dict[str, Any]] = []
    for name in names:
        summaries += run_upstream(name, args.rounds, args.calls, args.concurrency)
    if args.json:
        print(json.dumps({"summaries": summaries, "settings": vars(args)}, indent=2))
    else:
        print(
            "Two targets at 2 ms +- 0.5 ms, one stalling 2% of answers by 50 ms; "
            f"{args.calls} calls a run, {args.concurrency} in flight, upstream in its own "
            f"process; median (min-max) of {args.rounds} alternating rounds. Extra requests: "
            "requests the upstream answered per call, less one. Target (hedging on): p99.9 <= "
            f"{MAX_P999_OVER_P50:g}x p50 at <= {MAX_EXTRA_SHARE:.0%} extra.\n"
        )
        print(_table(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
