"""The admin listener: /metrics, /livez and /readyz apart from traffic, one auth rule
whatever the worker count, and a killed worker's counts kept in the sum."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway import Gateway
from gateway.emulator import Emulator
from gateway.errors import ConfigError
from gateway.sidecar import Sidecar, SidecarProcess
from gateway.sidecar._config import SidecarConfig
from tests.sidecar.conftest import make_gateway

TOKEN = "admin-test-token-0123456789"
BEARER = {"authorization": f"Bearer {TOKEN}"}


def _requests_total(exposition: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name == "sagemaker_gateway_sidecar_requests_total"
    )


def _sidecar_config(**extra: Any) -> SidecarConfig:
    auth = {"mode": "bearer", "token": TOKEN}
    return SidecarConfig.from_mapping({"auth": auth, "admin_listen": "127.0.0.1:0", **extra})


@pytest.fixture
async def guarded(gateway: Gateway) -> AsyncIterator[Sidecar]:
    """A sidecar with inbound auth and metrics_auth on (the default)."""
    async with Sidecar(gateway, "127.0.0.1", 0, config=_sidecar_config()) as running:
        yield running


async def test_admin_port_serves_metrics_and_health_without_inbound_auth(
    guarded: Sidecar,
) -> None:
    assert guarded.admin_url is not None and guarded.admin_url != guarded.url
    async with httpx.AsyncClient(base_url=guarded.admin_url) as admin:
        scrape = await admin.get("/metrics")
        assert scrape.status_code == 200
        assert "sagemaker_gateway_sidecar_requests" in scrape.text
        head = await admin.head("/metrics")
        assert head.status_code == 200 and head.content == b""
        assert (await admin.get("/livez")).status_code == 200
        assert (await admin.get("/readyz")).json() == {"status": "ready"}
        # Only those three paths: no invocation reaches the gateway through it.
        posted = await admin.post("/endpoints/echo/invocations", content=b"x")
        assert posted.status_code == 404
        assert (await admin.post("/metrics")).status_code == 404
    async with httpx.AsyncClient(base_url=guarded.url) as traffic:
        # The traffic port keeps its rules: /metrics behind inbound auth...
        assert (await traffic.get("/metrics")).status_code == 403
        assert (await traffic.head("/metrics")).status_code == 403
        assert (await traffic.get("/metrics", headers=BEARER)).status_code == 200
        # ... and the probes open, as documented.
        assert (await traffic.get("/livez")).status_code == 200
        assert (await traffic.get("/readyz")).status_code == 200


async def test_admin_auth_puts_the_admin_port_behind_inbound_auth(gateway: Gateway) -> None:
    config = _sidecar_config(admin_auth=True)
    async with Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar:
        assert sidecar.admin_url is not None
        async with httpx.AsyncClient(base_url=sidecar.admin_url) as admin:
            assert (await admin.get("/metrics")).status_code == 403
            assert (await admin.get("/metrics", headers=BEARER)).status_code == 200


async def test_head_metrics_answers_as_get_with_one_worker(sidecar: Sidecar) -> None:
    async with httpx.AsyncClient(base_url=sidecar.url) as http:
        head = await http.head("/metrics")
        get = await http.get("/metrics")
    assert head.status_code == get.status_code == 200
    assert head.headers["content-type"] == get.headers["content-type"]


async def test_admin_listen_off_opens_no_admin_port(gateway: Gateway) -> None:
    config = SidecarConfig.from_mapping({"admin_listen": "off"})
    async with Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar:
        assert sidecar.admin_url is None


def test_the_admin_listener_is_off_unless_asked_for() -> None:
    # Off by default, so a second sidecar on the same host starts with its defaults.
    config = SidecarConfig.from_mapping({"listen": "0.0.0.0:8081"})
    assert config.admin_address("0.0.0.0", 8081) is None
    asked = SidecarConfig.from_mapping({"admin_listen": "0.0.0.0:9091"})
    assert asked.admin_address("0.0.0.0", 8081) == ("0.0.0.0", 9091)
    with pytest.raises(ConfigError, match="admin_listen"):
        SidecarConfig.from_mapping({"admin_listen": "nowhere"})


async def test_a_taken_admin_port_fails_the_start_and_frees_the_traffic_port(
    emulator: Emulator,
) -> None:
    admin = SidecarConfig.from_mapping({"admin_listen": "127.0.0.1:0"})
    async with (
        make_gateway(emulator) as gateway,
        Sidecar(gateway, "127.0.0.1", 0, config=admin) as first,
    ):
        assert first.admin_url is not None
        taken = first.admin_url.rsplit(":", 1)[1]
        config = SidecarConfig.from_mapping({"admin_listen": f"127.0.0.1:{taken}"})
        second = Sidecar(gateway, "127.0.0.1", 0, config=config)
        with pytest.raises(ConfigError, match=r"sidecar\.admin_listen .* cannot listen"):
            await second.start()


# -- several workers ------------------------------------------------------------------


def _process_config(emulator: Emulator, **sidecar: Any) -> dict[str, Any]:
    return {
        "region": "us-east-1",
        "endpoint_url": emulator.url,
        "credentials": {"access_key_id": "AK", "secret_access_key": "SK"},
        "sidecar": {"shutdown_grace_s": 10, "drain_s": 0, **sidecar},
    }


@pytest.fixture
def two_guarded_workers(emulator: Emulator) -> Iterator[SidecarProcess]:
    config = _process_config(emulator, auth={"mode": "bearer", "token": TOKEN})
    args = ("--workers", "2", "--log-level", "WARNING")
    process = SidecarProcess.start(config, "127.0.0.1:0", args, None)
    try:
        yield process
    finally:
        process.stop()


async def test_two_workers_decide_metrics_auth_as_one_does(
    two_guarded_workers: SidecarProcess,
) -> None:
    # Fresh connections: the kernel picks a worker for each; every one must refuse.
    for _ in range(6):
        async with httpx.AsyncClient(base_url=two_guarded_workers.url) as traffic:
            assert (await traffic.get("/metrics")).status_code == 403
            assert (await traffic.head("/metrics")).status_code == 403
            assert (await traffic.get("/metrics", headers=BEARER)).status_code == 200
    assert two_guarded_workers.admin_url is not None
    for _ in range(6):
        async with httpx.AsyncClient(base_url=two_guarded_workers.admin_url) as admin:
            assert (await admin.get("/metrics")).status_code == 200
            assert (await admin.head("/metrics")).status_code == 200


def _children(pid: int) -> set[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return {int(child) for child in text.split()}


async def _calls(url: str, count: int) -> list[int]:
    async def one() -> int:
        async with httpx.AsyncClient(base_url=url) as http:
            return (await http.post("/endpoints/echo/invocations", content=b"1")).status_code

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def test_a_killed_workers_counts_stay_in_the_sum(emulator: Emulator) -> None:
    config = _process_config(emulator)
    args = ("--workers", "2", "--log-level", "ERROR")
    process = await asyncio.to_thread(SidecarProcess.start, config, "127.0.0.1:0", args, None)
    try:
        assert await _calls(process.url, 40) == [200] * 40
        async with httpx.AsyncClient(base_url=process.url) as http:
            scrape = await http.get("/metrics", headers={"connection": "close"})
        assert _requests_total(scrape.text) == 40
        before = _children(process.pid)
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        for _ in range(300):  # the replacement is up when two workers answer again
            now = _children(process.pid)
            if len(now) == 2 and victim not in now:
                break
            await asyncio.sleep(0.05)
        async with httpx.AsyncClient(base_url=process.url) as http:
            for _ in range(200):
                if (await http.get("/readyz", headers={"connection": "close"})).status_code == 200:
                    break
                await asyncio.sleep(0.05)
            # Whichever worker answers, nothing counted before the kill is gone.
            for _ in range(4):
                scrape = await http.get("/metrics", headers={"connection": "close"})
                assert _requests_total(scrape.text) == 40
    finally:
        await asyncio.to_thread(process.stop)


# -- how an operator sets it ------------------------------------------------------------


def _admin_of(argv: list[str], environ: dict[str, str]) -> str | None:
    from gateway.sidecar._sidecar import _command_config, _parser

    args = _parser().parse_args(["--upstream", "http://127.0.0.1:1", *argv])
    _, config = _command_config(args, environ)
    return config.admin_listen


def test_admin_listen_comes_from_the_environment_and_the_flag_wins() -> None:
    variable = {"SAGEMAKER_GATEWAY__SIDECAR__ADMIN_LISTEN": "0.0.0.0:9191"}
    assert _admin_of([], variable) == "0.0.0.0:9191"
    assert _admin_of(["--admin-listen", "off"], variable) == "off"
    with pytest.raises(ConfigError, match="--admin-listen"):
        _admin_of(["--admin-listen", "nowhere"], {})


async def test_a_process_whose_chosen_admin_port_was_taken_starts_on_another(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SidecarProcess.start probes a free port for the admin listener, and the child binds
    it a moment later: another process can take it between. It then chooses again."""
    from gateway.sidecar import _sidecar

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        chosen = iter([taken_port])
        free_port = _sidecar._free_port
        monkeypatch.setattr(_sidecar, "_free_port", lambda: next(chosen, None) or free_port())
        config = _process_config(emulator)
        args = ("--log-level", "ERROR")
        process = await asyncio.to_thread(SidecarProcess.start, config, "127.0.0.1:0", args, None)
        try:
            assert process.admin_url is not None
            assert process.admin_url != f"http://127.0.0.1:{taken_port}"
            async with httpx.AsyncClient() as client:
                metrics = await client.get(f"{process.admin_url}/metrics")
            assert metrics.status_code == 200
        finally:
            await asyncio.to_thread(process.stop)
