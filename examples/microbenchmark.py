"""Per-call overhead of the gateway: a small version of ``python -m bench.compare``.

    python examples/microbenchmark.py [--calls N]

Against the emulator's ``constant`` endpoint (in its own process, so its CPU
is not counted), measures the gateway's client side:

* sequential: wall time per call, one call after another;
* 64 in flight: client CPU per call (``time.process_time()`` of this
  process divided by the calls) and calls per second;
* connections opened while measuring: none (warm keep-alive connections
  are reused, never opened per call).

The full comparison with aiobotocore, boto3, httpx and a raw-socket floor,
against a faster stub, is ``python -m bench.compare``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

from gateway import Gateway
from gateway.emulator import Emulator

HERE = Path(__file__).resolve().parent
BODY = b"3,19,12,345,6,20,2"


async def measure(url: str, calls: int) -> None:
    gateway = Gateway(
        "us-east-1",
        endpoint_url=url,
        credentials=("AKIDEXAMPLE", "secret"),
        pool={"max_connections": 64, "prewarm": 64},
    )
    async with gateway:

        async def call() -> None:
            await gateway.invoke(
                "constant", BODY, content_type="text/csv", accept="application/json", timeout=1.0
            )

        for _ in range(200):  # warm-up
            await call()
        opened_before = _connections_opened(gateway)

        batches = []
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(calls // 10):
                await call()
            batches.append((time.perf_counter() - started) / (calls // 10))
        print(f"sequential:  {statistics.median(batches) * 1e6:8.1f} us wall per call")

        async def worker(count: int) -> None:
            for _ in range(count):
                await call()

        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker(calls // 64) for _ in range(64)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        done = (calls // 64) * 64
        print(
            f"64 in flight: {cpu / done * 1e6:7.1f} us client CPU per call, "
            f"{done / wall:,.0f} calls/s"
        )
        opened = _connections_opened(gateway) - opened_before
        print(f"connections opened while measuring: {opened} (warm keep-alive pool)")


def _connections_opened(gateway: Gateway) -> int:
    # The native transport counts what it opens; other transports may not.
    stats = getattr(gateway.transport, "stats", None)
    return int(getattr(stats, "connections_opened", 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=6400)
    args = parser.parse_args()
    config = {"seed": 1, "endpoints": {"constant": {"model": {"type": "constant", "body": "0.5"}}}}
    with Emulator.start_subprocess(config) as emulator:
        asyncio.run(measure(emulator.url, args.calls))


if __name__ == "__main__":
    main()
