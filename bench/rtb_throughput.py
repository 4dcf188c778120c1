"""RTB pre-filter throughput: parse + features + batched scoring via Gateway + policy.

    python -m bench.rtb_throughput                  # rate sweep, both upstreams
    python -m bench.rtb_throughput --quick --json   # CI smoke run
    python -m bench.rtb_throughput --profile 20000  # cProfile of the filter side
    python -m bench.rtb_throughput --cache          # also with cached scores (near tier)
    python -m bench.rtb_throughput --gc default     # CPython's GC as it comes, not frozen
    python -m bench.rtb_throughput --rules-cost     # what 20 rules and the rate cap add to submit

The filter runs here, on one event loop (one core at most). Synthetic bid
requests arrive open-loop at a steady offered rate (submitted each ~1 ms
tick, through `BidFilter.submit`, no task per request); latency is measured
from just before submit (so it includes parse and features) to the decision.
The scoring endpoint runs in a child process so its CPU is not the filter's:

  emulator  the emulator's `bid-filter` endpoint: the real XGBoost model
            (pure Python, ~3-5 us per row) behind the SageMaker wire API
  stub      a constant-score endpoint (one "0.5" line per row), so the
            filter side's own cost is isolated from the model's

With ``--cache`` every upstream is measured twice, without and with a
near-tier score cache (``BidFilter(..., cache=PredictionCache(...))``, a
fresh, cold cache per rate), on one long stream of distinct synthetic
requests (no cycling through a small pool, which would make every request a
hit after the first pass): rows repeat only as the synthetic traffic repeats
them (popular domains, apps and geos, all within one hour). The measured
window continues the stream after the warm-up, and the hit share is
reported. A long-running process has seen more of the traffic, so its hit
share is higher than here.

``--gc frozen`` (the default) runs ``gateway.tune_gc()`` once per rate,
after the filter and gateway are built and before the warm-up:
``gc.collect()`` + ``gc.freeze()``, as the README tells embedders to do
after start-up, so that full collections no longer walk the bodies, the
model spec and every module; it is undone (``gc.unfreeze()``) after the
rate. ``--gc default`` leaves the collector as CPython starts it: its full
passes show up as stalls of tens of ms in the p99 at high rates. The mode
is in the report's plan and in the table's first line.

CPU use is read per process (getrusage here, /proc for the child) over the
measured window. On a 2-core machine both processes share the cores with
whatever else runs, so compare ratios and CPU per request, not absolutes.

``--rules-cost`` measures no upstream: the CPU of ``BidFilter.submit`` on
raw bodies, without rules and with ``TWENTY_RULES`` (twenty rules over
nineteen paths, which most synthetic requests go through nearly all of)
plus the proxy's rate cap admission of each request (buckets roomy: its
common path). The two run in alternating rounds (which goes first alternates
too) on the same bodies; it reports per request each one's CPU, the added
microseconds (median and spread over the rounds) and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import gc
import io
import json
import multiprocessing
import os
import pstats
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from gateway import Gateway, tune_gc
from gateway._config.reader import read
from gateway.cache import CacheConfig, PredictionCache
from gateway.emulator import Emulator
from gateway.rtb import (
    BidFilter,
    Decision,
    FilterPolicy,
    FilterStats,
    load_bundled_spec,
    parse_bid_request,
)
from gateway.rtb.request import parse_record
from gateway.rtb.synth import sample_bodies
from gateway.sidecar._ratecap import BidderCap

NOW = 1_717_597_800.0
TICK_S = 0.001
GC_MODES = ("default", "frozen")
_GC_NOTES = {
    "default": "default (CPython's collector as it starts)",
    "frozen": "frozen (gateway.tune_gc(): gc.collect() + gc.freeze() before each rate)",
}
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Plan:
    rates: tuple[int, ...]
    seconds: float
    warmup_s: float
    upstreams: tuple[str, ...]
    model_latency_ms: float
    max_batch: int
    max_wait_ms: float
    min_batch: int
    threshold: float
    cache: tuple[bool, ...] = (False,)
    gc: str = "frozen"  # one of GC_MODES


@dataclass
class Row:
    upstream: str
    cache: bool
    offered_rps: float
    achieved_rps: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    filter_cpu_pct: float
    filter_cpu_us_per_request: float
    upstream_cpu_pct: float
    upstream_cpu_us_per_request: float
    mean_batch: float
    batches: int
    failed_open: int
    kept_share: float
    cache_hit_share: float
    keeping_up: bool
    gc_frozen_objects: int = 0  # what tune_gc() froze before this rate (--gc frozen)


# -- upstreams (child processes) ---------------------------------------------------


def _constant_scores_server(port_out: Any) -> None:
    """Child process: answers each text/csv POST with one "0.5" line per row."""
    from gateway._server.processes import die_with_parent

    die_with_parent()
    import uvloop

    from gateway._server.http import Request, Response, start_server

    headers = (("Content-Type", "text/csv"),)

    async def handle(request: Request) -> Response:
        return Response(200, headers, b"0.5\n" * (request.body.count(b"\n") + 1))

    async def serve() -> None:
        server = await start_server(handle, "127.0.0.1", 0)
        port_out.send(server.port)
        await asyncio.Event().wait()  # until terminated

    uvloop.run(serve())


@contextmanager
def upstream(kind: str, plan: Plan) -> Iterator[tuple[str, int]]:
    """(url, pid) of a scoring endpoint named `bid-filter` in a child process."""
    if kind == "emulator":
        latency = {"base_ms": plan.model_latency_ms, "jitter_ms": plan.model_latency_ms / 5}
        endpoint = {"model": {"type": "xgboost"}, "latency": latency}
        process = Emulator.start_subprocess({"seed": 1, "endpoints": {"bid-filter": endpoint}})
        try:
            yield process.url, process.process.pid
        finally:
            process.stop()
        return
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_constant_scores_server, args=(send,), daemon=True)
    child.start()
    try:
        if not receive.poll(30):
            raise RuntimeError("the stub endpoint did not start")
        assert child.pid is not None
        yield f"http://127.0.0.1:{receive.recv()}", child.pid
    finally:
        child.terminate()
        child.join(10)
        receive.close()


def process_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime + stime


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- the load -------------------------------------------------------------------


class Recorder:
    """Latency of each decision; a done-callback per request (no task)."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.kept = 0
        self.outstanding = 0
        self.submitting = True
        self.drained = asyncio.Event()

    def done(self, submitted: float, future: asyncio.Future[Decision]) -> None:
        self.latencies.append(time.perf_counter() - submitted)
        self.outstanding -= 1
        if future.result().keep:
            self.kept += 1
        if not self.outstanding and not self.submitting:
            self.drained.set()

    async def wait_drained(self) -> None:
        self.submitting = False
        if self.outstanding:
            await self.drained.wait()


async def offer(
    bid_filter: BidFilter, bodies: Sequence[bytes], rate: float, seconds: float, start: int = 0
) -> Recorder:
    """Submit `rate` requests per second for `seconds`, then wait for every decision.

    Bodies are taken from `bodies[start]` on, cycling if there are too few.
    """
    recorder = Recorder()
    loop = asyncio.get_running_loop()
    started = loop.time()
    submitted = 0
    total = int(rate * seconds)
    count = len(bodies)
    clock = time.perf_counter
    while submitted < total:
        due = min(total, int((loop.time() - started) * rate) + 1)
        while submitted < due:
            body = bodies[(start + submitted) % count]
            submitted += 1
            at = clock()
            future = bid_filter.submit(body, now=NOW)
            recorder.outstanding += 1
            future.add_done_callback(functools.partial(recorder.done, at))
        await asyncio.sleep(TICK_S)
    await recorder.wait_drained()
    return recorder


def percentile(sorted_values: Sequence[float], share: float) -> float:
    index = min(len(sorted_values) - 1, int(share * len(sorted_values)))
    return sorted_values[index]


def bench_bodies(plan: Plan) -> Sequence[bytes]:
    """A pool of 4096 bodies, cycled; with --cache one stream long enough for any rate."""
    if not any(plan.cache):
        return sample_bodies(4096, seed=17)
    return sample_bodies(int(max(plan.rates) * (plan.warmup_s + plan.seconds)) + 1, seed=17)


async def measure(
    url: str, pid: int, kind: str, rate: int, plan: Plan, bodies: Sequence[bytes], cached: bool
) -> Row:
    policy = FilterPolicy(threshold=plan.threshold)
    score_cache = PredictionCache(CacheConfig(namespace="bench")) if cached else None
    async with Gateway(region="us-east-1", endpoint_url=url, credentials=("AK", "SK")) as gw:
        bid_filter = BidFilter(
            gw, "bid-filter", policy=policy, max_batch=plan.max_batch,
            min_batch=plan.min_batch, max_wait=plan.max_wait_ms / 1000, cache=score_cache,
        )  # fmt: skip
        # Frozen once everything long-lived exists, as an embedding application
        # would after its start-up; undone after the rate, so that each rate
        # starts from the same collector state.
        freeze = plan.gc == "frozen"
        frozen = tune_gc().frozen_objects if freeze else 0
        try:
            await offer(bid_filter, bodies, rate, plan.warmup_s)
            before = bid_filter.stats
            cpu, child_cpu, wall = own_cpu_s(), process_cpu_s(pid), time.perf_counter()
            start = int(rate * plan.warmup_s)  # the stream goes on: no replay of the warm-up
            recorder = await offer(bid_filter, bodies, rate, plan.seconds, start)
            wall = time.perf_counter() - wall
            cpu, child_cpu = own_cpu_s() - cpu, process_cpu_s(pid) - child_cpu
            after = bid_filter.stats
        finally:
            await bid_filter.aclose()
            if freeze:
                gc.unfreeze()
    row = _row(kind, cached, rate, plan, recorder, (wall, cpu, child_cpu), before, after)
    row.gc_frozen_objects = frozen
    return row


def _row(
    kind: str,
    cached: bool,
    rate: int,
    plan: Plan,
    recorder: Recorder,
    times: tuple[float, float, float],
    before: Any,
    after: Any,
) -> Row:
    wall, cpu, child_cpu = times
    done = len(recorder.latencies)
    latencies = sorted(recorder.latencies)
    batches = after.batches - before.batches
    achieved = done / wall
    hits = after.cache_near_hits + after.cache_redis_hits
    hits -= before.cache_near_hits + before.cache_redis_hits
    return Row(
        upstream=kind,
        cache=cached,
        offered_rps=float(rate),
        achieved_rps=round(achieved, 1),
        p50_ms=round(percentile(latencies, 0.50) * 1000, 3),
        p99_ms=round(percentile(latencies, 0.99) * 1000, 3),
        p999_ms=round(percentile(latencies, 0.999) * 1000, 3),
        filter_cpu_pct=round(100 * cpu / wall, 1),
        filter_cpu_us_per_request=round(cpu / done * 1e6, 2),
        upstream_cpu_pct=round(100 * child_cpu / wall, 1),
        upstream_cpu_us_per_request=round(child_cpu / done * 1e6, 2),
        mean_batch=round(_batched_rows(after, before) / batches, 1) if batches else 0.0,
        batches=batches,
        failed_open=after.failed_open - before.failed_open,
        kept_share=round(recorder.kept / done, 3),
        cache_hit_share=round(hits / done, 3),
        # open loop: falling behind shows up as a longer window than planned
        keeping_up=wall < plan.seconds * 1.05 + 0.05,
    )


def _batched_rows(after: FilterStats, before: FilterStats) -> int:
    """Rows that went through a batch (cache hits at submit do not)."""
    rows = sum(size * count for size, count in after.batch_sizes.items())
    return rows - sum(size * count for size, count in before.batch_sizes.items())


def parse_and_features_us(rounds: int = 3, count: int = 2000, *, view: bool = False) -> float:
    """Best-of-`rounds` CPU per request of parsing a body into its CSV row.

    As `BidFilter.submit` does for raw bytes: `parse_record` + `record_csv_row`
    (no view objects). With `view`: `parse_bid_request` + `to_csv_row`, the
    path of a caller that wants the typed view (the sidecar, `decide(view)`).
    """
    spec = load_bundled_spec()
    bodies = sample_bodies(count, seed=5)
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        if view:
            for body in bodies:
                spec.to_csv_row(parse_bid_request(body), NOW)
        else:
            for body in bodies:
                spec.record_csv_row(parse_record(body), NOW)
        best = min(best, (time.process_time() - started) / count)
    return round(best * 1e6, 2)


# -- what rules and the rate cap cost -------------------------------------------------

TWENTY_RULES: dict[str, dict[str, Any]] = {
    "blocked-domains": {
        "path": "site.domain",
        "match": "in",
        "values": [f"blocked{i}.example" for i in range(50)],
    },
    "blocked-bundles": {
        "path": "app.bundle",
        "match": "in",
        "values": [f"com.blocked{i}" for i in range(50)],
    },
    "mfa": {"path": "site.domain", "match": "prefix", "values": ["mfa-", "arb-"]},
    "bad-site-pubs": {"path": "site.publisher.id", "match": "in", "values": ["pub-dead"]},
    "bad-app-pubs": {"path": "app.publisher.id", "match": "in", "values": ["pub-dead"]},
    "embargo": {"path": "device.geo.country", "match": "in", "values": ["PRK", "IRN", "SYR"]},
    "no-ip": {"path": "device.ip", "match": "absent", "holdback": 0.01},
    "tiny-banner": {"path": "imp.banner.w", "match": "range", "max": 100},
    "huge-floor": {"path": "imp.bidfloor", "match": "range", "min": 50.0},
    "coppa": {"path": "regs.coppa", "match": "equals", "value": True},
    "test": {"path": "test", "match": "equals", "value": True},
    "short-tmax": {"path": "tmax", "match": "range", "max": 20},
    "adult": {"path": "site.cat", "match": "in", "values": ["IAB25", "IAB26"]},
    "old-os": {"path": "device.os", "match": "in", "values": ["Symbian", "BlackBerry"]},
    "bots": {"path": "device.ua", "match": "prefix", "values": ["curl/", "python-requests"]},
    "set-top": {"path": "device.devicetype", "match": "equals", "value": 7, "action": "keep"},
    "audio": {"path": "imp.audio", "match": "exists", "action": "score", "threshold": 0.002},
    "fpa": {"path": "at", "match": "equals", "value": 1, "action": "score", "threshold": 0.02},
    "yen": {"path": "imp.bidfloorcur", "match": "equals", "value": "JPY"},
    "no-schain": {"path": "source.schain", "match": "absent", "action": "score", "threshold": 0.03},
}  # fmt: skip


class _NeverCalled:
    """A scorer the measured loop never reaches: batches go out after it (and fail open)."""

    async def invoke(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("not measured")


async def _submit_cpu_s(bid_filter: BidFilter, bodies: Sequence[bytes], cap: Any) -> float:
    """CPU seconds of submitting every body (and, with ``cap``, admitting each); then drain."""
    futures = []
    submit = bid_filter.submit
    admit = cap.admit if cap is not None else None
    started = time.process_time()
    for body in bodies:  # one loop for both: the same overhead on each side
        futures.append(submit(body, now=NOW))
        if admit is not None:
            admit(0.5)
    spent = time.process_time() - started
    await asyncio.gather(*futures)
    return spent


async def _rules_cost(rounds: int, chunk: int) -> dict[str, Any]:
    """Rounds of ``chunk`` bodies each way, alternating on one filter (its policy swapped)."""
    bodies = sample_bodies(4096, seed=29)
    plain, ruled = FilterPolicy(), read(FilterPolicy, {"rules": TWENTY_RULES}, "rtb")
    bid_filter = BidFilter(_NeverCalled(), "bid-filter", policy=plain, max_batch=64)
    cap = BidderCap([1e9, 1e9], burst_s=1.0, share=2)  # two bidders, two workers; roomy
    base: list[float] = []
    added: list[float] = []
    matched = 0
    for index in range(rounds + 2):  # the first two warm up
        start = index * chunk % (len(bodies) - chunk)
        part = bodies[start : start + chunk]
        spent = {}
        for with_rules in (False, True) if index % 2 == 0 else (True, False):
            bid_filter.set_policy(ruled if with_rules else plain)
            before = sum(bid_filter.stats.rule_hits.values())
            spent[with_rules] = await _submit_cpu_s(bid_filter, part, cap if with_rules else None)
            if index >= 2 and with_rules:
                matched += sum(bid_filter.stats.rule_hits.values()) - before
        if index >= 2:
            base.append(spent[False] / chunk * 1e6)
            added.append((spent[True] - spent[False]) / chunk * 1e6)
    await bid_filter.aclose()
    ordered = sorted(added)
    quartiles = statistics.quantiles(added, n=4)
    ratios = sorted((b + a) / b for b, a in zip(base, added, strict=True))
    return {
        "rounds": rounds,
        "requests_per_round": chunk,
        "rules": len(TWENTY_RULES),
        "submit_us": round(statistics.median(base), 2),
        "with_rules_and_cap_us": round(statistics.median(base) + statistics.median(added), 2),
        "added_us_median": round(statistics.median(added), 2),
        "added_us_min": round(ordered[0], 2),
        "added_us_max": round(ordered[-1], 2),
        "added_us_iqr": [round(quartiles[0], 2), round(quartiles[2], 2)],
        "ratio": round(statistics.median(ratios), 3),
        "ratio_iqr": [round(q, 3) for q in statistics.quantiles(ratios, n=4)[::2]],
        "rule_matched_share": round(matched / (rounds * chunk), 3),
    }


def render_rules_cost(report: dict[str, Any]) -> str:
    low, high = report["added_us_iqr"]
    return "\n".join(
        [
            f"BidFilter.submit, {report['rounds']} alternating rounds of "
            f"{report['requests_per_round']} raw bodies (CPU per request):",
            f"  without rules:                    {report['submit_us']:.2f} us",
            f"  {report['rules']} rules + rate cap admission:    "
            f"{report['with_rules_and_cap_us']:.2f} us",
            f"  added: {report['added_us_median']:.2f} us median (quartiles {low:.2f} to "
            f"{high:.2f}, min {report['added_us_min']:.2f}, max {report['added_us_max']:.2f})",
            f"  ratio {report['ratio']:.3f} (quartiles {report['ratio_iqr'][0]:.3f} to "
            f"{report['ratio_iqr'][1]:.3f}); a rule matched {report['rule_matched_share']:.0%} "
            "of the requests",
        ]
    )


# -- command line -----------------------------------------------------------------


def run(plan: Plan, run_one: Callable[[Any], Any]) -> dict[str, Any]:
    rows: list[Row] = []
    bodies = bench_bodies(plan)
    for kind in plan.upstreams:
        with upstream(kind, plan) as (url, pid):
            rows.extend(
                run_one(measure(url, pid, kind, rate, plan, bodies, cached))
                for cached in plan.cache
                for rate in plan.rates
            )
    return {
        "plan": asdict(plan),
        "parse_features_us": parse_and_features_us(),
        "parse_view_features_us": parse_and_features_us(view=True),
        "cpus": os.cpu_count(),
        "rows": [asdict(row) for row in rows],
    }


def profile(plan: Plan, rate: int, run_one: Callable[[Any], Any]) -> str:
    """cProfile of the filter side against the constant-score stub."""
    with upstream("stub", plan) as (url, pid):
        profiler = cProfile.Profile()
        profiler.enable()
        cached = plan.cache[-1]
        run_one(measure(url, pid, "stub", rate, plan, bench_bodies(plan), cached))
        profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
    return out.getvalue()


def render(report: dict[str, Any]) -> str:
    columns = (
        ("upstream", "upstream/cache", "{}"),
        ("offered_rps", "offered/s", "{:.0f}"),
        ("achieved_rps", "done/s", "{:.0f}"),
        ("p50_ms", "p50 ms", "{:.2f}"),
        ("p99_ms", "p99 ms", "{:.2f}"),
        ("p999_ms", "p99.9 ms", "{:.2f}"),
        ("filter_cpu_pct", "filter CPU%", "{:.0f}"),
        ("filter_cpu_us_per_request", "filter us/req", "{:.1f}"),
        ("upstream_cpu_pct", "upstream CPU%", "{:.0f}"),
        ("mean_batch", "rows/batch", "{:.1f}"),
        ("failed_open", "failed open", "{}"),
        ("cache_hit_share", "cache hit", "{:.2f}"),
        ("keeping_up", "keeps up", "{}"),
    )
    lines = [f"gc: {_GC_NOTES[report['plan'].get('gc', 'default')]}"]
    lines.append(" | ".join(title for _, title, _ in columns))
    lines.append(" | ".join("-" * len(title) for _, title, _ in columns))
    for row in report["rows"]:
        row = {**row, "upstream": row["upstream"] + ("+cache" if row["cache"] else "")}
        cells = [fmt.format(row[key]).rjust(len(title)) for key, title, fmt in columns]
        lines.append(" | ".join(cells))
    lines.append(
        f"parse + features: {report['parse_features_us']} us/request as the filter does it"
        f" (record), {report['parse_view_features_us']} via the typed view (best of 3)"
    )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.rtb_throughput", description=__doc__)
    parser.add_argument("--rates", default="10000,20000,30000,40000", help="offered loads, req/s")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured window per rate")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds first")
    parser.add_argument("--upstreams", default="emulator,stub", help="emulator, stub or both")
    parser.add_argument("--model-latency-ms", type=float, default=1.0)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--min-batch", type=int, default=16)
    parser.add_argument("--max-wait-ms", type=float, default=1.0)
    parser.add_argument("--threshold", type=float, default=0.01)
    parser.add_argument(
        "--cache",
        action="store_true",
        help="measure each upstream without and with a near-tier score cache, on a stream",
    )
    parser.add_argument(
        "--gc",
        choices=GC_MODES,
        default="frozen",
        help="frozen: gateway.tune_gc() before each rate's warm-up (default); "
        "default: CPython's collector untouched",
    )
    parser.add_argument("--quick", action="store_true", help="one low rate, short windows (CI)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--profile", type=int, metavar="RATE", help="cProfile at RATE (stub)")
    parser.add_argument(
        "--rules-cost",
        action="store_true",
        help="CPU that 20 rules and the rate cap add to BidFilter.submit (no upstream)",
    )
    parser.add_argument("--rounds", type=int, default=101, help="--rules-cost: alternating rounds")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    quick = args.quick
    plan = Plan(
        rates=(2000,) if quick else tuple(int(r) for r in args.rates.split(",")),
        seconds=0.5 if quick else args.seconds,
        warmup_s=0.2 if quick else args.warmup,
        upstreams=tuple(args.upstreams.split(",")),
        model_latency_ms=args.model_latency_ms,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        min_batch=args.min_batch,
        threshold=args.threshold,
        cache=(False, True) if args.cache else (False,),
        gc=args.gc,
    )
    import uvloop

    if args.rules_cost:
        cost = uvloop.run(_rules_cost(4 if quick else args.rounds, 100 if quick else 200))
        print(json.dumps(cost, indent=2) if args.json else render_rules_cost(cost))
        return 0
    if args.profile:
        print(profile(plan, args.profile, uvloop.run))
        return 0
    report = run(plan, uvloop.run)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
