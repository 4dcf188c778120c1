"""Sidecar scaling with ``--workers``: one worker against N, in the same run.

    python -m bench.sidecar_workers                   # 1 vs 2 workers, 64 connections
    python -m bench.sidecar_workers --workers 4 --rounds 6 --concurrency 128
    python -m bench.sidecar_workers --quick           # small and short (CI), no timing claims
    python -m bench.sidecar_load --workers 2          # the same, from the load benchmark
    python -m bench.sidecar_workers --wrk 2 --concurrency 64       # wrk drives, 2 threads
    python -m bench.sidecar_workers --workers 16 --wrk 8 --stub-processes 8 --concurrency 512
    python -m bench.sidecar_workers --wrk 1 --cpu-per-worker 0.4   # each worker a 0.4-CPU core

Processes: the fast local stub (``bench._stub``), two sidecars started
side by side (``python -m gateway sidecar``: one with a single worker, one
with ``--workers N``; the idle one costs nothing), and this one, the load
generator (uvloop, raw keep-alive connections, ``bench.sidecar_load``'s
client). Rounds alternate between the two sidecars so both see the same
machine; per round: requests/s and the sidecar's CPU (supervisor and
workers, user+sys from /proc) per request. Reported: the median of each,
the ratio N-workers/1-worker per round, and its spread.

The load generator is one process, one core: on a machine with few cores
it competes with the workers, so the ratio measured here is a floor.
``--wrk THREADS`` drives both sidecars with wrk instead (``apt-get install
-y wrk``), as many threads as it needs, and ``--stub-processes N`` runs N
stub processes on one port, so that neither the load nor the upstream
caps what N workers can do (on a large host: see docs/explanation/sidecar-cost.md).

``--cpu-per-worker CPUS`` (Linux, root) puts each serving process in a cgroup of
its own allowed that many CPUs: every worker is then a core of that size, and
the load generator and the stub keep the rest of the machine. On a host with
few cores that measures N workers' scaling with a load that is not the
bottleneck; the workers' cores are smaller rather than shared with it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench._cpu_share import CpuShares, CpuSharesUnavailable
from bench._stub import StubServer
from bench.sidecar_load import _Client, build_request, cpu_split, sidecar_config
from gateway.sidecar import SidecarProcess


@dataclass
class Round:
    workers: int
    requests: int
    rps: float
    cpu_us_per_request: float
    errors: int


def tree_cpu_seconds(pid: int) -> float:
    """User+sys CPU of ``pid`` and its children (a supervisor and its workers)."""
    return sum(tree_cpu_split(pid))


def tree_cpu_split(pid: int) -> tuple[float, float]:
    """The (user, system) CPU of ``pid`` and its children."""
    user, system = cpu_split(pid)
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    for child in children:
        with contextlib.suppress(FileNotFoundError):  # exited between the two reads
            child_user, child_system = cpu_split(int(child))
            user += child_user
            system += child_system
    return user, system


def serving_pids(sidecar: SidecarProcess) -> list[int]:
    """The processes that serve: a supervisor's workers, or the sidecar itself."""
    children = Path(f"/proc/{sidecar.pid}/task/{sidecar.pid}/children").read_text().split()
    return [int(child) for child in children] or [sidecar.pid]


def _wrk_round(
    sidecar: SidecarProcess, workers: int, connections: int, threads: int, seconds: int
) -> Round:
    """One round driven by wrk (a second's warm-up run first)."""
    from bench.sidecar_vs_nginx import parse_wrk, run_wrk, wrk_script

    with wrk_script() as script:
        run_wrk(sidecar.url, script, threads, connections, 1)
        cpu_before = tree_cpu_seconds(sidecar.pid)
        output = run_wrk(sidecar.url, script, threads, connections, seconds)
        cpu = tree_cpu_seconds(sidecar.pid) - cpu_before
    requests, elapsed, _, _, errors = parse_wrk(output)
    return Round(
        workers=workers,
        requests=requests,
        rps=round(requests / elapsed, 1),
        cpu_us_per_request=round(cpu / max(1, requests) * 1e6, 2),
        errors=errors,
    )


async def measure_round(
    sidecar: SidecarProcess,
    workers: int,
    concurrency: int,
    warmup: float,
    duration: float,
    wrk_threads: int = 0,
) -> Round:
    if wrk_threads:
        return await asyncio.to_thread(
            _wrk_round, sidecar, workers, concurrency, wrk_threads, max(1, round(duration))
        )
    loop = asyncio.get_running_loop()
    request = build_request(f"127.0.0.1:{sidecar.port}")
    latencies: list[int] = []
    state = {"running": True, "recording": False}
    clients = []
    for _ in range(concurrency):
        _, client = await loop.create_connection(
            lambda: _Client(request, latencies, state), "127.0.0.1", sidecar.port
        )
        clients.append(client)
    await asyncio.sleep(warmup)
    cpu_before, started = tree_cpu_seconds(sidecar.pid), time.perf_counter()
    state["recording"] = True
    await asyncio.sleep(duration)
    state["recording"] = False
    elapsed = time.perf_counter() - started
    cpu = tree_cpu_seconds(sidecar.pid) - cpu_before
    state["running"] = False
    await asyncio.wait_for(asyncio.gather(*(c.closed for c in clients)), 10)
    served = max(1, len(latencies))
    return Round(
        workers=workers,
        requests=len(latencies),
        rps=round(len(latencies) / elapsed, 1),
        cpu_us_per_request=round(cpu / served * 1e6, 2),
        errors=sum(c.errors for c in clients),
    )


async def compare(
    single: SidecarProcess, multi: SidecarProcess, args: argparse.Namespace
) -> dict[str, Any]:
    rounds: list[tuple[Round, Round]] = []
    for index in range(args.rounds):
        # Alternate which goes first, so neither always follows the other.
        order = [(single, 1), (multi, args.workers)]
        if index % 2:
            order.reverse()
        results = {}
        for sidecar, workers in order:
            results[workers] = await measure_round(
                sidecar, workers, args.concurrency, args.warmup, args.duration, args.wrk
            )
        one, many = results[1], results[args.workers]
        rounds.append((one, many))
        print(
            f"{index + 1:>5} {one.rps:>10.0f} {many.rps:>10.0f} {many.rps / one.rps:>7.2f} "
            f"{one.cpu_us_per_request:>12.1f} {many.cpu_us_per_request:>12.1f}",
            flush=True,
        )
    ratios = [many.rps / one.rps for one, many in rounds]
    cpu_ratios = [many.cpu_us_per_request / one.cpu_us_per_request for one, many in rounds]
    return {
        "workers": args.workers,
        "concurrency": args.concurrency,
        "rounds": [[asdict(one), asdict(many)] for one, many in rounds],
        "rps_1": statistics.median(one.rps for one, _ in rounds),
        "rps_n": statistics.median(many.rps for _, many in rounds),
        "rps_ratio_median": round(statistics.median(ratios), 2),
        "rps_ratio_min": round(min(ratios), 2),
        "rps_ratio_max": round(max(ratios), 2),
        "cpu_us_per_request_1": statistics.median(one.cpu_us_per_request for one, _ in rounds),
        "cpu_us_per_request_n": statistics.median(m.cpu_us_per_request for _, m in rounds),
        "cpu_ratio_median": round(statistics.median(cpu_ratios), 2),
        "errors": sum(one.errors + many.errors for one, many in rounds),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.sidecar_workers", description=__doc__)
    parser.add_argument("--workers", type=int, default=2, help="workers of the second sidecar")
    parser.add_argument("--concurrency", type=int, help="keep-alive connections (default 64)")
    parser.add_argument("--rounds", type=int, help="alternating rounds (default 6)")
    parser.add_argument("--duration", type=float, help="measured seconds per round")
    parser.add_argument("--quick", action="store_true", help="small and short, for CI")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    parser.add_argument(
        "--wrk", type=int, default=0, metavar="THREADS", help="drive with wrk, this many threads"
    )
    parser.add_argument(
        "--stub-processes", type=int, default=1, help="stub processes sharing its port"
    )
    parser.add_argument(
        "--cpu-per-worker",
        type=float,
        metavar="CPUS",
        help="each worker in a cgroup of its own, allowed this many CPUs (Linux, root)",
    )
    args = parser.parse_args(argv)
    if args.concurrency is None:
        args.concurrency = 16 if args.quick else 64
    if args.rounds is None:
        args.rounds = 2 if args.quick else 6
    if args.duration is None:
        args.duration = 0.5 if args.quick else 3.0
    args.warmup = 0.2 if args.quick else 1.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    extra = ("--log-level", "WARNING")
    if args.wrk and shutil.which("wrk") is None:
        print("wrk is not installed (apt-get install -y wrk)", file=sys.stderr)
        return 2
    shares = contextlib.nullcontext()
    if args.cpu_per_worker is not None:
        try:
            shares = CpuShares()
        except CpuSharesUnavailable as error:
            print(f"--cpu-per-worker: {error}", file=sys.stderr)
            return 2
    with shares, StubServer(processes=args.stub_processes) as stub:
        config = sidecar_config(stub.url)
        config["sidecar"]["drain_s"] = 0
        single = SidecarProcess.start(config, "127.0.0.1:0", (*extra, "--workers", "1"), None)
        try:
            multi = SidecarProcess.start(
                config, "127.0.0.1:0", (*extra, "--workers", str(args.workers)), None
            )
            try:
                if isinstance(shares, CpuShares):
                    for pid in (*serving_pids(single), *serving_pids(multi)):
                        shares.limit(pid, args.cpu_per_worker)
                    print(f"each worker in a cgroup of {args.cpu_per_worker} CPU")
                print(
                    f"stub {stub.url}; 1 worker {single.url}; {args.workers} workers {multi.url}; "
                    f"{args.concurrency} connections"
                    + (f", wrk -t{args.wrk}" if args.wrk else "")
                    + (f", {args.stub_processes} stub processes" if args.stub_processes > 1 else "")
                )
                print(
                    f"{'round':>5} {'req/s 1':>10} {f'req/s {args.workers}':>10} {'ratio':>7} "
                    f"{'cpu_us/req 1':>12} {f'cpu_us/req {args.workers}':>12}",
                    flush=True,
                )
                import uvloop

                report = uvloop.run(compare(single, multi, args))
            finally:
                multi.stop()
        finally:
            single.stop()
    print(
        f"{args.workers} workers: {report['rps_ratio_median']:.2f}x the req/s of 1 worker "
        f"(median of {args.rounds} rounds, range {report['rps_ratio_min']:.2f}-"
        f"{report['rps_ratio_max']:.2f}); sidecar CPU per request "
        f"{report['cpu_us_per_request_n']:.1f} us vs {report['cpu_us_per_request_1']:.1f} us "
        f"({report['cpu_ratio_median']:.2f}x)"
    )
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
