"""/livez, /readyz and the drain: not ready at once on SIGTERM, still serving for drain_s."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from typing import Any

import httpx
import pytest

from gateway import Gateway
from gateway.emulator import Emulator
from gateway.sidecar import Sidecar, SidecarConfig, SidecarProcess


def _config(emulator: Emulator, **sidecar: Any) -> dict[str, Any]:
    return {
        "region": "us-east-1",
        "endpoint_url": emulator.url,
        "credentials": {"access_key_id": "AK", "secret_access_key": "SK"},
        "sidecar": {"shutdown_grace_s": 10, **sidecar},
    }


async def test_livez_and_readyz_in_process(sidecar: Sidecar) -> None:
    async with httpx.AsyncClient(base_url=sidecar.url) as http:
        assert (await http.get("/livez")).status_code == 200
        ready = await http.get("/readyz")
        assert ready.status_code == 200 and ready.json() == {"status": "ready"}
        sidecar.draining = True
        draining = await http.get("/readyz")
        assert draining.status_code == 503
        assert draining.json()["reasons"] == ["draining"]
        # Liveness and /ping are not readiness: both still answer.
        assert (await http.get("/livez")).status_code == 200
        assert (await http.get("/ping")).status_code == 200


async def test_listening_on_all_interfaces_is_logged_as_such(
    gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    config = SidecarConfig.from_mapping({"auth": {"mode": "bearer", "token": "t" * 24}})
    with caplog.at_level(logging.WARNING, logger="gateway.sidecar"):
        async with Sidecar(gateway, "0.0.0.0", 0, config=config) as sidecar:
            port = sidecar.port
    warnings = [r for r in caplog.records if "all interfaces" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].__dict__["listen"] == f"0.0.0.0:{port}"


async def test_sigterm_drains_then_stops(emulator: Emulator) -> None:
    process = await asyncio.to_thread(
        SidecarProcess.start,
        _config(emulator, drain_s=2.0),
        "127.0.0.1:0",
        ("--log-level", "WARNING"),
        None,
    )
    try:
        async with httpx.AsyncClient(base_url=process.url) as http:
            assert (await http.get("/readyz")).status_code == 200
        signalled = time.monotonic()
        process.process.send_signal(signal.SIGTERM)
        readiness: list[int] = []
        served_during_drain = 0
        # Fresh connections (a caller arriving during the drain), until the port closes.
        while process.process.poll() is None:
            try:
                async with httpx.AsyncClient(base_url=process.url) as http:
                    readiness.append((await http.get("/readyz")).status_code)
                    call = await http.post("/endpoints/echo/invocations", content=b"late")
            except httpx.TransportError:
                break
            assert call.status_code == 200 and call.content == b"late"
            served_during_drain += 1
            await asyncio.sleep(0.05)
        code = await asyncio.to_thread(process.wait, 30)
        stopped_after = time.monotonic() - signalled
    finally:
        await asyncio.to_thread(process.stop)
    assert code == 0
    assert readiness and set(readiness) == {503}, readiness
    assert served_during_drain >= 5, served_during_drain
    # It stayed up for the drain (not a timing bound on speed: a floor).
    assert stopped_after >= 2.0


async def test_readyz_is_not_ready_while_credentials_are_expired(sidecar: Sidecar) -> None:
    from gateway._aws.sigv4 import Credentials
    from gateway._invoke.credentials import CredentialSource

    gateway = sidecar.gateway
    live = gateway._context.credentials
    async with httpx.AsyncClient(base_url=sidecar.url) as http:
        assert (await http.get("/readyz")).status_code == 200
        # What a refresh that hangs or fails leaves behind once the expiry passes.
        expired = Credentials("AK", "SK", "token", time.time() - 1)
        gateway._context.credentials = CredentialSource.static(expired)
        try:
            answer = await http.get("/readyz")
        finally:
            gateway._context.credentials = live
        assert answer.status_code == 503
        assert answer.json()["reasons"] == ["credentials not loaded or expired"]
        assert (await http.get("/readyz")).status_code == 200


async def test_readyz_is_not_ready_while_every_target_of_a_route_fails(
    emulator: Emulator,
) -> None:
    route = {
        "targets": [{"endpoint": "a"}],
        "ejection": {"consecutive_failures": 2},
        "retry": {"max_attempts": 1},
    }
    config = {**_config(emulator), "routes": {"solo": route}}
    async with (
        Sidecar(config, "127.0.0.1", 0) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10) as http,
    ):
        assert (await http.get("/readyz")).status_code == 200
        emulator.set_faults("a", reset_rate=1.0)
        for _ in range(2):
            assert (await http.post("/endpoints/solo/invocations", content=b"x")).status_code >= 500
        # Before: 200 whatever happened upstream (a lone target is never ejected).
        failing = await http.get("/readyz")
        assert failing.status_code == 503
        assert failing.json()["reasons"] == ["route 'solo' has no healthy target"]
        assert (await http.get("/ping")).status_code != 200
        emulator.restore("a")
        assert (await http.post("/endpoints/solo/invocations", content=b"x")).status_code == 200
        assert (await http.get("/readyz")).status_code == 200
