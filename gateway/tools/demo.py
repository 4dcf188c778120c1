"""``python -m gateway demo``: synthetic OpenRTB traffic through the pre-filter, on the emulator.

What runs, all on loopback, with nothing but the package installed:

* the emulator, in its own process: the default endpoints plus a second
  XGBoost bid-filter endpoint (``bid-filter-b``, which stalls 2% of its
  answers by 30 ms and answers 0.5% ServiceUnavailable) and a second
  multi-model endpoint (``mme-b``);
* one :class:`~gateway.Gateway` with two routes: ``bid-filter`` over
  ``bid-filter`` and ``bid-filter-b`` (hedging and retries on) and
  ``models`` over ``mme`` and ``mme-b`` (MME affinity: each model prefers
  one target), and the prediction cache (near tier, plus Redis with
  ``--redis URL``; the RTB lane's batches skip it, a batch never repeats);
* the RTB lane: 32 concurrent closed-loop "exchange connections" replay
  synthetic bid requests (``gateway.rtb.synth``) through
  :class:`~gateway.rtb.BidFilter` (parse, features, micro-batched scoring
  through the route, keep/drop policy);
* the sidecar lane: the sidecar (the SageMaker Runtime API on a local
  port, in this process, sharing the Gateway) called through the
  aiobotocore-shaped drop-in (``gateway.compat``): single-row bid scores
  (as a non-Python ad server would send them) and MME calls;
* the RTB proxy lane: an "exchange" posting bid requests to the sidecar's
  OpenRTB path (``[rtb]``), which answers 204 for dropped requests and
  forwards kept ones to a toy bidder, relaying its bid.

At the end it prints a summary: requests/s, filter latency p50/p99/p99.9,
share filtered and true bids lost, failed open, cache hit ratios, hedges
and retries, and the share of attempts each target took.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from gateway import Gateway, errors
from gateway._aws.models import INFERENCE_ROUTER_RUNTIME, service_model
from gateway.compat import SageMakerRuntimeClient, get_session
from gateway.emulator import Emulator, EmulatorConfig, EmulatorProcess
from gateway.rtb import BidFilter, FilterPolicy, load_bundled_spec, parse_bid_request
from gateway.rtb.bidder import ToyBidder
from gateway.rtb.synth import SyntheticBidRequest, SyntheticTraffic
from gateway.sidecar import Sidecar

__all__ = ["DEMO_ROUTES", "demo_emulator_config", "main"]

CREDENTIALS = ("AKIDDEMO", "demo-secret-key")
RTB_CONCURRENCY = 32
SIDECAR_WORKERS = 2
SIDECAR_PAUSE_S = 0.004  # each sidecar worker: one call, then this pause
PROXY_WORKERS = 2
PROXY_PAUSE_S = 0.004
MME_MODELS = ("model-a.tar.gz", "model-b.tar.gz", "model-c.tar.gz", "model-d.tar.gz")

# The extra emulator endpoints, in the emulator's config format.
_EXTRA_ENDPOINTS: dict[str, Any] = {
    "bid-filter-b": {
        "model": {"type": "xgboost"},
        "latency": {"base_ms": 1.0, "jitter_ms": 0.2, "tail_share": 0.02, "tail_ms": 30.0},
        "faults": {"error_rates": {"ServiceUnavailable": 0.005}},
    },
    "mme": {
        "model": {"type": "echo"},
        "mme": {"models": list(MME_MODELS), "cold_load_ms": 200, "max_loaded": 4},
    },
    "mme-b": {
        "model": {"type": "echo"},
        "mme": {"models": list(MME_MODELS), "cold_load_ms": 200, "max_loaded": 4},
    },
}

DEMO_ROUTES: dict[str, Any] = {
    "bid-filter": {
        # A small share through the emulator's inference router (its routing target
        # bid-filter: the bid-filter endpoint here, bid-filter-eu in eu-west-1).
        "targets": [
            {"endpoint": "bid-filter"},
            {"endpoint": "bid-filter-b"},
            {"inference_router": "bid-router", "routing_target": "bid-filter", "weight": 0.1},
        ],
        "timeout_ms": 50,
        "hedge": {"enabled": True, "max_extra_load": 0.05, "min_delay_ms": 2},
        "retry": {"max_attempts": 2, "budget_ratio": 0.1, "min_per_second": 5},
    },
    "models": {
        "targets": [{"endpoint": "mme"}, {"endpoint": "mme-b"}],
        "timeout_ms": 2000,
        "mme_preferred": 1,
        "retry": {"max_attempts": 2},
    },
}


def router_lane_unavailable() -> str | None:
    """Why the inference-router lane cannot run with the installed botocore (None: it can)."""
    try:
        service_model(INFERENCE_ROUTER_RUNTIME)
    except errors.ServiceModelUnavailable as missing:
        return str(missing)
    return None


def demo_routes(with_router: bool) -> dict[str, Any]:
    """DEMO_ROUTES, without the inference-router target unless ``with_router``."""
    if with_router:
        return DEMO_ROUTES
    routes = {name: dict(route) for name, route in DEMO_ROUTES.items()}
    targets = routes["bid-filter"]["targets"]
    routes["bid-filter"]["targets"] = [t for t in targets if "inference_router" not in t]
    return routes


def demo_emulator_config(seed: int = 7) -> EmulatorConfig:
    """The default emulator endpoints plus ``bid-filter-b`` and ``mme-b``."""
    config = EmulatorConfig.default(seed=seed)
    extra = EmulatorConfig.from_dict({"endpoints": _EXTRA_ENDPOINTS})
    return replace(config, endpoints={**config.endpoints, **extra.endpoints})


@dataclass
class _RtbLane:
    latencies: list[float] = field(default_factory=list)
    decided: int = 0
    dropped_bids: int = 0  # dropped requests whose ground truth was "a DSP bids"
    bids: int = 0
    invalid: int = 0


@dataclass
class _SidecarLane:
    latencies: list[float] = field(default_factory=list)
    score_calls: int = 0
    score_hits: int = 0
    mme_calls: int = 0
    errors: Counter[str] = field(default_factory=Counter)


@dataclass
class _ProxyLane:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)


def _percentile(ordered: Sequence[float], share: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def _rtb_worker(
    bid_filter: BidFilter,
    pool: list[SyntheticBidRequest],
    order: itertools.cycle[int],
    lane: _RtbLane,
    stop: asyncio.Event,
) -> None:
    clock = time.perf_counter
    latencies = lane.latencies
    while not stop.is_set():
        item = pool[next(order)]
        started = clock()
        decision = await bid_filter.decide(item.body, now=item.timestamp)
        latencies.append(clock() - started)
        lane.decided += 1
        if item.label:
            lane.bids += 1
            if not decision.keep:
                lane.dropped_bids += 1


async def _sidecar_worker(
    client: SageMakerRuntimeClient,
    traffic: SyntheticTraffic,
    worker: int,
    lane: _SidecarLane,
    stop: asyncio.Event,
) -> None:
    """Single-row scores and MME calls through the sidecar, from the aiobotocore drop-in."""
    import botocore.exceptions

    spec = load_bundled_spec()
    rng = random.Random(worker)
    clock = time.perf_counter
    for n in itertools.count():
        if stop.is_set():
            return
        started = clock()
        try:
            if n % 4 == 3:
                # A varying body, so the cache does not hide the model loads.
                model = rng.choices(MME_MODELS, (8, 4, 2, 1))[0]
                response = await client.invoke_endpoint(
                    EndpointName="models",
                    Body=b'{"request": %d}' % n,
                    ContentType="application/json",
                    TargetModel=model,
                )
                lane.mme_calls += 1
            else:
                # An ad server that computed its features and asks for one score,
                # "now": rows repeat (popular domains, same hour), so the cache hits.
                row = spec.to_csv_row(parse_bid_request(traffic.one().body), time.time())
                response = await client.invoke_endpoint(
                    EndpointName="bid-filter", Body=row, ContentType="text/csv", Accept="text/csv"
                )
                lane.score_calls += 1
                if response["ResponseMetadata"]["HTTPHeaders"].get("x-gateway-cache"):
                    lane.score_hits += 1
            await response["Body"].read()
            lane.latencies.append(clock() - started)
        except botocore.exceptions.ClientError as exc:
            lane.errors[str(exc.response.get("Error", {}).get("Code", "ClientError"))] += 1
        except botocore.exceptions.BotoCoreError as exc:
            lane.errors[type(exc).__name__] += 1
        await asyncio.sleep(SIDECAR_PAUSE_S)


async def _proxy_worker(
    exchange: httpx.AsyncClient,
    url: str,
    pool: list[SyntheticBidRequest],
    worker: int,
    lane: _ProxyLane,
    stop: asyncio.Event,
) -> None:
    """An exchange posting bid requests to the sidecar's OpenRTB path."""
    clock = time.perf_counter
    headers = {"content-type": "application/json", "x-openrtb-version": "2.6"}
    for n in itertools.count(worker * 7919):
        if stop.is_set():
            return
        started = clock()
        try:
            answer = await exchange.post(url, content=pool[n % len(pool)].body, headers=headers)
            lane.latencies.append(clock() - started)
            lane.statuses[answer.status_code] += 1
        except httpx.HTTPError as exc:
            lane.errors[type(exc).__name__] += 1
        await asyncio.sleep(PROXY_PAUSE_S)


async def _progress(
    duration: float, started: float, rtb: _RtbLane, bid_filter: BidFilter, stop: asyncio.Event
) -> None:
    interactive = sys.stdout.isatty()
    width = 30
    last_print = started
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.25)
        now = time.perf_counter()
        elapsed = min(now - started, duration)
        stats = bid_filter.stats
        done = stats.kept + stats.dropped
        filled = int(width * elapsed / duration)
        line = (
            f"[{'#' * filled}{'.' * (width - filled)}] {elapsed:5.1f}/{duration:.0f} s  "
            f"{rtb.decided / max(now - started, 1e-9):>8,.0f} req/s  "
            f"filtered {stats.dropped / max(done, 1):6.1%}"
        )
        if interactive:
            print(f"\r{line}", end="", flush=True)
        elif now - last_print >= 5.0:
            print(line, flush=True)
            last_print = now
    if interactive:
        print(flush=True)


def _build_gateway(
    emulator_url: str,
    redis_url: str | None,
    bidder_url: str,
    threshold: float,
    with_router: bool = True,
) -> Gateway:
    cache: dict[str, Any] = {"namespace": "demo", "ttl_s": 300}
    if redis_url:
        cache["redis_url"] = redis_url
    return Gateway.from_config(
        {
            "region": "us-east-1",
            "endpoint_url": emulator_url,
            "credentials": {
                "access_key_id": CREDENTIALS[0],
                "secret_access_key": CREDENTIALS[1],
            },
            "pool": {"max_connections": 64, "prewarm": 8},
            "routes": demo_routes(with_router),
            "cache": cache,
            # The sidecar's OpenRTB proxy: 204 for dropped requests, kept ones to the bidder.
            "rtb": {"bidders": [bidder_url], "endpoint": "bid-filter", "threshold": threshold},
        }
    )


async def _warm_up(gateway: Gateway, row: bytes) -> None:
    # The emulator compiles the XGBoost model on each endpoint's first call.
    for endpoint in ("bid-filter", "bid-filter-b"):
        for _ in range(3):
            try:
                await gateway.invoke(
                    endpoint, row, content_type="text/csv", accept="text/csv", cache=False
                )
                break
            except Exception:  # the injected 0.5% ServiceUnavailable, at worst
                continue


async def _run(args: argparse.Namespace) -> int:
    duration: float = args.duration
    print("sagemaker-gateway demo: the RTB pre-filter on the built-in SageMaker emulator")
    print("  starting the emulator (own process) and generating synthetic OpenRTB traffic ...")
    skipped = router_lane_unavailable()
    if skipped is not None:
        print(f"  the inference-router lane is skipped: {skipped}")
    emulator_task = asyncio.create_task(
        asyncio.to_thread(Emulator.start_subprocess, demo_emulator_config())
    )
    pool = list(SyntheticTraffic(seed=1).generate(args.pool))
    emulator: EmulatorProcess = await emulator_task
    try:
        return await _run_with(args, duration, pool, emulator)
    finally:
        emulator.stop()


async def _run_with(
    args: argparse.Namespace,
    duration: float,
    pool: list[SyntheticBidRequest],
    emulator: EmulatorProcess,
) -> int:
    bidder = ToyBidder(keep_requests=False)
    bidder_url = await bidder.start()
    try:
        await _replay(args, duration, pool, emulator, bidder, bidder_url)
    finally:
        await bidder.close()
    return 0


async def _replay(
    args: argparse.Namespace,
    duration: float,
    pool: list[SyntheticBidRequest],
    emulator: EmulatorProcess,
    bidder: ToyBidder,
    bidder_url: str,
) -> None:
    with_router = router_lane_unavailable() is None
    gateway = _build_gateway(emulator.url, args.redis, bidder_url, args.threshold, with_router)
    gateway.enable_metrics()  # the summary reads this hook's counters
    rtb, lane, proxy = _RtbLane(), _SidecarLane(), _ProxyLane()
    async with gateway, Sidecar(gateway, "127.0.0.1", 0) as sidecar:
        client = get_session().create_client(
            "sagemaker-runtime",
            region_name="us-east-1",
            endpoint_url=sidecar.url,
            aws_access_key_id="AKIDSIDECARCLIENT",
            aws_secret_access_key="any-secret-the-sidecar-accepts-on-loopback",
        )
        bid_filter = BidFilter(
            _BatchScorer(gateway),
            "bid-filter",
            policy=FilterPolicy(threshold=args.threshold, seed=1),
        )
        spec = load_bundled_spec()
        await _warm_up(gateway, spec.to_csv_row(parse_bid_request(pool[0].body), time.time()))
        # Built before the clock starts: each costs tens of milliseconds of CPU.
        await client.__aenter__()
        lane_traffic = [SyntheticTraffic(seed=100 + n) for n in range(SIDECAR_WORKERS)]
        exchanges = [httpx.AsyncClient(timeout=2.0) for _ in range(PROXY_WORKERS)]
        cache_before = _cache_counts(gateway)
        print(f"  emulator   {emulator.url}  bid-filter, bid-filter-b (XGBoost), mme, mme-b")
        print(f"  sidecar    {sidecar.url}  (SageMaker Runtime API + OpenRTB proxy, same Gateway)")
        print(f"  bidder     {bidder_url}  (toy ad server behind the OpenRTB proxy)")
        print(
            f"  cache      {'near tier + Redis ' + args.redis if args.redis else 'near tier only'}"
        )
        print(f"  replaying for {duration:g} s ...", flush=True)
        stop = asyncio.Event()
        order = _shuffled_cycle(len(pool))
        started = time.perf_counter()
        try:
            workers = [
                asyncio.create_task(_rtb_worker(bid_filter, pool, order, rtb, stop))
                for _ in range(RTB_CONCURRENCY)
            ]
            workers += [
                asyncio.create_task(_sidecar_worker(client, lane_traffic[n], n, lane, stop))
                for n in range(SIDECAR_WORKERS)
            ]
            auction = f"{sidecar.url}/openrtb2/auction"
            workers += [
                asyncio.create_task(_proxy_worker(exchanges[n], auction, pool, n, proxy, stop))
                for n in range(PROXY_WORKERS)
            ]
            progress = asyncio.create_task(_progress(duration, started, rtb, bid_filter, stop))
            await asyncio.sleep(duration)
            stop.set()
            await asyncio.gather(*workers)
            elapsed = time.perf_counter() - started
            await progress
        finally:
            await client.close()
            for exchange in exchanges:
                await exchange.aclose()
        await bid_filter.aclose()
        stats = await asyncio.to_thread(emulator.stats)
        runtimes = await asyncio.to_thread(_runtime_stats, emulator)
        _summary(args, elapsed, rtb, lane, bid_filter, gateway, cache_before, (stats, runtimes))
        _proxy_summary(proxy, bidder)


def _shuffled_cycle(size: int) -> itertools.cycle[int]:
    order = list(range(size))
    random.Random(3).shuffle(order)
    return itertools.cycle(order)


class _BatchScorer:
    """``Gateway.invoke`` for the RTB lane's batches, past the prediction cache.

    A batch of distinct bid requests never repeats in live traffic, so
    looking it up would only cost time; in a replay that cycles through a
    fixed pool it *would* repeat, and hits would flatter the figures.
    """

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def invoke(
        self, endpoint: str, body: bytes, *, content_type: str, accept: str, timeout: float | None
    ) -> Any:
        return await self._gateway.invoke(
            endpoint, body, content_type=content_type, accept=accept, timeout=timeout, cache=False
        )


def _cache_counts(gateway: Gateway) -> tuple[int, int, int]:
    cache = gateway.prediction_cache
    if cache is None:
        return 0, 0, 0
    stats = cache.stats
    return stats.near_hits, stats.redis_hits + stats.stale_served + stats.coalesced, stats.misses


def _runtime_stats(emulator: EmulatorProcess) -> dict[str, Any]:
    """The emulator's inference router and Global Inference Gateway counters."""
    response = emulator._client.get("/_emulator/runtimes/stats")
    response.raise_for_status()
    stats: dict[str, Any] = response.json()
    return stats


def _router_stats(emulator_stats: Any) -> Counter[tuple[str, str]]:
    """bid-router's routed calls by (destination ARN, routing reason)."""
    routed = Counter[tuple[str, str]]()
    for router, _, arn, reason, count in emulator_stats[1]["routers"]["routed"]:
        if router == "bid-router":
            routed[(arn, reason)] += count
    return routed


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def _summary(
    args: argparse.Namespace,
    elapsed: float,
    rtb: _RtbLane,
    lane: _SidecarLane,
    bid_filter: BidFilter,
    gateway: Gateway,
    cache_before: tuple[int, int, int],
    emulator_stats: Any,
) -> None:
    stats = bid_filter.stats
    ordered = sorted(rtb.latencies)
    decided = max(rtb.decided, 1)
    metrics = gateway.metrics
    batch_rows = sum(size * count for size, count in stats.batch_sizes.items())
    print()
    print(f"Summary ({elapsed:.1f} s)")
    print("RTB pre-filter (library: BidFilter -> Gateway route 'bid-filter')")
    print(f"  requests:          {rtb.decided:,}")
    print(f"  requests/s:        {rtb.decided / elapsed:,.0f}")
    print(
        f"  filter latency:    p50 {_ms(_percentile(ordered, 0.50))}   "
        f"p99 {_ms(_percentile(ordered, 0.99))}   p99.9 {_ms(_percentile(ordered, 0.999))}"
    )
    print(
        f"  filtered:          {stats.dropped / decided:.1%} answered 'no bid' "
        f"(threshold {args.threshold:g}); true bids lost: {rtb.dropped_bids:,} of "
        f"{rtb.bids:,} ({rtb.dropped_bids / max(rtb.bids, 1):.1%})"
    )
    print(f"  failed open:       {stats.failed_open:,} ({stats.failed_open / decided:.2%})")
    print(
        f"  scoring calls:     {stats.batches:,} batches, "
        f"{batch_rows / max(stats.batches, 1):.1f} requests per call on average"
    )
    near, other, misses = (
        now - before for now, before in zip(_cache_counts(gateway), cache_before, strict=True)
    )
    lookups = near + other + misses
    print("Sidecar (aiobotocore drop-in -> sidecar HTTP -> same Gateway)")
    print(
        f"  calls:             {lane.score_calls + lane.mme_calls:,} "
        f"({lane.score_calls:,} single-row scores, {lane.mme_calls:,} MME calls); "
        f"errors: {dict(lane.errors) or 'none'}"
    )
    sidecar_ordered = sorted(lane.latencies)
    print(
        f"  latency:           p50 {_ms(_percentile(sidecar_ordered, 0.50))}   "
        f"p99 {_ms(_percentile(sidecar_ordered, 0.99))}"
    )
    cold = sum(emulator_stats[0].cold_loads.values())
    sticky = " (each model loaded once, on its preferred target)" if cold <= len(MME_MODELS) else ""
    models = len(MME_MODELS)
    print(f"  MME:               {cold} cold loads for {models} models on 2 endpoints{sticky}")
    print("Prediction cache")
    print(
        f"  cache hit ratio:   {(near + other) / max(lookups, 1):.1%} of {lookups:,} lookups "
        f"(near {near:,}, redis/stale/coalesced {other:,}, misses {misses:,})"
    )
    print(
        f"  single-row scores: {lane.score_hits / max(lane.score_calls, 1):.1%} answered by the "
        "cache (sidecar lane; RTB batches skip the cache: a batch never repeats)"
    )
    print("Routing")
    for route in ("bid-filter", "models"):
        attempts = {
            target: m.calls for (name, target), m in metrics.targets.items() if name == route
        }
        total = max(sum(attempts.values()), 1)
        shares = "   ".join(f"{t} {n / total:.1%}" for t, n in sorted(attempts.items()))
        print(f"  per-target share:  {route}: {shares}")
    if router_lane_unavailable() is not None:
        print("  inference router:  skipped (this botocore has no model of its runtime)")
        _hedge_and_retry_summary(gateway)
        return
    routed = _router_stats(emulator_stats)
    total_routed = max(sum(routed.values()), 1)
    reasons = Counter[str]()
    for (_, reason), count in routed.items():
        reasons[reason] += count
    print(
        f"  inference router:  {sum(routed.values()):,} calls via bid-router; routing reasons: "
        + (", ".join(f"{r} {n / total_routed:.0%}" for r, n in reasons.most_common()) or "none")
    )
    destinations = Counter[str]()
    for (arn, _), count in routed.items():
        region, name = arn.split(":")[3], arn.rsplit("/", 1)[-1]
        destinations[f"{name} ({region})"] += count
    picked = "   ".join(f"{d} {n / total_routed:.1%}" for d, n in sorted(destinations.items()))
    print(f"  router picked:     {picked or '-'}")
    _hedge_and_retry_summary(gateway)


def _hedge_and_retry_summary(gateway: Gateway) -> None:
    metrics = gateway.metrics
    hedges = metrics.hedges.get("bid-filter", 0)
    calls = sum(m.calls for (name, _), m in metrics.targets.items() if name == "bid-filter")
    print(
        f"  hedges fired:      {hedges:,} ({hedges / max(calls, 1):.1%} of attempts), "
        f"{metrics.hedge_wins.get('bid-filter', 0):,} won"
    )
    retries = sum(metrics.retries.values())
    upstream_errors = Counter[str]()
    for target in metrics.targets.values():
        upstream_errors.update(target.errors)
    print(f"  retries:           {retries:,} (upstream errors: {dict(upstream_errors) or 'none'})")


def _proxy_summary(proxy: _ProxyLane, bidder: ToyBidder) -> None:
    total = sum(proxy.statuses.values())
    ordered = sorted(proxy.latencies)
    print("RTB proxy (exchange -> sidecar POST /openrtb2/auction -> toy bidder)")
    print(
        f"  auctions:          {total:,}: {proxy.statuses.get(204, 0):,} answered 204 no bid, "
        f"{proxy.statuses.get(200, 0):,} bids relayed; the bidder saw {bidder.requests:,}"
        + (f"; client errors {dict(proxy.errors)}" if proxy.errors else "")
    )
    print(
        f"  latency:           p50 {_ms(_percentile(ordered, 0.50))}   "
        f"p99 {_ms(_percentile(ordered, 0.99))} (httpx client, in this process)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gateway demo",
        description="Synthetic OpenRTB traffic through the gateway's RTB pre-filter, "
        "on the built-in SageMaker Runtime emulator.",
    )
    parser.add_argument(
        "--duration", type=float, default=20.0, help="seconds of replay (default: 20)"
    )
    parser.add_argument(
        "--redis", metavar="URL", help="Redis URL for the cache's second tier (default: none)"
    )
    parser.add_argument(
        "--threshold", type=float, default=0.01, help="bid probability below which to drop"
    )
    parser.add_argument(
        "--pool", type=int, default=10_000, help="distinct synthetic requests replayed"
    )
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.pool < 1:
        parser.error("--duration and --pool must be positive")
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.run(_run(args))
    result: int = uvloop.run(_run(args))
    return result
