"""A staged load test: ``python -m gateway loadtest --target URL_OR_ROUTE --stages 10:30,20:30``.

Each stage runs N concurrent workers in a closed loop (send, wait for the
answer, send again) for its duration, like the Locust load shapes used in
SageMaker's multi-model endpoint benchmarks. Per stage it reports
requests/s, p50/p95/p99 latency of the successful calls, and failures by
error code (SageMaker's code for service errors, the class name for
transport errors and timeouts); overall, the highest concurrency reached
before the first failure. The results go to a Markdown table, a CSV file
(one row per stage) and a PNG plot of latency and throughput against
concurrency (matplotlib, the ``plot`` extra).

Latency recording is a ``perf_counter`` delta appended to a list per
stage; percentiles are computed once the stage is over, so measuring costs
the measured calls next to nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import functools
import inspect
import ipaddress
import math
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway import errors
from gateway._client import Gateway

__all__ = [
    "DEFAULT_BODY",
    "LoadTestResult",
    "PlotUnavailable",
    "Stage",
    "StageResult",
    "main",
    "markdown_table",
    "parse_stages",
    "percentile",
    "run_loadtest",
    "write_csv",
    "write_png",
]

DEFAULT_BODY = b'{"instances": [[0.5, 1.0, 2.0]]}'
DEFAULT_STAGES = "10:10,20:10,40:10"
# Credentials for local targets (emulator, sidecar) when none are configured:
# the emulator accepts any well-formed signature unless told otherwise.
PLACEHOLDER_CREDENTIALS = ("AKIDLOADTEST", "loadtest-placeholder-secret")
_RUNTIME_HOST = re.compile(r"^runtime(?:-fips)?\.sagemaker\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")

StageHook = Callable[[int, "Stage"], Awaitable[None] | None]


class PlotUnavailable(RuntimeError):
    """The PNG could not be drawn (matplotlib is missing); the message says how to fix it."""


@dataclass(frozen=True, slots=True)
class Stage:
    users: int  # concurrent closed-loop workers
    seconds: float


@dataclass(slots=True)
class StageResult:
    index: int  # 1-based
    users: int
    seconds: float  # planned duration
    elapsed_s: float  # until the last in-flight call of the stage finished
    successes: int
    failures: dict[str, int]
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    @property
    def requests(self) -> int:
        return self.successes + self.failed

    @property
    def rps(self) -> float:
        return self.requests / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass(slots=True)
class LoadTestResult:
    target: str
    endpoint: str
    stages: list[StageResult] = field(default_factory=list)

    @property
    def first_failure_stage(self) -> int | None:
        """Index (1-based) of the first stage with a failure, or None."""
        return next((stage.index for stage in self.stages if stage.failed), None)

    @property
    def max_users_before_failure(self) -> int | None:
        """The highest concurrency sustained with no failure before the first failure.

        With no failure at all, the highest concurrency run; None when the
        very first stage already failed.
        """
        first = self.first_failure_stage
        clean = [stage.users for stage in self.stages if first is None or stage.index < first]
        return max(clean, default=None)

    def failure_codes(self) -> list[str]:
        return sorted({code for stage in self.stages for code in stage.failures})


# -- parsing ----------------------------------------------------------------


def parse_stages(text: str) -> list[Stage]:
    """``"10:30,20:30"`` -> users:seconds per stage."""
    stages: list[Stage] = []
    for item in text.split(","):
        users_text, sep, seconds_text = item.strip().partition(":")
        try:
            users, seconds = int(users_text), float(seconds_text)
        except ValueError:
            users, seconds = 0, 0.0
        if not sep or users < 1 or not seconds > 0 or not math.isfinite(seconds):
            raise ValueError(
                f"bad stage {item.strip()!r}: expected USERS:SECONDS with USERS >= 1 and "
                "SECONDS > 0, e.g. 10:30,20:30"
            )
        stages.append(Stage(users, seconds))
    return stages


def percentile(ordered: Sequence[float], share: float) -> float | None:
    """Nearest-rank percentile of an already sorted sequence; None when empty."""
    if not ordered:
        return None
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


# -- running ----------------------------------------------------------------


async def _worker(
    call: Callable[[], Awaitable[object]],
    stop_at: float,
    latencies: list[float],
    failures: dict[str, int],
) -> None:
    clock = time.perf_counter
    append = latencies.append
    while clock() < stop_at:
        started = clock()
        try:
            await call()
        except errors.ServiceError as exc:
            failures[exc.code] = failures.get(exc.code, 0) + 1
        except errors.GatewayError as exc:
            name = type(exc).__name__
            failures[name] = failures.get(name, 0) + 1
        else:
            append(clock() - started)


async def _run_stage(
    index: int, stage: Stage, call: Callable[[], Awaitable[object]]
) -> StageResult:
    latencies: list[float] = []
    failures: dict[str, int] = {}
    started = time.perf_counter()
    stop_at = started + stage.seconds
    # A TaskGroup, so that an unexpected error in one worker stops the others
    # instead of leaving them running against a closing gateway.
    async with asyncio.TaskGroup() as group:
        for _ in range(stage.users):
            group.create_task(_worker(call, stop_at, latencies, failures))
    elapsed = time.perf_counter() - started
    latencies.sort()
    p50, p95, p99 = (percentile(latencies, share) for share in (0.50, 0.95, 0.99))
    return StageResult(
        index=index,
        users=stage.users,
        seconds=stage.seconds,
        elapsed_s=elapsed,
        successes=len(latencies),
        failures=dict(sorted(failures.items())),
        p50_ms=p50 * 1000 if p50 is not None else None,
        p95_ms=p95 * 1000 if p95 is not None else None,
        p99_ms=p99 * 1000 if p99 is not None else None,
    )


def _is_url(target: str) -> bool:
    return target.startswith(("http://", "https://"))


def _region_for(url: str, region: str | None) -> str:
    """The signing region: given, else from a SageMaker runtime host name, else the environment."""
    if region:
        return region
    host = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[0]
    match = _RUNTIME_HOST.match(host)
    if match:
        return match.group(1)
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def _build_gateway(
    target: str,
    config: str | Path | None,
    region: str | None,
    credentials: tuple[str, str] | None,
    peak_users: int,
) -> Gateway:
    if _is_url(target):
        # Enough connections that the pool never queues the workers.
        pool = {"max_connections": max(64, peak_users)}
        return Gateway(
            _region_for(target, region), endpoint_url=target, credentials=credentials, pool=pool
        )
    if config is None:
        raise errors.ConfigError(
            f"target {target!r} is not a URL: pass --config with the route, or an http(s) URL"
        )
    return Gateway.from_config(config)


async def run_loadtest(
    stages: Sequence[Stage] | str,
    *,
    target: str | None = None,
    endpoint: str | None = None,
    config: str | Path | None = None,
    gateway: Gateway | None = None,
    body: bytes = DEFAULT_BODY,
    content_type: str | None = "application/json",
    accept: str | None = None,
    timeout: float | None = None,
    region: str | None = None,
    credentials: tuple[str, str] | None = None,
    on_stage: StageHook | None = None,
    progress: Callable[[str], None] | None = None,
) -> LoadTestResult:
    """Run the stages and return the results.

    ``target`` is an http(s) URL (calls go to ``endpoint``, default ``echo``)
    or a route / endpoint name resolved through the gateway ``config`` file.
    Or pass a started ``gateway`` (not closed here) with ``endpoint``.
    ``on_stage(index, stage)`` runs before each stage (index from 1), e.g.
    to change an emulator's fault injection mid-test.
    """
    plan = parse_stages(stages) if isinstance(stages, str) else list(stages)
    if not plan:
        raise ValueError("no stages")
    if gateway is None and target is None:
        raise ValueError("pass target= (a URL or route) or gateway=")
    name = endpoint or ("echo" if target is None or _is_url(target) else target)
    result = LoadTestResult(target=target or "gateway", endpoint=name)
    owned = None
    if gateway is None:
        assert target is not None
        peak = max(stage.users for stage in plan)
        owned = gateway = _build_gateway(target, config, region, credentials, peak)
        await owned.start()
    try:
        call = functools.partial(
            gateway.invoke, name, body, content_type=content_type, accept=accept, timeout=timeout
        )
        for index, stage in enumerate(plan, 1):
            if on_stage is not None:
                outcome = on_stage(index, stage)
                if inspect.isawaitable(outcome):
                    await outcome
            if progress is not None:
                progress(f"stage {index}/{len(plan)}: {stage.users} users for {stage.seconds:g} s")
            result.stages.append(await _run_stage(index, stage, call))
    finally:
        if owned is not None:
            await owned.aclose()
    return result


# -- reporting --------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _failures_text(failures: dict[str, int]) -> str:
    return ", ".join(f"{code} {count}" for code, count in failures.items()) or "0"


def markdown_table(result: LoadTestResult) -> str:
    lines = [
        f"Load test of `{result.endpoint}` via {result.target}",
        "",
        "| stage | users | seconds | requests | req/s | p50 ms | p95 ms | p99 ms | failures |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|:---|",
    ]
    lines += [
        f"| {s.index} | {s.users} | {s.elapsed_s:.1f} | {s.requests} | {s.rps:.1f} "
        f"| {_ms(s.p50_ms)} | {_ms(s.p95_ms)} | {_ms(s.p99_ms)} | {_failures_text(s.failures)} |"
        for s in result.stages
    ]
    lines += ["", _verdict(result)]
    return "\n".join(lines)


def _verdict(result: LoadTestResult) -> str:
    first = result.first_failure_stage
    best = result.max_users_before_failure
    if first is None:
        return f"No failures; highest concurrency run: {best} users."
    failing = result.stages[first - 1]
    where = f"first failure in stage {first} at {failing.users} users"
    if best is None:
        return f"Highest concurrency before the first failure: none ({where})."
    return f"Highest concurrency before the first failure: {best} users ({where})."


def write_csv(result: LoadTestResult, path: str | Path) -> Path:
    """One row per stage; one ``failures:<code>`` column per error code seen."""
    destination = Path(path)
    destination.parent.mkdir(parents=True, exist_ok=True)
    codes = result.failure_codes()
    header = ["stage", "users", "duration_s", "elapsed_s", "requests", "successes", "failures"]
    header += ["rps", "p50_ms", "p95_ms", "p99_ms", *(f"failures:{code}" for code in codes)]
    with destination.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for s in result.stages:
            latency = ["" if v is None else f"{v:.3f}" for v in (s.p50_ms, s.p95_ms, s.p99_ms)]
            writer.writerow(
                [s.index, s.users, s.seconds, f"{s.elapsed_s:.3f}", s.requests, s.successes]
                + [s.failed, f"{s.rps:.2f}", *latency]
                + [s.failures.get(code, 0) for code in codes]
            )
    return destination


def write_png(result: LoadTestResult, path: str | Path) -> Path:
    """Latency percentiles and throughput against concurrency; needs matplotlib."""
    try:
        # Imported here: matplotlib is an optional extra and slow to import.
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotUnavailable(
            "PNG plot skipped: matplotlib is not installed "
            "(pip install 'sagemaker-gateway[plot]' or pip install matplotlib)"
        ) from None
    destination = Path(path)
    destination.parent.mkdir(parents=True, exist_ok=True)
    users = [stage.users for stage in result.stages]
    # A Figure without pyplot: no global state, no GUI backend.
    figure: Any = Figure(figsize=(11, 4.5), layout="constrained")
    latency_axes, throughput_axes = figure.subplots(1, 2)
    for label in ("p50", "p95", "p99"):
        values = [getattr(stage, f"{label}_ms") for stage in result.stages]
        latency_axes.plot(users, [math.nan if v is None else v for v in values], "o-", label=label)
    latency_axes.set(xlabel="concurrent users", ylabel="latency (ms)", title="Latency")
    latency_axes.legend()
    throughput_axes.plot(users, [stage.rps for stage in result.stages], "o-", label="requests/s")
    failed = [stage.failed / stage.elapsed_s if stage.elapsed_s else 0.0 for stage in result.stages]
    if any(failed):
        throughput_axes.plot(users, failed, "x--", color="tab:red", label="failures/s")
    throughput_axes.set(xlabel="concurrent users", ylabel="per second", title="Throughput")
    throughput_axes.legend()
    for axes in (latency_axes, throughput_axes):
        axes.grid(alpha=0.3)
        axes.set_ylim(bottom=0)
    figure.suptitle(f"{result.endpoint} via {result.target}")
    figure.savefig(destination, dpi=100)
    return destination


# -- command line -----------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gateway loadtest",
        description="Staged closed-loop load test through the gateway.",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--target",
        help="an http(s) URL (sidecar, emulator, SageMaker runtime) or a route in --config",
    )
    where.add_argument(
        "--emulator", action="store_true", help="start the built-in emulator and target it"
    )
    parser.add_argument("--stages", default=DEFAULT_STAGES, help="USERS:SECONDS,... (%(default)s)")
    payload = parser.add_mutually_exclusive_group()
    payload.add_argument("--body", type=Path, help="request body from a file")
    payload.add_argument("--body-text", help="request body as text")
    parser.add_argument("--content-type", default="application/json")
    parser.add_argument("--accept")
    parser.add_argument("--endpoint", help="SageMaker endpoint for URL targets (default: echo)")
    parser.add_argument("--config", type=Path, help="gateway TOML config, for route targets")
    parser.add_argument("--csv", type=Path, default=Path("out/loadtest.csv"))
    parser.add_argument("--png", type=Path, default=Path("out/loadtest.png"))
    parser.add_argument("--timeout-ms", type=float, help="per-call deadline")
    parser.add_argument("--region", help="signing region for URL targets")
    return parser


def _is_local(url: str) -> bool:
    host = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cli_credentials(target: str) -> tuple[str, str] | None:
    """Placeholders for a local URL when nothing is configured; else the provider chain."""
    configured = os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE")
    if _is_url(target) and _is_local(target) and not configured:
        return PLACEHOLDER_CREDENTIALS
    return None


def _report(result: LoadTestResult, csv_path: Path, png_path: Path) -> None:
    print(markdown_table(result))
    print(f"\nCSV: {write_csv(result, csv_path)}", file=sys.stderr)
    try:
        print(f"PNG: {write_png(result, png_path)}", file=sys.stderr)
    except PlotUnavailable as exc:
        print(exc, file=sys.stderr)


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _run(coroutine: Coroutine[Any, Any, LoadTestResult]) -> LoadTestResult:
    # uvloop when installed, as the emulator and sidecar do: a cheaper loop
    # leaves more of the machine to the calls being measured.
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    result: LoadTestResult = uvloop.run(coroutine)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        stages = parse_stages(args.stages)
        body = args.body.read_bytes() if args.body else DEFAULT_BODY
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    if args.body_text is not None:
        body = args.body_text.encode()
    emulator = None
    if args.emulator:
        from gateway.emulator import Emulator, EmulatorConfig

        # A child process: the emulator's CPU is not charged to the client.
        try:
            emulator = Emulator.start_subprocess(EmulatorConfig.default())
        except (RuntimeError, TimeoutError, OSError) as exc:
            print(f"loadtest: cannot start the emulator: {exc}", file=sys.stderr)
            return 1
        _stderr(f"emulator listening on {emulator.url}")
    target = emulator.url if emulator is not None else args.target
    try:
        result = _run(
            run_loadtest(
                stages,
                target=target,
                endpoint=args.endpoint,
                config=args.config,
                body=body,
                content_type=args.content_type,
                accept=args.accept,
                timeout=args.timeout_ms / 1000 if args.timeout_ms else None,
                region=args.region,
                credentials=_cli_credentials(target),
                progress=_stderr,
            )
        )
    except errors.GatewayError as exc:
        print(f"loadtest: {exc}", file=sys.stderr)
        return 1
    finally:
        if emulator is not None:
            emulator.stop()
    _report(result, args.csv, args.png)
    return 0
