"""Tail latency with and without hedging: ``python -m bench.tail``.

Two targets on the emulator (in its own process), each answering in
2 ms +- 0.5 ms; one of them also stalls 2% of its answers by 50 ms. The same
calls run through a route with hedging off, then on, and the table shows
p50, p99, p99.9 and the share of extra requests hedging cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from gateway import Gateway, GatewayError
from gateway.emulator import Emulator

EMULATOR_CONFIG: dict[str, Any] = {
    "seed": 5,
    "endpoints": {
        "steady": {"latency": {"base_ms": 2.0, "jitter_ms": 0.5}},
        "stalling": {
            "latency": {"base_ms": 2.0, "jitter_ms": 0.5, "tail_share": 0.02, "tail_ms": 50.0}
        },
    },
}


@dataclass
class TailResult:
    hedging: bool
    calls: int
    upstream: int
    extra_share: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    hedges: int
    hedge_wins: int
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
) -> tuple[list[float], Counter[str], Any]:
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
        # Warm-up: connections, the latency window behind the hedge delay.
        for _ in range(200):
            await gateway.invoke("bid", b"1,2,3", content_type="text/csv", timeout=1.0)
        gateway.metrics.hedges.clear()
        gateway.metrics.hedge_wins.clear()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies, failures, gateway.metrics


def measure(url: str, stats: Any, hedging: bool, calls: int, concurrency: int) -> TailResult:
    before = stats()
    latencies, failures, metrics = asyncio.run(_run(url, hedging, calls, concurrency))
    after = stats()
    upstream = after.count() - before.count() - 200  # less the warm-up calls
    calls_made = len(latencies) + sum(failures.values())
    latencies.sort()
    return TailResult(
        hedging=hedging,
        calls=len(latencies),
        upstream=upstream,
        extra_share=upstream / calls_made - 1.0,
        p50_ms=_percentile(latencies, 0.50) * 1000,
        p99_ms=_percentile(latencies, 0.99) * 1000,
        p999_ms=_percentile(latencies, 0.999) * 1000,
        max_ms=latencies[-1] * 1000,
        hedges=metrics.hedges.get("bid", 0),
        hedge_wins=metrics.hedge_wins.get("bid", 0),
        failures=dict(failures),
    )


def _table(results: list[TailResult]) -> str:
    lines = [
        "| hedging | calls | p50 ms | p99 ms | p99.9 ms | max ms | p99.9/p50 | extra requests "
        "| hedges (won) | failed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    lines.extend(_row(r) for r in results)
    return "\n".join(lines)


def _row(r: TailResult) -> str:
    failed = ", ".join(f"{code} {count}" for code, count in r.failures.items()) or "0"
    return (
        f"| {'on' if r.hedging else 'off'} | {r.calls} | {r.p50_ms:.2f} | {r.p99_ms:.2f} "
        f"| {r.p999_ms:.2f} | {r.max_ms:.1f} | {r.p999_ms / r.p50_ms:.2f}x "
        f"| {r.extra_share * 100:.2f}% | {r.hedges} ({r.hedge_wins}) | {failed} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    # With few calls in flight the peak-EWMA balancer simply starves the
    # stalling target after its first stall, and there is no tail to hedge;
    # 32 in flight keeps both targets busy, as real bid traffic does.
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency
        pass
    with Emulator.start_subprocess(EMULATOR_CONFIG) as emulator:
        results = [
            measure(emulator.url, emulator.stats, hedging, args.calls, args.concurrency)
            for hedging in (False, True)
        ]
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print(
            f"Two targets at 2 ms +- 0.5 ms, one stalling 2% of answers by 50 ms; "
            f"{args.calls} calls, {args.concurrency} in flight, emulator in its own process.\n"
        )
        print(_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
