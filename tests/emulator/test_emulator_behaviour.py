"""Emulated behaviour: MME loading, variants, faults, latency, config, control, process."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway._server.http import Request, Response, start_server
from gateway.emulator import ConfigError, Emulator, EmulatorConfig
from tests.emulator.conftest import ClientFactory, signed_headers


async def _invoke(
    http: httpx.AsyncClient, url: str, endpoint: str, body: bytes = b"x", **headers: str
) -> httpx.Response:
    path = f"/endpoints/{endpoint}/invocations"
    return await http.post(
        url + path, content=body, headers=signed_headers(url, path, body, **headers)
    )


async def test_mme_cold_then_warm_and_lru(emulator: Emulator) -> None:
    model = "x-amzn-sagemaker-target-model"
    async with httpx.AsyncClient() as http:
        first = await _invoke(http, emulator.url, "mme", **{model: "a.tar.gz"})
        warm = await _invoke(http, emulator.url, "mme", **{model: "a.tar.gz"})
        assert first.status_code == warm.status_code == 200
        assert first.headers.get("x-emulator-cold-load") == "1"
        assert "x-emulator-cold-load" not in warm.headers
        await _invoke(http, emulator.url, "mme", **{model: "b.tar.gz"})
        await _invoke(http, emulator.url, "mme", **{model: "a.tar.gz"})  # a is now most recent
        await _invoke(http, emulator.url, "mme", **{model: "c.tar.gz"})  # evicts b (max_loaded 2)
        assert emulator.loaded_models("mme") == ["a.tar.gz", "c.tar.gz"]
        again = await _invoke(http, emulator.url, "mme", **{model: "b.tar.gz"})
        assert again.headers.get("x-emulator-cold-load") == "1"
        unknown = await _invoke(http, emulator.url, "mme", **{model: "zzz.tar.gz"})
        assert unknown.status_code == 400 and "Failed to download model data" in unknown.text
        no_model = await _invoke(http, emulator.url, "mme")
        assert no_model.status_code == 400
        not_mme = await _invoke(http, emulator.url, "echo", **{model: "a.tar.gz"})
        assert not_mme.status_code == 400
    stats = emulator.stats
    assert stats.cold_loads[("mme", "b.tar.gz")] == 2
    assert stats.evictions[("mme", "b.tar.gz")] == 1
    assert stats.count(endpoint="mme", model="a.tar.gz") == 3


async def test_mme_concurrent_first_calls_share_one_load(emulator: Emulator) -> None:
    async with httpx.AsyncClient() as http:
        answers = await asyncio.gather(
            *[
                _invoke(http, emulator.url, "mme", **{"x-amzn-sagemaker-target-model": "c.tar.gz"})
                for _ in range(5)
            ]
        )
    assert [answer.status_code for answer in answers] == [200] * 5
    assert emulator.stats.cold_loads[("mme", "c.tar.gz")] == 1
    assert emulator.stats.count(endpoint="mme", model="c.tar.gz") == 5


async def test_mme_not_ready_while_loading() -> None:
    config = EmulatorConfig.from_dict(
        {
            "auth": {"required": False},
            "endpoints": {
                "mme": {
                    "mme": {"allow_any": True, "cold_load_ms": 100, "not_ready_if_loading": True}
                }
            },
        }
    )
    async with Emulator(config) as emu, httpx.AsyncClient(base_url=emu.url) as http:
        headers = {"X-Amzn-SageMaker-Target-Model": "anything.tar.gz"}
        first = asyncio.create_task(
            http.post("/endpoints/mme/invocations", content=b"1", headers=headers)
        )
        await asyncio.sleep(0.03)
        second = await http.post("/endpoints/mme/invocations", content=b"2", headers=headers)
        assert second.status_code == 429
        assert second.headers["x-amzn-errortype"].startswith("ModelNotReadyException:")
        assert (await first).status_code == 200


async def test_variants_pinned_and_weighted(emulator: Emulator) -> None:
    async with httpx.AsyncClient() as http:
        pinned = await _invoke(
            http, emulator.url, "ab", **{"x-amzn-sagemaker-target-variant": "green"}
        )
        assert pinned.headers["x-amzn-invoked-production-variant"] == "green"
        unknown = await _invoke(
            http, emulator.url, "ab", **{"x-amzn-sagemaker-target-variant": "red"}
        )
        assert unknown.status_code == 400
        emulator.stats.reset()
        for _ in range(200):
            await _invoke(http, emulator.url, "ab")
    blue = emulator.stats.count(endpoint="ab", variant="blue")
    assert blue + emulator.stats.count(endpoint="ab", variant="green") == 200
    assert 120 < blue < 180  # weights 3:1, seeded


async def _error_codes(seed: int, calls: int) -> list[str]:
    config = EmulatorConfig.from_dict(
        {
            "seed": seed,
            "auth": {"required": False},
            "endpoints": {
                "flaky": {
                    "faults": {"error_rates": {"InternalFailure": 0.2, "ServiceUnavailable": 0.1}}
                }
            },
        }
    )
    codes = []
    async with Emulator(config) as emu, httpx.AsyncClient(base_url=emu.url) as http:
        for _ in range(calls):
            answer = await http.post("/endpoints/flaky/invocations", content=b"x")
            codes.append(answer.headers.get("x-amzn-errortype", "ok").partition(":")[0])
    return codes


async def test_fault_rates_are_seeded_and_close_to_configured() -> None:
    first = await _error_codes(seed=3, calls=400)
    assert first == await _error_codes(seed=3, calls=400)
    assert 50 < first.count("InternalFailure") < 110
    assert 20 < first.count("ServiceUnavailable") < 60
    assert first.count("ok") == 400 - first.count("InternalFailure") - first.count(
        "ServiceUnavailable"
    )


async def test_latency_tail_and_stalls_counted(emulator: Emulator) -> None:
    emulator.set_latency("echo", base_ms=0.0, tail_share=0.25, tail_ms=1.0)
    emulator.set_faults("echo", stall_rate=0.1, stall_ms=1.0)
    async with httpx.AsyncClient() as http:
        for _ in range(200):
            assert (await _invoke(http, emulator.url, "echo")).status_code == 200
    assert 25 < emulator.stats.tails["echo"] < 80
    assert 5 < emulator.stats.stalls["echo"] < 40


async def test_runtime_control_fail_then_recover(emulator: Emulator) -> None:
    async with httpx.AsyncClient() as http:
        emulator.set_faults("echo", error_rates={"ServiceUnavailable": 1.0})
        assert (await _invoke(http, emulator.url, "echo")).status_code == 503
        emulator.set_faults("echo", error_rates={})
        assert (await _invoke(http, emulator.url, "echo")).status_code == 200
        with pytest.raises(ConfigError, match=r"error_rates\.Nope"):
            emulator.set_faults("echo", error_rates={"Nope": 0.5})
        with pytest.raises(KeyError):
            emulator.set_latency("missing", base_ms=1.0)


async def test_container_model_forwarding(emulator: Emulator) -> None:
    async def container(request: Request) -> Response:
        if request.path == "/invocations" and request.body == b"bad":
            return Response(400, (("content-type", "text/plain"),), b"cannot parse")
        answer = b"container:" + request.body
        return Response(200, (("content-type", "text/plain"),), answer)

    server = await start_server(container, "127.0.0.1", 0)
    config = EmulatorConfig.from_dict(
        {
            "auth": {"required": False},
            "endpoints": {
                "box": {"model": {"type": "container", "url": f"http://127.0.0.1:{server.port}"}}
            },
        }
    )
    try:
        async with Emulator(config) as emu, httpx.AsyncClient(base_url=emu.url) as http:
            good = await http.post("/endpoints/box/invocations", content=b"hi")
            assert good.content == b"container:hi" and good.headers["content-type"] == "text/plain"
            bad = await http.post("/endpoints/box/invocations", content=b"bad")
            assert bad.status_code == 424
            assert bad.json()["OriginalStatusCode"] == 400
            assert bad.json()["OriginalMessage"] == "cannot parse"
    finally:
        await server.close()


async def test_xgboost_bid_filter(boto_client: ClientFactory) -> None:
    config = EmulatorConfig.default(seed=1)
    async with Emulator(config) as emu:
        client = boto_client(emu.url)
        with pytest.raises(client.exceptions.ModelError) as caught:
            await asyncio.to_thread(
                client.invoke_endpoint,
                EndpointName="bid-filter",
                Body=b"not,a,valid,row",
                ContentType="text/csv",
            )
        assert caught.value.response["OriginalStatusCode"] == 400
        scored = await asyncio.to_thread(
            client.invoke_endpoint,
            EndpointName="bid-filter",
            Body=b"1,2,0.01,0.02,0.03,0.02,2,0.03,0.02,0",  # the bundled model's ten features
            ContentType="text/csv",
        )
        assert 0.0 <= float(scored["Body"].read()) <= 1.0


def test_config_validation_names_the_bad_key(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"endpoints": {"e": {"model": {"type": "gpu"}}}}, "endpoints.e.model.type"),
        ({"endpoints": {"e": {"latency": {"base_ms": -1}}}}, "endpoints.e.latency.base_ms"),
        ({"endpoints": {"e": {"faults": {"reset_rate": 2}}}}, "endpoints.e.faults.reset_rate"),
        ({"endpoints": {"e": {"mme": {"cold_load_ms": 1}}}}, "endpoints.e.mme.models"),
        ({"endpoints": {"e": {"variants": []}}}, "endpoints.e.variants"),
        ({"endpoints": {"e": {"typo": 1}}}, "endpoints.e.typo"),
        ({"endpoints": {"bad name": {}}}, "endpoints.bad name"),
        ({"seed": "x"}, "seed"),
    ]
    for data, key in cases:
        with pytest.raises(ConfigError, match="^config error at " + key.replace(".", r"\.")):
            EmulatorConfig.from_dict(data)
    toml = tmp_path / "emu.toml"
    toml.write_text(
        '[endpoints.echo]\nmodel = {type = "echo"}\n'
        '[endpoints.echo.latency]\nbase_ms = 2.0\n[auth.credentials]\nAKID = "secret"\n'
    )
    config = EmulatorConfig.from_toml(toml)
    assert config.endpoints["echo"].latency.base_ms == 2.0
    assert dict(config.auth.credentials) == {"AKID": "secret"}
    assert "secret" not in repr(config)
    default = EmulatorConfig.default()
    assert {"echo", "constant", "mme", "bid-filter", "slow", "flaky"} <= set(default.endpoints)


def test_subprocess_handle_and_controls() -> None:
    handle = Emulator.start_subprocess(
        {
            "auth": {"required": False},
            "endpoints": {"echo": {}, "mme": {"mme": {"allow_any": True}}},
        }
    )
    try:
        with httpx.Client(base_url=handle.url) as http:
            assert http.post("/endpoints/echo/invocations", content=b"hi").content == b"hi"
            handle.set_faults("echo", error_rates={"InternalFailure": 1.0})
            assert http.post("/endpoints/echo/invocations", content=b"hi").status_code == 500
            assert handle.stats().count(endpoint="echo") == 2
            handle.reset_stats()
            assert handle.stats().count() == 0
    finally:
        assert handle.stop() == 0


def test_main_rejects_a_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[endpoints.e]\nmodel = {type = 'gpu'}\n")
    result = subprocess.run(
        [sys.executable, "-m", "gateway.emulator", "--listen", "127.0.0.1:0", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "endpoints.e.model.type" in result.stderr


@pytest.mark.parametrize("listen", ["no-port", "127.0.0.1:65536"])
def test_main_rejects_a_bad_listen_address(listen: str, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.emulator._emulator import main

    assert main(["--listen", listen]) == 2
    assert (
        f"config error at --listen: expected HOST:PORT, got {listen!r}" in capsys.readouterr().err
    )


def test_a_config_reaches_a_child_process_unchanged() -> None:
    # EmulatorProcess hands a config to its child as a file of the shape from_dict reads.
    import dataclasses

    import orjson

    from gateway.emulator._emulator import _config_as_dict, _json_default

    config = EmulatorConfig.from_dict(
        {
            "endpoints": {
                "x": {"model": {"type": "xgboost", "path": "/m.json"}, "stream_parts": 5},
                "c": {"model": {"type": "container", "url": "http://127.0.0.1:9"}},
                "m": {
                    "mme": {"allow_any": True, "max_loaded": 3},
                    "variants": [{"name": "a", "weight": 2}, {"name": "b"}],
                    "faults": {"error_rates": {"ModelError": 0.5}, "stall_ms": 7},
                },
            },
            "auth": {"credentials": {"AKID": "secret"}, "required": False},
            "seed": 9,
        }
    )
    data = orjson.loads(orjson.dumps(_config_as_dict(config), default=_json_default))
    again = EmulatorConfig.from_dict(data)
    assert again.endpoints["x"].model.options["path"] == "/m.json"

    def without_options(config: EmulatorConfig) -> dict[str, object]:
        return {
            name: dataclasses.replace(e, model=dataclasses.replace(e.model, options={}))
            for name, e in config.endpoints.items()
        }

    assert without_options(again) == without_options(config)
    assert dataclasses.replace(again, endpoints={}) == dataclasses.replace(config, endpoints={})
    assert again.auth.credentials == {"AKID": "secret"}
