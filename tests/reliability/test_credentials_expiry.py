"""Credentials that expire during a run of calls.

Each set of keys the provider hands out lives 1.2 s, and the emulator
*revokes* a key the moment it expires (an expired STS token is refused by
AWS the same way). Eight callers keep calling throughout. Expected outcome:
the gateway refreshes in the background ahead of expiry, so no call is ever
signed with a revoked key and no call fails; the keys in use change several
times; nothing hangs or leaks.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway._aws.sigv4 import Credentials
from gateway._invoke.credentials import CredentialSource
from gateway.emulator import Emulator, EmulatorConfig
from tests.gateway.conftest import ACCESS_KEY, SECRET_KEY, TRANSPORTS, gateway_for
from tests.reliability.conftest import bounded, no_client_tasks, socket_fds, sockets_back_to

LIFETIME_S = 1.2
GENERATIONS = 12


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    keys = {f"AKIDGEN{n}": f"secret-generation-{n}" for n in range(GENERATIONS)}
    config = {
        "seed": 1,
        "auth": {"credentials": {ACCESS_KEY: SECRET_KEY, **keys}},
        "endpoints": {"echo": {}},
    }
    async with Emulator(EmulatorConfig.from_dict(config)) as emu:
        yield emu


def _accepted_keys(emulator: Emulator) -> dict[str, str]:
    # The emulator's live key table; the test revokes expired keys from it.
    service: Any = emulator._service
    keys: dict[str, str] = service._verifier._verifier._credentials
    return keys


class Provider:
    """Hands out a new generation of keys per fetch, each expiring LIFETIME_S later."""

    def __init__(self, fetch_delay_s: float) -> None:
        self.generation = -1
        self.delay = fetch_delay_s
        self.issued: list[tuple[str, float]] = []  # (access key, expiry)
        self.lock = threading.Lock()

    def __call__(self) -> Credentials:
        time.sleep(self.delay)  # a slow provider (runs in a worker thread)
        with self.lock:
            self.generation += 1
            n = self.generation % GENERATIONS
            expiry = time.time() + LIFETIME_S
            self.issued.append((f"AKIDGEN{n}", expiry))
            return Credentials(f"AKIDGEN{n}", f"secret-generation-{n}", f"token-{n}", expiry)


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_keys_expire_and_are_revoked_mid_run_without_failing_a_call(
    kind: str, emulator: Emulator
) -> None:
    sockets_before = socket_fds()
    accepted = _accepted_keys(emulator)
    del accepted[ACCESS_KEY]  # only the provider's keys count
    provider = Provider(fetch_delay_s=0.05)
    source = CredentialSource(provider, advisory_s=0.8, mandatory_s=0.2, retry_s=0.05)
    await source.start()
    stop = asyncio.Event()

    async def revoker() -> None:
        # Revoke every issued key once its expiry has passed.
        while not stop.is_set():
            now = time.time()
            with provider.lock:
                for access_key, expiry in provider.issued:
                    if expiry <= now:
                        accepted.pop(access_key, None)
            await asyncio.sleep(0.01)

    calls = 0
    used: set[str] = set()

    async def caller(gw: Any, number: int) -> None:
        nonlocal calls
        n = 0
        while not stop.is_set():
            n += 1
            body = b"c%d-%d" % (number, n)
            result = await bounded(gw.invoke("echo", body, timeout=5), 5)
            assert result.body == body
            used.add(source.current().access_key)
            calls += 1
            await asyncio.sleep(0.005)

    try:
        async with gateway_for(emulator.url, transport=kind) as gw:
            # Before the first call binds the signer: the gateway waits on it,
            # target plans sign with it.
            gw._context.credentials = gw._targets.credentials = source
            revoking = asyncio.create_task(revoker())
            callers = [asyncio.create_task(caller(gw, n)) for n in range(8)]
            await asyncio.sleep(3 * LIFETIME_S)
            stop.set()
            await asyncio.gather(*callers)  # any failed call fails the test here
            await revoking
            assert calls > 50
            assert source.refresh_failures == 0
            assert source.refreshes >= 3  # several expiries passed during the run
            assert len(used) >= 3
            # Revocation was real: the first generation's key is refused by now.
            assert "AKIDGEN0" not in accepted
            await no_client_tasks()
    finally:
        await source.aclose()
    await sockets_back_to(sockets_before)
