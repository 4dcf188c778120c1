"""Proxy mode: POST /openrtb2/auction scored through the emulator, kept ones sent to a bidder.

A toy bidder (the project's own HTTP server on a free loopback port) bids
on everything it gets; `route_thresholds` picks keep-all (0.0) or drop-all
(1.0: every real score is below it) per request via x-bid-filter-route.
"""

from __future__ import annotations

import gzip
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

import gateway
from gateway._server.http import Server
from gateway.emulator import Emulator, EmulatorConfig
from gateway.errors import ConfigError
from gateway.rtb.bidder import ToyBidder
from gateway.rtb.synth import sample_bodies
from gateway.sidecar import RtbConfig, Sidecar
from gateway.sidecar._rtb import BodyRefused, inflate

PATH = "/openrtb2/auction"
# A generous tmax: these tests are about what the proxy does with a score, and a
# busy machine must not turn a slow first score into a fail-open (fail-open has its
# own tests, with faults).
BODY = orjson.dumps({**orjson.loads(sample_bodies(1, seed=3)[0]), "tmax": 5000})
KEEP = {"x-bid-filter-route": "keep-all", "x-openrtb-version": "2.6"}
DROP = {"x-bid-filter-route": "drop-all"}


@pytest.fixture
async def rtb_emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.default(seed=2)) as emu:
        yield emu


def config(emulator_url: str, bidder_urls: list[str], **rtb: Any) -> dict[str, Any]:
    return {
        "region": "us-east-1",
        "endpoint_url": emulator_url,
        "credentials": {"access_key_id": "AK", "secret_access_key": "SK"},
        "rtb": {
            "bidders": bidder_urls,
            "route_thresholds": {"keep-all": 0.0, "drop-all": 1.0},
            "default_budget_ms": 2000.0,
            **rtb,
        },
    }


@pytest.fixture
async def proxy(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> AsyncIterator[httpx.AsyncClient]:
    bidder_url = f"http://127.0.0.1:{bidder[1].port}/bid"
    async with (
        Sidecar(config(rtb_emulator.url, [bidder_url]), "127.0.0.1", 0) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        yield http


async def metrics(http: httpx.AsyncClient) -> dict[str, float]:
    text = (await http.get("/metrics")).text
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("sagemaker_gateway_rtb_"):
                label = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{label}}}" if label else sample.name] = sample.value
    return samples


async def test_dropped_gets_204_and_kept_relays_the_bidders_answer(
    proxy: httpx.AsyncClient, bidder: tuple[ToyBidder, Server]
) -> None:
    toy = bidder[0]
    dropped = await proxy.post(PATH, content=BODY, headers=DROP)
    assert dropped.status_code == 204 and dropped.content == b""
    assert dropped.headers["x-bid-filter-reason"] == "scored_drop"
    assert 0.0 < float(dropped.headers["x-bid-filter-score"]) < 1.0
    assert toy.received == []  # never reached the ad server

    headers = {**KEEP, "content-type": "application/json"}
    kept = await proxy.post(PATH, content=BODY, headers=headers)
    assert kept.status_code == 200
    assert kept.headers["content-type"] == "application/json"
    assert kept.json()["id"] == orjson.loads(BODY)["id"]
    assert kept.headers["x-bid-filter-reason"] == "scored_keep"
    assert kept.headers["x-bid-filter-score"] == dropped.headers["x-bid-filter-score"]
    (forwarded,) = toy.received
    assert forwarded.body == BODY and forwarded.path == "/bid"
    assert forwarded.headers["x-openrtb-version"] == "2.6"
    assert forwarded.headers["content-type"] == "application/json"
    assert forwarded.headers["x-bid-filter-score"] == kept.headers["x-bid-filter-score"]


async def test_bidder_no_bid_or_failure_answers_204(
    proxy: httpx.AsyncClient, bidder: tuple[ToyBidder, Server]
) -> None:
    toy = bidder[0]
    toy.status = 204
    assert (await proxy.post(PATH, content=BODY, headers=KEEP)).status_code == 204
    toy.status = 500
    assert (await proxy.post(PATH, content=BODY, headers=KEEP)).status_code == 204
    counters = await metrics(proxy)
    assert counters["sagemaker_gateway_rtb_bidder_responses_total{code=204}"] == 1
    assert counters["sagemaker_gateway_rtb_bidder_errors_total{reason=status}"] == 1


async def test_unreachable_bidder_answers_204(rtb_emulator: Emulator) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead_url = f"http://127.0.0.1:{probe.getsockname()[1]}/bid"
    async with (
        Sidecar(config(rtb_emulator.url, [dead_url]), "127.0.0.1", 0) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        answer = await http.post(PATH, content=BODY, headers=KEEP)
        assert answer.status_code == 204
        assert answer.headers["x-bid-filter-reason"] == "scored_keep"
        assert (await metrics(http))[
            "sagemaker_gateway_rtb_bidder_errors_total{reason=transport}"
        ] == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not JSON"),
        (b'{"id": "x", "imp": []}', "imp is empty"),
        (b'{"imp": [{"id": "1", "banner": {}}]}', "id"),
    ],
)
async def test_strict_mode_answers_a_malformed_bid_request_400_with_the_reason(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server], body: bytes, message: str
) -> None:
    bidder_url = f"http://127.0.0.1:{bidder[1].port}/bid"
    async with (
        Sidecar(config(rtb_emulator.url, [bidder_url], strict=True), "127.0.0.1", 0) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        answer = await http.post(PATH, content=body, headers=KEEP)
        assert answer.status_code == 400
        assert message in answer.text
        assert (await metrics(http))["sagemaker_gateway_rtb_invalid_total"] == 1
    assert bidder[0].received == []


async def test_dead_model_fails_open_and_forwards(
    proxy: httpx.AsyncClient, rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    rtb_emulator.set_faults("bid-filter", error_rates={"InternalFailure": 1.0})
    answer = await proxy.post(PATH, content=BODY, headers=DROP)  # would be dropped if scored
    assert answer.status_code == 200
    assert answer.headers["x-bid-filter-reason"] == "failed_open"
    assert "x-bid-filter-score" not in answer.headers
    assert len(bidder[0].received) == 1


async def test_metrics_counters_move(proxy: httpx.AsyncClient) -> None:
    for _ in range(3):
        await proxy.post(PATH, content=BODY, headers=DROP)
    await proxy.post(PATH, content=BODY, headers=KEEP)
    counters = await metrics(proxy)
    assert counters["sagemaker_gateway_rtb_dropped_total"] == 3
    assert counters["sagemaker_gateway_rtb_kept_total"] == 1
    assert counters["sagemaker_gateway_rtb_failed_open_total"] == 0
    assert counters["sagemaker_gateway_rtb_batch_size_count"] == 4  # one scoring call each
    assert counters["sagemaker_gateway_rtb_forward_duration_seconds_count"] == 1
    assert counters["sagemaker_gateway_rtb_bidder_responses_total{code=200}"] == 1


async def test_explore_and_shadow_from_config(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    bidder_url = f"http://127.0.0.1:{bidder[1].port}/"
    for options, reason in (({"shadow": True}, "shadow"), ({"explore_share": 1.0}, "explored")):
        async with (
            Sidecar(config(rtb_emulator.url, [bidder_url], **options), "127.0.0.1", 0) as sidecar,
            httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
        ):
            answer = await http.post(PATH, content=BODY, headers=DROP)
            assert answer.status_code == 200
            assert answer.headers["x-bid-filter-reason"] == reason
            counter = "shadowed" if reason == "shadow" else "explored"
            assert (await metrics(http))[f"sagemaker_gateway_rtb_{counter}_total"] == 1


async def test_sidecar_command_runs_proxy_mode(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    bidder_url = f"http://127.0.0.1:{bidder[1].port}/"
    rtb = {"path": "/bid", "threshold": 0.0}
    with Sidecar.start_subprocess(config(rtb_emulator.url, [bidder_url], **rtb)) as process:
        async with httpx.AsyncClient(base_url=process.url, timeout=10.0) as http:
            # The first request pays the cold start (connections, model load)
            # and may fail open within the bid's tmax on a busy machine.
            await http.post("/bid", content=BODY)
            answer = await http.post("/bid", content=BODY)
    assert answer.status_code == 200 and answer.headers["x-bid-filter-reason"] == "scored_keep"


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({}, "rtb.bidders"),
        ({"bidders": []}, "rtb.bidders"),
        ({"bidders": ["ftp://x"]}, "rtb.bidders"),
        ({"bidders": ["http://b"], "threshold": 2}, "rtb.threshold"),
        ({"bidders": ["http://b"], "route_thresholds": {"x": -1}}, "rtb.route_thresholds.x"),
        ({"bidders": ["http://b"], "segment_thresholds": {"color": {}}}, "rtb.segment_thresholds"),
        ({"bidders": ["http://b"], "max_batch": 0}, "rtb.max_batch"),
        ({"bidders": ["http://b"], "min_batch": 0}, "rtb.min_batch"),
        ({"bidders": ["http://b"], "path": "auction"}, "rtb.path"),
        ({"bidders": ["http://b"], "shadow": "yes"}, "rtb.shadow"),
        ({"bidders": ["http://b"], "tmax": 5}, "rtb.tmax"),
        ({"bidders": ["http://b"], "tmax_margin_share": 1.0}, "rtb.tmax_margin_share"),
        ({"bidders": ["http://b"], "tmax_margin_share": -0.1}, "rtb.tmax_margin_share"),
        ({"bidders": ["http://b"], "max_inflated_bytes": 0}, "rtb.max_inflated_bytes"),
    ],
)
def test_config_errors_name_the_key(table: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match="^config error at " + key.replace(".", r"\.")):
        RtbConfig.from_mapping(table)


def test_config_defaults_and_values() -> None:
    parsed = RtbConfig.from_mapping(
        {
            "bidders": "http://ads:8080/bid",
            "segment_thresholds": {"format": {"video": 0.002}},
            "max_wait_ms": 0.5,
            "min_batch": 4,
        }
    )
    assert parsed.bidders == ("http://ads:8080/bid",)
    assert (parsed.path, parsed.endpoint, parsed.policy.threshold) == (
        "/openrtb2/auction",
        "bid-filter",
        0.01,
    )
    assert (parsed.max_wait_ms, parsed.max_batch, parsed.min_batch) == (0.5, 32, 4)
    assert RtbConfig.from_mapping({"bidders": ["http://b"]}).min_batch == 8
    assert (parsed.tmax_margin_ms, parsed.tmax_margin_share) == (50.0, 0.5)
    assert parsed.max_inflated_bytes == 1024 * 1024
    assert parsed.policy.segment_thresholds == {"format": {"video": 0.002}}


async def test_gzipped_bid_request_is_scored_and_forwarded_as_received(
    proxy: httpx.AsyncClient, bidder: tuple[ToyBidder, Server]
) -> None:
    packed = gzip.compress(BODY)
    headers = {**KEEP, "content-type": "application/json", "content-encoding": "gzip"}
    kept = await proxy.post(PATH, content=packed, headers=headers)
    assert kept.status_code == 200
    assert kept.headers["x-bid-filter-reason"] == "scored_keep"
    assert kept.json()["id"] == orjson.loads(BODY)["id"]
    (forwarded,) = bidder[0].received
    assert forwarded.body == packed and forwarded.headers["content-encoding"] == "gzip"
    dropped = await proxy.post(PATH, content=packed, headers={**DROP, "content-encoding": "GZIP"})
    assert dropped.status_code == 204 and dropped.headers["x-bid-filter-reason"] == "scored_drop"


async def test_kept_requests_reach_the_bidder_through_the_native_keep_alive_client(
    proxy: httpx.AsyncClient, bidder: tuple[ToyBidder, Server]
) -> None:
    for _ in range(3):
        assert (await proxy.post(PATH, content=BODY, headers=KEEP)).status_code == 200
    agents = {request.headers["user-agent"] for request in bidder[0].received}
    assert len(bidder[0].received) == 3
    assert agents == {f"sagemaker-gateway/{gateway.__version__}"}  # not python-httpx


@pytest.mark.parametrize(
    ("body", "encoding", "status", "message"),
    [
        # A zip bomb: 64 MiB of zeros in ~64 KiB, refused at the 1 MiB default.
        (gzip.compress(bytes(64 * 1024 * 1024)), "gzip", 413, "inflates to more than 1048576"),
        (b"{not gzip at all", "gzip", 400, "not gzip"),
        (gzip.compress(BODY)[:-12], "gzip", 400, "truncated"),
        (BODY, "br", 415, "not supported"),
    ],
    ids=["zip-bomb", "not-gzip", "truncated", "brotli"],
)
async def test_bodies_the_proxy_will_not_read_get_a_clear_4xx(
    proxy: httpx.AsyncClient,
    bidder: tuple[ToyBidder, Server],
    body: bytes,
    encoding: str,
    status: int,
    message: str,
) -> None:
    answer = await proxy.post(PATH, content=body, headers={**KEEP, "content-encoding": encoding})
    assert answer.status_code == status
    assert message in answer.text
    assert bidder[0].received == []
    assert (await metrics(proxy))["sagemaker_gateway_rtb_invalid_total"] == 1


def test_inflate_joins_gzip_members_and_counts_them_against_the_limit() -> None:
    members = gzip.compress(b"a" * 600) + gzip.compress(b"b" * 600)
    assert inflate(members, 1200) == b"a" * 600 + b"b" * 600
    with pytest.raises(BodyRefused) as refused:
        inflate(members, 1000)
    assert refused.value.status == 413
