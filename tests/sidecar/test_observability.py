"""What an SRE sees of a running sidecar: /metrics (names, units, caps, build info,
every metric the shipped dashboard and alert rules query), the access log, the
worker-restart line, and an OpenTelemetry trace from an inbound traceparent
through the gateway's attempts and a hedge to the RTB proxy's bidder.

All over real sockets: the emulator, a sidecar in-process, a toy bidder.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import json
import logging
import re
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

import gateway
from gateway._host.build import build_kind
from gateway._observe.counting import UNCONFIGURED
from gateway._observe.families import LATENCY_BUCKETS_S
from gateway._server.http import Server
from gateway.emulator import Emulator, EmulatorConfig
from gateway.errors import ConfigError
from gateway.rtb.bidder import ToyBidder
from gateway.rtb.synth import sample_bodies
from gateway.sidecar import Sidecar, SidecarConfig
from gateway.sidecar._logging import JsonFormatter, worker_restarted
from gateway.sidecar._metrics import merge_expositions
from gateway.sidecar._sidecar import _command_config, _parser

ROOT = Path(__file__).resolve().parents[2]
# No tmax: scored within the 2 s default budget. With its tmax (150 ms), a
# cold XGBoost load on a busy machine could fail the bid open (kept: 200).
BID = orjson.dumps(
    {k: v for k, v in orjson.loads(sample_bodies(1, seed=3)[0]).items() if k != "tmax"}
)
KEEP = {"x-bid-filter-route": "keep-all", "content-type": "application/json"}
DROP = {"x-bid-filter-route": "drop-all"}
XGB = {"model": {"type": "xgboost"}, "latency": {"base_ms": 1.0}}
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SECRET = "s3cr3t-bearer-token-value-0123456789"
NO_CACHE = {"cache-control": "no-cache"}


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    config = {"seed": 4, "endpoints": {"echo": {}, "bf-a": XGB, "bf-b": XGB}}
    async with Emulator(EmulatorConfig.from_dict(config)) as emu:
        yield emu


def _config(emulator: Emulator, bidder: Server, **sidecar: Any) -> dict[str, Any]:
    return {
        "region": "us-east-1",
        "endpoint_url": emulator.url,
        "credentials": {"access_key_id": "AK", "secret_access_key": "SK"},
        "routes": {
            "echo": {"targets": [{"endpoint": "echo"}]},
            "bid-filter": {
                "targets": [{"endpoint": "bf-a"}, {"endpoint": "bf-b"}],
                # Hedge past the median: any stalled answer is hedged.
                "hedge": {
                    "enabled": True,
                    "max_extra_load": 0.5,
                    "min_delay_ms": 2,
                    "quantile": 0.5,
                    "refresh_s": 0.1,
                },
            },
        },
        "cache": {"near_max_entries": 1000},
        # Port 0: the default 8081 may be taken by another run on this machine.
        "sidecar": {"listen": "127.0.0.1:0", "metrics_label_cap": 5, **sidecar},
        "rtb": {
            "bidders": [f"http://127.0.0.1:{bidder.port}/bid"],
            "route_thresholds": {"keep-all": 0.0, "drop-all": 1.0},
            "default_budget_ms": 2000.0,
            "min_batch": 1,
        },
    }


async def _traffic(http: httpx.AsyncClient) -> None:
    for _ in range(3):  # the second and third are near-cache hits
        assert (await http.post("/endpoints/echo/invocations", content=b"x")).status_code == 200
    for index in range(20):  # names beyond the label cap
        await http.post(f"/endpoints/bogus-{index}/invocations", content=b"x")
    assert (await http.post("/openrtb2/auction", content=BID, headers=KEEP)).status_code == 200
    assert (await http.post("/openrtb2/auction", content=BID, headers=DROP)).status_code == 204


def _families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


async def _scrape(http: httpx.AsyncClient) -> dict[str, Any]:
    response = await http.get("/metrics")
    assert response.status_code == 200
    return _families(response.text)


@pytest.fixture
async def scraped(emulator: Emulator, bidder: tuple[ToyBidder, Server]) -> dict[str, Any]:
    async with (
        Sidecar(_config(emulator, bidder[1])) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        await _traffic(http)
        return await _scrape(http)


_STANDARD = ("process_", "python_")


def test_every_family_is_prefixed_and_in_base_units(scraped: dict[str, Any]) -> None:
    ours = {name: f for name, f in scraped.items() if not name.startswith(_STANDARD)}
    assert all(name.startswith("sagemaker_gateway_") for name in ours), sorted(ours)
    # The standard process and platform collectors.
    assert {"process_resident_memory_bytes", "process_cpu_seconds", "python_info"} <= set(scraped)
    histograms = {name: f for name, f in ours.items() if f.type == "histogram"}
    latency = {name for name in histograms if name != "sagemaker_gateway_rtb_batch_size"}
    assert latency == {
        "sagemaker_gateway_attempt_duration_seconds",
        "sagemaker_gateway_call_duration_seconds",
        "sagemaker_gateway_sidecar_request_duration_seconds",
        "sagemaker_gateway_rtb_forward_duration_seconds",
    }
    # One bucket set for every latency histogram, with sub-millisecond steps.
    expected = [*LATENCY_BUCKETS_S, float("inf")]
    for name in latency:
        family = histograms[name]
        series: dict[tuple[Any, ...], list[float]] = {}
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
                series.setdefault(key, []).append(float(sample.labels["le"]))
        assert series, f"{name} has no samples after traffic"
        assert all(bounds == expected for bounds in series.values()), name
    assert sum(b < 0.001 for b in LATENCY_BUCKETS_S) >= 4
    byte_counters = [n for n in ours if "bytes" in n]
    assert byte_counters and all(n.endswith("_bytes") for n in byte_counters)


def test_build_info_names_version_and_build(scraped: dict[str, Any]) -> None:
    (sample,) = scraped["sagemaker_gateway_build_info"].samples
    assert sample.labels == {"version": gateway.__version__, "build": build_kind()}
    assert sample.value == 1


def test_caller_chosen_names_count_as_unconfigured(scraped: dict[str, Any]) -> None:
    sidecar_routes = {
        s.labels["route"] for s in scraped["sagemaker_gateway_sidecar_requests"].samples
    }
    gateway_routes = {s.labels["route"] for s in scraped["sagemaker_gateway_calls"].samples}
    # Configured names keep theirs, however many bogus names came first; the
    # rest is one label (openrtb: the proxy's fixed label).
    assert sidecar_routes == {"echo", "bid-filter", UNCONFIGURED, "openrtb"}
    assert gateway_routes == {"echo", "bid-filter", UNCONFIGURED}
    attempts = scraped["sagemaker_gateway_attempts"].samples
    pairs = {(s.labels["route"], s.labels["target"]) for s in attempts}
    assert pairs == {
        ("echo", "echo"),
        ("bid-filter", "bf-a"),
        ("bid-filter", "bf-b"),
        (UNCONFIGURED, UNCONFIGURED),
    }
    # Folded, not lost: all 20 bogus calls are still counted.
    calls = {s.labels["route"]: s.value for s in scraped["sagemaker_gateway_calls"].samples}
    assert calls[UNCONFIGURED] == 20


def test_attempts_are_split_by_kind_and_outcome(scraped: dict[str, Any]) -> None:
    samples = scraped["sagemaker_gateway_attempts"].samples
    assert {s.labels["kind"] for s in samples} <= {"primary", "hedge", "retry"}
    assert {s.labels["outcome"] for s in samples} <= {"won", "lost", "cancelled", "failed"}
    assert any(s.labels["outcome"] == "failed" for s in samples)  # the bogus names
    lookups = {
        s.labels["source"]: s.value for s in scraped["sagemaker_gateway_cache_lookups"].samples
    }
    assert lookups["near"] >= 2 and lookups["miss"] >= 1


def _queried_names(expressions: list[str]) -> set[str]:
    names: set[str] = set()
    for expression in expressions:
        # Label matchers ({sagemaker_gateway_sidecar="true"}) name labels, not metrics.
        selectors = re.sub(r"\{[^}]*\}", "", expression)
        names.update(re.findall(r"\b((?:sagemaker_gateway|process|python)_[a-z_]+)\b", selectors))
    return names


def _dashboard_expressions() -> list[str]:
    dashboard = json.loads((ROOT / "deploy/grafana/sagemaker-gateway.json").read_text())
    expressions = [
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    ]
    variables = dashboard["templating"]["list"]
    expressions.extend(v["query"]["query"] for v in variables if isinstance(v.get("query"), dict))
    return expressions


def _alert_expressions() -> list[str]:
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_every_metric_the_dashboard_and_alerts_query_exists(
    scraped: dict[str, Any], source: str
) -> None:
    expressions = _dashboard_expressions() if source == "dashboard" else _alert_expressions()
    queried = _queried_names(expressions)
    assert len(queried) > 10
    kinds = {"_bucket": "histogram", "_total": "counter"}
    missing = []
    for name in sorted(queried):
        suffix = next((s for s in kinds if name.endswith(s)), None)
        family_name = name.removesuffix(suffix) if suffix else name
        family = scraped.get(family_name)
        if family is None or (suffix is not None and family.type != kinds[suffix]):
            missing.append(name)
    assert missing == []


async def test_a_scrape_is_rendered_off_the_event_loop(
    emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    threads: list[threading.Thread] = []

    class Spy:
        def describe(self) -> list[Any]:
            return []

        def collect(self) -> Iterator[Any]:
            threads.append(threading.current_thread())
            return iter(())

    async with (
        Sidecar(_config(emulator, bidder[1])) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        sidecar.app.registry.register(Spy())
        await _scrape(http)
    assert threads and threads[0] is not threading.main_thread()


async def test_many_distinct_names_keep_the_series_count_bounded(
    emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    async def series(count: int) -> int:
        async with (
            Sidecar(_config(emulator, bidder[1])) as sidecar,
            httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
        ):
            for index in range(count):
                await http.post(f"/endpoints/n{index}/invocations", content=b"x")
            text = (await http.get("/metrics")).text
        return sum(len(f.samples) for f in _families(text).values())

    few, many = await series(10), await series(200)
    assert many == few  # past the cap, more names add no series


# -- access log ------------------------------------------------------------------


@pytest.fixture
def access_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("gateway.access")
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)


async def test_access_log_one_json_line_per_request_without_secrets(
    emulator: Emulator, bidder: tuple[ToyBidder, Server], access_lines: io.StringIO
) -> None:
    headers = {"authorization": f"Bearer {SECRET}", "traceparent": TRACEPARENT}
    async with (
        Sidecar(_config(emulator, bidder[1], access_log=True)) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        await http.post("/endpoints/echo/invocations", content=b"hello", headers=headers)
        await http.post("/endpoints/no-such/invocations", content=b"x")
        await http.get("/ping")
    text = access_lines.getvalue()
    assert SECRET not in text and "authorization" not in text.lower()
    lines = [orjson.loads(line) for line in text.splitlines()]
    assert len(lines) == 3
    ok, failed, ping = lines
    assert {k: ok[k] for k in ("method", "path", "route", "status", "error_code")} == {
        "method": "POST",
        "path": "/endpoints/echo/invocations",
        "route": "echo",
        "status": 200,
        "error_code": None,
    }
    assert (ok["bytes_in"], ok["bytes_out"], ok["trace_id"]) == (5, 5, TRACE_ID)
    assert ok["duration_s"] > 0 and ok["level"] == "INFO" and ok["logger"] == "gateway.access"
    # RFC 3339 time, the caller's address, and the request id the answer carries.
    assert datetime.datetime.fromisoformat(ok["ts"]).tzinfo == datetime.UTC
    assert ok["ts"].endswith("Z")
    assert ok["client"].startswith("127.0.0.1:") and int(ok["client"].rpartition(":")[2]) > 0
    assert ok["request_id"] and failed["request_id"] and ok["request_id"] != failed["request_id"]
    assert failed["status"] == 400 and failed["error_code"] == "ValidationError"
    assert failed["trace_id"] is None
    assert (ping["path"], ping["route"], ping["status"]) == ("/ping", None, 200)


async def test_access_log_sampling_and_default_off(
    emulator: Emulator, bidder: tuple[ToyBidder, Server], access_lines: io.StringIO
) -> None:
    for sidecar_settings in ({}, {"access_log": True, "access_log_sample": 0.0}):
        async with (
            Sidecar(_config(emulator, bidder[1], **sidecar_settings)) as sidecar,
            httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
        ):
            assert sidecar.app.entry == sidecar.app.handle or sidecar_settings
            for _ in range(5):
                await http.post("/endpoints/echo/invocations", content=b"x")
    assert access_lines.getvalue() == ""


def test_access_log_settings_are_validated_and_the_flag_turns_it_on() -> None:
    config = SidecarConfig.from_mapping({"access_log": True, "access_log_sample": 0.25})
    assert (config.access_log, config.access_log_sample) == (True, 0.25)
    with pytest.raises(ConfigError, match="access_log_sample"):
        SidecarConfig.from_mapping({"access_log_sample": 1.5})
    with pytest.raises(ConfigError, match="metrics_label_cap"):
        SidecarConfig.from_mapping({"metrics_label_cap": 0})
    args = _parser().parse_args(["--access-log", "--upstream", "http://127.0.0.1:1"])
    _, sidecar_config = _command_config(args, {})
    assert sidecar_config.access_log is True


def test_worker_restart_lines_are_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.state")
    for _ in range(5):  # a crash-looping worker
        worker_restarted(7, 4242, -9, "killed")
    worker_restarted(8, 4243, 1)
    lines = [(r.getMessage(), getattr(r, "worker", None)) for r in caplog.records]
    assert lines == [("worker restarted", 7), ("worker restarted", 8)]
    assert caplog.records[0].exit_code == -9  # type: ignore[attr-defined]


# -- tracing ---------------------------------------------------------------------------


@pytest.fixture
def spans() -> Iterator[Any]:
    """A global SDK tracer provider with an in-memory exporter, removed afterwards."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.util._once import Once

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        trace._TRACER_PROVIDER = None


async def test_one_trace_from_traceparent_through_attempts_and_a_hedge_to_the_bidder(
    emulator: Emulator, bidder: tuple[ToyBidder, Server], spans: Any
) -> None:
    toy = bidder[0]
    async with (
        Sidecar(_config(emulator, bidder[1])) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        for _ in range(15):  # latency samples behind the hedge delay
            await http.post("/openrtb2/auction", content=BID, headers=KEEP)
        for name in ("bf-a", "bf-b"):
            # Short stalls: a scoring call must finish inside the bid's budget.
            emulator.set_faults(name, stall_rate=0.3, stall_ms=20)
        hedged_trace: list[Any] = []
        for attempt in range(40):
            spans.clear()
            toy.received.clear()
            trace_id = f"{attempt + 1:032x}"
            traceparent = f"00-{trace_id}-00f067aa0ba902b7-01"
            headers = {**KEEP, "traceparent": traceparent}
            answer = await http.post("/openrtb2/auction", content=BID, headers=headers)
            assert answer.status_code == 200
            await asyncio.sleep(0.05)  # a losing attempt finishes its span
            finished = spans.get_finished_spans()
            if any(s.attributes.get("gateway.attempt.kind") == "hedge" for s in finished):
                hedged_trace = list(finished)
                break
    assert hedged_trace, "no scoring call was hedged although 30% of the answers stall"
    by_name: dict[str, list[Any]] = {}
    for span in hedged_trace:
        by_name.setdefault(span.name, []).append(span)
    # One trace: every span carries the inbound trace id.
    assert {f"{s.context.trace_id:032x}" for s in hedged_trace} == {trace_id}
    (server,) = by_name["POST /openrtb2/auction"]
    assert f"{server.parent.span_id:016x}" == "00f067aa0ba902b7"  # continues the caller's
    (invoke,) = by_name["SageMaker Runtime.InvokeEndpoint"]
    assert invoke.parent.span_id == server.context.span_id
    assert invoke.attributes["gateway.route"] == "bid-filter"
    assert invoke.attributes["gateway.hedged"] is True
    assert invoke.attributes["gateway.attempts"] == 2
    assert invoke.attributes["gateway.endpoint"] in ("bf-a", "bf-b")
    assert any(event.name == "hedge fired" for event in invoke.events)
    attempts = by_name["sagemaker_gateway.attempt"]
    assert {a.attributes["gateway.attempt.kind"] for a in attempts} == {"primary", "hedge"}
    assert {a.attributes["gateway.attempt.outcome"] for a in attempts} == {"won", "lost"}
    assert all(a.parent.span_id == invoke.context.span_id for a in attempts)
    (client,) = by_name["POST bidder"]
    assert client.parent.span_id == server.context.span_id
    # The bidder got the same trace, parented on the proxy's client span.
    (forwarded,) = toy.received
    assert forwarded.headers["traceparent"] == (f"00-{trace_id}-{client.context.span_id:016x}-01")


async def test_without_tracing_the_proxy_passes_the_callers_traceparent_on(
    emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    toy = bidder[0]
    async with (
        Sidecar(_config(emulator, bidder[1])) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        assert sidecar.app.tracing is None
        headers = {**KEEP, "traceparent": TRACEPARENT, "tracestate": "vendor=1"}
        assert (
            await http.post("/openrtb2/auction", content=BID, headers=headers)
        ).status_code == 200
    (forwarded,) = toy.received
    assert forwarded.headers["traceparent"] == TRACEPARENT
    assert forwarded.headers["tracestate"] == "vendor=1"


async def test_the_sidecar_command_traces_as_the_otel_variables_say(emulator: Emulator) -> None:
    env = {
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_SERVICE_NAME": "bid-sidecar-test",
        "OTEL_TRACES_SAMPLER": "always_on",
    }
    config = {
        "region": "us-east-1",
        "endpoint_url": emulator.url,
        "credentials": {"access_key_id": "AK", "secret_access_key": "SK"},
    }
    process = await asyncio.to_thread(Sidecar.start_subprocess, config, "127.0.0.1:0", (), env)
    try:
        async with httpx.AsyncClient(base_url=process.url, timeout=10.0) as http:
            headers = {"traceparent": TRACEPARENT}
            answer = await http.post("/endpoints/echo/invocations", content=b"x", headers=headers)
            assert answer.status_code == 200
        process.terminate()
        assert await asyncio.to_thread(process.wait, 30) == 0
        assert process.process.stdout is not None
        printed = process.process.stdout.read().decode()
    finally:
        process.stop()
    # The console exporter prints one JSON object per span, at shutdown's flush.
    assert '"name": "SageMaker Runtime.InvokeEndpoint"' in printed
    assert '"name": "sagemaker_gateway.attempt"' in printed
    assert f'"trace_id": "0x{TRACE_ID}"' in printed
    assert '"service.name": "bid-sidecar-test"' in printed


async def test_two_workers_scrapes_merge_into_one(
    emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    texts = []
    for calls in (2, 3):  # two sidecars stand for two workers
        async with (
            Sidecar(_config(emulator, bidder[1])) as sidecar,
            httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
        ):
            for _ in range(calls):
                await http.post("/endpoints/echo/invocations", content=b"x", headers=NO_CACHE)
            texts.append((await http.get("/metrics")).text)
    merged = _families(merge_expositions(texts).decode())

    def value(family: str, sample: str, **labels: str) -> float:
        return next(
            s.value
            for s in merged[family].samples
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
        )

    assert value("sagemaker_gateway_calls", "sagemaker_gateway_calls_total", route="echo") == 5
    assert (
        value(
            "sagemaker_gateway_call_duration_seconds",
            "sagemaker_gateway_call_duration_seconds_count",
            route="echo",
        )
        == 5
    )
    (build,) = merged["sagemaker_gateway_build_info"].samples
    assert build.value == 1
    workers = {s.labels["worker"] for s in merged["process_resident_memory_bytes"].samples}
    assert workers == {"0", "1"}


async def test_metrics_off_records_nothing_and_metrics_still_answers(
    emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    async with (
        Sidecar(_config(emulator, bidder[1], metrics=False)) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        await _traffic(http)
        scraped = await _scrape(http)
        assert sidecar.app.metrics.requests == {}
    (sample,) = scraped["sagemaker_gateway_build_info"].samples
    assert sample.labels == {"version": gateway.__version__, "build": build_kind()}
    assert {"process_resident_memory_bytes", "python_info"} <= set(scraped)
    # Beside the build, only the OpenRTB proxy's own families: no request, call or cache one.
    ours = {name for name in scraped if name.startswith("sagemaker_gateway_")}
    others = {name for name in ours if not name.startswith("sagemaker_gateway_rtb_")}
    assert others == {"sagemaker_gateway_build_info"}, sorted(others)
